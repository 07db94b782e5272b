// Endpoint (tcp_endpoint.h): attaching connected sockets, posting, epoll
// readiness and the failure model (connecting is in tcp_endpoint_connect.cc). The byte-moving
// halves live in tcp_endpoint_send.cc (frames out of the send queue) and tcp_endpoint_receive.cc
// (frames into posted receives).
#include "tcp_endpoint.h"

#include <chorus/transport_names.hpp>
#include "tcp.h"
#include "tcp_context.h"
#include "tcp_socket_options.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace chorus::tcp {

Endpoint::Endpoint(Context& ctx, int peer_rank, int channel, std::uint64_t nonce)
    : EndpointBase(ctx, peer_rank, channel),
      nonce_(nonce),
      nsockets_(ctx.config().sockets),
      sockets_(static_cast<std::size_t>(nsockets_)) {
  for (int i = 0; i < nsockets_; ++i) {
    sockets_[static_cast<std::size_t>(i)].owner = this;
    sockets_[static_cast<std::size_t>(i)].index = static_cast<unsigned>(i);
  }
}

Endpoint::~Endpoint() {
  stop_dial();
  dial_ = std::move(retired_dial_);
  stop_dial();
  release_sockets();
}

std::string Endpoint::who() const {
  return endpoint_name(peer_rank_, channel_, ctx_.data_channels());
}

// ---- connection setup -----------------------------------------------------

void Endpoint::attach(std::vector<int>& fds) {
  for (int fd : fds) prepare_data_socket(fd, ctx_.config());
  for (std::size_t i = 0; i < fds.size(); ++i) {
    Socket& s = sockets_[i];
    ctx_.watch(fds[i], &s);  // may throw: the caller closes what is left in fds
    s.fd = fds[i];
    fds[i] = -1;
    // Data may have arrived before the socket was watched; with edge
    // triggering we must look once.
    s.readable = true;
    s.writable = true;
  }
  connected_ = true;
  log(CHORUS_LOG_DEBUG, "connected to " + who() + " over " + std::to_string(nsockets_) +
                            (nsockets_ == 1 ? " socket" : " sockets"));
  progress();
}

void Endpoint::release_sockets() {
  for (Socket& s : sockets_) {
    if (s.fd < 0) continue;
    ctx_.unwatch(s.fd);
    ::close(s.fd);
    s.fd = -1;
    s.readable = false;
    s.writable = false;
  }
}

// ---- posting ---------------------------------------------------------------

int Endpoint::enqueue_send(const void* buf, std::size_t length, std::uint64_t wr_id,
                           std::uint32_t imm) {
  if (!connected_) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "post_send: the endpoint to " + who() + " is not connected");
  }
  if (tx_closed_) return set_last_error(tx_status_, tx_error_);
  if (buf == nullptr && length > 0) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "post_send: NULL buffer with length > 0");
  }
  if (length > wire::kMaxMessageSize) {
    return set_last_error(
        CHORUS_ERR_INVALID_ARGUMENT,
        "post_send: " + std::to_string(length) + " bytes exceeds max_message_size (2^40)");
  }
  if (sends_outstanding_ >= kMaxOutstanding) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_send: 1024 sends to " + who() +
                                                " are outstanding; poll completions and retry");
  }
  SendWr wr;
  wr.buf = static_cast<const std::byte*>(buf);
  wr.length = length;
  wr.wr_id = wr_id;
  wr.stripes = static_cast<std::uint8_t>(wire::stripes_for(length, nsockets_));
  wr.parts_left = wr.stripes;
  wire::FrameHeader h;
  h.kind = wire::FrameKind::kMessage;
  h.stripes = wr.stripes;
  h.index = 0;
  h.seq = tx_seq_++;
  h.imm = imm;
  h.length = length;
  wire::encode(h, wr.hdr);
  sends_.push(wr);
  ++sends_outstanding_;
  progress_tx();
  return CHORUS_OK;
}

int Endpoint::post_recv(void* buf, std::size_t length, std::uint64_t wr_id) {
  if (!connected_) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "post_recv: the endpoint to " + who() + " is not connected");
  }
  if (rx_ == Rx::kClosed) return set_last_error(rx_status_, rx_error_);
  if (buf == nullptr && length > 0) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "post_recv: NULL buffer with length > 0");
  }
  if (recvs_outstanding_ >= kMaxOutstanding) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_recv: 1024 receives from " + who() +
                                                " are outstanding; poll completions and retry");
  }
  // Checked now, so that neither the copy out of the staging buffer (memcpy)
  // nor read() meets a bad pointer; a reused buffer costs no system call.
  const int fault = ctx_.receive_buffer_check().check(buf, length);
  recvs_.push(RecvWr{static_cast<std::byte*>(buf), length, wr_id, fault});
  ++recvs_outstanding_;
  if (rx_ == Rx::kAwaitRecv || (rx_ == Rx::kHeader && sockets_[0].readable)) progress_rx();
  return CHORUS_OK;
}

