// chorus::provider::Deadline: the point in time a blocking transport call
// gives up. Part of the provider toolkit (docs/transport-abi.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>

namespace chorus::provider {

/// A value type; any thread may use its own copy.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  /// A negative timeout means "no deadline", as for poll(2).
  static Deadline after_ms(int timeout_ms) {
    if (timeout_ms < 0) return Deadline(Clock::time_point::max());
    return Deadline(Clock::now() + std::chrono::milliseconds(timeout_ms));
  }

  static Deadline at(Clock::time_point when) { return Deadline(when); }

  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }

  /// The busy part of a wait, before it sleeps: calls `pass` until it
  /// returns true or `spin_us` microseconds have passed (never beyond this
  /// deadline). True when `pass` did; false at once when spin_us <= 0.
  template <class Pass>
  bool spin(int spin_us, Pass&& pass) const {
    if (spin_us <= 0) return false;
    const auto end = std::min(at_, Clock::now() + std::chrono::microseconds(spin_us));
    while (Clock::now() < end) {
      if (pass()) return true;
    }
    return false;
  }

  /// Milliseconds left, rounded up so a sleep never ends before the deadline;
  /// -1 for "no deadline" (the epoll_wait convention).
  int remaining_ms() const {
    if (is_never()) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, std::numeric_limits<int>::max()));
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace chorus::provider
