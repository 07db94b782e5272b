// The mesh plugin's per-communicator entry points (mesh.h): settings checked
// at comm_init, the (dtype, op) pairs it runs, its preference for `auto`, and
// the exported algorithm ABI v2 table. The tasks are in mesh_task.cc.
#include "algorithms/mesh/mesh.h"

#include <new>
#include <string>

namespace chorus::mesh {

int Mesh::comm_init(const chorus_algo_comm_v2_t* comm, Mesh** out) {
  Settings settings;
  std::string error;
  if (!parse_settings(comm->config, comm->config_count, settings, error))
    return comm->fail(comm->core, CHORUS_ERR_INVALID_ARGUMENT, ("mesh: " + error).c_str());
  auto* mesh = new (std::nothrow) Mesh;
  if (!mesh) return comm->fail(comm->core, CHORUS_ERR_SYSTEM, "mesh: out of memory");
  mesh->settings = settings;
  mesh->size = comm->size;
  bool local = comm->host_count == 1 && comm->peers != nullptr;
  for (int p = 0; local && p < comm->size; ++p) {
    if (p == comm->rank) continue;
    const chorus_tp_caps_t* caps = comm->peers[p].caps;
    local = caps != nullptr && (caps->flags & CHORUS_TP_CAP_LARGE_POSTS) != 0;
  }
  mesh->shared_memory = local;
  *out = mesh;
  return CHORUS_OK;
}

bool Mesh::supports(int, int, int) const { return true; }

/// The mesh is the latency algorithm: one message latency for small
/// all_reduce (one shot) and for the barrier, where the ring pays 2(size-1).
/// On few ranks its concurrent streams also carry mid-size and, for
/// reduce_scatter, large messages faster than the ring.
///
/// Up to this many ranks the mesh's thresholds below were measured
/// (bench/tune.sh, docs/tuning.md); above it every rank would keep n-1
/// streams busy per piece, which was not measured, so the older, ring-leaning
/// thresholds apply there.
constexpr int kMeasuredRanks = 8;

/// Over shared memory the mesh's all_reduce was measured ahead of the
/// ring's up to 64 MiB per rank at this many ranks (1.7-1.8x from 8 MiB;
/// docs/benchmarks.md, "Four ranks, 64 KiB to 64 MiB"): the ring first
/// copies the whole input into the output and then forwards each chunk
/// through every rank in turn, each hop a wait, while the mesh reads the
/// input where it is and exchanges with every peer at once (its CPU time per
/// call measured 0.5-0.6 of the ring's).
constexpr int kSharedMemoryRanks = 4;

int Mesh::preference(const chorus_algo_call_v2_t& call) const {
  const int collective = call.collective;
  const uint64_t bytes = call.bytes;
  if (collective == CHORUS_COLL_BARRIER) return 150;
  constexpr int kMesh = 150, kRing = 10;  // ring answers 50 (small) or 100
  // Rooted collectives and all_to_all(v) go straight to the ranks that need
  // the data: the ring has to forward every block through the ranks in
  // between (all_to_all: size/2 times the traffic per link), and the chain of
  // its rooted schedules pays size - 1 latencies. The mesh is never worse in
  // traffic per link, so it is always the automatic choice for them.
  if (collective >= CHORUS_COLL_REDUCE) return kMesh;
  const bool measured = size <= kMeasuredRanks;
  const bool memory = shared_memory && size <= kSharedMemoryRanks;
  switch (collective) {
    case CHORUS_COLL_REDUCE_SCATTER:
      // Same (n-1)/n traffic as the ring, but to all peers at once and each
      // partial sum reduced once: 1.2-3x the ring from 1 MiB to 64 MiB at 4
      // ranks over tcp and shm (up to 16 MiB per rank), so the mesh up to
      // 64 MiB per rank; the ring stays the bandwidth pick beyond, which is
      // also what algorithm.switch_bytes selects from its threshold up.
      return bytes <= (measured ? (64u << 20) : (1u << 20)) ? kMesh : kRing;
    case CHORUS_COLL_ALL_GATHER:
      // The mesh's concurrent streams win up to about 1 MiB per rank; above,
      // tcp results split between the two, and so did shm at 4 ranks
      // (2 MiB per rank: ring ahead; 4-16 MiB: level).
      return bytes <= (1u << 20) ? kMesh : kRing;
    default:
      // all_reduce: one shot up to one_shot_max, then reduce-scatter +
      // all-gather over the mesh, which beat the ring at 4 MiB (1.4-2.5x)
      // and tied it from 256 KiB; the ring wins again at 64 MiB over tcp.
      // Over shared memory the mesh stays ahead to 64 MiB.
      if (memory) return bytes <= (64u << 20) ? kMesh : kRing;
      return bytes <= (measured ? (4u << 20) : (64u << 10)) ? kMesh : kRing;
  }
}

}  // namespace chorus::mesh

CHORUS_ALGORITHM_EXPORT_V2(chorus::mesh::Mesh);
