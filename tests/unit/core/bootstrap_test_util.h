// Shared by the bootstrap side-channel tests (bootstrap_test.cc,
// bootstrap_join_test.cc, bootstrap_failure_test.cc): ranks as threads of
// this process over 127.0.0.1, a log sink, blobs with a known pattern, each
// rank's outcome, and raw sockets for impostors that must be able to
// misbehave. Catch2 assertions are not thread-safe, so rank threads only
// record what happened and the test thread checks it. The free functions are
// defined in bootstrap_test_util.cc.
#pragma once

#include "core/bootstrap.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace chorus::core::bootstrap_test {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;

/// A port that was free a moment ago on 127.0.0.1.
std::uint16_t free_port();

std::string local(std::uint16_t port);

/// Collects log lines; the callback may run on any rank thread.
struct LogSink {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::atomic<int> warnings{0};

  std::function<void(int, const std::string&)> callback() {
    return [this](int level, const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
      if (level == CHORUS_LOG_WARN) ++warnings;
    };
  }
  bool contains(const std::string& text) {
    std::lock_guard lock(mutex);
    for (const auto& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string all() {
    std::lock_guard lock(mutex);
    std::string out;
    for (const auto& line : lines) out += line + "\n";
    return out;
  }
};

BootstrapOptions options(int rank, int size, std::uint16_t port, std::string token = "",
                         LogSink* sink = nullptr);

/// Waits until `pred` holds or `timeout` passes; returns pred().
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s);

/// Runs body(rank) on one thread per rank and waits for all of them.
void run_ranks(int size, const std::function<void(int)>& body);

std::byte blob_byte(int rank, std::size_t i, unsigned salt);

Bytes blob(int rank, std::size_t n, unsigned salt);

/// "" when all[q] is blob(q, size_of(q), salt) for every rank q, byte by byte.
std::string verify(const std::vector<Bytes>& all, int size,
                   const std::function<std::size_t(int)>& size_of, unsigned salt);

/// What one rank thread saw: "" for success, else the code and message.
struct Outcome {
  int code = CHORUS_OK;
  std::string message;
  double seconds = 0;

  void set(const Status& s) {
    code = s.code();
    message = s.message();
  }
  void fail(std::string m) {
    code = CHORUS_ERR_INTERNAL;
    message = std::move(m);
  }
};

std::string describe(const std::vector<Outcome>& outcomes);

double since(Clock::time_point start);

// Plain POSIX sockets for impostors: they must be able to misbehave.
class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  RawSocket(RawSocket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawSocket& operator=(RawSocket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  /// Connects to 127.0.0.1:port, retrying while nothing listens (up to 5 s).
  static RawSocket connect_to(std::uint16_t port) {
    const auto end = Clock::now() + 5s;
    for (;;) {
      RawSocket s(::socket(AF_INET, SOCK_STREAM, 0));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(port);
      if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return s;
      if (Clock::now() > end) return {};
      std::this_thread::sleep_for(10ms);
    }
  }

  bool send_all(std::span<const std::byte> data) const {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data = data.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }

  /// Reads until `want` bytes, end of stream or `timeout`.
  Bytes receive(std::size_t want, std::chrono::milliseconds timeout) const {
    Bytes out;
    const auto end = Clock::now() + timeout;
    while (out.size() < want) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left <= 0ms) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      std::byte buf[4096];
      const ssize_t n = ::recv(fd_, buf, std::min(sizeof buf, want - out.size()), 0);
      if (n <= 0) break;
      out.insert(out.end(), buf, buf + n);
    }
    return out;
  }

 private:
  int fd_ = -1;
};

Bytes hello_frame(int rank, int size, std::string_view token, std::uint16_t listen_port = 0);

/// Plays a rank's side of the authentication by hand: auth-init, check rank
/// 0's challenge, answer with a proof made from `token`. True when rank 0's
/// proof verified (the proof is sent either way).
bool authenticate(const RawSocket& s, std::string_view token);

/// Plays rank 0's side by hand: reads the auth-init, answers with a
/// challenge made from `token`, then reads the proof (not checked).
void authenticate_as_root(const RawSocket& s, std::string_view token);

}  // namespace chorus::core::bootstrap_test
