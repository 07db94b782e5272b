#include "core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>
#include <string>

namespace chorus::core::auth {
namespace {

std::span<const std::byte> label(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: the system's random generator is unavailable");
  }
  return n;
}

Mac hmac(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) {
  // HMAC() wants one buffer; the inputs here are a few hundred bytes at most.
  std::vector<unsigned char> message;
  for (const auto& p : parts) {
    const auto* b = reinterpret_cast<const unsigned char*>(p.data());
    message.insert(message.end(), b, b + p.size());
  }
  // OpenSSL refuses a NULL key even with length 0; an empty key is legal HMAC.
  static const unsigned char kNoKey = 0;
  const void* key_data = key.empty() ? &kNoKey : static_cast<const void*>(key.data());
  Mac out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), message.data(), message.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr ||
      len != out.size()) {
    throw std::runtime_error("HMAC-SHA256 failed in libcrypto");
  }
  return out;
}

bool same_mac(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Mac coordinator_proof(std::string_view token, const Nonce& rank_nonce, const Nonce& root_nonce) {
  return hmac(key_of(token), {label("chorus-bootstrap-v2 coordinator"), rank_nonce, root_nonce});
}

Mac rank_proof(std::string_view token, const Nonce& rank_nonce, const Nonce& root_nonce) {
  return hmac(key_of(token), {label("chorus-bootstrap-v2 rank"), rank_nonce, root_nonce});
}

std::vector<std::byte> transport_key(std::string_view token, std::span<const std::byte> job_nonce) {
  const Mac k = hmac(key_of(token), {label("chorus-transport-key-v1"), job_nonce});
  return {k.begin(), k.end()};
}

}  // namespace chorus::core::auth
