// Notice endpoints connected on first use. A communicator whose algorithms
// declare every peer (a mesh) used to connect a notice endpoint to every
// peer at init, although notices about peers other than the ring
// neighbours travel the ring relay anyway (core/peer_notices.cc). Over a
// transport with polled connects (CHORUS_TP_CAP_CONNECT_POLL) the notice
// endpoint of each pair whose data endpoints are deferred too
// (core/data_connect.cc) is opened and its address exchanged at init, but
// connected only when a call first needs the pair:
//
//  - the first call that connects the data endpoints to every peer
//    (connect_deferred_data) connects every pending notice endpoint too and
//    waits for them: from then on a failing rank tells each peer directly;
//  - before that, a call sends the peer its signature (send_signature): a
//    broadcast between its root and every rank (the root must hear from
//    every rank: a rank that called it with another root tells the root
//    only this way), a call that posted nothing, a pair the data crossed
//    one way, a transport without immediates;
//  - the peer started the pair's connect: its connect request comes out of
//    a poll here (filter_notices) and is answered by connecting.
//
// Both sides of a pair decide to use it in the same call (a signature
// exchange is symmetric in a matched program), so the pairs whose
// signatures a call waits for are the same on both sides. No connect
// blocks: a signature for a pair still connecting waits in the pair's queue
// and goes out once the connect completes, which the call's progress polls
// (poll_data, drain_notices, p2p_step between calls), so a rank that is
// busy with another call answers connect requests too and a mismatch is
// still found at once. A connect that fails is taken as the pair's notice
// connection ending without a word, as an eagerly connected pair would show
// a peer that died: the call that waits for the peer names it.
//
// Transports without polled connects (a third-party plugin without the
// cap; every built-in transport has it) keep every notice endpoint
// connected at init: a blocking connect to a rank busy with another call
// would hold this rank until timeout.collective.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/log.h"
#include "core/notice_wire.h"

#include <chrono>
#include <utility>

namespace chorus::core {

bool Communicator::defers_notice(int peer) const { return p2p_lazy() && defers_data(peer); }

bool Communicator::broadcast_talks_to(int peer) const {
  // Pairs connected at init, pairs a call already used, and the root's
  // pairs: the same answer on both sides of a pair in a matched call.
  if (notice_idle_.empty() || !notice_idle_[size_t(peer)].lazy || notice_linked_[size_t(peer)])
    return true;
  return peer == call_sig_.root || rank_ == call_sig_.root;
}

void Communicator::begin_notice_connect(int peer, bool linked) {
  if (notice_idle_.empty()) return;
  if (linked) notice_linked_[size_t(peer)] = 1;
  IdleNotice& idle = notice_idle_[size_t(peer)];
  if (!idle.ep || idle.connecting) return;
  idle.connecting = true;
  ++notice_connecting_;
  log(CHORUS_LOG_DEBUG, "connecting the notice endpoint to rank " + std::to_string(peer));
  poll_notice_connect(peer);
}

void Communicator::poll_notice_connects() {
  if (notice_connecting_ == 0 && notice_queued_ == 0) return;
  // A broadcast's root may have a connect running to every rank: poll them
  // every kNoticeConnectGap, not on every poll of the call.
  const auto now = std::chrono::steady_clock::now();
  const bool due = now - notice_connect_polled_ >= kNoticeConnectGap;
  if (due) notice_connect_polled_ = now;
  for (int p = 0; p < size_ && (notice_connecting_ > 0 || notice_queued_ > 0); ++p) {
    IdleNotice& idle = notice_idle_[size_t(p)];
    if (idle.connecting) {
      if (due) poll_notice_connect(p);
    } else if (!idle.queue.empty() && notice_eps_[size_t(p)]) {
      flush_notice_queue(p);
    }
  }
}

void Communicator::poll_notice_connect(int p) {
  IdleNotice& idle = notice_idle_[size_t(p)];
  const int rc = tp_->endpoint_connect(idle.ep, idle.blob.data(), idle.blob.size(), 0);
  if (rc == CHORUS_ERR_AGAIN) return;
  idle.connecting = false;
  --notice_connecting_;
  chorus_tp_endpoint_t* ep = std::exchange(idle.ep, nullptr);
  std::vector<std::byte>().swap(idle.blob);
  if (rc != CHORUS_OK) {
    // As an eagerly connected pair whose peer died: its notice connection
    // ended without a word (known_lost_rank, owed_peer_gone).
    log(CHORUS_LOG_DEBUG, "connecting the notice endpoint to rank " + std::to_string(p) +
                              " failed: " + tp_->last_error());
    notice_peer_.erase(ep);
    tp_->endpoint_close(ep);
    notice_closed_[size_t(p)] = 1;
    notice_queued_ -= int(idle.queue.size());
    idle.queue.clear();
    return;
  }
  notice_eps_[size_t(p)] = ep;
  notice_connected_.fetch_add(1, std::memory_order_relaxed);
  log(CHORUS_LOG_DEBUG, "notice endpoint to rank " + std::to_string(p) + " connected");
  arm_notice_peer(p);
  if (notice_eps_[size_t(p)]) {
    flush_notice_queue(p);
  } else {  // refused its standing receives: no notices with this peer
    notice_queued_ -= int(idle.queue.size());
    idle.queue.clear();
  }
}

void Communicator::flush_notice_queue(int peer) {
  IdleNotice& idle = notice_idle_[size_t(peer)];
  size_t sent = 0;
  // Never waits (this runs inside a poll): what finds no free slot stays
  // queued for a later poll.
  while (sent < idle.queue.size() && sig_sends_out_[size_t(peer)] < kSigSendSlots) {
    const auto& q = idle.queue[sent++];
    post_signature(peer, q.sig, q.ask);
  }
  idle.queue.erase(idle.queue.begin(), idle.queue.begin() + std::ptrdiff_t(sent));
  notice_queued_ -= int(sent);
}

}  // namespace chorus::core
