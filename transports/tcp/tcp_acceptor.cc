// Acceptor (tcp_acceptor.h): the listener thread, the handshake check of
// each incoming connection and the hand-over to the endpoint that expects it.
#include "tcp_acceptor.h"

#include <chorus/transport_names.hpp>
#include "tcp.h"
#include "tcp_socket_options.h"

#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <sstream>

namespace chorus::tcp {

namespace {

std::string to_string(const asio::ip::tcp::endpoint& ep) {
  std::ostringstream s;
  s << ep;
  return s.str();
}

const char* describe(wire::AckStatus s) {
  switch (s) {
    case wire::AckStatus::kAccepted:
      return "accepted";
    case wire::AckStatus::kUnknownEndpoint:
      return "no open endpoint matches its rank, channel and nonce";
    case wire::AckStatus::kMismatch:
      return "transport.tcp.sockets differs between the two ranks";
    case wire::AckStatus::kDuplicate:
      return "that socket of the endpoint is already connected";
  }
  return "unknown";
}

}  // namespace

struct Acceptor::Incoming {
  Incoming(asio::io_context& io, asio::ip::tcp::socket s) : socket(std::move(s)), timer(io) {}
  asio::ip::tcp::socket socket;
  asio::steady_timer timer;
  wire::HelloBytes hello{};
  wire::ChallengeBytes challenge{};
  wire::ProofBytes proof{};
  wire::AuthBytes acceptor_nonce{};
  wire::Hello decoded;
  wire::AckBytes ack{};
  std::string remote;
};

Acceptor::Acceptor(const asio::ip::address& bind, const Config& cfg, int rank, int data_channels,
                   auth::Key key, std::function<void()> wake)
    : cfg_(cfg),
      rank_(rank),
      data_channels_(data_channels),
      key_(std::move(key)),
      acceptor_(io_),
      backoff_(io_),
      wake_(std::move(wake)) {
  const asio::ip::tcp::endpoint where(bind, 0);
  std::error_code ec;
  acceptor_.open(where.protocol(), ec);
  if (!ec) {
    ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    // Accepted sockets inherit the buffer sizes, and the window scale is
    // negotiated in the SYN, so they must be set before listen().
    apply_buffer_sizes(acceptor_.native_handle(), cfg_);
    acceptor_.bind(where, ec);
  }
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error(CHORUS_ERR_SYSTEM,
                "cannot listen on " + bind.to_string() + " (bind_address): " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  accept_next();
  thread_ = std::thread([this] { run(); });
}

Acceptor::~Acceptor() {
  // Close everything from the Asio thread itself; run() returns once the
  // aborted handlers have drained.
  asio::post(io_, [this] {
    std::error_code ignored;
    acceptor_.close(ignored);
    backoff_.cancel();
    for (Incoming* in : live_) {
      in->timer.cancel();
      in->socket.close(ignored);
    }
  });
  thread_.join();
  for (auto& [nonce, e] : expected_) {
    for (Slot& s : e.slots) {
      if (s.fd >= 0) ::close(s.fd);
    }
  }
}

void Acceptor::run() noexcept {
  // Signals belong to the host's threads, not to ours.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      log(CHORUS_LOG_ERROR, std::string("acceptor thread: ") + e.what());
    } catch (...) {
      log(CHORUS_LOG_ERROR, "acceptor thread: unknown exception");
    }
  }
}

void Acceptor::accept_next() {
  acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      on_accept(std::move(socket));
      accept_next();
      return;
    }
    // EMFILE and friends: back off instead of spinning on the error.
    log(CHORUS_LOG_WARN, "accept on port " + std::to_string(port_) + " failed: " + ec.message());
    backoff_.expires_after(std::chrono::milliseconds(100));
    backoff_.async_wait([this](std::error_code tec) {
      if (!tec && acceptor_.is_open()) accept_next();
    });
  });
}

