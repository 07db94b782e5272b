// Lanes (collectives.lanes, docs/embedding.md "Collectives in flight"): a
// communicator with more than one lane owns lanes - 1 more communicators
// over the same ranks, each with its own endpoints, staging, call state and
// stream. The i-th collective issued runs on lane i mod lanes, so every rank
// puts a call on the same lane and matching stays a matter of issue order,
// while calls on different lanes progress at the same time. Lane 0 is the
// communicator itself; it also keeps point-to-point and split.
//
// A failure that leaves a lane unusable fails the whole family: every lane
// stops the calls issued after the failed one (running or queued) with the
// same status, so no rank goes on with calls that no longer line up. Calls
// issued before it run to their end, as they would on one lane.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/lane_driver.h"
#include "core/lane_family.h"
#include "core/log.h"

#include <map>

namespace chorus::core {

// Counts a collective of the family starting (true) or ending here.
void Communicator::family_running(bool start) {
  if (!family_) return;
  if (!start) {
    family_->running.fetch_sub(1);
    return;
  }
  const uint64_t now = family_->running.fetch_add(1) + 1;
  uint64_t max = family_->running_max.load();
  while (now > max && !family_->running_max.compare_exchange_weak(max, now)) {
  }
}

bool Communicator::family_stopped() const {
  // kNoOrder (no failure) is above every order, p2p's included.
  return running_order_ > family_after_.load();
}

Communicator& Communicator::lane_for_call(uint64_t& order) {
  order = lane_next_.fetch_add(1, std::memory_order_relaxed);
  if (lanes_.empty()) return *this;
  const size_t k = size_t(order % (lanes_.size() + 1));
  return k == 0 ? *this : *lanes_[k - 1];
}

// Opens lanes 1 .. collectives.lanes - 1, a collective over this
// communicator's ranks; nothing when lanes is 1.
Status Communicator::open_lanes() {
  if (cfg_.lanes <= 1 || !lanes_.empty()) return Status::ok();
  Config lane_cfg = cfg_;
  lane_cfg.lanes = 1;
  // Point-to-point stays on lane 0: the lanes open no engine endpoints.
  lane_cfg.p2p_tagged = false;
  lane_cfg.is_lane = true;
  std::vector<int> members(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members[size_t(r)] = r;
  family_ = std::make_shared<LaneFamily>();
  family_->members.push_back(this);
  for (int k = 1; k < cfg_.lanes; ++k) {
    auto lane = spawn(lane_cfg, members, id_ + ".l" + std::to_string(k));
    if (!lane.is_ok())
      return lane.status().with_context("opening lane " + std::to_string(k) + " of " +
                                        std::to_string(cfg_.lanes) + " (collectives.lanes)");
    (*lane)->lane_ = k;
    (*lane)->family_ = family_;
    family_->members.push_back(lane->get());
    lanes_.push_back(std::move(*lane));
  }
  // Started once every lane exists, before any call can be issued.
  if (cfg_.lane_driver_shared) family_->driver = std::make_unique<LaneDriver>(family_->members);
  log(CHORUS_LOG_INFO, std::to_string(cfg_.lanes) + " lanes: collectives run " +
                           std::to_string(cfg_.lanes) + " at a time");
  return Status::ok();
}

void Communicator::close_lanes() {
  // The driver first: its calls end (aborted) while every lane still exists.
  if (family_ && family_->driver) family_->driver->stop();
  if (family_) {
    std::lock_guard lock(family_->mu);
    family_->members.clear();
  }
  // Each lane finalizes as a communicator of its own: pending requests
  // aborted, goodbyes said, endpoints closed.
  lanes_.clear();
}

void Communicator::family_fail(const Status& why, uint64_t order) {
  if (!family_) return;
  std::vector<Communicator*> others;
  {
    std::lock_guard lock(family_->mu);
    if (family_->failed) return;
    family_->failed = true;
    family_->status = why;
    family_->lane = lane_;
    family_->order = order;
    for (Communicator* c : family_->members)
      if (c != this) others.push_back(c);
    // This lane too: a failure it does not count as breaking (a size
    // refused by the transport) still leaves the ranks apart.
    family_after_.store(order);
    // Set under the lock: a member is only destroyed after close_lanes()
    // emptied the list, which waits for this.
    for (Communicator* c : others) {
      c->family_after_.store(order);
      interrupt_wait(c->tp_, c->ctx_);
    }
  }
  if (!others.empty())
    log(CHORUS_LOG_INFO,
        "lane " + std::to_string(lane_) +
            " failed; the other lanes stop the calls issued after it: " + why.message());
}

// The status a call stopped by family_fail reports for `what`.
Status Communicator::family_status(const char* what) const {
  Status first;
  int lane = -1;
  {
    std::lock_guard lock(family_->mu);
    first = family_->status;
    lane = family_->lane;
  }
  // A later call's own arguments were fine: an argument or support failure
  // of the earlier call stops it as ABORTED.
  int code = first.code();
  if (code == CHORUS_OK || code == CHORUS_ERR_INVALID_ARGUMENT || code == CHORUS_ERR_NOT_SUPPORTED)
    code = CHORUS_ERR_ABORTED;
  return {code,
          who() + ": " + what + ": a collective running on lane " + std::to_string(lane) +
              " of this communicator (collectives.lanes) failed, so later calls no longer line "
              "up (" +
              first.message() + "); finalize this communicator and create a new one"};
}

// Adds the lanes' counters to lane 0's.
void Communicator::add_lane_counters(std::vector<std::pair<std::string, uint64_t>>& out) const {
  if (lanes_.empty()) return;
  // Totals over every lane; per-lane gauges such as auto's peer counts are
  // the same on each lane and keep lane 0's value.
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < out.size(); ++i) at.emplace(out[i].first, i);
  for (const auto& lane : lanes_)
    for (const auto& [name, value] : lane->counters()) {
      if (name.rfind("transport.", 0) == 0 || name == "bootstrap.bytes_sent") continue;
      auto it = at.find(name);
      if (it == at.end()) {
        at.emplace(name, out.size());
        out.emplace_back(name, value);
      } else {
        out[it->second].second += value;
      }
    }
  out.emplace_back("lanes", uint64_t(lanes_.size() + 1));
  out.emplace_back("lanes.running", family_->running.load());
  out.emplace_back("lanes.running_max", family_->running_max.load());
}

}  // namespace chorus::core
