// The notice protocol between cores: the standing notice receives on each
// peer's notice endpoint, filtering notices out of the algorithms'
// completions, and what a peer-lost, timeout, mismatch or finalized notice
// means here; settling a failed call into one job-wide status, and the
// orderly goodbye at finalize. Wire layout: notice_wire.h.
//
// Each ring neighbour and each data peer (notice_links, notice_relay.h) has
// one endpoint more than the data channels (channel index cfg_.channels)
// with receives always posted. A rank whose call fails because it lost a
// peer sends each notice peer a notice naming the rank it lost before it
// closes its connections, so a survivor that then sees this rank's
// connections close can name the rank that really died. Failure notices
// (peer lost, timeout, mismatch) are relayed: a rank forwards each one it
// sees first to its ring neighbours, once per (origin, kind), so they reach
// the ranks without an endpoint to the origin, in both directions around
// the ring. A neighbour whose notice connection ends without a word died:
// the rank that sees it floods "rank X lost" itself. A healthy
// communicator's finalize sends a "finalized" notice to each notice peer
// instead, which takes the peer's standing receives: its connections then
// close with nothing outstanding, which no transport reports as a loss.

#include "core/communicator.h"
#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/log.h"
#include "core/notice_wire.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace chorus::core {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

Status Communicator::arm_notices() {
  notice_lost_.assign(size_t(size_), -1);
  notice_closed_.assign(size_t(size_), 0);
  notice_finished_.assign(size_t(size_), 0);
  notice_timeout_.assign(size_t(size_), 0);
  relay_.reset(rank_, size_);
  if (size_ < 2) return Status::ok();
  // [peer][receive slot], then [peer][signature send slot], then one slot
  // for the notices sent to every notice peer, then [origin][relayed kind].
  const size_t slots = size_t(size_) * (kNoticeRecvSlots + kSigSendSlots + kRelayKinds) + 1;
  const size_t bytes = slots * kNoticeBytes;
  notice_block_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!notice_block_) return {CHORUS_ERR_SYSTEM, who() + ": cannot allocate the notice buffers"};
  std::memset(notice_block_, 0, bytes);
  if (caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION) {
    if (int rc = tp_->mem_register(ctx_, notice_block_, bytes, CHORUS_MEM_HOST, &notice_mr_);
        rc != CHORUS_OK)
      return {rc, who() + ": registering the notice buffers failed: " + tp_->last_error()};
  }
  for (int p = 0; p < size_; ++p)
    if (notice_eps_[size_t(p)]) arm_notice_peer(p);
  return Status::ok();
}

void Communicator::arm_notice_peer(int p) {
  int rc = CHORUS_OK;
  for (int k = 0; k < kNoticeRecvSlots && rc == CHORUS_OK; ++k)
    rc = tp_->post_recv(notice_eps_[size_t(p)], notice_slot(p, k), kNoticeBytes, notice_mr_,
                        kNoticeWrId + (uint64_t(p) << 8) + uint64_t(k));
  if (rc == CHORUS_OK) return;
  // Notices are best effort: a pair the transport cannot link (a device
  // matrix with no entry for it) or any other refusal only costs the better
  // blame message and the signature check for this peer, not the job.
  log(rc == CHORUS_ERR_INVALID_ARGUMENT ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN,
      "no notices (peer loss, call signatures) with rank " + std::to_string(p) + ": " +
          tp_->last_error());
  auto* ep = notice_eps_[size_t(p)];
  notice_peer_.erase(ep);
  tp_->endpoint_close(ep);
  notice_eps_[size_t(p)] = nullptr;
}

void* Communicator::notice_slot(int peer, int k) const {
  return static_cast<std::byte*>(notice_block_) +
         (size_t(peer) * kNoticeRecvSlots + size_t(k)) * kNoticeBytes;
}

void* Communicator::sig_send_slot(int peer, int k) const {
  return static_cast<std::byte*>(notice_block_) +
         (size_t(size_) * kNoticeRecvSlots + size_t(peer) * kSigSendSlots + size_t(k)) *
             kNoticeBytes;
}

void* Communicator::broadcast_slot() const {
  return static_cast<std::byte*>(notice_block_) +
         size_t(size_) * (kNoticeRecvSlots + kSigSendSlots) * kNoticeBytes;
}

void* Communicator::relay_slot(int origin, int kind_index) const {
  return static_cast<std::byte*>(broadcast_slot()) +
         (1 + size_t(origin) * kRelayKinds + size_t(kind_index)) * kNoticeBytes;
}

