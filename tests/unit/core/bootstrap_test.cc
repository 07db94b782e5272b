// Unit tests of the bootstrap side channel (core/bootstrap.h), ranks as
// threads over 127.0.0.1: option and address checks, and the collectives
// (all_gather, filtered all_gather, barrier, broadcast) with every byte
// checked. Joining is in bootstrap_join_test.cc, failures during
// collectives in bootstrap_failure_test.cc, helpers in bootstrap_test_util.h.
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
// Options and addresses
// ---------------------------------------------------------------------------

TEST_CASE("parse_host_port accepts IPv4, bracketed IPv6 and names", "[bootstrap]") {
  auto ok = [](std::string_view text, std::string host, std::uint16_t port) {
    auto r = parse_host_port(text);
    INFO(text);
    REQUIRE(r.is_ok());
    CHECK(r->host == host);
    CHECK(r->port == port);
  };
  ok("127.0.0.1:29500", "127.0.0.1", 29500);
  ok("[::1]:1", "::1", 1);
  ok("[fe80::1%eth0]:65535", "fe80::1%eth0", 65535);
  ok("node-01.cluster:80", "node-01.cluster", 80);
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":29500", "host:0", "host:65536",
                          "host:12x", "::1:29500", "[::1]29500", "[::1", "[]:5"}) {
    INFO(bad);
    const auto r = parse_host_port(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  }
  CHECK_THAT(parse_host_port("::1:29500").status().message(), Catch::Contains("brackets"));
}

TEST_CASE("bad options are refused before any socket is opened", "[bootstrap]") {
  BootstrapOptions o;
  o.size = 0;
  o.rank = 0;
  CHECK(Bootstrap::connect(o, Deadline::after(1s)).status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  o.size = 4;
  o.rank = 4;
  o.coordinator = "127.0.0.1:29500";
  auto r = Bootstrap::connect(o, Deadline::after(1s));
  CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.status().message(), Catch::Contains("rank 4 is outside 0..3"));
  o.rank = 1;
  o.coordinator = "no-port-here";
  r = Bootstrap::connect(o, Deadline::after(1s));
  CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.status().message(), Catch::Contains("no-port-here"));
}

// ---------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------

TEST_CASE("size 1 works without a coordinator or sockets", "[bootstrap]") {
  BootstrapOptions o;
  o.rank = 0;
  o.size = 1;
  auto b = Bootstrap::connect(o, Deadline::after(1s));
  REQUIRE(b.is_ok());
  CHECK((*b)->rank() == 0);
  CHECK((*b)->size() == 1);
  const Bytes mine = blob(0, 100, 1);
  std::vector<Bytes> all;
  REQUIRE((*b)->all_gather(mine, all, Deadline::after(1s)).is_ok());
  CHECK(verify(
            all, 1, [](int) { return std::size_t{100}; }, 1) == "");
  REQUIRE((*b)->barrier(Deadline::after(1s)).is_ok());
  Bytes data = mine;
  REQUIRE((*b)->broadcast(data, 0, Deadline::after(1s)).is_ok());
  CHECK(data == mine);
}

