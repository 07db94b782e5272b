// The mesh executor's state machine (mesh_executor.h): layout of lanes,
// streams and staging cells at start, posting under windows and data
// dependencies, completion checks and the rank-order reduction of pieces.
#include "algorithms/mesh/mesh_executor.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::mesh {

using sdk::fail;
using sdk::WrId;

static_assert(kLaneBits + kSeqBits <= 35, "the mesh's index must fit the SDK's wr_id index");
static_assert(post_index(kMaxLanes - 1, kSeqMask) <= WrId::kIndexMask);

int Executor::start(const Call& call) {
  call_ = call;
  own_copied_ = call_.own_in == nullptr;
  if (int rc = setup(); rc != CHORUS_OK) return rc;
  return advance();
}

int Executor::progress(const chorus_tp_completion_t* completions, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (int rc = complete(completions[i]); rc != CHORUS_OK) return rc;
  if (reducing_)
    for (Lane& lane : lanes_) try_reduce(lane);
  return advance();
}

int Executor::setup() {
  const int size = env_->size;
  const int rank = env_->rank;
  const size_t esize = call_.esize;
  reducing_ = reduces(call_.kind);
  uint64_t max_msg = env_->caps->max_message_size ? env_->caps->max_message_size : UINT64_MAX;
  int lanes = std::max(1, std::min(env_->channels, kMaxLanes));
  if (uint64_t(size - 1) > WrId::kPeerMask)
    return fail(env_, CHORUS_ERR_NOT_SUPPORTED,
                "mesh: more ranks (" + std::to_string(size) + ") than work-request ids can name (" +
                    std::to_string(WrId::kPeerMask + 1) + "); use the ring");
  if (reducing_) {
    layout_ = cell_layout(env_->staging_slots, env_->staging_slot_size, lanes, size - 1, max_msg);
    lanes = layout_.lanes;
    piece_bytes_ = layout_.piece_bytes;
    if (layout_.temporary) {
      // Staging too small for size-1 cells per piece in flight: one buffer
      // of this task, registered like caller memory.
      size_t bytes = layout_.cells() * layout_.piece_bytes;
      temp_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      if (int rc = register_buffer(env_, temp_.get(), bytes, &temp_mr_); rc != CHORUS_OK) return rc;
    }
  } else {
    // all_gather sends every block straight to every peer (nothing is
    // forwarded), so its posts may be larger than a slot.
    const size_t cut = call_.kind == Kind::kAllGather ? chorus::sdk::in_place_post_bytes(env_)
                                                      : env_->staging_slot_size;
    piece_bytes_ = direct_piece_bytes(cut, max_msg, esize);
  }
  piece_ = piece_bytes_ / esize;
  if (piece_ == 0)
    return fail(env_, CHORUS_ERR_INTERNAL, "mesh: transport messages are smaller than one element");

  // An in-place all_reduce reads and writes the same buffer: the own
  // contribution must be saved before rank 0's is stored over it, results
  // must not overwrite data still being sent, and gathered chunks must not
  // land where a send of this call may still read.
  bool in_place = reducing_ && static_cast<const void*>(call_.dst) == call_.src;
  save_own_ = in_place && rank != 0;
  gate_reduce_on_sends_ = in_place && call_.kind == Kind::kAllReduceOneShot;
  gate_gather_on_sends_ = in_place;

  send_window_ = std::max<size_t>(1, env_->caps->max_outstanding_sends);
  recv_window_ = std::max<size_t>(1, env_->caps->max_outstanding_recvs);

  Reduction red = reduction(call_.kind, rank, size, call_.count, call_.root);
  lanes_.resize(size_t(lanes));
  for (int l = 0; l < lanes; ++l) {
    Lane& lane = lanes_[size_t(l)];
    lane.id = l;
    if (reducing_) {
      lane.own = lane_slice(red.own, lanes, l);
      lane.result = lane_slice(red.result, lanes, l);
      lane.pieces = piece_count(lane.result.count, piece_);
      lane.landed.assign(layout_.groups, 0);
    }
    lane.streams.resize(size_t(size));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      Stream& s = lane.streams[size_t(p)];
      Exchange x = call_.kind == Kind::kAllToAll
                       ? all_to_all_exchange(call_.send_offsets[p], call_.send_counts[p],
                                             call_.recv_offsets[p], call_.recv_counts[p])
                       : exchange(call_.kind, rank, size, p, call_.count, call_.root);
      s.peer = p;
      s.reduce_send = lane_slice(x.reduce_send, lanes, l);
      s.reduce_recv = lane_slice(x.reduce_recv, lanes, l);
      s.gather_send = lane_slice(x.gather_send, lanes, l);
      s.gather_recv = lane_slice(x.gather_recv, lanes, l);
      s.reduce_send_n = piece_count(s.reduce_send.count, piece_);
      s.reduce_recv_n = piece_count(s.reduce_recv.count, piece_);
      s.gather_send_n = piece_count(s.gather_send.count, piece_);
      s.gather_recv_n = piece_count(s.gather_recv.count, piece_);
      if (s.send_total() == 0 && s.recv_total() == 0) continue;  // ep stays NULL: idle
      s.ep = env_->endpoint(env_->core, p, l);
      if (!s.ep)
        return fail(env_, CHORUS_ERR_INTERNAL,
                    "mesh: no endpoint to rank " + std::to_string(p) + " on channel " +
                        std::to_string(l) + "; the mesh needs every pair of ranks connected");
    }
  }
  if (save_own_) {
    // One piece of the own contribution at a time, at most a lane's
    // result: an 8-byte call must not allocate (let alone clear) a whole
    // staging slot.
    size_t largest = 0;
    for (const Lane& lane : lanes_) largest = std::max(largest, lane.result.count * esize);
    own_copy_ = std::make_unique_for_overwrite<std::byte[]>(std::min(piece_bytes_, largest));
  }
  return CHORUS_OK;
}

