#include "verbs_context.h"

#include <chorus/transport_names.hpp>
#include "verbs.h"
#include "verbs_device.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <utility>

namespace chorus::verbs {

namespace {
/// The completion queue's reaped callback: the endpoint counts the slot free.
void reap(chorus_tp_endpoint_t* ep, std::uint32_t opcode) { ep->on_reaped(opcode); }
}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t random_nonce() {
  static thread_local std::random_device device;
  std::uint64_t n = 0;
  while (n == 0) n = (std::uint64_t{device()} << 32) ^ device();
  return n;
}

/// The first device with an active port, or an UNAVAILABLE error listing
/// what was found.
ibv_device* first_active_device(const DeviceList& list) {
  std::string seen;
  for (int i = 0; i < list.size(); ++i) {
    ibv_device* dev = list.at(i);
    VerbsPtr<ibv_context> ctx(ibv_open_device(dev));
    ibv_device_attr attr{};
    if (!ctx || ibv_query_device(ctx.get(), &attr) != 0) continue;
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx.get(), static_cast<std::uint8_t>(p), &pa) != 0) continue;
      if (pa.state == IBV_PORT_ACTIVE) return dev;
      seen += (seen.empty() ? "" : ", ") + std::string(ibv_get_device_name(dev)) + " port " +
              std::to_string(p) + " " + port_state_name(pa.state);
    }
  }
  throw Error(CHORUS_ERR_UNAVAILABLE,
              "no RDMA device has an ACTIVE port (" +
                  (seen.empty() ? std::string("none could be queried") : seen) +
                  "); check the links or pick another transport");
}

}  // namespace

// ConfiguredContext parses the configuration first: a wrong key is reported
// even on a host without RDMA.
Context::Context(const chorus_tp_context_info_t& info) : ConfiguredContext(info), wcs_(32) {
  if (!cfg_.devices_file.empty()) {
    matrix_ = DeviceMatrix::load(cfg_.devices_file, cfg_.devices_file_origin, size());
  }

  DeviceList list;
  if (list.size() == 0) throw Error(CHORUS_ERR_UNAVAILABLE, no_device_message(list.error()));
  std::vector<ibv_device*> devices;
  if (matrix_) {
    for (const auto& name : matrix_->names_used_by(rank())) {
      ibv_device* dev = list.find(name);
      if (dev == nullptr) {
        throw Error(
            CHORUS_ERR_INVALID_ARGUMENT,
            "device '" + name + "' named in row " + std::to_string(rank()) + " of " +
                describe_setting("devices_file", cfg_.devices_file, cfg_.devices_file_origin) +
                " does not exist on this host; RDMA devices here: " + list.names());
      }
      devices.push_back(dev);
    }
  } else if (!cfg_.device.empty()) {
    ibv_device* dev = list.find(cfg_.device);
    if (dev == nullptr) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                  describe_setting("device", cfg_.device, cfg_.device_origin) +
                      ": no such device; RDMA devices here: " + list.names());
    }
    devices.push_back(dev);
  } else {
    devices.push_back(first_active_device(list));
  }

  std::uint32_t max_wr = static_cast<std::uint32_t>(Config::kMaxQueueDepth) + 1;
  max_message_size_ = std::uint64_t{1} << 31;
  for (ibv_device* dev : devices) {
    nics_.push_back(std::make_unique<Nic>(dev, cfg_));
    Nic& nic = *nics_.back();
    nic.set_index(nics_.size() - 1);
    max_wr = std::min(max_wr, nic.max_qp_wr());
    max_message_size_ = std::min(max_message_size_, nic.max_message_size());
    log(CHORUS_LOG_INFO, "rank " + std::to_string(rank()) + " uses " + nic.summary());
  }
  // One slot of each send queue is kept for the keepalive probe.
  depth_ = std::min<std::uint32_t>(static_cast<std::uint32_t>(cfg_.queue_depth), max_wr - 1);

  event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd_.valid()) throw Error(CHORUS_ERR_SYSTEM, "eventfd: " + errno_text(errno));
}

Context::~Context() {
  for (auto& ep : endpoints_) ep->destroy_qp();
  endpoints_.clear();
  for (chorus_tp_mr* mr : mrs_) delete mr;
  mrs_.clear();
  nics_.clear();
}

