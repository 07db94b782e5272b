// The ring task's machinery (ring_task.h): dispatch of a call to its
// collective, phases of executors, scratch and registration, and the
// barrier's token passing. The collectives' setups are in
// ring_collectives.cc and ring_exchange.cc.
#include "algorithms/ring/ring_task.h"

#include <string>

namespace chorus::ring {

using chorus::sdk::LaneWrId;
using chorus::sdk::try_post;

Task::Task(const RingComm& ring, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t& call)
    : ring_(ring), env_(env), call_(call) {
  esize_ = call.dtype >= 0 ? chorus_dtype_size(call.dtype) : 1;
}

int Task::start() {
  switch (call_.collective) {
    case CHORUS_COLL_ALL_REDUCE:
      return start_all_reduce();
    case CHORUS_COLL_ALL_GATHER:
      return start_all_gather(call_.in, call_.out, call_.count);
    case CHORUS_COLL_REDUCE_SCATTER:
      return start_reduce_scatter();
    case CHORUS_COLL_BROADCAST:
      return start_broadcast();
    case CHORUS_COLL_BARRIER:
      return start_barrier();
    case CHORUS_COLL_REDUCE:
      return start_reduce();
    case CHORUS_COLL_GATHER:
      return start_gather();
    case CHORUS_COLL_SCATTER:
      return start_scatter();
    case CHORUS_COLL_ALL_TO_ALL:
      return start_all_to_all();
    case CHORUS_COLL_ALL_TO_ALLV:
      return start_all_to_allv();
    default:
      return fail(env_, CHORUS_ERR_NOT_SUPPORTED,
                  "ring: collective " + std::to_string(call_.collective) +
                      " is not one the ring implements (a newer core than this plugin?)");
  }
}

int Task::progress(const chorus_tp_completion_t* completions, size_t n) {
  if (barrier_step_ >= 0) {
    for (size_t i = 0; i < n; ++i)
      if (int rc = barrier_complete(completions[i]); rc != CHORUS_OK) return rc;
    return barrier_post();
  }
  if (!exec_)
    return fail(env_, CHORUS_ERR_INTERNAL, "ring: progress on a task that has nothing running");
  for (size_t i = 0; i < n; ++i)
    if (int rc = exec_->complete(completions[i]); rc != CHORUS_OK) return rc;
  return finish_phase(exec_->advance());
}

int Task::run(Place work, chorus_reduce_fn_t kernel, Plan plan, std::function<int()> then) {
  exec_.emplace(env_, ring_.settings, work, esize_, kernel, std::move(plan));
  then_ = std::move(then);
  return finish_phase(exec_->start());
}

int Task::finish_phase(int rc) {
  // `then` may start another phase, which sets its own `then`: take it out
  // of the member before calling it.
  while (rc == CHORUS_ALGO_TASK_DONE && then_) {
    std::function<int()> next = std::move(then_);
    then_ = nullptr;
    rc = next();
  }
  return rc;
}

int Task::take_scratch(chorus::sdk::ScratchPool::Lease& lease, size_t bytes) {
  bool ok = true;
  lease = ring_.scratch.take(bytes, ok);
  if (!ok)
    return fail(env_, CHORUS_ERR_SYSTEM,
                "ring: out of memory for " + std::to_string(bytes) + " bytes of scratch");
  return CHORUS_OK;
}

int Task::register_work(const void* buf, size_t bytes, chorus_tp_mr_t** mr) {
  *mr = nullptr;
  if (bytes == 0) return CHORUS_OK;
  return env_->mem_register(env_->core, buf, bytes, mr);
}

chorus_reduce_fn_t Task::kernel_or_fail(int& rc) {
  chorus_reduce_fn_t kernel = env_->reduce_kernel(call_.dtype, call_.op);
  rc = kernel ? CHORUS_OK
              : fail(env_, CHORUS_ERR_INVALID_ARGUMENT,
                     "ring: no reduction kernel for dtype " + std::to_string(call_.dtype) +
                         " and op " + std::to_string(call_.op));
  return kernel;
}

/// Two laps of a one-byte token: after the first, rank 0 knows everyone has
/// arrived; the second lap releases the ranks. Rank 0 sends first; every
/// other rank receives from its left neighbour, then passes the token right.
/// The token sits in staging slot 0 (byte 0 receives, byte 1 sends).
int Task::start_barrier() {
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  if (env_->staging_slots < 1 || env_->staging_slot_size < 2)
    return fail(env_, CHORUS_ERR_INTERNAL, "ring barrier: the core gave the task no staging slot");
  static_cast<std::byte*>(env_->staging[0])[1] = std::byte{1};
  barrier_step_ = 0;
  return barrier_post();
}

int Task::barrier_post() {
  if (barrier_step_ >= 4) return CHORUS_ALGO_TASK_DONE;
  if (barrier_posted_) return CHORUS_ALGO_TASK_PENDING;
  const bool send = (env_->rank == 0) == (barrier_step_ % 2 == 0);
  const int peer = mod(env_->rank + (send ? 1 : -1), env_->size);
  chorus_tp_endpoint_t* ep = env_->endpoint(env_->core, peer, 0);
  if (!ep)
    return fail(env_, CHORUS_ERR_INTERNAL,
                "ring barrier: no endpoint to rank " + std::to_string(peer) +
                    " (the core did not connect a ring neighbour)");
  auto* token = static_cast<std::byte*>(env_->staging[0]) + (send ? 1 : 0);
  const int rc = try_post(env_, send, ep, peer, token, 1, env_->staging_mr[0],
                          LaneWrId::pack(send, 0, uint64_t(barrier_step_)), "ring barrier");
  if (rc == CHORUS_ERR_AGAIN) return CHORUS_ALGO_TASK_PENDING;  // the core calls again
  if (rc != CHORUS_OK) return rc;
  barrier_posted_ = true;
  return CHORUS_ALGO_TASK_PENDING;
}

int Task::barrier_complete(const chorus_tp_completion_t& c) {
  if (!barrier_posted_ || LaneWrId::seq(c.wr_id) != uint64_t(barrier_step_))
    return fail(env_, CHORUS_ERR_INTERNAL,
                "ring barrier: completion for message " + std::to_string(LaneWrId::seq(c.wr_id)) +
                    " while waiting for message " + std::to_string(barrier_step_));
  barrier_posted_ = false;
  ++barrier_step_;
  return CHORUS_OK;
}

}  // namespace chorus::ring
