#include "tools/chorusrun/job_environment.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <system_error>

#include "tools/chorusrun/unique_fd.h"

namespace chorus::run {
namespace {

std::string_view name_of(std::string_view assignment) {
  return assignment.substr(0, assignment.find('='));
}

}  // namespace

std::string make_job_token() {
  std::array<unsigned char, 16> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (const unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

namespace {

/// Binds a TCP socket to 127.0.0.1:`port` (0: the kernel picks one) and
/// returns the bound port, or 0 when that port is taken.
std::uint16_t try_bind_loopback(std::uint16_t port) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (port != 0 && (errno == EADDRINUSE || errno == EACCES)) return 0;
    throw std::system_error(errno, std::generic_category(), fmt::format("bind 127.0.0.1:{}", port));
  }
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::system_error(errno, std::generic_category(), "getsockname");
  }
  return ntohs(addr.sin_port);
}

/// The lower end of the kernel's ephemeral port range (32768 when it cannot
/// be read).
unsigned ephemeral_low() {
  unsigned low = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re")) {
    unsigned lo = 0, hi = 0;
    if (std::fscanf(f, "%u %u", &lo, &hi) == 2 && lo > 0 && lo <= 65535) low = lo;
    std::fclose(f);
  }
  return low;
}

}  // namespace

std::uint16_t pick_free_port() {
  // A port from the ephemeral range can be handed to another process's
  // outgoing connection between this check and rank 0's listen (seen in CI
  // beside Open MPI's many connections), so look below that range first:
  // there only an explicit bind can take the port.
  const unsigned low = ephemeral_low();
  constexpr unsigned kFirst = 20000;
  if (low > kFirst + 1000) {
    std::array<unsigned char, 2> seed{};
    for (int attempt = 0; attempt < 64; ++attempt) {
      if (::getrandom(seed.data(), seed.size(), 0) != static_cast<ssize_t>(seed.size())) break;
      const unsigned r = seed[0] | (unsigned{seed[1]} << 8);
      const auto port = static_cast<std::uint16_t>(kFirst + r % (low - kFirst));
      if (try_bind_loopback(port) != 0) return port;
    }
  }
  return try_bind_loopback(0);
}

std::optional<std::string> check_coordinator(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    return fmt::format("coordinator '{}' is not HOST:PORT", address);
  }
  const auto host = address.substr(0, colon);
  const auto port = address.substr(colon + 1);
  if (host.empty()) return fmt::format("coordinator '{}' has no host", address);
  // A bare IPv6 address has colons of its own and must be bracketed.
  if (host.find(':') != std::string_view::npos && !(host.front() == '[' && host.back() == ']')) {
    return fmt::format("coordinator '{}': write an IPv6 host in brackets, e.g. [::1]:29500",
                       address);
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    return fmt::format("coordinator '{}' has no valid port (1-65535)", address);
  }
  return std::nullopt;
}

std::optional<std::string> check_env_assignment(std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return fmt::format("--env '{}' is not NAME=VALUE", assignment);
  }
  const auto name = assignment.substr(0, eq);
  if (name == kRankVar || name == kWorldSizeVar) {
    return fmt::format("--env cannot set {}: chorusrun sets it from -n", name);
  }
  if (name == kCoordinatorVar) {
    return fmt::format("--env cannot set {}: use --coordinator", name);
  }
  return std::nullopt;
}

std::vector<std::string> rank_environment(std::span<const std::string> base,
                                          const JobEnvironment& job, int rank) {
  std::vector<std::string> overrides;
  const auto set = [&overrides](std::string assignment) {
    const auto name = name_of(assignment);
    std::erase_if(overrides, [name](const std::string& v) { return name_of(v) == name; });
    overrides.push_back(std::move(assignment));
  };
  for (const auto& assignment : job.extra) set(assignment);
  set(fmt::format("{}={}", kRankVar, rank));
  set(fmt::format("{}={}", kWorldSizeVar, job.world_size));
  set(fmt::format("{}={}", kCoordinatorVar, job.coordinator));
  set(fmt::format("{}={}", kJobTokenVar, job.job_token));

  std::vector<std::string> env;
  env.reserve(base.size() + overrides.size());
  for (const auto& assignment : base) {
    const auto name = name_of(assignment);
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [name](const std::string& v) { return name_of(v) == name; });
    if (!replaced) env.push_back(assignment);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

}  // namespace chorus::run
