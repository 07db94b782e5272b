#include "ofi_context.h"

#include <chorus/transport_names.hpp>
#include "ofi.h"
#include "ofi_error.h"
#include "ofi_local_endpoints.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

namespace chorus::ofi {

namespace {
/// The completion queue's reaped callback: the endpoint counts the slot free.
void reap(chorus_tp_endpoint_t* ep, std::uint32_t opcode) { ep->on_reaped(opcode); }
}  // namespace

namespace {

constexpr std::size_t kCqSize = 16384;
constexpr std::size_t kCqBatch = 64;
constexpr int kCqRounds = 16;
/// context_close waits this long, at most, for byes to leave and cancelled
/// receives to come back before it closes the fi endpoints.
constexpr std::chrono::milliseconds kCloseDrain{200};

std::uint32_t fnv1a(std::string_view text, std::uint32_t h = 2166136261u) {
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

template <class T>
void close_fid(T*& object, const char* what) {
  if (object == nullptr) return;
  if (const int rc = fi_close(&object->fid); rc != 0) {
    log(CHORUS_LOG_WARN, fi_error_text(what, rc));
  }
  object = nullptr;
}

}  // namespace

Context::Context(const chorus_tp_context_info_t& info)
    : ContextBase(info), cfg_(Config::parse(info.config, info.config_count)), entries_(kCqBatch) {
  // Members hold raw libfabric objects: if construction fails half way,
  // release what was opened before the exception leaves.
  try {
    init(info);
  } catch (...) {
    teardown();
    throw;
  }
}

void Context::init(const chorus_tp_context_info_t& info) {
  const std::string bind = info.bind_address != nullptr ? info.bind_address : "";
  apply_fi_env(cfg_, size());
  info_ = select_provider(cfg_, bind);
  provider_ = info_->fabric_attr->prov_name;
  fingerprint_ = fnv1a(provider_, static_cast<std::uint32_t>(info_->addr_format));
  inject_size_ = info_->tx_attr->inject_size;
  max_message_size_ = std::min<std::uint64_t>(info_->ep_attr->max_msg_size, wire::kMaxMessageSize);
  const int mr_mode = info_->domain_attr->mr_mode;
  mr_policy_.required = (mr_mode & FI_MR_LOCAL) != 0 || cfg_.always_register;
  mr_policy_.bind_endpoint = (mr_mode & FI_MR_ENDPOINT) != 0;
  mr_policy_.provider_key = (mr_mode & FI_MR_PROV_KEY) != 0;
  // mem_tag_format: 0 means all 64 bits; otherwise its highest set bit says
  // how many the provider leaves to the application.
  const std::uint64_t tag_format = info_->ep_attr->mem_tag_format;
  const int tag_bits = tag_format == 0 ? 64 : 64 - std::countl_zero(tag_format);
  if (tag_bits < wire::kTagBits) {
    throw Error(CHORUS_ERR_UNAVAILABLE, "libfabric provider '" + provider_ + "' leaves " +
                                            std::to_string(tag_bits) +
                                            " tag bits to applications; the ofi transport needs " +
                                            std::to_string(wire::kTagBits));
  }
  open_fabric(bind);
  spill_.reset(new std::byte[kSpillSize]);
  if (mr_policy_.required)
    spill_mr_ = std::make_unique<chorus_tp_mr>(*this, spill_.get(), kSpillSize);

  // shm talks to this host only, where a pidfd watches exactly; any other
  // provider may reach other hosts and gets the socket listener too.
  Liveness liveness = cfg_.liveness;
  if (liveness == Liveness::kAuto && provider_ == "shm") liveness = Liveness::kPid;
  std::string watch_bind = bind;
  if (!cfg_.node.empty()) watch_bind = cfg_.node;
  watch_ = std::make_unique<PeerWatch>(rank(), size(), liveness, watch_bind);
  if (cq_fd_ < 0) open_doorbell();

  std::string mr_text = fi_tostr(&info_->domain_attr->mr_mode, FI_TYPE_MR_MODE);
  if (mr_text.empty()) mr_text = "none";
  log(CHORUS_LOG_INFO,
      "rank " + std::to_string(rank()) + ": libfabric " + std::to_string(FI_MAJOR(fi_version())) +
          "." + std::to_string(FI_MINOR(fi_version())) + " provider " + provider_label(*info_) +
          ", fabric " + info_->fabric_attr->name + ", domain " + info_->domain_attr->name +
          ", mr_mode [" + mr_text + "]" + (mr_policy_.required ? " (registering buffers)" : "") +
          ", data progress " +
          (info_->domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto" : "manual") + ", wait " +
          (cq_fd_ >= 0 ? "fd" : "doorbell") + ", inject " + std::to_string(inject_size_) +
          " B, liveness " + liveness_name(liveness));
}

void Context::open_fabric(const std::string& bind) {
  (void)bind;
  int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (rc != 0) throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_fabric", rc));
  rc = fi_domain(fabric_, info_.get(), &domain_, nullptr);
  if (rc != 0) throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_domain", rc));
  fi_av_attr av_attr{};
  av_attr.type = info_->domain_attr->av_type;
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc != 0) throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_av_open", rc));
  fi_cq_attr cq_attr{};
  cq_attr.size = kCqSize;
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_FD;
  rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (rc == 0) {
    rc = fi_control(&cq_->fid, FI_GETWAIT, &cq_fd_);
    if (rc != 0) {
      log(CHORUS_LOG_DEBUG,
          provider_ + ": " + fi_error_text("fi_control(FI_GETWAIT)", rc) + "; waiting by polling");
      cq_fd_ = -1;
    }
  } else {
    // shm (1.17) has no wait objects at all: FI_WAIT_FD is -FI_ENOSYS.
    log(CHORUS_LOG_DEBUG, provider_ + ": no FI_WAIT_FD completion queue (" +
                              fi_error_text("fi_cq_open", rc) + "); waiting by polling");
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
    if (rc != 0) throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_cq_open", rc));
  }
  event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd_.valid()) throw Error(CHORUS_ERR_SYSTEM, "eventfd: " + errno_text(errno));

