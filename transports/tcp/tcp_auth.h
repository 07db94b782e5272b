// Authentication of data connections: HMAC-SHA256 (OpenSSL libcrypto) over
// the job key the core hands to context_open (chorus_tp_context_info_t::
// job_key). See the handshake in tcp_wire.h and docs/reliability.md.
#pragma once

#include "tcp_wire.h"

#include <cstddef>
#include <span>
#include <vector>

namespace chorus::tcp::auth {

/// The job's key, copied out of context_open's info. Empty when the core
/// gave none (an older core, or a test harness): the handshake then still
/// runs with an empty key, which checks the protocol but proves nothing.
using Key = std::vector<std::byte>;

/// Fresh random nonce (RAND_bytes). Throws Error(SYSTEM) if the generator fails.
wire::AuthBytes random_nonce();

/// What the accepting rank sends to prove it holds the key: a MAC over the
/// connector's whole Hello (which carries the connector's nonce) and the
/// acceptor's nonce.
wire::AuthBytes acceptor_proof(const Key& key, const wire::HelloBytes& hello,
                               const wire::AuthBytes& acceptor_nonce);
/// What the connecting rank answers with; a different label, so that one
/// side's proof can never be replayed as the other's.
wire::AuthBytes connector_proof(const Key& key, const wire::HelloBytes& hello,
                                const wire::AuthBytes& acceptor_nonce);

/// Constant-time comparison (CRYPTO_memcmp).
bool same(const wire::AuthBytes& a, const wire::AuthBytes& b) noexcept;

}  // namespace chorus::tcp::auth
