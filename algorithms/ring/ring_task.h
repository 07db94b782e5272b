// One ring collective as an algorithm ABI v2 task: the per-communicator
// state it reads (RingComm) and the Task that turns a call into one or more
// executor phases (ring_executor.h). Everything a task writes lives in the
// task (its executor, lanes, scratch leases, count tables): no static or
// thread-local state, so tasks of one or several communicators run at once.
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include "algorithms/ring/ring_executor.h"
#include "algorithms/ring/ring_settings.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace chorus::ring {

/// What comm_init keeps for one communicator: the settings it validated and
/// the scratch memory its tasks recycle (sdk::ScratchPool is thread-safe,
/// which is why a const task may take from it).
struct RingComm {
  Settings settings;
  mutable chorus::sdk::ScratchPool scratch;
};

class Task {
 public:
  Task(const RingComm& ring, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t& call);
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  /// Sets the call up and posts its first pieces: CHORUS_ALGO_TASK_DONE,
  /// CHORUS_ALGO_TASK_PENDING or a failure (recorded through env->fail).
  int start();
  /// Takes completions of this task's posts and posts what they free.
  int progress(const chorus_tp_completion_t* completions, size_t n);

 private:
  // One start per collective (ring_collectives.cc, ring_exchange.cc).
  int start_all_reduce();
  /// `then` (if any) runs once the all_gather is done: all_to_allv's
  /// exchange after the all_gather of the send counts.
  int start_all_gather(const void* in, void* out, size_t count,
                       std::function<int()> then = nullptr);
  int start_reduce_scatter();
  int start_broadcast();
  int start_reduce();
  int start_gather();
  int start_scatter();
  int start_all_to_all();
  int start_all_to_allv();
  int start_barrier();

  /// The exchange of all_to_all(v) over ring neighbours (ring_schedule.h,
  /// a2a_step); `sent(o, d)` is the element count rank o sends rank d.
  int start_exchange(const std::byte* in, const size_t* sc, const size_t* so, std::byte* out,
                     const size_t* rc, const size_t* ro, std::function<size_t(int, int)> sent);

  /// Starts `plan` as the task's current phase; `then` runs once it is done
  /// and may start the next phase (nullptr: the task is done with it).
  int run(Place work, chorus_reduce_fn_t kernel, Plan plan, std::function<int()> then = nullptr);
  /// After the current phase's progress: its result, or what `then` makes of it.
  int finish_phase(int rc);

  /// Scratch of `bytes` from the communicator's pool into `lease`.
  int take_scratch(chorus::sdk::ScratchPool::Lease& lease, size_t bytes);
  /// Registers `bytes` at `buf` for this call (nothing for 0 bytes).
  int register_work(const void* buf, size_t bytes, chorus_tp_mr_t** mr);
  chorus_reduce_fn_t kernel_or_fail(int& rc);

  // The barrier: two laps of a one-byte token, one message at a time.
  int barrier_post();
  int barrier_complete(const chorus_tp_completion_t& c);

  const RingComm& ring_;
  const chorus_algo_env_v2_t* env_;
  chorus_algo_call_v2_t call_;
  size_t esize_ = 0;

  std::optional<Executor> exec_;
  std::function<int()> then_;
  chorus::sdk::ScratchPool::Lease scratch_, scratch2_;

  // all_to_all(v): the exchange's schedule, in-transit layout and counts.
  std::vector<Step> a2a_steps_;
  std::vector<Range> transit_;
  std::vector<size_t> a2a_counts_, a2a_offsets_;
  std::vector<uint64_t> counts_mine_, counts_all_;
  Place a2a_from_, a2a_to_, a2a_passing_;
  int mismatch_from_ = -1;

  // barrier: message k of 4 (a send or a receive each), posted or not.
  int barrier_step_ = -1;
  bool barrier_posted_ = false;
};

}  // namespace chorus::ring
