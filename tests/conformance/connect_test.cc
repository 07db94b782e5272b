// Connection setup: both sides in one process, either side late, a peer that
// never comes, a blob that is not an address.
#include "support.h"

#include <cstring>
#include <random>
#include <thread>

using namespace chorus::conformance;

namespace {

/// One message each way over a connected pair, checked byte by byte.
void ping_pong(Context& a, Endpoint& ea, Context& b, Endpoint& eb) {
  Bytes out_a(100), out_b(37), in_a(100), in_b(100);
  fill_pattern(out_a.data(), out_a.size(), 1);
  fill_pattern(out_b.data(), out_b.size(), 2);
  Registration ra_out(a, out_a.data(), out_a.size()), ra_in(a, in_a.data(), in_a.size());
  Registration rb_out(b, out_b.data(), out_b.size()), rb_in(b, in_b.data(), in_b.size());
  a.completions.clear();
  b.completions.clear();
  REQUIRE_OK(tp().post_recv(eb.ep, in_b.data(), in_b.size(), rb_in.mr(), 11));
  REQUIRE_OK(tp().post_recv(ea.ep, in_a.data(), in_a.size(), ra_in.mr(), 12));
  REQUIRE_OK(tp().post_send(ea.ep, out_a.data(), out_a.size(), ra_out.mr(), 13));
  REQUIRE_OK(tp().post_send(eb.ep, out_b.data(), out_b.size(), rb_out.mr(), 14));
  REQUIRE(pump_until(
      {&a, &b}, [&] { return a.completions.size() == 2 && b.completions.size() == 2; }, 10000));
  REQUIRE(a.errors.empty());
  REQUIRE(b.errors.empty());
  for (const auto& c : b.completions) {
    CHECK(c.endpoint == eb.ep);
    if (c.opcode == CHORUS_TP_RECV) {
      CHECK(c.wr_id == 11);
      CHECK(c.byte_len == 100);
      CHECK_FALSE(pattern_mismatch(in_b.data(), 100, 1));
    } else {
      CHECK(c.wr_id == 14);
    }
  }
  for (const auto& c : a.completions) {
    CHECK(c.endpoint == ea.ep);
    if (c.opcode == CHORUS_TP_RECV) {
      CHECK(c.wr_id == 12);
      CHECK(c.byte_len == 37);
      CHECK_FALSE(pattern_mismatch(in_a.data(), 37, 2));
    } else {
      CHECK(c.wr_id == 13);
    }
  }
}

}  // namespace

