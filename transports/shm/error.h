// Error: how setup paths report failure inside the shared-memory transport.
#pragma once

#include <chorus/types.h>

#include <stdexcept>
#include <string>

namespace chorus::shm {

/// Thrown only on setup paths (context_open, endpoint_open/connect) and
/// turned into a status plus last-error text at the C boundary. The data
/// path (post, poll, wait) returns statuses and never throws.
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

}  // namespace chorus::shm
