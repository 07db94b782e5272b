// The receive half of Endpoint (tcp_endpoint.h): message headers through
// socket 0's staging buffer, payloads straight into the posted receive (or
// the context's discard sink), stripes from the other sockets, and the
// staging buffer lent by the context for one pass.
#include "tcp_endpoint.h"

#include "tcp_context.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

namespace chorus::tcp {

namespace {

using wire::kFrameHeaderSize;

}  // namespace

template <class Counter>
bool Endpoint::read_into(Socket& s, void* dst, std::uint64_t want, Counter& counter) {
  want = std::min(want, kMaxIo);
  const ssize_t n = ::read(s.fd, dst, want);
  if (n > 0) {
    counter += static_cast<Counter>(n);
    // A short read means the socket is drained (epoll(7)), unless a FIN is
    // queued behind the data: then read on until we see it.
    if (static_cast<std::uint64_t>(n) < want && !s.peer_closed) s.readable = false;
    return true;
  }
  if (n == 0) {
    on_eof(s);
    return false;
  }
  if (errno == EINTR) return true;
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    s.readable = false;
    return false;
  }
  lose(errno, "receiving");
  return false;
}

void Endpoint::progress_rx() {
  if (!spill_.empty()) {
    stage_ = ctx_.take_stage(kStageSize);
    std::memcpy(stage_.data(), spill_.data(), spill_.size());
    stage_begin_ = 0;
    stage_end_ = spill_.size();
    spill_.clear();
  }
  receive();
  if (stage_.empty() || staged() > kSpillMax) return;
  spill_.assign(stage_.begin() + static_cast<std::ptrdiff_t>(stage_begin_),
                stage_.begin() + static_cast<std::ptrdiff_t>(stage_end_));
  ctx_.return_stage(std::move(stage_));
  stage_ = {};
  stage_begin_ = stage_end_ = 0;
}

void Endpoint::receive() {
  for (;;) {
    switch (rx_) {
      case Rx::kClosed:
        return;

      case Rx::kHeader: {
        while (staged() < kFrameHeaderSize) {
          if (!fill_stage()) return;
        }
        wire::FrameBytes bytes;
        std::memcpy(bytes.data(), stage_.data() + stage_begin_, kFrameHeaderSize);
        stage_begin_ += kFrameHeaderSize;
        wire::FrameHeader h;
        if (!wire::decode(bytes, h) || h.kind != wire::FrameKind::kMessage || h.index != 0) {
          protocol_error("bad message header");
          return;
        }
        if (h.seq != rx_seq_) {
          protocol_error("message " + std::to_string(h.seq) + " arrived where " +
                         std::to_string(rx_seq_) + " was due");
          return;
        }
        if (wire::check_message_header(h, rx_seq_, nsockets_) != nullptr) {
          protocol_error("message header with length " + std::to_string(h.length) + " and " +
                         std::to_string(h.stripes) + " stripes is out of bounds");
          return;
        }
        rx_len_ = h.length;
        rx_imm_ = h.imm;
        rx_stripes_ = h.stripes;
        rx_ = Rx::kAwaitRecv;
        [[fallthrough]];
      }

      case Rx::kAwaitRecv: {
        // Backpressure: the payload stays in the socket until a receive is
        // posted, and then goes straight into the receive buffer.
        if (recvs_.empty()) return;
        const RecvWr& r = recvs_.front();
        rx_discard_ = r.length < rx_len_ || (r.fault != 0 && rx_len_ > 0);
        rx_dest_ = r.buf;
        if (rx_discard_) {
          // The caller's error, not the peer's: the stream stays usable.
          const std::string msg =
              r.length < rx_len_
                  ? "message of " + std::to_string(rx_len_) + " bytes arrived for a receive of " +
                        std::to_string(r.length) + " bytes from " + who() +
                        "; the message was discarded"
                  : provider::ReceiveBufferCheck::describe(r.buf, r.length, r.fault) +
                        ": the message of " + std::to_string(rx_len_) + " bytes from " + who() +
                        " was discarded";
          ctx_.cq().push_error(handle(), CHORUS_TP_RECV, r.wr_id, CHORUS_ERR_INVALID_ARGUMENT,
                               peer_rank_, msg);
          recvs_.pop();
        }
        for (unsigned i = 0; i < rx_stripes_; ++i) {
          Socket& s = sockets_[i];
          const wire::Part part = wire::stripe_part(rx_len_, rx_stripes_, i);
          s.rx_active = true;
          s.rx_begin = part.begin;
          s.rx_size = part.size;
          s.rx_off = 0;
          s.rx_hdr_off = i == 0 ? static_cast<std::uint32_t>(kFrameHeaderSize) : 0;
        }
        rx_parts_left_ = rx_stripes_;
        rx_ = Rx::kPayload;
        [[fallthrough]];
      }

      case Rx::kPayload: {
        if (sockets_[0].rx_active) read_lead_part(sockets_[0]);
        for (unsigned i = 1; i < rx_stripes_ && rx_ != Rx::kClosed; ++i) {
          if (sockets_[i].rx_active) read_part(sockets_[i]);
        }
        if (rx_ == Rx::kClosed) return;
        if (rx_parts_left_ > 0) return;
        if (!rx_discard_) {
          const RecvWr& r = recvs_.front();
          ctx_.cq().push(handle(), CHORUS_TP_RECV, r.wr_id, rx_len_, rx_imm_);
          recvs_.pop();
        }
        ++rx_seq_;
        rx_ = Rx::kHeader;
        break;
      }
    }
  }
}

