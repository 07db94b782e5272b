// The built-in mesh algorithm as an algorithm ABI v2 plugin on the algorithm
// SDK (<chorus/algorithm_sdk.hpp>): the per-communicator state (settings
// checked once at comm_init), selection, and the task that runs one call.
//
// Every pair of ranks is connected (CHORUS_ALGO_PEERS_ALL), so data goes
// straight to the rank that needs it, in the style of JACCL's mesh:
//  - all_reduce up to `one_shot_max` bytes: every rank sends its whole input
//    to every peer and reduces all of it itself (one message latency);
//  - larger all_reduce: reduce-scatter then all-gather, rank r owning chunk r;
//  - reduce_scatter, all_gather and broadcast are those halves alone;
//  - reduce, gather, scatter and all_to_all(v) go straight to (or from) the
//    ranks that own the data;
//  - barrier: a dissemination barrier of one-byte tokens.
// Every reduction applies the contributions in rank order 0..size-1, so every
// rank ends with bitwise-identical results, run after run.
//
// Threading: the state is read-only after comm_init (supports and preference
// may run on any thread, beside tasks), but for a scratch cache with its own
// lock that lends a buffer to one task at a time, and a lock-free pool of
// one task's memory; a task owns all its other
// mutable state, so tasks of one or several communicators run at once on one
// thread or several.
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include "algorithms/mesh/mesh_barrier.h"
#include "algorithms/mesh/mesh_executor.h"
#include "algorithms/mesh/mesh_scratch.h"
#include "algorithms/mesh/mesh_settings.h"

#include <memory>
#include <optional>
#include <vector>

namespace chorus::mesh {

struct Mesh {
  static constexpr const char* kName = "mesh";
  static constexpr uint32_t kPeers = CHORUS_ALGO_PEERS_ALL;
  static constexpr uint32_t kFlags =
      CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
  static constexpr uint32_t kCollectives =
      (1u << CHORUS_COLL_ALL_REDUCE) | (1u << CHORUS_COLL_ALL_GATHER) |
      (1u << CHORUS_COLL_REDUCE_SCATTER) | (1u << CHORUS_COLL_BROADCAST) |
      (1u << CHORUS_COLL_BARRIER) | (1u << CHORUS_COLL_REDUCE) | (1u << CHORUS_COLL_GATHER) |
      (1u << CHORUS_COLL_SCATTER) | (1u << CHORUS_COLL_ALL_TO_ALL) |
      (1u << CHORUS_COLL_ALL_TO_ALLV);

  Settings settings;
  int size = 1;
  /// Every rank is on this host and every peer is served by a transport
  /// that moves large messages at memory speed on its own
  /// (CHORUS_TP_CAP_LARGE_POSTS: shared memory). preference() then keeps
  /// the mesh for larger all_reduce calls.
  bool shared_memory = false;
  /// The partial results of a two-phase reduce off the root, lent to one
  /// task at a time (mesh_scratch.h); the only part of the state a task
  /// changes, under the cache's own lock.
  mutable ScratchCache reduce_scratch;
  /// The last finished task's memory, for the next one (sdk::TaskPool): a
  /// loop of small calls allocates no task.
  mutable sdk::TaskPool task_pool;

  /// Checks `algorithm.mesh.*`: an unknown key or a bad value fails the
  /// communicator's init, naming the key.
  static int comm_init(const chorus_algo_comm_v2_t* comm, Mesh** out);
  /// Every (dtype, op) the core has a kernel for.
  bool supports(int collective, int dtype, int op) const;
  int preference(const chorus_algo_call_v2_t& call) const;

  /// One collective call (mesh_task.cc).
  class Task {
   public:
    Task(const Mesh& mesh, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t& call)
        : mesh_(mesh), env_(env), call_(call) {}
    int start();
    int progress(const chorus_tp_completion_t* completions, size_t n);

   private:
    int all_reduce();
    int reduce_scatter();
    int all_gather();
    int broadcast();
    int barrier();
    int reduce();
    int gather();
    int scatter();
    int all_to_all();
    int exchange(const std::byte* in, const size_t* sc, const size_t* so, std::byte* out,
                 const size_t* rc, const size_t* ro);
    int run(const Call& call);

    const Mesh& mesh_;  // outlives the task (comm_fini comes after every task ended)
    const chorus_algo_env_v2_t* env_;
    const chorus_algo_call_v2_t call_;
    std::optional<Executor> executor_;
    std::optional<Barrier> barrier_;
    /// Partial results of a two-phase reduce off the root, until they go out.
    Scratch scratch_;
    /// all_to_all: the input of an in-place call, and the per-peer layout.
    std::vector<std::byte> input_copy_;
    std::vector<size_t> counts_, offsets_;
  };
};

}  // namespace chorus::mesh