void Acceptor::on_accept(asio::ip::tcp::socket socket) {
  std::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  const std::string who = ec ? std::string("unknown peer") : to_string(remote);
  if (live_.size() >= kMaxHandshakesInFlight) {
    log(CHORUS_LOG_WARN, "dropped connection from " + who + ": " +
                             std::to_string(kMaxHandshakesInFlight) +
                             " handshakes already in progress");
    return;  // `socket` closes here
  }
  auto in = std::make_shared<Incoming>(io_, std::move(socket));
  in->remote = who;
  live_.insert(in.get());
  in->timer.expires_after(kHandshakeTimeout);
  in->timer.async_wait([this, in](std::error_code tec) {
    if (tec) return;  // cancelled: the handshake finished first
    log(CHORUS_LOG_WARN, "dropped connection from " + in->remote + ": no handshake within " +
                             std::to_string(kHandshakeTimeout.count()) + " s");
    std::error_code ignored;
    in->socket.close(ignored);
  });
  asio::async_read(
      in->socket, asio::buffer(in->hello), [this, in](std::error_code rec, std::size_t) {
        if (rec) {
          if (rec != asio::error::operation_aborted) {
            log(CHORUS_LOG_WARN, "dropped connection from " + in->remote +
                                     ": it ended before its handshake (" + rec.message() + ")");
          }
          finish(in);
          return;
        }
        on_hello(in);
      });
}

void Acceptor::on_hello(const std::shared_ptr<Incoming>& in) {
  if (!wire::decode(in->hello, in->decoded)) {
    log(CHORUS_LOG_WARN, "dropped connection from " + in->remote +
                             ": not a Chorus TCP handshake (bad magic or version)");
    finish(in);
    return;
  }
  // Prove we hold the job key, then make the caller prove it. Until it has,
  // it learns nothing about our endpoints.
  in->acceptor_nonce = auth::random_nonce();
  wire::encode(wire::Challenge{in->acceptor_nonce,
                               auth::acceptor_proof(key_, in->hello, in->acceptor_nonce)},
               in->challenge);
  asio::async_write(
      in->socket, asio::buffer(in->challenge), [this, in](std::error_code wec, std::size_t) {
        if (wec) {
          if (wec != asio::error::operation_aborted) {
            log(CHORUS_LOG_WARN, "dropped connection from " + in->remote +
                                     " during authentication: " + wec.message());
          }
          finish(in);
          return;
        }
        asio::async_read(in->socket, asio::buffer(in->proof),
                         [this, in](std::error_code rec, std::size_t) {
                           if (rec) {
                             if (rec != asio::error::operation_aborted) {
                               log(CHORUS_LOG_WARN,
                                   "dropped connection from " + in->remote + " claiming rank " +
                                       std::to_string(in->decoded.rank) +
                                       ": it sent no proof of the job key (" + rec.message() +
                                       "; a rank of another job refuses our proof and hangs up)");
                             }
                             finish(in);
                             return;
                           }
                           on_proof(in);
                         });
      });
}

void Acceptor::on_proof(const std::shared_ptr<Incoming>& in) {
  const wire::Hello& h = in->decoded;
  wire::Proof proof;
  if (!wire::decode(in->proof, proof) ||
      !auth::same(proof.mac, auth::connector_proof(key_, in->hello, in->acceptor_nonce))) {
    log(CHORUS_LOG_WARN, "dropped connection from " + in->remote + " claiming " +
                             endpoint_name(h.rank, h.channel, data_channels_) +
                             ": authentication failed (it does not hold this job's key)");
    finish(in);
    return;
  }
  const bool call = (h.flags & wire::kHelloCallMe) != 0;
  const wire::AckStatus status = call ? admit_call(h) : admit(h);
  if (status != wire::AckStatus::kAccepted) {
    log(CHORUS_LOG_WARN, "refused connection from " + in->remote + " claiming " +
                             endpoint_name(h.rank, h.channel, data_channels_) + ": " +
                             describe(status));
  }
  wire::encode(status, in->ack);
  asio::async_write(in->socket, asio::buffer(in->ack),
                    [this, in, h, status, call](std::error_code wec, std::size_t) {
                      in->timer.cancel();
                      if (status != wire::AckStatus::kAccepted || call) {
                        // A call-me parks nothing: its request is queued.
                        if (!wec && call) wake_();
                        finish(in);
                        return;
                      }
                      int fd = -1;
                      if (!wec) fd = in->socket.release(wec);
                      if (wec) {
                        log(CHORUS_LOG_WARN, "handshake with rank " + std::to_string(h.rank) +
                                                 " (" + in->remote + ") failed: " + wec.message());
                        unreserve(h);
                      } else {
                        deliver(h, fd);
                      }
                      finish(in);
                    });
}

