// The mesh barrier's posting and completion handling (mesh_barrier.h).
#include "algorithms/mesh/mesh_barrier.h"

#include "algorithms/mesh/mesh_schedule.h"

#include <string>

namespace chorus::mesh {

using sdk::fail;
using sdk::WrId;

int Barrier::start(int radix) {
  const int size = env_->size;
  const int rank = env_->rank;
  radix_ = radix;
  rounds_ = barrier_rounds(size, radix);
  recv_left_.assign(size_t(rounds_), 0);
  auto* tokens = static_cast<std::byte*>(env_->staging[0]);
  auto* token = static_cast<std::byte*>(env_->staging[1]);
  token[0] = std::byte{1};
  size_t at = 0;  // received tokens share slot 0, one byte each
  for (int k = 0; k < rounds_; ++k)
    for (int j = 1; j < radix; ++j)
      if (int d = barrier_distance(size, radix, k, j); d > 0) {
        poster_.recv(mod(rank - d, size), 0, tokens + at % env_->staging_slot_size, 1,
                     env_->staging_mr[0], uint64_t(k));
        ++at;
        ++recv_left_[size_t(k)];
      }
  return advance();
}

/// Queues the tokens of every round the landed ones allow: round k goes out
/// once rounds 0..k-1 have all been heard.
void Barrier::queue_sends() {
  const int size = env_->size;
  while (rounds_done_ < rounds_ && recv_left_[size_t(rounds_done_)] == 0) ++rounds_done_;
  auto* token = static_cast<std::byte*>(env_->staging[1]);
  for (; rounds_sent_ < rounds_ && rounds_sent_ <= rounds_done_; ++rounds_sent_)
    for (int j = 1; j < radix_; ++j)
      if (int d = barrier_distance(size, radix_, rounds_sent_, j); d > 0)
        poster_.send(mod(env_->rank + d, size), 0, token, 1, env_->staging_mr[1],
                     uint64_t(rounds_sent_));
}

int Barrier::advance() {
  queue_sends();
  if (int rc = poster_.pump(); rc != CHORUS_OK) return rc;
  if (rounds_sent_ == rounds_ && poster_.done()) return CHORUS_ALGO_TASK_DONE;
  return CHORUS_ALGO_TASK_PENDING;
}

int Barrier::progress(const chorus_tp_completion_t* completions, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const chorus_tp_completion_t& c = completions[i];
    const uint64_t round = WrId::index(c.wr_id);
    if (round >= uint64_t(rounds_))
      return fail(
          env_, CHORUS_ERR_INTERNAL,
          "mesh barrier: completion for an unknown round (wr_id " + std::to_string(c.wr_id) + ")");
    if (WrId::is_send(c.wr_id)) continue;
    if (c.byte_len != 1)
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "mesh barrier: rank " + std::to_string(WrId::peer(c.wr_id)) + " sent " +
                      std::to_string(c.byte_len) +
                      " bytes where a one-byte token was expected; do all ranks call barrier "
                      "with the same algorithm.mesh settings?");
    --recv_left_[size_t(round)];
  }
  poster_.completed(n);
  return advance();
}

}  // namespace chorus::mesh
