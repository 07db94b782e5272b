// Tagged point-to-point on the communicator: argument checks, handing an
// issued operation to the P2pEngine, the completion of its operations, and
// the executor's loop that drives the engine between and alongside queued
// operations. The engine's endpoints are wired up in communicator_wireup.cc.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/log.h"
#include "core/p2p_engine.h"

#include <algorithm>
#include <chrono>
#include <climits>

namespace chorus::core {

namespace {
// Longest sleep in the transport's wait while tagged operations are
// registered, for a transport without `interrupt` (a newly queued
// operation could not wake the executor otherwise).
constexpr int kNoInterruptWaitMs = 2;
constexpr int kMaxWaitMs = 100;
}  // namespace

Status Communicator::check_tagged(bool is_send, const void* buf, size_t count, int dtype, int peer,
                                  int tag) const {
  const char* what = is_send ? "send_tagged" : "recv_tagged";
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  const bool any_peer = !is_send && peer == CHORUS_ANY_SOURCE;
  if (!any_peer && (peer < 0 || peer >= size_ || peer == rank_))
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(what) + ": peer " + std::to_string(peer) + " is not another rank (rank " +
                std::to_string(rank_) + " of " + std::to_string(size_) + ")" +
                (is_send ? "" : "; use CHORUS_ANY_SOURCE to receive from any rank")};
  if (tag < 0 && !(tag == CHORUS_ANY_TAG && !is_send))
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": tag " + std::to_string(tag) +
                                             " is negative; tags are 0.." +
                                             std::to_string(CHORUS_TAG_MAX) +
                                             (is_send ? "" : ", or CHORUS_ANY_TAG on a receive")};
  if (!p2p_)
    return {CHORUS_ERR_NOT_SUPPORTED,
            std::string(what) +
                ": tagged point-to-point is off on this communicator "
                "(point_to_point.tagged = false); set it to true on every rank"};
  return Status::ok();
}

Status Communicator::start_tagged(bool is_send, void* buf, size_t count, int dtype, int peer,
                                  int tag, bool ordered) {
  const char* what =
      ordered ? (is_send ? "send" : "recv") : (is_send ? "send_tagged" : "recv_tagged");
  if (auto st = usable(what); !st.is_ok()) return st;
  if (!current_) return {CHORUS_ERR_INTERNAL, who() + ": a tagged operation outside a request"};
  // Handed over from inside a running call (drain_inbox in its polls): the
  // call's own state (its name, a mismatch it may fail with) is not ours to
  // touch; a known mismatch fails this operation at the next safe point.
  const bool in_call = t_running == this;
  if (!in_call) {
    call_what_ = what;
    if (auto st = mismatch_pending(); !st.is_ok()) return st;
  }
  (is_send ? send_ops_ : recv_ops_).fetch_add(1, std::memory_order_relaxed);
  auto op = std::make_shared<P2pOp>();
  op->req = current_;
  op->is_send = is_send;
  op->ordered = ordered;
  op->coll_pos = collective_seq_;
  op->peer = peer;
  op->tag = tag;
  op->dtype = dtype;
  op->buf = static_cast<std::byte*>(buf);
  op->bytes = uint64_t(count) * chorus_dtype_size(dtype);
  op->deadline = Deadline::after(seconds_ms(cfg_.timeout_collective_s));
  p2p_->start(std::move(op));
  p2p_active_.store(p2p_->active());
  if (!in_call) settle_p2p();
  return {Request::kDeferred, {}};
}

void Communicator::drain_inbox() {
  std::deque<std::shared_ptr<Request>> take;
  {
    std::lock_guard lock(q_mu_);
    take.swap(inbox_);
    inbox_nonempty_.store(false);
  }
  auto outer = std::move(current_);  // a running call's own request
  for (auto& r : take) run_request(*r);
  current_ = std::move(outer);
}

void Communicator::settle_p2p() {
  // A mismatch found here, or told by a peer's notice while operations wait
  // in the engine (a send waiting for a clear-to-send that the refusing
  // receiver will never give): it breaks the communicator, failing them.
  if (p2p_mismatch_ || (mismatch_known_ && !broken_ && p2p_ && p2p_->active())) {
    p2p_mismatch_ = false;
    (void)mismatch_pending();  // tells every rank, breaks the communicator
  }
  if (!p2p_break_.is_ok()) {
    Status st = std::move(p2p_break_);
    p2p_break_ = Status::ok();
    if (!broken_) mark_broken(st);
  }
  p2p_active_.store(p2p_ && p2p_->active());
}

