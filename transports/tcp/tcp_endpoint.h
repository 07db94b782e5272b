// Endpoint: one reliable, ordered channel to one peer, over 1..16 TCP
// connections, with verbs-RC-like send/receive queues. Implemented in
// tcp_endpoint.cc (setup, posting, failure), tcp_endpoint_send.cc and
// tcp_endpoint_receive.cc.
#pragma once

#include "tcp_wire.h"

#include <chorus/transport.h>
#include <chorus/provider/endpoint_base.hpp>
#include <chorus/provider/wr_ring.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus::tcp {

class Context;
class Endpoint;

/// One TCP connection of an endpoint: its epoll readiness and its share of
/// the endpoint's send and receive progress. Sockets live in a vector that is
/// sized once, so epoll keeps a pointer to them.
struct Socket {
  Endpoint* owner = nullptr;
  int fd = -1;
  unsigned index = 0;
  // Edge-triggered readiness: set by epoll events, cleared when the kernel
  // says EAGAIN (or a short read/write shows the buffer is drained/full).
  bool readable = false;
  bool writable = false;
  bool peer_closed = false;  // EPOLLRDHUP/HUP/ERR seen
  int error = 0;             // SO_ERROR captured on EPOLLERR

  // Send cursor: the send WR (absolute index) whose frame this socket writes
  // next, and how many bytes of that frame (header first) are already out.
  std::uint64_t tx_wr = 0;
  std::uint64_t tx_off = 0;
  wire::FrameBytes tx_hdr{};  // stripe header (sockets > 0)

  // Receive: this socket's part of the message being received (stripe
  // header, for sockets > 0, then payload).
  bool rx_active = false;
  std::uint32_t rx_hdr_off = 0;
  wire::FrameBytes rx_hdr{};
  std::uint64_t rx_begin = 0;
  std::uint64_t rx_size = 0;
  std::uint64_t rx_off = 0;
};

/// Progress happens only inside the context's poll/wait and inside
/// post_send/post_recv (which try to move data at once). No method blocks
/// except connect(). Called by the context's single caller thread only.
///
/// Failure model: the peer's FIN (EPOLLRDHUP) closes the send side at once
/// (nothing more will be read there) while complete messages still buffered
/// here are delivered; EOF, a socket error or a protocol violation closes
/// both sides. Closing a side turns every outstanding post of that side into
/// an error completion and makes later posts return PEER_LOST.
class Endpoint : public provider::EndpointBase<Context> {
 public:
  Endpoint(Context& ctx, int peer_rank, int channel, std::uint64_t nonce);
  ~Endpoint();

  std::uint64_t nonce() const { return nonce_; }

  /// timeout_ms != 0: blocks until every socket is connected or the timeout
  /// passes, then CHORUS_OK. timeout_ms == 0: a polled connect
  /// (CHORUS_TP_CAP_CONNECT_POLL, tcp_endpoint_connect.cc): never blocks,
  /// CHORUS_OK once connected, CHORUS_ERR_AGAIN while connecting. Throws
  /// Error for everything else.
  int connect(const void* peer_blob, std::size_t length, int timeout_ms);
  /// endpoint_connect was called (so no connect request is due), or it is connected.
  bool connect_started() const { return connected_ || dial_ != nullptr || claimed_; }

  /// A plain send carries immediate 0 in its frame header; post_send_imm
  /// carries `imm` (transport ABI minor 5).
  int post_send(const void* buf, std::size_t length, std::uint64_t wr_id) {
    return enqueue_send(buf, length, wr_id, 0);
  }
  int post_send_imm(const void* buf, std::size_t length, chorus_tp_mr_t* /*mr*/,
                    std::uint64_t wr_id, std::uint32_t imm) {
    return enqueue_send(buf, length, wr_id, imm);
  }
  /// A buffer that is not writable memory of this process is accepted (OK)
  /// and fails when its message arrives: the message is discarded and the
  /// receive completes with INVALID_ARGUMENT naming the buffer.
  int post_recv(void* buf, std::size_t length, std::uint64_t wr_id);

  /// Records epoll readiness of one of this endpoint's sockets.
  void on_event(Socket& s, std::uint32_t events);
  /// Moves as much data as the sockets allow without blocking.
  void progress();
  /// A completion of this endpoint left the completion queue: frees its slot.
  void on_reaped(std::uint32_t opcode);

  /// Set while queued in the context's per-batch progress list.
  bool queued_for_progress = false;

 private:
  struct SendWr {
    const std::byte* buf = nullptr;
    std::uint64_t length = 0;
    std::uint64_t wr_id = 0;
    std::uint32_t parts_left = 0;  // socket frames not yet fully written
    std::uint8_t stripes = 1;
    wire::FrameBytes hdr{};  // the message header, sent on socket 0
  };
  struct RecvWr {
    std::byte* buf = nullptr;
    std::uint64_t length = 0;
    std::uint64_t wr_id = 0;
    int fault = 0;  // the errno that says `buf` is not writable memory
  };
  enum class Rx { kHeader, kAwaitRecv, kPayload, kClosed };

  /// Largest single read/write; keeps every count well inside ssize_t and
  /// below Linux's MAX_RW_COUNT.
  static constexpr std::uint64_t kMaxIo = std::uint64_t{1} << 30;

