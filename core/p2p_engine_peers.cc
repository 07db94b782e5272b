// The tagged engine's failures and lifecycle (core/p2p_engine.h): a pair's
// connection lost (lose) or broken here (break_peer), deadlines and the
// posts that waited for room (progress), failing everything (fail_all),
// and the goodbyes and close of finalize. The wire protocol and matching
// are in p2p_engine.cc; the constants both use in p2p_wire.h.

#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/p2p_wire.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace chorus::core {

using namespace p2p_wire;

bool P2pEngine::on_error(const chorus_tp_error_t& e) {
  auto it = ep_peer_.find(e.endpoint);
  if (it == ep_peer_.end()) return false;
  if (it->second < 0) return true;  // a closed endpoint's
  const int peer = it->second;
  if (lane_of(e.wr_id) == kLaneCtrlSend && (e.wr_id & 0xffffffff) != kByeIndex)
    free_bufs_.push_back(int(e.wr_id & 0xffffffff));
  Peer& pr = peers_[size_t(peer)];
  if (lane_of(e.wr_id) == kLaneCtrlRecv && e.endpoint == eps_[0][size_t(peer)]) --pr.slots_out;
  if (pr.broken) return true;
  std::string detail(e.message, strnlen(e.message, sizeof(e.message)));
  lose(peer, Status(e.status < 0 ? e.status : CHORUS_ERR_PEER_LOST,
                    hooks_.who + ": the point-to-point connection with rank " +
                        std::to_string(peer) + " failed" +
                        (pr.finalized ? " (it finalized its communicator)" : "") + ": " + detail));
  return true;
}

void P2pEngine::lose(int peer, const Status& why) {
  Peer& pr = peers_[size_t(peer)];
  if (pr.broken) return;
  if (!pr.dying) {
    pr.dying = true;
    pr.dying_status = why;
    // Nothing more can go out, or come in on the data endpoint.
    for (auto& op : take_in_flight(pr))
      complete(*op, Status(why.code(), op_name(*op) + ": " + why.message()));
  }
  // Receives wait until every message received before the end is in.
  if (pr.slots_out <= 0) break_peer(peer, pr.dying_status);
}

std::vector<std::shared_ptr<P2pOp>> P2pEngine::take_in_flight(Peer& pr) {
  for (auto& p : pr.waiting)
    if (p.lane == 0 && (p.wr_id & 0xffffffff) != kByeIndex)
      free_bufs_.push_back(int(p.wr_id & 0xffffffff));
  pr.waiting.clear();
  std::vector<std::shared_ptr<P2pOp>> out;
  for (auto& op : pr.eager_out) out.push_back(op);
  for (auto& [seq, op] : pr.awaiting_cts) out.push_back(op);
  for (auto& op : pr.bulk_out) out.push_back(op);
  for (auto& op : pr.bulk_in) out.push_back(op);
  pr.eager_out.clear();
  pr.awaiting_cts.clear();
  pr.bulk_out.clear();
  pr.bulk_in.clear();
  return out;
}

void P2pEngine::peer_finalized(int peer) {
  if (peer >= 0 && peer < size_) peers_[size_t(peer)].finalized = true;
}