int Executor::advance() {
  bool done = true;
  bool outstanding = false;
  refused_ = false;
  // all_gather: every send first. A receive post may copy a large message at
  // once (shm reads a by-reference message inside post_recv); posted after
  // the sends, it no longer holds back the peers' reads of this rank's block.
  if (call_.kind == Kind::kAllGather)
    for (Lane& lane : lanes_)
      for (Stream& s : lane.streams)
        if (s.ep)
          if (int rc = pump_sends(lane, s); rc != CHORUS_OK) return rc;
  for (Lane& lane : lanes_) {
    for (Stream& s : lane.streams) {
      if (!s.ep) continue;
      if (int rc = pump(lane, s); rc != CHORUS_OK) return rc;
      done = done && s.send_done == s.send_total() && s.recv_done == s.recv_total();
      outstanding = outstanding || s.send_posted > s.send_done || s.recv_posted > s.recv_done;
    }
    done = done && lane.reduced == lane.pieces;
  }
  if (!own_copied_) {
    // Every first receive and send is posted: copy the own block while the
    // peers fetch theirs (with CMA or RDMA they read `in` directly).
    std::memcpy(call_.dst + call_.own_offset * call_.esize, call_.own_in,
                call_.count * call_.esize);
    own_copied_ = true;
  }
  if (done) return CHORUS_ALGO_TASK_DONE;
  if (!outstanding && !refused_)
    return fail(env_, CHORUS_ERR_INTERNAL, "mesh: schedule stalled with nothing in flight");
  return CHORUS_ALGO_TASK_PENDING;
}

std::byte* Executor::cell(const Lane& lane, size_t group, int peer, chorus_tp_mr_t** mr) {
  CellPlace at =
      cell_place(layout_, cell_index(layout_, lane.id, group, peer_index(env_->rank, peer)));
  if (layout_.temporary) {
    *mr = temp_mr_;
    return temp_.get() + at.offset;
  }
  *mr = env_->staging_mr[at.slot];
  return static_cast<std::byte*>(env_->staging[at.slot]) + at.offset;
}

/// Posts what the windows, the free cells and the data dependencies allow
/// on one endpoint. Receives first, so the peer's sends find a buffer. A
/// refusal (CHORUS_ERR_AGAIN) stops that direction until the next advance.
int Executor::pump(Lane& lane, Stream& s) {
  const auto* tp = env_->tp;
  const size_t es = call_.esize;
  while (s.recv_posted < s.recv_total() && s.recv_posted - s.recv_done < recv_window_) {
    size_t idx = s.recv_posted;
    std::byte* buf;
    chorus_tp_mr_t* mr;
    Range r;
    if (idx < s.reduce_recv_n) {
      if (idx >= lane.reduced + layout_.groups) break;  // its cells still hold an older piece
      r = piece_of(s.reduce_recv, piece_, idx);
      buf = cell(lane, idx % layout_.groups, s.peer, &mr);
    } else {
      if (gate_gather_on_sends_ && s.send_done < s.reduce_send_n) break;
      r = piece_of(s.gather_recv, piece_, idx - s.reduce_recv_n);
      buf = call_.dst + r.offset * es;
      mr = call_.dst_mr;
    }
    const uint64_t wr = WrId::pack(false, s.peer, post_index(lane.id, idx));
    const int rc = tp->post_recv(s.ep, buf, r.count * es, mr, wr);
    if (rc == CHORUS_ERR_AGAIN) {
      refused_ = true;
      break;
    }
    if (rc != CHORUS_OK)
      return fail(env_, rc,
                  "mesh: post_recv from rank " + std::to_string(s.peer) + " on channel " +
                      std::to_string(lane.id) + " failed: " + tp->last_error());
    ++s.recv_posted;
  }
  return pump_sends(lane, s);
}

