// The mesh's dissemination barrier as a non-blocking state machine for an
// algorithm ABI v2 task (partners and rounds: mesh_schedule.h).
//
// Every receive is posted up front (each round hears from distinct peers,
// one token per endpoint per barrier); round k's tokens go out once every
// earlier round's have landed. The barrier is done only when its own sends
// have completed too, so no completion of it is left for the next call.
// Tokens live in the task's staging slots 0 (received) and 1 (sent).
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include <vector>

namespace chorus::mesh {

class Barrier {
 public:
  /// `env` outlives the barrier (it is the task's).
  explicit Barrier(const chorus_algo_env_v2_t* env) : env_(env), poster_(env) {}

  /// Posts the receives and round 0's tokens. `radix` >= 2. Never blocks;
  /// returns CHORUS_ALGO_TASK_DONE, _PENDING or a negative status.
  int start(int radix);
  /// Counts landed tokens and sends the rounds that unlocks. Never blocks.
  int progress(const chorus_tp_completion_t* completions, size_t n);

 private:
  void queue_sends();
  int advance();

  const chorus_algo_env_v2_t* env_;
  sdk::Poster poster_;
  int radix_ = 2;
  int rounds_ = 0;
  int rounds_done_ = 0;  // leading rounds whose tokens have all landed
  int rounds_sent_ = 0;  // leading rounds whose tokens are queued
  std::vector<int> recv_left_;
};

}  // namespace chorus::mesh
