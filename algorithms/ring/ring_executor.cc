// The ring executor (ring_executor.h): lanes, their pipelines of pieces, and
// the reduction of received partial sums out of staging slots.
#include "algorithms/ring/ring_executor.h"

#include <algorithm>
#include <cstring>

namespace chorus::ring {

using chorus::sdk::Flow;
using chorus::sdk::LaneWrId;
using chorus::sdk::SlotPool;
using chorus::sdk::try_post;

Executor::Executor(const chorus_algo_env_v2_t* env, const Settings& settings, Place work,
                   size_t esize, chorus_reduce_fn_t kernel, Plan plan)
    : env_(env), work_(work), esize_(esize), kernel_(kernel), plan_(std::move(plan)) {
  const size_t piece_bytes = plan_.in_place_posts && !kernel_
                                 ? chorus::sdk::in_place_post_bytes(env)
                                 : env->staging_slot_size;
  piece_ = std::max<size_t>(1, piece_bytes / esize);
  own_copied_ = plan_.own_in == nullptr;
  // Lanes: one per channel, or a forward and a reverse one per channel when
  // running both ways (pointless with two ranks: both neighbours are one
  // peer, and the two directions would share its endpoints' receive order).
  const bool both_ways = settings.bidirectional && env->size > 2 && !plan_.forward_only;
  const int wanted = both_ways ? 2 * env->channels : env->channels;
  const int lanes =
      std::max(1, std::min<int>({wanted, int(env->staging_slots), int(LaneWrId::kMaxLanes)}));
  const int right = mod(env->rank + 1, env->size);
  const int left = mod(env->rank - 1, env->size);
  lanes_.resize(size_t(lanes));
  for (int l = 0; l < lanes; ++l) {
    Lane& lane = lanes_[size_t(l)];
    lane.id = uint32_t(l);
    lane.reverse = both_ways && l % 2 == 1;
    const int channel = both_ways ? l / 2 : l;
    lane.to = lane.reverse ? left : right;
    lane.from = lane.reverse ? right : left;
    lane.ep_send = env->endpoint(env->core, lane.to, channel);
    lane.ep_recv = env->endpoint(env->core, lane.from, channel);
    lane.slots = SlotPool::share(env, size_t(lanes), size_t(l));
    lane.sends.window =
        Flow::window_for(2 * lane.slots.capacity(), env->caps->max_outstanding_sends);
    lane.recvs.window =
        Flow::window_for(2 * lane.slots.capacity(), env->caps->max_outstanding_recvs);
    lane.posted = chorus::sdk::PostedQueue<PostedRecv>(lane.recvs.window);
    lane.recv_start.assign(size_t(plan_.steps) + 1, 0);
    for (int u = 0; u < plan_.steps; ++u) {
      const Step st = plan_.step(u, lane.reverse);
      const size_t n = st.recv_chunk >= 0 ? piece_count(sub(lane, st.recv_chunk).count, piece_) : 0;
      lane.recv_start[size_t(u) + 1] = lane.recv_start[size_t(u)] + n;
      if (st.send_chunk >= 0)
        lane.sends.total += piece_count(sub(lane, st.send_chunk).count, piece_);
    }
    lane.recvs.total = lane.recv_start.back();
  }
}

Range Executor::sub(const Lane& lane, int c) const {
  const Range whole = plan_.chunk(c);
  const Range part = split(whole.count, int(lanes_.size()), int(lane.id));
  return {whole.offset + part.offset, part.count};
}

Range Executor::piece_range(const Lane& lane, int c, size_t k) const {
  const Range s = sub(lane, c);
  const size_t off = k * piece_;
  return {s.offset + off, std::min(piece_, s.count - off)};
}

void Executor::settle(int& step, size_t& piece, bool send, const Lane& lane) const {
  while (step < plan_.steps) {
    const Step st = plan_.step(step, lane.reverse);
    const int c = send ? st.send_chunk : st.recv_chunk;
    if (c >= 0 && piece < piece_count(sub(lane, c).count, piece_)) return;
    ++step;
    piece = 0;
  }
}

int Executor::start() {
  for (const Lane& lane : lanes_)
    if ((lane.sends.total && !lane.ep_send) || (lane.recvs.total && !lane.ep_recv))
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "ring: lane " + std::to_string(lane.id) + " has no endpoint to rank " +
                      std::to_string(lane.sends.total && !lane.ep_send ? lane.to : lane.from) +
                      " (the core did not connect a ring neighbour)");
  return advance();
}

int Executor::advance() {
  again_ = false;
  bool done = true, outstanding = false;
  for (Lane& lane : lanes_) {
    if (int rc = pump(lane); rc != CHORUS_OK) return rc;
    done = done && lane.sends.finished() && lane.recvs.finished();
    outstanding = outstanding || lane.sends.outstanding() || lane.recvs.outstanding();
  }
  if (!own_copied_) {
    const Range own = plan_.chunk(plan_.own_chunk);
    std::memcpy(work_.base + own.offset * esize_, plan_.own_in, own.count * esize_);
    own_copied_ = true;
  }
  if (done) return CHORUS_ALGO_TASK_DONE;
  if (!outstanding && !again_)
    return fail(env_, CHORUS_ERR_INTERNAL, "ring: schedule stalled with nothing in flight");
  return CHORUS_ALGO_TASK_PENDING;
}

