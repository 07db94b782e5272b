// What the files of the composite transport (transport.name = "auto") share,
// and no one else: the sub-transport slots, the per-thread error text, the
// context, endpoint and registration objects, the two wait mechanisms, and
// the ops that auto_transport.cc puts in the table. Where each part lives:
//   auto_transport.cc  the ops table, init and last_error, the public helpers
//                      of auto_transport.h (settings, peer summary)
//   auto_context.cc    context_open (loading both sub-transports, combined
//                      caps), context_close, get_caps, mem_register/deregister
//   auto_endpoint.cc   the choice of sub-transport per peer (endpoint_open,
//                      endpoint_connect), endpoint_close, posts, poll, read_error
//   auto_wait.cc       wait, interrupt, wait_fd: FdWait (one epoll over both
//                      wait objects) and DualWait (a helper thread)
//   auto_address.cc    the host identity and the address blob encoding
//
// Threads: a context is driven by one thread at a time, as any transport
// context; only interrupt() may run concurrently (AutoContext says what it
// touches). DualWait's helper thread touches a sub-context only inside a
// wait() call.
#pragma once

#include "core/auto_transport.h"

#include <chorus/transport.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace chorus::core::auto_detail {

// Sub-transport slots. Every array indexed by a slot has these two entries.
inline constexpr int kLocal = 0;
inline constexpr int kFabric = 1;
inline constexpr const char* kRole[2] = {"local", "fabric"};

/// Longest sub-transport name, in the address blob and in transport.auto.*.
inline constexpr size_t kMaxName = 255;

/// The text auto_last_error() returns on this thread.
extern thread_local std::string t_error;

/// Records `message` as this thread's last error and returns `rc`.
int fail(int rc, std::string message);

/// Logs through the host's callback table, when it has a logger.
void log_host(int level, const std::string& message);

inline bool has_op(const chorus_transport_plugin_v1_t* t, size_t offset, const void* op) {
  return t->struct_size >= offset + sizeof(void*) && op != nullptr;
}

struct Sub {
  std::shared_ptr<Plugin> plugin;  // declared first: outlives the context below
  const chorus_transport_plugin_v1_t* tp = nullptr;
  chorus_tp_context_t* ctx = nullptr;
  chorus_tp_caps_t caps{};
  std::string name;
  size_t endpoints = 0;  // sub-endpoints open in this context
  size_t chosen = 0;     // of those, the ones a connect chose (connecting or connected)
  std::chrono::steady_clock::time_point idle_poll_due{};  // auto_poll: see there

  bool can_interrupt() const {
    return has_op(tp, offsetof(chorus_transport_plugin_v1_t, interrupt),
                  reinterpret_cast<const void*>(tp->interrupt));
  }
  /// The sub-context declares immediates and its table has post_send_imm
  /// (transport.h, minor 5).
  bool has_imm() const {
    return ctx && (caps.flags & CHORUS_TP_CAP_IMM_DATA) &&
           has_op(tp, offsetof(chorus_transport_plugin_v1_t, post_send_imm),
                  reinterpret_cast<const void*>(tp->post_send_imm));
  }
  /// The sub-context's wait object (transport.h, minor 4), or -1: absent
  /// from an older table, NULL, or NOT_SUPPORTED for this context.
  int wait_fd() const {
    if (!ctx || !has_op(tp, offsetof(chorus_transport_plugin_v1_t, wait_fd),
                        reinterpret_cast<const void*>(tp->wait_fd)))
      return -1;
    int fd = -1;
    return tp->wait_fd(ctx, &fd) == CHORUS_OK && fd >= 0 ? fd : -1;
  }
  /// Records the sub-transport's last_error (named) as ours and returns rc.
  int pass_on(int rc, const std::string& what) const {
    return fail(rc, what + " (" + name + "): " + tp->last_error());
  }
};

/// Sleeps in one sub-context's wait on its own thread while the caller sleeps
/// in the other's, so a rank with peers on both sub-transports blocks on both
/// at once. Whichever wakes first, other than by timeout, interrupts the
/// other; the caller returns only once the helper is out of its wait again,
/// so outside a wait() call the helper never touches a sub-context and the
/// one-thread-per-context rule of the ABI holds. A stale interrupt (both woke
/// at the same moment) costs the next wait one spurious wake-up, which the
/// ABI allows; interrupts latch (docs/transport-abi.md §1.10), so neither
/// side can miss its wake-up.
class DualWait {
 public:
  DualWait() = default;
  DualWait(const DualWait&) = delete;
  DualWait& operator=(const DualWait&) = delete;
  ~DualWait();

