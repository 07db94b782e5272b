// Cases specific to the built-in TCP transport (they know its address blob
// and config keys). They run only when the plugin under test is "tcp".
#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

using namespace chorus::conformance;

namespace {

#define TCP_ONLY()                                                                    \
  do {                                                                                \
    if (Plugin::get().transport() != "tcp") {                                         \
      WARN("TCP-specific case, not run for transport " << Plugin::get().transport()); \
      return;                                                                         \
    }                                                                                 \
  } while (0)

/// Port of a TCP blob (docs/transport-abi.md: u16 little-endian at offset 20).
std::uint16_t blob_port(const Bytes& blob) {
  return static_cast<std::uint16_t>(blob.at(20) | (blob.at(21) << 8));
}

/// Connects a plain TCP socket to the listener a TCP blob names (family at
/// offset 22, address at 24, port at 20).
int dial(const Bytes& blob) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (blob.at(22) == 4) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(blob_port(blob));
    std::memcpy(&sa->sin_addr, blob.data() + 24, 4);
    len = sizeof *sa;
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(blob_port(blob));
    std::memcpy(&sa->sin6_addr, blob.data() + 24, 16);
    len = sizeof *sa;
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    throw std::runtime_error("cannot dial the listener");
  }
  return fd;
}

/// Reads up to n bytes within timeout; returns how many arrived before EOF.
std::size_t read_some(int fd, unsigned char* buf, std::size_t n, int timeout_ms) {
  std::size_t got = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (got < n && Clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    const ssize_t r = ::read(fd, buf + got, n - got);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

/// A version-3 Hello (transports/tcp/tcp_wire.h) as rank 1 would send it.
std::array<unsigned char, 72> make_hello(std::uint64_t target_nonce, std::uint64_t sender_nonce) {
  std::array<unsigned char, 72> hello{};
  const std::uint32_t magic = 0x48524843;  // "CHRH"
  const std::uint16_t version = 3, sockets = 1, index = 0;
  const std::int32_t rank = 1, peer_rank = 0, channel = 0;
  std::memcpy(hello.data() + 0, &magic, 4);
  std::memcpy(hello.data() + 4, &version, 2);
  std::memcpy(hello.data() + 6, &sockets, 2);
  std::memcpy(hello.data() + 8, &rank, 4);
  std::memcpy(hello.data() + 12, &peer_rank, 4);
  std::memcpy(hello.data() + 16, &channel, 4);
  std::memcpy(hello.data() + 20, &index, 2);
  std::memcpy(hello.data() + 24, &target_nonce, 8);
  std::memcpy(hello.data() + 32, &sender_nonce, 8);
  for (int i = 0; i < 32; ++i) hello[40 + i] = static_cast<unsigned char>(i * 7 + 1);
  return hello;
}

/// HMAC-SHA256(key, label | hello | nonce), the TCP handshake's proof.
std::array<unsigned char, 32> proof(std::string_view key, std::string_view label,
                                    const std::array<unsigned char, 72>& hello,
                                    const unsigned char* nonce) {
  std::vector<unsigned char> msg(label.begin(), label.end());
  msg.insert(msg.end(), hello.begin(), hello.end());
  msg.insert(msg.end(), nonce, nonce + 32);
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), out.data(),
       &len);
  return out;
}

/// Sends `hello`, checks the acceptor's proof, answers with a proof made with
/// `key`. Returns the bytes that came back after the proof (the Ack, or
/// nothing when the acceptor hung up).
std::size_t handshake(int fd, const std::array<unsigned char, 72>& hello, std::string_view key,
                      unsigned char* ack) {
  if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) {
    throw std::runtime_error("hello write failed");
  }
  unsigned char challenge[72];
  if (read_some(fd, challenge, sizeof challenge, 2000) != sizeof challenge) {
    throw std::runtime_error("no challenge from the acceptor");
  }
  const auto expected = proof(kConformanceJobKey, "chorus-tcp-v2 acceptor", hello, challenge + 8);
  if (std::memcmp(expected.data(), challenge + 40, 32) != 0) {
    throw std::runtime_error("the acceptor's proof does not verify with the suite's job key");
  }
  unsigned char answer[40] = {};
  const std::uint32_t magic = 0x50524843;  // "CHRP"
  std::memcpy(answer, &magic, 4);
  const auto mine = proof(key, "chorus-tcp-v2 connector", hello, challenge + 8);
  std::memcpy(answer + 8, mine.data(), 32);
  if (::write(fd, answer, sizeof answer) != static_cast<ssize_t>(sizeof answer)) {
    throw std::runtime_error("proof write failed");
  }
  return read_some(fd, ack, 8, 2000);
}

