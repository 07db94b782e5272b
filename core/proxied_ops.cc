// The transport ops an algorithm sees: post_send, post_recv, poll and
// read_error wrap the real transport's to count outstanding posts, put the
// call's signature digest in the data or send the signature on first
// contact, and take the core's notices out of the completion stream. They find their communicator
// through t_running, set by the dispatching thread for the length of a call.

#include "core/communicator.h"
#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"

#include <cstdio>

namespace chorus::core {

thread_local Communicator* t_running = nullptr;

int Communicator::proxy_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                                  chorus_tp_mr_t* mr, uint64_t wr_id) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (!ep) return self->null_endpoint_post(true);
  const int peer = self->peer_of(ep);
  // To a peer whose transport carries immediates, a collective's data
  // carries its digest; other sends are plain (their receivers read 0).
  const int rc = self->call_imm_ != 0 && peer >= 0 && self->imm_peer_[size_t(peer)]
                     ? self->tp_->post_send_imm(ep, buf, length, mr, wr_id, self->call_imm_)
                     : self->tp_->post_send(ep, buf, length, mr, wr_id);
  self->after_post(peer, true, rc);
  if (rc == CHORUS_OK) self->signature_after_post(peer, true);
  return rc;
}

int Communicator::proxy_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length,
                                  chorus_tp_mr_t* mr, uint64_t wr_id) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (!ep) return self->null_endpoint_post(false);
  const int peer = self->peer_of(ep);
  const int rc = self->tp_->post_recv(ep, buf, length, mr, wr_id);
  self->after_post(peer, false, rc);
  if (rc == CHORUS_OK) self->signature_after_post(peer, false);
  return rc;
}

int Communicator::null_endpoint_post(bool send) {
  // Never handed to the transport: a NULL endpoint is the one env_endpoint
  // returned for a peer without data endpoints (or for self).
  if (undeclared_peer_ >= 0)
    return env_fail(this, CHORUS_ERR_NOT_SUPPORTED, undeclared_peer_text(undeclared_peer_).c_str());
  return env_fail(this, CHORUS_ERR_INVALID_ARGUMENT,
                  (std::string(send ? "post_send" : "post_recv") +
                   " on a NULL endpoint (env->endpoint returns NULL for this rank itself and for "
                   "peers without data endpoints); a bug in the algorithm")
                      .c_str());
}

int Communicator::after_post(int peer, bool send, int rc) {
  if (rc == CHORUS_OK)
    note_posted(peer, send);
  else if (rc == CHORUS_ERR_AGAIN)
    retries_.fetch_add(1, std::memory_order_relaxed);
  else if (rc == CHORUS_ERR_PEER_LOST)
    note_post_lost(peer);
  return rc;
}

int Communicator::proxy_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (ctx != self->ctx_) return self->tp_->poll(ctx, out, max);
  if (self->mismatch_blocks_call() && !self->has_pending_error_) {
    // An algorithm that polls without env->progress learns of the mismatch
    // as a failed completion; the call then reports MISMATCH.
    self->pending_error_ = {};
    self->pending_error_.status = CHORUS_ERR_MISMATCH;
    self->pending_error_.peer_rank = -1;
    std::snprintf(self->pending_error_.message, sizeof(self->pending_error_.message), "%s",
                  self->mismatch_text_.c_str());
    self->has_pending_error_ = true;
  }
  int n = self->poll_data(out, max);
  for (int i = 0; i < n; ++i) self->note_completed(out[i]);
  return n;
}

int Communicator::proxy_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (ctx == self->ctx_ && self->has_pending_error_) {
    *err_out = self->pending_error_;
    self->has_pending_error_ = false;
    return CHORUS_OK;
  }
  return self->tp_->read_error(ctx, err_out);
}

int Communicator::poll_data(chorus_tp_completion_t* out, size_t max) {
  // A point-to-point request issued while this call runs starts now.
  if (inbox_nonempty_.load(std::memory_order_relaxed)) drain_inbox();
  // Tagged pairs being connected (on first use) finish here too: the peer
  // this call waits for may itself wait for this rank's tagged message.
  if (p2p_ && p2p_->connecting()) p2p_->poll_connects();
  // So do notice endpoints connected on first use (core/notice_connect.cc).
  poll_notice_connects();
  for (;;) {
    if (has_pending_error_) return CHORUS_ERR_PENDING;
    int n = tp_->poll(ctx_, out, max);
    if (n > 0) return filter_notices(out, n);
    if (n != CHORUS_ERR_PENDING) return n;
    chorus_tp_error_t e{};
    if (int rc = tp_->read_error(ctx_, &e); rc != CHORUS_OK) {
      e = {};
      e.status = CHORUS_ERR_INTERNAL;
      e.peer_rank = -1;
      std::snprintf(e.message, sizeof(e.message),
                    "poll reported an error but read_error failed: %s", tp_->last_error());
    } else if (p2p_ && p2p_->on_error(e)) {
      continue;  // the tagged point-to-point engine's: it fails what it affects
    } else if (note_notice_error(e) && e.status == CHORUS_ERR_PEER_LOST) {
      // A peer closed its notice endpoint: it finished or died. Its data
      // endpoints tell whether the running call still needed it.
      continue;
    }
    // Anything else on a notice endpoint (a local or transport error on a
    // standing receive or a signature) leaves this pair without failure
    // notices and signature checks: the running call fails with it, truthfully,
    // rather than going on unchecked.
    pending_error_ = e;
    has_pending_error_ = true;
    return CHORUS_ERR_PENDING;
  }
}

}  // namespace chorus::core
