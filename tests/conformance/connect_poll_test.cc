// Polled connects (CHORUS_TP_CAP_CONNECT_POLL): endpoint_connect with
// timeout 0 never blocks; either side may call it first, and the other side
// learns of it through a CHORUS_TP_OP_CONNECT_REQUEST completion. A
// transport without the cap skips these cases (with a warning), as for
// every optional cap, unless the run says it must have the cap
// (CHORUS_CONFORMANCE_EXPECT_CONNECT_POLL=1): then its absence fails.
#include "support.h"

#include <cstdlib>
#include <cstring>
#include <thread>

using namespace chorus::conformance;

namespace {

bool has_cap(const Context& c) { return (c.caps().flags & CHORUS_TP_CAP_CONNECT_POLL) != 0; }

bool cap_expected() {
  const char* v = std::getenv("CHORUS_CONFORMANCE_EXPECT_CONNECT_POLL");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

#define CONFORMANCE_NEEDS_CONNECT_POLL(ctx)                                              \
  do {                                                                                   \
    if (!has_cap(ctx)) {                                                                 \
      if (cap_expected())                                                                \
        FAIL(                                                                            \
            "the transport does not declare CHORUS_TP_CAP_CONNECT_POLL, which this run " \
            "expects (CHORUS_CONFORMANCE_EXPECT_CONNECT_POLL=1)");                       \
      WARN("not run: the transport does not declare CHORUS_TP_CAP_CONNECT_POLL");        \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/// Connect requests seen so far on `ep` (and checks their fields).
std::size_t requests(const Context& c, chorus_tp_endpoint_t* ep) {
  std::size_t n = 0;
  for (const auto& x : c.completions) {
    if (x.opcode != CHORUS_TP_OP_CONNECT_REQUEST) continue;
    if (x.endpoint != ep) continue;
    CHECK(x.wr_id == 0);
    CHECK(x.byte_len == 0);
    ++n;
  }
  return n;
}

/// A polled connect that has been started: polls it once.
int poll_connect(Endpoint& ep, const Bytes& peer_blob) {
  const int rc = connect_endpoint(ep, peer_blob, 0);
  INFO("polled connect of rank " << ep.ctx->rank() << " -> " << status_name(rc) << " ("
                                 << (rc != CHORUS_OK ? last_error() : "") << ")");
  REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_AGAIN));
  return rc;
}

/// Polls both contexts and both connects until both endpoints are usable.
void finish_both(Endpoint& ea, Endpoint& eb, int timeout_ms = 15000) {
  const auto t0 = Clock::now();
  bool a_ok = false, b_ok = false;
  while (!(a_ok && b_ok)) {
    REQUIRE(ms_since(t0) < timeout_ms);
    ea.ctx->pump();
    eb.ctx->pump();
    if (!a_ok) a_ok = poll_connect(ea, eb.blob) == CHORUS_OK;
    if (!b_ok) b_ok = poll_connect(eb, ea.blob) == CHORUS_OK;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Once connected it stays so.
  REQUIRE_OK(connect_endpoint(ea, eb.blob, 0));
  REQUIRE_OK(connect_endpoint(eb, ea.blob, 0));
}

/// One message each way, checked byte by byte.
void exchange(Endpoint& ea, Endpoint& eb) {
  Context& a = *ea.ctx;
  Context& b = *eb.ctx;
  Bytes out_a(3000), out_b(41), in_a(3000), in_b(3000);
  fill_pattern(out_a.data(), out_a.size(), 7);
  fill_pattern(out_b.data(), out_b.size(), 8);
  Registration ra_out(a, out_a.data(), out_a.size()), ra_in(a, in_a.data(), in_a.size());
  Registration rb_out(b, out_b.data(), out_b.size()), rb_in(b, in_b.data(), in_b.size());
  a.completions.clear();
  b.completions.clear();
  REQUIRE_OK(tp().post_recv(eb.ep, in_b.data(), in_b.size(), rb_in.mr(), 21));
  REQUIRE_OK(tp().post_recv(ea.ep, in_a.data(), in_a.size(), ra_in.mr(), 22));
  REQUIRE_OK(tp().post_send(ea.ep, out_a.data(), out_a.size(), ra_out.mr(), 23));
  REQUIRE_OK(tp().post_send(eb.ep, out_b.data(), out_b.size(), rb_out.mr(), 24));
  REQUIRE(pump_until(
      {&a, &b}, [&] { return a.completions.size() == 2 && b.completions.size() == 2; }, 10000));
  REQUIRE(a.errors.empty());
  REQUIRE(b.errors.empty());
  for (const auto& c : b.completions)
    if (c.opcode == CHORUS_TP_RECV) CHECK(c.byte_len == 3000);
  for (const auto& c : a.completions)
    if (c.opcode == CHORUS_TP_RECV) CHECK(c.byte_len == 41);
  CHECK_FALSE(pattern_mismatch(in_b.data(), 3000, 7));
  CHECK_FALSE(pattern_mismatch(in_a.data(), 41, 8));
}

/// Sleeps in wait() on `c` (as a core does while idle) until a connect
/// request for `ep` comes out of poll; returns how long that took.
double await_request(Context& c, chorus_tp_endpoint_t* ep, int timeout_ms = 10000) {
  const auto t0 = Clock::now();
  while (requests(c, ep) == 0) {
    REQUIRE(ms_since(t0) < timeout_ms);
    const int rc = tp().wait(c.get(), timeout_ms);
    REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT));
    while (c.pump() > 0) {
    }
  }
  return ms_since(t0);
}

}  // namespace

