#include "rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace jaccl::detail {
namespace {

/// Fixed size of each rank's contribution: "host:port\ntoken" and a NUL.
constexpr size_t kRecordSize = 256;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("[jaccl] side-channel bootstrap: " + what);
}

/// Bind an ephemeral TCP port on `host`, read it back and release it.
std::string pick_coordinator(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0)
    fail("cannot resolve bind address '" + host + "': " + gai_strerror(rc));
  std::string error = "no usable address";
  int port = -1;
  for (addrinfo* ai = found; ai && port < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      char service[NI_MAXSERV];
      if (getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, nullptr, 0, service,
                      sizeof(service), NI_NUMERICSERV) == 0)
        port = std::atoi(service);
    } else {
      error = std::strerror(errno);
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  if (port <= 0) fail("cannot bind a port on '" + host + "': " + error);
  return host + ":" + std::to_string(port);
}

std::string random_token() {
  std::random_device rd;
  std::string token;
  char hex[9];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(hex, sizeof(hex), "%08x", unsigned(rd()));
    token += hex;
  }
  return "jaccl-" + token;
}

}  // namespace

Rendezvous rendezvous_over(const AllGatherFn& all_gather, int rank, int size) {
  std::vector<char> mine(kRecordSize, '\0');
  if (rank == 0) {
    const char* bind = std::getenv("CHORUS_BIND_ADDRESS");
    const std::string record =
        pick_coordinator(bind && *bind ? bind : "127.0.0.1") + "\n" + random_token();
    if (record.size() >= kRecordSize) fail("bind address too long: '" + record + "'");
    std::memcpy(mine.data(), record.data(), record.size());
  }
  std::vector<char> all(kRecordSize * size_t(size), '\0');
  all_gather(mine.data(), all.data(), kRecordSize);

  const char* first = all.data();  // rank 0's record
  if (std::memchr(first, '\0', kRecordSize) == nullptr) fail("rank 0's record is not terminated");
  const std::string record(first);
  const size_t newline = record.find('\n');
  if (newline == std::string::npos || newline == 0 || newline + 1 == record.size())
    fail("rank 0's record is malformed ('" + record +
         "'); does the all-gather put rank r's bytes at offset r * n_bytes?");
  return {record.substr(0, newline), record.substr(newline + 1)};
}

}  // namespace jaccl::detail
