// Requests and the execution stream: a Request's state and waits, the
// issue-order queue, running a blocking call on the caller's thread when
// nothing is ahead of it, the worker thread that runs queued non-blocking
// requests (a lane's queued collectives go to the shared lane driver
// instead, core/lane_driver.h), and cancellation.

#include "core/communicator.h"
#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/lane_driver.h"
#include "core/lane_family.h"
#include "core/log.h"

#include <algorithm>
#include <chrono>
#include <functional>

namespace chorus::core {

namespace {
// How long the worker leaves registered point-to-point operations to a
// thread that may be about to wait for them (run_if_next) before it drives
// them itself.
constexpr int kWaiterGraceUs = 50;

// With the shared lane driver (collectives.driver = "shared"), a queued
// collective of a lane is the driver's to run, never the lane's worker's.
bool driver_runs(const LaneFamily* family, const Request& req) {
  return family && family->driver && req.order() != Request::kNoOrder;
}

}  // namespace

bool Request::wait_for(int timeout_ms) {
  // A blocking call run on the caller's thread is done by now: no lock.
  if (state_.load(std::memory_order_acquire) == State::kDone) return true;
  std::unique_lock lock(mu_);
  auto is_done = [&] { return state_.load(std::memory_order_relaxed) == State::kDone; };
  if (timeout_ms < 0) {
    cv_.wait(lock, is_done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), is_done);
}

void Request::reuse(uint64_t seq, const char* what, std::function<Status(Communicator&)> body,
                    uint64_t order) {
  seq_ = seq;
  order_ = order;
  what_ = what;
  body_ = std::move(body);
  status_ = Status::ok();
  has_p2p_ = false;
  p2p_source_ = p2p_tag_ = -1;
  p2p_count_ = 0;
  state_.store(State::kQueued, std::memory_order_relaxed);
}

bool Request::done() const { return state_.load(std::memory_order_acquire) == State::kDone; }

Request::State Request::state() const { return state_.load(std::memory_order_acquire); }

Status Request::status() const {
  // Final once done (finish() stores kDone with release after status_).
  if (state_.load(std::memory_order_acquire) == State::kDone) return status_;
  std::lock_guard lock(mu_);
  return status_;
}

bool Request::p2p_status(int& source, int& tag, size_t& count) const {
  std::lock_guard lock(mu_);
  if (state_.load(std::memory_order_relaxed) != State::kDone || !has_p2p_ || !status_.is_ok())
    return false;
  source = p2p_source_, tag = p2p_tag_, count = p2p_count_;
  return true;
}

void Request::finish_recv(Status st, int source, int tag, size_t count) {
  {
    std::lock_guard lock(mu_);
    has_p2p_ = true;
    p2p_source_ = source, p2p_tag_ = tag, p2p_count_ = count;
  }
  finish(std::move(st));
}

void Request::set_running() {
  std::lock_guard lock(mu_);
  state_.store(State::kRunning, std::memory_order_relaxed);
}

void Request::finish(Status st) {
  std::function<Status(Communicator&)> drop;
  std::vector<std::shared_ptr<Request>> followers;
  {
    std::lock_guard lock(mu_);
    if (state_.load(std::memory_order_relaxed) == State::kDone) return;
    status_ = std::move(st);
    state_.store(State::kDone, std::memory_order_release);
    drop.swap(body_);
    followers.swap(followers_);
  }
  cv_.notify_all();
  // Fixed now (done): read without the lock.
  for (auto& f : followers) pass_outcome(*f);
}

void Request::pass_outcome(Request& follower) const {
  if (has_p2p_)
    follower.finish_recv(status_, p2p_source_, p2p_tag_, p2p_count_);
  else
    follower.finish(status_);
}

std::shared_ptr<Request> Request::make_grouped(const char* what) {
  auto req = std::make_shared<Request>(0, what, nullptr);
  req->grouped_ = true;
  return req;
}

void Request::lead(std::shared_ptr<Request> follower) {
  {
    std::lock_guard lock(mu_);
    if (state_.load(std::memory_order_relaxed) != State::kDone) {
      followers_.push_back(std::move(follower));
      return;
    }
  }
  pass_outcome(*follower);
}

void Request::set_leader(Communicator* comm, std::shared_ptr<Request> leader) {
  std::lock_guard lock(mu_);
  leader_comm_ = comm;
  leader_ = std::move(leader);
}

bool Request::leader(Communicator*& comm, std::shared_ptr<Request>& leader) const {
  std::lock_guard lock(mu_);
  if (!leader_) return false;
  comm = leader_comm_;
  leader = leader_;
  return true;
}

void Communicator::run_request(Request& req) {
  req.set_running();
  Status st;
  uint64_t cut;
  std::string cut_what;
  // cut_after_ is written under q_mu_ (cancel()) and read here atomically:
  // the lock only ever ordered this read against a cancel, as the atomic
  // does. It is taken only to copy the text of a cut that is reported.
  cut = cut_after_.load(std::memory_order_acquire);
  if (req.seq() > cut) {
    std::lock_guard lock(q_mu_);
    cut = cut_after_.load(std::memory_order_relaxed);
    cut_what = cut_what_;
  }
  if (req.seq() > cut) {
    st = {CHORUS_ERR_ABORTED, who() + ": " + req.what() + ": an earlier request (" + cut_what +
                                  ") was cancelled on this rank, so later operations no longer "
                                  "match the other ranks; finalize this communicator"};
  } else {
    try {
      current_ = req.shared_from_this();
      running_order_ = req.order();
      // Counted while it runs, however the body ends (lanes.running).
      struct Running {
        Communicator* c;
        ~Running() {
          if (c) c->family_running(false);
        }
      } running{family_ && req.order() != Request::kNoOrder ? this : nullptr};
      if (running.c) family_running(true);
      st = req.body_(*this);
      current_.reset();
    } catch (const std::bad_alloc&) {
      current_.reset();
      st = {CHORUS_ERR_SYSTEM, who() + ": " + req.what() + ": out of memory"};
    } catch (const std::exception& e) {
      current_.reset();
      st = {CHORUS_ERR_INTERNAL, who() + ": " + req.what() + ": internal error: " + e.what()};
    }
  }
  // A tagged operation: the p2p engine finishes (and counts) it.
  if (st.code() == Request::kDeferred) return;
  // With lanes, a failed collective stops the calls issued after it on
  // every lane, its own included (communicator_lanes.cc): arguments were
  // checked at issue, so a failure here may have left ranks apart.
  if (family_ && !st.is_ok() && req.order() != Request::kNoOrder) family_fail(st, req.order());
  // Every operation that ends with an error is counted here, once.
  if (!st.is_ok()) count_failed();
  req.finish(std::move(st));
}

Status Communicator::execute(const char* what, std::function<Status(Communicator&)> body, bool p2p,
                             uint64_t order) {
  auto req = execute_request(what, std::move(body), p2p, order);
  Status st = req->status();
  // Kept for the next blocking call (execute_request), which reuses it only
  // if by then this is its last reference. Point-to-point requests are
  // never kept: the tagged engine may hold them past their completion.
  if (!p2p && req->done()) {
    std::lock_guard lock(q_mu_);
    if (!spare_request_) spare_request_ = std::move(req);
  }
  return st;
}

std::shared_ptr<Request> Communicator::execute_request(const char* what,
                                                       std::function<Status(Communicator&)> body,
                                                       bool p2p, uint64_t order) {
  std::unique_lock lock(q_mu_);
  std::shared_ptr<Request> req;
  // The last blocking call's request, when nothing else holds it any more
  // (a queue or a lane driver that ran it drops its copy after finish()):
  // the acquire fence pairs with that drop's release, so the other thread's
  // last reads of it happen before reuse() writes it.
  if (!p2p && spare_request_ && spare_request_.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    req = std::move(spare_request_);
    req->reuse(next_seq_++, what, std::move(body), order);
  } else {
    req = std::make_shared<Request>(next_seq_++, what, std::move(body), order);
  }
  if (stopping_) {
    count_failed();
    req->finish(
        {CHORUS_ERR_ABORTED, who() + ": " + what + ": the communicator is being finalized"});
    return req;
  }
  if (p2p && p2p_) {
    inbox_.push_back(req);
    inbox_nonempty_.store(true);
    if (!busy_) {
      // The stream is free: this thread drives the engine until its own
      // operation is done, or hands the stream over when something is
      // queued meanwhile (drive_here).
      inline_ops_.fetch_add(1, std::memory_order_relaxed);
      drive_here(req, lock);
      req->wait_for(-1);
      return req;
    }
    // Whoever runs the stream hands it to the engine; a worker drives it
    // once that is done.
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
    lock.unlock();
    q_cv_.notify_all();
    wake_executor();
    req->wait_for(-1);
    return req;
  }
  if (!busy_ && queue_.empty()) {
    // Nothing ahead of this call: run it here, without a thread hop.
    run_here(*req, lock, inline_ops_);
    req->wait_for(-1);  // done, unless handed over (run_here)
    return req;
  }
  queue_.push_back(req);
  queued_ops_.fetch_add(1, std::memory_order_relaxed);
  wake_for_queued(*req, lock);
  auto t0 = std::chrono::steady_clock::now();
  req->wait_for(-1);
  add_request_wait(uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count()));
  return req;
}