TEST_CASE("polled connect: the higher rank starts, the lower one gets a connect request",
          "[connect][connect_poll]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  CONFORMANCE_NEEDS_CONNECT_POLL(a);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  // Rank 1 starts; rank 0 has not called connect and sleeps in wait().
  poll_connect(eb, ea.blob);
  std::thread driver([&] {
    // Rank 1 keeps polling its connect (and its context) meanwhile.
    const auto t0 = Clock::now();
    while (ms_since(t0) < 3000 && connect_endpoint(eb, ea.blob, 0) == CHORUS_ERR_AGAIN) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const double ms = await_request(a, ea.ep);
  driver.join();
  INFO("the connect request took " << ms << " ms");
  CHECK(ms < 5000);
  CHECK(requests(a, ea.ep) == 1);
  finish_both(ea, eb);
  CHECK(requests(a, ea.ep) == 1);  // once per endpoint
  CHECK(requests(b, eb.ep) == 0);  // rank 1 started it
  exchange(ea, eb);
}

TEST_CASE("polled connect: the lower rank starts, the higher one gets a connect request",
          "[connect][connect_poll]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  CONFORMANCE_NEEDS_CONNECT_POLL(a);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  poll_connect(ea, eb.blob);
  const double ms = await_request(b, eb.ep);
  INFO("the connect request took " << ms << " ms");
  CHECK(ms < 5000);
  finish_both(ea, eb);
  CHECK(requests(b, eb.ep) == 1);
  CHECK(requests(a, ea.ep) == 0);
  exchange(ea, eb);
}

TEST_CASE("polled connect: both sides start at once and end with one connection",
          "[connect][connect_poll]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  CONFORMANCE_NEEDS_CONNECT_POLL(a);
  // Several pairs, so that some calls cross in flight.
  constexpr int kChannels = 4;
  std::vector<Endpoint> ea, eb;
  for (int c = 0; c < kChannels; ++c) {
    ea.push_back(open_endpoint(a, 1, c));
    eb.push_back(open_endpoint(b, 0, c));
  }
  for (int c = 0; c < kChannels; ++c) {
    if (c % 2 == 0) {
      poll_connect(ea[size_t(c)], eb[size_t(c)].blob);
      poll_connect(eb[size_t(c)], ea[size_t(c)].blob);
    } else {
      poll_connect(eb[size_t(c)], ea[size_t(c)].blob);
      poll_connect(ea[size_t(c)], eb[size_t(c)].blob);
    }
  }
  for (int c = 0; c < kChannels; ++c) finish_both(ea[size_t(c)], eb[size_t(c)]);
  for (int c = 0; c < kChannels; ++c) {
    // Both had called connect before any poll: nobody was asked.
    CHECK(requests(a, ea[size_t(c)].ep) == 0);
    CHECK(requests(b, eb[size_t(c)].ep) == 0);
  }
  for (int c = 0; c < kChannels; ++c) exchange(ea[size_t(c)], eb[size_t(c)]);
}

TEST_CASE("blocking connects raise no connect request", "[connect][connect_poll]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  CONFORMANCE_NEEDS_CONNECT_POLL(a);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  // Rank 1 dials blocking while rank 0 has not called connect yet.
  int rc_b = CHORUS_OK;
  std::thread t([&] { rc_b = connect_endpoint(eb, ea.blob, 10000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < 20; ++i) a.pump();
  REQUIRE_OK(connect_endpoint(ea, eb.blob, 10000));
  t.join();
  REQUIRE(rc_b == CHORUS_OK);
  for (int i = 0; i < 20; ++i) {
    a.pump();
    b.pump();
  }
  CHECK(requests(a, ea.ep) == 0);
  CHECK(requests(b, eb.ep) == 0);
  exchange(ea, eb);
}

TEST_CASE("closing an endpoint in the middle of a polled connect is clean",
          "[connect][connect_poll]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context a(0, 2), b(1, 2);
  CONFORMANCE_NEEDS_CONNECT_POLL(a);
  SECTION("the side that started closes") {
    for (int c = 0; c < 8; ++c) {
      Endpoint ea = open_endpoint(a, 1, c);
      Endpoint eb = open_endpoint(b, 0, c);
      Endpoint& starter = c % 2 == 0 ? ea : eb;
      const Bytes& theirs = c % 2 == 0 ? eb.blob : ea.blob;
      poll_connect(starter, theirs);
      if (c >= 4) std::this_thread::sleep_for(std::chrono::milliseconds(5 * (c - 3)));
      REQUIRE_OK(tp().endpoint_close(starter.ep));
      // The other side may still be asked; its endpoint goes too.
      for (int i = 0; i < 10; ++i) {
        a.pump();
        b.pump();
      }
      REQUIRE_OK(tp().endpoint_close((c % 2 == 0 ? eb : ea).ep));
    }
    // Nothing comes out afterwards for endpoints that are gone.
    a.completions.clear();
    b.completions.clear();
    const auto t0 = Clock::now();
    while (ms_since(t0) < 300) {
      a.pump();
      b.pump();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(a.completions.empty());
    CHECK(b.completions.empty());
    CHECK(a.errors.empty());
    CHECK(b.errors.empty());
  }
  SECTION("the peer's context goes away while one side polls") {
    Endpoint eb = open_endpoint(b, 0, 0);
    Bytes theirs;
    {
      Context gone(0, 2);
      Endpoint eg = open_endpoint(gone, 1, 0);
      theirs = eg.blob;
      REQUIRE_OK(gone.close());
    }
    // A polled connect towards it must end in an error, not AGAIN forever.
    const auto t0 = Clock::now();
    int rc = CHORUS_ERR_AGAIN;
    while (rc == CHORUS_ERR_AGAIN && ms_since(t0) < 20000) {
      rc = connect_endpoint(eb, theirs, 0);
      b.pump();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    INFO("polled connect to a closed context -> " << status_name(rc) << " (" << last_error()
                                                  << ")");
    CHECK(rc != CHORUS_OK);
    CHECK(rc != CHORUS_ERR_AGAIN);
  }
}
