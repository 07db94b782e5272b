// A JACCL program, written against the jaccl headers only: barrier with
// staggered arrivals. In each round rank r sleeps delay(r) before entering;
// every rank records when it entered and when it left, the records are
// exchanged with all_gather, and every rank asserts that nobody left before
// the last one entered.
//
// The timestamps come from std::chrono::steady_clock, which on Linux is
// CLOCK_MONOTONIC: one clock for every process of a host, so the comparison
// is exact for ranks on one host (as under chorusrun).
//
// Usage: jaccl_barrier [--step-ms MS] (default 200)
#include <jaccl/jaccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Stamp {
  int64_t slot;  ///< this rank's place in the arrival order
  int64_t entered;
  int64_t left;
};

/// One staggered round; returns the number of violations seen by this rank.
int round(jaccl::Group& g, const char* name, int step_ms, int slot) {
  const int delay_ms = slot * step_ms;
  const int rank = g.rank();
  const int size = g.size();
  g.barrier();  // a common start, so the delays alone decide the arrival order
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  Stamp mine;
  mine.slot = slot;
  mine.entered = now_ns();
  g.barrier();
  mine.left = now_ns();

  std::vector<Stamp> all(size_t(size), Stamp{0, 0, 0});
  g.all_gather(&mine, all.data(), sizeof(Stamp));

  int last_in = 0;
  int first_out = 0;
  for (int r = 1; r < size; ++r) {
    if (all[r].entered > all[last_in].entered) last_in = r;
    if (all[r].left < all[first_out].left) first_out = r;
  }
  const double gap_ms = double(all[first_out].left - all[last_in].entered) / 1e6;
  int violations = 0;
  if (all[first_out].left < all[last_in].entered) {
    std::fprintf(stderr,
                 "rank %d: FAIL %s: rank %d left the barrier %.3f ms before rank %d entered it\n",
                 rank, name, first_out, -gap_ms, last_in);
    ++violations;
  }
  // The stagger makes the check above meaningful, but it is not a verdict:
  // on a loaded host a rank can be descheduled for longer than the stagger,
  // so the arrivals may bunch up or come out of turn. Neither is a barrier
  // failure (the leave-before-enter check uses the real arrival times); both
  // are worth a line.
  int64_t first_in = all[0].entered;
  for (const Stamp& s : all) first_in = std::min(first_in, s.entered);
  const double arrivals_ms = double(all[last_in].entered - first_in) / 1e6;
  if (rank == 0 && size > 1 && arrivals_ms < 0.5 * step_ms)
    std::printf("%-10s note: arrivals spread over only %.1f ms: the host is loaded\n", name,
                arrivals_ms);
  if (rank == 0 && all[last_in].slot != size - 1)
    std::printf("%-10s note: rank %d arrived last out of turn (slot %d): the host is loaded\n",
                name, last_in, int(all[last_in].slot));
  if (rank == 0)
    std::printf(
        "%-10s arrivals over %7.1f ms; last in: rank %d; first out: rank %d, %.3f ms "
        "later\n",
        name, arrivals_ms, last_in, first_out, gap_ms);
  return violations;
}

int run(int step_ms) {
  auto group = jaccl::init(/*strict=*/true);
  jaccl::Group& g = *group;
  const int rank = g.rank();
  const int size = g.size();
  if (rank == 0) std::printf("# jaccl barrier: %d ranks, %d ms stagger\n", size, step_ms);

  int violations = 0;
  violations += round(g, "ascending", step_ms, rank);
  violations += round(g, "descending", step_ms, size - 1 - rank);
  violations += round(g, "rotated", step_ms, (rank + 1) % size);

  // Unstaggered latency, for the record.
  const int n = 200;
  g.barrier();
  const int64_t t0 = now_ns();
  for (int i = 0; i < n; ++i) g.barrier();
  const double us = double(now_ns() - t0) / 1e3 / n;
  if (rank == 0) std::printf("# %d back-to-back barriers: %.1f us each\n", n, us);

  int32_t total = 0;
  g.all_sum(&violations, &total, sizeof(total), jaccl::Int32);
  if (rank == 0)
    std::printf("# %s: %d violations over all ranks\n", total ? "FAIL" : "PASS", total);
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int step_ms = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--step-ms") == 0 && i + 1 < argc) {
      step_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--step-ms MS]\n", argv[0]);
      return 2;
    }
  }
  try {
    return run(step_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jaccl_barrier: %s\n", e.what());
    return 1;
  }
}
