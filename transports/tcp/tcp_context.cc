// Context (tcp_context.h): listener and address, endpoints, and the epoll
// loop behind poll() and wait() (spin, then sleep until the deadline).
#include "tcp_context.h"

#include <chorus/transport_names.hpp>
#include "tcp.h"
#include "tcp_wire.h"

#include <asio/ip/host_name.hpp>

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <sstream>

namespace chorus::tcp {

namespace {
/// The completion queue's reaped callback: the endpoint counts the slot free.
void reap(chorus_tp_endpoint_t* ep, std::uint32_t opcode) { ep->on_reaped(opcode); }
}  // namespace

namespace {

asio::ip::address resolve_bind_address(const std::string& text) {
  std::error_code ec;
  asio::ip::address a = asio::ip::make_address(text, ec);
  if (!ec) return a;
  asio::io_context io(1);
  asio::ip::tcp::resolver resolver(io);
  const auto results = resolver.resolve(text, "", ec);
  if (ec || results.empty()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "cannot resolve bind_address '" + text + "': " +
                                                 (ec ? ec.message() : std::string("no addresses")));
  }
  for (const auto& r : results) {
    if (r.endpoint().address().is_v4()) return r.endpoint().address();
  }
  return results.begin()->endpoint().address();
}

/// The address other ranks should dial when we listen on a wildcard: the
/// host name's first non-loopback address of the same family, else loopback.
asio::ip::address routable_address(const asio::ip::address& bind) {
  if (!bind.is_unspecified()) return bind;
  std::error_code ec;
  asio::io_context io(1);
  asio::ip::tcp::resolver resolver(io);
  const auto results = resolver.resolve(asio::ip::host_name(ec), "", ec);
  if (!ec) {
    for (const auto& r : results) {
      const auto a = r.endpoint().address();
      if (a.is_v4() == bind.is_v4() && !a.is_loopback()) return a;
    }
  }
  log(CHORUS_LOG_WARN, "bind_address " + bind.to_string() +
                           " is a wildcard and the host name has no routable address; "
                           "advertising loopback");
  if (bind.is_v4()) return asio::ip::address_v4::loopback();
  return asio::ip::address_v6::loopback();
}

std::uint64_t random_nonce() {
  static thread_local std::random_device device;
  std::uint64_t n = 0;
  while (n == 0) n = (std::uint64_t{device()} << 32) ^ device();
  return n;
}

}  // namespace

std::vector<std::byte> Context::take_stage(std::size_t size) {
  if (spare_stages_.empty() || spare_stages_.back().size() != size)
    return std::vector<std::byte>(size);
  std::vector<std::byte> stage = std::move(spare_stages_.back());
  spare_stages_.pop_back();
  return stage;
}

void Context::return_stage(std::vector<std::byte>&& stage) {
  if (spare_stages_.size() < kSpareStages) spare_stages_.push_back(std::move(stage));
}

Context::Context(const chorus_tp_context_info_t& info)
    : ConfiguredContext(info), discard_(64 * 1024), events_(kMaxEvents) {
  {
    // The communicator's size bounds the ranks on this host.
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    oversubscribed_ = size() > std::max(1, cores);
  }
  // Minor 2 appended the job key; an older caller's info is shorter.
  if (info.struct_size >= offsetof(chorus_tp_context_info_t, job_key_len) + sizeof(size_t) &&
      info.job_key != nullptr && info.job_key_len > 0) {
    const auto* key = reinterpret_cast<const std::byte*>(info.job_key);
    job_key_.assign(key, key + info.job_key_len);
  } else {
    log(CHORUS_LOG_DEBUG,
        "no job key from the caller: data connections are checked with an "
        "empty key (protocol only, no authentication)");
  }
  const std::string bind = info.bind_address != nullptr && info.bind_address[0] != '\0'
                               ? info.bind_address
                               : "127.0.0.1";
  const asio::ip::address bind_address = resolve_bind_address(bind);
  advertised_ = routable_address(bind_address);

  epoll_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) throw Error(CHORUS_ERR_SYSTEM, "epoll_create1: " + errno_text(errno));
  event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd_.valid()) throw Error(CHORUS_ERR_SYSTEM, "eventfd: " + errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: stays set until wait() drains it
  ev.data.ptr = nullptr;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, event_fd_.get(), &ev) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "epoll_ctl(eventfd): " + errno_text(errno));
  }
  to_progress_.reserve(kMaxEvents);
  spare_stages_.reserve(kSpareStages);
  acceptor_ = std::make_unique<Acceptor>(bind_address, cfg_, rank(), data_channels(), job_key_,
                                         [this] { interrupt(); });
  log(CHORUS_LOG_DEBUG, "rank " + std::to_string(rank()) + " listening on " + listen_address() +
                            " (sockets=" + std::to_string(cfg_.sockets) +
                            ", nodelay=" + (cfg_.nodelay ? "true" : "false") +
                            ", spin_us=" + std::to_string(cfg_.spin_us) + ")");
}

Context::~Context() {
  // Endpoints first: they unwatch their sockets from our epoll set and
  // unregister from the acceptor.
  for (auto& ep : endpoints_) acceptor_->forget(ep->nonce());
  endpoints_.clear();
  acceptor_.reset();
}

std::string Context::listen_address() const {
  std::ostringstream s;
  s << asio::ip::tcp::endpoint(advertised_, acceptor_ ? acceptor_->port() : 0);
  return s.str();
}

void Context::watch(int fd, Socket* socket) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = socket;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "epoll_ctl(ADD): " + errno_text(errno));
  }
}

