// Acceptor: a context's listening socket and the thread that admits the
// connections its endpoints are waiting for.
#pragma once

#include "tcp.h"
#include "tcp_auth.h"
#include "tcp_config.h"
#include "tcp_wire.h"

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace chorus::tcp {

/// One per context. The lower rank of every pair is passive: the higher rank
/// connects to this listener and sends a Hello. Accepting, reading the Hello
/// and answering happen on the acceptor's own Asio thread, so a connector
/// never needs the accepting rank's thread to be inside endpoint_connect at
/// the same moment; endpoint_connect later collects the parked sockets with
/// take().
///
/// Polled connects (CHORUS_TP_CAP_CONNECT_POLL) add two things: a call-me
/// Hello from a lower rank, admitted against `callers_` and parking nothing,
/// and connect requests: endpoints whose peer started connecting before
/// this side asked, queued in `requests_` for the context's poll.
///
/// Threading: expect/forget/take/try_take/take_requests are called by the
/// context's (single) caller thread; the Asio thread touches only `live_`
/// (its own) and, under `mu_`, `expected_`, `callers_` and `requests_`.
class Acceptor {
 public:
  /// Listens on `bind`:0 (ephemeral port) and admits only connectors that
  /// prove they hold `key`. `data_channels` (chorus_tp_context_info_t) only
  /// names channels in messages. Throws Error(SYSTEM) on failure.
  /// `wake` is called from the Asio thread when a connect request is
  /// queued (the context writes its interrupt eventfd).
  Acceptor(const asio::ip::address& bind, const Config& cfg, int rank, int data_channels,
           auth::Key key, std::function<void()> wake);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  std::uint16_t port() const { return port_; }

  /// Registers an open endpoint so Hellos naming `nonce` are admitted.
  void expect(std::uint64_t nonce, int peer_rank, int channel, int sockets);
  /// Registers an open endpoint of the higher rank of its pair, so that a
  /// call-me Hello (tcp_wire.h) naming `nonce` is admitted.
  void expect_call(std::uint64_t nonce, int peer_rank, int channel);
  /// Unregisters it (either kind) and closes any socket parked for it.
  void forget(std::uint64_t nonce);

  /// The endpoint's own side has started connecting (a higher rank's
  /// endpoint): call-me Hellos for it no longer raise a connect request.
  void mark_started(std::uint64_t nonce);

  /// Polled take (never blocks). Claims the endpoint for the connector
  /// whose blob carried `sender_nonce` (no connect request is raised for it
  /// afterwards). Returns every fd once all arrived (the caller owns them),
  /// else empty; `dialing` says whether some socket has arrived or is in
  /// its handshake (the peer is dialing already).
  std::vector<int> try_take(std::uint64_t nonce, std::uint64_t sender_nonce, bool& dialing);

  /// Endpoints whose peer asked to connect since the last call (nonces).
  std::vector<std::uint64_t> take_requests();
  bool has_requests() const { return has_requests_.load(std::memory_order_acquire); }

  /// Blocks until every socket of endpoint `nonce` has arrived from the
  /// connector whose own blob carried `sender_nonce`, or until the deadline.
  /// Returns the fds in socket-index order (caller owns them), or an empty
  /// vector on timeout. Sockets from any other connector are closed.
  std::vector<int> take(std::uint64_t nonce, std::uint64_t sender_nonce, const Deadline& deadline);

 private:
  struct Incoming;
  struct Slot {
    int fd = -1;
    bool reserved = false;  // a Hello for this index was admitted
    bool taken = false;     // handed to endpoint_connect
    std::uint64_t sender_nonce = 0;
  };
  struct Expected {
    int peer_rank = 0;
    int channel = 0;
    int sockets = 1;
    bool sender_known = false;
    std::uint64_t sender_nonce = 0;
    std::vector<Slot> slots;
    int ready = 0;
    bool claimed = false;    // endpoint_connect has asked for the sockets
    bool requested = false;  // a connect request was queued
  };
  /// A higher rank's endpoint (it dials); only call-me Hellos name it.
  struct Caller {
    int peer_rank = 0;
    int channel = 0;
    bool started = false;    // its own endpoint_connect has started
    bool requested = false;  // a connect request was queued
  };

  void run() noexcept;
  void accept_next();
  void on_accept(asio::ip::tcp::socket socket);
  void on_hello(const std::shared_ptr<Incoming>& in);
  void on_proof(const std::shared_ptr<Incoming>& in);
  void finish(const std::shared_ptr<Incoming>& in);
  wire::AckStatus admit(const wire::Hello& h);
  void unreserve(const wire::Hello& h);
  void deliver(const wire::Hello& h, int fd);
  wire::AckStatus admit_call(const wire::Hello& h);
  void request(std::uint64_t nonce);  // requires mu_
  void purge_foreign(Expected& e);    // requires mu_
  /// The endpoint's entry, claimed by its connect from the peer's
  /// `sender_nonce` (sockets of other senders dropped); requires mu_.
  Expected& claim(std::uint64_t nonce, std::uint64_t sender_nonce);
  /// Every parked socket of a complete endpoint, taken; requires mu_.
  std::vector<int> hand_over(Expected& e);

  static constexpr std::size_t kMaxHandshakesInFlight = 256;
  static constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

  const Config cfg_;
  const int rank_;
  const int data_channels_;
  const auth::Key key_;
  std::uint16_t port_ = 0;

  asio::io_context io_{1};
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer backoff_;
  std::set<Incoming*> live_;  // handshakes in progress; Asio thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, Expected> expected_;  // by endpoint nonce
  std::unordered_map<std::uint64_t, Caller> callers_;     // by endpoint nonce
  std::vector<std::uint64_t> requests_;
  std::atomic<bool> has_requests_{false};
  const std::function<void()> wake_;

  std::thread thread_;  // last: started after everything above exists
};

}  // namespace chorus::tcp
