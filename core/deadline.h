// Deadline: a point in time every blocking wait in Chorus is bounded by.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>

namespace chorus::core {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::milliseconds timeout) { return Deadline(Clock::now() + timeout); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }

  /// Milliseconds left, clamped to [0, cap]; suitable for poll()/wait() timeouts.
  int remaining_ms(int cap = std::numeric_limits<int>::max()) const {
    if (is_never()) return cap;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, cap));
  }

  /// The earlier of two deadlines.
  static Deadline earliest(Deadline a, Deadline b) { return a.at_ < b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace chorus::core
