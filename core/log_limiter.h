// LogLimiter: the rate limit on repeated log lines of one kind. Pure logic
// with the clock passed in, so tests/unit/core/log_limiter_test.cc drives it
// without sleeping; core/log.cc holds the process-wide instance.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::core {

/// Per kind of line (its level and its text with every run of digits folded,
/// so "dropped connection from 127.0.0.1:40112" and "…:40113" are one kind):
/// the first `burst` lines of an interval are written in full; the rest of the
/// interval only counts, and the count comes out as one summary line when the
/// interval is over (at the next line of any kind, or at flush()).
/// Not thread-safe: the caller serialises.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Settings {
    int burst = 5;
    Clock::duration interval = std::chrono::seconds(10);
    /// Kinds tracked at once; lines of further kinds share one overflow kind.
    size_t max_kinds = 256;
  };

  /// "N more like this" for one kind.
  struct Summary {
    int level = 0;
    uint64_t suppressed = 0;
    double seconds = 0;  // length of the interval the count covers
    std::string sample;  // the last suppressed line
    std::string text() const;
  };

  LogLimiter() = default;
  explicit LogLimiter(Settings settings) : settings_(settings) {}

  /// Whether to write `message` now. Summaries of intervals that ended before
  /// `now` are appended to `due` (to be written before the line).
  bool admit(int level, std::string_view message, Clock::time_point now, std::vector<Summary>& due);

  /// Appends every pending count to `due` (at exit, or at the end of a test).
  void flush(Clock::time_point now, std::vector<Summary>& due);

  /// The kind of a line: its level and text with digit runs folded to '#'.
  static std::string kind_of(int level, std::string_view message);

 private:
  struct State {
    Clock::time_point start{};
    int admitted = 0;
    uint64_t suppressed = 0;
    int level = 0;
    std::string sample;
  };
  void close_expired(Clock::time_point now, std::vector<Summary>& due);
  static void take(State& s, Clock::time_point now, std::vector<Summary>& due);

  Settings settings_;
  std::map<std::string, State> kinds_;
  Clock::time_point next_due_ = Clock::time_point::max();
};

}  // namespace chorus::core