chorus_tp_caps_t Context::caps() const {
  chorus_tp_caps_t c{};
  c.struct_size = sizeof c;
  c.max_message_size = max_message_size_;
  c.max_outstanding_sends = depth_;
  c.max_outstanding_recvs = depth_;
  c.flags = CHORUS_TP_CAP_NEEDS_REGISTRATION | CHORUS_TP_CAP_IMM_DATA | CHORUS_TP_CAP_CONNECT_POLL;
  c.max_address_size = static_cast<std::uint32_t>(Blob::kSize);
  return c;
}

std::string Context::matrix_entry_text(int from, int to) const {
  const auto& names = matrix_->entry(from, to);
  if (names.empty()) return "null";
  std::string s = "[";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
  return s + "]";
}

Endpoint* Context::open_endpoint(int peer_rank, int channel, void* address_out,
                                 std::size_t* address_len) {
  check_endpoint_open(peer_rank, channel, address_out, address_len);
  if (*address_len < Blob::kSize) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "address buffer of " + std::to_string(*address_len) +
                                                 " bytes is too small; need " +
                                                 std::to_string(Blob::kSize));
  }
  for (const auto& ep : endpoints_) {
    if (ep->peer_rank() == peer_rank && ep->channel() == channel) {
      throw already_open(peer_rank, channel);
    }
  }
  Nic* nic = nics_.empty() ? nullptr : nics_.front().get();
  if (matrix_) {
    const auto& names = matrix_->entry(rank(), peer_rank);
    nic = nullptr;
    if (!names.empty()) {
      const std::string& name = names[static_cast<std::size_t>(channel) % names.size()];
      for (const auto& n : nics_) {
        if (n->name() == name) nic = n.get();
      }
    }
  }
  const int cq_entries = static_cast<int>(2 * depth_ + 1);
  ibv_cq* cq = nic != nullptr ? nic->reserve_cq(cq_entries) : nullptr;
  std::unique_ptr<chorus_tp_endpoint> ep;
  try {
    ep = std::make_unique<chorus_tp_endpoint>(*this, nic, cq, peer_rank, channel, depth_,
                                              random_nonce());
  } catch (...) {
    if (nic != nullptr) nic->release_cq(cq, cq_entries);
    throw;
  }
  ep->local_blob().encode(static_cast<unsigned char*>(address_out));
  *address_len = Blob::kSize;
  if (nic != nullptr) nic->endpoints_by_qp()[ep->qp_num()] = ep.get();
  endpoints_.push_back(std::move(ep));
  return endpoints_.back().get();
}