bool logged(const std::string& needle) {
  for (const auto& line : Plugin::get().logs()) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

int open_with(const Kvs& kvs, std::string& error) {
  std::vector<chorus_kv_t> kv;
  for (const auto& [k, v] : kvs) kv.push_back({k.c_str(), v.c_str(), "test.toml:3"});
  chorus_tp_context_info_t info{};
  info.struct_size = sizeof info;
  info.rank = 0;
  info.size = 2;
  info.bind_address = Plugin::get().bind_address();
  info.config = kv.data();
  info.config_count = kv.size();
  chorus_tp_context_t* ctx = nullptr;
  const int rc = tp().context_open(&info, &ctx);
  error = rc == CHORUS_OK ? "" : last_error();
  if (rc == CHORUS_OK) tp().context_close(ctx);
  return rc;
}

}  // namespace

TEST_CASE("tcp: stray and forged connections are dropped without disturbing the job", "[tcp]") {
  TCP_ONLY();
  Plugin::get().clear_logs();
  Context a(0, 2), b(1, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);

  // 1. Garbage instead of a handshake.
  const int junk = dial(ea.blob);
  const char garbage[40] = "GET / HTTP/1.0\r\n\r\n";
  REQUIRE(::write(junk, garbage, sizeof garbage) == static_cast<ssize_t>(sizeof garbage));
  unsigned char buf[64];
  CHECK(read_some(junk, buf, sizeof buf, 2000) == 0);  // closed without an answer
  ::close(junk);

  // 2. An authenticated handshake naming an endpoint that does not exist
  //    (wrong nonce): refused with an Ack that says so.
  const int forged = dial(ea.blob);
  unsigned char ack[8];
  REQUIRE(handshake(forged, make_hello(0x1234, 0x5678), kConformanceJobKey, ack) == sizeof ack);
  std::uint32_t ack_status;
  std::memcpy(&ack_status, ack + 4, 4);
  CHECK(ack_status == 1);  // AckStatus::kUnknownEndpoint
  ::close(forged);

  // 2b. The right endpoint, but a proof made with another job's key: no Ack.
  std::uint64_t target = 0, sender = 0;
  std::memcpy(&target, ea.blob.data() + 40, 8);
  std::memcpy(&sender, eb.blob.data() + 40, 8);
  const int stranger = dial(ea.blob);
  CHECK(handshake(stranger, make_hello(target, sender), "another-job", ack) == 0);
  ::close(stranger);

  // 3. A connection that never says anything, left open while the job runs.
  const int silent = dial(ea.blob);

  // The real pair still connects and works.
  connect_pair(ea, eb);
  Bytes out(1000), in(1000);
  fill_pattern(out.data(), out.size(), 9);
  REQUIRE_OK(tp().post_recv(eb.ep, in.data(), in.size(), nullptr, 1));
  REQUIRE_OK(tp().post_send(ea.ep, out.data(), out.size(), nullptr, 2));
  REQUIRE(pump_until(
      {&a, &b}, [&] { return b.completions.size() == 1 && a.completions.size() == 1; }, 10000));
  REQUIRE_FALSE(pattern_mismatch(in.data(), in.size(), 9));
  ::close(silent);

  CHECK(logged("dropped connection"));
  CHECK(logged("refused connection"));
  CHECK(logged("authentication failed"));
}

