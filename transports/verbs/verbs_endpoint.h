// Endpoint: one RC queue pair to one peer rank and channel.
#pragma once

#include "verbs_nic.h"
#include "verbs_wire.h"

#include <chorus/transport.h>
#include <chorus/provider/endpoint_base.hpp>

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::verbs {

class Context;
struct MemoryRegion;

/// Work requests in flight on one queue of a QP, oldest first. A fixed ring:
/// the data path never allocates.
struct WorkRequest {
  std::uint64_t seq = 0;      // the hardware wr_id (plus the direction bit)
  std::uint64_t wr_id = 0;    // the caller's
  std::uint64_t length = 0;   // send: message bytes; receive: buffer bytes
  ibv_mr* auto_mr = nullptr;  // registered by the post itself (mr == NULL)
  bool probe = false;         // a keepalive probe, invisible to the caller
};

class WorkRing {
 public:
  explicit WorkRing(std::size_t capacity) : items_(capacity) {}
  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  bool full() const { return count_ == items_.size(); }
  WorkRequest& front() { return items_[head_]; }
  void push(const WorkRequest& w) {
    items_[(head_ + count_) % items_.size()] = w;
    ++count_;
  }
  WorkRequest pop() {
    WorkRequest w = items_[head_];
    head_ = (head_ + 1) % items_.size();
    --count_;
    return w;
  }

 private:
  std::vector<WorkRequest> items_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

/// Life cycle: Open (QP in INIT, blob handed out) → Connected (QP in RTS with
/// the peer's blob, the peer known to be ready) → Failed (the QP is in the
/// error state: a peer vanished, a work request failed). An endpoint whose
/// device-matrix entry is empty has no QP at all ("no link").
///
/// Connection: the QP goes to RTR/RTS with the peer's blob as soon as this
/// side has it — from endpoint_connect, or from the peer's handshake hello
/// (which carries the peer's blob), whichever comes first. The peer is known
/// to be ready when its hello or its accept arrives; only then does connect
/// return, so the first send never meets a QP that is not yet RTR.
///
/// Liveness: RC retries find a dead peer for sends; an endpoint that only
/// has receives posted probes its peer with a zero-byte RDMA write after
/// keepalive_ms of silence, so those receives fail (flushed) instead of
/// waiting for ever.
///
/// Threading: the context's caller thread only.
class Endpoint : public provider::EndpointBase<Context> {
 public:
  enum class State { Open, Connected, Failed };

  /// `nic` (and `cq`, its completion queue for this endpoint) NULL for "no
  /// link". Throws Error.
  Endpoint(Context& ctx, Nic* nic, ibv_cq* cq, int peer_rank, int channel, std::uint32_t depth,
           std::uint64_t nonce);
  ~Endpoint();

  Nic* nic() const { return nic_; }
  ibv_cq* cq() const { return cq_; }
  bool no_link() const { return nic_ == nullptr; }
  State state() const { return state_; }
  std::uint64_t nonce() const { return nonce_; }
  std::uint32_t qp_num() const { return qp_ ? qp_->qp_num : 0; }
  const Blob& local_blob() const { return local_; }
  const std::optional<Blob>& peer_blob() const { return peer_; }
  bool peer_ready() const { return peer_ready_; }
  /// Returns true when this ends a polled connect's wait for the peer.
  bool set_peer_ready() {
    const bool news = polled_.started && !peer_ready_;
    peer_ready_ = true;
    return news;
  }
  /// "rxe0 port 1, peer rank 2" (", channel c" when c > 0).
  std::string where() const;
  /// Why the endpoint failed ("" while it has not).
  const std::string& failure() const { return failure_; }

  /// Moves the QP through RTR to RTS toward `peer`. Throws Error.
  void adopt(const Blob& peer);

  /// Polled connects (CHORUS_TP_CAP_CONNECT_POLL, docs/verbs.md "Polled
  /// connects"). `connect_called`: this side called endpoint_connect, so a
  /// peer's polled hello raises no connect request here.
  bool connect_called() const { return connect_called_; }
  void set_connect_called() { connect_called_ = true; }
  /// True exactly once: the first time a peer's polled hello finds this
  /// endpoint before its own connect (the request to raise).
  bool take_connect_request() {
    if (connect_called_ || request_raised_) return false;
    request_raised_ = true;
    return true;
  }
  /// A polled connect that has not heard from its peer yet: its hellos are
  /// repeated from the context's progress, and it gives up (TIMEOUT) after
  /// transport.verbs.connect_poll_timeout_ms without an answer.
  struct PolledConnect {
    bool started = false;
    std::chrono::steady_clock::time_point since{}, next_hello{};
    int interval_ms = 20;
    int hellos = 0;
  };
  PolledConnect& polled() { return polled_; }
  /// Moves the QP to the error state and marks the endpoint failed with
  /// `status` (its later calls report that status and `why`).
  void abandon(int status, const std::string& why);
  /// The status a failed endpoint reports (PEER_LOST unless abandon said otherwise).
  int failure_status() const { return failure_status_; }
  /// A no-link endpoint whose peer agrees that there is no link.
  void connect_no_link() { state_ = State::Connected; }

  int post_send(const void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id) {
    return send(buf, length, mr, wr_id, IBV_WR_SEND, 0);
  }
  /// IBV_WR_SEND_WITH_IMM: the receiver's completion reports `imm`.
  int post_send_imm(const void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id,
                    std::uint32_t imm) {
    return send(buf, length, mr, wr_id, IBV_WR_SEND_WITH_IMM, imm);
  }
  int post_recv(void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id);

  /// One completion of this QP (success or failure), from Context::progress.
  void on_completion(const ibv_wc& wc);
  /// The caller reaped a completion (poll or read_error).
  void on_reaped(std::uint32_t opcode);

  /// Keepalive: posts a probe when one is due. Returns the milliseconds
  /// until the next one is due, or -1 when none is pending.
  int maintain(std::chrono::steady_clock::time_point now);

  /// Moves the QP to the error state and destroys it, releasing every
  /// registration the posts made. Outstanding posts vanish.
  void destroy_qp();

 private:
  int post_failed(const std::string& op);
  /// Resolves the lkey for [buf, buf+length): from `mr`, or by registering
  /// the range now (stored in `w.auto_mr`). Returns a status.
  int send(const void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id,
           ibv_wr_opcode opcode, std::uint32_t imm);
  int lkey_for(const void* buf, std::size_t length, MemoryRegion* mr, bool writable, WorkRequest& w,
               std::uint32_t& lkey);
  void fail(const std::string& why);
  std::string completion_message(const ibv_wc& wc, const WorkRequest& w, bool recv) const;

  Nic* nic_;
  ibv_cq* cq_;
  std::uint32_t depth_;
  std::uint64_t nonce_;
  std::uint32_t psn_ = 0;
  VerbsPtr<ibv_qp> qp_;
  std::uint32_t max_inline_ = 0;
  Blob local_;
  std::optional<Blob> peer_;
  bool peer_ready_ = false;
  bool connect_called_ = false;
  bool request_raised_ = false;
  PolledConnect polled_;
  State state_ = State::Open;
  std::string failure_;
  int failure_status_ = CHORUS_ERR_PEER_LOST;

  WorkRing sends_;
  WorkRing recvs_;
  std::uint64_t next_send_seq_ = 0;
  std::uint64_t next_recv_seq_ = 0;
  // Posted and not yet reaped by the caller (the ABI's "outstanding").
  std::uint32_t sends_outstanding_ = 0;
  std::uint32_t recvs_outstanding_ = 0;
  bool probe_in_flight_ = false;
  std::chrono::steady_clock::time_point last_alive_{};
};

}  // namespace chorus::verbs

/// The ABI's opaque endpoint handle is the Endpoint itself.
struct chorus_tp_endpoint final : chorus::verbs::Endpoint {
  using Endpoint::Endpoint;
};
