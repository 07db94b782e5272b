// Internals shared by the files that implement Communicator, and by no one
// else. Where each part of Communicator lives:
//   communicator.cc           create, init, abort, usable/broken, finalize
//   communicator_select.cc    transport and algorithm choice, fingerprint
//   communicator_wireup.cc    context, endpoints, address exchange, staging
//   communicator_dispatch.cc  running one collective or p2p call
//   communicator_checks.cc    issue-time argument checks
//   request_queue.cc          Request, the issue-order queue, the worker
//   proxied_ops.cc            the transport ops an algorithm posts through
//   algorithm_env.cc          the host callbacks an algorithm gets
//   algorithm_tasks.cc        algorithm ABI v2: comm_init/fini, running a task
//   peer_notices.cc           peer-loss, timeout and finalize notices
//   signature_exchange.cc     call signatures and mismatches
//   communicator_counters.cc  counters
//   communicator_split.cc     split, spawn
//   communicator_lanes.cc     lanes (collectives.lanes)
#pragma once

#include "core/communicator.h"
#include "core/limits.h"
#include "core/reduce.h"
#include "core/status.h"

#include <chrono>
#include <cstddef>

namespace chorus::core {

/// Counters of one peer, updated by the executing thread and read by any
/// thread (relaxed atomics: each value is exact, a snapshot is not atomic
/// across values).
struct PeerCounters {
  std::atomic<uint64_t> bytes_sent{0}, msgs_sent{0}, bytes_recv{0}, msgs_recv{0};
};

/// The communicator whose call is running on this thread (algorithms call the
/// proxy transport ops from the thread that called the collective). Set by
/// the dispatching code in communicator_dispatch.cc for the length of a call;
/// defined in proxied_ops.cc.
extern thread_local Communicator* t_running;

/// Whether the transport has interrupt() (appended to the v1 table; older
/// plugins lack it, and their waits must then be kept short).
inline bool can_interrupt(const chorus_transport_plugin_v1_t* tp) {
  return tp &&
         tp->struct_size >= offsetof(chorus_transport_plugin_v1_t, interrupt) + sizeof(void*) &&
         tp->interrupt;
}

/// Wakes a wait() sleeping in `ctx`, where the transport can.
inline void interrupt_wait(const chorus_transport_plugin_v1_t* tp, chorus_tp_context_t* ctx) {
  if (ctx && can_interrupt(tp)) tp->interrupt(ctx);
}

/// Adds the time since `t0` to a wait counter (wait.transport_ns).
inline void add_wait_ns(std::atomic<uint64_t>& counter, std::chrono::steady_clock::time_point t0) {
  counter.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count()),
                    std::memory_order_relaxed);
}

/// A configured timeout as milliseconds for Deadline::after: saturating (a
/// timeout too large to represent becomes milliseconds::max(), which
/// Deadline::after turns into "no deadline") and at least 1 ms when positive.
inline std::chrono::milliseconds seconds_ms(double s) {
  return timeout_ms_from_seconds(s).value_or(std::chrono::milliseconds::max());
}

/// Validates a buffer of `count` * `blocks` elements of `dtype`: its byte
/// size must not exceed kMaxBufferBytes (so no later count, chunk or offset
/// arithmetic can wrap) and it must not run past the end of the address space.
Status check_buffer(const void* p, size_t count, size_t blocks, int dtype, const char* name);

/// INVALID_ARGUMENT when no reduction kernel exists for (dtype, op), with the
/// reason.
Status check_op(int dtype, int op);

template <class Env>
void Communicator::fill_env_common(Env& env) {
  env.struct_size = sizeof(env);
  env.rank = rank_;
  env.size = size_;
  env.channels = cfg_.channels;
  env.tp = &proxy_;
  env.tp_ctx = ctx_;
  env.caps = &caps_;
  // One call at a time: it has every staging slot.
  env.staging_slots = staging_.size();
  env.staging_slot_size = cfg_.staging_slot_size;
  env.staging = staging_.data();
  env.staging_mr = staging_mr_.data();
  env.core = this;
  env.endpoint = &Communicator::env_endpoint;
  env.reduce_kernel = &reduce_kernel;
  env.mem_register = &Communicator::env_mem_register;
  env.fail = &Communicator::env_fail;
  env.log = &Communicator::env_log;
}

}  // namespace chorus::core