void Communicator::relay_notice(int from, const NoticeWire& w) {
  // A rank that is saying goodbye relays no more: its neighbours' receives
  // are taken by its "finalized" notices (say_goodbye).
  if (relay_.goodbye || !notice_block_) return;
  void* slot = relay_slot(w.reporter, relay_index(w.kind));
  std::memcpy(slot, &w, sizeof(w));
  // This rank's own notice (flood_lost) goes to every notice peer, as
  // broadcast_notice would send it: a peer that holds a notice endpoint to
  // this rank takes that connection's end without a notice as this rank's
  // own loss (resolve_lost), so the notice must come ahead of it there, not
  // around the ring. Someone else's notice goes on to the ring neighbours.
  std::vector<int> targets;
  if (from < 0 && w.reporter == rank_) {
    for (int p = 0; p < size_; ++p) targets.push_back(p);
  } else {
    targets = {relay_.left, relay_.right};
  }
  for (int p : targets) {
    if (p < 0 || p == from || p == w.reporter || !notice_eps_[size_t(p)] ||
        notice_closed_[size_t(p)] || notice_finished_[size_t(p)])
      continue;
    if (w.kind == kNoticePeerLost && p == w.lost_rank) continue;
    if (tp_->post_send(notice_eps_[size_t(p)], slot, kNoticeBytes, notice_mr_,
                       kNoticeWrId + (uint64_t(p) << 8) + kRelaySlot) == CHORUS_OK)
      ++relay_.out;
  }
}

void Communicator::flood_lost(int peer) {
  // Not a loss: the peer said why it left (lost another rank, timed out, a
  // mismatch, finalized), or this rank is leaving or failing anyway.
  if (notice_lost_[size_t(peer)] >= 0 || notice_timeout_[size_t(peer)] ||
      notice_finished_[size_t(peer)] || relay_.seen[size_t(peer)] || mismatch_known_ ||
      timeout_first_from_ >= 0 || broken_ || relay_.goodbye)
    return;
  relay_.reported_lost[size_t(peer)] = 1;
  if (!relay_.first(rank_, kNoticePeerLost)) return;  // this rank already reported a loss
  log(CHORUS_LOG_INFO, "the notice connection to rank " + std::to_string(peer) +
                           " ended without a word: telling the other ranks it is lost");
  // Sent as if relayed (no wait here: this runs inside a poll); a failing
  // call's send_notices later pushes it out before the connections close.
  relay_notice(-1, NoticeWire{kNoticeMagic, kNoticePeerLost, peer, rank_, CallSig{}, CallSig{}});
}

int Communicator::filter_notices(chorus_tp_completion_t* out, int n) {
  if (p2p_) {
    // Tagged point-to-point traffic goes to its engine wherever it is polled.
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      if (p2p_->owns(out[i].endpoint))
        p2p_->on_completion(out[i]);
      else
        out[kept++] = out[i];
    }
    n = kept;
  }
  if (notice_peer_.empty()) return n;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (out[i].opcode == CHORUS_TP_OP_CONNECT_REQUEST && !notice_idle_.empty()) {
      // A peer started connecting a notice endpoint left for first use
      // (core/notice_connect.cc): connect this side too.
      if (auto it = notice_peer_.find(out[i].endpoint); it != notice_peer_.end()) {
        begin_notice_connect(it->second, false);
        continue;
      }
    }
    // Every notice work request carries kNoticeWrId + (rank << 8) + slot:
    // anything else is algorithm traffic, kept without a lookup.
    const uint64_t off = out[i].wr_id - kNoticeWrId;
    if (off >= (uint64_t(size_) << 8)) {
      out[kept++] = out[i];
      continue;
    }
    auto it = notice_peer_.find(out[i].endpoint);
    if (it == notice_peer_.end()) {
      out[kept++] = out[i];
      continue;
    }
    const int peer = it->second;
    const uint64_t slot = off & 0xff;
    if (out[i].opcode != CHORUS_TP_RECV) {  // one of our own notices went out
      if (slot >= kSigSlotBase && slot < kSigSlotBase + kSigSendSlots) {
        if (sig_sends_out_[size_t(peer)] > 0) --sig_sends_out_[size_t(peer)];
      } else if (slot == kRelaySlot) {
        if (relay_.out > 0) --relay_.out;
      } else {
        ++notice_sends_done_;
      }
      continue;
    }
    if (slot >= uint64_t(kNoticeRecvSlots)) continue;
    NoticeWire w{};
    std::memcpy(&w, notice_slot(peer, int(slot)), sizeof(w));
    const bool sized = out[i].byte_len == kNoticeBytes;
    // The slot is free again: keep the standing receives standing, except
    // after the peer's "finalized" notices, which take them all (say_goodbye).
    if (!(sized && w.magic == kNoticeMagic && w.kind == kNoticeFinalized) &&
        tp_->post_recv(notice_eps_[size_t(peer)], notice_slot(peer, int(slot)), kNoticeBytes,
                       notice_mr_, out[i].wr_id) != CHORUS_OK)
      notice_closed_[size_t(peer)] = 1;
    handle_notice(peer, w, sized);
  }
  return kept;
}

