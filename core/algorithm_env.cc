// The host callbacks an algorithm gets in its environment table
// (chorus_algo_env_v1_t, filled in by Communicator::run): endpoint lookup,
// memory registration for the length of the call, progress (polling with the
// call's deadline and the abort and peer-loss checks), failure reports and
// logging.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/lane_driver.h"
#include "core/log.h"

#include <chrono>
#include <sstream>

namespace chorus::core {

namespace {

std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

chorus_tp_endpoint_t* Communicator::env_endpoint(void* core, int peer, int channel) {
  auto* self = static_cast<Communicator*>(core);
  if (peer < 0 || peer >= self->size_ || channel < 0 || channel >= self->cfg_.channels)
    return nullptr;
  const size_t index = size_t(peer) * size_t(self->cfg_.channels) + size_t(channel);
  chorus_tp_endpoint_t* ep = self->endpoints_[index];
  // Not connected yet (core/data_connect.cc): only a call whose algorithm
  // declares every peer connects it, so this one declared RING.
  if (ep && index < self->deferred_.size() && !self->deferred_[index].empty()) ep = nullptr;
  // A peer no algorithm here declared: NULL, remembered so that a post on
  // it (or the algorithm's own report of the NULL) says why.
  if (!ep && self->undeclared_peer_ < 0 && peer != self->rank_) self->undeclared_peer_ = peer;
  return ep;
}

int Communicator::env_mem_register(void* core, const void* addr, size_t length,
                                   chorus_tp_mr_t** mr_out) {
  auto* self = static_cast<Communicator*>(core);
  *mr_out = nullptr;
  if (!(self->caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION) || length == 0) return CHORUS_OK;
  // The frozen transport ABI v1 takes `void*` (plugins implement it);
  // registering does not write through it.
  int rc =
      self->tp_->mem_register(self->ctx_, const_cast<void*>(addr), length, CHORUS_MEM_HOST, mr_out);
  if (rc != CHORUS_OK)
    return env_fail(core, rc,
                    (std::string("registering ") + std::to_string(length) +
                     " bytes failed: " + self->tp_->last_error())
                        .c_str());
  self->call_mrs_.push_back(*mr_out);
  return CHORUS_OK;
}

int Communicator::env_progress(void* core, chorus_tp_completion_t* out, size_t max) {
  auto* self = static_cast<Communicator*>(core);
  for (;;) {
    if (self->aborted_.load())
      return env_fail(core, CHORUS_ERR_ABORTED,
                      self->finalizing_.load()
                          ? "aborted: the communicator was finalized with this operation pending"
                          : "aborted by chorus_comm_abort()");
    if (self->mismatch_blocks_call())
      return env_fail(core, CHORUS_ERR_MISMATCH, self->mismatch_message().c_str());
    if (self->family_stopped()) {
      const Status st = self->family_status(self->call_what_.c_str());
      return env_fail(core, st.code(), st.message().c_str());
    }
    int n = self->poll_data(out, max);
    self->answer_signature_requests();
    if (n > 0) {
      for (int i = 0; i < n; ++i) self->note_completed(out[i]);
      LaneDriver::note_moved();
      return n;
    }
    self->settle_suspect(false);
    if (self->mismatch_blocks_call())
      return env_fail(core, CHORUS_ERR_MISMATCH, self->mismatch_message().c_str());
    if (n == 0 && self->awaiting_signatures_ && self->signatures_matched()) return 0;
    if (n == 0 && self->timeout_first_from_ >= 0 && self->call_sig_.is_collective()) {
      // A rank of this collective timed out and is leaving: it cannot complete.
      const int from = self->timeout_first_from_;
      Status st = self->timeout_status(
          "rank " + std::to_string(from) + " timed out (timeout.collective = " +
          format_seconds(self->cfg_.timeout_collective_s) + " s) and is leaving");
      return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
    }
    if (n == 0 && self->notice_first_from_ >= 0) {
      // Another rank left because it lost a peer: this call cannot complete.
      const int from = self->notice_first_from_, lost = self->notice_lost_[size_t(from)];
      self->lost_rank_ = lost == self->rank_ ? from : lost;
      self->lost_via_ = from;
      return env_fail(core, CHORUS_ERR_PEER_LOST, self->notice_message().c_str());
    }
    if (n == CHORUS_ERR_PENDING) {
      chorus_tp_error_t err = self->pending_error_;
      self->has_pending_error_ = false;
      err.message[sizeof(err.message) - 1] = '\0';
      std::string msg = std::string("transport '") + self->cfg_.transport + "' failed a " +
                        (err.opcode == CHORUS_TP_SEND ? "send to" : "receive from") + " rank " +
                        std::to_string(err.peer_rank) + ": " + err.message;
      if (err.status == CHORUS_ERR_PEER_LOST && err.peer_rank >= 0 && err.peer_rank < self->size_) {
        const int peer = err.peer_rank;
        self->resolve_lost(peer);
        if (!self->notice_timeout_.empty() && self->notice_timeout_[size_t(peer)]) {
          // It closed its connections because it timed out: alive, not lost.
          Status st = self->timeout_status(
              "rank " + std::to_string(peer) + " timed out (timeout.collective = " +
              format_seconds(self->cfg_.timeout_collective_s) + " s) and closed its connections");
          return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
        }
        msg += self->resolved_lost_suffix(peer);
      }
      return env_fail(core, err.status < 0 ? err.status : CHORUS_ERR_SYSTEM, msg.c_str());
    }
    if (n < 0)
      return env_fail(core, n, (std::string("poll failed: ") + self->tp_->last_error()).c_str());
    if (n == 0 && self->awaiting_signatures_) {
      // A peer whose signature this call still needs closed its connection
      // (it died): the signature will never come, and waiting for the
      // deadline would call the survivors' state a timeout.
      if (const int p = self->owed_peer_gone(); p >= 0) {
        const std::string msg = "rank " + std::to_string(p) +
                                " closed its connections before its part of this call arrived" +
                                self->lost_suffix(p);
        return env_fail(core, CHORUS_ERR_PEER_LOST, msg.c_str());
      }
    }
    // One clock reading serves the deadline check, the wait's timeout and
    // the wait-time counter (a few tens of ns each on a virtual machine).
    const auto t0 = std::chrono::steady_clock::now();
    if (self->call_deadline_.expired(t0)) {
      Status st = self->timeout_status("did not complete within timeout.collective = " +
                                       format_seconds(self->cfg_.timeout_collective_s) + " s");
      return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
    }
    // On the shared lane driver: its thread goes on with the other lanes'
    // calls, and sleeps only when none of them can move (lane_driver.h).
    if (LaneDriver::on_fiber()) {
      LaneDriver::yield_idle();
      continue;
    }
    // Sleep in the transport; wake at least every 200 ms to re-check abort
    // for transports without interrupt().
    // A point-to-point request issued meanwhile wakes this wait (submit
    // interrupts a waiting executor) and is taken in by the next poll.
    self->p2p_waiting_.store(true);
    int rc = self->inbox_nonempty_.load()
                 ? CHORUS_OK
                 : self->tp_->wait(self->ctx_, self->call_deadline_.remaining_ms(200, t0));
    self->p2p_waiting_.store(false);
    add_wait_ns(self->transport_wait_ns_, t0);
    if (rc != CHORUS_OK && rc != CHORUS_ERR_TIMEOUT)
      return env_fail(core, rc, (std::string("wait failed: ") + self->tp_->last_error()).c_str());
  }
}

int Communicator::env_fail(void* core, int status, const char* message) {
  auto* self = static_cast<Communicator*>(core);
  if (self->call_error_.is_ok()) {
    std::string text = message ? message : "";
    // The algorithm reports a failure of its own after asking for an
    // endpoint this communicator does not have: that is most likely why.
    if (self->undeclared_peer_ >= 0 &&
        (status == CHORUS_ERR_INTERNAL || status == CHORUS_ERR_INVALID_ARGUMENT ||
         status == CHORUS_ERR_NOT_SUPPORTED) &&
        text.find("(the peers field of its table") == std::string::npos)
      text = self->undeclared_peer_text(self->undeclared_peer_) +
             " (the algorithm reported: " + text + ")";
    // A post the transport refused because the peer is gone: same verdict
    // as a lost-peer completion (the algorithm's message lacks the suffix).
    if (status == CHORUS_ERR_PEER_LOST && self->post_lost_peer_ >= 0 && self->lost_rank_ < 0)
      text += self->lost_suffix(self->post_lost_peer_);
    self->call_error_ = Status(status, self->who() + ": " + self->call_what_ + ": " + text);
  }
  return status;
}

void Communicator::env_log(void* core, int level, const char* message) {
  auto* self = static_cast<Communicator*>(core);
  if (log_enabled(level)) self->log(level, message ? message : "");
}

}  // namespace chorus::core
