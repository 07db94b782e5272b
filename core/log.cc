#include "core/log.h"

#include "core/config.h"
#include "core/log_limiter.h"

#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace chorus::core {
namespace {

int initial_level() {
  const char* env = std::getenv("CHORUS_LOG");
  if (!env) env = std::getenv("CHORUS_LOG_LEVEL");
  if (!env) return CHORUS_LOG_WARN;
  int level = log_level_from_name(env);
  return level < 0 ? CHORUS_LOG_WARN : level;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{initial_level()};
  return level;
}

}  // namespace

std::atomic<int> g_rank{-1};

void log_set_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

int log_rank() { return g_rank.load(std::memory_order_relaxed); }

namespace {
thread_local const std::string* t_comm = nullptr;
}  // namespace

void log_set_thread_comm(const std::string* id) { t_comm = id; }
const std::string* log_thread_comm() { return t_comm; }

void log_set_level(int level) { level_ref().store(level, std::memory_order_relaxed); }

int log_level() { return level_ref().load(std::memory_order_relaxed); }

namespace {

void write_line(int level, int rank, const std::string& message) {
  static const char* tags[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  std::string line = "[chorus";
  if (rank >= 0) line += " r" + std::to_string(rank);
  line += " ";
  line += tags[level < 0 ? 0 : level > 4 ? 4 : level];
  line += "] ";
  line += message;
  line += '\n';
  // One write() per line so lines from threads and ranks do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

/// The process-wide limiter. Never destroyed: lines may be logged while
/// static objects are torn down; the pending counts are written at exit.
struct Limited {
  std::mutex mu;
  LogLimiter limiter;
};

void flush_at_exit();

Limited& limited() {
  static Limited* l = [] {
    auto* p = new Limited;
    std::atexit(flush_at_exit);
    return p;
  }();
  return *l;
}

void write_summaries(const std::vector<LogLimiter::Summary>& due) {
  for (const auto& s : due) write_line(s.level, log_rank(), s.text());
}

void flush_at_exit() {
  std::vector<LogLimiter::Summary> due;
  Limited& l = limited();
  std::lock_guard lock(l.mu);
  l.limiter.flush(LogLimiter::Clock::now(), due);
  write_summaries(due);
}

}  // namespace

void log_line(int level, int rank, const std::string& message) {
  // Info, debug and trace lines are opt-in verbosity: never limited.
  if (level >= CHORUS_LOG_INFO) return write_line(level, rank, message);
  Limited& l = limited();
  std::vector<LogLimiter::Summary> due;
  std::lock_guard lock(l.mu);
  const bool write = l.limiter.admit(level, message, LogLimiter::Clock::now(), due);
  write_summaries(due);
  if (write) write_line(level, rank, message);
}

void log_flush_limited() {
  std::vector<LogLimiter::Summary> due;
  Limited& l = limited();
  std::lock_guard lock(l.mu);
  l.limiter.flush(LogLimiter::Clock::now(), due);
  write_summaries(due);
}

}  // namespace chorus::core
