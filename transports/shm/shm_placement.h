// CpuSpreader: moves the calling thread off a CPU that a peer rank of this
// host waits on, when the ranks fit the CPUs the process may use (the
// `spread` setting; docs/shm.md, "Keeping ranks on separate CPUs").
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>

namespace chorus::shm {

/// Two ranks that exchange small messages through shm and find themselves
/// on one CPU stay there: a futex wake-up places the woken rank beside its
/// waker, and while other work keeps the remaining CPUs busy the load
/// balancer sees nothing to even out (the ranks yield to each other, so the
/// pair counts about as much as the other CPU's one busy task). Every
/// message then costs two context switches. A spinning MPI rank never
/// sleeps and so is never pulled over; a sleeping one needs this.
///
/// step_aside() restricts the thread's affinity to the CPUs no peer is on,
/// which migrates it at once, and then restores the mask it read a moment
/// before: the affinity the host set is unchanged, only the CPU the thread
/// runs on now differs. Caller thread only.
class CpuSpreader {
 public:
  CpuSpreader() = default;
  /// `enabled`: the `spread` setting and more usable CPUs than ranks.
  explicit CpuSpreader(bool enabled) : enabled_(enabled) {}

  bool enabled() const noexcept { return enabled_; }

  /// Moves this thread from `cpu` to one of the usable CPUs outside `taken`
  /// (the CPUs peers said they wait on; `cpu` itself is excluded too), or to
  /// any other usable CPU when all are taken. Rate-limited (the interval
  /// grows while moves keep being undone, see the .cc); returns true when
  /// the thread moved. A failing system call disables it for good.
  bool step_aside(int cpu, const cpu_set_t& taken) noexcept;

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_ = false;
  Clock::time_point next_allowed_{};
  Clock::time_point last_move_{};
  std::chrono::microseconds interval_{kMinInterval};
  static constexpr std::chrono::microseconds kMinInterval{1000};
  static constexpr std::chrono::microseconds kMaxInterval{8'000};
};

}  // namespace chorus::shm
