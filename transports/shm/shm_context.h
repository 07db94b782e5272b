// Context: the endpoints of one communicator's rank, its completion queue,
// and the poll / wait / interrupt machinery.
#pragma once

#include "shm.h"
#include "shm_arena.h"
#include "shm_config.h"
#include "shm_endpoint.h"
#include "shm_futex.h"
#include "shm_placement.h"

#include <chorus/transport.h>
#include <chorus/provider/context_base.hpp>
#include <chorus/provider/receive_buffer_check.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chorus::shm {

/// One thread at a time calls a context's ops (the core serialises them);
/// only interrupt() may run concurrently, from any thread.
class Context : public provider::ConfiguredContext<Config> {
 public:
  /// Parses the configuration and sweeps stale segments. Throws Error.
  explicit Context(const chorus_tp_context_info_t& info);
  ~Context();

  chorus_tp_context_t* handle() { return reinterpret_cast<chorus_tp_context_t*>(this); }
  static Context* from(chorus_tp_context_t* h) { return reinterpret_cast<Context*>(h); }

  chorus_tp_caps_t caps() const;

  /// Throws Error on a bad peer, channel or buffer, or a duplicate.
  Endpoint* open_endpoint(int peer, int channel, void* address_out, std::size_t* address_len);
  /// Closes `ep` and drops its completions. Never blocks.
  void close_endpoint(Endpoint* ep);

  /// Never blocks. Completions written, or PENDING.
  int poll(chorus_tp_completion_t* out, std::size_t max) noexcept;
  int read_error(chorus_tp_error_t* out) noexcept;
  /// Spins for spin_us (busy when every rank can have a core, yielding the
  /// core between passes when the host is oversubscribed), then sleeps on the bells of the
  /// endpoints with work outstanding (and the interrupt word) until something may have completed,
  /// interrupt() or the timeout. OK or TIMEOUT.
  int wait(int timeout_ms) noexcept;
  int interrupt() noexcept;

  /// Which receive buffers are writable memory (docs/shm.md, "Receive
  /// buffers"); shared by the endpoints, used from the caller thread only.
  provider::ReceiveBufferCheck& receive_buffer_check() { return receive_buffer_check_; }

  /// Cross-memory attach from `peer` was refused for `reason` (connect's
  /// probe): the first time in this context a warning naming the fix, then
  /// debug lines only. Caller thread only.
  void note_cma_refused(const std::string& peer, const std::string& reason);

  /// Messages of at least this many bytes go by reference when CMA is
  /// usable: `cma_threshold` when configured, else its default, raised to
  /// Config::kOversubscribedCmaThreshold when ranks outnumber cores.
  std::uint64_t cma_threshold() const { return cma_threshold_; }

  /// The memory file that holds every endpoint's segment.
  Arena& arena() { return arena_; }

 private:
  /// One progress pass over every endpoint; true when anything moved.
  /// `timed` makes it check for exited peers now (otherwise every 64th
  /// pass does).
  bool progress_all(bool timed = false) noexcept;
  /// Queues a connect request for each endpoint a peer's polled connect
  /// asks for; scans the endpoints only when the request bell moved.
  void take_connect_requests() noexcept;
  void reap(chorus_tp_endpoint_t* ep, std::uint32_t opcode) noexcept;
  /// wait()'s placement check: when a lower-ranked peer says it waits on
  /// `cpu`, moves this thread elsewhere (CpuSpreader). The CPU now run on.
  int spread_from(int cpu) noexcept;

  /// CPUs in this process's affinity mask (1 for a pinned rank).
  int cores_;
  /// More ranks than usable cores (and not pinned to one): spin passes yield
  /// the core (the rank we wait for may need it) instead of pausing on it.
  bool oversubscribed_;
  std::uint64_t cma_threshold_;
  /// Moves this rank off a CPU a lower-ranked peer waits on (not when
  /// oversubscribed or pinned to one CPU).
  CpuSpreader spreader_;
  unsigned untimed_passes_ = 0;
  /// Declared before endpoints_: it outlives their segments.
  Arena arena_;
  std::uint32_t requests_seen_ = 0;  // the request bell's value at the last scan
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<FutexWatch> watches_;
  std::vector<Endpoint*> sleepers_;
  std::atomic<bool> interrupt_pending_{false};
  std::atomic<std::uint32_t> interrupt_word_{0};
  provider::ReceiveBufferCheck receive_buffer_check_;
  bool cma_refusal_logged_ = false;
};

}  // namespace chorus::shm
