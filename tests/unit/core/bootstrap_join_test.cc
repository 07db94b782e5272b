// Unit tests of joining the bootstrap side channel: retries before rank 0
// listens, timeouts naming the missing ranks, a coordinator port in use,
// stray and impostor connections, a rank claimed twice, and late arrivals.
// Ranks are threads over 127.0.0.1 (bootstrap_test_util.h).
#include "bootstrap_test_util.h"

#include "core/auth.h"
#include "core/bootstrap_ring.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace chorus::core {
namespace {

using namespace bootstrap_test;

// ---------------------------------------------------------------------------
// Joining
// ---------------------------------------------------------------------------

TEST_CASE("ranks started before rank 0 keep retrying", "[bootstrap]") {
  constexpr int kRanks = 4;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    if (r == 0) std::this_thread::sleep_for(400ms);
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    me.set((*b)->barrier(Deadline::after(10s)));
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("rank 0 timing out names the ranks that never joined", "[bootstrap]") {
  constexpr int kRanks = 5;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    if (r == 2 || r == 4) return;  // never started
    Outcome& me = out[static_cast<std::size_t>(r)];
    const auto start = Clock::now();
    // Rank 0's deadline leaves ranks 1 and 3 time to join even on a loaded
    // machine (their first attempt may come before rank 0 listens, and
    // their retries back off); theirs is far beyond it.
    auto b =
        Bootstrap::connect(options(r, kRanks, port), Deadline::after(r == 0 ? 3000ms : 20000ms));
    me.seconds = since(start);
    me.set(b.status());
  });
  INFO(describe(out));
  CHECK(out[0].code == CHORUS_ERR_TIMEOUT);
  CHECK_THAT(out[0].message, Catch::StartsWith("rank 0: timed out after"));
  CHECK_THAT(out[0].message, Catch::Contains("waiting for ranks 2, 4 to join"));
  CHECK_THAT(out[0].message, Catch::Contains(local(port)));
  CHECK(out[0].seconds >= 2.95);  // not before its deadline
  CHECK(out[0].seconds < 15);     // nor a hang
  // The ranks that did join hear about it from rank 0 instead of waiting out
  // their own 20 s: PEER_LOST naming the missing ranks, where their own
  // deadline would have given TIMEOUT.
  for (const int r : {1, 3}) {
    CHECK(out[static_cast<std::size_t>(r)].code == CHORUS_ERR_PEER_LOST);
    CHECK_THAT(out[static_cast<std::size_t>(r)].message, Catch::Contains("ranks 2, 4"));
  }
}

TEST_CASE("a rank that cannot reach the coordinator times out with advice", "[bootstrap]") {
  const auto port = free_port();
  const auto start = Clock::now();
  auto b = Bootstrap::connect(options(3, 4, port), Deadline::after(300ms));
  const double seconds = since(start);
  REQUIRE_FALSE(b.is_ok());
  CHECK(b.status().code() == CHORUS_ERR_TIMEOUT);
  const std::string& m = b.status().message();
  CHECK_THAT(
      m, Catch::StartsWith("rank 3: could not reach coordinator " + local(port) + " within 0."));
  CHECK_THAT(m, Catch::Contains("(last error: Connection refused)"));
  CHECK_THAT(m, Catch::Contains("is rank 0 running"));
  CHECK(seconds >= 0.25);  // not before its deadline
  CHECK(seconds < 3);      // nor a hang
}

