// One pairwise transfer of a halving-doubling task (hd_schedule.h's Transfer),
// run without blocking: the executor half of the plugin. It posts what the
// windows and the free staging slots allow, takes the transfer's completions
// one at a time, and says when every post of the transfer has completed. It
// never waits: the core calls the task again when completions arrive, or
// with none after a post was refused with CHORUS_ERR_AGAIN.
//
// Within a transfer the data is cut into pieces of at most one staging slot
// (and one transport message), striped over the channels: piece k goes on
// channel k % channels, and both ends post their pieces in order, so each
// endpoint's messages match. Pieces to be reduced land in staging slots and
// are reduced into the work buffer as they complete; pieces that are only
// copied land in the work buffer directly. Sends and receives sit in two
// separate Posters, so a refused send never holds back a receive the peer's
// sends are waiting for.
#pragma once

#include <chorus/algorithm_sdk.hpp>

#include "hd_schedule.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::hd {

class Exchange {
 public:
  /// Posts in flight per direction; never more than the transport allows.
  static constexpr size_t kWindow = 64;
  /// wr_id index layout: the transfer's number above the piece's.
  static constexpr int kPieceBits = 28;
  static constexpr uint64_t kPieceMask = (1ull << kPieceBits) - 1;

  Exchange(const chorus_algo_env_v2_t* env, std::byte* work, chorus_tp_mr_t* work_mr, size_t esize,
           chorus_reduce_fn_t kernel)
      : env_(env),
        work_(work),
        work_mr_(work_mr),
        esize_(esize),
        kernel_(kernel),
        sends_(env),
        recvs_(env) {
    piece_ = std::max<size_t>(1, env->staging_slot_size / esize);
    lanes_ = std::max(1, env->channels);
    const uint32_t sends = env->caps->max_outstanding_sends ? env->caps->max_outstanding_sends : 1;
    const uint32_t recvs = env->caps->max_outstanding_recvs ? env->caps->max_outstanding_recvs : 1;
    // The windows count posts over all lanes, so no lane can exceed its cap.
    send_window_ = std::min<size_t>(kWindow, sends);
    recv_window_ = std::min<size_t>(kWindow, recvs);
    const size_t max_msg =
        env->caps->max_message_size ? size_t(env->caps->max_message_size) : piece_ * esize;
    piece_ = std::max<size_t>(1, std::min(piece_, max_msg / esize));
  }

  /// Starts transfer number `step` of the task (the earlier one is done).
  /// Posts nothing yet: pump() does.
  int begin(const Transfer& t, uint32_t step) {
    transfer_ = &t;
    step_ = step;
    cut(t.send, send_pieces_);
    cut(t.recv, recv_pieces_);
    if (uint64_t(std::max(send_pieces_.size(), recv_pieces_.size())) > kPieceMask)
      return sdk::fail(env_, CHORUS_ERR_INVALID_ARGUMENT,
                       "halving_doubling: one exchange with rank " + std::to_string(t.peer) +
                           " would need more than 2^28 messages; raise "
                           "algorithm.staging_slot_size");
    sends_ = sdk::Poster(env_);
    recvs_ = sdk::Poster(env_);
    send_done_ = recv_done_ = 0;
    free_slots_.clear();
    if (t.reduce)
      for (size_t s = env_->staging_slots; s-- > 0;) free_slots_.push_back(s);
    slot_of_.assign(t.reduce ? recv_pieces_.size() : 0, 0);
    return CHORUS_OK;
  }