TEST_CASE("tcp: configuration values are validated", "[tcp][config]") {
  TCP_ONLY();
  std::string error;
  for (const Kvs& good : std::vector<Kvs>{{{"sockets", "4"}},
                                          {{"sndbuf", "1MiB"}, {"rcvbuf", "262144"}},
                                          {{"sndbuf", "0"}, {"rcvbuf", "0"}},
                                          {{"nodelay", "false"}},
                                          {{"spin_us", "25"}}}) {
    INFO(good[0].first << " = " << good[0].second << ": " << error);
    CHECK(open_with(good, error) == CHORUS_OK);
  }
  const std::vector<std::pair<Kvs, std::string>> bad = {
      {{{"sockets", "0"}}, "sockets"},   {{{"sockets", "17"}}, "sockets"},
      {{{"sockets", "two"}}, "sockets"}, {{{"sndbuf", "4T"}}, "sndbuf"},
      {{{"rcvbuf", "-1"}}, "rcvbuf"},    {{{"nodelay", "maybe"}}, "nodelay"},
      {{{"spin_us", "1e3"}}, "spin_us"}, {{{"socket", "1"}}, "valid keys"}};
  for (const auto& [kvs, needle] : bad) {
    const int rc = open_with(kvs, error);
    INFO(kvs[0].first << " = " << kvs[0].second << " -> " << status_name(rc) << ": " << error);
    CHECK(rc == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK(error.find(needle) != std::string::npos);
    CHECK(error.find("test.toml:3") != std::string::npos);
  }
}

TEST_CASE("tcp: messages striped over several sockets keep order and content", "[tcp][sockets]") {
  TCP_ONLY();
  const std::string sockets = GENERATE(as<std::string>{}, "2", "4");
  Pair p(1, {{"sockets", sockets}});
  const std::vector<std::size_t> sizes = {
      1,    600 * 1024,    3, 64u << 20, 0, 512 * 1024, 512 * 1024 - 1, (5u << 20) + 7,
      4097, (8u << 20) + 1};
  std::vector<std::unique_ptr<unsigned char[]>> out, in;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(new unsigned char[std::max<std::size_t>(sizes[i], 1)]);
    in.emplace_back(new unsigned char[std::max<std::size_t>(sizes[i], 1)]);
    fill_pattern(out.back().get(), sizes[i], static_cast<std::uint32_t>(i + 40));
  }
  // All sends first (most wait behind flow control), then all receives.
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE_OK(tp().post_send(p.ea[0].ep, out[i].get(), sizes[i], nullptr, i));
  }
  pump_until(
      {&p.a, &p.b}, [] { return false; }, 20);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE_OK(tp().post_recv(p.eb[0].ep, in[i].get(), sizes[i], nullptr, i));
  }
  REQUIRE(pump_until(
      {&p.a, &p.b},
      [&] {
        return p.b.completions.size() == sizes.size() && p.a.completions.size() == sizes.size();
      },
      30000));
  REQUIRE(p.a.errors.empty());
  REQUIRE(p.b.errors.empty());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes over " << sockets << " sockets");
    CHECK(p.a.completions[i].wr_id == i);
    REQUIRE(p.b.completions[i].wr_id == i);
    REQUIRE(p.b.completions[i].byte_len == sizes[i]);
    REQUIRE_FALSE(pattern_mismatch(in[i].get(), sizes[i], static_cast<std::uint32_t>(i + 40)));
  }
}

