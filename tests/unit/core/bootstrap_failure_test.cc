// Unit tests of failures during bootstrap collectives: a rank or the
// coordinator leaving or stalling mid-frame, collectives called out of step,
// and bad arguments; every rank must fail promptly with a clear error.
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
// Failures during collectives
// ---------------------------------------------------------------------------

TEST_CASE("a rank leaving mid-job makes the others fail promptly", "[bootstrap]") {
  constexpr int kRanks = 4;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  Status again;
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    if (Status s = (*b)->barrier(Deadline::after(10s)); !s.is_ok()) return me.set(s);
    if (r == 2) return;  // leaves: the Bootstrap closes its socket
    const auto start = Clock::now();
    std::vector<Bytes> all;
    me.set((*b)->all_gather(blob(r, 10, 0), all, Deadline::after(10s)));
    me.seconds = since(start);
    if (r == 1) again = (*b)->barrier(Deadline::after(10s));
  });
  INFO(describe(out));
  CHECK(out[2].code == CHORUS_OK);
  for (const int r : {0, 1, 3}) {
    const Outcome& o = out[static_cast<std::size_t>(r)];
    CHECK(o.code == CHORUS_ERR_PEER_LOST);
    CHECK_THAT(o.message, Catch::Contains("lost rank 2 on the side channel"));
    CHECK(o.seconds < 3);
  }
  CHECK_THAT(out[0].message, Catch::StartsWith("rank 0: lost rank 2 on the side channel ("));
  // Failure is final: the next call fails at once with the same code.
  CHECK(again.code() == CHORUS_ERR_PEER_LOST);
  CHECK_THAT(again.message(), Catch::Contains("unusable after an earlier error"));
}

TEST_CASE("losing rank 0 fails the other ranks naming the coordinator", "[bootstrap]") {
  constexpr int kRanks = 3;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    if (Status s = (*b)->barrier(Deadline::after(10s)); !s.is_ok()) return me.set(s);
    if (r == 0) return;
    const auto start = Clock::now();
    me.set((*b)->barrier(Deadline::after(10s)));
    me.seconds = since(start);
  });
  INFO(describe(out));
  for (const int r : {1, 2}) {
    const Outcome& o = out[static_cast<std::size_t>(r)];
    CHECK(o.code == CHORUS_ERR_PEER_LOST);
    CHECK_THAT(o.message, Catch::Contains("lost the coordinator (rank 0 at " + local(port) + ")"));
    CHECK(o.seconds < 3);
  }
}

TEST_CASE("a peer stalling mid-frame cannot hang the job", "[bootstrap]") {
  constexpr int kRanks = 3;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  RawSocket impostor;
  RawSocket link;
  std::atomic<bool> welcomed{false};
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    if (r == 2) {
      // Joins properly (rank 1 links to it as its ring neighbour), then sends
      // half a contribution and stalls.
      const std::uint16_t link_port = free_port();
      RawSocket listener(::socket(AF_INET, SOCK_STREAM, 0));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(link_port);
      if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
          ::listen(listener.fd(), 4) != 0) {
        return me.fail("cannot listen for rank 1's link");
      }
      impostor = RawSocket::connect_to(port);
      if (!authenticate(impostor, "")) return me.fail("rank 0's proof did not verify");
      impostor.send_all(hello_frame(2, kRanks, "", link_port));
      const Bytes welcome = impostor.receive(frame::kHeaderSize + frame::kWelcomeSize, 5s);
      if (frame::decode_frame(welcome).state != frame::DecodeState::kFrame) {
        return me.fail("no welcome");
      }
      pollfd p{listener.fd(), POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) return me.fail("rank 1 did not link");
      link = RawSocket(::accept(listener.fd(), nullptr, nullptr));
      authenticate_as_root(link, "");
      link.receive(frame::kHeaderSize + frame::kHelloSize, 5s);
      link.send_all(frame::encode_frame(frame::Type::kWelcome,
                                        frame::encode_welcome({kRanks, frame::job_tag(""), {}})));
      welcomed = true;
      const auto head = frame::encode_header(frame::Type::kContribute, frame::kOpHeaderSize + 100);
      impostor.send_all(head);
      impostor.send_all(Bytes(20));
      return;
    }
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    const auto start = Clock::now();
    std::vector<Bytes> all;
    me.set((*b)->all_gather(blob(r, 10, 0), all, Deadline::after(r == 0 ? 1000ms : 30000ms)));
    me.seconds = since(start);
  });
  INFO(describe(out));
  CHECK(welcomed);
  CHECK(out[0].code == CHORUS_ERR_TIMEOUT);
  CHECK_THAT(out[0].message, Catch::Contains("all_gather #1 timed out after"));
  CHECK_THAT(out[0].message, Catch::Contains("waiting for rank 2"));
  CHECK(out[0].seconds >= 0.9);  // not before its deadline
  CHECK(out[0].seconds < 10);    // nor a hang
  // Rank 1 is told by rank 0 instead of waiting out its own 30 s: PEER_LOST,
  // where its own deadline would have given TIMEOUT.
  CHECK(out[1].code == CHORUS_ERR_PEER_LOST);
  CHECK_THAT(out[1].message, Catch::Contains("waiting for rank 2"));
}