bool Endpoint::fill_stage() {
  Socket& s = sockets_[0];
  if (!s.readable) return false;
  if (stage_.empty()) stage_ = ctx_.take_stage(kStageSize);
  if (stage_begin_ == stage_end_) {
    stage_begin_ = stage_end_ = 0;
  } else if (stage_end_ == stage_.size()) {
    std::memmove(stage_.data(), stage_.data() + stage_begin_, staged());
    stage_end_ -= stage_begin_;
    stage_begin_ = 0;
  }
  if (stage_end_ == stage_.size()) return false;  // full: callers consume before refilling
  return read_into(s, stage_.data() + stage_end_, stage_.size() - stage_end_, stage_end_);
}

void Endpoint::read_lead_part(Socket& s) {
  // Part 0 follows the message header on socket 0: staged bytes first, then
  // large remainders directly, small ones through the stage.
  for (;;) {
    const std::uint64_t left = s.rx_size - s.rx_off;
    if (left == 0) {
      s.rx_active = false;
      --rx_parts_left_;
      return;
    }
    if (staged() > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(staged(), left));
      if (!rx_discard_)
        std::memcpy(rx_dest_ + s.rx_begin + s.rx_off, stage_.data() + stage_begin_, n);
      stage_begin_ += n;
      s.rx_off += n;
      continue;
    }
    if (left < kDirectMin) {
      if (!fill_stage()) return;
      continue;
    }
    if (!s.readable) return;
    std::uint64_t want = left;
    std::byte* dst;
    if (rx_discard_) {
      const std::span<std::byte> sink = ctx_.discard_buffer();
      dst = sink.data();
      want = std::min<std::uint64_t>(want, sink.size());
    } else {
      dst = rx_dest_ + s.rx_begin + s.rx_off;
    }
    if (!read_into(s, dst, want, s.rx_off)) return;
  }
}

void Endpoint::read_part(Socket& s) {
  for (;;) {
    if (s.rx_hdr_off == kFrameHeaderSize && s.rx_off == s.rx_size) {
      s.rx_active = false;
      --rx_parts_left_;
      return;
    }
    if (!s.readable) return;
    if (s.rx_hdr_off < kFrameHeaderSize) {
      if (!read_into(s, s.rx_hdr.data() + s.rx_hdr_off, kFrameHeaderSize - s.rx_hdr_off,
                     s.rx_hdr_off)) {
        return;
      }
      if (s.rx_hdr_off < kFrameHeaderSize) continue;
      wire::FrameHeader h;
      if (!wire::decode(s.rx_hdr, h) ||
          !wire::stripe_header_matches(h, s.index, rx_seq_, rx_stripes_, rx_imm_, s.rx_size)) {
        protocol_error("bad stripe header on socket " + std::to_string(s.index));
        return;
      }
      continue;
    }
    std::uint64_t want = s.rx_size - s.rx_off;
    std::byte* dst;
    if (rx_discard_) {
      const std::span<std::byte> sink = ctx_.discard_buffer();
      dst = sink.data();
      want = std::min<std::uint64_t>(want, sink.size());
    } else {
      dst = rx_dest_ + s.rx_begin + s.rx_off;
    }
    if (!read_into(s, dst, want, s.rx_off)) return;
  }
}

}  // namespace chorus::tcp
