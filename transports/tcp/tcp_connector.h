// connect_socket: the active half of connection setup (the higher rank).
#pragma once

#include "tcp.h"
#include "tcp_auth.h"
#include "tcp_config.h"
#include "tcp_wire.h"

#include <asio/ip/tcp.hpp>

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

}  // namespace chorus::tcp