void Communicator::handle_notice(int peer, const NoticeWire& w, bool sized) {
  // A relayed kind comes from any rank (its origin, `reporter`), the others
  // from the peer itself.
  const bool relayed = relay_index(w.kind) >= 0;
  if (!sized || w.magic != kNoticeMagic || w.reporter < 0 || w.reporter >= size_ ||
      (!relayed && w.reporter != peer)) {
    log(CHORUS_LOG_WARN, "ignoring a malformed notice from rank " + std::to_string(peer));
    return;
  }
  const int origin = w.reporter;
  const std::string from =
      "rank " + std::to_string(origin) +
      (origin == peer ? std::string() : " (relayed by rank " + std::to_string(peer) + ")");
  if (relayed) {
    if (w.kind == kNoticePeerLost && (w.lost_rank < 0 || w.lost_rank >= size_)) {
      log(CHORUS_LOG_WARN, "ignoring a malformed notice from rank " + std::to_string(peer));
      return;
    }
    // Each (origin, kind) once: it comes around the ring both ways, and
    // this rank's own notices come back. A lost rank is news only once:
    // every survivor reports the same loss, and relaying each report would
    // put O(N) notices on every link, more than the standing receives
    // (kNoticeRecvSlots); a peer that exits with notices still queued
    // behind them has its own last notice dropped with its endpoint, and
    // is then blamed itself.
    if (!relay_.first(origin, w.kind)) return;
    if (w.kind != kNoticePeerLost || !relay_.reported_lost[size_t(w.lost_rank)])
      relay_notice(peer, w);
  }
  switch (w.kind) {
    case kNoticeFinalized:
      ++notice_finished_[size_t(peer)];
      if (p2p_) p2p_->peer_finalized(peer);
      log(CHORUS_LOG_DEBUG, "rank " + std::to_string(peer) + " finalized its communicator");
      return;
    case kNoticeSignature:
    case kNoticeSignatureAsk:
      if (w.a.rank != peer) break;
      on_signature(peer, w.a);
      // Answered from the call's progress loop, not from inside a poll.
      if (w.kind == kNoticeSignatureAsk) asked_.push_back(peer);
      return;
    case kNoticeMismatch:
      if (!mismatch_known_) {
        mismatch_known_ = true;
        mismatch_a_ = w.a;
        mismatch_b_ = w.b;
        mismatch_text_ = describe_mismatch(w.a, w.b);
        mismatch_via_ = origin;
        log(CHORUS_LOG_DEBUG, from + " reports mismatched calls: " + mismatch_text_);
      }
      return;
    case kNoticeTimeout:
      notice_timeout_[size_t(origin)] = 1;
      if (timeout_first_from_ < 0) timeout_first_from_ = origin;
      log(CHORUS_LOG_DEBUG, from + " timed out and is leaving");
      return;
    case kNoticePeerLost:
      notice_lost_[size_t(origin)] = w.lost_rank;
      relay_.reported_lost[size_t(w.lost_rank)] = 1;
      if (notice_first_from_ < 0) notice_first_from_ = origin;
      log(CHORUS_LOG_INFO,
          from + " reports that it lost rank " + std::to_string(w.lost_rank) + " and is leaving");
      return;
    default:
      break;
  }
  log(CHORUS_LOG_WARN, "ignoring a malformed notice from rank " + std::to_string(peer));
}