  rc = fi_endpoint(domain_, info_.get(), &ep_, nullptr);
  if (rc != 0) {
    ep_ = nullptr;
    throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_endpoint", rc));
  }
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc != 0)
    throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_ep_bind(av)", rc));
  rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0)
    throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_ep_bind(cq)", rc));
  rc = fi_enable(ep_);
  if (rc != 0) {
    std::string hint;
    if (rc == -FI_EINVAL && is_verbs_provider(provider_)) {
      // The usual cause: rxm's verbs CQ is larger than the device's max_cqe.
      const char* universe = std::getenv("FI_UNIVERSE_SIZE");
      const char* srx = std::getenv("FI_OFI_RXM_USE_SRX");
      hint = std::string(
                 "; ofi_rxm's verbs completion queue (srx size + msg tx size x "
                 "FI_UNIVERSE_SIZE) may exceed the device's max_cqe (ibv_devinfo -v): "
                 "FI_UNIVERSE_SIZE is ") +
             (universe != nullptr ? universe : "unset (256)") + ", FI_OFI_RXM_USE_SRX " +
             (srx != nullptr ? srx : "unset (0)") +
             "; lower FI_UNIVERSE_SIZE or FI_OFI_RXM_MSG_RX_SIZE in the job's environment";
    }
    throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_enable", rc) + hint);
  }
  std::size_t len = name_.size();
  rc = fi_getname(&ep_->fid, name_.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    throw Error(CHORUS_ERR_UNAVAILABLE, provider_ + ": endpoint names of " + std::to_string(len) +
                                            " bytes exceed the transport's limit of " +
                                            std::to_string(name_.size()));
  }
  if (rc != 0) throw Error(CHORUS_ERR_SYSTEM, provider_ + ": " + fi_error_text("fi_getname", rc));
  name_len_ = len;
  std::lock_guard lock(local_endpoints::mutex());
  local_endpoints::add(name());
}

void Context::open_doorbell() {
  doorbell_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!doorbell_.valid()) throw Error(CHORUS_ERR_SYSTEM, "doorbell socket: " + errno_text(errno));
  const Doorbell self = Doorbell::of(static_cast<std::uint32_t>(::getpid()), token());
  if (::bind(doorbell_.get(), reinterpret_cast<const sockaddr*>(&self.addr), self.length) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "doorbell socket bind: " + errno_text(errno));
  }
}

