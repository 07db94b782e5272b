// The built-in ring algorithm as an algorithm ABI v2 plugin, written only
// against the public plugin headers and the algorithm SDK
// (<chorus/algorithm_sdk.hpp>), as a third party writes one: comm_init
// validates `algorithm.ring.*` once per communicator, preference keeps the
// ring's size classes, and every collective is a Task (ring_task.h) that
// runs schedules (ring_schedule.h) on the executor (ring_executor.h).
#include <chorus/algorithm_sdk.hpp>

#include "algorithms/ring/ring_settings.h"
#include "algorithms/ring/ring_task.h"

#include <new>
#include <string>

namespace chorus::ring {
namespace {

constexpr uint32_t bit(int collective) { return 1u << collective; }

struct RingAlgorithm : RingComm {
  static constexpr const char* kName = "ring";
  static constexpr uint32_t kFlags =
      CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
  static constexpr uint32_t kCollectives =
      bit(CHORUS_COLL_ALL_REDUCE) | bit(CHORUS_COLL_ALL_GATHER) | bit(CHORUS_COLL_REDUCE_SCATTER) |
      bit(CHORUS_COLL_BROADCAST) | bit(CHORUS_COLL_BARRIER) | bit(CHORUS_COLL_REDUCE) |
      bit(CHORUS_COLL_GATHER) | bit(CHORUS_COLL_SCATTER) | bit(CHORUS_COLL_ALL_TO_ALL) |
      bit(CHORUS_COLL_ALL_TO_ALLV);
  /// Every collective, the barrier and all_to_all(v) included, talks to
  /// rank - 1 and rank + 1 only.
  static constexpr uint32_t kPeers = CHORUS_ALGO_PEERS_RING;
  using Task = chorus::ring::Task;

  /// The settings are parsed here, once: a bad key or value fails the
  /// communicator's init on every rank, naming the key.
  static int comm_init(const chorus_algo_comm_v2_t* comm, RingAlgorithm** out) {
    Settings settings;
    std::string error;
    if (!parse_settings(comm->config, comm->config_count, settings, error))
      return comm->fail(comm->core, CHORUS_ERR_INVALID_ARGUMENT, ("ring: " + error).c_str());
    auto* ring = new (std::nothrow) RingAlgorithm;
    if (!ring) return comm->fail(comm->core, CHORUS_ERR_SYSTEM, "ring: out of memory");
    ring->settings = settings;
    *out = ring;
    return CHORUS_OK;
  }

  /// Every (dtype, op) the core has a kernel for: the ring only moves bytes
  /// and calls the core's kernels.
  bool supports(int, int, int) const { return true; }

  /// Ring is the bandwidth algorithm: it moves 2(n-1)/n of the data per rank
  /// but pays 2(n-1) latencies, so it prefers large messages.
  int preference(const chorus_algo_call_v2_t& call) const {
    return call.bytes >= (64u << 10) ? 100 : 50;
  }
};

}  // namespace
}  // namespace chorus::ring

CHORUS_ALGORITHM_EXPORT_V2(chorus::ring::RingAlgorithm);
