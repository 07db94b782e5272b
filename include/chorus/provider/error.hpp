// chorus::provider errors: the exception setup paths throw, the calling
// thread's last-error text, and guarded(), which turns any exception into a
// status at the C boundary. Part of the provider toolkit.
#pragma once

#include <chorus/types.h>

#include <new>
#include <stdexcept>
#include <string>

namespace chorus::provider {

/// Thrown only on setup paths (context_open, endpoint_open/connect, memory
/// registration) and turned into a status plus last-error text by guarded().
/// The data path (post, poll, wait) returns statuses and never throws.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

/// Records `message` as the calling thread's last error; returns `status`.
/// Each plugin that links the toolkit has its own copy (the toolkit is a
/// static library and plugins export nothing else), so plugins never share it.
int set_last_error(int status, std::string message);

/// The calling thread's last error text; never NULL. Valid until the next
/// set_last_error on this thread.
const char* last_error_text();

/// strerror() text for `err`, thread-safe.
std::string errno_text(int err);

/// The ABI's `interrupt` for a context that sleeps on an eventfd: adds one
/// to `event_fd` (a full counter already wakes the sleeper). OK, or SYSTEM
/// with the reason as the last error.
int wake_eventfd(int event_fd);

/// The ABI's `wait` result when nothing completed: TIMEOUT, with "wait:
/// nothing completed within <timeout_ms> ms" as the last error.
int wait_timed_out(int timeout_ms);

/// Sets "<op>: NULL argument" as the last error; returns INVALID_ARGUMENT.
int null_argument(const char* op);

/// Runs `f` (returning a status) so that no exception escapes: an Error
/// keeps its status, bad_alloc becomes SYSTEM, anything else INTERNAL; the
/// text is "<op>: <what>". Use it around every C entry point that can throw.
template <class F>
int guarded(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    return set_last_error(e.status(), std::string(op) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(CHORUS_ERR_SYSTEM, std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return set_last_error(CHORUS_ERR_INTERNAL, std::string(op) + ": " + e.what());
  } catch (...) {
    return set_last_error(CHORUS_ERR_INTERNAL, std::string(op) + ": unknown exception");
  }
}

}  // namespace chorus::provider
