// The loopback context: opening and closing endpoints, and the completion
// side of the contract (poll, read_error, wait, interrupt).
#include "loopback.h"

#include <chorus/provider/deadline.hpp>
#include <chorus/provider/settings.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace lb = chorus::loopback;
using chorus::provider::Deadline;

// C1: any struct_size that covers minor 0 is accepted; data_channels is read
// only when the caller's struct has it. C2: the transport has no settings, so
// every key is unknown and named in the error.
chorus_tp_context::chorus_tp_context(const chorus_tp_context_info_t& info)
    : rank_(info.rank), size_(info.size) {
  if (info.struct_size < offsetof(chorus_tp_context_info_t, job_key)) {
    throw lb::Error(
        CHORUS_ERR_INVALID_ARGUMENT,
        "context info of " + std::to_string(info.struct_size) + " bytes is shorter than minor 0's");
  }
  if (info.size < 1 || info.rank < 0 || info.rank >= info.size) {
    throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT, "rank " + std::to_string(info.rank) + " of " +
                                                     std::to_string(info.size) + " is not a rank");
  }
  static constexpr chorus::provider::Settings kSettings(
      "loopback", "none (the loopback transport has no settings)");
  kSettings.each(info.config, info.config_count,
                 [&](const chorus_kv_t& kv) { kSettings.unknown_key(kv); });
  if (info.struct_size >= offsetof(chorus_tp_context_info_t, data_channels) + sizeof(int)) {
    data_channels_ = std::max(0, info.data_channels);
  }
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  ++lb::open_contexts();
}

// C5: closes what is still open; never waits for anyone.
chorus_tp_context::~chorus_tp_context() {
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  while (!endpoints_.empty()) close_endpoint_locked(endpoints_.back().get());
  --lb::open_contexts();
}

chorus_tp_caps_t chorus_tp_context::caps() const {
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  caps.max_message_size = std::uint64_t(1) << 40;  // a memcpy has no limit of its own
  caps.max_outstanding_sends = lb::kMaxOutstanding;
  caps.max_outstanding_recvs = lb::kMaxOutstanding;
  // No registration (M1: mem_register gives NULL), and no reach beyond this
  // process: the conformance suite then skips its forked-peer cases.
  caps.flags = CHORUS_TP_CAP_PROCESS_LOCAL;
  caps.max_address_size = sizeof(lb::Address);
  return caps;
}

// P1: the blob names this process, this endpoint's unique id, and who it is
// for, so connect can refuse one meant for another endpoint (P2).
chorus_tp_endpoint* chorus_tp_context::open_endpoint(int peer_rank, int channel, void* address_out,
                                                     std::size_t* address_len) {
  if (address_out == nullptr || address_len == nullptr) {
    throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT, "NULL address buffer");
  }
  if (*address_len < sizeof(lb::Address)) {
    throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT,
                    "the address buffer holds " + std::to_string(*address_len) +
                        " bytes; a loopback address needs " + std::to_string(sizeof(lb::Address)));
  }
  if (peer_rank < 0 || peer_rank >= size_ || channel < 0) {
    throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT, "peer rank " + std::to_string(peer_rank) +
                                                     " channel " + std::to_string(channel) +
                                                     " is outside a job of " +
                                                     std::to_string(size_) + " ranks");
  }
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  for (const auto& ep : endpoints_) {
    if (ep->peer_rank() == peer_rank && ep->channel() == channel) {
      throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT,
                      "an endpoint to " + ep->describe_peer() + " is open already");
    }
  }
  auto ep = std::make_unique<chorus_tp_endpoint>(*this, peer_rank, channel, lb::next_endpoint_id());
  lb::Address a{};
  std::memcpy(a.magic, "CHLB", 4);
  a.pid = static_cast<std::int32_t>(::getpid());
  a.id = ep->id();
  a.rank = rank_;
  a.peer_rank = peer_rank;
  a.channel = channel;
  std::memcpy(address_out, &a, sizeof a);
  *address_len = sizeof a;  // E3: outputs are written once nothing can fail
  lb::register_endpoint(ep.get());
  endpoints_.push_back(std::move(ep));
  return endpoints_.back().get();
}

void chorus_tp_context::close_endpoint(chorus_tp_endpoint* ep) {
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  close_endpoint_locked(ep);
}

// P5: the closed endpoint's own posts and unpolled completions vanish; the
// peer's outstanding posts fail with PEER_LOST at once (F1).
void chorus_tp_context::close_endpoint_locked(chorus_tp_endpoint* ep) {
  const auto it = std::find_if(endpoints_.begin(), endpoints_.end(),
                               [ep](const auto& owned) { return owned.get() == ep; });
  if (it == endpoints_.end()) {
    throw lb::Error(CHORUS_ERR_INVALID_ARGUMENT, "endpoint is not open in this context");
  }
  ep->unlink();
  lb::unregister_endpoint(ep->id());
  cq_.forget(ep);
  endpoints_.erase(it);
}

// Q1, Q2: the toolkit's queue implements the ordering rules; reaping frees a
// slot of the endpoint's outstanding count (S2).
int chorus_tp_context::poll(chorus_tp_completion_t* out, std::size_t max) {
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  return cq_.poll(out, max,
                  [](chorus_tp_endpoint_t* ep, std::uint32_t opcode) { ep->reaped(opcode); });
}

int chorus_tp_context::read_error(chorus_tp_error_t* out) {
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  return cq_.read_error(out,
                        [](chorus_tp_endpoint_t* ep, std::uint32_t opcode) { ep->reaped(opcode); });
}

// Q4-Q6: sleeps on the condition variable until a completion is queued for
// this context (deliver and fail_all wake it), interrupt() is called, or the
// deadline passes. No spinning: an idle wait is one blocking wait_until.
int chorus_tp_context::wait(int timeout_ms) {
  std::unique_lock<std::mutex> lock(lb::fabric_mutex());
  const auto ready = [this] { return !cq_.empty() || interrupted_; };
  if (!ready()) {
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    if (deadline.is_never()) {
      wakeup_.wait(lock, ready);
    } else if (!wakeup_.wait_until(lock, deadline.at(), ready)) {
      return lb::set_last_error(CHORUS_ERR_TIMEOUT, "wait: nothing completed within " +
                                                        std::to_string(timeout_ms) + " ms");
    }
  }
  interrupted_ = false;
  return CHORUS_OK;
}

int chorus_tp_context::interrupt() {
  std::lock_guard<std::mutex> lock(lb::fabric_mutex());
  interrupted_ = true;
  wakeup_.notify_all();
  return CHORUS_OK;
}
