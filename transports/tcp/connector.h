// connect_socket: the active half of connection setup (the higher rank).
#pragma once

#include "config.h"
#include "deadline.h"
#include "wire.h"

#include <asio/ip/tcp.hpp>

namespace chorus::tcp {

/// Connects socket `hello.index` of an endpoint to the peer's listener at
/// `remote`, retrying (with back-off) while the connection is refused or
/// unreachable, sends the Hello and waits for the Ack — all bounded by
/// `deadline`. Returns the connected fd, owned by the caller.
/// Throws Error: TIMEOUT at the deadline, PEER_LOST when the peer refuses or
/// drops the handshake, INVALID_ARGUMENT on a configuration mismatch.
int connect_socket(const asio::ip::tcp::endpoint& remote, const wire::Hello& hello,
                   const Config& cfg, const Deadline& deadline);

}  // namespace chorus::tcp
