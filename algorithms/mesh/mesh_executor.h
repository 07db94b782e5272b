// The mesh's executor: runs one collective (every kind of mesh_schedule.h,
// the barrier aside) as a non-blocking state machine over the exchanges of
// mesh_schedule.h, for the algorithm ABI v2 task that owns it.
//
// Each channel is a lane carrying its own slice of every range over its own
// endpoints and its own staging cells, so lanes never touch each other's
// memory. A transfer is cut into pieces; contributions land in staging cells
// (one per peer for a piece in flight, several pieces in flight per lane)
// and are reduced as soon as a piece has arrived from every peer, which frees
// its cells for a later piece and lets the reduced piece go out to the gather
// phase at once.
//
// Threading: an Executor is driven by one thread at a time (the core's call
// to the task's post or progress) and touches only its own state, the call's
// buffers and the staging slots the core reserved for its task, so executors
// of different tasks run side by side.
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include "algorithms/mesh/mesh_schedule.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace chorus::mesh {

/// One collective call as the executor sees it.
struct Call {
  Kind kind = Kind::kAllGather;
  int root = 0;
  size_t count = 0;
  size_t esize = 1;
  /// Contributions are read from here (reduce_send ranges, own contribution).
  const std::byte* src = nullptr;
  chorus_tp_mr_t* src_mr = nullptr;
  /// Results and gathered data live here.
  std::byte* dst = nullptr;
  chorus_tp_mr_t* dst_mr = nullptr;
  chorus_reduce_fn_t kernel = nullptr;
  /// all_gather with a separate input: the own block is sent from `in`
  /// (starting at element `own_offset` of dst) and copied into dst only
  /// after the first posts, so the copy overlaps the peers' reads.
  const std::byte* own_in = nullptr;
  chorus_tp_mr_t* own_in_mr = nullptr;
  size_t own_offset = 0;
  /// Gather-part sends read from here instead of `dst` when set: the input
  /// of gather (off the root), scatter (on the root) and all_to_all(v).
  const std::byte* gather_src = nullptr;
  chorus_tp_mr_t* gather_src_mr = nullptr;
  /// all_to_all(v): per-peer element counts and offsets (one entry per rank),
  /// read during start() only.
  const size_t* send_counts = nullptr;
  const size_t* send_offsets = nullptr;
  const size_t* recv_counts = nullptr;
  const size_t* recv_offsets = nullptr;
};

/// Registers caller memory for posts (a no-op for transports without
/// registration); the registration lasts until the call ends.
inline int register_buffer(const chorus_algo_env_v2_t* env, const void* buf, size_t bytes,
                           chorus_tp_mr_t** mr) {
  *mr = nullptr;
  if (bytes == 0) return CHORUS_OK;
  return env->mem_register(env->core, buf, bytes, mr);
}

class Executor {
 public:
  /// `env` outlives the executor (it is the task's).
  explicit Executor(const chorus_algo_env_v2_t* env) : env_(env) {}
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Lays out the call and posts what it can. Never blocks. Returns
  /// CHORUS_ALGO_TASK_DONE, CHORUS_ALGO_TASK_PENDING or a negative status
  /// (recorded through env->fail).
  int start(const Call& call);
  /// Takes completions of this executor's posts, reduces what has landed and
  /// posts what that allows. Never blocks; returns as start() does.
  int progress(const chorus_tp_completion_t* completions, size_t n);

 private:
  /// The traffic of one endpoint (one lane to one peer). Sends go out as
  /// [reduce pieces][gather pieces]; receives are expected in the same
  /// shape. Every post is a function of its index in this sequence, so a
  /// post the transport refuses with CHORUS_ERR_AGAIN is simply tried again
  /// from the same index on the next progress: no queue of posts is kept.
  struct Stream {
    int peer = -1;
    chorus_tp_endpoint_t* ep = nullptr;  // NULL: idle (nothing to move with this peer)
    Range reduce_send, reduce_recv, gather_send, gather_recv;  // lane slices
    size_t reduce_send_n = 0, gather_send_n = 0;
    size_t reduce_recv_n = 0, gather_recv_n = 0;
    size_t send_posted = 0, send_done = 0;
    size_t recv_posted = 0, recv_done = 0;

    size_t send_total() const { return reduce_send_n + gather_send_n; }
    size_t recv_total() const { return reduce_recv_n + gather_recv_n; }
  };
  struct Lane {
    int id = 0;
    Range own;     // this lane's slice of the own contribution (in src)
    Range result;  // this lane's slice of the reduction result (in dst)
    size_t pieces = 0;
    size_t reduced = 0;           // leading pieces reduced
    std::vector<int> landed;      // per group: contributions landed for its piece
    std::vector<Stream> streams;  // indexed by peer rank; the own entry stays idle
  };

  int setup();
  int advance();
  std::byte* cell(const Lane& lane, size_t group, int peer, chorus_tp_mr_t** mr);
  int pump(Lane& lane, Stream& s);
  /// The sending half of pump().
  int pump_sends(Lane& lane, Stream& s);
  int complete(const chorus_tp_completion_t& c);
  void try_reduce(Lane& lane);

  const chorus_algo_env_v2_t* env_;
  Call call_;
  bool reducing_ = false;
  bool save_own_ = false;
  bool gate_reduce_on_sends_ = false;
  bool gate_gather_on_sends_ = false;
  bool own_copied_ = true;
  /// A post was refused with CHORUS_ERR_AGAIN since the last advance(): the
  /// core calls progress again (with no completions if need be) to retry it.
  bool refused_ = false;
  CellLayout layout_;
  size_t piece_bytes_ = 0;
  size_t piece_ = 1;  // elements per piece
  size_t send_window_ = 1, recv_window_ = 1;
  std::vector<Lane> lanes_;
  /// Receive cells when the staging slots are too small (see cell_layout);
  /// freed with the task, which the core does only after closing the
  /// endpoints of a failed call, so no receive lands here afterwards.
  std::unique_ptr<std::byte[]> temp_;
  chorus_tp_mr_t* temp_mr_ = nullptr;
  std::unique_ptr<std::byte[]> own_copy_;
};

}  // namespace chorus::mesh
