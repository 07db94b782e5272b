// Config: the `transport.tcp.*` keys, parsed and validated.
#pragma once

#include <chorus/types.h>

#include <cstddef>
#include <cstdint>

namespace chorus::tcp {

/// Settings of one context. Defaults are the documented ones
/// (docs/transport-abi.md, "TCP transport").
struct Config {
  /// TCP connections per endpoint; messages of kStripeMinBytes or more are
  /// striped across all of them.
  int sockets = 1;
  /// SO_SNDBUF / SO_RCVBUF in bytes; 0 leaves the kernel's autotuning alone.
  std::uint64_t sndbuf = std::uint64_t{4} << 20;
  std::uint64_t rcvbuf = std::uint64_t{4} << 20;
  /// TCP_NODELAY on every data connection.
  bool nodelay = true;
  /// Microseconds wait() busy-polls before it sleeps in epoll.
  int spin_us = 100;

  static constexpr int kMaxSockets = 16;
  static constexpr int kMaxSpinUs = 1'000'000;
  static constexpr std::uint64_t kMaxBufferBytes = std::uint64_t{1} << 30;

  /// Parses the keys below `transport.tcp.`. Throws Error(INVALID_ARGUMENT)
  /// naming the key, its origin and the valid keys or values.
  static Config parse(const chorus_kv_t* entries, std::size_t count);
};

}  // namespace chorus::tcp