  /// The background half of a polled connect: the higher rank's dial of
  /// every socket, or the lower rank's call-me (tcp_wire.h). The thread
  /// owns nothing the caller reads before `done` (under `mu`).
  struct Dial {
    std::thread thread;
    std::atomic<bool> cancel{false};
    std::mutex mu;
    bool done = false;
    int status = CHORUS_OK;
    std::string error;
    std::vector<int> fds;  // the dialed sockets (higher rank)
  };

  wire::Blob check_blob(const void* peer_blob, std::size_t length) const;
  int connect_polled(const wire::Blob& b);
  /// Starts the background thread: every socket (call_me false) or one
  /// call-me Hello (true).
  void start_dial(const wire::Blob& b, bool call_me);
  /// Abandons and joins the background dial; closes sockets it made.
  void stop_dial();
  /// A lower rank's call-me that the peer's own dial made unneeded: left to
  /// finish by itself (its thread only completes one handshake with the
  /// peer's acceptor thread) and joined when the endpoint closes. Cancelling
  /// it mid-handshake would make the peer's acceptor log a dropped
  /// connection that "sent no proof of the job key".
  void retire_dial();
  int enqueue_send(const void* buf, std::size_t length, std::uint64_t wr_id, std::uint32_t imm);
  void attach(std::vector<int>& fds);
  /// attach(), or on failure closes `fds` and the endpoint's sockets, and
  /// rethrows.
  void attach_or_close(std::vector<int>& fds);
  void progress_tx();
  void write_socket(Socket& s);
  void consume_written(Socket& s, std::uint64_t n);
  void skip_foreign(Socket& s);
  void retire_sends();
  void progress_rx();
  void receive();
  void read_part(Socket& s);
  void read_lead_part(Socket& s);
  bool fill_stage();
  std::size_t staged() const { return stage_end_ - stage_begin_; }
  template <class Counter>
  bool read_into(Socket& s, void* dst, std::uint64_t want, Counter& counter);
  void on_eof(Socket& s);
  void lose(int err, const char* while_doing);
  void protocol_error(const std::string& what);
  void shut_down(int status, const std::string& message);
  void close_tx(int status, const std::string& message);
  void close_rx(int status, const std::string& message);
  void release_sockets();
  std::string who() const;

  const std::uint64_t nonce_;
  const int nsockets_;
  std::vector<Socket> sockets_;
  bool connected_ = false;
  bool claimed_ = false;  // a polled connect of the lower rank has asked the acceptor
  std::unique_ptr<Dial> dial_;
  std::unique_ptr<Dial> retired_dial_;  // retire_dial()

  // Send queue: the sends posted and not yet completed. Sockets address
  // them by absolute index (Socket::tx_wr).
  provider::WrRing<SendWr> sends_;
  std::uint32_t sends_outstanding_ = 0;  // posted and not yet reaped by poll
  std::uint32_t tx_seq_ = 0;
  bool tx_closed_ = false;
  int tx_status_ = CHORUS_OK;
  std::string tx_error_;

  // Receive queue: the receives posted and not yet completed.
  provider::WrRing<RecvWr> recvs_;
  std::uint32_t recvs_outstanding_ = 0;
  Rx rx_ = Rx::kHeader;
  std::uint32_t rx_seq_ = 0;
  std::uint64_t rx_len_ = 0;
  std::uint32_t rx_imm_ = 0;
  unsigned rx_stripes_ = 1;
  unsigned rx_parts_left_ = 0;
  bool rx_discard_ = false;  // the message is too long for the receive: drop it
  std::byte* rx_dest_ = nullptr;
  int rx_status_ = CHORUS_OK;
  std::string rx_error_;

  // Socket 0 reads through a small staging buffer, so one read() picks up a
  // header together with a small payload (often several whole frames).
  // Payload bytes that are not already staged, when at least kDirectMin of
  // them remain, are read straight into the receive buffer. Staging never
  // holds more than kStageSize bytes, so an unmatched message still leaves
  // the rest of the stream in the kernel and backpressure reaches the sender.
  //
  // The buffer is lent by the context (take_stage) for the length of one
  // progress_rx. If that leaves at most kSpillMax bytes staged (typically a
  // header that came with a small message whose receive is not posted yet),
  // they move to spill_ and the buffer goes back; the next progress_rx
  // stages them again first. A rank connected to every peer of a large job
  // thus holds a few staging buffers instead of one per endpoint, and an
  // endpoint's own share is what it left over (docs/scale.md).
  static constexpr std::size_t kStageSize = 16 * 1024;
  static constexpr std::uint64_t kDirectMin = 4 * 1024;
  static constexpr std::size_t kSpillMax = 1024;
  std::vector<std::byte> stage_;  // empty while not lent
  std::vector<std::byte> spill_;  // staged bytes while stage_ is empty
  std::size_t stage_begin_ = 0;
  std::size_t stage_end_ = 0;
};

}  // namespace chorus::tcp

/// The ABI's opaque endpoint handle is the Endpoint itself.
struct chorus_tp_endpoint final : chorus::tcp::Endpoint {
  using Endpoint::Endpoint;
};
