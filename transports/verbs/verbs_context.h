// Context: one communicator's verbs transport state — the devices it uses,
// their completion queues, the endpoints, registrations and the software
// completion queue the caller polls.
#pragma once

#include "verbs.h"
#include "verbs_config.h"
#include "verbs_device_matrix.h"
#include "verbs_endpoint.h"
#include "verbs_memory_region.h"
#include "verbs_nic.h"

#include <chorus/transport.h>
#include <chorus/provider/context_base.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace chorus::verbs {

/// Progress: the device moves data by itself (RDMA); poll() and wait() only
/// drain the hardware CQs into the software queue, answer connection
/// handshakes and send keepalive probes.
///
/// wait() arms every CQ (ibv_req_notify_cq), re-drains once to close the
/// race, and sleeps in poll(2) on the completion channels' fds plus an eventfd
/// that interrupt() writes. Internal traffic (handshakes, probes) does not
/// end a wait: it returns only when the caller has something to reap, was
/// interrupted, or timed out.
///
/// Threading: one caller thread at a time (the ABI's rule); interrupt() from
/// any thread. No helper threads.
class Context : public provider::ConfiguredContext<Config> {
 public:
  /// Throws Error: INVALID_ARGUMENT for bad info or configuration (naming the
  /// key and origin), UNAVAILABLE when there is no usable device.
  explicit Context(const chorus_tp_context_info_t& info);
  ~Context();

  const std::vector<std::unique_ptr<Nic>>& nics() const { return nics_; }

  chorus_tp_caps_t caps() const;
  Endpoint* open_endpoint(int peer_rank, int channel, void* address_out, std::size_t* address_len);
  /// timeout_ms == 0 is a polled connect (P10): OK once the peer answered,
  /// AGAIN before. Throws Error.
  int connect(Endpoint& ep, const void* peer_address, std::size_t length, int timeout_ms);
  void close_endpoint(Endpoint* ep);

  chorus_tp_mr* register_memory(void* addr, std::size_t length);
  void deregister_memory(chorus_tp_mr* mr);
  bool owns(const chorus_tp_mr* mr) const { return mrs_.count(const_cast<chorus_tp_mr*>(mr)) > 0; }

  int poll(chorus_tp_completion_t* out, std::size_t max);
  int read_error(chorus_tp_error_t* out);
  int wait(int timeout_ms);
  int interrupt();

 private:
  /// Drains every hardware CQ; returns the number of completions handled.
  std::size_t progress();
  void dispatch(Nic& nic, const ibv_wc& wc);
  void on_handshake(Nic& nic, const unsigned char* data, std::size_t len);
  void send_hello(Endpoint& ep, bool polled = false);
  /// One step of a polled connect whose QP has the peer's blob.
  int connect_polled(Endpoint& ep);
  /// Repeats a polled connect's hello when due; returns ms until the next
  /// one (-1: none pending).
  int repeat_hello(Endpoint& ep, std::chrono::steady_clock::time_point now);
  /// Keepalives and polled hellos of every endpoint; returns ms until the
  /// next one is due (-1: none).
  int maintain();
  /// Arms every CQ, then drains them once more. True when that found work.
  bool arm_all();
  /// Sleeps in poll(2) on the completion channels (and the interrupt eventfd
  /// when `interruptible`) up to `timeout_ms` (-1: no limit). True when the
  /// eventfd fired.
  bool sleep(int timeout_ms, bool interruptible);
  std::string matrix_entry_text(int from, int to) const;

  std::optional<DeviceMatrix> matrix_;
  std::uint32_t depth_ = 0;
  std::uint64_t max_message_size_ = 0;
  std::vector<std::unique_ptr<Nic>> nics_;
  UniqueFd event_fd_;
  std::vector<std::unique_ptr<chorus_tp_endpoint>> endpoints_;
  std::unordered_set<chorus_tp_mr*> mrs_;
  std::vector<ibv_wc> wcs_;
  /// A polled connect heard from its peer since the last wait(): wait
  /// returns for it, so the caller polls its connect again (P10).
  bool connect_news_ = false;
};

}  // namespace chorus::verbs

/// The ABI's opaque context handle is the Context itself.
struct chorus_tp_context final : chorus::verbs::Context {
  using Context::Context;
};