int Context::connect(Endpoint& ep, const void* peer_address, std::size_t length, int timeout_ms) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  const auto blob = Blob::decode(peer_address, length);
  if (!blob) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the " + std::to_string(length) +
                    "-byte peer address is not a verbs endpoint address (expected " +
                    std::to_string(Blob::kSize) +
                    " bytes with magic CHVB version 1); do all ranks use transport 'verbs' from "
                    "the same Chorus version?");
  }
  const Blob& b = *blob;
  if (b.rank != ep.peer_rank() || b.peer_rank != rank() || b.channel != ep.channel()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the peer address is rank " + std::to_string(b.rank) + "'s endpoint toward " +
                    endpoint_name(b.peer_rank, b.channel, data_channels()) +
                    ", but this endpoint is rank " + std::to_string(rank()) + "'s toward " +
                    endpoint_name(ep.peer_rank(), ep.channel(), data_channels()));
  }
  const bool theirs_no_link = (b.flags & Blob::kNoLink) != 0;
  if (ep.no_link() || theirs_no_link) {
    if (ep.no_link() && theirs_no_link) {
      ep.connect_no_link();
      return CHORUS_OK;
    }
    const int i = rank(), j = ep.peer_rank();
    const std::string file =
        matrix_ ? "devices_file '" + cfg_.devices_file + "'" : std::string("its configuration");
    throw Error(
        CHORUS_ERR_INVALID_ARGUMENT,
        "inconsistent device matrix for the pair rank " + std::to_string(i) + " <-> rank " +
            std::to_string(j) + ": devices[" + std::to_string(i) + "][" + std::to_string(j) +
            "] is " + (ep.no_link() ? "null" : (matrix_ ? matrix_entry_text(i, j) : "a device")) +
            " here but rank " + std::to_string(j) + " has " +
            (theirs_no_link ? "no device" : "a device") + " toward rank " + std::to_string(i) +
            " (devices[" + std::to_string(j) + "][" + std::to_string(i) + "] in " + file +
            "); both entries of a pair must be null or both name devices");
  }
  Nic& nic = *ep.nic();
  if (((b.flags & Blob::kInfiniBand) != 0) != nic.infiniband()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                ep.where() + ": link layers differ: this rank uses " +
                    (nic.infiniband() ? "InfiniBand" : "RoCE") + ", rank " +
                    std::to_string(b.rank) + " uses " +
                    ((b.flags & Blob::kInfiniBand) ? "InfiniBand" : "RoCE"));
  }
  if (ep.state() == Endpoint::State::Failed) {
    throw Error(ep.failure_status(), ep.where() + ": " + ep.failure());
  }
  // From here on a peer's polled hello raises no connect request: this
  // side is connecting already (set before any progress below runs).
  ep.set_connect_called();
  if (ep.peer_blob()) {
    // The peer's hello came first and connected the QP already.
    if (!(*ep.peer_blob() == b)) {
      throw Error(
          CHORUS_ERR_INVALID_ARGUMENT,
          ep.where() + ": the address given differs from the one the peer's handshake carried");
    }
  } else {
    ep.adopt(b);
  }
  if (timeout_ms == 0) return connect_polled(ep);
  // Tell the peer we are ready, until it says it is too (its hello or accept).
  auto next_hello = Clock::now();
  int interval_ms = 20;
  int hellos = 0;
  for (;;) {
    progress();
    if (ep.state() == Endpoint::State::Failed) {
      throw Error(CHORUS_ERR_PEER_LOST, ep.where() + ": " + ep.failure());
    }
    if (ep.peer_ready()) return CHORUS_OK;
    const auto now = Clock::now();
    if (now >= next_hello) {
      send_hello(ep);
      ++hellos;
      next_hello = now + std::chrono::milliseconds(interval_ms);
      interval_ms = std::min(interval_ms * 2, 500);
    }
    if (deadline.expired()) {
      throw Error(CHORUS_ERR_TIMEOUT,
                  ep.where() + ": rank " + std::to_string(b.rank) +
                      " did not answer the connection handshake within " +
                      std::to_string(timeout_ms) + " ms (" + std::to_string(hellos) +
                      " hellos sent to its GID " +
                      gid_text(*reinterpret_cast<const ibv_gid*>(b.gid.data())) + " LID " +
                      std::to_string(b.lid) +
                      "); is it running, and can this GID reach it (gid_index, device)?");
    }
    if (arm_all()) continue;
    const int until_hello = static_cast<int>(std::max<long long>(
        0, std::chrono::ceil<std::chrono::milliseconds>(next_hello - now).count()));
    const int left = deadline.remaining_ms();
    sleep(left < 0 ? until_hello : std::min(left, until_hello), false);
  }
}

int Context::connect_polled(Endpoint& ep) {
  Endpoint::PolledConnect& p = ep.polled();
  if (!p.started) {
    p.started = true;
    p.since = Clock::now();
    p.next_hello = p.since;
  }
  progress();
  if (ep.state() == Endpoint::State::Failed) {
    throw Error(ep.failure_status(), ep.where() + ": " + ep.failure());
  }
  if (ep.peer_ready()) return CHORUS_OK;
  const auto now = Clock::now();
  repeat_hello(ep, now);
  const int limit = cfg_.connect_poll_timeout_ms;
  if (limit > 0 && now - p.since >= std::chrono::milliseconds(limit)) {
    const Blob& b = *ep.peer_blob();
    const std::string why =
        "rank " + std::to_string(b.rank) + " did not answer the connection handshake within " +
        std::to_string(limit) + " ms (transport.verbs.connect_poll_timeout_ms; " +
        std::to_string(p.hellos) + " hellos sent to its GID " +
        gid_text(*reinterpret_cast<const ibv_gid*>(b.gid.data())) + " LID " +
        std::to_string(b.lid) +
        "): its endpoint or context is closed, or it has not progressed "
        "its transport for that long";
    ep.abandon(CHORUS_ERR_TIMEOUT, why);
    throw Error(CHORUS_ERR_TIMEOUT, ep.where() + ": " + why);
  }
  return set_last_error(CHORUS_ERR_AGAIN, ep.where() + ": waiting for rank " +
                                              std::to_string(ep.peer_rank()) +
                                              " to answer the connection handshake");
}

