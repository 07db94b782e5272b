// HMAC-SHA256 proofs for the data-connection handshake (tcp_auth.h).
#include "tcp_auth.h"

#include "tcp.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <string_view>

namespace chorus::tcp::auth {

namespace {

wire::AuthBytes mac(const Key& key, std::string_view label, const wire::HelloBytes& hello,
                    const wire::AuthBytes& nonce) {
  std::vector<unsigned char> message(label.begin(), label.end());
  const auto* h = reinterpret_cast<const unsigned char*>(hello.data());
  message.insert(message.end(), h, h + hello.size());
  const auto* n = reinterpret_cast<const unsigned char*>(nonce.data());
  message.insert(message.end(), n, n + nonce.size());
  static const unsigned char kNoKey = 0;  // OpenSSL refuses a NULL key, even of length 0
  const void* key_data = key.empty() ? &kNoKey : static_cast<const void*>(key.data());
  wire::AuthBytes out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), message.data(), message.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr ||
      len != out.size()) {
    throw Error(CHORUS_ERR_SYSTEM, "HMAC-SHA256 failed in libcrypto");
  }
  return out;
}

}  // namespace

wire::AuthBytes random_nonce() {
  wire::AuthBytes n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw Error(CHORUS_ERR_SYSTEM, "RAND_bytes failed: no usable random generator");
  }
  return n;
}

wire::AuthBytes acceptor_proof(const Key& key, const wire::HelloBytes& hello,
                               const wire::AuthBytes& acceptor_nonce) {
  return mac(key, "chorus-tcp-v2 acceptor", hello, acceptor_nonce);
}

wire::AuthBytes connector_proof(const Key& key, const wire::HelloBytes& hello,
                                const wire::AuthBytes& acceptor_nonce) {
  return mac(key, "chorus-tcp-v2 connector", hello, acceptor_nonce);
}

bool same(const wire::AuthBytes& a, const wire::AuthBytes& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace chorus::tcp::auth