TEST_CASE("rank 0 reports a coordinator port that is in use", "[bootstrap]") {
  const auto port = free_port();
  RawSocket holder(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  REQUIRE(::bind(holder.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(holder.fd(), 1) == 0);
  auto b = Bootstrap::connect(options(0, 2, port), Deadline::after(1s));
  REQUIRE_FALSE(b.is_ok());
  CHECK(b.status().code() == CHORUS_ERR_SYSTEM);
  CHECK_THAT(b.status().message(), Catch::Contains("cannot listen on " + local(port)));
  CHECK_THAT(b.status().message(), Catch::Contains("in use"));
  CHECK_THAT(b.status().message(), Catch::Contains("choose another port"));
}

TEST_CASE("stray connections during the join never break the job", "[bootstrap]") {
  constexpr int kRanks = 3;
  const auto port = free_port();
  LogSink log;
  std::vector<Outcome> out(kRanks);
  auto rank_body = [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port, "job-1", r == 0 ? &log : nullptr),
                                Deadline::after(15s));
    if (!b.is_ok()) return me.set(b.status());
    std::vector<Bytes> all;
    const Status s = (*b)->all_gather(blob(r, 50, 2), all, Deadline::after(10s));
    if (!s.is_ok()) return me.set(s);
    if (auto bad = verify(
            all, kRanks, [](int) { return std::size_t{50}; }, 2);
        !bad.empty()) {
      me.fail(bad);
    }
  };
  std::thread root(rank_body, 0);

  // Garbage: an HTTP request.
  RawSocket http = RawSocket::connect_to(port);
  REQUIRE(http.fd() >= 0);
  const std::string get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  http.send_all(std::as_bytes(std::span(get)));
  // A hello header announcing a 4 GiB payload: refused before any allocation.
  RawSocket huge = RawSocket::connect_to(port);
  auto header = frame::encode_header(frame::Type::kHello, 0xfffffff0u);
  huge.send_all(header);
  // A frame type that is not allowed before the hello.
  RawSocket early = RawSocket::connect_to(port);
  early.send_all(frame::encode_frame(frame::Type::kContribute, Bytes(16)));
  // A hello without authenticating first.
  RawSocket unauthenticated = RawSocket::connect_to(port);
  unauthenticated.send_all(hello_frame(1, kRanks, "job-1"));
  // Authenticating with the wrong token: rank 0's proof fails here, and ours there.
  RawSocket forger = RawSocket::connect_to(port);
  CHECK_FALSE(authenticate(forger, "guess"));
  forger.send_all(hello_frame(1, kRanks, "job-1"));
  // Half an auth-init frame, then silence: the handshake deadline is 10 s, so
  // it is still pending when the job joins and refused then.
  RawSocket truncated = RawSocket::connect_to(port);
  const auto init_header = frame::encode_header(frame::Type::kAuthInit, 32);
  truncated.send_all(std::span(init_header).first(7));
  // A well-formed hello with the wrong job size: told why, then dropped.
  RawSocket wrong_size = RawSocket::connect_to(port);
  CHECK(authenticate(wrong_size, "job-1"));
  wrong_size.send_all(hello_frame(1, 5, "job-1"));
  // A hello claiming to be rank 0.
  RawSocket rank_zero = RawSocket::connect_to(port);
  CHECK(authenticate(rank_zero, "job-1"));
  rank_zero.send_all(hello_frame(0, kRanks, "job-1"));
  // Someone who connects and says nothing at all, until the end.
  RawSocket silent = RawSocket::connect_to(port);
  // A real rank of another job (other token) claiming rank 1.
  auto other_job = Bootstrap::connect(options(1, kRanks, port, "job-2"), Deadline::after(5s));
  REQUIRE_FALSE(other_job.is_ok());
  CHECK(other_job.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(other_job.status().message(), Catch::Contains("job token differs"));

  // The impostor with the wrong size got an abort frame with the reason.
  const Bytes reply = wrong_size.receive(4096, 5s);
  const frame::Decoded d = frame::decode_frame(reply);
  REQUIRE(d.state == frame::DecodeState::kFrame);
  CHECK(d.header.type == static_cast<std::uint16_t>(frame::Type::kAbort));
  const auto abort = frame::decode_abort(d.payload);
  REQUIRE(abort);
  CHECK(abort->code == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(abort->text, Catch::Contains("job of 5 ranks"));

  // Rank 0 has dealt with every stray (one warning each) before the real
  // ranks arrive, so the strays really were part of the join.
  CHECK(eventually([&] { return log.warnings >= 8; }));
  std::thread r1(rank_body, 1);
  std::thread r2(rank_body, 2);
  root.join();
  r1.join();
  r2.join();
  INFO(describe(out));
  INFO(log.all());
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
  CHECK(log.contains("bad magic"));
  CHECK(log.contains("exceeds the limit"));
  CHECK(log.contains("unexpected contribute frame"));
  CHECK(log.contains("sent a hello frame before authenticating"));
  CHECK(log.contains("authentication failed"));
  CHECK(log.contains("claims rank 0"));
  CHECK(log.contains("job token differs"));
  CHECK(log.contains("that had not said hello when the job formed"));
  // The callers still in their handshake when the job formed got the late
  // caller's refusal, not a bare close.
  for (RawSocket* s : {&silent, &truncated}) {
    const Bytes late = s->receive(4096, 5s);
    const frame::Decoded f = frame::decode_frame(late);
    REQUIRE(f.state == frame::DecodeState::kFrame);
    CHECK(f.header.type == static_cast<std::uint16_t>(frame::Type::kAbort));
    const auto refusal = frame::decode_abort(f.payload);
    REQUIRE(refusal);
    CHECK_THAT(refusal->text, Catch::Contains("had already formed"));
  }
}

TEST_CASE("a second process with the same rank is refused", "[bootstrap]") {
  constexpr int kRanks = 3;
  const auto port = free_port();
  LogSink log;
  std::vector<Outcome> out(kRanks);
  auto rank_body = [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port, "job-1", r == 0 ? &log : nullptr),
                                Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    me.set((*b)->barrier(Deadline::after(10s)));
  };
  std::thread root(rank_body, 0);
  std::thread first(rank_body, 1);
  REQUIRE(eventually([&] { return log.contains("rank 1 joined"); }));
  auto twin = Bootstrap::connect(options(1, kRanks, port, "job-1"), Deadline::after(5s));
  CHECK(twin.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(twin.status().message(), Catch::Contains("already joined"));
  CHECK_THAT(twin.status().message(), Catch::Contains("Fix:"));
  std::thread last(rank_body, 2);
  root.join();
  first.join();
  last.join();
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("without a token or job identity, a rank claimed twice fails the join everywhere",
          "[bootstrap]") {
  // Rank 0 cannot tell which claimant is its own: any may be another job's.
  constexpr int kRanks = 3;
  const auto port = free_port();
  LogSink log;
  std::vector<Outcome> out(kRanks);
  auto rank_body = [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    // Rank 0's deadline bounds how long it keeps refusing before it fails.
    auto b = Bootstrap::connect(options(r, kRanks, port, "", r == 0 ? &log : nullptr),
                                Deadline::after(r == 0 ? 5s : 30s));
    me.set(b.is_ok() ? Status::ok() : b.status());
  };
  std::thread root(rank_body, 0);
  std::thread first(rank_body, 1);
  REQUIRE(eventually([&] { return log.contains("rank 1 joined"); }));
  auto twin = Bootstrap::connect(options(1, kRanks, port), Deadline::after(30s));
  CHECK(twin.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(twin.status().message(), Catch::Contains("two jobs were started on one"));
  std::thread last(rank_body, 2);
  root.join();
  first.join();
  last.join();
  INFO(describe(out));
  for (const auto& o : out) {
    CHECK(o.code == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK_THAT(o.message, Catch::Contains("this job cannot tell its ranks from another job's"));
  }
}

TEST_CASE("a rank arriving after the job formed is refused at once", "[bootstrap]") {
  constexpr int kRanks = 2;
  const auto port = free_port();
  std::vector<std::unique_ptr<Bootstrap>> joined(kRanks);
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    auto b = Bootstrap::connect(options(r, kRanks, port, "job-1"), Deadline::after(10s));
    if (!b.is_ok()) return out[static_cast<std::size_t>(r)].set(b.status());
    joined[static_cast<std::size_t>(r)] = std::move(*b);
  });
  INFO(describe(out));
  REQUIRE(joined[0]);
  // Its deadline is far away: only rank 0's refusal can end it early.
  const auto start = Clock::now();
  auto late = Bootstrap::connect(options(1, kRanks, port, "job-1"), Deadline::after(60s));
  CHECK(late.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(late.status().message(), Catch::Contains("had already formed"));
  CHECK(Clock::now() - start < 30s);
  // The job formed before is unaffected.
  run_ranks(kRanks, [&](int r) {
    out[static_cast<std::size_t>(r)].set(
        joined[static_cast<std::size_t>(r)]->barrier(Deadline::after(10s)));
  });
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

}  // namespace
}  // namespace chorus::core
