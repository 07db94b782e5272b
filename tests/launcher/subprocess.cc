#include "tests/launcher/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace chorus::run::test {
namespace {

using Clock = std::chrono::steady_clock;

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe2");
}

int to_ms(Seconds s) {
  return static_cast<int>(std::clamp(s.count() * 1000.0 + 1.0, 0.0, 60'000.0));
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::vector<std::string>& extra_env) {
  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  int out[2];
  int err[2];
  make_pipe(out);
  make_pipe(err);
  started_ = Clock::now();
  pid_ = ::fork();
  if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid_ == 0) {
    // The test binary is single-threaded, so libc calls are safe here.
    ::unsetenv("CHORUS_JOB_TOKEN");
    for (const auto& assignment : extra_env) ::putenv(const_cast<char*>(assignment.c_str()));
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

Subprocess::~Subprocess() {
  if (!exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Subprocess::send_signal(int sig) {
  if (!exited_) ::kill(pid_, sig);
}

void Subprocess::try_reap() {
  if (exited_) return;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    outcome_.elapsed = Clock::now() - started_;
    outcome_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}

bool Subprocess::pump(Seconds max_wait) {
  pollfd fds[2];
  std::string* sinks[2];
  nfds_t n = 0;
  if (out_fd_ >= 0) {
    fds[n] = {out_fd_, POLLIN, 0};
    sinks[n++] = &outcome_.out;
  }
  if (err_fd_ >= 0) {
    fds[n] = {err_fd_, POLLIN, 0};
    sinks[n++] = &outcome_.err;
  }
  if (n == 0) {
    // Nothing to read: wait a little for the exit instead of spinning.
    ::poll(nullptr, 0, std::min(to_ms(max_wait), 10));
    return false;
  }
  if (::poll(fds, n, to_ms(max_wait)) <= 0) return true;
  for (nfds_t i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    char buf[65536];
    const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      sinks[i]->append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
      ::close(fds[i].fd);
      (fds[i].fd == out_fd_ ? out_fd_ : err_fd_) = -1;
    }
  }
  return out_fd_ >= 0 || err_fd_ >= 0;
}

bool Subprocess::read_until(const std::function<bool(const std::string&, const std::string&)>& done,
                            Seconds limit) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
  while (!done(outcome_.out, outcome_.err)) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    pump(std::min<Seconds>(deadline - now, Seconds(0.05)));
    try_reap();
  }
  return true;
}

Outcome Subprocess::wait(Seconds limit) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
  std::optional<Clock::time_point> drain_until;
  for (;;) {
    const auto now = Clock::now();
    if (!exited_ && now >= deadline) {
      ::kill(pid_, SIGKILL);
      outcome_.timed_out = true;
    }
    const bool open = pump(Seconds(0.05));
    try_reap();
    if (exited_ && !open) break;
    if (exited_) {
      if (!drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
      if (Clock::now() >= *drain_until) break;
    }
    if (outcome_.timed_out && !exited_) {
      ::waitpid(pid_, nullptr, 0);
      exited_ = true;
      outcome_.elapsed = Clock::now() - started_;
      outcome_.exit_code = 128 + SIGKILL;
    }
  }
  return outcome_;
}

Outcome run(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
            Seconds limit) {
  Subprocess p(argv, extra_env);
  return p.wait(limit);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace chorus::run::test