int Context::repeat_hello(Endpoint& ep, Clock::time_point now) {
  Endpoint::PolledConnect& p = ep.polled();
  if (!p.started || ep.peer_ready() || ep.state() != Endpoint::State::Connected) return -1;
  if (now >= p.next_hello) {
    send_hello(ep, true);
    ++p.hellos;
    p.next_hello = now + std::chrono::milliseconds(p.interval_ms);
    p.interval_ms = std::min(p.interval_ms * 2, 500);
  }
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(p.next_hello - now).count());
}

void Context::send_hello(Endpoint& ep, bool polled) {
  Handshake h;
  h.kind = Handshake::kHello;
  if (polled) h.flags = Handshake::kPolled;
  h.target_qp_num = ep.peer_blob()->qp_num;
  h.target_nonce = ep.peer_blob()->nonce;
  h.sender = ep.local_blob();
  ep.nic()->send_handshake(h, *ep.peer_blob());
}

void Context::on_handshake(Nic& nic, const unsigned char* data, std::size_t len) {
  const auto h = Handshake::decode(data, len);
  if (!h) {
    log(CHORUS_LOG_DEBUG, nic.where() + ": dropped a datagram that is not a handshake");
    return;
  }
  auto& by_qp = nic.endpoints_by_qp();
  const auto it = by_qp.find(h->target_qp_num);
  Endpoint* ep = it == by_qp.end() ? nullptr : it->second;
  const Blob& s = h->sender;
  // The sender must know this endpoint's nonce (from its blob) and be the
  // rank and channel the endpoint is for; anything else is not this job's.
  if (ep == nullptr || ep->nonce() != h->target_nonce || s.rank != ep->peer_rank() ||
      s.peer_rank != rank() || s.channel != ep->channel() || (s.flags & Blob::kNoLink) != 0) {
    log(CHORUS_LOG_DEBUG, nic.where() + ": dropped a handshake from rank " +
                              std::to_string(s.rank) + " for no endpoint of this job");
    return;
  }
  if (ep->state() == Endpoint::State::Failed) return;
  if (h->kind == Handshake::kHello) {
    if (!ep->peer_blob()) {
      try {
        ep->adopt(s);
      } catch (const Error& e) {
        log(CHORUS_LOG_WARN, e.what());
        return;
      }
    } else if (!(*ep->peer_blob() == s)) {
      log(CHORUS_LOG_WARN, ep->where() +
                               ": ignored a hello whose address differs from the one "
                               "this endpoint is connected to");
      return;
    }
    if ((h->flags & Handshake::kPolled) != 0 && !ep->connect_called()) {
      // A polled connect of the peer's, and this side has not called
      // connect: the caller learns of it from a connect request (once per
      // endpoint). The peer is not taken as ready here: the hello may be
      // stale (sent by an endpoint closed since, its caller's deadline
      // passed while this side was away), so this side's own connect asks
      // again and waits for the answer.
      if (ep->take_connect_request()) cq_.push(ep->handle(), CHORUS_TP_OP_CONNECT_REQUEST, 0, 0);
    } else if (ep->set_peer_ready()) {
      connect_news_ = true;
    }
    Handshake reply;
    reply.kind = Handshake::kAccept;
    reply.target_qp_num = s.qp_num;
    reply.target_nonce = s.nonce;
    reply.sender = ep->local_blob();
    nic.send_handshake(reply, s);
  } else if (ep->peer_blob() && *ep->peer_blob() == s) {
    if (ep->set_peer_ready()) connect_news_ = true;
  }
}

void Context::dispatch(Nic& nic, const ibv_wc& wc) {
  if (wc.qp_num == nic.ud_qp_num()) {
    nic.on_ud_completion(
        wc, [&](const unsigned char* data, std::size_t len) { on_handshake(nic, data, len); });
    return;
  }
  auto& by_qp = nic.endpoints_by_qp();
  const auto it = by_qp.find(wc.qp_num);
  if (it == by_qp.end()) return;  // an endpoint closed since: its work vanished
  it->second->on_completion(wc);
}

std::size_t Context::progress() {
  std::size_t handled = 0;
  for (const auto& nic : nics_) {
    for (ibv_cq* cq : nic->cqs()) {
      for (;;) {
        const int n = ibv_poll_cq(cq, static_cast<int>(wcs_.size()), wcs_.data());
        if (n < 0) {
          log(CHORUS_LOG_ERROR, nic->where() + ": ibv_poll_cq failed");
          break;
        }
        for (int i = 0; i < n; ++i) dispatch(*nic, wcs_[static_cast<std::size_t>(i)]);
        handled += static_cast<std::size_t>(n);
        if (n < static_cast<int>(wcs_.size())) break;
      }
    }
  }
  return handled;
}