Status Communicator::settle_failure(Status st) {
  if (st.code() == CHORUS_ERR_ABORTED) return st;
  // A mismatched peer makes the data fail in many ways (a short receive, a
  // hang until the deadline, a peer that leaves): its signature tells why.
  // Wait a short grace for the signatures this call still needs.
  // With the digest in the data, no signature went out yet to the peers the
  // data crossed with: ask them for theirs now.
  if (!mismatch_known_ && call_sig_active_ && sig_in_data_)
    for (int p = 0; p < size_; ++p)
      if (touched_[size_t(p)] && !talked_[size_t(p)]) send_signature(p, true);
  if (!mismatch_known_ && call_sig_active_ && !signatures_matched() && !notice_peer_.empty())
    pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
                 [&] { return mismatch_known_ || signatures_matched(); });
  settle_suspect(true);
  if (!mismatch_known_) return st;
  spread_mismatch();
  return {CHORUS_ERR_MISMATCH, who() + ": " + call_what_ + ": " + mismatch_message()};
}

Status Communicator::timeout_status(const std::string& head) {
  if (!timeout_sent_ && !notice_peer_.empty()) {
    timeout_sent_ = true;
    broadcast_notice(kNoticeTimeout, nullptr, nullptr);
  }
  const bool p2p = !call_sig_.is_collective();
  const int p2p_peer = call_sig_.peer;
  auto involved = [&](int p) { return p != rank_ && (!p2p || p == p2p_peer); };
  // Ranks without a notice endpoint here are heard through the relay.
  auto heard = [&](int p) {
    return notice_timeout_[size_t(p)] || notice_closed_[size_t(p)] || notice_finished_[size_t(p)] ||
           notice_lost_[size_t(p)] >= 0 || relay_.reported_lost[size_t(p)];
  };
  bool relayed = false;
  for (int p = 0; p < size_; ++p) relayed = relayed || (involved(p) && !notice_eps_[size_t(p)]);
  // Every live rank of the call times out within about one call of the
  // others, or is told by the first one; a rank that says nothing in the
  // grace is the one stuck. Relayed word crosses several ranks: more grace.
  if (!notice_peer_.empty())
    pump_notices(
        Deadline::after(std::chrono::milliseconds(relayed ? kRelayGraceMs : kTimeoutGraceMs)), [&] {
          for (int p = 0; p < size_; ++p)
            if (involved(p) && !heard(p)) return false;
          return true;
        });
  std::vector<int> timed_out, silent;
  for (int p = 0; p < size_; ++p) {
    if (!involved(p)) continue;
    if (notice_timeout_[size_t(p)])
      timed_out.push_back(p);
    else if (!heard(p))
      silent.push_back(p);
  }
  std::string msg = head + outstanding_peers();
  if (!silent.empty())
    msg += "; rank(s) " + rank_list(silent) + " sent no word: stopped, hung, or not in this call";
  if (!timed_out.empty()) msg += "; rank(s) " + rank_list(timed_out) + " timed out too (alive)";
  msg += "; raise timeout.collective / CHORUS_TIMEOUT_COLLECTIVE if a rank is legitimately slow";
  return {CHORUS_ERR_TIMEOUT, msg};
}

void Communicator::broadcast_notice(uint32_t kind, const CallSig* a, const CallSig* b) {
  if (!notice_block_ || size_ < 2) return;
  // Once per kind (flood_lost may have sent this rank's peer-lost notice):
  // then only push out what is still being relayed.
  if (relay_index(kind) >= 0 && !relay_.first(rank_, kind)) {
    pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
                 [&] { return relay_.out == 0; });
    return;
  }
  NoticeWire w{
      kNoticeMagic,      kind, kind == kNoticePeerLost ? lost_rank_ : -1, rank_, a ? *a : CallSig{},
      b ? *b : CallSig{}};
  void* slot = broadcast_slot();
  std::memcpy(slot, &w, sizeof(w));
  int posted = 0;
  notice_sends_done_ = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_eps_[size_t(p)] || notice_closed_[size_t(p)]) continue;
    if (kind == kNoticePeerLost && p == lost_rank_) continue;
    if (tp_->post_send(notice_eps_[size_t(p)], slot, kNoticeBytes, notice_mr_,
                       kNoticeWrId + (uint64_t(p) << 8) + kBroadcastSlot) == CHORUS_OK)
      ++posted;
  }
  // Push them out before the caller can exit and close the connections; a
  // peer that is gone fails its send at once, and none may take longer than
  // the grace.
  pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
               [&] { return notice_sends_done_ >= posted && relay_.out == 0; });
  log(CHORUS_LOG_DEBUG, "sent notice kind " + std::to_string(kind) + " to " +
                            std::to_string(notice_sends_done_) + " of " + std::to_string(posted) +
                            " peers");
}