void P2pEngine::break_peer(int peer, const Status& why) {
  Peer& pr = peers_[size_t(peer)];
  if (pr.broken) return;
  pr.broken = true;
  pr.broken_status = why;
  if (pr.link == Link::kConnecting) {  // abandoned: closing the endpoints ends it
    pr.link = Link::kIdle;
    --connecting_;
  }
  // Nothing may land in caller memory once its operation failed.
  for (int k = 0; k < 2; ++k)
    if (auto*& ep = eps_[k][size_t(peer)]) {
      ep_peer_[ep] = -1;
      tp_->endpoint_close(ep);
      ep = nullptr;
    }
  std::vector<std::shared_ptr<P2pOp>> failed = take_in_flight(pr);
  // Receives that only this peer could satisfy; an any-source receive
  // waits for the others (unless the peer died rather than finalized).
  // Posted receives matched nothing that arrived, so none is left for them.
  for (auto it = posted_.begin(); it != posted_.end();) {
    if ((*it)->peer == peer || ((*it)->peer < 0 && !pr.finalized)) {
      failed.push_back(*it);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  // Eager messages that arrived whole stay for the receives that take them
  // (the peer sent them before its connection ended); a request to send
  // can no longer be answered.
  std::erase_if(unexpected_,
                [&](const Unexpected& u) { return u.peer == peer && u.h.kind != kEager; });
  if (!failed.empty() && hooks_.log) hooks_.log(CHORUS_LOG_DEBUG, why.message());
  for (auto& op : failed) complete(*op, Status(why.code(), op_name(*op) + ": " + why.message()));
}

void P2pEngine::progress() {
  if (connecting_ > 0)
    for (int p = 0; p < size_; ++p) poll_connect(p);
  for (int p = 0; p < size_; ++p) flush(p);
  if (live_ == 0) return;
  // Unmatched receives past their deadline just end; an operation with a
  // message in flight breaks the pair's connection, so that nothing arrives
  // for it later.
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (!(*it)->deadline.expired()) {
      ++it;
      continue;
    }
    auto op = std::move(*it);
    it = posted_.erase(it);
    const bool unconnected = op->peer >= 0 && peers_[size_t(op->peer)].link == Link::kConnecting;
    complete(*op,
             Status(CHORUS_ERR_TIMEOUT,
                    op_name(*op) +
                        (unconnected ? ": rank " + std::to_string(op->peer) +
                                           " was still connecting (its point-to-point pair was not "
                                           "set up) at timeout.collective; is it alive and calling "
                                           "into the communicator?"
                                     : std::string(": no matching message arrived within "
                                                   "timeout.collective; check that the sender "
                                                   "sends it with this tag"))));
  }
  for (int p = 0; p < size_; ++p) {
    Peer& pr = peers_[size_t(p)];
    if (pr.broken) continue;
    bool late = false;
    auto check = [&](const std::shared_ptr<P2pOp>& op) { late = late || op->deadline.expired(); };
    for (auto& op : pr.eager_out) check(op);
    for (auto& [s, op] : pr.awaiting_cts) check(op);
    for (auto& op : pr.bulk_out) check(op);
    for (auto& op : pr.bulk_in) check(op);
    if (late && pr.link == Link::kConnecting) {
      break_peer(p, Status(CHORUS_ERR_TIMEOUT,
                           "rank " + std::to_string(p) +
                               " was still connecting (its point-to-point pair was not set up) "
                               "at timeout.collective; is rank " +
                               std::to_string(p) + " alive and calling into the communicator?"));
    } else if (late) {
      break_peer(
          p, Status(CHORUS_ERR_TIMEOUT, "a point-to-point transfer with rank " + std::to_string(p) +
                                            " did not finish within timeout.collective (is rank " +
                                            std::to_string(p) + " receiving it?)"));
    }
  }
}

int P2pEngine::next_deadline_ms(int cap) const {
  int ms = cap;
  for (const auto& op : posted_) ms = std::min(ms, op->deadline.remaining_ms(cap));
  for (const auto& pr : peers_) {
    for (const auto& op : pr.eager_out) ms = std::min(ms, op->deadline.remaining_ms(cap));
    for (const auto& [s, op] : pr.awaiting_cts) ms = std::min(ms, op->deadline.remaining_ms(cap));
    for (const auto& op : pr.bulk_out) ms = std::min(ms, op->deadline.remaining_ms(cap));
    for (const auto& op : pr.bulk_in) ms = std::min(ms, op->deadline.remaining_ms(cap));
  }
  return ms;
}

void P2pEngine::fail_all(const Status& why) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& pr = peers_[size_t(p)];
    if (pr.broken) continue;
    pr.finalized = true;  // any-source receives are failed below, once
    break_peer(p, why);
  }
  auto left = std::move(posted_);
  posted_.clear();
  for (auto& op : left) complete(*op, Status(why.code(), op_name(*op) + ": " + why.message()));
}

void P2pEngine::say_bye() {
  if (!bye_) {
    bye_ = static_cast<std::byte*>(std::aligned_alloc(64, 64));
    if (!bye_) return;
    Header h{kMagic, kBye, 0, 0, 0, 0, 0};
    std::memcpy(bye_, &h, sizeof(h));
    if (tp_->mem_register(ctx_, bye_, 64, CHORUS_MEM_HOST, &bye_mr_) != CHORUS_OK) return;
  }
  // Goodbyes only on connected pairs; a pair still connecting is closed
  // with the endpoints, and no new one starts.
  closing_ = true;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[size_t(p)].broken || peers_[size_t(p)].link != Link::kUp) continue;
    for (int k = 0; k < kSlots; ++k)
      post(p, Post{0, bye_, kHeaderBytes, bye_mr_, wr(kLaneCtrlSend, kByeIndex)});
  }
}

bool P2pEngine::byes_done() const {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && !peers_[size_t(p)].broken && peers_[size_t(p)].link == Link::kUp &&
        peers_[size_t(p)].byes < kSlots)
      return false;
  return true;
}

void P2pEngine::close() {
  closing_ = true;
  for (int k = 0; k < 2; ++k)
    for (auto*& ep : eps_[k])
      if (ep) {
        ep_peer_[ep] = -1;
        tp_->endpoint_close(ep);
        ep = nullptr;
      }
}

}  // namespace chorus::core
