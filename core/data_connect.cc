// Data endpoints connected on first use. A communicator whose algorithms
// declare every peer (CHORUS_ALGO_PEERS_ALL, a mesh) opens a data endpoint
// to every peer and exchanges their addresses at init, as before, but
// connects only its ring neighbours there. The endpoints to the other peers
// are connected by the first collective whose algorithm declares every peer,
// on every rank in the same call, before the algorithm posts anything.
//
// Why that cannot deadlock with a blocking endpoint_connect (transport ABI
// P3: a side may wait until the other side calls connect): every rank
// connects its pending pairs in one global order, ascending by (lower rank,
// higher rank), which on one rank is ascending peer order. A rank blocked on
// pair P waits for P's other rank, which is either in P too or still busy
// with a pair that comes before P; a chain of such waits strictly descends
// the order, so it ends at a rank that can finish. Collective calls are
// matched, so every rank reaches the call. The call's deadline bounds the
// connects, and a failure fails the call naming the peer.
//
// Not deferred (defers_data): the untagged send/recv path, which posts on
// data channel 0 to one peer at a time with no matched call on the others,
// and communicators with lanes, whose calls on different lanes progress on
// one thread, so a connect blocking in one lane could hold up the peer's
// connect in another.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/log.h"

#include <algorithm>
#include <chrono>

namespace chorus::core {

namespace {

/// How long a failed connect waits for word of a lost rank (a notice
/// connection ending, a peer's lost-peer notice) before blaming the peer.
constexpr int kLostGraceMs = 300;

}  // namespace

bool Communicator::defers_data(int peer) const {
  if (data_peers_.ring() || !cfg_.p2p_tagged || cfg_.is_lane || cfg_.lanes > 1) return false;
  // The ring neighbours' endpoints are connected at init: ring algorithms
  // (which may run on a mesh communicator too) need nothing more.
  const DataPeers ring(CHORUS_ALGO_PEERS_RING, size_);
  return data_peers_.links(rank_, peer) && !ring.links(rank_, peer);
}

int Communicator::known_lost_rank() {
  if (notice_lost_.empty()) return -1;
  // A peer's report names the rank it lost; the peer itself may be alive.
  for (int p = 0; p < size_; ++p) {
    const int lost = notice_lost_[size_t(p)];
    if (p != rank_ && lost >= 0 && lost != rank_) {
      lost_via_ = p;
      return lost;
    }
  }
  // A notice connection that ended without a goodbye or a timeout notice.
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && notice_closed_[size_t(p)] && !notice_finished_[size_t(p)] &&
        !notice_timeout_[size_t(p)]) {
      lost_via_ = -1;
      return p;
    }
  }
  return -1;
}

Status Communicator::deferred_connect_failed(Status st) {
  // A rank that died before this call shows up as its notice connection
  // ending, or in a lost-peer notice of a rank that saw it end. Give those a
  // short grace to arrive: without them every rank would blame the peer it
  // happened to be connecting to, alive or not.
  if (!notice_peer_.empty() && known_lost_rank() < 0 && !mismatch_known_)
    pump_notices(Deadline::after(std::chrono::milliseconds(kLostGraceMs)),
                 [&] { return known_lost_rank() >= 0 || mismatch_known_; });
  // A rank that found this call mismatched breaks its communicator, closing
  // its endpoints, and says why in a notice first: that is the cause to
  // report, as settle_failure does for a call that ran.
  if (mismatch_known_)
    return {CHORUS_ERR_MISMATCH, who() + ": " + call_what_ + ": " + mismatch_message()};
  const int lost = known_lost_rank();
  if (lost < 0) return st;
  lost_rank_ = lost;
  return {CHORUS_ERR_PEER_LOST,
          who() + ": " + call_what_ + ": rank " + std::to_string(lost) + " is lost" +
              (lost_via_ >= 0 ? " (rank " + std::to_string(lost_via_) + " reported it)" : "") +
              ", so the data endpoints to every peer cannot be connected (" + st.message() +
              "); the communicator must be rebuilt"};
}