TEST_CASE("tcp: ranks with different socket counts refuse to connect", "[tcp][sockets]") {
  TCP_ONLY();
  Context a(0, 2, {{"sockets", "2"}}), b(1, 2, {{"sockets", "1"}});
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  const int rc = connect_endpoint(eb, ea.blob, 1000);
  const std::string error = last_error();
  INFO(error);
  CHECK(rc == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(error.find("sockets") != std::string::npos);
}

namespace {

/// Dials rank 0's listener as rank 1 would, with a valid Hello for `ea`
/// (target) and `eb` (sender), and returns the socket once it is accepted.
int impersonate_rank1(const Endpoint& ea, const Endpoint& eb) {
  const int fd = dial(ea.blob);
  std::uint64_t target = 0, sender = 0;
  std::memcpy(&target, ea.blob.data() + 40, 8);  // rank 0's endpoint nonce
  std::memcpy(&sender, eb.blob.data() + 40, 8);  // "our" blob's nonce
  unsigned char ack[8];
  if (handshake(fd, make_hello(target, sender), kConformanceJobKey, ack) != sizeof ack ||
      ack[4] != 0) {
    throw std::runtime_error("forged hello was not accepted");
  }
  return fd;
}

void frame(unsigned char* out, std::uint32_t magic, std::uint8_t kind, std::uint8_t stripes,
           std::uint32_t seq, std::uint64_t length) {
  std::memset(out, 0, 24);
  std::memcpy(out + 0, &magic, 4);
  out[4] = kind;
  out[5] = stripes;
  std::memcpy(out + 8, &seq, 4);
  std::memcpy(out + 16, &length, 8);
}

}  // namespace

TEST_CASE("tcp: a corrupt data stream fails that endpoint only", "[tcp][wire]") {
  TCP_ONLY();
  const std::string variant =
      GENERATE(as<std::string>{}, "bad magic", "length above 2^40", "wrong sequence",
               "too many stripes", "stripe header first", "truncated then closed");
  INFO("variant: " << variant);
  // The forged handshake speaks for one socket; pin that over any env config.
  Context a(0, 2, {{"sockets", "1"}}), b(1, 2, {{"sockets", "1"}});
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);  // only its blob is used: we play rank 1 by hand
  const int fd = impersonate_rank1(ea, eb);
  REQUIRE_OK(connect_endpoint(ea, eb.blob, 5000));

  // Both receives wait before any byte arrives, so the failure must show up
  // as an error completion of the second one.
  Bytes in1(8), in2(2000);
  REQUIRE_OK(tp().post_recv(ea.ep, in1.data(), in1.size(), nullptr, 1));
  REQUIRE_OK(tp().post_recv(ea.ep, in2.data(), in2.size(), nullptr, 2));

  // One good message first: the stream is fine until the corruption.
  unsigned char good[24 + 8];
  frame(good, 0x46524843, 1, 1, 0, 8);
  std::memcpy(good + 24, "12345678", 8);
  REQUIRE(::write(fd, good, sizeof good) == static_cast<ssize_t>(sizeof good));
  unsigned char bad[24];
  if (variant == "bad magic") frame(bad, 0xdeadbeef, 1, 1, 1, 8);
  if (variant == "length above 2^40") frame(bad, 0x46524843, 1, 1, 1, (std::uint64_t{1} << 40) + 1);
  if (variant == "wrong sequence") frame(bad, 0x46524843, 1, 1, 7, 8);
  if (variant == "too many stripes") frame(bad, 0x46524843, 1, 2, 1, 1u << 20);
  if (variant == "stripe header first") frame(bad, 0x46524843, 2, 1, 1, 8);
  if (variant == "truncated then closed") frame(bad, 0x46524843, 1, 1, 1, 1000);
  REQUIRE(::write(fd, bad, sizeof bad) == static_cast<ssize_t>(sizeof bad));
  if (variant == "truncated then closed") {
    REQUIRE(::write(fd, "partial", 7) == 7);
    ::shutdown(fd, SHUT_WR);
  }

  REQUIRE(pump_until(
      {&a}, [&] { return a.completions.size() + a.errors.size() == 2; }, 10000));
  REQUIRE(a.completions.size() == 1);  // the good message arrived intact
  CHECK(a.completions[0].wr_id == 1);
  CHECK(std::memcmp(in1.data(), "12345678", 8) == 0);
  REQUIRE(a.errors.size() == 1);
  INFO("error: " << a.errors[0].message);
  CHECK(a.errors[0].wr_id == 2);
  CHECK(a.errors[0].status == CHORUS_ERR_PEER_LOST);
  CHECK(a.errors[0].peer_rank == 1);
  const std::string message = a.errors[0].message;
  if (variant == "truncated then closed") {
    CHECK(message.find("middle of a message") != std::string::npos);
  } else {
    CHECK(message.find("protocol error") != std::string::npos);
  }
  // The context itself is fine: its other work is unaffected.
  unsigned char byte = 0;
  CHECK(tp().post_recv(ea.ep, &byte, 1, nullptr, 3) == CHORUS_ERR_PEER_LOST);
  CHECK(tp().wait(a.get(), 0) != CHORUS_ERR_INTERNAL);
  ::close(fd);
}

