#include "log.h"

#include <atomic>
#include <cstddef>
#include <string>

namespace chorus::shm {

namespace {
std::atomic<const chorus_host_v1_t*> g_host{nullptr};
}  // namespace

void set_log_host(const chorus_host_v1_t* host) {
  const bool usable = host != nullptr &&
                      host->struct_size >= offsetof(chorus_host_v1_t, log) + sizeof(host->log) &&
                      host->log != nullptr;
  g_host.store(usable ? host : nullptr, std::memory_order_release);
}

void log(int level, std::string_view message) noexcept {
  const chorus_host_v1_t* host = g_host.load(std::memory_order_acquire);
  if (host == nullptr) return;
  try {
    std::string line = "shm: ";
    line.append(message);
    host->log(host->ctx, level, line.c_str());
  } catch (...) {
    // A log line that cannot be built is dropped; it never fails the caller.
  }
}

}  // namespace chorus::shm