void Communicator::resolve_lost(int peer) {
  lost_rank_ = peer;
  lost_via_ = -1;
  if (notice_lost_.empty()) return;
  // A peer that left because it lost another rank sent its notice before
  // closing its connections; it may still be in flight on another connection.
  // The notice travels on the notice connection ahead of that connection's
  // close, so once the peer's notice endpoint failed without one, none is
  // coming: the peer itself is gone, and the grace is not spent. A peer
  // without a notice endpoint here is heard of through the relay: its own
  // notice, or a neighbour's "rank <peer> lost".
  const int grace = notice_eps_[size_t(peer)] ? kNoticeGraceMs : kRelayGraceMs;
  pump_notices(Deadline::after(std::chrono::milliseconds(call_deadline_.remaining_ms(grace))), [&] {
    return notice_lost_[size_t(peer)] >= 0 || notice_closed_[size_t(peer)] ||
           notice_finished_[size_t(peer)] || notice_timeout_[size_t(peer)] ||
           relay_.reported_lost[size_t(peer)] || mismatch_known_;
  });
  const int reported = notice_lost_[size_t(peer)];
  if (reported >= 0 && reported != peer && reported != rank_) {
    lost_rank_ = reported;
    lost_via_ = peer;
    return;
  }
  // On a mesh whose notice endpoints wait for first use
  // (core/notice_connect.cc), a peer that failed before it connected its
  // notice endpoint to this rank told only its ring neighbours why it left,
  // and its endpoints' close arrives here first. The rank the others report
  // lost is then the cause, not the peer: give their word a short grace
  // (this is the failure path only).
  if (reported >= 0 || notice_idle_.empty() || notice_timeout_[size_t(peer)] || mismatch_known_)
    return;
  // Another rank's report names the peer itself: the peer is the one lost.
  auto confirmed = [&] {
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && notice_lost_[size_t(q)] == peer) return true;
    return relay_.reported_lost[size_t(peer)] != 0;
  };
  auto other = [&] {
    if (confirmed()) return -1;
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && q != peer && notice_lost_[size_t(q)] >= 0 &&
          notice_lost_[size_t(q)] != rank_ && notice_lost_[size_t(q)] != q)
        return q;
    return -1;
  };
  pump_notices(
      Deadline::after(std::chrono::milliseconds(call_deadline_.remaining_ms(kNoticeGraceMs))),
      [&] { return confirmed() || other() >= 0 || mismatch_known_; });
  if (const int q = other(); q >= 0) {
    lost_rank_ = notice_lost_[size_t(q)];
    lost_via_ = q;
  }
}

bool Communicator::note_notice_error(const chorus_tp_error_t& e) {
  auto it = notice_peer_.find(e.endpoint);
  if (it == notice_peer_.end()) return false;
  const int peer = it->second;
  if (e.opcode == CHORUS_TP_RECV && !notice_closed_.empty()) {
    const bool first = !notice_closed_[size_t(peer)];
    notice_closed_[size_t(peer)] = 1;
    if (first && e.status == CHORUS_ERR_PEER_LOST) flood_lost(peer);
  }
  if (e.opcode == CHORUS_TP_SEND) {  // failed, but no longer pending
    const uint64_t slot = (e.wr_id - kNoticeWrId) & 0xff;
    if (slot == kRelaySlot) {
      if (relay_.out > 0) --relay_.out;
    } else {
      ++notice_sends_done_;
    }
  }
  return true;
}

bool Communicator::drain_notices() {
  chorus_tp_completion_t comps[16];
  poll_notice_connects();
  for (;;) {
    int n = tp_->poll(ctx_, comps, 16);
    if (n > 0) {
      filter_notices(comps, n);  // a failed call's own completions no longer matter
      continue;
    }
    if (n == CHORUS_ERR_PENDING) {
      chorus_tp_error_t e{};
      if (tp_->read_error(ctx_, &e) != CHORUS_OK) return false;
      if (!(p2p_ && p2p_->on_error(e))) note_notice_error(e);
      continue;
    }
    return n == 0;
  }
}

void Communicator::pump_notices(const Deadline& limit, const std::function<bool()>& done) {
  while (!done() && !limit.expired() && !aborted_.load()) {
    const bool drained = drain_notices();
    // A failing rank still tells a peer that asks what it called.
    answer_signature_requests();
    if (!drained || done()) break;
    tp_->wait(ctx_, std::max(1, limit.remaining_ms(kNoticeGraceMs)));
  }
}

