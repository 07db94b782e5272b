// Rank-prefixed logging to stderr, filtered by CHORUS_LOG / log.level.
#pragma once

#include <chorus/types.h>

#include <sstream>
#include <string>

namespace chorus::core {

/// Process-wide log settings. The level starts from CHORUS_LOG (default warn)
/// and each communicator may raise or lower it from its configuration.
void log_set_level(int level);
int log_level();
inline bool log_enabled(int level) { return level <= log_level(); }

/// Rank printed by log lines that have no communicator at hand (plugin logs).
void log_set_rank(int rank);
int log_rank();

/// The communicator that plugin log lines written on this thread belong to
/// (its id, e.g. "w0" or "w0.s1c3"), or nullptr. Set while a communicator
/// calls into its transport and algorithms, so their lines name it.
void log_set_thread_comm(const std::string* id);
const std::string* log_thread_comm();

/// Scoped log_set_thread_comm that restores the previous value.
class LogCommScope {
 public:
  explicit LogCommScope(const std::string* id) : saved_(log_thread_comm()) { log_set_thread_comm(id); }
  ~LogCommScope() { log_set_thread_comm(saved_); }
  LogCommScope(const LogCommScope&) = delete;
  LogCommScope& operator=(const LogCommScope&) = delete;

 private:
  const std::string* saved_;
};

/// Writes one line "[chorus r<rank> LEVEL] message" to stderr atomically.
/// `rank` < 0 prints no rank. Thread-safe. Error and warn lines are
/// rate-limited per kind (core/log_limiter.h: 5 in full per 10 s, then one
/// "N more like this" line per interval); every line a plugin logs through
/// the host table comes here, so the limit covers transports and algorithms.
void log_line(int level, int rank, const std::string& message);

/// Writes the pending "N more like this" counts now (also done at exit).
void log_flush_limited();

}  // namespace chorus::core

/// CHORUS_LOGF(level, rank, stream-expression): formats only when enabled.
#define CHORUS_LOGF(level, rank, expr)                     \
  do {                                                     \
    if (::chorus::core::log_enabled(level)) {              \
      std::ostringstream chorus_log_os_;                   \
      chorus_log_os_ << expr;                              \
      ::chorus::core::log_line(level, rank, chorus_log_os_.str()); \
    }                                                      \
  } while (0)
