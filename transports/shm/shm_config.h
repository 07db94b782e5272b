// Config: the `transport.shm.*` keys, parsed and validated.
#pragma once

#include <chorus/types.h>

#include <cstddef>
#include <cstdint>

namespace chorus::shm {

/// When large messages are copied once with process_vm_readv (cross-memory
/// attach) instead of in fragments through the ring.
enum class CmaMode { kAuto, kOn, kOff };

/// Settings of one context; defaults as documented in docs/shm.md.
struct Config {
  /// Microseconds wait() polls the rings before it sleeps on the futexes.
  int spin_us = 20;
  /// Bytes of each receive ring (power of two). One ring per endpoint and
  /// direction lives in the receiver's segment.
  std::uint64_t ring_size = std::uint64_t{256} << 10;
  CmaMode cma = CmaMode::kAuto;
  /// Messages of at least this many bytes go by cross-memory attach when it
  /// is usable; smaller ones are copied through the ring. 8 MiB: below it the
  /// ring (both sides copying at once) beat process_vm_readv (page pinning,
  /// and a sender idle until the peer's copy is done) at every size measured
  /// (docs/shm.md, "Choosing cma_threshold"); above it only the algorithms'
  /// large posts (all_gather) cross, where single copy won at 2 ranks.
  std::uint64_t cma_threshold = std::uint64_t{8} << 20;
  /// `cma_threshold` came from the configuration. When it did not, a context
  /// with more ranks than cores uses kOversubscribedCmaThreshold instead.
  bool cma_threshold_set = false;
  /// The default threshold on an oversubscribed host: above every post the
  /// built-in algorithms make (16 MiB), so they never copy by reference
  /// there. With 4 ranks on 2 cores the ring beat process_vm_readv for
  /// all_gather's 8 and 16 MiB posts (docs/shm.md, "Choosing
  /// cma_threshold"): a reader copies alone while its sender waits, and the
  /// page pinning costs CPU time that the other ranks need.
  static constexpr std::uint64_t kOversubscribedCmaThreshold = std::uint64_t{32} << 20;
  /// How often, while work is outstanding, a peer's process is checked for
  /// having exited (pidfd); a closed endpoint is seen at once.
  int peer_check_ms = 100;
  /// Whether a rank that finds a peer waiting on its own CPU moves to
  /// another usable CPU, when the process may use at least as many CPUs as
  /// the communicator has ranks (docs/shm.md, "Keeping ranks on separate CPUs").
  bool spread = true;

  static constexpr int kMaxSpinUs = 1'000'000;
  static constexpr std::uint64_t kMinRing = std::uint64_t{64} << 10;
  static constexpr std::uint64_t kMaxRing = std::uint64_t{256} << 20;

  /// Parses the keys below `transport.shm.`. Throws Error(INVALID_ARGUMENT)
  /// naming the key, its origin and the valid keys or values.
  static Config parse(const chorus_kv_t* entries, std::size_t count);
};

}  // namespace chorus::shm