bool Context::ring(const Doorbell& bell) const {
  // An empty datagram; a full socket buffer means it is ringing already.
  if (::sendto(doorbell_.get(), "", 0, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&bell.addr), bell.length) == 0) {
    return true;
  }
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

Context::~Context() { teardown(); }

void Context::teardown() {
  // Tell every peer, cancel every receive, give the provider a moment to
  // hand them back, then close: never blocks on the network for longer.
  for (auto& ep : endpoints_) ep->shut_down(false);
  const auto until = Deadline::Clock::now() + kCloseDrain;
  auto quiet = [&] {
    for (auto& ep : endpoints_)
      if (!ep->quiescent()) return false;
    for (auto& ep : closed_)
      if (!ep->quiescent()) return false;
    return true;
  };
  while (cq_ != nullptr && !quiet() && Deadline::Clock::now() < until) {
    if (progress() == 0) {
      const timespec pause{0, 200'000};
      ::nanosleep(&pause, nullptr);
    }
  }
  if (ep_ != nullptr) {
    std::lock_guard lock(local_endpoints::mutex());
    local_endpoints::remove(name());
    close_fid(ep_, "fi_close(ep)");
  }
  for (auto& ep : endpoints_) ep->detach();
  for (auto& ep : closed_) ep->detach();
  regions_.clear();
  spill_mr_.reset();
  endpoints_.clear();
  closed_.clear();
  close_fid(cq_, "fi_close(cq)");
  close_fid(av_, "fi_close(av)");
  close_fid(domain_, "fi_close(domain)");
  close_fid(fabric_, "fi_close(fabric)");
}

chorus_tp_caps_t Context::caps() const {
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  caps.max_message_size = max_message_size_;
  caps.max_outstanding_sends = Endpoint::kMaxOutstanding;
  caps.max_outstanding_recvs = Endpoint::kMaxOutstanding;
  // Polled connects (P10): docs/ofi.md, "Polled connects".
  caps.flags = CHORUS_TP_CAP_CONNECT_POLL;
  if (mr_policy_.required) caps.flags |= CHORUS_TP_CAP_NEEDS_REGISTRATION;
  caps.max_address_size = static_cast<std::uint32_t>(wire::kMaxBlobSize);
  return caps;
}

std::uint32_t Context::new_key() {
  static thread_local std::mt19937 rng(std::random_device{}());
  for (;;) {
    const std::uint32_t key = rng() & wire::kKeyMask;
    if (key == 0) continue;
    const auto clash = [key](const auto& ep) { return ep->key() == key; };
    if (std::none_of(endpoints_.begin(), endpoints_.end(), clash) &&
        std::none_of(closed_.begin(), closed_.end(), clash)) {
      return key;
    }
  }
}

Endpoint* Context::open_endpoint(int peer_rank, int channel, void* address_out,
                                 std::size_t* address_len) {
  check_endpoint_open(peer_rank, channel, address_out, address_len);
  for (const auto& ep : endpoints_) {
    if (ep->peer_rank() == peer_rank && ep->channel() == channel) {
      throw already_open(peer_rank, channel);
    }
  }
  if (*address_len < wire::kBlobHeaderSize) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the address buffer holds " + std::to_string(*address_len) +
                    " bytes; the ofi transport needs up to " + std::to_string(wire::kMaxBlobSize) +
                    " (max_address_size)");
  }
  auto ep = std::make_unique<chorus_tp_endpoint>(*this, peer_rank, channel, new_key());
  ep->open();
  wire::Blob blob;
  blob.rank = rank();
  blob.peer_rank = peer_rank;
  blob.channel = channel;
  blob.key = ep->key();
  blob.provider = fingerprint_;
  watch_->describe_self(blob);
  blob.name_len = name_len_;
  std::copy(name_.begin(), name_.begin() + static_cast<std::ptrdiff_t>(name_len_),
            blob.name.begin());
  if (*address_len < blob.size()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the address buffer holds " + std::to_string(*address_len) +
                    " bytes; this blob needs " + std::to_string(blob.size()) +
                    " (max_address_size is " + std::to_string(wire::kMaxBlobSize) + ")");
  }
  endpoints_.reserve(endpoints_.size() + 1);  // so push_back below cannot throw
  wire::encode(blob, static_cast<std::byte*>(address_out));
  *address_len = blob.size();
  endpoints_.push_back(std::move(ep));
  note_unconnected(1);
  return endpoints_.back().get();
}

