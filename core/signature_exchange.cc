// Call signatures: each call's (collective, dtype, op, count, root) is checked
// against the peers it talks to, so ranks that issue different calls fail
// with MISMATCH instead of hanging. A collective's digest rides in its data
// (transport immediates) where the transport carries them; signatures go
// over the notice endpoints (notice_wire.h) otherwise, for pairs the data
// crosses one way only, and to name both calls of a mismatch.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/log.h"
#include "core/notice_wire.h"

#include <algorithm>
#include <cstring>

namespace chorus::core {

void Communicator::begin_signature(const CallSig& sig, bool talk_all) {
  call_sig_ = sig;
  call_sig_.rank = rank_;
  call_sig_active_ = check_signatures_ && size_ > 1 && notice_block_ != nullptr;
  call_imm_ = 0;
  sig_in_data_ = false;
  suspect_from_ = -1;
  if (!call_sig_active_) return;
  // A collective's digest rides in its data to every peer whose transport
  // carries immediates. Not a broadcast's: its signature goes to everyone
  // (talk_all), and its data carries 0 like a send's.
  if (call_sig_.is_collective() && !talk_all && imm_any_) {
    sig_in_data_ = true;
    call_imm_ = signature_digest(call_sig_);
    std::fill(touched_.begin(), touched_.end(), 0);
  }
  std::fill(talked_.begin(), talked_.end(), 0);
  std::fill(owed_[0].begin(), owed_[0].end(), 0);
  std::fill(owed_[1].begin(), owed_[1].end(), 0);
  if (sig_in_data_) {
    // A peer that runs this call number without the digest (a broadcast, a
    // transport without immediates) sent its signature on the notice
    // endpoint, maybe before this call began; this call pushes none to
    // meet it, so compare it here, as on_signature does during the call.
    for (int p = 0; p < size_ && !mismatch_known_; ++p)
      for (const SigStream& s : streams_[size_t(p)])
        for (const CallSig& t : s.theirs)
          if (t.is_collective() && t.seq == call_sig_.seq && !signatures_agree(call_sig_, t)) {
            note_mismatch(call_sig_, t, -1);
            break;
          }
  }
  if (sig_in_data_)
    if (const OneWay* w = find_oneway())
      for (int p = 0; p < size_; ++p)
        if (w->peers[size_t(p)]) send_signature(p);
  // Where a mesh's notice endpoints wait for first use, a broadcast uses the
  // pairs already in use and the root's: the root hears from every rank,
  // and a rank's neighbours check it too (core/notice_connect.cc).
  if (talk_all)
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && broadcast_talks_to(p)) send_signature(p);
}

void Communicator::send_signature(int peer, bool ask) {
  if (talked_[size_t(peer)]) return;
  talked_[size_t(peer)] = 1;
  // A notice endpoint left for first use connects now (unless the peer's
  // connect request got there first); the signature waits in its queue
  // until it is up. Either way this rank's calls now use the pair.
  const bool lazy = !notice_idle_.empty() && notice_idle_[size_t(peer)].lazy;
  if (lazy) begin_notice_connect(peer, true);
  // No notices with this peer: its calls go unchecked. A pair left for
  // first use whose connect failed is owed all the same: the peer is gone
  // (notice_closed_), and the call must say so (owed_peer_gone), not finish
  // without its word.
  if (!notice_eps_[size_t(peer)] && !notice_pending(peer) && !lazy) return;
  // Which directions of the pair this call moves data in (SigStream).
  const bool out = call_sig_.call != CallSig::kSigRecv;
  const bool in = call_sig_.call != CallSig::kSigSend;
  for (int dir = 0; dir < 2; ++dir) {
    if (!(dir == 0 ? out : in)) continue;
    SigStream& s = streams_[size_t(peer)][size_t(dir)];
    s.mine.push_back(call_sig_);
    ++s.pushed;
    // A send does not wait for its receiver (sends stay eager).
    if (call_sig_.call != CallSig::kSigSend) owed_[dir][size_t(peer)] = s.pushed;
    CallSig a, b;
    if (!s.match(a, b)) note_mismatch(a, b, -1);
  }
  if (lazy && !notice_eps_[size_t(peer)] && !notice_pending(peer)) return;  // the connect failed
  if (notice_pending(peer) || (lazy && !notice_idle_[size_t(peer)].queue.empty())) {
    notice_idle_[size_t(peer)].queue.push_back({call_sig_, ask});
    ++notice_queued_;
    return;
  }
  // Every slot busy means the peer stopped taking notices; progress until
  // one frees, bounded by the call's deadline.
  if (sig_sends_out_[size_t(peer)] >= kSigSendSlots)
    pump_notices(call_deadline_, [&] { return sig_sends_out_[size_t(peer)] < kSigSendSlots; });
  if (sig_sends_out_[size_t(peer)] >= kSigSendSlots) return;
  post_signature(peer, call_sig_, ask);
}

