// Deadline: a point in time every blocking wait in Chorus is bounded by, and
// the saturating conversions from configured timeouts to it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

namespace chorus::core {

/// A configured timeout in seconds as whole milliseconds, or std::nullopt for
/// "no deadline". Pure arithmetic (tests/unit/core/limits_test.cc):
/// - +inf, and any value whose millisecond count does not fit in 63 bits
///   (about 292 million years), means no deadline: such a timeout is not
///   representable, and waiting forever is what its owner asked for;
/// - a positive value below 1 ms becomes 1 ms (never "expire at once");
/// - other values are rounded up to the next millisecond.
/// NaN, zero and negative values are refused by the configuration before they
/// get here; this function maps them to 0 ms so it is total.
inline std::optional<std::chrono::milliseconds> timeout_ms_from_seconds(double seconds) {
  if (!(seconds > 0)) return std::chrono::milliseconds(0);
  const double ms = std::ceil(seconds * 1000.0);
  if (!(ms < 0x1p63)) return std::nullopt;  // also catches +inf
  return std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(ms)));
}

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  /// `timeout` from now. A timeout that would carry the time point past the
  /// clock's range saturates to never() instead of wrapping into the past; a
  /// negative one is already expired.
  static Deadline after(std::chrono::milliseconds timeout) { return after(timeout, Clock::now()); }
  static Deadline after(std::chrono::milliseconds timeout, Clock::time_point now) {
    if (timeout.count() <= 0) return Deadline(now);
    const auto room = std::chrono::floor<std::chrono::milliseconds>(Clock::time_point::max() - now);
    if (timeout >= room) return never();
    return Deadline(now + std::chrono::duration_cast<Clock::duration>(timeout));
  }
  /// A configured timeout in seconds (see timeout_ms_from_seconds).
  static Deadline after_seconds(double seconds) {
    auto ms = timeout_ms_from_seconds(seconds);
    return ms ? after(*ms) : never();
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  /// The same against a clock reading the caller already has.
  bool expired(Clock::time_point now) const { return !is_never() && now >= at_; }
  Clock::time_point at() const { return at_; }

  /// Milliseconds left, clamped to [0, cap]; suitable for poll()/wait() timeouts.
  int remaining_ms(int cap = std::numeric_limits<int>::max()) const {
    return is_never() ? cap : remaining_ms(cap, Clock::now());
  }
  int remaining_ms(int cap, Clock::time_point now) const {
    if (is_never()) return cap;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - now).count();
    return static_cast<int>(std::clamp<long long>(left, 0, cap));
  }

  /// The earlier of two deadlines.
  static Deadline earliest(Deadline a, Deadline b) { return a.at_ < b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace chorus::core
