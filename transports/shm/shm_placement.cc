// CpuSpreader: moving a rank off the CPU a peer rank waits on.
#include "shm_placement.h"

#include <algorithm>

namespace chorus::shm {

bool CpuSpreader::step_aside(int cpu, const cpu_set_t& taken) noexcept {
  if (!enabled_ || cpu < 0) return false;
  const auto now = Clock::now();
  if (now < next_allowed_) return false;

  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    enabled_ = false;
    return false;
  }
  cpu_set_t target;
  CPU_ZERO(&target);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (c != cpu && CPU_ISSET(c, &mask) && !CPU_ISSET(c, &taken)) CPU_SET(c, &target);
  }
  if (CPU_COUNT(&target) == 0) {
    // Every other CPU has a peer on it: still better than sharing this one.
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (c != cpu && CPU_ISSET(c, &mask)) CPU_SET(c, &target);
    }
  }
  if (CPU_COUNT(&target) == 0) return false;  // pinned to this CPU: nothing to do

  // A move undone soon after (the next wake-up brought the ranks together
  // again) doubles the interval before the next one, so a host that cannot
  // keep them apart pays for a move (some microseconds) at most every
  // kMaxInterval; a move that held for a while resets it. The cap is short
  // because every millisecond together costs a context switch per message
  // (some hundreds of them), against a few microseconds for a move.
  if (last_move_ != Clock::time_point{} && now - last_move_ < 4 * interval_) {
    interval_ = std::min(kMaxInterval, 2 * interval_);
  } else {
    interval_ = kMinInterval;
  }
  last_move_ = now;

  // The kernel migrates a running thread off a CPU its new mask excludes
  // before sched_setaffinity returns; restoring the old mask leaves it where
  // it landed.
  if (sched_setaffinity(0, sizeof target, &target) != 0) {
    enabled_ = false;
    return false;
  }
  if (sched_setaffinity(0, sizeof mask, &mask) != 0) {
    // Cannot happen short of a cpuset change in between; the narrower mask
    // stays, and we stop touching it.
    enabled_ = false;
  }
  // Counted from now: the migration itself can take a while on a busy host.
  next_allowed_ = Clock::now() + interval_;
  return true;
}

}  // namespace chorus::shm