void Communicator::note_post_lost(int peer) {
  if (post_lost_peer_ < 0) post_lost_peer_ = peer;
}

std::string Communicator::lost_suffix(int peer) {
  resolve_lost(peer);
  return resolved_lost_suffix(peer);
}

std::string Communicator::resolved_lost_suffix(int peer) const {
  if (lost_via_ < 0)
    return " (rank " + std::to_string(peer) + " is lost; the communicator must be rebuilt)";
  return " (rank " + std::to_string(lost_rank_) + " is lost: rank " + std::to_string(peer) +
         " reported losing it before it left; the communicator must be rebuilt)";
}

std::string Communicator::notice_message() const {
  const int from = notice_first_from_;
  const int lost = notice_lost_[size_t(from)];
  if (lost == rank_)
    return "rank " + std::to_string(from) + " lost its connection to this rank and left (rank " +
           std::to_string(from) + " is lost; the communicator must be rebuilt)";
  return "rank " + std::to_string(from) + " reported losing rank " + std::to_string(lost) +
         " and left (rank " + std::to_string(lost) + " is lost; the communicator must be rebuilt)";
}

void Communicator::send_notices() { broadcast_notice(kNoticePeerLost, nullptr, nullptr); }

void Communicator::say_goodbye() {
  if (!notice_block_ || size_ < 2) return;
  // A peer that already finalized and left has closed its notice connection:
  // take that in first, so no goodbye is written to a closed connection.
  if (!drain_notices()) return;
  // A notice endpoint still connecting may be up on the peer's side, which
  // then waits for this rank's goodbye: finish it first (briefly).
  if (notice_connecting_ > 0)
    pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
                 [&] { return notice_connecting_ == 0; });
  relay_.goodbye = true;
  NoticeWire w{kNoticeMagic, kNoticeFinalized, -1, rank_, CallSig{}, CallSig{}};
  void* slot = broadcast_slot();
  std::memcpy(slot, &w, sizeof(w));
  int posted = 0;
  notice_sends_done_ = 0;
  // One notice per standing receive of the peer: none is left outstanding
  // when this rank's connections close, so the peer's transport sees an
  // orderly close.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_eps_[size_t(p)] || notice_closed_[size_t(p)]) continue;
    for (int k = 0; k < kNoticeRecvSlots; ++k)
      if (tp_->post_send(notice_eps_[size_t(p)], slot, kNoticeBytes, notice_mr_,
                         kNoticeWrId + (uint64_t(p) << 8) + kBroadcastSlot) == CHORUS_OK)
        ++posted;
  }
  // The tagged point-to-point endpoints' standing receives are taken the
  // same way.
  if (p2p_) p2p_->say_bye();
  // Every rank waits for every peer's goodbye before it closes: the last
  // goodbye a rank receives was sent to a connection that was still open.
  auto everyone_done = [&] {
    if (notice_sends_done_ < posted || relay_.out > 0) return false;
    if (p2p_ && !p2p_->byes_done()) return false;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && notice_eps_[size_t(p)] && notice_finished_[size_t(p)] < kNoticeRecvSlots &&
          !notice_closed_[size_t(p)])
        return false;
    return true;
  };
  pump_notices(Deadline::after(std::chrono::milliseconds(kFinalizeGraceMs)), everyone_done);
  if (!everyone_done()) {
    std::string missing;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && notice_eps_[size_t(p)] && notice_finished_[size_t(p)] < kNoticeRecvSlots &&
          !notice_closed_[size_t(p)])
        missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    log(CHORUS_LOG_DEBUG,
        "finalized without waiting longer for rank(s) " +
            (missing.empty() ? std::string("(none; own notices pending)") : missing));
  }
}

std::string Communicator::outstanding_peers() const {
  auto list = [](const std::vector<int>& counts) {
    std::string s;
    for (size_t p = 0; p < counts.size(); ++p)
      if (counts[p] > 0) s += (s.empty() ? "" : ", ") + std::to_string(p);
    return s;
  };
  std::string recvs = list(pending_recvs_), sends = list(pending_sends_);
  std::string out;
  if (!recvs.empty()) out += "; still waiting to receive from rank(s) " + recvs;
  if (!sends.empty()) out += "; sends to rank(s) " + sends + " not yet taken";
  return out;
}

}  // namespace chorus::core
