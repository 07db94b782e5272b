// The send half of Endpoint (tcp_endpoint.h): gathers queued frames into
// sendmsg calls per socket (several small frames per call on socket 0, one
// stripe per call on the others) and completes a send once every socket has
// written its part.
#include "tcp_endpoint.h"

#include "tcp_context.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

namespace chorus::tcp {

namespace {

using wire::kFrameHeaderSize;

/// Frames gathered into one sendmsg on socket 0 (two iovecs per frame).
constexpr int kMaxIov = 64;

}  // namespace

void Endpoint::progress_tx() {
  for (Socket& s : sockets_) {
    if (tx_closed_) return;
    if (s.writable) write_socket(s);
  }
  retire_sends();
}

void Endpoint::skip_foreign(Socket& s) {
  // Sockets > 0 carry only striped messages; step over the others.
  while (s.tx_wr < sends_.tail() && s.index >= sends_.at(s.tx_wr).stripes) ++s.tx_wr;
}

void Endpoint::write_socket(Socket& s) {
  iovec iov[kMaxIov];
  for (;;) {
    skip_foreign(s);
    if (s.tx_wr == sends_.tail()) return;
    int n_iov = 0;
    std::uint64_t total = 0;
    std::uint64_t off = s.tx_off;
    for (std::uint64_t w = s.tx_wr; w < sends_.tail() && n_iov + 2 <= kMaxIov && total < kMaxIo;
         ++w) {
      SendWr& wr = sends_.at(w);
      if (s.index >= wr.stripes) continue;
      const wire::Part part = wire::stripe_part(wr.length, wr.stripes, s.index);
      const std::byte* hdr = wr.hdr.data();
      if (s.index != 0) {
        if (off == 0) {
          wire::FrameHeader h;
          h.kind = wire::FrameKind::kStripe;
          h.stripes = wr.stripes;
          h.index = static_cast<std::uint16_t>(s.index);
          h.seq = provider::little_endian::load<std::uint32_t>(wr.hdr.data() + 8);
          h.imm = provider::little_endian::load<std::uint32_t>(wr.hdr.data() + 12);
          h.length = part.size;
          wire::encode(h, s.tx_hdr);
        }
        hdr = s.tx_hdr.data();
      }
      if (off < kFrameHeaderSize) {
        iov[n_iov++] = {const_cast<std::byte*>(hdr + off), kFrameHeaderSize - off};
        total += kFrameHeaderSize - off;
      }
      const std::uint64_t done = off > kFrameHeaderSize ? off - kFrameHeaderSize : 0;
      if (part.size > done) {
        const std::uint64_t chunk = std::min(part.size - done, kMaxIo);
        iov[n_iov++] = {const_cast<std::byte*>(wr.buf + part.begin + done), chunk};
        total += chunk;
      }
      off = 0;
      if (s.index != 0) break;  // the stripe header lives in the socket: one frame at a time
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n_iov);
    const ssize_t n = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s.writable = false;
        return;
      }
      lose(errno, "sending");
      return;
    }
    consume_written(s, static_cast<std::uint64_t>(n));
    if (static_cast<std::uint64_t>(n) < total) {
      // Short write: the socket buffer is full; EPOLLOUT will say when not.
      s.writable = false;
      return;
    }
  }
}

void Endpoint::consume_written(Socket& s, std::uint64_t n) {
  while (n > 0) {
    SendWr& wr = sends_.at(s.tx_wr);
    const std::uint64_t frame =
        kFrameHeaderSize + wire::stripe_part(wr.length, wr.stripes, s.index).size;
    const std::uint64_t rest = frame - s.tx_off;
    if (n < rest) {
      s.tx_off += n;
      return;
    }
    n -= rest;
    s.tx_off = 0;
    --wr.parts_left;
    ++s.tx_wr;
    skip_foreign(s);
  }
}

void Endpoint::retire_sends() {
  while (!sends_.empty()) {
    const SendWr& wr = sends_.front();
    if (wr.parts_left != 0) return;
    ctx_.cq().push(handle(), CHORUS_TP_SEND, wr.wr_id, wr.length);
    sends_.pop();
  }
}

}  // namespace chorus::tcp