void Context::close_endpoint(Endpoint* ep) {
  auto it = owned_endpoint(endpoints_, ep);
  // Outstanding posts vanish with the endpoint, as do completions not yet polled.
  (*it)->shut_down(true);
  if (!(*it)->connected()) note_unconnected(-1);
  done_.forget(ep->handle());
  closed_.push_back(std::move(*it));
  endpoints_.erase(it);
}

MemoryRegion* Context::register_memory(void* addr, std::size_t length, int kind) {
  if (kind != CHORUS_MEM_HOST) {
    throw Error(CHORUS_ERR_NOT_SUPPORTED,
                "mem_register: the ofi transport registers host memory only (kind " +
                    std::to_string(kind) + ")");
  }
  if (addr == nullptr && length > 0) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "mem_register: NULL address with a length");
  }
  if (!mr_policy_.required) return nullptr;  // caps.flags has no NEEDS_REGISTRATION
  regions_.reserve(regions_.size() + 1);
  regions_.push_back(std::make_unique<chorus_tp_mr>(*this, addr, length));
  return regions_.back().get();
}

void Context::deregister_memory(MemoryRegion* mr) {
  if (mr == nullptr) return;
  auto it =
      std::find_if(regions_.begin(), regions_.end(), [mr](const auto& p) { return p.get() == mr; });
  if (it == regions_.end()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "mem_deregister: unknown registration");
  }
  regions_.erase(it);
}

fi_addr_t Context::address_of(std::span<const std::byte> name) {
  std::vector<std::byte> key(name.begin(), name.end());
  if (auto it = addresses_.find(key); it != addresses_.end()) return it->second;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int rc = fi_av_insert(av_, name.data(), 1, &addr, 0, nullptr);
  if (rc != 1) {
    throw Error(CHORUS_ERR_PEER_LOST, provider_ + ": " +
                                          fi_error_text("fi_av_insert of the peer's address",
                                                        rc < 0 ? rc : -FI_EADDRNOTAVAIL));
  }
  addresses_.emplace(std::move(key), addr);
  return addr;
}

void Context::watch(const wire::Blob& peer, const Deadline& deadline) {
  if (auto it = dead_ranks_.find(peer.rank); it != dead_ranks_.end()) {
    throw Error(CHORUS_ERR_PEER_LOST, it->second);
  }
  watch_->watch(peer, deadline);
}

bool Context::rank_dead(int rank, std::string* why) const {
  auto it = dead_ranks_.find(rank);
  if (it == dead_ranks_.end()) return false;
  if (why != nullptr) *why = it->second;
  return true;
}

void Context::dispatch(const fi_cq_data_entry& entry) {
  if (entry.op_context == nullptr) return;  // nothing of ours (no injected op asks for one)
  const auto* op = reinterpret_cast<const OpHeader*>(entry.op_context);
  op->ep->on_completion(*op, entry);
}

void Context::dispatch_error() {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(cq_, &err, 0) != 1) return;
  char buf[256] = {};
  const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof buf);
  const std::string provider_text = text != nullptr ? text : "";
  if (err.op_context == nullptr) {
    // rxm reports failures of its internal connections this way; they are
    // tied to no operation, so every endpoint is suspect.
    const std::string why = provider_ + " reported an error not tied to any operation: " +
                            fi_strerror(std::abs(err.err)) + " (provider: " + provider_text + ")";
    log(CHORUS_LOG_WARN, why);
    fail_all(CHORUS_ERR_SYSTEM, why);
    return;
  }
  const auto* op = reinterpret_cast<const OpHeader*>(err.op_context);
  op->ep->on_error(*op, err, provider_text);
}

void Context::fail_all(int status, const std::string& why) {
  for (auto& ep : endpoints_) ep->fail(status, why);
}