int Executor::pump_sends(Lane& lane, Stream& s) {
  const auto* tp = env_->tp;
  const size_t es = call_.esize;
  while (s.send_posted < s.send_total() && s.send_posted - s.send_done < send_window_) {
    size_t idx = s.send_posted;
    const std::byte* buf;
    chorus_tp_mr_t* mr;
    Range r;
    if (idx < s.reduce_send_n) {
      r = piece_of(s.reduce_send, piece_, idx);
      buf = call_.src + r.offset * es;
      mr = call_.src_mr;
    } else {
      size_t k = idx - s.reduce_send_n;
      if (reducing_ && k >= lane.reduced) break;  // this piece is not reduced yet
      r = piece_of(s.gather_send, piece_, k);
      buf = (call_.gather_src ? call_.gather_src : call_.dst) + r.offset * es;
      mr = call_.gather_src ? call_.gather_src_mr : call_.dst_mr;
      if (call_.own_in && r.offset >= call_.own_offset &&
          r.offset < call_.own_offset + call_.count) {
        buf = call_.own_in + (r.offset - call_.own_offset) * es;
        mr = call_.own_in_mr;
      }
    }
    const uint64_t wr = WrId::pack(true, s.peer, post_index(lane.id, idx));
    const int rc = tp->post_send(s.ep, buf, r.count * es, mr, wr);
    if (rc == CHORUS_ERR_AGAIN) {
      refused_ = true;
      break;
    }
    if (rc != CHORUS_OK)
      return fail(env_, rc,
                  "mesh: post_send to rank " + std::to_string(s.peer) + " on channel " +
                      std::to_string(lane.id) + " failed: " + tp->last_error());
    ++s.send_posted;
  }
  return CHORUS_OK;
}

int Executor::complete(const chorus_tp_completion_t& c) {
  const bool send = WrId::is_send(c.wr_id);
  const int peer = WrId::peer(c.wr_id);
  const uint64_t index = WrId::index(c.wr_id);
  const int lane_id = index_lane(index);
  if (lane_id >= int(lanes_.size()) || peer >= env_->size || peer == env_->rank ||
      !lanes_[size_t(lane_id)].streams[size_t(peer)].ep)
    return fail(env_, CHORUS_ERR_INTERNAL,
                "mesh: completion for an unknown endpoint (wr_id " + std::to_string(c.wr_id) + ")");
  Lane& lane = lanes_[size_t(lane_id)];
  Stream& s = lane.streams[size_t(peer)];
  size_t& done = send ? s.send_done : s.recv_done;
  if (!seq_matches(index, done) || done >= (send ? s.send_posted : s.recv_posted))
    return fail(env_, CHORUS_ERR_INTERNAL,
                "mesh: completions from rank " + std::to_string(peer) + " out of post order");
  size_t idx = done++;
  if (send) return CHORUS_OK;
  Range r = idx < s.reduce_recv_n ? piece_of(s.reduce_recv, piece_, idx)
                                  : piece_of(s.gather_recv, piece_, idx - s.reduce_recv_n);
  // INTERNAL, not INVALID_ARGUMENT: traffic has flowed, so the core must
  // mark the communicator broken (as the ring does for the same case).
  if (c.byte_len != r.count * call_.esize)
    return fail(env_, CHORUS_ERR_INTERNAL,
                "mesh: received " + std::to_string(c.byte_len) + " bytes from rank " +
                    std::to_string(peer) + " where " + std::to_string(r.count * call_.esize) +
                    " were expected; do all ranks pass the same count and dtype, and the same "
                    "algorithm.mesh settings (for all_to_allv: send_counts[" +
                    std::to_string(env_->rank) + "] on rank " + std::to_string(peer) +
                    " must equal recv_counts[" + std::to_string(peer) + "] here)?");
  if (idx < s.reduce_recv_n) ++lane.landed[idx % layout_.groups];
  return CHORUS_OK;
}

/// Reduces, in piece order, every piece whose contributions have all landed
/// (and, in place, whose memory no send still reads).
void Executor::try_reduce(Lane& lane) {
  const int size = env_->size;
  const int rank = env_->rank;
  const size_t es = call_.esize;
  while (lane.reduced < lane.pieces) {
    size_t k = lane.reduced;
    size_t group = k % layout_.groups;
    if (lane.landed[group] != size - 1) return;
    if (gate_reduce_on_sends_)
      for (const Stream& s : lane.streams)
        if (s.ep && s.send_done <= k) return;
    Range res = piece_of(lane.result, piece_, k);
    Range own = piece_of(lane.own, piece_, k);
    std::byte* out = call_.dst + res.offset * es;
    const std::byte* mine = call_.src + own.offset * es;
    size_t bytes = res.count * es;
    if (save_own_) {
      std::memcpy(own_copy_.get(), mine, bytes);
      mine = own_copy_.get();
    }
    auto contribution = [&](int j) -> const std::byte* {
      if (j == rank) return mine;
      chorus_tp_mr_t* unused;
      return cell(lane, group, j, &unused);
    };
    reduce_in_rank_order(
        size,
        [&](int j) {
          const std::byte* c = contribution(j);
          if (c != out) std::memcpy(out, c, bytes);
        },
        [&](int j) { call_.kernel(contribution(j), out, res.count); });
    lane.landed[group] = 0;
    ++lane.reduced;
  }
}

}  // namespace chorus::mesh