void Communicator::make_p2p_engine() {
  P2pEngine::Hooks hooks;
  hooks.who = who();
  hooks.log = [this](int level, const std::string& m) { log(level, m); };
  hooks.mismatch = [this](const P2pOp& op, int peer, uint64_t theirs_bytes) {
    // The sizes chorus_send/recv's call signatures would have compared.
    CallSig mine, theirs;
    mine.seq = theirs.seq = CallSig::kP2pPosition | op.coll_pos;
    mine.rank = rank_, mine.peer = peer, mine.count = op.bytes;
    mine.call = op.is_send ? CallSig::kSigSend : CallSig::kSigRecv;
    theirs.rank = peer, theirs.peer = rank_, theirs.count = theirs_bytes;
    theirs.call = op.is_send ? CallSig::kSigRecv : CallSig::kSigSend;
    note_mismatch(mine, theirs, -1);
    p2p_mismatch_ = true;
    return Status(CHORUS_ERR_MISMATCH,
                  who() + ": " + (op.is_send ? "send" : "recv") + ": " + mismatch_message());
  };
  hooks.finish = [this](P2pOp& op, Status st) {
    // chorus_send/recv fail like any call: all but a bad argument break the
    // communicator (once no engine call is on the stack).
    if (op.ordered && !st.is_ok() && st.code() != CHORUS_ERR_INVALID_ARGUMENT &&
        st.code() != CHORUS_ERR_MISMATCH && p2p_break_.is_ok() && !broken_)
      p2p_break_ = st;
    if (!st.is_ok()) {
      count_failed();
    } else if (op.is_send) {
      peer_counters_[size_t(op.peer)].bytes_sent.fetch_add(op.bytes, std::memory_order_relaxed);
      peer_counters_[size_t(op.peer)].msgs_sent.fetch_add(1, std::memory_order_relaxed);
    } else {
      peer_counters_[size_t(op.src)].bytes_recv.fetch_add(op.got, std::memory_order_relaxed);
      peer_counters_[size_t(op.src)].msgs_recv.fetch_add(1, std::memory_order_relaxed);
    }
    // Before the request completes: a waiter that finalizes next must not
    // see the engine as busy.
    p2p_active_.store(p2p_->active());
    if (op.is_send || op.ordered)  // chorus_request_p2p_status is for tagged receives
      op.req->finish(std::move(st));
    else
      op.req->finish_recv(std::move(st), op.src, op.src_tag,
                          size_t(op.got / std::max<size_t>(1, chorus_dtype_size(op.dtype))));
  };
  hooks.connected = [this] { p2p_connected_.fetch_add(1, std::memory_order_relaxed); };
  p2p_ = std::make_unique<P2pEngine>(tp_, ctx_, caps_, rank_, size_, std::move(hooks));
}

void Communicator::wake_executor() {
  // Also wakes a call sleeping in the transport (env_progress sets the flag
  // too), so that it hands a new point-to-point request to the engine.
  if (p2p_waiting_.load()) interrupt_wait(tp_, ctx_);
}

void Communicator::p2p_step(int wait_ms) {
  if (inbox_nonempty_.load()) drain_inbox();
  poll_notice_connects();
  chorus_tp_completion_t comps[16];
  int n = tp_->poll(ctx_, comps, 16);
  if (n > 0) {
    // Tagged and notice traffic is consumed here; no call is running, so
    // nothing else is expected (a failed call's endpoints are closed).
    filter_notices(comps, n);
  } else if (n == CHORUS_ERR_PENDING) {
    chorus_tp_error_t e{};
    if (tp_->read_error(ctx_, &e) == CHORUS_OK && !p2p_->on_error(e) && !note_notice_error(e) &&
        !has_pending_error_) {
      // A data endpoint's error between calls: the next call reports it.
      pending_error_ = e;
      has_pending_error_ = true;
    }
  }
  answer_signature_requests();
  if (p2p_->connecting()) {
    // A rank that died before its pair was connected shows no error on the
    // pair's endpoints; the notices name it.
    if (const int lost = known_lost_rank(); lost >= 0)
      p2p_->peer_lost(lost,
                      Status(CHORUS_ERR_PEER_LOST,
                             who() + ": rank " + std::to_string(lost) + " is lost (" +
                                 (lost_via_ >= 0 ? "reported by rank " + std::to_string(lost_via_)
                                                 : std::string("its notice connection "
                                                               "ended")) +
                                 ") while its point-to-point pair was connecting"));
  }
  p2p_->progress();
  settle_p2p();
  if (n != 0 || !p2p_ || !p2p_->active()) return;
  const bool can_wake = can_interrupt(tp_);
  int ms = p2p_->next_deadline_ms(std::min(wait_ms, can_wake ? kMaxWaitMs : kNoInterruptWaitMs));
  p2p_waiting_.store(true);
  bool queued;
  {
    std::lock_guard lock(q_mu_);
    queued = !queue_.empty() || !inbox_.empty();
  }
  if (!queued && !aborted_.load()) {
    const auto t0 = std::chrono::steady_clock::now();
    tp_->wait(ctx_, std::max(1, ms));
    add_wait_ns(transport_wait_ns_, t0);
  }
  p2p_waiting_.store(false);
}

// Runs what is queued, in order, and drives the p2p engine, until `until`
// is done (nullptr: until nothing is queued or registered), holding the
// stream (busy_). With `until` it never runs queued operations: they may
// need this thread's own call to complete first, on another rank, so it
// returns false as soon as one is queued and the worker takes over. `limit`
// bounds how long it drives for `until`.
bool Communicator::drive(const std::shared_ptr<Request>& until, Deadline limit) {
  for (;;) {
    if (inbox_nonempty_.load()) drain_inbox();
    if (until && until->done()) return true;
    if (until && limit.expired()) return false;  // the worker goes on
    std::shared_ptr<Request> next;
    {
      std::lock_guard lock(q_mu_);
      if (until && !queue_.empty()) return false;  // handed over (see the header)
      if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
        running_ = next;
      }
    }
    if (next) {
      run_request(*next);
      settle_p2p();
      std::lock_guard lock(q_mu_);
      running_.reset();
      continue;
    }
    if (!p2p_ || !p2p_->active()) {
      p2p_active_.store(false);
      if (inbox_nonempty_.load()) continue;
      return !until || until->done();
    }
    if (aborted_.load()) {
      p2p_->fail_all(Status(CHORUS_ERR_ABORTED,
                            finalizing_.load()
                                ? "the communicator was finalized with this operation pending"
                                : "aborted by chorus_comm_abort()"));
      p2p_active_.store(false);
      continue;
    }
    p2p_step(until ? std::max(1, limit.remaining_ms(kMaxWaitMs)) : kMaxWaitMs);
    p2p_active_.store(p2p_->active());
  }
}

}  // namespace chorus::core
