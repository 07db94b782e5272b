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

std::uint16_t pick_free_port() {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw std::system_error(errno, std::generic_category(), "bind 127.0.0.1:0");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::system_error(errno, std::generic_category(), "getsockname");
  }
  return ntohs(addr.sin_port);
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
