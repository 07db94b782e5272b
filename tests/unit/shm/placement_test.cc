// CpuSpreader (transports/shm/shm_placement.h): moves the calling thread off
// a CPU and leaves its affinity mask as it found it.
#include <catch2/catch.hpp>

#include "shm_placement.h"

#include <sched.h>

#include <thread>

using chorus::shm::CpuSpreader;

namespace {

/// The calling thread's affinity mask (empty if it cannot be read, which the
/// comparisons below then report).
cpu_set_t affinity() {
  cpu_set_t m;
  CPU_ZERO(&m);
  if (sched_getaffinity(0, sizeof m, &m) != 0) CPU_ZERO(&m);
  return m;
}

/// Runs `body` on a fresh thread, so the test process's own affinity and
/// CPU are never touched. The body uses CHECK only (a REQUIRE would throw
/// on that thread) and the main thread asserts nothing meanwhile.
template <class F>
void on_thread(F body) {
  std::thread t(body);
  t.join();
}

}  // namespace

TEST_CASE("step_aside moves the thread to another CPU and restores its mask", "[shm][placement]") {
  const cpu_set_t mask = affinity();
  if (CPU_COUNT(&mask) < 2) {
    WARN("not run: this process may use only " << CPU_COUNT(&mask) << " CPU");
    return;
  }
  on_thread([&] {
    const int before = sched_getcpu();
    CHECK(before >= 0);
    cpu_set_t taken;
    CPU_ZERO(&taken);
    CPU_SET(before, &taken);  // the peer on this CPU
    CpuSpreader s(true);
    CHECK(s.step_aside(before, taken));
    const int after = sched_getcpu();
    CHECK(after != before);
    CHECK(CPU_ISSET(after, &mask));
    const cpu_set_t now = affinity();
    CHECK(CPU_EQUAL(&now, &mask));
  });
}

TEST_CASE("step_aside prefers a CPU no peer is on", "[shm][placement]") {
  const cpu_set_t mask = affinity();
  if (CPU_COUNT(&mask) < 3) {
    WARN("not run: needs 3 usable CPUs, this process has " << CPU_COUNT(&mask));
    return;
  }
  on_thread([&] {
    const int before = sched_getcpu();
    // Every usable CPU but one (`free_cpu`) has a peer on it.
    int free_cpu = -1;
    cpu_set_t taken = mask;
    for (int c = 0; c < CPU_SETSIZE && free_cpu < 0; ++c)
      if (c != before && CPU_ISSET(c, &mask)) free_cpu = c;
    CPU_CLR(free_cpu, &taken);
    CpuSpreader s(true);
    CHECK(s.step_aside(before, taken));
    CHECK(sched_getcpu() == free_cpu);
    const cpu_set_t now = affinity();
    CHECK(CPU_EQUAL(&now, &mask));
  });
}

TEST_CASE("step_aside moves even when every other CPU has a peer", "[shm][placement]") {
  const cpu_set_t mask = affinity();
  if (CPU_COUNT(&mask) < 2) {
    WARN("not run: this process may use only " << CPU_COUNT(&mask) << " CPU");
    return;
  }
  on_thread([&] {
    const int before = sched_getcpu();
    CpuSpreader s(true);
    CHECK(s.step_aside(before, mask));  // a peer on every CPU
    CHECK(sched_getcpu() != before);
    const cpu_set_t now = affinity();
    CHECK(CPU_EQUAL(&now, &mask));
  });
}

TEST_CASE("step_aside does nothing when disabled or pinned to one CPU", "[shm][placement]") {
  on_thread([] {
    const cpu_set_t mask = affinity();
    const int cpu = sched_getcpu();
    cpu_set_t none;
    CPU_ZERO(&none);

    CpuSpreader off(false);
    CHECK_FALSE(off.enabled());
    CHECK_FALSE(off.step_aside(cpu, none));

    // A thread pinned to its CPU (taskset, mpirun --bind-to core) stays.
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CpuSpreader s(true);
    CHECK_FALSE(s.step_aside(cpu, none));
    CHECK(sched_getcpu() == cpu);
    const cpu_set_t now = affinity();
    CHECK(CPU_EQUAL(&now, &one));
    CHECK(sched_setaffinity(0, sizeof mask, &mask) == 0);
  });
}