TEST_CASE("all_gather delivers every blob byte for byte", "[bootstrap]") {
  const int n = GENERATE(2, 4, 8);
  INFO(n << " ranks");
  // Sizes per (rank + round): empty, tiny, odd, bigger than a socket buffer.
  auto size_of = [](int i) -> std::size_t {
    static constexpr std::size_t kSizes[] = {0, 1, 1000, 65536 + 3, 7, 0, 300000, 12};
    return kSizes[static_cast<std::size_t>(i) % 8];
  };
  const auto port = free_port();
  std::vector<Outcome> out(static_cast<std::size_t>(n));
  run_ranks(n, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, n, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    if ((*b)->rank() != r || (*b)->size() != n) return me.fail("wrong rank() or size()");
    for (unsigned round = 0; round < 3; ++round) {
      auto sizes = [&](int q) { return size_of(q + static_cast<int>(round)); };
      std::vector<Bytes> all;
      const Status s = (*b)->all_gather(blob(r, sizes(r), round), all, Deadline::after(10s));
      if (!s.is_ok()) return me.set(s);
      if (auto bad = verify(all, n, sizes, round); !bad.empty()) return me.fail(bad);
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("all_gather of maximum-size blobs", "[bootstrap]") {
  const auto port = free_port();
  std::vector<Outcome> out(2);
  run_ranks(2, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, 2, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    std::vector<Bytes> all;
    const Status s = (*b)->all_gather(blob(r, Bootstrap::kMaxBlob, 9), all, Deadline::after(20s));
    if (!s.is_ok()) return me.set(s);
    if (auto bad = verify(
            all, 2, [](int) { return Bootstrap::kMaxBlob; }, 9);
        !bad.empty()) {
      me.fail(bad);
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("all_gather of blobs larger than a frame, more than 1 MiB in all", "[bootstrap]") {
  // Rank 1's blob takes three pieces; the table is about 4.3 MiB in all and
  // goes around the ring of ranks 1-4 (rank 0 only sends its own).
  constexpr int kRanks = 5;
  const auto size_of = [](int q) -> std::size_t {
    return q == 1 ? 2 * Bootstrap::kMaxBlob + 5 : 500000 + static_cast<std::size_t>(q);
  };
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  std::vector<std::uint64_t> sent(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port, "job-1"), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    const std::uint64_t before = (*b)->bytes_sent();
    std::vector<Bytes> all;
    const Status s = (*b)->all_gather(blob(r, size_of(r), 4), all, Deadline::after(30s));
    sent[static_cast<std::size_t>(r)] = (*b)->bytes_sent() - before;
    if (!s.is_ok()) return me.set(s);
    if (auto bad = verify(all, kRanks, size_of, 4); !bad.empty()) return me.fail(bad);
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
  // Rank 0 sent its own blob and a step check's worth of headers, no more.
  CHECK(sent[0] >= size_of(0));
  CHECK(sent[0] < size_of(0) + 4096);
}

TEST_CASE("a filtered all_gather cuts each blob once, and passes the whole ones on",
          "[bootstrap]") {
  // Every rank keeps the last 16 bytes of each blob. A rank on the ring
  // cuts a blob it also passes on, so the ranks after it get the right
  // tail only if the whole blob went on; rank 1's blob takes three pieces.
  constexpr int kRanks = 5;
  constexpr std::size_t kTail = 16;
  const auto size_of = [](int q) -> std::size_t {
    return q == 1 ? 2 * Bootstrap::kMaxBlob + 5 : 40000 + static_cast<std::size_t>(q);
  };
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    std::vector<int> calls(kRanks, 0);
    const Bootstrap::BlobFilter keep_tail = [&](int q, Bytes& blob) {
      ++calls[static_cast<std::size_t>(q)];
      if (blob.size() != size_of(q)) {  // called before the blob was complete
        blob.clear();
        return;
      }
      blob.erase(blob.begin(), blob.end() - static_cast<std::ptrdiff_t>(kTail));
    };
    std::vector<Bytes> all;
    Status s = (*b)->all_gather(blob(r, size_of(r), 6), all, Deadline::after(30s), keep_tail);
    if (!s.is_ok()) return me.set(s);
    for (int q = 0; q < kRanks; ++q) {
      const Bytes whole = blob(q, size_of(q), 6);
      if (calls[static_cast<std::size_t>(q)] != 1) {
        return me.fail("the filter ran " + std::to_string(calls[static_cast<std::size_t>(q)]) +
                       " times for rank " + std::to_string(q) + "'s blob");
      }
      if (all[static_cast<std::size_t>(q)] !=
          Bytes(whole.end() - static_cast<std::ptrdiff_t>(kTail), whole.end()))
        return me.fail("rank " + std::to_string(q) + "'s blob was not cut to its tail");
    }
    // The filter was for that call only.
    s = (*b)->all_gather(blob(r, size_of(r), 7), all, Deadline::after(30s));
    if (!s.is_ok()) return me.set(s);
    if (auto bad = verify(all, kRanks, size_of, 7); !bad.empty()) return me.fail(bad);
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("ring arithmetic: every rank gets every blob once", "[bootstrap]") {
  for (int size = 2; size <= 9; ++size) {
    INFO(size << " ranks");
    for (int origin = 0; origin < size; ++origin) {
      // Follow the blob from where it enters the ring.
      std::vector<int> got(static_cast<std::size_t>(size), 0);
      got[static_cast<std::size_t>(origin)] = 1;
      int at = ring::entry(origin);
      if (origin == 0) ++got[1];
      while (ring::forwards(at, size, origin)) {
        at = ring::next(at, size);
        ++got[static_cast<std::size_t>(at)];
      }
      if (origin != 0) ++got[0];  // rank size-1 feeds rank 0
      for (int r = 0; r < size; ++r) CHECK(got[static_cast<std::size_t>(r)] == 1);
    }
    for (int r = 1; r < size; ++r) {
      int from_prev = 0;
      for (int origin = 0; origin < size; ++origin) {
        if (origin != r && origin != 0 && ring::linked(r, size)) ++from_prev;
        if (origin == 0 && r != 1 && ring::linked(r, size)) ++from_prev;
      }
      CHECK(ring::from_prev(r, size) == from_prev);
      CHECK(ring::next(ring::prev(r, size), size) == r);
    }
  }
}

TEST_CASE("barrier holds every rank until all have arrived", "[bootstrap]") {
  constexpr int kRanks = 4;
  constexpr int kRounds = 10;
  const auto port = free_port();
  std::array<std::atomic<int>, kRounds> arrived{};
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    for (int k = 0; k < kRounds; ++k) {
      // Stagger arrivals so that a barrier that lets anyone through early shows.
      std::this_thread::sleep_for(std::chrono::milliseconds((r * 7 + k * 3) % 11));
      ++arrived[static_cast<std::size_t>(k)];
      // Odd rounds wait without a deadline (the blocking run_one path).
      const Status s = (*b)->barrier(k % 2 != 0 ? Deadline::never() : Deadline::after(10s));
      if (!s.is_ok()) return me.set(s);
      if (arrived[static_cast<std::size_t>(k)] != kRanks) {
        return me.fail("left barrier " + std::to_string(k) + " before every rank arrived");
      }
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("broadcast from rank 0 and from another rank", "[bootstrap]") {
  constexpr int kRanks = 4;
  const int root = GENERATE(0, 2);
  INFO("root " << root);
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{200000}}) {
      // Non-roots start with junk of another size: it must be replaced.
      Bytes data = r == root ? blob(root, n, 4) : blob(r, 17, 99);
      const Status s = (*b)->broadcast(data, root, Deadline::after(10s));
      if (!s.is_ok()) return me.set(s);
      if (data != blob(root, n, 4)) return me.fail("wrong broadcast data for " + std::to_string(n));
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("100 all_gathers in a row", "[bootstrap]") {
  constexpr int kRanks = 4;
  const auto port = free_port();
  std::vector<Outcome> out(kRanks);
  run_ranks(kRanks, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    auto b = Bootstrap::connect(options(r, kRanks, port), Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    for (unsigned i = 0; i < 100; ++i) {
      auto sizes = [i](int q) { return static_cast<std::size_t>((q * 37 + i * 11) % 97); };
      std::vector<Bytes> all;
      const Status s = (*b)->all_gather(blob(r, sizes(r), i), all, Deadline::after(10s));
      if (!s.is_ok()) return me.set(s);
      if (auto bad = verify(all, kRanks, sizes, i); !bad.empty()) return me.fail(bad);
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

TEST_CASE("IPv6 and host-name coordinators", "[bootstrap]") {
  const auto port = free_port();
  const std::string coordinator = GENERATE(as<std::string>{}, "[::1]:", "localhost:");
  // Catch2 v2 has no SKIP: say so when this machine has no IPv6 loopback.
  if (coordinator.starts_with("[::1]")) {
    const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_loopback;
    const bool have_v6 =
        fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (fd >= 0) ::close(fd);
    if (!have_v6) {
      // Under CI (CHORUS_TEST_REQUIRE=1) a missing capability fails the run.
      if (std::getenv("CHORUS_TEST_REQUIRE") != nullptr)
        FAIL(
            "no IPv6 loopback on this machine (::1 cannot be bound); enable it with "
            "`sysctl net.ipv6.conf.lo.disable_ipv6=0`");
      WARN("not run: no IPv6 loopback on this machine");
      return;
    }
  }
  INFO(coordinator);
  std::vector<Outcome> out(2);
  run_ranks(2, [&](int r) {
    Outcome& me = out[static_cast<std::size_t>(r)];
    BootstrapOptions o = options(r, 2, port);
    o.coordinator = coordinator + std::to_string(port);
    auto b = Bootstrap::connect(o, Deadline::after(10s));
    if (!b.is_ok()) return me.set(b.status());
    std::vector<Bytes> all;
    const Status s = (*b)->all_gather(blob(r, 10, 1), all, Deadline::after(10s));
    if (!s.is_ok()) return me.set(s);
    if (auto bad = verify(
            all, 2, [](int) { return std::size_t{10}; }, 1);
        !bad.empty()) {
      me.fail(bad);
    }
  });
  INFO(describe(out));
  for (const auto& o : out) CHECK(o.code == CHORUS_OK);
}

}  // namespace
}  // namespace chorus::core