namespace {

/// A call-me Hello (tcp_wire.h, flag kHelloCallMe = 2): rank 0 asks rank 1
/// to dial the pair whose endpoint on rank 1 has `target_nonce`; the socket
/// count is the one rank 1's blob `theirs` states (offset 6).
std::array<unsigned char, 72> make_call_me(std::uint64_t target_nonce, std::uint64_t sender_nonce,
                                           const Bytes& theirs) {
  std::array<unsigned char, 72> hello = make_hello(target_nonce, sender_nonce);
  std::memcpy(hello.data() + 6, theirs.data() + 6, 2);
  const std::int32_t rank = 0, peer_rank = 1;
  const std::uint16_t flags = 2;
  std::memcpy(hello.data() + 8, &rank, 4);
  std::memcpy(hello.data() + 12, &peer_rank, 4);
  std::memcpy(hello.data() + 22, &flags, 2);
  return hello;
}

std::size_t connect_requests(const Context& c) {
  return static_cast<std::size_t>(
      std::count_if(c.completions.begin(), c.completions.end(),
                    [](const auto& x) { return x.opcode == CHORUS_TP_OP_CONNECT_REQUEST; }));
}

}  // namespace

TEST_CASE("tcp: a call-me must prove the job key like any Hello", "[tcp][connect_poll]") {
  TCP_ONLY();
  Context a(0, 2), b(1, 2);
  REQUIRE((b.caps().flags & CHORUS_TP_CAP_CONNECT_POLL) != 0);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  std::uint64_t target = 0, sender = 0;
  std::memcpy(&target, eb.blob.data() + 40, 8);
  std::memcpy(&sender, ea.blob.data() + 40, 8);
  unsigned char ack[8];

  // Another job's key: no Ack, no request.
  const int stranger = dial(eb.blob);
  CHECK(handshake(stranger, make_call_me(target, sender, eb.blob), "another-job", ack) == 0);
  ::close(stranger);
  // The right key but another endpoint's nonce: refused, no request.
  const int wrong = dial(eb.blob);
  REQUIRE(handshake(wrong, make_call_me(target ^ 1, sender, eb.blob), kConformanceJobKey, ack) ==
          8);
  std::uint32_t status = 0;
  std::memcpy(&status, ack + 4, 4);
  CHECK(status == 1);  // kUnknownEndpoint
  ::close(wrong);
  const auto t0 = Clock::now();
  while (ms_since(t0) < 300) {
    b.pump();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(connect_requests(b) == 0);

  // A genuine one: accepted, and rank 1 is asked to connect that endpoint.
  const int genuine = dial(eb.blob);
  REQUIRE(handshake(genuine, make_call_me(target, sender, eb.blob), kConformanceJobKey, ack) == 8);
  std::memcpy(&status, ack + 4, 4);
  CHECK(status == 0);
  ::close(genuine);
  REQUIRE(pump_until(
      {&b}, [&] { return connect_requests(b) == 1; }, 5000));
  CHECK(b.completions.back().endpoint == eb.ep);
}

TEST_CASE("tcp: an endpoint holds no descriptor until it is connected", "[tcp][connect_poll]") {
  TCP_ONLY();
  Context a(0, 64);
  const std::size_t before = open_fds();
  std::vector<Endpoint> eps;
  for (int p = 1; p < 64; ++p) eps.push_back(open_endpoint(a, p, 0));
  CHECK(open_fds() == before);
  for (auto& e : eps) REQUIRE_OK(tp().endpoint_close(e.ep));
  CHECK(open_fds() == before);
}
