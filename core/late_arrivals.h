// What answers the coordinator port once a job has formed: every caller gets
// one refusal frame at once, so a late, stale or foreign rank fails by
// protocol instead of waiting for its init deadline.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus::core {

/// Owns rank 0's listening socket after the join. A thread of its own
/// accepts each caller, sends `refusal` (a complete side-channel frame),
/// half-closes and closes once the caller hangs up or after a short linger,
/// so the frame is never lost to a reset. `on_first(where)` is called once,
/// for the first caller (on this object's thread); later callers are only
/// counted, so a flood cannot flood the log.
///
/// Thread-safety: constructed and destroyed by one thread; the destructor
/// stops the thread and closes every descriptor. `adopt` may be called from
/// any thread; nothing else is shared.
class LateArrivals {
 public:
  LateArrivals(int listen_fd, std::vector<std::byte> refusal,
               std::function<void(const std::string& where)> on_first);
  ~LateArrivals();
  LateArrivals(const LateArrivals&) = delete;
  LateArrivals& operator=(const LateArrivals&) = delete;

  /// Takes over `fd`, a caller accepted before the job formed that had not
  /// said hello by then: it gets the same refusal as a late caller (it is
  /// not one of this job's ranks, or it would have been admitted). Takes
  /// ownership of `fd` whatever happens.
  void adopt(int fd);

  /// Callers refused so far.
  std::size_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void run();

  int listen_fd_;
  int stop_fd_;
  int wake_fd_;
  std::mutex adopted_mutex_;
  std::vector<int> adopted_;  // guarded by adopted_mutex_
  const std::vector<std::byte> refusal_;
  const std::function<void(const std::string&)> on_first_;
  std::atomic<std::size_t> refused_{0};
  std::thread thread_;
};

}  // namespace chorus::core
