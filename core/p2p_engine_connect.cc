// The tagged engine's pairs connected on first use (core/p2p_engine.h): on
// a transport with CHORUS_TP_CAP_CONNECT_POLL the communicator opens both
// endpoints of every pair and exchanges their addresses at init, but leaves
// them unconnected. The first operation that needs a pair (a send, a
// receive naming the peer, or the peer's connect request, which is how an
// any-source receive learns of a sender) starts polled connects of both
// endpoints; progress() polls them, and once both are up the pair gets its
// standing receives and the posts that waited for it. No call blocks on a
// connection, so no order of posts across ranks can deadlock, and each
// queued operation keeps its own deadline (p2p_engine_peers.cc).

#include "core/p2p_engine.h"

#include <chorus/chorus.h>

namespace chorus::core {

void P2pEngine::defer_connect(int peer, int kind, const std::byte* blob, size_t len) {
  Peer& pr = peers_[size_t(peer)];
  pr.link = Link::kIdle;
  pr.blob[kind].assign(blob, blob + len);
}

void P2pEngine::begin_connect(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  Peer& pr = peers_[size_t(peer)];
  if (pr.link != Link::kIdle || pr.broken || closing_) return;
  pr.link = Link::kConnecting;
  ++connecting_;
  if (hooks_.log)
    hooks_.log(CHORUS_LOG_DEBUG, hooks_.who + ": connecting the point-to-point pair with rank " +
                                     std::to_string(peer));
  poll_connect(peer);
}

void P2pEngine::poll_connect(int peer) {
  Peer& pr = peers_[size_t(peer)];
  if (pr.link != Link::kConnecting) return;
  for (int k = 0; k < 2; ++k) {
    if (pr.ep_up[k]) continue;
    chorus_tp_endpoint_t* ep = eps_[k][size_t(peer)];
    const int rc = ep ? tp_->endpoint_connect(ep, pr.blob[k].data(), pr.blob[k].size(), 0)
                      : CHORUS_ERR_INTERNAL;
    if (rc == CHORUS_OK) {
      pr.ep_up[k] = true;
    } else if (rc != CHORUS_ERR_AGAIN) {
      const std::string detail = ep ? tp_->last_error() : "the endpoint is gone";
      break_peer(peer, Status(rc, hooks_.who + ": connecting the point-to-point " +
                                      (k == 0 ? "control" : "data") + " endpoint to rank " +
                                      std::to_string(peer) + " failed: " + detail));
      return;
    }
  }
  if (!pr.ep_up[0] || !pr.ep_up[1]) return;
  pr.link = Link::kUp;
  --connecting_;
  pr.blob[0] = {};
  pr.blob[1] = {};
  if (hooks_.log)
    hooks_.log(CHORUS_LOG_DEBUG, hooks_.who + ": point-to-point pair with rank " +
                                     std::to_string(peer) + " connected");
  arm_peer(peer);
  if (pr.broken) return;
  if (hooks_.connected) hooks_.connected();
  flush(peer);
}

void P2pEngine::poll_connects() {
  if (connecting_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_connect_poll_ < kConnectPollGap) return;
  last_connect_poll_ = now;
  for (int p = 0; p < size_ && connecting_ > 0; ++p) poll_connect(p);
}

void P2pEngine::peer_lost(int peer, const Status& why) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  Peer& pr = peers_[size_t(peer)];
  if (pr.broken || pr.link == Link::kUp) return;
  break_peer(peer, why);
}

}  // namespace chorus::core
