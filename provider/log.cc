// The plugin's line into the host's logger.
#include <chorus/provider/log.hpp>

#include <atomic>
#include <cstddef>
#include <string>

namespace chorus::provider {

namespace {
std::atomic<const chorus_host_v1_t*> g_host{nullptr};
std::atomic<const char*> g_name{"transport"};
}  // namespace

void set_log_host(const chorus_host_v1_t* host, const char* name) {
  // A table too short to hold `log` is treated as "no logger".
  const bool usable = host != nullptr &&
                      host->struct_size >= offsetof(chorus_host_v1_t, log) + sizeof(host->log) &&
                      host->log != nullptr;
  if (name != nullptr) g_name.store(name, std::memory_order_relaxed);
  g_host.store(usable ? host : nullptr, std::memory_order_release);
}

void log(int level, std::string_view message) noexcept {
  const chorus_host_v1_t* host = g_host.load(std::memory_order_acquire);
  if (host == nullptr) return;
  try {
    std::string line = g_name.load(std::memory_order_relaxed);
    line += ": ";
    line.append(message);
    host->log(host->ctx, level, line.c_str());
  } catch (...) {
    // Logging must never turn into a failure of the operation being logged.
  }
}

}  // namespace chorus::provider