  /// Blocks in `first`'s wait here and `second`'s on the helper thread. OK if
  /// either woke, TIMEOUT if both timed out, else the first error.
  int wait(Sub& first, Sub& second, int timeout_ms);

  /// Who to interrupt when the helper wakes first.
  Sub* caller_sub = nullptr;

 private:
  void run();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;       // caller -> helper: a new request or stop
  std::condition_variable done_cv_;  // helper -> caller: request finished
  bool stop_ = false;
  uint64_t requested_ = 0;
  uint64_t finished_ = 0;
  Sub* helper_sub_ = nullptr;
  int helper_timeout_ = 0;
  int helper_rc_ = CHORUS_OK;
  std::string helper_message_;
  std::atomic<bool> caller_back_{true};
  bool broken_ = false;  // caller thread only
  std::string broken_message_;
};

/// Both sub-contexts have a wait object: one epoll set holds both fds plus an
/// eventfd that interrupt() rings, and wait() sleeps in it on the caller's
/// thread, so no helper thread is needed. The set is also the composite's own
/// wait object. Level-triggered: a sub fd stays ready until that sub's poll
/// drains it, the eventfd until drain_wake().
class FdWait {
 public:
  FdWait() = default;
  FdWait(const FdWait&) = delete;
  FdWait& operator=(const FdWait&) = delete;
  ~FdWait();

  /// Builds the set over `fds`; false (with t_error set) on a system error.
  bool open(const int (&fds)[2]);
  bool active() const { return epoll_ >= 0; }
  int fd() const { return epoll_; }

  /// Rings the eventfd (any thread). Written before the flag is set, so a
  /// drain that sees the flag always finds the count it has to clear.
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_, &one, sizeof one);
    wake_pending_.store(true, std::memory_order_release);
  }
  /// Clears the eventfd if wake() rang it; one atomic load otherwise.
  void drain_wake() {
    if (!wake_pending_.load(std::memory_order_relaxed)) return;
    wake_pending_.store(false, std::memory_order_relaxed);
    uint64_t value;
    [[maybe_unused]] ssize_t n = ::read(wake_, &value, sizeof value);
  }
  /// Sleeps until a fd of the set is readable or `timeout_ms` passes
  /// (epoll_wait's convention). True when something is readable.
  bool sleep(int timeout_ms);

 private:
  bool system_error(const char* what);
  int epoll_ = -1;
  int wake_ = -1;
  std::atomic<bool> wake_pending_{false};
};

struct AutoContext;

/// Until endpoint_connect chooses a slot both sub-endpoints stay open; a
/// connect request can only arrive on the one the peer chose, which is the
/// one this side will choose (the choice is symmetric: auto_endpoint.cc).
struct AutoEndpoint {
  AutoContext* owner = nullptr;
  int peer = -1;
  int channel = 0;
  chorus_tp_endpoint_t* sub[2] = {nullptr, nullptr};
  int chosen = -1;     // slot chosen by the first endpoint_connect, blocking or polled
  bool up = false;     // the chosen sub-endpoint's connect returned OK
  int requested = -1;  // slot whose CONNECT_REQUEST was passed on (at most one)
};

struct AutoMr {
  chorus_tp_mr_t* sub[2] = {nullptr, nullptr};
};

/// The composite context. Like any context it is driven by one thread at a
/// time; only interrupt() may run concurrently, and it touches `interrupted`
/// and the sub-transports' own interrupt ops only.
struct AutoContext {
  Sub subs[2];
  int rank = 0;
  int data_channels = 0;  // chorus_tp_context_info_t, minor 3; 0: unknown
  std::string host_id;
  chorus_tp_caps_t caps{};
  std::vector<std::unique_ptr<AutoEndpoint>> endpoints;
  std::unordered_map<const chorus_tp_endpoint_t*, AutoEndpoint*> by_sub[2];
  std::set<AutoMr*> mrs;   // owned; freed at deregister or context_close
  int pending_error = -1;  // slot whose poll reported PENDING, until read_error
  int poll_first = 0;      // slot polled first, alternating so neither starves
  std::map<int, int> planned;  // peer -> slot its pairs left for first use will take
  std::atomic<bool> interrupted{false};
  bool warned_local = false;  // the fallback warning is logged once per context
  FdWait fds;                 // active when both sub-contexts have a wait object
  DualWait dual;              // declared last: its thread is joined before the rest goes

  ~AutoContext() {
    for (AutoMr* m : mrs) delete m;
  }

