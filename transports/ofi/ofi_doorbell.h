// Doorbell: the address of a context's wake-up socket.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace chorus::ofi {

/// A context whose provider has no wait fd binds an abstract-namespace
/// datagram socket named after its pid and context token (both in its
/// blobs), so peers can wake it (docs/ofi.md, "Completion queue, progress
/// and wait"). A ring is an empty datagram; a 16-byte one is a polled
/// connect's call-me (wire::WatchCallMe, docs/ofi.md "Polled connects").
struct Doorbell {
  sockaddr_un addr{};
  socklen_t length = 0;

  static Doorbell of(std::uint32_t pid, std::uint64_t token) {
    Doorbell d;
    d.addr.sun_family = AF_UNIX;
    // Abstract namespace (leading NUL): nothing to clean up after a crash.
    const std::string name = "chorus-ofi/" + std::to_string(pid) + "/" + std::to_string(token);
    std::memcpy(d.addr.sun_path + 1, name.data(), name.size());
    d.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return d;
  }
};

}  // namespace chorus::ofi
