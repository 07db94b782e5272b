// The free helpers of the bootstrap side-channel tests (bootstrap_test_util.h):
// ports, options, rank threads, blob patterns, outcomes, and playing either
// side of the join's authentication by hand.
#include "bootstrap_test_util.h"

#include "core/auth.h"

#include <sstream>

namespace chorus::core::bootstrap_test {

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string local(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

BootstrapOptions options(int rank, int size, std::uint16_t port, std::string token, LogSink* sink) {
  BootstrapOptions o;
  o.rank = rank;
  o.size = size;
  o.coordinator = local(port);
  o.job_token = std::move(token);
  if (sink != nullptr) o.log = sink->callback();
  return o;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (!pred() && Clock::now() < end) std::this_thread::sleep_for(5ms);
  return pred();
}

void run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

std::byte blob_byte(int rank, std::size_t i, unsigned salt) {
  return static_cast<std::byte>((rank * 131 + i * 7 + salt * 13 + (i >> 8)) & 0xff);
}

Bytes blob(int rank, std::size_t n, unsigned salt) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = blob_byte(rank, i, salt);
  return out;
}

std::string verify(const std::vector<Bytes>& all, int size,
                   const std::function<std::size_t(int)>& size_of, unsigned salt) {
  if (all.size() != static_cast<std::size_t>(size)) {
    return "got " + std::to_string(all.size()) + " blobs, expected " + std::to_string(size);
  }
  for (int q = 0; q < size; ++q) {
    const Bytes& b = all[static_cast<std::size_t>(q)];
    if (b.size() != size_of(q)) {
      return "blob of rank " + std::to_string(q) + " has " + std::to_string(b.size()) +
             " bytes, expected " + std::to_string(size_of(q));
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (b[i] != blob_byte(q, i, salt)) {
        return "blob of rank " + std::to_string(q) + " differs at byte " + std::to_string(i);
      }
    }
  }
  return "";
}

std::string describe(const std::vector<Outcome>& outcomes) {
  std::ostringstream out;
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    out << "rank " << r << ": code " << outcomes[r].code << " '" << outcomes[r].message
        << "' after " << outcomes[r].seconds << " s\n";
  }
  return out.str();
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Bytes hello_frame(int rank, int size, std::string_view token, std::uint16_t listen_port) {
  frame::Address listen;
  if (listen_port != 0) {
    listen.port = listen_port;
    listen.family = 4;
    listen.bytes = {127, 0, 0, 1};
  }
  const auto hello = frame::encode_hello({rank, size, frame::job_tag(token), listen});
  return frame::encode_frame(frame::Type::kHello, hello);
}

bool authenticate(const RawSocket& s, std::string_view token) {
  const auth::Nonce mine = auth::random_nonce();
  frame::AuthInit init;
  std::copy(mine.begin(), mine.end(), init.rank_nonce.begin());
  s.send_all(frame::encode_frame(frame::Type::kAuthInit, frame::encode_auth_init(init)));
  const Bytes reply = s.receive(frame::kHeaderSize + frame::kAuthChallengeSize, 5s);
  const frame::Decoded d = frame::decode_frame(reply);
  if (d.state != frame::DecodeState::kFrame) return false;
  const auto challenge = frame::decode_auth_challenge(d.payload);
  if (!challenge) return false;
  auth::Nonce root{};
  std::copy(challenge->root_nonce.begin(), challenge->root_nonce.end(), root.begin());
  const bool verified =
      auth::same_mac(challenge->proof, auth::coordinator_proof(token, mine, root));
  frame::AuthProof proof;
  const auth::Mac mac = auth::rank_proof(token, mine, root);
  std::copy(mac.begin(), mac.end(), proof.proof.begin());
  s.send_all(frame::encode_frame(frame::Type::kAuthProof, frame::encode_auth_proof(proof)));
  return verified;
}

void authenticate_as_root(const RawSocket& s, std::string_view token) {
  const Bytes got = s.receive(frame::kHeaderSize + frame::kAuthInitSize, 5s);
  const frame::Decoded d = frame::decode_frame(got);
  if (d.state != frame::DecodeState::kFrame) return;
  const auto init = frame::decode_auth_init(d.payload);
  if (!init) return;
  auth::Nonce rank_nonce{};
  std::copy(init->rank_nonce.begin(), init->rank_nonce.end(), rank_nonce.begin());
  const auth::Nonce root = auth::random_nonce();
  frame::AuthChallenge c;
  std::copy(root.begin(), root.end(), c.root_nonce.begin());
  const auth::Mac mac = auth::coordinator_proof(token, rank_nonce, root);
  std::copy(mac.begin(), mac.end(), c.proof.begin());
  s.send_all(frame::encode_frame(frame::Type::kAuthChallenge, frame::encode_auth_challenge(c)));
  s.receive(frame::kHeaderSize + frame::kAuthProofSize, 5s);
}

}  // namespace chorus::core::bootstrap_test
