// Context: one communicator's libfabric state — fabric, domain, address
// vector and completion queue shared by its endpoints — plus the wait
// machinery and the peer watch.
#pragma once

#include "ofi.h"
#include "ofi_config.h"
#include "ofi_doorbell.h"
#include "ofi_endpoint.h"
#include "ofi_memory.h"
#include "ofi_peer_watch.h"
#include "ofi_provider.h"

#include <chorus/transport.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <chorus/provider/context_base.hpp>

#include <poll.h>

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace chorus::ofi {

/// Where a receive's overflow goes: the second iovec of every data receive.
struct Spill {
  void* buf;
  std::size_t length;
  void* desc;
};

/// One fi endpoint (FI_EP_RDM) serves all of the context's Chorus
/// endpoints: a tcp;ofi_rxm endpoint costs tens of megabytes of buffers and
/// most of a second to enable, so one per channel would not scale. Chorus
/// endpoints are told apart by the key in each message's tag (ofi_wire.h).
///
/// Progress model: libfabric's manual progress (what tcp;ofi_rxm and shm
/// offer): data moves only inside poll(), wait(), endpoint_connect and the
/// posts, which all end in progress(): one bounded fi_cq_read sweep, the
/// endpoints' backlogs, and the deadlines of failing peers.
///
/// wait() sleeps in ppoll() on the completion queue's wait fd (FI_WAIT_FD,
/// after fi_trywait says it is safe), an eventfd for interrupt(), and the
/// peer watch's fds. A provider without a wait fd (shm in libfabric 1.17
/// refuses FI_WAIT_FD with -FI_ENOSYS) gets a doorbell instead: every context
/// binds an abstract datagram socket, and an endpoint rings its peer's after
/// each send it hands over and each large receive that completes (the
/// sender's completion waits for it). Sleeps last at most
/// transport.ofi.poll_max_us, for what no ring announces (peers in another
/// network namespace, the provider's internal steps).
///
/// Threading: one caller thread at a time (the ABI's rule), so the domain is
/// opened FI_THREAD_DOMAIN; interrupt() from any thread only writes the
/// eventfd.
class Context : public provider::ContextBase {
 public:
  /// Throws Error (INVALID_ARGUMENT for bad info/config, UNAVAILABLE when the
  /// provider is missing or unfit, SYSTEM for libfabric or the OS).
  explicit Context(const chorus_tp_context_info_t& info);
  ~Context();

  const Config& config() const { return cfg_; }
  const fi_info& info() const { return *info_; }
  fid_domain* domain() const { return domain_; }
  fid_av* av() const { return av_; }
  fid_cq* cq() const { return cq_; }
  /// The context's fi endpoint; NULL once teardown closed it.
  fid_ep* fi_ep() const { return ep_; }
  /// Its name (fi_getname), which every blob of this context carries.
  std::span<const std::byte> name() const { return {name_.data(), name_len_}; }
  CompletionQueue& completions() { return done_; }
  const std::string& provider() const { return provider_; }
  const MrPolicy& mr_policy() const { return mr_policy_; }
  std::uint64_t next_mr_key() { return next_mr_key_++; }
  std::size_t inject_size() const { return inject_size_; }
  std::uint64_t max_message_size() const { return max_message_size_; }

  chorus_tp_caps_t caps() const;
  Endpoint* open_endpoint(int peer_rank, int channel, void* address_out, std::size_t* address_len);
  void close_endpoint(Endpoint* ep);
  MemoryRegion* register_memory(void* addr, std::size_t length, int kind);
  void deregister_memory(MemoryRegion* mr);

  int poll(chorus_tp_completion_t* out, std::size_t max);
  int read_error(chorus_tp_error_t* out);
  int wait(int timeout_ms);
  int interrupt();

  // ---- for endpoints --------------------------------------------------------
  /// One bounded sweep of the provider's completion queue, the backlogs, the
  /// peer watch (rate-limited) and the failure deadlines. Returns how many
  /// provider completions it handled. Never blocks.
  std::size_t progress();
  /// Only the provider's completion queue (no backlog pushes): what a post
  /// does between its -FI_EAGAIN retries.
  std::size_t read_provider_cq();
  /// Sleeps until the provider, interrupt() or the peer watch may have
  /// something, or until `limit`. Never longer than the next failure
  /// deadline. Returns true when interrupt() woke it.
  bool sleep(const Deadline& limit);
  /// Resets the idle back-off of sleep() (a new wait or connect begins).
  void reset_backoff() { backoff_us_ = kFirstBackoffUs; }
  /// The fi_addr of a peer fi endpoint name, inserting it once. Throws Error.
  fi_addr_t address_of(std::span<const std::byte> name);
  /// Starts watching the blob's owner. Throws Error(PEER_LOST) if it is gone.
  void watch(const wire::Blob& peer, const Deadline& deadline);
  /// The rank has been found dead (it may already be known).
  bool rank_dead(int rank, std::string* why) const;
  /// Endpoints not connected yet (opened and not closed): while there are
  /// any, sleep() wakes every kConnectTick (see sleep()).
  void note_unconnected(int delta) { unconnected_ += delta; }
  /// An endpoint set a failure deadline; sleep() and progress() honour it.
  void note_deadline(Deadline::Clock::time_point at) {
    if (at < next_deadline_) next_deadline_ = at;
  }
  /// The context's spill area and its descriptor.
  Spill spill() const {
    return Spill{spill_.get(), kSpillSize, spill_mr_ ? spill_mr_->desc() : nullptr};
  }
  static constexpr std::size_t spill_size() { return kSpillSize; }
  /// Peers ring doorbells (providers without a wait fd).
  bool uses_doorbell() const { return doorbell_.valid(); }
  /// Wakes the context behind `bell` if it sleeps; false when it cannot be
  /// reached (closed, or in another network namespace).
  bool ring(const Doorbell& bell) const;
  std::uint64_t token() const { return watch_->token(); }
  /// A fingerprint of provider + address format, equal on compatible ranks.
  std::uint32_t fingerprint() const { return fingerprint_; }
  void describe_self(wire::Blob& blob) const { watch_->describe_self(blob); }
  /// A polled connect's call-me outside the fabric: a datagram to the
  /// peer's doorbell when both use doorbells, else over its watch listener
  /// (PeerWatch::call_me). False when neither reached it.
  bool call_me(const wire::Blob& peer, const Deadline& deadline);
  bool same_process(const wire::Blob& peer) const { return watch_->same_process(peer); }

 private:
  static constexpr std::int64_t kFirstBackoffUs = 10;
  /// Bytes a message may exceed its receive by and still be measured (the
  /// rest of a longer one is a provider truncation). Never read; pages
  /// that nothing overflows into are never touched.
  static constexpr std::size_t kSpillSize = std::size_t{1} << 20;
  static constexpr std::chrono::milliseconds kDeathGrace{100};
  static constexpr std::chrono::milliseconds kWatchInterval{50};
  /// Longest sleep on the completion queue's fd while an endpoint is not
  /// connected: a peer's new provider connection (rxm's connection manager)
  /// is not announced on that fd, yet it must be accepted for the peer's
  /// hello or call-me to arrive.
  static constexpr std::int64_t kConnectTickUs = 20'000;

  void init(const chorus_tp_context_info_t& info);
  void teardown();
  void open_fabric(const std::string& bind_address);
  void open_doorbell();
  void dispatch(const fi_cq_data_entry& entry);
  void dispatch_error();
  void fail_all(int status, const std::string& why);
  void check_watch();
  /// Reads the doorbell's datagrams: empty rings, and call-mes.
  void drain_doorbell();
  void on_call_me(std::uint32_t key);
  void peer_gone(int rank, const std::string& why);
  std::uint32_t new_key();

  Config cfg_;
  FiInfoPtr info_;
  std::string provider_;
  std::uint32_t fingerprint_ = 0;
  MrPolicy mr_policy_;
  std::uint64_t next_mr_key_ = 1;
  std::size_t inject_size_ = 0;
  std::uint64_t max_message_size_ = 0;

  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::array<std::byte, wire::kMaxNameSize> name_{};
  std::size_t name_len_ = 0;
  int cq_fd_ = -1;                     // the CQ's FI_WAIT_FD, or -1
  bool cq_fd_woke_untrusted_ = false;  // see sleep()
  UniqueFd event_fd_;
  UniqueFd doorbell_;
  std::unique_ptr<PeerWatch> watch_;

  CompletionQueue done_;
  std::vector<std::unique_ptr<chorus_tp_endpoint>> endpoints_;
  /// Closed endpoints stay until the context closes: a completion the
  /// provider still holds for them must find valid memory (it is dropped).
  std::vector<std::unique_ptr<chorus_tp_endpoint>> closed_;
  std::map<std::vector<std::byte>, fi_addr_t> addresses_;
  std::vector<std::unique_ptr<chorus_tp_mr>> regions_;
  std::unique_ptr<std::byte[]> spill_;
  std::unique_ptr<chorus_tp_mr> spill_mr_;
  std::map<int, std::string> dead_ranks_;
  Deadline::Clock::time_point next_deadline_ = Deadline::Clock::time_point::max();
  Deadline::Clock::time_point next_watch_check_{};
  std::int64_t backoff_us_ = kFirstBackoffUs;
  bool backlog_ = false;  // some endpoint has posts queued behind -FI_EAGAIN
  long unconnected_ = 0;  // see note_unconnected()
  std::vector<pollfd> pollfds_;
  std::vector<fi_cq_data_entry> entries_;
};

}  // namespace chorus::ofi

/// The ABI's opaque context handle is the Context itself.
struct chorus_tp_context final : chorus::ofi::Context {
  using Context::Context;
};
