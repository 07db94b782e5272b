#include "core/late_arrivals.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>

namespace chorus::core {
namespace {

/// A refused caller is closed after it hangs up, or after this long.
constexpr auto kLinger = std::chrono::seconds(2);
/// Callers held at once while they read the refusal; beyond, the oldest goes.
constexpr std::size_t kMaxHeld = 64;

std::string peer_text(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "an unknown address";
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
  ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
}

/// Closes a refused caller's socket after draining what it sent: closing
/// with unread data sends a reset, which can discard the refusal before the
/// caller has read it.
void close_drained(int fd) {
  char sink[512];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  ::close(fd);
}

}  // namespace

LateArrivals::LateArrivals(int listen_fd, std::vector<std::byte> refusal,
                           std::function<void(const std::string&)> on_first)
    : listen_fd_(listen_fd),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      refusal_(std::move(refusal)),
      on_first_(std::move(on_first)) {
  // Without a way to stop the thread there is no thread: callers then find
  // the port closed, as before the job formed.
  if (stop_fd_ < 0 || wake_fd_ < 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return;
  }
  thread_ = std::thread([this] { run(); });
}

LateArrivals::~LateArrivals() {
  const std::uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  // Callers adopted just before the end that the thread did not get to still
  // get their refusal.
  for (const int fd : adopted_) {
    (void)!::send(fd, refusal_.data(), refusal_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    close_drained(fd);
  }
}

void LateArrivals::adopt(int fd) {
  if (fd < 0) return;
  if (!thread_.joinable()) {
    ::close(fd);
    return;
  }
  {
    const std::lock_guard<std::mutex> lock(adopted_mutex_);
    adopted_.push_back(fd);
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void LateArrivals::run() {
  using Clock = std::chrono::steady_clock;
  struct Held {
    int fd;
    Clock::time_point until;
  };
  std::vector<Held> held;
  auto release = [&](std::size_t i) {
    close_drained(held[i].fd);
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
  };
  // Sends the refusal to a caller and holds it until it hangs up.
  auto refuse = [&](int fd) {
    // One non-blocking send: the frame is small and nothing else is queued.
    (void)!::send(fd, refusal_.data(), refusal_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    if (held.size() >= kMaxHeld) release(0);
    held.push_back({fd, Clock::now() + kLinger});
  };
  constexpr std::size_t kFixed = 3;  // stop, wake, listen
  for (;;) {
    std::vector<pollfd> fds{{stop_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Held& h : held) fds.push_back({h.fd, POLLIN, 0});
    int timeout_ms = -1;
    const auto now = Clock::now();
    for (const Held& h : held) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(h.until - now);
      const int ms = left.count() < 0 ? 0 : static_cast<int>(left.count()) + 1;
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) break;
    // Callers that hung up (or sent something: read and ignored) or outstayed.
    const auto later = Clock::now();
    for (std::size_t i = held.size(); i-- > 0;) {
      const short ev = fds[i + kFixed].revents;
      if (ev & POLLIN) {
        char sink[512];
        const ssize_t got = ::recv(held[i].fd, sink, sizeof sink, MSG_DONTWAIT);
        if (got > 0 && later < held[i].until) continue;
        release(i);
      } else if (ev != 0 || later >= held[i].until) {
        release(i);
      }
    }
    if (fds[1].revents & POLLIN) {
      std::uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof count);
      std::vector<int> taken;
      {
        const std::lock_guard<std::mutex> lock(adopted_mutex_);
        taken.swap(adopted_);
      }
      for (const int fd : taken) refuse(fd);
    }
    if (fds[2].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;  // EAGAIN, or EMFILE: the next poll tries again
      if (refused_.fetch_add(1, std::memory_order_relaxed) == 0 && on_first_) {
        try {
          on_first_(peer_text(fd));
        } catch (
            ...) {  // NOLINT(bugprone-empty-catch): a throwing logger must not stop the refusals
        }
      }
      refuse(fd);
    }
  }
  for (const Held& h : held) close_drained(h.fd);
}

}  // namespace chorus::core