void Acceptor::finish(const std::shared_ptr<Incoming>& in) {
  live_.erase(in.get());
  in->timer.cancel();
  std::error_code ignored;
  in->socket.close(ignored);
}

wire::AckStatus Acceptor::admit(const wire::Hello& h) {
  std::lock_guard lock(mu_);
  auto it = expected_.find(h.target_nonce);
  if (it == expected_.end() || h.peer_rank != rank_ || it->second.peer_rank != h.rank ||
      it->second.channel != h.channel) {
    return wire::AckStatus::kUnknownEndpoint;
  }
  Expected& e = it->second;
  if (h.sockets != e.sockets || h.index >= e.sockets) return wire::AckStatus::kMismatch;
  if (e.sender_known && h.sender_nonce != e.sender_nonce) return wire::AckStatus::kUnknownEndpoint;
  Slot& slot = e.slots[h.index];
  if (slot.reserved) return wire::AckStatus::kDuplicate;
  slot.reserved = true;
  slot.sender_nonce = h.sender_nonce;
  return wire::AckStatus::kAccepted;
}

wire::AckStatus Acceptor::admit_call(const wire::Hello& h) {
  std::lock_guard lock(mu_);
  auto it = callers_.find(h.target_nonce);
  // Only the lower rank of a pair calls; the Hello names this rank's own
  // endpoint towards it, as a normal Hello names the acceptor's.
  if (it == callers_.end() || h.peer_rank != rank_ || h.rank >= rank_ ||
      it->second.peer_rank != h.rank || it->second.channel != h.channel) {
    return wire::AckStatus::kUnknownEndpoint;
  }
  if (h.sockets != static_cast<std::uint16_t>(cfg_.sockets)) return wire::AckStatus::kMismatch;
  Caller& c = it->second;
  if (!c.started && !c.requested) {
    c.requested = true;
    request(h.target_nonce);
  }
  return wire::AckStatus::kAccepted;
}

void Acceptor::request(std::uint64_t nonce) {
  requests_.push_back(nonce);
  has_requests_.store(true, std::memory_order_release);
}

std::vector<std::uint64_t> Acceptor::take_requests() {
  std::lock_guard lock(mu_);
  has_requests_.store(false, std::memory_order_release);
  return std::exchange(requests_, {});
}

void Acceptor::expect_call(std::uint64_t nonce, int peer_rank, int channel) {
  std::lock_guard lock(mu_);
  callers_.insert_or_assign(nonce, Caller{peer_rank, channel, false, false});
}

void Acceptor::mark_started(std::uint64_t nonce) {
  std::lock_guard lock(mu_);
  if (auto it = callers_.find(nonce); it != callers_.end()) it->second.started = true;
}

std::vector<int> Acceptor::hand_over(Expected& e) {
  std::vector<int> fds;
  for (Slot& s : e.slots) {
    fds.push_back(s.fd);
    s.fd = -1;
    s.taken = true;
  }
  e.ready = 0;
  return fds;
}

