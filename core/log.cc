#include "core/log.h"

#include "core/config.h"

#include <atomic>
#include <cstdlib>
#include <unistd.h>

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

void log_line(int level, int rank, const std::string& message) {
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

}  // namespace chorus::core