std::size_t Context::read_provider_cq() {
  std::size_t handled = 0;
  for (int round = 0; round < kCqRounds; ++round) {
    const ssize_t n = fi_cq_read(cq_, entries_.data(), entries_.size());
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) dispatch(entries_[static_cast<std::size_t>(i)]);
      handled += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < entries_.size()) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      dispatch_error();
      ++handled;
      continue;
    }
    if (n != -FI_EAGAIN) {
      const std::string why = provider_ + ": " + fi_error_text("fi_cq_read", n);
      log(CHORUS_LOG_ERROR, why);
      fail_all(CHORUS_ERR_SYSTEM, why);
    }
    break;
  }
  return handled;
}

std::size_t Context::progress() {
  const std::size_t handled = read_provider_cq();
  backlog_ = false;
  for (auto* list : {&endpoints_, &closed_}) {
    for (auto& ep : *list) {
      if (!ep->has_backlog()) continue;
      ep->push_backlog();
      backlog_ = backlog_ || ep->has_backlog();
    }
  }
  const auto now = Deadline::Clock::now();
  if (now >= next_watch_check_) {
    next_watch_check_ = now + kWatchInterval;
    check_watch();
  }
  if (now >= next_deadline_) {
    next_deadline_ = Deadline::Clock::time_point::max();
    for (auto& ep : endpoints_) next_deadline_ = std::min(next_deadline_, ep->check_deadline(now));
  }
  return handled;
}

void Context::check_watch() {
  for (const auto& [rank, why] : watch_->check()) peer_gone(rank, why);
  for (const std::uint32_t key : watch_->take_call_mes()) on_call_me(key);
  // Rings also end sleeps, which drain them; this catches call-mes that
  // arrive while the caller only polls.
  if (doorbell_.valid()) drain_doorbell();
}

void Context::on_call_me(std::uint32_t key) {
  for (auto& ep : endpoints_) {
    if (ep->key() == key) ep->on_call_me();
  }
}

void Context::drain_doorbell() {
  std::array<std::byte, wire::kCallMeSize + 1> buf{};
  for (;;) {
    const ssize_t n = ::recv(doorbell_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) return;
    if (static_cast<std::size_t>(n) != wire::kCallMeSize) continue;  // a ring
    const auto call = provider::wire::decode<wire::WatchCallMe>(buf.data(), wire::kCallMeSize);
    if (call && call->token == token()) on_call_me(call->key);
  }
}

bool Context::call_me(const wire::Blob& peer, const Deadline& deadline) {
  if (doorbell_.valid()) {
    std::array<std::byte, wire::kCallMeSize> msg{};
    provider::wire::encode(wire::WatchCallMe{peer.key, peer.context_token}, msg.data());
    const Doorbell bell = Doorbell::of(peer.pid, peer.context_token);
    if (::sendto(doorbell_.get(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&bell.addr),
                 bell.length) == static_cast<ssize_t>(msg.size())) {
      return true;
    }
  }
  return watch_->call_me(peer, deadline);
}

void Context::peer_gone(int rank, const std::string& why) {
  if (!dead_ranks_.emplace(rank, why).second) return;
  log(CHORUS_LOG_WARN,
      why + " (noticed through the " + watch_->how(rank) + "); failing its endpoints");
  for (auto& ep : endpoints_) {
    if (ep->peer_rank() == rank) ep->peer_dead(why, kDeathGrace);
  }
}

