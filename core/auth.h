// Job authentication: HMAC-SHA256 challenge-response over the job token.
//
// Used by the bootstrap (core/bootstrap.cc) to admit ranks to the side
// channel, and by the core to derive the per-job key that transports use to
// authenticate their own data connections (chorus_tp_context_info_t::job_key).
// The token itself never crosses the wire: both ends prove that they know it
// by MACing fresh random nonces chosen by both sides. See docs/reliability.md.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::core::auth {

inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kMacSize = 32;  // SHA-256
using Nonce = std::array<std::byte, kNonceSize>;
using Mac = std::array<std::byte, kMacSize>;

/// Fresh nonce from OpenSSL's CSPRNG (RAND_bytes). Throws std::runtime_error
/// when the generator fails (it then cannot be trusted for anything).
Nonce random_nonce();

/// HMAC-SHA256 over the concatenation of `parts`, keyed with `key` (may be
/// empty). Pure; thread-safe.
Mac hmac(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts);

/// Constant-time comparison (CRYPTO_memcmp), so a forger learns nothing from
/// how long a refusal took.
bool same_mac(std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

/// The token as key bytes.
inline std::span<const std::byte> key_of(std::string_view token) noexcept {
  return std::as_bytes(std::span(token.data(), token.size()));
}

/// What rank 0 sends to prove it knows the token: bound to the nonce of the
/// rank that connected and to rank 0's own, under a label that differs from
/// the rank's so neither proof can be reflected as the other.
Mac coordinator_proof(std::string_view token, const Nonce& rank_nonce, const Nonce& root_nonce);
/// What a connecting rank sends back.
Mac rank_proof(std::string_view token, const Nonce& rank_nonce, const Nonce& root_nonce);

/// The key a job's transports authenticate their data connections with:
/// HMAC(token, label || job_nonce), where rank 0 draws job_nonce for every
/// job. Different for every job even when the token is reused, and unknown
/// to anyone outside the side channel even when the token is empty.
std::vector<std::byte> transport_key(std::string_view token, std::span<const std::byte> job_nonce);

}  // namespace chorus::core::auth
