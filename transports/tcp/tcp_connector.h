// connect_socket: the active half of connection setup (the higher rank).
#pragma once

#include "tcp.h"
#include "tcp_auth.h"
#include "tcp_config.h"
#include "tcp_wire.h"

#include <asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>

namespace chorus::tcp {

/// Connects socket `hello.index` of an endpoint to the peer's listener at
/// `remote`, retrying (with back-off) while the connection is refused or
/// unreachable, runs the authenticated handshake over `key` (tcp_wire.h: Hello
/// with a fresh nonce, check the acceptor's proof, send ours) and waits for
/// the Ack — all bounded by `deadline`. Returns the connected fd, owned by the
/// caller. Throws Error: TIMEOUT at the deadline, PEER_LOST when the peer
/// refuses, fails authentication or drops the handshake, INVALID_ARGUMENT on
/// a configuration mismatch.
/// `data_channels` (chorus_tp_context_info_t) only names the channel in messages.
int connect_socket(const asio::ip::tcp::endpoint& remote, wire::Hello hello, const Config& cfg,
                   int data_channels, const auth::Key& key, const Deadline& deadline);

/// What a background dial (a polled connect, tcp_dial.h) adds: a flag that
/// abandons the dial within ~20 ms (then Error(AGAIN)), and how long a
/// refused connection keeps being retried before it means the peer is gone
/// (its listener existed when its blob was made, so a refusal is an exit).
struct DialControl {
  const std::atomic<bool>* cancel = nullptr;
  std::chrono::milliseconds refused_limit{2000};
};

int connect_socket(const asio::ip::tcp::endpoint& remote, wire::Hello hello, const Config& cfg,
                   int data_channels, const auth::Key& key, const Deadline& deadline,
                   const DialControl& control);

}  // namespace chorus::tcp
