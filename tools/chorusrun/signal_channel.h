// SignalChannel: the signals chorusrun reacts to, delivered as a descriptor.
#pragma once

#include <signal.h>

#include <optional>

#include "tools/chorusrun/unique_fd.h"

namespace chorus::run {

/// Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP and delivers them through a
/// signalfd, so the event loop sees them in poll() next to the rank pipes
/// instead of in an async handler. Restores the previous mask on destruction.
///
/// The mask is per thread: create it on the only thread, before any fork,
/// and hand original_mask() to each child so the rank starts with the mask
/// chorusrun itself was given.
class SignalChannel {
 public:
  SignalChannel();  ///< Throws std::system_error if signalfd fails.
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_.get(); }
  const sigset_t& original_mask() const { return original_mask_; }

  /// Never blocks. The next pending signal number, or nothing.
  std::optional<int> read();

 private:
  sigset_t original_mask_{};
  UniqueFd fd_;
};

}  // namespace chorus::run