  void close_sub_endpoint(AutoEndpoint& ep, int slot, int& first_rc) {
    if (!ep.sub[slot]) return;
    by_sub[slot].erase(ep.sub[slot]);
    int rc = subs[slot].tp->endpoint_close(ep.sub[slot]);
    if (rc != CHORUS_OK && first_rc == CHORUS_OK)
      first_rc = subs[slot].pass_on(rc, "endpoint_close");
    ep.sub[slot] = nullptr;
    --subs[slot].endpoints;
    if (ep.chosen == slot) --subs[slot].chosen;
  }

  /// False when the local sub-transport could not be loaded or could not open
  /// a context (and was not set explicitly): every peer goes over the fabric.
  bool has_local() const { return subs[kLocal].ctx != nullptr; }

  /// Logs, once per context, that peers on this host are reached over the
  /// fabric because the local sub-transport failed, with why and the fix.
  void warn_local_fallback(const std::string& why) {
    if (warned_local) return;
    warned_local = true;
    log_host(CHORUS_LOG_WARN,
             "auto: rank " + std::to_string(rank) + ": the local sub-transport '" +
                 subs[kLocal].name + "' " + why + "; ranks on this host are reached over '" +
                 subs[kFabric].name +
                 "' instead, which is slower. To fix: give the job more memory for shared "
                 "segments (containers: a larger --shm-size or memory limit), or lower "
                 "transport.shm.ring_size; set transport.name = \"" +
                 subs[kFabric].name + "\" to use the fabric on purpose and silence this");
  }

  chorus_tp_endpoint_t* outer(int slot, chorus_tp_endpoint_t* inner) const {
    auto it = by_sub[slot].find(inner);
    return it == by_sub[slot].end() ? nullptr : reinterpret_cast<chorus_tp_endpoint_t*>(it->second);
  }
};

/// The slot a pair uses. Both ranks compute it from the same facts and reach
/// the same answer without a round trip: host identities compare equal from
/// either side, and the local sub-transport is used only when both
/// endpoints have a local half (`local_half`: this side's; an endpoint
/// without one sends an empty local address). So a connect request can only
/// come over the slot this side will choose too.
inline int auto_choose_slot(const AutoContext& ctx, const AutoBlob& theirs, bool local_half) {
  return auto_use_local(ctx.host_id, theirs.host_id) && !theirs.local.empty() && local_half
             ? kLocal
             : kFabric;
}

inline AutoContext* from(chorus_tp_context_t* c) { return reinterpret_cast<AutoContext*>(c); }
inline AutoEndpoint* from(chorus_tp_endpoint_t* e) { return reinterpret_cast<AutoEndpoint*>(e); }
inline AutoMr* from(chorus_tp_mr_t* m) { return reinterpret_cast<AutoMr*>(m); }

// ---- the ops of the table (transport.h states each one's contract) ----------------

// auto_context.cc
int auto_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out);
int auto_context_close(chorus_tp_context_t* c);
int auto_get_caps(chorus_tp_context_t* c, chorus_tp_caps_t* caps_out);
int auto_mem_register(chorus_tp_context_t* c, void* addr, size_t length, int mem_kind,
                      chorus_tp_mr_t** mr_out);
int auto_mem_deregister(chorus_tp_context_t* c, chorus_tp_mr_t* m);

// auto_endpoint.cc
int auto_endpoint_open(chorus_tp_context_t* c, int peer_rank, int channel, void* address_out,
                       size_t* address_len, chorus_tp_endpoint_t** ep_out);
int auto_endpoint_connect(chorus_tp_endpoint_t* e, const void* peer_address, size_t length,
                          int timeout_ms);
int auto_endpoint_close(chorus_tp_endpoint_t* e);
int auto_post_send_imm(chorus_tp_endpoint_t* e, const void* buf, size_t length, chorus_tp_mr_t* mr,
                       uint64_t wr_id, uint32_t imm);
int auto_post_send(chorus_tp_endpoint_t* e, const void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
int auto_post_recv(chorus_tp_endpoint_t* e, void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
int auto_poll(chorus_tp_context_t* c, chorus_tp_completion_t* out, size_t max);
int auto_read_error(chorus_tp_context_t* c, chorus_tp_error_t* err_out);

// auto_wait.cc
int auto_wait(chorus_tp_context_t* c, int timeout_ms);
int auto_interrupt(chorus_tp_context_t* c);
int auto_wait_fd(chorus_tp_context_t* c, int* fd_out);

}  // namespace chorus::core::auto_detail