int Context::maintain() {
  const auto now = Clock::now();
  int next = -1;
  const auto consider = [&](int due) {
    if (due >= 0 && (next < 0 || due < next)) next = due;
  };
  for (const auto& ep : endpoints_) {
    if (cfg_.keepalive_ms > 0) consider(ep->maintain(now));
    consider(repeat_hello(*ep, now));
  }
  return next;
}

bool Context::arm_all() {
  for (const auto& nic : nics_) nic->arm();
  return progress() > 0;
}

bool Context::sleep(int timeout_ms, bool interruptible) {
  std::vector<pollfd> fds;
  fds.reserve(nics_.size() + 1);
  for (const auto& nic : nics_) fds.push_back(pollfd{nic->event_fd(), POLLIN, 0});
  if (interruptible) fds.push_back(pollfd{event_fd_.get(), POLLIN, 0});
  const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0) {
    if (errno == EINTR) return false;
    throw Error(CHORUS_ERR_SYSTEM, "poll on the completion channels: " + errno_text(errno));
  }
  for (std::size_t i = 0; i < nics_.size(); ++i) {
    if (fds[i].revents != 0) nics_[i]->consume_events();
  }
  if (interruptible && fds.back().revents != 0) {
    std::uint64_t v = 0;
    while (::read(event_fd_.get(), &v, sizeof v) > 0) {
    }
    return true;
  }
  return false;
}

void Context::close_endpoint(Endpoint* ep) {
  const auto it = std::find_if(endpoints_.begin(), endpoints_.end(),
                               [&](const auto& p) { return p.get() == ep; });
  if (it == endpoints_.end()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "not an open endpoint of this context");
  }
  Nic* nic = ep->nic();
  const std::uint32_t qpn = ep->qp_num();
  ep->destroy_qp();
  if (nic != nullptr) {
    nic->endpoints_by_qp().erase(qpn);
    nic->release_cq(ep->cq(), static_cast<int>(2 * depth_ + 1));
  }
  cq_.forget(ep->handle());
  endpoints_.erase(it);
  // Completions the destroyed QP left in the CQ are dropped now, before a new
  // QP could reuse its number.
  progress();
}

chorus_tp_mr* Context::register_memory(void* addr, std::size_t length) {
  auto mr = std::make_unique<chorus_tp_mr>();
  mr->addr = reinterpret_cast<std::uintptr_t>(addr);
  mr->length = length;
  if (length > 0) {
    for (const auto& nic : nics_) {
      VerbsPtr<ibv_mr> m(ibv_reg_mr(nic->pd(), addr, length, IBV_ACCESS_LOCAL_WRITE));
      if (!m) {
        const int err = errno;
        throw Error(CHORUS_ERR_SYSTEM,
                    nic->where() + ": ibv_reg_mr of " + std::to_string(length) +
                        " bytes failed: " + errno_text(err) +
                        (err == ENOMEM ? " (raise the locked-memory limit, ulimit -l)" : ""));
      }
      mr->mrs.push_back(std::move(m));
    }
  }
  chorus_tp_mr* raw = mr.release();
  mrs_.insert(raw);
  return raw;
}

void Context::deregister_memory(chorus_tp_mr* mr) {
  if (mr == nullptr) return;
  if (mrs_.erase(mr) == 0) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "not a registration of this context");
  }
  delete mr;
}

int Context::poll(chorus_tp_completion_t* out, std::size_t max) {
  progress();
  maintain();
  return cq_.poll(out, max, reap);
}

int Context::read_error(chorus_tp_error_t* out) { return cq_.read_error(out, reap); }

int Context::wait(int timeout_ms) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  for (;;) {
    progress();
    const int keepalive_in = maintain();
    // A polled connect's peer answered: the caller polls that connect again.
    const bool news = std::exchange(connect_news_, false);
    if (!cq_.empty() || news) return CHORUS_OK;
    if (arm_all() && (!cq_.empty() || std::exchange(connect_news_, false))) return CHORUS_OK;
    int left = deadline.remaining_ms();
    if (left == 0) {
      return provider::wait_timed_out(timeout_ms);
    }
    if (keepalive_in >= 0 && (left < 0 || keepalive_in < left)) left = keepalive_in;
    if (sleep(left, true)) return CHORUS_OK;  // interrupted
  }
}

int Context::interrupt() { return provider::wake_eventfd(event_fd_.get()); }

}  // namespace chorus::verbs
