// The ring's executor: runs one schedule (a Plan over ring_schedule.h) as a
// non-blocking state machine on the algorithm SDK's lane pipelines. It owns
// the lanes, their staging slots and their posts; the task (ring_task.h)
// decides which plans run and hands it completions.
//
// Each channel to the right/left neighbour is a lane that carries its own
// slice of every chunk, so lanes never touch each other's memory or slots and
// run concurrently over separate endpoints. Within a lane, chunks are cut
// into pieces of one staging slot; a piece is forwarded as soon as the piece
// it depends on has landed, so steps overlap (a pipeline, as in JACCL's
// ring).
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include "algorithms/ring/ring_schedule.h"
#include "algorithms/ring/ring_settings.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace chorus::ring {

/// Records `message` for the host's last-error text and returns `status`.
inline int fail(const chorus_algo_env_v2_t* env, int status, const std::string& message) {
  return chorus::sdk::fail(env, status, message);
}

/// A buffer chunks live in, with its registration.
struct Place {
  std::byte* base = nullptr;
  chorus_tp_mr_t* mr = nullptr;
};

/// What one executor runs: a schedule over chunks of one or more buffers.
struct Plan {
  int steps = 0;
  /// Step u in the forward (false) or reverse (true) ring.
  std::function<Step(int, bool)> step;
  std::function<Range(int)> chunk;
  /// all_gather with a separate input: chunk `own_chunk` is sent from
  /// `own_in` and copied into the work buffer only after the first posts,
  /// so the copy overlaps the neighbour's read of it.
  int own_chunk = -1;
  const std::byte* own_in = nullptr;
  chorus_tp_mr_t* own_in_mr = nullptr;
  /// Chunks spread over several buffers: where chunk c lives (the offsets
  /// of `chunk` are then relative to that base). Empty: the work buffer.
  std::function<Place(int)> place;
  /// Nothing is staged or reduced and no chain forwards pieces (all_gather):
  /// pieces may be as large as sdk::in_place_post_bytes allows.
  bool in_place_posts = false;
  /// Run every lane forward, whatever algorithm.ring.bidirectional says:
  /// for schedules whose chunk numbering does not survive mirroring.
  bool forward_only = false;
};

/// One schedule in flight. Never blocks: start() and advance() post what
/// the transport takes, complete() takes one completion of its own posts.
/// Touches only its task's env, buffers and slots, so executors of different
/// tasks run side by side.
class Executor {
 public:
  /// `work` holds the chunks unless `plan.place` says otherwise; `kernel`
  /// reduces received pieces for steps with `reduce` (nullptr otherwise).
  Executor(const chorus_algo_env_v2_t* env, const Settings& settings, Place work, size_t esize,
           chorus_reduce_fn_t kernel, Plan plan);

  /// Checks the lanes' endpoints, then advance().
  int start();
  /// Posts what fits now; the first call also copies the own chunk
  /// (plan.own_in). CHORUS_ALGO_TASK_DONE once every post completed,
  /// CHORUS_ALGO_TASK_PENDING, or a failure (recorded).
  int advance();
  /// One completion of this executor's posts (wr_id without the core's bits).
  int complete(const chorus_tp_completion_t& c);

 private:
  struct PostedRecv {
    int step = 0;
    size_t piece = 0;
    long slot = -1;  // -1: received in place
  };
  struct Lane {
    uint32_t id = 0;
    bool reverse = false;  // sends left and receives from the right
    int to = 0, from = 0;  // the neighbours it sends to and receives from
    chorus_tp_endpoint_t* ep_send = nullptr;
    chorus_tp_endpoint_t* ep_recv = nullptr;
    chorus::sdk::SlotPool slots;
    std::vector<size_t> recv_start;  // receive sequence index of (step u, piece 0)
    chorus::sdk::Flow sends, recvs;
    int send_step = 0, recv_step = 0;
    size_t send_piece = 0, recv_piece = 0;
    chorus::sdk::PostedQueue<PostedRecv> posted;
  };

  Place place(int c) const { return plan_.place ? plan_.place(c) : work_; }
  /// This lane's slice of chunk `c`.
  Range sub(const Lane& lane, int c) const;
  Range piece_range(const Lane& lane, int c, size_t k) const;
  /// Advances a (step, piece) cursor past steps with nothing to move in `dir`.
  void settle(int& step, size_t& piece, bool send, const Lane& lane) const;
  /// Posts the lane's next receives and sends (sends first for in-place
  /// plans). Sets `again_` when the transport refused one for now.
  int pump(Lane& lane);
  int pump_recvs(Lane& lane);
  int pump_sends(Lane& lane);

  const chorus_algo_env_v2_t* env_;
  Place work_;
  size_t esize_;
  chorus_reduce_fn_t kernel_;
  Plan plan_;
  size_t piece_ = 1;
  std::vector<Lane> lanes_;
  bool own_copied_ = true;
  bool again_ = false;
};

}  // namespace chorus::ring
