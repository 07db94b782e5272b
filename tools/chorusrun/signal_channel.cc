#include "tools/chorusrun/signal_channel.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace chorus::run {

SignalChannel::SignalChannel() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, &original_mask_); rc != 0) {
    throw std::system_error(rc, std::generic_category(), "pthread_sigmask");
  }
  fd_.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) {
    const int err = errno;
    pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
    throw std::system_error(err, std::generic_category(), "signalfd");
  }
}

SignalChannel::~SignalChannel() {
  fd_.reset();
  pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
}

std::optional<int> SignalChannel::read() {
  signalfd_siginfo info{};
  for (;;) {
    const ssize_t n = ::read(fd_.get(), &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;  // EAGAIN: nothing pending
  }
}

}  // namespace chorus::run
