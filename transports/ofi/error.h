// Error: how setup paths report failure inside the libfabric transport.
#pragma once

#include <chorus/types.h>

#include <stdexcept>
#include <string>

namespace chorus::ofi {

/// Thrown only on setup paths (context_open, endpoint_open/connect, memory
/// registration) and turned into a status plus last-error text at the C
/// boundary. The data path (post, poll, wait) returns statuses instead.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

/// Records `message` as the calling thread's last error; returns `status`.
int set_last_error(int status, std::string message);

/// The calling thread's last error text; never NULL. Valid until the next
/// set_last_error on this thread.
const char* last_error_text();

/// strerror() text for `err`, thread-safe.
std::string errno_text(int err);

/// "fi_xxx failed: <fi_strerror> (<code>)" for a negative libfabric return.
std::string fi_error_text(const char* call, long rc);

}  // namespace chorus::ofi