void Endpoint::on_reaped(std::uint32_t opcode) {
  if (opcode == CHORUS_TP_OP_CONNECT_REQUEST) return;  // holds no slot
  if (opcode == CHORUS_TP_SEND) {
    --sends_outstanding_;
  } else {
    --recvs_outstanding_;
  }
}

// ---- progress --------------------------------------------------------------

void Endpoint::on_event(Socket& s, std::uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s.readable = true;
  if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) s.writable = true;
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s.peer_closed = true;
  if ((events & EPOLLERR) && s.error == 0 && s.fd >= 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0) s.error = err;
  }
}

void Endpoint::progress() {
  if (!connected_) return;
  if (!tx_closed_) {
    for (const Socket& s : sockets_) {
      if (s.peer_closed) {
        // The peer closed its socket: nothing we write will be read. Messages
        // it sent before closing are still delivered by the receive side.
        close_tx(CHORUS_ERR_PEER_LOST,
                 "connection to " + who() + " lost: " +
                     (s.error != 0 ? errno_text(s.error) : std::string("the peer closed it")));
        break;
      }
    }
  }
  if (!tx_closed_) progress_tx();
  if (rx_ != Rx::kClosed) progress_rx();
}

// ---- failure ---------------------------------------------------------------

void Endpoint::on_eof(Socket& s) {
  const bool at_boundary = rx_ == Rx::kHeader && staged() == 0 && s.index == 0;
  shut_down(CHORUS_ERR_PEER_LOST,
            "connection to " + who() + " lost: the peer closed it" +
                (at_boundary ? std::string() : std::string(" in the middle of a message")));
}

void Endpoint::lose(int err, const char* while_doing) {
  // Errors of this process, not of the peer or the network: a posted buffer
  // that is not valid memory here (EFAULT), or the kernel out of memory. They
  // are reported as local (CHORUS_ERR_SYSTEM) so nobody blames a healthy
  // peer; the connection still closes, since its byte stream may now be cut
  // in the middle of a message.
  if (err == EFAULT || err == ENOMEM || err == ENOBUFS) {
    shut_down(CHORUS_ERR_SYSTEM,
              std::string("local error while ") + while_doing + " (connection to " + who() +
                  "): " + errno_text(err) +
                  (err == EFAULT ? "; a posted buffer is not valid memory of this process (check "
                                   "the pointer and the count)"
                                 : std::string()));
    return;
  }
  shut_down(CHORUS_ERR_PEER_LOST,
            "connection to " + who() + " lost while " + while_doing + ": " + errno_text(err));
}

void Endpoint::protocol_error(const std::string& what) {
  shut_down(CHORUS_ERR_PEER_LOST,
            "protocol error on the connection to " + who() + ": " + what + "; connection dropped");
}

void Endpoint::shut_down(int status, const std::string& message) {
  // A peer that closes while nothing is in flight is a peer that finished
  // (its communicator was finalized first): worth a debug line, not a warning.
  const bool idle = sends_.empty() && recvs_.empty();
  log(idle ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN, message);
  if (!tx_closed_) close_tx(status, message);
  if (rx_ != Rx::kClosed) close_rx(status, message);
  release_sockets();
}

void Endpoint::close_tx(int status, const std::string& message) {
  tx_closed_ = true;
  tx_status_ = status;
  tx_error_ = message;
  // In post order: sends already fully written complete normally, the rest fail.
  for (; !sends_.empty(); sends_.pop()) {
    const SendWr& wr = sends_.front();
    if (wr.parts_left == 0) {
      ctx_.cq().push(handle(), CHORUS_TP_SEND, wr.wr_id, wr.length);
    } else {
      ctx_.cq().push_error(handle(), CHORUS_TP_SEND, wr.wr_id, status, peer_rank_, message);
    }
  }
  for (Socket& s : sockets_) {
    s.tx_wr = sends_.tail();
    s.tx_off = 0;
  }
}

void Endpoint::close_rx(int status, const std::string& message) {
  rx_ = Rx::kClosed;
  rx_status_ = status;
  rx_error_ = message;
  for (; !recvs_.empty(); recvs_.pop()) {
    const RecvWr& r = recvs_.front();
    ctx_.cq().push_error(handle(), CHORUS_TP_RECV, r.wr_id, status, peer_rank_, message);
  }
}

}  // namespace chorus::tcp
