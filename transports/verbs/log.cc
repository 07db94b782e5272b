#include "log.h"

#include <atomic>
#include <cstddef>
#include <string>

namespace chorus::verbs {

namespace {
std::atomic<const chorus_host_v1_t*> g_host{nullptr};
}  // namespace

void set_log_host(const chorus_host_v1_t* host) {
  // A table too short to hold `log` is treated as "no logger".
  const bool usable = host != nullptr &&
                      host->struct_size >= offsetof(chorus_host_v1_t, log) + sizeof(host->log) &&
                      host->log != nullptr;
  g_host.store(usable ? host : nullptr, std::memory_order_release);
}

void log(int level, std::string_view message) noexcept {
  const chorus_host_v1_t* host = g_host.load(std::memory_order_acquire);
  if (host == nullptr) return;
  try {
    std::string line = "verbs: ";
    line.append(message);
    host->log(host->ctx, level, line.c_str());
  } catch (...) {
    // Logging must never turn into a failure of the operation being logged.
  }
}

}  // namespace chorus::verbs