void Communicator::post_signature(int peer, const CallSig& sig, bool ask) {
  auto* ep = notice_eps_[size_t(peer)];
  const uint32_t k = sig_send_next_[size_t(peer)]++ % kSigSendSlots;
  NoticeWire w{kNoticeMagic, ask ? kNoticeSignatureAsk : kNoticeSignature, -1, rank_, sig,
               CallSig{}};
  void* slot = sig_send_slot(peer, int(k));
  std::memcpy(slot, &w, sizeof(w));
  if (tp_->post_send(ep, slot, kNoticeBytes, notice_mr_,
                     kNoticeWrId + (uint64_t(peer) << 8) + kSigSlotBase + k) == CHORUS_OK) {
    ++sig_sends_out_[size_t(peer)];
  } else {
    // The peer is gone or unreachable: the data posts report it. Nothing
    // more is owed by this peer in this call.
    owed_[0][size_t(peer)] = owed_[1][size_t(peer)] = 0;
  }
}

void Communicator::on_signature(int peer, const CallSig& theirs) {
  if (!check_signatures_) return;
  // The peer's send feeds this rank's receive direction, its receive this
  // rank's send direction; a collective is in both.
  const bool to_out = theirs.call != CallSig::kSigSend;
  const bool to_in = theirs.call != CallSig::kSigRecv;
  for (int dir = 0; dir < 2; ++dir) {
    if (!(dir == 0 ? to_out : to_in)) continue;
    SigStream& s = streams_[size_t(peer)][size_t(dir)];
    s.theirs.push_back(theirs);
    CallSig a, b;
    if (!s.match(a, b)) {
      note_mismatch(a, b, -1);
      return;
    }
  }
  // The peer's part of the collective running here, from a peer this rank
  // has not talked to (yet): a rank running a different collective may
  // never post to this one, so compare now rather than never.
  if (call_sig_active_ && call_sig_.is_collective() && theirs.is_collective() &&
      !talked_[size_t(peer)] && theirs.seq == call_sig_.seq && !signatures_agree(call_sig_, theirs))
    note_mismatch(call_sig_, theirs, -1);
}

void Communicator::note_mismatch(const CallSig& mine, const CallSig& theirs, int reported_by) {
  if (mismatch_known_) return;
  mismatch_known_ = true;
  mismatch_a_ = mine;
  mismatch_b_ = theirs;
  mismatch_text_ = describe_mismatch(mine, theirs);
  mismatch_via_ = reported_by;
  log(CHORUS_LOG_DEBUG, "mismatched calls: " + mismatch_text_);
}

void Communicator::spread_mismatch() {
  if (mismatch_sent_) return;
  mismatch_sent_ = true;
  // Relayed by every rank that fails with it, not only the ranks that saw
  // it: a rank told by a notice may finish and close its connections before
  // the first notice reaches a neighbour that is still in the call. The
  // neighbour then sees this rank's notice ahead of the close on the same
  // connection, and fails with the mismatch instead of a lost peer.
  broadcast_notice(kNoticeMismatch, &mismatch_a_, &mismatch_b_);
}

std::string Communicator::mismatch_message() const {
  return "mismatched calls: " + mismatch_text_ +
         (mismatch_via_ >= 0 ? " (reported by rank " + std::to_string(mismatch_via_) + ")" : "") +
         "; every rank must make the same calls in the same order, with the same count, dtype, "
         "op and root, and matching send/recv sizes; this communicator cannot be used any more";
}

Status Communicator::mismatch_pending() {
  if (!mismatch_known_) return Status::ok();
  Status st(CHORUS_ERR_MISMATCH, who() + ": " + call_what_ + ": " + mismatch_message());
  spread_mismatch();
  mark_broken(st);
  return st;
}

bool Communicator::mismatch_blocks_call() const {
  if (!mismatch_known_) return false;
  // A rank told of a mismatch while it still finishes an earlier, matched
  // collective completes that one; the mismatch fails the next call.
  if (mismatch_via_ < 0 || !call_sig_active_ || !call_sig_.is_collective()) return true;
  uint64_t first = UINT64_MAX;
  for (const CallSig* s : {&mismatch_a_, &mismatch_b_}) {
    if (s->is_collective()) first = std::min(first, s->seq);
    // A send/recv mismatch found by the tagged engine carries the number of
    // collectives issued before the receive (CallSig::kP2pPosition): the
    // collectives from that one on fail, the earlier ones complete.
    else if (s->seq & CallSig::kP2pPosition)
      first = std::min(first, s->seq & ~CallSig::kP2pPosition);
  }
  return call_sig_.seq >= first;
}

