// Endpoint: one connected channel to a peer rank on this host.
#pragma once

#include "shm_segment.h"

#include <chorus/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::shm {

class Context;
using Clock = std::chrono::steady_clock;

/// Copies `len` bytes from `addr` in process `pid` into `dst` with
/// process_vm_readv. Returns 0 or an errno.
int cma_read(int pid, void* dst, std::uint64_t addr, std::uint64_t len);

/// Fixed-capacity FIFO addressed by absolute indices (head_index() ..
/// tail_index()). Its slots are allocated by the first push, never after:
/// an endpoint that is opened and never used (most of the tagged engine's,
/// which connect on first use) costs no memory for them (2 x 1024 slots,
/// about 90 KiB an endpoint).
template <class T>
class WrQueue {
 public:
  explicit WrQueue(std::size_t capacity_pow2) : mask_(capacity_pow2 - 1) {}
  bool empty() const { return head_ == tail_; }
  std::uint64_t head_index() const { return head_; }
  std::uint64_t tail_index() const { return tail_; }
  T& front() { return slots_[head_ & mask_]; }
  T& at(std::uint64_t index) { return slots_[index & mask_]; }
  /// May throw std::bad_alloc on the first call only.
  void push(const T& v) {
    if (slots_.empty()) slots_.resize(mask_ + 1);
    slots_[tail_++ & mask_] = v;
  }
  void pop() { ++head_; }

 private:
  std::vector<T> slots_;
  std::uint64_t mask_;
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
};

/// An endpoint owns its segment (the ring the peer writes into) and maps the
/// peer's (the ring it writes into). All data moves on the calling thread,
/// inside the posts, poll and wait; the owning context serialises calls.
///
/// Messages smaller than `cma_threshold` (or all of them when cross-memory
/// attach is unusable) are copied into the ring in fragments of at most a
/// quarter of it and out again by the receiver. Larger ones are sent by
/// reference: a descriptor goes through the ring, the receiver copies the
/// payload straight from the sender's buffer with process_vm_readv and
/// acknowledges through `rndv_done`; only then does the send complete. Both
/// kinds share the one ring, so per-endpoint order holds by construction.
///
/// Outstanding posts at endpoint_close vanish: the context drops their
/// completions and the peer sees the close as a lost peer.
class Endpoint {
 public:
  static constexpr std::uint32_t kMaxOutstanding = 1024;

  /// Creates this endpoint's segment. Throws Error.
  Endpoint(Context& ctx, int peer, int channel);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  chorus_tp_endpoint_t* handle() { return reinterpret_cast<chorus_tp_endpoint_t*>(this); }
  static Endpoint* from(chorus_tp_endpoint_t* h) { return reinterpret_cast<Endpoint*>(h); }
  Context& context() const { return ctx_; }
  int peer() const { return peer_; }
  int channel() const { return channel_; }

  /// The address blob for the peer (sizeof(Blob) bytes).
  Blob blob() const;
  /// Maps the peer's segment named in its blob. Never waits for the peer:
  /// its segment exists from its endpoint_open on, so a polled connect
  /// (`timeout_ms` 0, CHORUS_TP_CAP_CONNECT_POLL) completes at once too,
  /// and returns at once when called again. A polled connect that comes
  /// first also raises a connect request on the peer's endpoint. Throws Error.
  void connect(const void* peer_blob, std::size_t length, int timeout_ms);
  /// Whether the peer's polled connect asks this endpoint to connect: true
  /// once, and only while connect() has not been called. Caller thread only.
  bool take_connect_request() noexcept;

  /// Never block. OK, AGAIN (queue full) or PEER_LOST (with last_error set).
  /// A plain send carries immediate 0; post_send_imm carries `imm` (transport
  /// ABI minor 5), which the frame headers take to the peer's completion.
  int post_send(const void* buf, std::size_t length, std::uint64_t wr_id) noexcept {
    return enqueue_send(buf, length, wr_id, 0);
  }
  int post_send_imm(const void* buf, std::size_t length, chorus_tp_mr_t* /*mr*/,
                    std::uint64_t wr_id, std::uint32_t imm) noexcept {
    return enqueue_send(buf, length, wr_id, imm);
  }
  /// A buffer that is not writable memory of this process is accepted (OK)
  /// and fails when its message arrives: the message is dropped and the
  /// receive completes with INVALID_ARGUMENT naming the buffer.
  int post_recv(void* buf, std::size_t length, std::uint64_t wr_id) noexcept;

