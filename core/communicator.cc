// Communicator lifecycle: create and init (configuration checks, transport
// load, bootstrap join, then the wire-up steps in order), abort, the usable /
// broken state every call checks, finalize (the destructor) and the log
// prefix. The steps themselves live in the communicator_*.cc files named in
// communicator_internal.h.

#include "core/communicator.h"
#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/job_identity.h"
#include "core/log.h"

#include <cstdlib>

namespace chorus::core {

Result<std::unique_ptr<Communicator>> Communicator::create(
    Config config, std::unique_ptr<SideChannel> host_channel) {
  std::unique_ptr<Communicator> comm(new Communicator());
  if (auto st = comm->init(std::move(config), std::move(host_channel)); !st.is_ok()) return st;
  return comm;
}

Status Communicator::init(Config config, std::unique_ptr<SideChannel> host_channel) {
  cfg_ = std::move(config);
  log_set_level(cfg_.log_level);
  static std::atomic<int> world_count{0};
  id_ = "w" + std::to_string(world_count.fetch_add(1));
  LogCommScope log_scope(&id_);  // transport lines logged during init name this communicator
  Deadline deadline = Deadline::after(seconds_ms(cfg_.timeout_init_s));

  if (cfg_.world_size < 0 && cfg_.rank < 0) {
    cfg_.world_size = 1;  // a program started on its own is a job of one
    cfg_.rank = 0;
  }
  if (cfg_.world_size < 0)
    return {
        CHORUS_ERR_INVALID_ARGUMENT,
        "rank " + std::to_string(cfg_.rank) +
            " is set but the world size is not; set CHORUS_WORLD_SIZE (or bootstrap.world_size, "
            "or run under chorusrun)"};
  if (cfg_.rank < 0)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "world size " + std::to_string(cfg_.world_size) +
                " is set but this process's rank is not; set CHORUS_RANK (or bootstrap.rank)"};
  if (cfg_.rank >= cfg_.world_size)
    return {CHORUS_ERR_INVALID_ARGUMENT, "rank " + std::to_string(cfg_.rank) +
                                             " is out of range for world size " +
                                             std::to_string(cfg_.world_size)};
  rank_ = cfg_.rank;
  size_ = cfg_.world_size;
  set_check_shape(rank_, size_);
  log_set_rank(rank_);
  if (size_ > 1 && cfg_.coordinator.empty() && !host_channel)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                ": no coordinator address; set CHORUS_COORDINATOR=host:port (the same on every "
                "rank) or launch with chorusrun"};

  auto tp = load_transport();
  if (!tp.is_ok()) return tp.status().with_context("rank " + std::to_string(rank_));
  transport_ = *tp;
  tp_ = transport_->transport();
  if (auto st = select_algorithms(); !st.is_ok()) return st;

  if (host_channel) {
    bootstrap_ = std::move(host_channel);
    CHORUS_LOGF(CHORUS_LOG_DEBUG, rank_, "bootstrap through the host's callbacks");
  } else {
    BootstrapOptions bo;
    bo.rank = rank_;
    bo.size = size_;
    bo.coordinator = cfg_.coordinator;
    bo.job_token = cfg_.job_token;
    // A token names the job already; without one, the launcher's job id
    // keeps ranks of two launched jobs apart (docs/reliability.md).
    if (cfg_.job_token.empty()) bo.job_identity = job_identity(environment_map());
    bo.log = [rank = rank_](int level, const std::string& msg) {
      if (log_enabled(level)) log_line(level, rank, "bootstrap: " + msg);
    };
    auto boot = Bootstrap::connect(bo, deadline);
    if (!boot.is_ok()) return boot.status();
    bootstrap_ = std::make_unique<BootstrapSideChannel>(std::move(*boot));
    CHORUS_LOGF(CHORUS_LOG_DEBUG, rank_,
                "bootstrap joined: " << size_ << " ranks via " << cfg_.coordinator);
  }

  // Authenticates the transport's data connections (docs/reliability.md);
  // split children inherit it with cfg_.
  auto job_key = agree_transport_key(*bootstrap_, rank_, cfg_.job_token, deadline);
  if (!job_key.is_ok()) return job_key.status();
  cfg_.transport_key = std::move(*job_key);
  if (auto st = open_context(); !st.is_ok()) return st;
  if (auto st = connect_endpoints(deadline); !st.is_ok()) return st;
  if (auto st = setup_staging(); !st.is_ok()) return st;
  if (auto st = init_algorithms(); !st.is_ok()) return st;
  if (auto st = bootstrap_->barrier(deadline); !st.is_ok())
    return st.with_context("rank " + std::to_string(rank_) + ": init barrier");
  if (auto st = open_lanes(); !st.is_ok()) return st;
  // Nothing uses the side channel from here on: its sockets (one per rank on
  // rank 0) would only keep descriptors that grow with the job.
  bootstrap_->close_links();
  CHORUS_LOGF(CHORUS_LOG_INFO, rank_,
              "comm " << id_ << ": communicator ready: " << size_ << " ranks, transport "
                      << cfg_.transport << ", " << cfg_.channels << " channel(s), config "
                      << cfg_.source);
  return Status::ok();
}