Status Communicator::connect_deferred_data() {
  if (!deferred_pending_) return Status::ok();
  const size_t channels = size_t(cfg_.channels);
  // A loss already known fails the call at once, not at its deadline.
  if (!notice_peer_.empty()) {
    drain_notices();
    if (known_lost_rank() >= 0)
      return deferred_connect_failed(
          {CHORUS_ERR_PEER_LOST, "a peer was lost before the first call that needs them"});
  }
  for (int p = 0; p < size_; ++p) {  // ascending peer order: see the top
    for (size_t c = 0; c < channels; ++c) {
      auto& blob = deferred_[size_t(p) * channels + c];
      if (blob.empty()) continue;
      if (aborted_.load())
        return {CHORUS_ERR_ABORTED, who() + ": " + call_what_ + ": aborted while connecting"};
      chorus_tp_endpoint_t* ep = endpoints_[size_t(p) * channels + c];
      const int rc =
          tp_->endpoint_connect(ep, blob.data(), blob.size(), blocking_connect_ms(call_deadline_));
      if (rc != CHORUS_OK) {
        std::string text = who() + ": " + call_what_ + ": connecting to rank " + std::to_string(p) +
                           " (channel " + std::to_string(c) + ") over " + cfg_.transport +
                           " at its first use failed: " + tp_->last_error();
        if (rc == CHORUS_ERR_TIMEOUT)
          text += "; rank " + std::to_string(p) +
                  " did not connect within timeout.collective: check that it is alive and "
                  "reached this call";
        return deferred_connect_failed({rc, text});
      }
      std::vector<std::byte>().swap(blob);
      data_connected_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  deferred_pending_ = false;
  // The notice endpoints left for first use (core/notice_connect.cc) connect
  // now too, polled, on every rank in this call: from here on every pair
  // exchanges data, and a rank that fails tells each peer directly, as a
  // mesh always did. Waited for here, so that this call's failures find them
  // up; none blocks, so a rank in another call answers too.
  if (auto st = connect_notices_with_data(); !st.is_ok()) return st;
  // The composite transport picks a sub-transport per endpoint as it
  // connects; both sides of each pair now see the same choice.
  if (cfg_.transport == kAutoTransportName) {
    imm_peer_ = auto_transport_peer_imm(ctx_, size_);
    imm_any_ = std::find(imm_peer_.begin(), imm_peer_.end(), 1) != imm_peer_.end();
  }
  log(CHORUS_LOG_DEBUG, call_what_ + ": connected the data endpoints to every peer");
  return Status::ok();
}

Status Communicator::connect_notices_with_data() {
  if (notice_idle_.empty()) return Status::ok();
  // Every pair left for first use is in use from here on, also one that the
  // peer's connect request connected already: both sides must count it in
  // use alike (broadcast_talks_to), or one would wait for a signature the
  // other does not send.
  for (int p = 0; p < size_; ++p)
    if (notice_idle_[size_t(p)].lazy) begin_notice_connect(p, true);
  if (notice_connecting_ == 0) return Status::ok();
  pump_notices(call_deadline_, [&] {
    return notice_connecting_ == 0 || mismatch_known_ || known_lost_rank() >= 0;
  });
  if (notice_connecting_ == 0 && !mismatch_known_ && known_lost_rank() < 0) return Status::ok();
  std::string waiting;
  for (int p = 0; p < size_; ++p)
    if (notice_idle_[size_t(p)].connecting)
      waiting += (waiting.empty() ? "" : ", ") + std::to_string(p);
  return deferred_connect_failed(
      {CHORUS_ERR_TIMEOUT, who() + ": " + call_what_ + ": the notice endpoints to rank(s) " +
                               waiting + " did not connect within timeout.collective"});
}

}  // namespace chorus::core