TEST_CASE("a coordinator stalling mid-frame cannot hang a rank", "[bootstrap]") {
  // A fake rank 0 that welcomes rank 1, then sends half a result and stalls.
  RawSocket listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener.fd(), 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::uint16_t port = ntohs(addr.sin_port);

  std::thread fake([&] {
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return;
    RawSocket peer(::accept(listener.fd(), nullptr, nullptr));
    authenticate_as_root(peer, "");
    peer.receive(frame::kHeaderSize + frame::kHelloSize, 5s);
    peer.send_all(frame::encode_frame(frame::Type::kWelcome,
                                      frame::encode_welcome({2, frame::job_tag(""), {}})));
    peer.receive(frame::kHeaderSize + frame::kOpHeaderSize, 5s);
    peer.send_all(frame::encode_header(frame::Type::kDeliver, frame::kOpHeaderSize));
    peer.receive(1, 5s);  // until rank 1 gives up and aborts
  });
  auto b = Bootstrap::connect(options(1, 2, port), Deadline::after(5s));
  REQUIRE(b.is_ok());
  const auto start = Clock::now();
  const Status s = (*b)->barrier(Deadline::after(500ms));
  const double seconds = since(start);
  b = Status(CHORUS_ERR_INTERNAL, "closed");  // closes the socket, releasing the fake
  fake.join();
  CHECK(s.code() == CHORUS_ERR_TIMEOUT);
  CHECK_THAT(s.message(), Catch::StartsWith("rank 1: barrier #1 timed out after"));
  CHECK_THAT(s.message(), Catch::Contains("waiting for rank 0"));
  CHECK(seconds >= 0.45);  // not before its deadline
  CHECK(seconds < 5);      // nor a hang
}

TEST_CASE("collectives called out of step fail on every rank", "[bootstrap]") {
  constexpr int kRanks = 3;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    std::vector<Bytes> all;
    const auto start = Clock::now();
    me.set(r == 1 ? (*b)->barrier(Deadline::after(10s))
                  : (*b)->all_gather(blob(r, 3, 0), all, Deadline::after(10s)));
    me.seconds = since(start);
  });
  INFO(describe(out));
  for (const auto& o : out) {
    CHECK(o.code == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK_THAT(o.message, Catch::Contains("called out of step: call #1 is all_gather on rank 0 "
                                          "but call #1 on rank 1 is barrier"));
    CHECK(o.seconds < 3);
  }
}

TEST_CASE("bad arguments fail the call and the side channel", "[bootstrap]") {
  SECTION("blob too large, size 1") {
    BootstrapOptions o;
    o.rank = 0;
    o.size = 1;
    auto b = Bootstrap::connect(o, Deadline::after(1s));
    REQUIRE(b.is_ok());
    std::vector<Bytes> all;
    Bytes data(Bootstrap::kMaxBlob + 1);
    const Status s = (*b)->broadcast(data, 0, Deadline::after(1s));
    CHECK(s.code() == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK_THAT(s.message(), Catch::Contains("exceeds the side channel's limit"));
    CHECK(all.empty());
    CHECK((*b)->barrier(Deadline::after(1s)).code() == CHORUS_ERR_INVALID_ARGUMENT);
  }
  SECTION("broadcast root out of range, told to the other rank") {
    const auto port = free_port();
    std::vector<Outcome> out(2);
    run_ranks(2, [&](int r) {
      Outcome& me = out[static_cast<std::size_t>(r)];
      auto b = Bootstrap::connect(options(r, 2, port), Deadline::after(10s));
      if (!b.is_ok()) return me.set(b.status());
      Bytes data(4);
      const auto start = Clock::now();
      me.set(r == 1 ? (*b)->broadcast(data, 7, Deadline::after(10s))
                    : (*b)->broadcast(data, 0, Deadline::after(10s)));
      me.seconds = since(start);
    });
    INFO(describe(out));
    for (const auto& o : out) {
      CHECK(o.code == CHORUS_ERR_INVALID_ARGUMENT);
      CHECK_THAT(o.message, Catch::Contains("broadcast: root 7 is outside 0..1"));
      CHECK(o.seconds < 3);
    }
  }
}

}  // namespace
}  // namespace chorus::core