int Executor::pump(Lane& lane) {
  // Receives first, so the peer's sends find a buffer waiting; except for
  // plans that land in place (all_gather): there a receive post may copy a
  // large message at once (shm reads a by-reference message inside
  // post_recv), so the sends go first and the neighbour can start reading
  // this rank's block while it copies its own.
  if (plan_.in_place_posts && !kernel_) {
    if (int rc = pump_sends(lane); rc != CHORUS_OK) return rc;
    if (int rc = pump_recvs(lane); rc != CHORUS_OK) return rc;
    return pump_sends(lane);
  }
  if (int rc = pump_recvs(lane); rc != CHORUS_OK) return rc;
  return pump_sends(lane);
}

int Executor::pump_recvs(Lane& lane) {
  for (;;) {
    settle(lane.recv_step, lane.recv_piece, false, lane);
    if (!lane.recvs.open()) break;
    const Step st = plan_.step(lane.recv_step, lane.reverse);
    const Range r = piece_range(lane, st.recv_chunk, lane.recv_piece);
    const Place at = place(st.recv_chunk);
    void* buf = at.base + r.offset * esize_;
    chorus_tp_mr_t* mr = at.mr;
    long slot = -1;
    if (st.reduce) {
      if (lane.slots.empty()) break;
      slot = long(lane.slots.acquire());
      buf = lane.slots.data(size_t(slot));
      mr = lane.slots.mr(size_t(slot));
    }
    const uint64_t wr = LaneWrId::pack(false, lane.id, lane.recvs.posted);
    const int rc =
        try_post(env_, false, lane.ep_recv, lane.from, buf, r.count * esize_, mr, wr, "ring");
    if (rc != CHORUS_OK) {
      if (slot >= 0) lane.slots.release(size_t(slot));
      if (rc != CHORUS_ERR_AGAIN) return rc;
      again_ = true;
      break;
    }
    lane.posted.push({lane.recv_step, lane.recv_piece, slot});
    ++lane.recvs.posted;
    ++lane.recv_piece;
  }
  return CHORUS_OK;
}

int Executor::pump_sends(Lane& lane) {
  for (;;) {
    settle(lane.send_step, lane.send_piece, true, lane);
    if (!lane.sends.open()) break;
    const Step st = plan_.step(lane.send_step, lane.reverse);
    if (st.send_after >= 0 &&
        lane.recvs.done <= lane.recv_start[size_t(st.send_after)] + lane.send_piece)
      break;  // the data this piece forwards has not landed yet
    const Range r = piece_range(lane, st.send_chunk, lane.send_piece);
    const Place at = place(st.send_chunk);
    const std::byte* src = at.base + r.offset * esize_;
    chorus_tp_mr_t* mr = at.mr;
    if (plan_.own_in && st.send_chunk == plan_.own_chunk) {
      src = plan_.own_in + (r.offset - plan_.chunk(st.send_chunk).offset) * esize_;
      mr = plan_.own_in_mr;
    }
    const uint64_t wr = LaneWrId::pack(true, lane.id, lane.sends.posted);
    const int rc =
        try_post(env_, true, lane.ep_send, lane.to, src, r.count * esize_, mr, wr, "ring");
    if (rc == CHORUS_ERR_AGAIN) {
      again_ = true;
      break;
    }
    if (rc != CHORUS_OK) return rc;
    ++lane.sends.posted;
    ++lane.send_piece;
  }
  return CHORUS_OK;
}

int Executor::complete(const chorus_tp_completion_t& c) {
  const uint32_t l = LaneWrId::lane(c.wr_id);
  if (l >= lanes_.size())
    return fail(env_, CHORUS_ERR_INTERNAL,
                "ring: completion for unknown lane " + std::to_string(l) + " (wr_id " +
                    std::to_string(c.wr_id) + ")");
  Lane& lane = lanes_[l];
  if (LaneWrId::is_send(c.wr_id)) {
    ++lane.sends.done;
    return CHORUS_OK;
  }
  if (lane.posted.empty())
    return fail(env_, CHORUS_ERR_INTERNAL, "ring: receive completion with none posted");
  const PostedRecv p = lane.posted.pop();
  const Step st = plan_.step(p.step, lane.reverse);
  const Range r = piece_range(lane, st.recv_chunk, p.piece);
  if (c.byte_len != r.count * esize_)
    return fail(env_, CHORUS_ERR_INTERNAL,
                "ring: received " + std::to_string(c.byte_len) + " bytes from rank " +
                    std::to_string(lane.from) + " where " + std::to_string(r.count * esize_) +
                    " were expected; do all ranks pass the same count and dtype?");
  if (p.slot >= 0) {
    kernel_(lane.slots.data(size_t(p.slot)), place(st.recv_chunk).base + r.offset * esize_,
            r.count);
    lane.slots.release(size_t(p.slot));
  }
  ++lane.recvs.done;
  return CHORUS_OK;
}

}  // namespace chorus::ring