Acceptor::Expected& Acceptor::claim(std::uint64_t nonce, std::uint64_t sender_nonce) {
  auto it = expected_.find(nonce);
  if (it == expected_.end()) {
    throw Error(CHORUS_ERR_INTERNAL, "endpoint is not registered with the acceptor");
  }
  Expected& e = it->second;
  e.claimed = true;
  e.sender_known = true;
  e.sender_nonce = sender_nonce;
  purge_foreign(e);
  return e;
}

std::vector<int> Acceptor::try_take(std::uint64_t nonce, std::uint64_t sender_nonce,
                                    bool& dialing) {
  std::lock_guard lock(mu_);
  Expected& e = claim(nonce, sender_nonce);
  dialing = false;
  for (const Slot& s : e.slots) dialing = dialing || s.reserved;
  if (e.ready != e.sockets) return {};
  return hand_over(e);
}

void Acceptor::unreserve(const wire::Hello& h) {
  std::lock_guard lock(mu_);
  auto it = expected_.find(h.target_nonce);
  if (it != expected_.end() && it->second.slots[h.index].fd < 0) {
    it->second.slots[h.index].reserved = false;
  }
}

void Acceptor::deliver(const wire::Hello& h, int fd) {
  bool requested = false;
  {
    std::lock_guard lock(mu_);
    auto it = expected_.find(h.target_nonce);
    if (it != expected_.end() && it->second.slots[h.index].reserved &&
        !it->second.slots[h.index].taken && it->second.slots[h.index].fd < 0) {
      it->second.slots[h.index].fd = fd;
      ++it->second.ready;
      fd = -1;
      // The peer dials from a polled connect and this side has not asked
      // for the endpoint: tell the caller it is wanted.
      if ((h.flags & wire::kHelloPolled) && !it->second.claimed && !it->second.requested) {
        it->second.requested = true;
        request(h.target_nonce);
        requested = true;
      }
    }
  }
  if (fd >= 0) {
    ::close(fd);  // the endpoint was closed meanwhile
  } else {
    cv_.notify_all();
    // Also when the caller polls: its connect may now complete.
    if (h.flags & wire::kHelloPolled || requested) wake_();
  }
}

void Acceptor::expect(std::uint64_t nonce, int peer_rank, int channel, int sockets) {
  Expected e;
  e.peer_rank = peer_rank;
  e.channel = channel;
  e.sockets = sockets;
  e.slots.resize(static_cast<std::size_t>(sockets));
  std::lock_guard lock(mu_);
  expected_.insert_or_assign(nonce, std::move(e));
}

void Acceptor::forget(std::uint64_t nonce) {
  std::lock_guard lock(mu_);
  callers_.erase(nonce);
  std::erase(requests_, nonce);
  auto it = expected_.find(nonce);
  if (it == expected_.end()) return;
  for (Slot& s : it->second.slots) {
    if (s.fd >= 0) ::close(s.fd);
  }
  expected_.erase(it);
}

void Acceptor::purge_foreign(Expected& e) {
  for (std::size_t i = 0; i < e.slots.size(); ++i) {
    Slot& s = e.slots[i];
    if (s.reserved && !s.taken && s.sender_nonce != e.sender_nonce) {
      log(CHORUS_LOG_WARN, "closed a connection claiming " +
                               endpoint_name(e.peer_rank, e.channel, data_channels_) +
                               ": it does not come from the endpoint whose address was given");
      if (s.fd >= 0) {
        ::close(s.fd);
        --e.ready;
      }
      s = Slot{};
    }
  }
}

std::vector<int> Acceptor::take(std::uint64_t nonce, std::uint64_t sender_nonce,
                                const Deadline& deadline) {
  std::unique_lock lock(mu_);
  Expected& e = claim(nonce, sender_nonce);
  auto complete = [&] {
    purge_foreign(e);
    return e.ready == e.sockets;
  };
  if (deadline.is_never()) {
    cv_.wait(lock, complete);
  } else if (!cv_.wait_until(lock, deadline.at(), complete)) {
    return {};
  }
  return hand_over(e);
}

}  // namespace chorus::tcp
