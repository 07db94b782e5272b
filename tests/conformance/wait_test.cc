// wait(): it really sleeps until its timeout, and interrupt() wakes it; the
// optional wait object (wait_fd) wakes a poll() the same way.
//
// Verdicts are orders and CPU time, not wall-clock windows: a timeout may
// fire late on a loaded machine but never early, an interrupt shows as an OK
// return long before the wait's own timeout, and a sleeping wait uses a small
// fraction of the CPU time a spinning one would.
#include "support.h"

#include <poll.h>

#include <atomic>
#include <cstddef>
#include <thread>

using namespace chorus::conformance;

TEST_CASE("wait times out after actually sleeping", "[wait]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;  // connected and idle
  Bytes in(16);
  REQUIRE_OK(
      tp().post_recv(p.ea[0].ep, in.data(), in.size(), nullptr, 1));  // something to wait for

  constexpr int kTimeoutMs = 500;
  const auto t0 = Clock::now();
  const auto cpu0 = cpu_time();
  int calls = 0, rc = CHORUS_OK;
  // Spurious wake-ups are allowed: keep waiting for what is left. The guard
  // only ends a wait that keeps returning OK; it is 10x the timeout.
  while (rc != CHORUS_ERR_TIMEOUT && ms_since(t0) < 10 * kTimeoutMs) {
    const int left = std::max(0, kTimeoutMs - static_cast<int>(ms_since(t0)));
    rc = tp().wait(p.a.get(), left);
    ++calls;
    REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT));
  }
  const double elapsed = ms_since(t0);
  const double cpu_ms = std::chrono::duration<double, std::milli>(cpu_time() - cpu0).count();
  INFO(calls << " wait calls, " << elapsed << " ms elapsed, " << cpu_ms << " ms CPU");
  CHECK(rc == CHORUS_ERR_TIMEOUT);
  // Not before the timeout (the slack covers the whole-millisecond
  // arithmetic of the retries above); late is allowed.
  CHECK(elapsed >= kTimeoutMs * 0.9);
  CHECK(calls <= 10);
  // It slept and did not spin: a spinning wait burns about the whole timeout
  // on one core; a sleeping one a few milliseconds at most, even under a
  // sanitizer.
  CHECK(cpu_ms < kTimeoutMs * 0.5);

  // A zero timeout is a non-blocking check: nothing will ever complete the
  // posted receive, so a wait that blocked would not come back at all (the
  // bound is only there to fail instead of hanging).
  const auto t1 = Clock::now();
  const int rc0 = tp().wait(p.a.get(), 0);
  CHECK((rc0 == CHORUS_OK || rc0 == CHORUS_ERR_TIMEOUT));
  CHECK(ms_since(t1) < 10 * kTimeoutMs);
}

TEST_CASE("interrupt wakes a wait from another thread", "[wait]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  if (!Plugin::get().has_interrupt()) {
    WARN("interrupt is optional and this transport does not provide it, case not run");
    return;
  }
  Pair p;
  // Long enough that a wait ended by its own timeout (TIMEOUT) cannot be
  // mistaken for one ended by the interrupt (OK), however loaded the host.
  constexpr int kWaitMs = 30000;
  std::atomic<bool> sent{false};
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sent = true;
    tp().interrupt(p.a.get());
  });
  const auto t0 = Clock::now();
  int rc = CHORUS_OK;
  int calls = 0;
  bool after_interrupt = false;
  do {
    rc = tp().wait(p.a.get(), kWaitMs);
    after_interrupt = sent;  // the wait that ends the loop returned after it
    ++calls;
  } while (!after_interrupt && rc == CHORUS_OK && calls < 100);
  const double elapsed = ms_since(t0);
  waker.join();
  INFO(calls << " wait calls, woke after " << elapsed << " ms -> " << status_name(rc));
  CHECK(after_interrupt);
  CHECK(rc == CHORUS_OK);  // woken, not timed out
  CHECK(calls <= 10);      // spurious wake-ups are allowed, spinning is not
}

namespace {

// The wait object (transport.h, minor 4). Transports that must expose one:
// losing it would silently put auto back on its helper thread.
bool must_have_wait_fd(const std::string& transport) { return transport == "tcp"; }

int wait_fd_of(chorus_tp_context_t* ctx, int& fd) {
  const auto& t = tp();
  if (t.struct_size < offsetof(chorus_transport_plugin_v1_t, wait_fd) + sizeof(t.wait_fd) ||
      t.wait_fd == nullptr)
    return CHORUS_ERR_NOT_SUPPORTED;
  return t.wait_fd(ctx, &fd);
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  REQUIRE(n >= 0);
  return n == 1 && (p.revents & POLLIN) != 0;
}

// Polls until poll() returns 0, as the contract asks before sleeping on the fd.
void drain(Context& c) {
  for (int i = 0; i < 1000 && c.pump() > 0; ++i) {
  }
}

// After a drain the fd goes quiet: readiness may be spurious now and then,
// never for good. Three drains in a row, each followed by 200 ms of quiet.
bool quiet_after_drain(Context& c, int fd) {
  for (int round = 0; round < 3; ++round) {
    drain(c);
    if (!readable(fd, 200)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("wait_fd: readable on arrival and after interrupt, quiet when drained", "[wait]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;
  int fd = -1;
  const int rc = wait_fd_of(p.a.get(), fd);
  if (rc == CHORUS_ERR_NOT_SUPPORTED) {
    INFO("transport '" << Plugin::get().transport() << "' has no wait object");
    REQUIRE_FALSE(must_have_wait_fd(Plugin::get().transport()));
    WARN("wait_fd is optional and this transport has none, case not run");
    return;
  }
  REQUIRE_OK(rc);
  REQUIRE(fd >= 0);
  int again = -1;
  REQUIRE_OK(wait_fd_of(p.a.get(), again));
  CHECK(again == fd);  // one fd for the context's life

  CHECK(quiet_after_drain(p.a, fd));

  // A message from the peer makes it readable, and poll() then yields it.
  Bytes in(64), out(64);
  fill_pattern(out.data(), out.size(), 7);
  REQUIRE_OK(tp().post_recv(p.ea[0].ep, in.data(), in.size(), nullptr, 11));
  CHECK(quiet_after_drain(p.a, fd));  // a posted receive alone is not an event
  REQUIRE_OK(tp().post_send(p.eb[0].ep, out.data(), out.size(), nullptr, 12));
  // Only rank 1's side is driven here: rank 0 learns of the message through
  // its fd alone.
  REQUIRE(pump_until(
      {&p.b}, [&] { return p.b.count(p.eb[0].ep, CHORUS_TP_SEND) == 1; }, 10000));
  CHECK(readable(fd, 10000));
  const auto t0 = Clock::now();
  while (p.a.count(p.ea[0].ep, CHORUS_TP_RECV) == 0 && ms_since(t0) < 10000) {
    if (p.a.pump() == 0 && !readable(fd, 1000)) break;  // nothing left to wake for
  }
  REQUIRE(p.a.count(p.ea[0].ep, CHORUS_TP_RECV) == 1);
  CHECK_FALSE(pattern_mismatch(in.data(), in.size(), 7).has_value());
  CHECK(quiet_after_drain(p.a, fd));

  // interrupt() from another thread makes it readable.
  if (Plugin::get().has_interrupt()) {
    std::thread waker([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      tp().interrupt(p.a.get());
    });
    const bool woke = readable(fd, 10000);
    waker.join();
    CHECK(woke);
    CHECK(quiet_after_drain(p.a, fd));
  }
}