bool Communicator::signatures_matched() const {
  // Data that carried another call's digest: matched only as a mismatch.
  if (suspect_from_ >= 0 && !mismatch_known_) return false;
  for (int p = 0; p < size_; ++p)
    for (int dir = 0; dir < 2; ++dir)
      if (owed_[dir][size_t(p)] > streams_[size_t(p)][size_t(dir)].matched) return false;
  return true;
}

int Communicator::owed_peer_gone() const {
  if (notice_closed_.empty()) return -1;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_closed_[size_t(p)]) continue;
    for (int dir = 0; dir < 2; ++dir)
      if (owed_[dir][size_t(p)] > streams_[size_t(p)][size_t(dir)].matched) return p;
  }
  return -1;
}

int Communicator::await_signatures() {
  if (signatures_matched() && !mismatch_blocks_call()) return CHORUS_OK;
  awaiting_signatures_ = true;
  chorus_tp_completion_t comps[16];
  int rc = CHORUS_OK;
  while (!signatures_matched() || mismatch_blocks_call()) {
    int n = env_progress(this, comps, 16);
    if (n < 0) {
      rc = n;
      break;
    }
  }
  awaiting_signatures_ = false;
  return rc;
}

void Communicator::signature_after_post(int peer, bool send) {
  if (!call_sig_active_ || peer < 0) return;
  if (sig_in_data_ && imm_peer_[size_t(peer)]) {
    touched_[size_t(peer)] |= send ? 1 : 2;
    return;
  }
  if (!talked_[size_t(peer)]) send_signature(peer);
}

void Communicator::finish_signatures() {
  bool any = false;
  for (int p = 0; p < size_ && !any; ++p)
    any = talked_[size_t(p)] || (sig_in_data_ && touched_[size_t(p)]);
  if (!any) {
    // An algorithm that posted nothing (count 0) still owes every peer its
    // signature, or a rank that skipped the call would not be noticed.
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send_signature(p);
    return;
  }
  if (!sig_in_data_) return;
  // A pair crossed both ways compared digests on both sides. One crossed one
  // way told only the receiver: both sides exchange signatures, which a
  // matched call does alike on both (the receiver posted receives exactly
  // where the sender posted sends).
  OneWay* w = find_oneway();
  if (!w) {
    w = &oneway_.emplace_back();
    w->call = call_sig_.call;
    std::memcpy(w->algo, call_sig_.algo, sizeof(w->algo));
  }
  w->peers.assign(size_t(size_), 0);
  for (int p = 0; p < size_; ++p) {
    const bool one_way = touched_[size_t(p)] == 1 || touched_[size_t(p)] == 2;
    w->peers[size_t(p)] = one_way;
    if (one_way) send_signature(p);
  }
}

Communicator::OneWay* Communicator::find_oneway() {
  for (auto& w : oneway_)
    if (w.call == call_sig_.call && std::memcmp(w.algo, call_sig_.algo, sizeof(w.algo)) == 0)
      return &w;
  return nullptr;
}

void Communicator::signature_from_data(int peer, uint32_t imm) {
  if (suspect_from_ < 0) {
    suspect_from_ = peer;
    suspect_until_ = Deadline::after(std::chrono::milliseconds(kSuspectGraceMs));
    log(CHORUS_LOG_DEBUG, "rank " + std::to_string(peer) + " sent data with digest " +
                              std::to_string(imm) + " where " + std::to_string(call_imm_) +
                              " was expected; asking for its signature");
  }
  if (!talked_[size_t(peer)]) send_signature(peer, true);
}

void Communicator::answer_signature_requests() {
  // send_signature may pump notices (all its slots busy), which answers too.
  if (asked_.empty() || answering_) return;
  answering_ = true;
  auto asked = std::move(asked_);
  asked_.clear();
  for (int p : asked)
    if (call_sig_active_ && !talked_[size_t(p)]) send_signature(p);
  answering_ = false;
}

void Communicator::settle_suspect(bool now) {
  if (suspect_from_ < 0 || mismatch_known_ || !(now || suspect_until_.expired())) return;
  // The peer's signature did not come: the data still says it made another call.
  CallSig theirs;
  theirs.rank = suspect_from_;
  note_mismatch(call_sig_, theirs, -1);
}

}  // namespace chorus::core