  /// Posts what the windows and the free staging slots allow: receives
  /// first, so the peer's sends find a buffer waiting. CHORUS_OK (also when
  /// the transport refused a post: it is retried on the next pump), or a
  /// failure already recorded through env->fail.
  int pump() {
    const int peer = transfer_->peer;
    while (recvs_.size() < recv_pieces_.size() && recvs_.size() - recv_done_ < recv_window_) {
      if (transfer_->reduce && free_slots_.empty()) break;
      const size_t k = recvs_.size();
      const Range& r = recv_pieces_[k];
      void* buf = work_ + r.offset * esize_;
      chorus_tp_mr_t* mr = work_mr_;
      if (transfer_->reduce) {
        const size_t slot = free_slots_.back();
        free_slots_.pop_back();
        slot_of_[k] = slot;
        buf = env_->staging[slot];
        mr = env_->staging_mr[slot];
      }
      recvs_.recv(peer, lane(k), buf, r.count * esize_, mr, index(k));
    }
    if (int rc = recvs_.pump(); rc != CHORUS_OK) return rc;
    while (sends_.size() < send_pieces_.size() && sends_.size() - send_done_ < send_window_) {
      const size_t k = sends_.size();
      const Range& r = send_pieces_[k];
      sends_.send(peer, lane(k), work_ + r.offset * esize_, r.count * esize_, work_mr_, index(k));
    }
    if (int rc = sends_.pump(); rc != CHORUS_OK) return rc;
    if (!done() && sends_.outstanding() == 0 && recvs_.outstanding() == 0 &&
        sends_.size() == send_done_ && recvs_.size() == recv_done_)
      return sdk::fail(env_, CHORUS_ERR_INTERNAL,
                       "halving_doubling: exchange with rank " + std::to_string(peer) +
                           " stalled with nothing in flight");
    return CHORUS_OK;
  }

  /// Takes one completion of this transfer: a received piece is checked for
  /// its length and, when the transfer reduces, reduced into the work buffer
  /// and its staging slot freed.
  int complete(const chorus_tp_completion_t& c) {
    const uint64_t idx = sdk::WrId::index(c.wr_id);
    const int peer = transfer_->peer;
    if ((idx >> kPieceBits) != step_ || sdk::WrId::peer(c.wr_id) != peer)
      return sdk::fail(env_, CHORUS_ERR_INTERNAL,
                       "halving_doubling: a completion of another exchange arrived during the "
                       "exchange with rank " +
                           std::to_string(peer));
    const size_t k = size_t(idx & kPieceMask);
    if (sdk::WrId::is_send(c.wr_id)) {
      ++send_done_;
      sends_.completed(1);
      return CHORUS_OK;
    }
    if (k >= recv_pieces_.size())
      return sdk::fail(env_, CHORUS_ERR_INTERNAL, "halving_doubling: unknown receive completion");
    const Range& r = recv_pieces_[k];
    if (c.byte_len != r.count * esize_)
      return sdk::fail(env_, CHORUS_ERR_INTERNAL,
                       "halving_doubling: received " + std::to_string(c.byte_len) +
                           " bytes from rank " + std::to_string(peer) + " where " +
                           std::to_string(r.count * esize_) +
                           " were expected; do all ranks pass the same count and dtype?");
    if (transfer_->reduce) {
      kernel_(env_->staging[slot_of_[k]], work_ + r.offset * esize_, r.count);
      free_slots_.push_back(slot_of_[k]);
    }
    ++recv_done_;
    recvs_.completed(1);
    return CHORUS_OK;
  }

  /// Every piece of the transfer was sent and received (and reduced).
  bool done() const {
    return send_done_ == send_pieces_.size() && recv_done_ == recv_pieces_.size();
  }

 private:
  /// Cuts runs into pieces of at most `piece_` elements, skipping empty runs.
  /// Reuses `out`'s storage from the previous transfer.
  void cut(const std::vector<Range>& runs, std::vector<Range>& out) const {
    out.clear();
    for (const Range& r : runs)
      for (size_t off = 0; off < r.count; off += piece_)
        out.push_back({r.offset + off, std::min(piece_, r.count - off)});
  }
  int lane(size_t k) const { return int(k % size_t(lanes_)); }
  uint64_t index(size_t k) const { return (uint64_t(step_) << kPieceBits) | uint64_t(k); }

  const chorus_algo_env_v2_t* env_;
  std::byte* work_;
  chorus_tp_mr_t* work_mr_;
  size_t esize_;
  chorus_reduce_fn_t kernel_;
  size_t piece_ = 1;
  int lanes_ = 1;
  size_t send_window_ = 1, recv_window_ = 1;

  const Transfer* transfer_ = nullptr;
  uint32_t step_ = 0;
  std::vector<Range> send_pieces_, recv_pieces_;
  sdk::Poster sends_, recvs_;
  size_t send_done_ = 0, recv_done_ = 0;
  std::vector<size_t> free_slots_;
  /// Staging slot of each posted receive piece (reducing transfers only).
  std::vector<size_t> slot_of_;
};

}  // namespace chorus::hd