std::shared_ptr<Request> Communicator::submit(const char* what,
                                              std::function<Status(Communicator&)> body, bool p2p,
                                              uint64_t order) {
  std::unique_lock lock(q_mu_);
  auto req = std::make_shared<Request>(next_seq_++, what, std::move(body), order);
  requests_issued_.fetch_add(1, std::memory_order_relaxed);
  queued_ops_.fetch_add(1, std::memory_order_relaxed);
  if (stopping_) {
    count_failed();
    req->finish(
        {CHORUS_ERR_ABORTED, who() + ": " + what + ": the communicator is being finalized"});
    return req;
  }
  if (p2p && p2p_) {
    inbox_.push_back(req);
    inbox_nonempty_.store(true);
    if (!busy_) {
      // The stream is free: hand it to the engine here (an eager send goes
      // out at once), so that a wait that follows finds it registered and
      // drives it on its own thread (run_if_next) without a hand-over.
      busy_ = true;
      lock.unlock();
      drain_inbox();
      lock.lock();
      busy_ = false;
    }
  } else {
    queue_.push_back(req);
  }
  wake_for_queued(*req, lock);
  return req;
}

// Whoever runs `req` next: the shared lane driver for a lane's collective,
// otherwise the worker (started on first use). A worker woken for a call
// that is not its own only goes back to sleep. `lock` holds q_mu_; it is
// released on return.
void Communicator::wake_for_queued(const Request& req, std::unique_lock<std::mutex>& lock) {
  const bool for_driver = driver_runs(family_.get(), req);
  if (!for_driver && !worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
  lock.unlock();
  if (!for_driver) q_cv_.notify_all();
  // The executor driving tagged operations runs queued calls too (drive).
  wake_executor();
  if (for_driver) family_->driver->wake();
}

// The work the progress thread would do, on the thread that is about to
// block anyway: without the two thread hand-overs (submit to the worker,
// the worker back to the waiter) that dominate a small isend/irecv. False
// leaves everything as it was. A wait with a limit drives only a
// point-to-point request, and only until the limit; then the worker goes on.
bool Communicator::run_if_next(const std::shared_ptr<Request>& req, int timeout_ms) {
  std::unique_lock lock(q_mu_);
  if (stopping_ || busy_) return false;
  if (timeout_ms < 0 && !queue_.empty() && queue_.front() == req) {
    queue_.pop_front();
    run_here(*req, lock, waiter_ops_);
    return true;
  }
  // A point-to-point operation not yet handed over, or one the engine
  // holds: drive it here rather than wait for the worker to.
  const bool in_inbox = std::find(inbox_.begin(), inbox_.end(), req) != inbox_.end();
  if (!in_inbox && (req->state() != Request::State::kRunning || req->done())) return false;
  drive_here(
      req, lock,
      timeout_ms < 0 ? Deadline::never() : Deadline::after(std::chrono::milliseconds(timeout_ms)));
  return true;
}

void Communicator::drive_here(const std::shared_ptr<Request>& req,
                              std::unique_lock<std::mutex>& lock, Deadline limit) {
  busy_ = true;
  lock.unlock();
  const bool done = drive(req, limit);
  lock.lock();
  release_stream(lock, done);
}

void Communicator::release_stream(std::unique_lock<std::mutex>& lock, bool done) {
  busy_ = false;
  // Handed over: queued operations wait, and the operation this thread
  // drove is not done; the worker takes both on.
  if (!done && !worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
  // Wake the worker only when there is something for it: a wake-up that
  // finds nothing costs a context switch per operation on a busy core.
  const bool work = !done || !queue_.empty() || !inbox_.empty() || p2p_active_.load();
  const bool for_driver = !queue_.empty() && driver_runs(family_.get(), *queue_.front());
  lock.unlock();
  if (work) q_cv_.notify_all();
  if (for_driver) family_->driver->wake();
}

void Communicator::run_here(Request& req, std::unique_lock<std::mutex>& lock,
                            std::atomic<uint64_t>& counter) {
  busy_ = true;
  lock.unlock();
  counter.fetch_add(1, std::memory_order_relaxed);
  run_request(req);
  // A point-to-point request the engine holds: this thread drives it until
  // it is done, or hands the stream over to the worker (drive).
  const bool done = req.done() || drive(req.shared_from_this());
  lock.lock();
  // The worker may have woken meanwhile and gone back to sleep: what is
  // queued behind this request is its to run.
  release_stream(lock, done);
}

Status Communicator::cancel(const std::shared_ptr<Request>& req) {
  std::unique_lock lock(q_mu_);
  auto it = std::find(queue_.begin(), queue_.end(), req);
  if (it == queue_.end())
    return {CHORUS_ERR_NOT_SUPPORTED,
            who() + ": " + req->what() + ": " +
                (req->done() ? "already complete"
                             : "already started; wait for it, or abort the communicator") +
                "; only a request that has not started can be cancelled"};
  queue_.erase(it);
  if (req->seq() < cut_after_.load(std::memory_order_relaxed)) {
    cut_what_ = req->what() + " #" + std::to_string(req->seq());
    cut_after_.store(req->seq(), std::memory_order_release);
  }
  requests_cancelled_.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  log(CHORUS_LOG_INFO, "request " + req->what() + " #" + std::to_string(req->seq()) +
                           " cancelled; later operations on this communicator will fail");
  req->finish({CHORUS_ERR_ABORTED, who() + ": " + req->what() + ": cancelled by chorus_cancel()"});
  // With lanes the cancelled call's lane no longer lines up with the other
  // ranks, and neither does the lane order of later calls: every lane stops.
  if (family_)
    family_fail({CHORUS_ERR_ABORTED,
                 who() + ": " + req->what() + " #" + std::to_string(req->seq()) + " was cancelled"},
                req->order());
  return Status::ok();
}

void Communicator::worker_main() {
  std::unique_lock lock(q_mu_);
  // Queued work of this worker's: not a collective the lane driver runs.
  auto queued = [&] { return !queue_.empty() && !driver_runs(family_.get(), *queue_.front()); };
  for (;;) {
    q_cv_.wait(lock, [&] {
      return stopping_ || (!busy_ && (queued() || !inbox_.empty() || p2p_active_.load()));
    });
    if (stopping_) {
      // Finalizing: whatever is still queued completes as aborted without
      // running (the destructor already aborted a running one).
      auto left = std::move(queue_);
      queue_.clear();
      for (auto& r : inbox_) left.push_back(std::move(r));
      inbox_.clear();
      lock.unlock();
      for (auto& r : left)
        r->finish({CHORUS_ERR_ABORTED,
                   who() + ": " + r->what() + ": the communicator was finalized before it ran"});
      return;
    }
    if (!queued() && inbox_.empty()) {
      // Only point-to-point operations are registered. A thread that waits
      // for one drives it itself (run_if_next) with no hand-over: give such
      // a waiter a moment to take the stream before driving in the
      // background.
      q_cv_.wait_for(lock, std::chrono::microseconds(kWaiterGraceUs),
                     [&] { return stopping_ || busy_ || queued() || !inbox_.empty(); });
      if (stopping_ || busy_ || !p2p_active_.load()) continue;
    }
    if (!queued()) {
      // Only tagged operations are registered: drive them until they are
      // done or something is queued.
      busy_ = true;
      worker_driving_ = true;
      lock.unlock();
      drive(nullptr);
      lock.lock();
      worker_driving_ = false;
      busy_ = false;
      q_cv_.notify_all();
      wake_driver_if_next();
      continue;
    }
    auto req = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    running_ = req;
    lock.unlock();
    run_request(*req);
    req.reset();
    lock.lock();
    running_.reset();
    busy_ = false;
    q_cv_.notify_all();
    wake_driver_if_next();
  }
}

// With q_mu_ held and the stream just freed: a collective of the shared
// lane driver's now at the front (behind a split or a stream
// point-to-point call this thread ran) would otherwise wait for the next
// call issued to wake the driver.
void Communicator::wake_driver_if_next() {
  if (!queue_.empty() && driver_runs(family_.get(), *queue_.front())) family_->driver->wake();
}

}  // namespace chorus::core