TEST_CASE("two endpoints in one process connect and exchange data", "[connect]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);

  SECTION("both sides connect at the same time") { connect_pair(ea, eb); }
  SECTION("rank 0 calls connect 300 ms after rank 1") {
    int rc_b = CHORUS_OK;
    std::thread t([&] { rc_b = connect_endpoint(eb, ea.blob, 10000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int rc_a = connect_endpoint(ea, eb.blob, 10000);
    t.join();
    REQUIRE(rc_a == CHORUS_OK);
    REQUIRE(rc_b == CHORUS_OK);
  }
  SECTION("rank 1 calls connect 300 ms after rank 0") {
    int rc_a = CHORUS_OK;
    std::thread t([&] { rc_a = connect_endpoint(ea, eb.blob, 10000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int rc_b = connect_endpoint(eb, ea.blob, 10000);
    t.join();
    REQUIRE(rc_a == CHORUS_OK);
    REQUIRE(rc_b == CHORUS_OK);
  }
  ping_pong(a, ea, b, eb);
  REQUIRE_OK(tp().endpoint_close(ea.ep));
  REQUIRE_OK(tp().endpoint_close(eb.ep));
  REQUIRE_OK(a.close());
  REQUIRE_OK(b.close());
}

TEST_CASE("several channels to the same peer are independent connections", "[connect]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p(3);
  for (std::size_t c = 0; c < 3; ++c) ping_pong(p.a, p.ea[c], p.b, p.eb[c]);
}

TEST_CASE("connect to a peer that is gone fails within its timeout", "[connect]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  const int gone_rank = GENERATE(0, 1);
  INFO("the rank that went away: " << gone_rank);
  Context a(0, 2), b(1, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  Context& gone = gone_rank == 0 ? a : b;
  Endpoint& survivor = gone_rank == 0 ? eb : ea;
  const Bytes gone_blob = gone_rank == 0 ? ea.blob : eb.blob;
  REQUIRE_OK(tp().endpoint_close(gone_rank == 0 ? ea.ep : eb.ep));
  REQUIRE_OK(gone.close());

  constexpr int kTimeoutMs = 500;
  const auto t0 = Clock::now();
  const int rc = connect_endpoint(survivor, gone_blob, kTimeoutMs);
  const double elapsed = ms_since(t0);
  INFO("endpoint_connect -> " << status_name(rc) << " after " << elapsed
                              << " ms: " << last_error());
  CHECK((rc == CHORUS_ERR_TIMEOUT || rc == CHORUS_ERR_PEER_LOST));
  // A timeout never fires early; late is allowed, a hang is not.
  if (rc == CHORUS_ERR_TIMEOUT) CHECK(elapsed >= kTimeoutMs * 0.8);
  CHECK(elapsed < 10 * kTimeoutMs);
}

TEST_CASE("connect with a blob that is not an address fails cleanly", "[connect]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  Bytes junk(eb.blob.size());
  std::mt19937 rng(42);
  for (auto& x : junk) x = static_cast<unsigned char>(rng());
  constexpr int kTimeoutMs = 1000;
  const auto t0 = Clock::now();
  const int rc = connect_endpoint(ea, junk, kTimeoutMs);
  INFO("endpoint_connect(junk) -> " << status_name(rc) << ": " << last_error());
  CHECK(rc != CHORUS_OK);
  CHECK(ms_since(t0) < 10 * kTimeoutMs);  // fails, at the latest at its timeout: no hang
  // A blob meant for another endpoint (the wrong channel) must not connect either.
  Endpoint eb1 = open_endpoint(b, 0, 1);
  const int rc2 = connect_endpoint(ea, eb1.blob, 500);
  INFO("endpoint_connect(blob of channel 1 for a channel-0 endpoint) -> " << status_name(rc2));
  CHECK(rc2 != CHORUS_OK);
}

// Tagged [process]: it forks a peer, and a transport such as ofi over verbs
// refuses a child forked after its parent opened a context, so it runs
// where the other multi-process cases run (their own process in the guest).
TEST_CASE("a process-local transport refuses a blob from another process",
          "[connect][local][process]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  if (!transport_is_process_local()) {
    WARN("transport '" << Plugin::get().transport()
                       << "' reaches other processes (no CHORUS_TP_CAP_PROCESS_LOCAL), "
                          "case not run: the [process] cases cover it");
    return;
  }
  // The peer process opens rank 1's endpoint and hands over its blob; rank 0
  // here must refuse it (the blob names an endpoint it cannot reach), within
  // the timeout and without touching the peer's memory.
  ChildProcess child([](Control& ctl) {
    Context ctx(1, 2);
    Endpoint ep = open_endpoint(ctx, 0, 0);
    ctl.send("blob", ep.blob);
    ctl.expect("exit");
  });
  Context a(0, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  const Bytes theirs = child.control().expect("blob");
  constexpr int kTimeoutMs = 1000;
  const auto t0 = Clock::now();
  const int rc = connect_endpoint(ea, theirs, kTimeoutMs);
  INFO("endpoint_connect(blob of another process) -> " << status_name(rc) << ": " << last_error());
  CHECK(rc != CHORUS_OK);
  CHECK(ms_since(t0) < 10 * kTimeoutMs);
  child.control().send("exit");
  REQUIRE(child.join() == 0);
}
