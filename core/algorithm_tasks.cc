// Algorithm ABI v2 inside the communicator: each v2 plugin's comm_init and
// comm_fini (with the host and transport of every peer, and the settings it
// validates), and the engine that runs one v2 task: post, then progress with
// the task's completions until it is done, fails, passes its deadline or is
// aborted. The v1 path is communicator_dispatch.cc's run().

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/communicator_internal.h"
#include "core/lane_driver.h"
#include "core/log.h"
#include "core/reduce.h"

#include <map>

namespace chorus::core {

std::string Communicator::host_identity() const {
  // transport.auto.host_id names the host for auto; the same setting names it
  // here, so that a plugin counts hosts as auto does.
  if (auto it = cfg_.transport_settings.find(kAutoTransportName);
      it != cfg_.transport_settings.end())
    for (const auto& s : it->second)
      if (s.key == "host_id") return s.value;
  return auto_host_identity();
}

Status Communicator::init_algorithms() {
  algo_state_.assign(algorithms_.size(), nullptr);
  algo_inited_.assign(algorithms_.size(), 0);
  bool any_v2 = false;
  for (const auto& p : algorithms_) any_v2 = any_v2 || p->algorithm_v2() != nullptr;
  if (!any_v2) return Status::ok();

  // The transport serving each peer: auto's sub-transport, or the one pinned.
  std::vector<std::string> names(size_t(size_), cfg_.transport);
  if (cfg_.transport == kAutoTransportName)
    for (const auto& [name, ranks] : auto_transport_peers(ctx_))
      for (int r : ranks)
        if (r >= 0 && r < size_) names[size_t(r)] = name;
  std::vector<chorus_algo_peer_v2_t> peers(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    auto& peer = peers[size_t(r)];
    peer.transport = r == rank_ ? nullptr : names[size_t(r)].c_str();
    peer.caps = r == rank_ ? nullptr : &caps_;
    peer.host = peer_host_.empty() ? 0 : peer_host_[size_t(r)];
  }
  for (size_t i = 0; i < algorithms_.size(); ++i) {
    const auto* a = algorithms_[i]->algorithm_v2();
    if (!a) continue;
    chorus_algo_comm_v2_t comm{};
    comm.struct_size = sizeof(comm);
    comm.minor = CHORUS_ALGORITHM_ABI_V2_MINOR;
    comm.rank = rank_;
    comm.size = size_;
    comm.channels = cfg_.channels;
    comm.host_count = host_count_;
    comm.peers = peers.data();
    comm.config = algorithm_kv_[i].empty() ? nullptr : algorithm_kv_[i].data();
    comm.config_count = algorithm_kv_[i].size();
    comm.core = this;
    comm.fail = &Communicator::env_fail;
    comm.log = &Communicator::env_log;
    call_what_ = "algorithm '" + algorithms_[i]->name() + "' (comm_init)";
    call_error_ = Status::ok();
    LogCommScope log_scope(&id_);
    void* state = nullptr;
    const int rc = a->comm_init(&comm, &state);
    if (rc != CHORUS_OK) {
      Status st = call_error_.is_ok()
                      ? Status(rc, who() + ": " + call_what_ + " failed with " +
                                       chorus_status_name(rc) + " and said nothing more")
                      : call_error_;
      call_error_ = Status::ok();
      return st;
    }
    algo_state_[i] = state;
    algo_inited_[i] = 1;
  }
  call_error_ = Status::ok();
  return Status::ok();
}

void Communicator::fini_algorithms() {
  for (size_t i = 0; i < algo_inited_.size() && i < algorithms_.size(); ++i) {
    const auto* a = algorithms_[i]->algorithm_v2();
    if (!a || !algo_inited_[i]) continue;
    if (a->comm_fini) a->comm_fini(algo_state_[i]);
    algo_inited_[i] = 0;
    algo_state_[i] = nullptr;
  }
}

int Communicator::drive_task(size_t index, const chorus_algo_call_v2_t& call) {
  const auto* a = algorithms_[index]->algorithm_v2();
  // The env lives as long as the task: until free_task() after the call.
  chorus_algo_env_v2_t& env = task_env_;
  env = {};
  fill_env_common(env);
  env.minor = CHORUS_ALGORITHM_ABI_V2_MINOR;

  constexpr size_t kBatch = 64;
  chorus_tp_completion_t comps[kBatch];
  uint64_t seen_retries = retries_.load(std::memory_order_relaxed);
  chorus_algo_task_v2_t* task = nullptr;
  int rc = a->post(algo_state_[index], &env, &call, &task);
  task_ = task;
  task_algo_ = a;
  while (rc == CHORUS_ALGO_TASK_PENDING) {
    if (!task) {
      rc = env_fail(this, CHORUS_ERR_INTERNAL,
                    ("algorithm '" + algorithms_[index]->name() +
                     "' returned PENDING without a task (a bug in the plugin)")
                        .c_str());
      break;
    }
    int n = 0;
    const uint64_t retries = retries_.load(std::memory_order_relaxed);
    if (retries != seen_retries && !aborted_.load() && !call_deadline_.expired()) {
      // The task was refused a post (AGAIN): hand it what is ready, even
      // nothing, so that it can post again without waiting for a completion
      // that may never come.
      seen_retries = retries;
      n = poll_data(comps, kBatch);
      if (n == 0 && LaneDriver::on_fiber())
        LaneDriver::yield_idle();
      else if (n == 0)
        tp_->wait(ctx_, 1);
      if (n < 0)
        n = env_progress(this, comps, kBatch);
      else
        for (int i = 0; i < n; ++i) note_completed(comps[i]);
    } else {
      n = env_progress(this, comps, kBatch);
    }
    if (n < 0) {
      rc = n;
      break;
    }
    // The top bits of a wr_id are the core's (CHORUS_ALGO_WR_ID_MASK).
    for (int i = 0; i < n; ++i) comps[i].wr_id &= CHORUS_ALGO_WR_ID_MASK;
    rc = a->progress(task, comps, size_t(n));
  }
  if (rc == CHORUS_ALGO_TASK_DONE) return CHORUS_OK;
  if (rc > 0)
    rc = env_fail(this, CHORUS_ERR_INTERNAL,
                  ("algorithm '" + algorithms_[index]->name() + "' returned " + std::to_string(rc) +
                   ", which is neither a status nor a task state")
                      .c_str());
  return rc;
}

void Communicator::free_task() {
  if (task_ && task_algo_) task_algo_->task_free(task_);
  task_ = nullptr;
  task_algo_ = nullptr;
}

}  // namespace chorus::core