  /// One progress pass: write queued sends, read arrived messages, complete
  /// acknowledged sends, notice a closed or exited peer. Returns true when
  /// anything moved.
  bool progress(Clock::time_point now) noexcept;
  /// Posted and not finished (finished ones wait in the completion queue).
  bool has_work() const noexcept { return !sends_.empty() || !recvs_.empty(); }
  /// Whether wait() should sleep on this endpoint's bell.
  bool watchable() const noexcept { return connected_ && !failed_ && has_work(); }
  /// The word the peer rings, and the flag that tells it we may be asleep.
  const std::atomic<std::uint32_t>* bell() const { return &own_seg_.header()->bell; }
  void set_sleeping(bool on) noexcept;
  /// Tells the peer which CPU this rank waits on (`cpu1` = CPU + 1, 0 when
  /// unknown); stores only when it changed. Caller thread only.
  void publish_cpu(std::uint32_t cpu1) noexcept {
    if (cpu1 == cpu_published_) return;
    cpu_published_ = cpu1;
    own_seg_.header()->cpu.store(cpu1, std::memory_order_relaxed);
  }
  /// The CPU the peer last said it waits on, + 1 (0: unknown or not
  /// connected). A hint: it may have moved since.
  std::uint32_t peer_cpu1() const noexcept {
    return connected_ ? peer_seg_.header()->cpu.load(std::memory_order_relaxed) : 0;
  }
  /// Whether the peer last said it waits on `cpu1`.
  bool peer_on_cpu(std::uint32_t cpu1) const noexcept { return cpu1 != 0 && peer_cpu1() == cpu1; }

  /// Bytes of by-reference sends the peer has been told of and not yet
  /// acknowledged: it is copying them, or will as soon as it polls.
  std::uint64_t rndv_bytes_in_flight() const noexcept { return failed_ ? 0 : rndv_bytes_; }

  /// A completion of this endpoint left the completion queue.
  void reaped(std::uint32_t opcode) noexcept;

 private:
  struct SendWr {
    const unsigned char* buf;
    std::uint64_t len;
    std::uint64_t wr_id;
    std::uint64_t written;   // bytes copied into the ring (inline mode)
    std::uint64_t rndv_seq;  // by-reference sequence number, 0 for inline
    int mode;                // 0 undecided, 1 inline, 2 by reference
    std::uint32_t imm;       // the immediate every frame of the message carries
  };
  struct RecvWr {
    unsigned char* buf;
    std::uint64_t len;
    std::uint64_t wr_id;
    int fault;  // 0, or the errno that says `buf` is not writable memory
  };

  /// connect()'s end: takes the peer's mapped segment and starts the data path.
  void bind_peer(Segment seg, int pid, int pidfd, std::uint32_t cma) noexcept;
  int enqueue_send(const void* buf, std::size_t length, std::uint64_t wr_id,
                   std::uint32_t imm) noexcept;
  bool progress_sends() noexcept;
  bool progress_recvs() noexcept;
  bool check_peer(Clock::time_point now) noexcept;
  bool peer_exited() const noexcept;
  /// Fails everything outstanding with `status` and marks the endpoint failed.
  void fail(int status, const std::string& why) noexcept;
  void complete_send(const SendWr& s) noexcept;
  void complete_recv(const RecvWr& r, std::uint64_t byte_len, std::uint32_t imm) noexcept;
  void error(std::uint64_t wr_id, std::uint32_t opcode, int status,
             const std::string& text) noexcept;
  /// Rings the peer's bell (and wakes it if it sleeps).
  void notify_peer() noexcept;
  void ring_if_asleep() noexcept;  // notify_peer() now if owed and the peer sleeps
  std::string peer_name() const;

  Context& ctx_;
  int peer_;
  int channel_;
  std::uint64_t nonce_;
  /// The word the peer reads with process_vm_readv to probe for CMA.
  std::uint64_t probe_word_;
  Segment own_seg_;   // ring peer -> me
  Segment peer_seg_;  // ring me -> peer (mapped at connect)
  bool connected_ = false;
  bool connect_called_ = false;  // connect() was entered (take_connect_request)
  bool request_raised_ = false;  // take_connect_request() said true
  bool failed_ = false;
  std::string fail_text_;
  int peer_pid_ = -1;
  int pidfd_ = -1;
  Clock::time_point next_peer_check_{};
  std::uint32_t cpu_published_ = 0;  // what own_seg_'s `cpu` holds
  bool notify_owed_ = false;         // a post moved data; the next progress() rings

  // Producer side (ring in peer_seg_).
  WrQueue<SendWr> sends_{kMaxOutstanding};
  std::uint64_t tx_cursor_ = 0;  // index of the first send not fully written
  std::uint64_t tx_head_ = 0;    // bytes ever written (the next frame's position)
  std::uint64_t tx_salt_ = 0;    // stamp salt of the peer's ring
  std::uint64_t tx_tail_seen_ = 0;
  std::uint64_t tx_cap_ = 0;
  std::uint64_t tx_frag_max_ = 0;
  std::uint64_t rndv_issued_ = 0;
  std::uint64_t rndv_bytes_ = 0;  // rndv_bytes_in_flight()
  std::uint32_t sends_unreaped_ = 0;

  // Consumer side (ring in own_seg_).
  WrQueue<RecvWr> recvs_{kMaxOutstanding};
  std::uint64_t rx_tail_ = 0;
  bool rx_active_ = false;        // the front receive is being filled
  std::uint64_t rx_msg_len_ = 0;  // length of the message being received
  std::uint64_t rx_got_ = 0;
  std::uint32_t rx_imm_ = 0;      // immediate of the message being received
  std::uint64_t rx_discard_ = 0;  // bytes of a dropped message still to skip
  std::uint32_t recvs_unreaped_ = 0;
};

}  // namespace chorus::shm