void Context::unwatch(int fd) { ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

chorus_tp_caps_t Context::caps() const {
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  caps.max_message_size = wire::kMaxMessageSize;
  caps.max_outstanding_sends = Endpoint::kMaxOutstanding;
  caps.max_outstanding_recvs = Endpoint::kMaxOutstanding;
  // No registration, no RMA, host memory only; the data frame header carries
  // an immediate (tcp_wire.h).
  caps.flags = CHORUS_TP_CAP_IMM_DATA | CHORUS_TP_CAP_CONNECT_POLL;
  caps.max_address_size = static_cast<std::uint32_t>(wire::kMaxBlobSize);
  return caps;
}

Endpoint* Context::open_endpoint(int peer_rank, int channel, void* address_out,
                                 std::size_t* address_len) {
  check_endpoint_open(peer_rank, channel, address_out, address_len);
  if (*address_len < wire::kBlobSize) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the address buffer holds " + std::to_string(*address_len) +
                    " bytes; the tcp transport needs " + std::to_string(wire::kBlobSize) +
                    " (max_address_size is " + std::to_string(wire::kMaxBlobSize) + ")");
  }
  for (const auto& ep : endpoints_) {
    if (ep->peer_rank() == peer_rank && ep->channel() == channel) {
      throw already_open(peer_rank, channel);
    }
  }
  auto ep = std::make_unique<chorus_tp_endpoint>(*this, peer_rank, channel, random_nonce());
  endpoints_.reserve(endpoints_.size() + 1);  // so push_back below cannot throw

  wire::Blob blob;
  blob.sockets = static_cast<std::uint16_t>(cfg_.sockets);
  blob.rank = rank();
  blob.peer_rank = peer_rank;
  blob.channel = channel;
  blob.port = acceptor_->port();
  if (advertised_.is_v4()) {
    blob.family = 4;
    const auto bytes = advertised_.to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), blob.address.begin());
  } else {
    blob.family = 6;
    const auto bytes = advertised_.to_v6().to_bytes();
    std::copy(bytes.begin(), bytes.end(), blob.address.begin());
  }
  blob.nonce = ep->nonce();
  // Only the lower rank of a pair is connected to; the higher one dials out.
  if (rank() < peer_rank) {
    acceptor_->expect(ep->nonce(), peer_rank, channel, cfg_.sockets);
  } else {
    acceptor_->expect_call(ep->nonce(), peer_rank, channel);  // a polled connect's call-me
  }
  wire::encode(blob, static_cast<std::byte*>(address_out));
  *address_len = wire::kBlobSize;
  endpoints_.push_back(std::move(ep));
  return endpoints_.back().get();
}

void Context::close_endpoint(Endpoint* ep) {
  auto it = owned_endpoint(endpoints_, ep);
  acceptor_->forget(ep->nonce());
  // Outstanding posts vanish with the endpoint, as do completions not yet polled.
  cq_.forget(ep->handle());
  endpoints_.erase(it);
}

bool Context::drive(int timeout_ms) {
  const int n = ::epoll_wait(epoll_fd_.get(), events_.data(), kMaxEvents, timeout_ms);
  if (n <= 0) return false;  // timeout, or EINTR: a spurious wake-up
  bool interrupted = false;
  for (int i = 0; i < n; ++i) {
    auto* socket = static_cast<Socket*>(events_[static_cast<std::size_t>(i)].data.ptr);
    if (socket == nullptr) {
      std::uint64_t value;
      while (::read(event_fd_.get(), &value, sizeof value) > 0) {
      }
      interrupted = true;
      continue;
    }
    Endpoint* ep = socket->owner;
    ep->on_event(*socket, events_[static_cast<std::size_t>(i)].events);
    if (!ep->queued_for_progress) {
      ep->queued_for_progress = true;
      to_progress_.push_back(ep);
    }
  }
  for (Endpoint* ep : to_progress_) {
    ep->queued_for_progress = false;
    ep->progress();
  }
  to_progress_.clear();
  return interrupted;
}

void Context::report_connect_requests() {
  for (const std::uint64_t nonce : acceptor_->take_requests()) {
    for (const auto& ep : endpoints_) {
      if (ep->nonce() != nonce) continue;
      if (!ep->connect_started()) cq_.push(ep->handle(), CHORUS_TP_OP_CONNECT_REQUEST, 0, 0);
      break;
    }
  }
}

int Context::poll(chorus_tp_completion_t* out, std::size_t max) {
  if (acceptor_->has_requests()) report_connect_requests();
  // Hand out what is already queued before asking the kernel for more.
  if (cq_.empty()) drive(0);
  return cq_.poll(out, max, reap);
}

int Context::read_error(chorus_tp_error_t* out) { return cq_.read_error(out, reap); }

int Context::wait(int timeout_ms) {
  if (!cq_.empty() || acceptor_->has_requests()) return CHORUS_OK;
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  // Each pass is a non-blocking epoll_wait. On an oversubscribed host the
  // pass gives the core away first: the rank we wait for may need it.
  const auto pass = [this] {
    if (oversubscribed_) sched_yield();
    return drive(0) || !cq_.empty();
  };
  if (deadline.spin(cfg_.spin_us, pass)) return CHORUS_OK;
  for (;;) {
    // A zero (or elapsed) timeout still looks once without blocking.
    const int left = deadline.remaining_ms();
    if (drive(left) || !cq_.empty()) return CHORUS_OK;
    if (left == 0 || deadline.expired()) {
      return provider::wait_timed_out(timeout_ms);
    }
  }
}

int Context::interrupt() { return provider::wake_eventfd(event_fd_.get()); }

}  // namespace chorus::tcp