Communicator::Communicator() = default;

Communicator::~Communicator() {
  close_lanes();
  {
    std::unique_lock lock(q_mu_);
    stopping_ = true;
    // A request the worker has finished (its waiter may be this caller) is
    // not pending, even if the worker has not yet marked itself idle.
    const bool running =
        (busy_ && !(running_ && running_->done()) && !(worker_driving_ && !running_)) ||
        p2p_active_.load() || !inbox_.empty();
    if (running || !queue_.empty()) {
      lock.unlock();
      log(CHORUS_LOG_WARN, "finalized with requests pending; aborting them");
      finalizing_.store(true);
      abort();
      lock.lock();
    }
  }
  q_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    // Without a worker (never started), fail what is left here.
    std::lock_guard lock(q_mu_);
    for (auto& r : queue_)
      r->finish({CHORUS_ERR_ABORTED, "rank " + std::to_string(rank_) + ": " + r->what() +
                                         ": the communicator was finalized before it ran"});
    queue_.clear();
    for (auto& r : inbox_)
      r->finish({CHORUS_ERR_ABORTED, "rank " + std::to_string(rank_) + ": " + r->what() +
                                         ": the communicator was finalized before it ran"});
    inbox_.clear();
  }
  // Tagged operations nobody drove to their end (no worker ran).
  if (p2p_ && p2p_->active())
    p2p_->fail_all(
        Status(CHORUS_ERR_ABORTED, "the communicator was finalized with this operation pending"));
  free_task();
  fini_algorithms();
  if (tp_ && ctx_) {
    if (!broken_ && !aborted_.load()) say_goodbye();
    p2p_.reset();  // its endpoints and registrations, before the context
    for (auto*& ep : endpoints_)
      if (ep) tp_->endpoint_close(ep), ep = nullptr;
    for (auto*& ep : notice_eps_)
      if (ep) tp_->endpoint_close(ep), ep = nullptr;
    for (auto& idle : notice_idle_)
      if (idle.ep) tp_->endpoint_close(idle.ep), idle.ep = nullptr;
    if (notice_mr_) tp_->mem_deregister(ctx_, notice_mr_);
    release_call_registrations();
    for (auto* mr : staging_mr_)
      if (mr) tp_->mem_deregister(ctx_, mr);
    tp_->context_close(ctx_);
    ctx_ = nullptr;
  }
  std::free(staging_block_);
  std::free(notice_block_);
}

void Communicator::abort() {
  aborted_.store(true);
  for (auto& lane : lanes_) lane->abort();
  interrupt_wait(tp_, ctx_);
}

Status Communicator::usable(const char* what) const {
  // On every call's path: build no text unless there is an error to report.
  if (aborted_.load())
    return {
        CHORUS_ERR_ABORTED,
        who() + ": " + what + ": the communicator was aborted; finalize it and create a new one"};
  if (family_stopped()) return family_status(what);
  if (broken_)
    return {broken_status_.code(),
            who() + ": " + what + ": the communicator failed earlier and cannot be used (" +
                broken_status_.message() + "); finalize it and create a new one"};
  return Status::ok();
}

void Communicator::mark_broken(const Status& why) {
  // Not counted in `errors` here: the operation that failed is, once, where
  // it finishes (run_request).
  broken_ = true;
  broken_status_ = why;
  if (why.code() == CHORUS_ERR_PEER_LOST && lost_rank_ >= 0) send_notices();
  // Tagged operations in flight fail with it, and their endpoints close
  // (nothing lands in caller memory; the peers see the connections end).
  if (p2p_) {
    p2p_->fail_all(Status(why.code(), "the communicator failed (" + why.message() + ")"));
    p2p_active_.store(false);
  }
  // Outstanding receives may point into caller memory; closing the endpoints
  // guarantees nothing lands there after the call returns.
  for (auto*& ep : endpoints_)
    if (ep) tp_->endpoint_close(ep), ep = nullptr;
}

void Communicator::release_call_registrations() {
  for (auto* mr : call_mrs_)
    if (mr) tp_->mem_deregister(ctx_, mr);
  call_mrs_.clear();
}

std::string Communicator::who() const {
  // World communicators keep the short form that existing messages use.
  if (id_.empty() || id_[0] != 'w' || id_.find('.') == std::string::npos)
    return "rank " + std::to_string(rank_);
  return "rank " + std::to_string(rank_) + " of comm " + id_;
}

void Communicator::log(int level, const std::string& message) const {
  if (log_enabled(level)) log_line(level, rank_, "comm " + id_ + ": " + message);
}

}  // namespace chorus::core
