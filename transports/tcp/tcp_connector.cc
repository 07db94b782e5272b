// connect_socket (tcp_connector.h): dial the lower rank, then the handshake
// that proves the connection belongs to this job.
#include "tcp_connector.h"

#include <chorus/transport_names.hpp>
#include "tcp.h"
#include "tcp_auth.h"
#include "tcp_socket_options.h"

#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <fcntl.h>

#include <algorithm>
#include <sstream>
#include <thread>

namespace chorus::tcp {

namespace {

/// Runs one asynchronous operation on `io` until it completes or the
/// deadline passes; on the deadline the socket is closed (which aborts the
/// operation) and asio::error::timed_out is returned.
/// With a cancel flag, the flag is looked at every kCancelPoll and a set
/// flag aborts like the deadline (asio::error::operation_aborted).
constexpr auto kCancelPoll = std::chrono::milliseconds(20);

template <class Start>
std::error_code run_bounded(asio::io_context& io, asio::ip::tcp::socket& socket,
                            const Deadline& deadline, const std::atomic<bool>* cancel,
                            Start&& start) {
  bool done = false;
  std::error_code result;
  start([&](std::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  io.restart();
  while (!done) {
    if (cancel != nullptr) {
      io.run_one_for(kCancelPoll);
      if (done) break;
      if (cancel->load(std::memory_order_acquire) || deadline.expired()) {
        std::error_code ignored;
        socket.close(ignored);
        io.restart();
        while (!done) io.run_one();
        return deadline.expired() ? asio::error::timed_out : asio::error::operation_aborted;
      }
    } else if (deadline.is_never()) {
      io.run_one();
    } else if (io.run_one_until(deadline.at()) == 0 && !done && deadline.expired()) {
      std::error_code ignored;
      socket.close(ignored);
      io.restart();
      while (!done) io.run_one();
      return asio::error::timed_out;
    }
  }
  return result;
}

std::string where(const asio::ip::tcp::endpoint& ep, const wire::Hello& h, int data_channels) {
  std::ostringstream s;
  s << "rank " << h.peer_rank << " (" << channel_name(h.channel, data_channels) << ", socket "
    << h.index << ") at " << ep;
  return s.str();
}

}  // namespace

int connect_socket(const asio::ip::tcp::endpoint& remote, wire::Hello hello, const Config& cfg,
                   int data_channels, const auth::Key& key, const Deadline& deadline) {
  return connect_socket(remote, hello, cfg, data_channels, key, deadline, DialControl{});
}

int connect_socket(const asio::ip::tcp::endpoint& remote, wire::Hello hello, const Config& cfg,
                   int data_channels, const auth::Key& key, const Deadline& deadline,
                   const DialControl& control) {
  const std::atomic<bool>* cancel = control.cancel;
  const auto cancelled = [&] {
    if (cancel != nullptr && cancel->load(std::memory_order_acquire))
      throw Error(CHORUS_ERR_AGAIN, "connecting to " + where(remote, hello, data_channels) +
                                        " was abandoned (endpoint closed)");
  };
  asio::io_context io(1);
  asio::ip::tcp::socket socket(io);
  std::string last_error = "no attempt made";
  auto backoff = std::chrono::milliseconds(2);
  const auto started = Deadline::Clock::now();
  for (;;) {
    cancelled();
    if (cancel != nullptr && Deadline::Clock::now() - started > control.refused_limit) {
      throw Error(CHORUS_ERR_PEER_LOST,
                  "cannot reach " + where(remote, hello, data_channels) + " for " +
                      std::to_string(control.refused_limit.count()) + " ms (last attempt: " +
                      last_error + "); its listener is gone, so the rank has most likely exited");
    }
    if (deadline.expired()) {
      throw Error(CHORUS_ERR_TIMEOUT, "timed out connecting to " +
                                          where(remote, hello, data_channels) +
                                          " (last attempt: " + last_error + ")");
    }
    std::error_code ec;
    socket.open(remote.protocol(), ec);
    if (ec) throw Error(CHORUS_ERR_SYSTEM, "cannot create a TCP socket: " + ec.message());
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    // Before connect(): the window scale is fixed by the SYN.
    apply_buffer_sizes(socket.native_handle(), cfg);
    ec = run_bounded(io, socket, deadline, cancel,
                     [&](auto handler) { socket.async_connect(remote, std::move(handler)); });
    if (!ec) break;
    cancelled();
    last_error = ec.message();
    std::error_code ignored;
    socket.close(ignored);
    // Refused or unreachable: the peer may still be coming up. Retry until
    // the deadline with a short exponential back-off.
    const auto left = deadline.is_never() ? backoff
                                          : std::chrono::duration_cast<std::chrono::milliseconds>(
                                                deadline.at() - Deadline::Clock::now());
    std::this_thread::sleep_for(std::max(std::chrono::milliseconds(0), std::min(backoff, left)));
    cancelled();
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }

  hello.connector_nonce = auth::random_nonce();
  wire::HelloBytes hello_bytes;
  wire::encode(hello, hello_bytes);
  std::error_code ec = run_bounded(io, socket, deadline, cancel, [&](auto handler) {
    asio::async_write(socket, asio::buffer(hello_bytes), std::move(handler));
  });
  // The acceptor proves it holds the job key before we prove anything.
  wire::ChallengeBytes challenge_bytes{};
  if (!ec) {
    ec = run_bounded(io, socket, deadline, cancel, [&](auto handler) {
      asio::async_read(socket, asio::buffer(challenge_bytes), std::move(handler));
    });
  }
  wire::ProofBytes proof_bytes{};
  if (!ec) {
    wire::Challenge challenge;
    if (!wire::decode(challenge_bytes, challenge)) {
      throw Error(CHORUS_ERR_PEER_LOST, where(remote, hello, data_channels) +
                                            " answered the handshake with garbage (not Chorus "
                                            "TCP of this version?)");
    }
    if (!auth::same(challenge.mac,
                    auth::acceptor_proof(key, hello_bytes, challenge.acceptor_nonce))) {
      throw Error(CHORUS_ERR_PEER_LOST,
                  where(remote, hello, data_channels) +
                      " failed authentication: it does not hold this job's key (the address is "
                      "now someone else's, or the ranks were given different job tokens)");
    }
    wire::encode(wire::Proof{auth::connector_proof(key, hello_bytes, challenge.acceptor_nonce)},
                 proof_bytes);
    ec = run_bounded(io, socket, deadline, cancel, [&](auto handler) {
      asio::async_write(socket, asio::buffer(proof_bytes), std::move(handler));
    });
  }
  wire::AckBytes ack_bytes{};
  if (!ec) {
    ec = run_bounded(io, socket, deadline, cancel, [&](auto handler) {
      asio::async_read(socket, asio::buffer(ack_bytes), std::move(handler));
    });
  }
  cancelled();
  if (ec == asio::error::timed_out) {
    throw Error(CHORUS_ERR_TIMEOUT, "timed out waiting for " + where(remote, hello, data_channels) +
                                        " to answer the handshake");
  }
  if (ec) {
    throw Error(CHORUS_ERR_PEER_LOST,
                where(remote, hello, data_channels) +
                    " dropped the connection during the handshake: " + ec.message());
  }
  wire::AckStatus status;
  if (!wire::decode(ack_bytes, status)) {
    throw Error(CHORUS_ERR_PEER_LOST, where(remote, hello, data_channels) +
                                          " answered the handshake with garbage (not Chorus TCP?)");
  }
  switch (status) {
    case wire::AckStatus::kAccepted:
      break;
    case wire::AckStatus::kMismatch:
      throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                  where(remote, hello, data_channels) +
                      " refused the connection: transport.tcp.sockets is " +
                      std::to_string(hello.sockets) + " here but differs there");
    case wire::AckStatus::kDuplicate:
      throw Error(CHORUS_ERR_INTERNAL, where(remote, hello, data_channels) +
                                           " already has this socket of the endpoint connected");
    default:
      throw Error(CHORUS_ERR_PEER_LOST,
                  where(remote, hello, data_channels) +
                      " refused the connection: it has no open endpoint matching this address "
                      "(endpoint closed, or a stale address blob)");
  }
  return socket.release();
}

}  // namespace chorus::tcp
