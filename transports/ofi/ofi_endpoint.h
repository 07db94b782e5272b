// Endpoint: one reliable, ordered channel to one peer, multiplexed with the
// context's other endpoints over the context's one libfabric RDM endpoint.
// Data path in ofi_endpoint.cc; connection, control messages and closing in
// ofi_endpoint_control.cc.
#pragma once

#include "ofi.h"
#include "ofi_doorbell.h"
#include "ofi_wire.h"

#include <chorus/transport.h>
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <chorus/provider/endpoint_base.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace chorus::ofi {

class Context;
class Endpoint;
class MemoryRegion;

enum class OpKind : std::uint8_t { kSend, kRecv, kControlSend, kControlRecv };

/// The op_context of every operation handed to the provider. `fi` comes
/// first (FI_CONTEXT/FI_CONTEXT2 modes lend it to the provider), so a
/// completion's op_context converts back to the header.
struct OpHeader {
  fi_context2 fi;
  Endpoint* ep;
  OpKind kind;
  std::uint32_t slot;
};

/// Ordering: messages are tagged sends (ofi_wire.h) carrying the receiving
/// endpoint's key, between the two contexts' fi endpoints under FI_ORDER_SAS;
/// so per Chorus endpoint they are matched in send order against receives
/// that the provider matches in post order. Provider completions may
/// come out of order (comp_order is 0 for tcp;ofi_rxm and shm); each direction
/// is therefore a ring retired strictly from its head.
///
/// Progress happens only inside the context's progress() (poll, wait,
/// connect) and inside the posts. Called by the context's single caller
/// thread only.
///
/// Failure model (docs/ofi.md, "Peer loss"): a bye from the peer fails the
/// sends at once and the receives beyond the bye's message count; the
/// peer's death (noticed by the context) fails the sends at once and the
/// receives after a short grace, in which messages already delivered still
/// land; a provider error or a short receive fails the whole endpoint.
class Endpoint : public provider::EndpointBase<Context> {
 public:
  Endpoint(Context& ctx, int peer_rank, int channel, std::uint32_t key);
  ~Endpoint();

  std::uint32_t key() const { return key_; }

  bool closing() const { return closing_; }
  bool connected() const { return connected_; }
  /// Posts the control receives on the context's fi endpoint. Throws Error.
  void open();
  /// The context closed its fi endpoint: releases what was lent to the provider.
  void detach();
  /// timeout_ms != 0: blocks until the peer answered or the timeout passed,
  /// then returns CHORUS_OK. timeout_ms == 0 (a polled connect, P10): does
  /// not wait for the peer; only its first call waits, bounded, for the
  /// peer-watch dial and for its opening message to leave (docs/ofi.md,
  /// "Polled connects"). Returns CHORUS_OK once connected, CHORUS_ERR_AGAIN
  /// while the hello/ack exchange is under way. Throws Error.
  int connect(const void* peer_blob, std::size_t length, int timeout_ms);

  int post_send(const void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id);
  int post_recv(void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id);

  /// A provider completion (or error) for one of this endpoint's operations.
  void on_completion(const OpHeader& op, const fi_cq_data_entry& entry);
  void on_error(const OpHeader& op, const fi_cq_err_entry& err, const std::string& provider_text);
  /// Hands queued posts (the provider said -FI_EAGAIN earlier) to the provider.
  void push_backlog();
  bool has_backlog() const;
  /// Fails what a passed deadline dooms, and repeats a polled connect's
  /// unanswered hello or call-me when due; returns the next deadline, if any.
  Deadline::Clock::time_point check_deadline(Deadline::Clock::time_point now);

  /// The peer process is gone: sends fail now, receives after `grace`.
  void peer_dead(const std::string& why, std::chrono::milliseconds grace);
  /// Fails everything (an error not tied to one operation).
  void fail(int status, const std::string& why);

  /// endpoint_close: tells the peer (bye), cancels the receives and, with
  /// `drain`, waits (up to a second) until the provider has handed them back,
  /// so nothing lands in their buffers afterwards. Outstanding posts vanish.
  void shut_down(bool drain);
  /// No receive or control message is still with the provider.
  bool quiescent() const;

  /// The peer (the lower rank) asked this side to connect: a call-me over
  /// the fabric or over the peer watch listener.
  void on_call_me();

  /// A completion of this endpoint left the completion queue: frees its slot.
  void on_reaped(std::uint32_t opcode);

 private:
  struct Wr {
    enum class State : std::uint8_t { kFree, kQueued, kPosted, kDone, kFailed };
    OpHeader hdr{};
    std::byte* buf = nullptr;
    std::uint64_t length = 0;
    std::uint64_t wr_id = 0;
    void* desc = nullptr;
    fid_mr* temp_mr = nullptr;  // registered for this post only (FI_MR_LOCAL, mr == NULL)
    std::uint64_t byte_len = 0;
    State state = State::kFree;
    bool with_provider = false;
    bool retired = false;
    int status = CHORUS_OK;
    std::string error;
  };
  /// [head, posted): handed to the provider (or failed); [posted, tail):
  /// queued behind a -FI_EAGAIN. Indices only grow; slot = index % size.
  struct Queue {
    std::vector<Wr> ring;
    std::uint64_t head = 0;
    std::uint64_t posted = 0;
    std::uint64_t tail = 0;
    std::uint32_t outstanding = 0;  // posted and not yet reaped by poll
    Wr& at(std::uint64_t index) { return ring[index & (ring.size() - 1)]; }
  };
  struct ControlSlot {
    enum class State : std::uint8_t { kFree, kQueued, kPosted };
    OpHeader hdr{};
    State state = State::kFree;
    std::uint64_t seq = 0;
    std::size_t length = 0;
    fi_addr_t to = FI_ADDR_UNSPEC;
    std::uint32_t to_key = 0;
    wire::ControlType type = wire::ControlType::kHello;
    std::array<std::byte, wire::kControlBufferSize> buf{};
  };
  struct ControlRecv {
    OpHeader hdr{};
    bool posted = false;
    std::array<std::byte, wire::kControlBufferSize> buf{};
  };

  static constexpr std::size_t kControlSlots = 4;
  static constexpr int kPostRetries = 4;

  int post(Queue& q, OpKind kind, std::byte* buf, std::size_t length, MemoryRegion* mr,
           std::uint64_t wr_id);
  void push(Queue& q, OpKind kind, int retries);
  long submit(Wr& w, OpKind kind);
  void retire(Queue& q, std::uint32_t opcode);
  void fail_queue(Queue& q, OpKind kind, std::uint64_t from, int status, const std::string& why);
  void release(Wr& w);
  void fail_tx(int status, const std::string& why);
  void fail_rx(std::uint64_t from, int status, const std::string& why);
  void fail_both(int status, const std::string& why);

  /// Checks the peer's blob and takes its address, key and doorbell. Throws Error.
  wire::Blob adopt(const void* peer_blob, std::size_t length, const Deadline& watch_deadline);
  int connect_polled(const void* peer_blob, std::size_t length);
  /// This side's half of the hello/ack exchange is done.
  bool handshake_done() const;
  /// Throws Error(PEER_LOST) when the peer can no longer answer.
  void check_reachable(const std::string& prefix) const;
  /// A polled connect's opening message: the hello (higher rank) or the
  /// call-me (lower rank), unless one is queued or no longer needed.
  void send_opener();
  /// Queues this endpoint's one CONNECT_REQUEST completion, unless
  /// endpoint_connect was called or the endpoint is closing.
  void raise_connect_request();

  void post_control_recv(ControlRecv& r);
  void send_control(wire::ControlType type, fi_addr_t to, std::uint32_t to_key, std::uint64_t count,
                    std::uint8_t flags = 0);
  void push_control();
  /// A control message of `type` waits behind -FI_EAGAIN.
  bool control_queued(wire::ControlType type) const;
  void on_control(const std::byte* data, std::size_t length);
  void peer_closed(std::uint64_t count);

  void ring();
  std::string who() const;
  std::string op_text(OpKind kind) const;

  const std::uint32_t key_;
  fid_ep* ep_ = nullptr;  // the context's, until it closes it

  // Connection state.
  bool connected_ = false;
  bool closing_ = false;
  std::uint32_t peer_key_ = 0;  // from the peer's blob
  std::vector<std::byte> peer_name_;
  Doorbell peer_bell_;
  bool ring_peer_ = false;        // the context uses doorbells and the peer's answers
  bool peer_in_process_ = false;  // guarded by local_endpoints (ofi_local_endpoints.h)
  fi_addr_t peer_addr_ = FI_ADDR_UNSPEC;
  std::uint32_t hello_key_ = 0;  // sender key of a hello received before or during connect
  fi_addr_t hello_addr_ = FI_ADDR_UNSPEC;
  bool acked_ = false;
  bool bye_seen_ = false;
  bool connect_called_ = false;   // endpoint_connect was entered (no connect request after)
  bool polled_ = false;           // a polled connect adopted the blob and sent its opener
  bool request_raised_ = false;   // the one CONNECT_REQUEST was queued
  std::uint32_t callme_key_ = 0;  // sender key of a call-me received before connect
  bool callme_oob_ = false;       // this side's call-me went over the peer watch listener
  Deadline::Clock::time_point next_opener_ = Deadline::Clock::time_point::max();
  std::string control_error_;       // a hello that could not be delivered
  std::uint64_t tx_submitted_ = 0;  // data sends handed to the provider (the bye's count)

  Queue tx_;
  Queue rx_;
  int tx_status_ = CHORUS_OK;
  std::string tx_error_;
  int rx_status_ = CHORUS_OK;
  std::string rx_error_;
  std::uint64_t rx_limit_ = UINT64_MAX;  // receives from this index on can never match (bye)
  Deadline::Clock::time_point doom_ = Deadline::Clock::time_point::max();
  int doom_status_ = CHORUS_OK;
  std::string doom_error_;

  std::array<ControlSlot, kControlSlots> control_tx_{};
  std::uint64_t control_seq_ = 0;
  std::array<ControlRecv, kControlSlots> control_rx_{};
  // With FI_MR_LOCAL the control buffers are registered too.
  fid_mr* control_tx_mr_ = nullptr;
  fid_mr* control_rx_mr_ = nullptr;
};

}  // namespace chorus::ofi

/// The ABI's opaque endpoint handle is the Endpoint itself.
struct chorus_tp_endpoint final : chorus::ofi::Endpoint {
  using Endpoint::Endpoint;
};
