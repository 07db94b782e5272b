// The calling thread's last-error text and errno formatting.
#include <chorus/provider/error.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>
#include <utility>

namespace chorus::provider {

namespace {
thread_local std::string t_last_error;
}  // namespace

int set_last_error(int status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

const char* last_error_text() { return t_last_error.empty() ? "no error" : t_last_error.c_str(); }

std::string errno_text(int err) { return std::error_code(err, std::system_category()).message(); }

int wake_eventfd(int event_fd) {
  const std::uint64_t one = 1;
  if (::write(event_fd, &one, sizeof one) < 0 && errno != EAGAIN)
    return set_last_error(CHORUS_ERR_SYSTEM, "interrupt: eventfd write: " + errno_text(errno));
  return CHORUS_OK;
}

int wait_timed_out(int timeout_ms) {
  return set_last_error(CHORUS_ERR_TIMEOUT,
                        "wait: nothing completed within " + std::to_string(timeout_ms) + " ms");
}

int null_argument(const char* op) {
  return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, std::string(op) + ": NULL argument");
}

}  // namespace chorus::provider
