// wait(): it really sleeps until its timeout, and interrupt() wakes it.
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

  constexpr int kTimeoutMs = 300;
  const auto t0 = Clock::now();
  const auto cpu0 = cpu_time();
  int calls = 0, rc = CHORUS_OK;
  // Spurious wake-ups are allowed: keep waiting for what is left.
  while (rc != CHORUS_ERR_TIMEOUT && ms_since(t0) < 5 * kTimeoutMs) {
    const int left = std::max(0, kTimeoutMs - static_cast<int>(ms_since(t0)));
    rc = tp().wait(p.a.get(), left);
    ++calls;
    REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT));
  }
  const double elapsed = ms_since(t0);
  const double cpu_ms = std::chrono::duration<double, std::milli>(cpu_time() - cpu0).count();
  INFO(calls << " wait calls, " << elapsed << " ms elapsed, " << cpu_ms << " ms CPU");
  CHECK(rc == CHORUS_ERR_TIMEOUT);
  CHECK(elapsed >= kTimeoutMs * 0.9);
  CHECK(elapsed < kTimeoutMs + 1000);
  CHECK(calls <= 10);
  CHECK(cpu_ms < kTimeoutMs * 0.2);  // it slept; it did not spin

  // A zero timeout is a non-blocking check.
  const auto t1 = Clock::now();
  const int rc0 = tp().wait(p.a.get(), 0);
  CHECK((rc0 == CHORUS_OK || rc0 == CHORUS_ERR_TIMEOUT));
  CHECK(ms_since(t1) < 50);
}

TEST_CASE("interrupt wakes a wait from another thread", "[wait]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  if (!Plugin::get().has_interrupt()) {
    WARN("interrupt is optional and this transport does not provide it, case not run");
    return;
  }
  Pair p;
  std::atomic<bool> sent{false};
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sent = true;
    tp().interrupt(p.a.get());
  });
  const auto t0 = Clock::now();
  int rc = CHORUS_OK;
  int calls = 0;
  do {
    rc = tp().wait(p.a.get(), 10000);
    ++calls;
  } while (!sent && ms_since(t0) < 10000);
  const double elapsed = ms_since(t0);
  waker.join();
  INFO(calls << " wait calls, woke after " << elapsed << " ms -> " << status_name(rc));
  CHECK(rc == CHORUS_OK);
  CHECK(elapsed >= 150);
  CHECK(elapsed < 2000);
  CHECK(calls <= 10);
}
