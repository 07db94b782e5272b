// wait(): it really sleeps until its timeout, and interrupt() wakes it.
//
// Verdicts are orders and CPU time, not wall-clock windows: a timeout may
// fire late on a loaded machine but never early, an interrupt shows as an OK
// return long before the wait's own timeout, and a sleeping wait uses a small
// fraction of the CPU time a spinning one would.
#include "support.h"

#include <atomic>
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