bool Context::sleep(const Deadline& limit) {
  const auto now = Deadline::Clock::now();
  const auto until = std::min(limit.at(), next_deadline_);
  pollfds_.clear();
  pollfds_.push_back({event_fd_.get(), POLLIN, 0});
  // fi_trywait says whether the fd alone may be trusted to announce the next
  // completion. When it says -FI_EAGAIN (the provider has steps of its own
  // to take: a rendezvous under way, a connection coming up), the sleep is
  // bounded by a back-off step, but the fd still wakes it when the peer's
  // next message arrives, so a multi-step protocol does not wait out the
  // step at every round trip. An fd that woke such a sleep is left out of
  // the next one: should it stay readable while the provider makes no use
  // of it, wake-ups are still spaced by the back-off steps, never a spin.
  bool use_cq_fd = false;
  std::size_t cq_index = 0;
  if (cq_fd_ >= 0) {
    fid* f = &cq_->fid;
    use_cq_fd = fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
    if (use_cq_fd || !cq_fd_woke_untrusted_) {
      cq_index = pollfds_.size();
      pollfds_.push_back({cq_fd_, POLLIN, 0});
    }
  }
  cq_fd_woke_untrusted_ = false;
  const std::size_t doorbell_index = pollfds_.size();
  if (doorbell_.valid()) pollfds_.push_back({doorbell_.get(), POLLIN, 0});
  const std::size_t first_watch_fd = pollfds_.size();
  watch_->add_pollfds(pollfds_);

  // How long: to `until`; without a usable wait fd, or with posts queued
  // behind -FI_EAGAIN (room in the provider, or a connection coming up, is
  // not signalled on the fd), one back-off step.
  std::int64_t timeout_us = -1;
  if (until != Deadline::Clock::time_point::max()) {
    timeout_us = std::max<std::int64_t>(
        0, std::chrono::ceil<std::chrono::microseconds>(until - now).count());
  }
  if (use_cq_fd && !backlog_ && unconnected_ > 0) {
    // A peer may be setting up a provider connection to this context to
    // send a hello or call-me (polled connects, docs/ofi.md): the provider
    // accepts it only while this context progresses, and nothing on the
    // fd says it is waiting.
    timeout_us = timeout_us < 0 ? kConnectTickUs : std::min(timeout_us, kConnectTickUs);
  }
  if (!use_cq_fd || backlog_) {
    // With a doorbell, peers announce what they send: no short steps needed.
    const std::int64_t step = doorbell_.valid() && !backlog_ ? cfg_.poll_max_us : backoff_us_;
    backoff_us_ = std::min<std::int64_t>(backoff_us_ + backoff_us_ / 2 + 1, cfg_.poll_max_us);
    timeout_us = timeout_us < 0 ? step : std::min(timeout_us, step);
  }
  timespec ts{};
  if (timeout_us >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_us / 1'000'000);
    ts.tv_nsec = static_cast<long>((timeout_us % 1'000'000) * 1000);
  }
  const int n = ::ppoll(pollfds_.data(), pollfds_.size(), timeout_us >= 0 ? &ts : nullptr, nullptr);
  if (n <= 0) return false;  // timeout, or EINTR: a spurious wake-up
  if (cq_index != 0 && !use_cq_fd && pollfds_[cq_index].revents != 0) cq_fd_woke_untrusted_ = true;
  bool interrupted = false;
  if (pollfds_[0].revents != 0) {
    std::uint64_t value;
    while (::read(event_fd_.get(), &value, sizeof value) > 0) {
    }
    interrupted = true;
  }
  if (doorbell_index < first_watch_fd && pollfds_[doorbell_index].revents != 0) drain_doorbell();
  for (std::size_t i = first_watch_fd; i < pollfds_.size(); ++i) {
    if (pollfds_[i].revents != 0) {
      check_watch();
      break;
    }
  }
  return interrupted;
}

int Context::poll(chorus_tp_completion_t* out, std::size_t max) {
  // Hand out what is already queued before asking the provider for more.
  if (done_.empty()) progress();
  return done_.poll(out, max, reap);
}

int Context::read_error(chorus_tp_error_t* out) { return done_.read_error(out, reap); }

int Context::wait(int timeout_ms) {
  if (!done_.empty()) return CHORUS_OK;
  progress();
  if (!done_.empty()) return CHORUS_OK;
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  const auto pass = [this] {
    progress();
    return !done_.empty();
  };
  if (deadline.spin(cfg_.spin_us, pass)) return CHORUS_OK;
  reset_backoff();
  for (;;) {
    const bool interrupted = sleep(deadline);
    progress();
    if (interrupted || !done_.empty()) return CHORUS_OK;
    if (deadline.expired() || timeout_ms == 0) {
      return provider::wait_timed_out(timeout_ms);
    }
  }
}

int Context::interrupt() { return provider::wake_eventfd(event_fd_.get()); }

}  // namespace chorus::ofi
