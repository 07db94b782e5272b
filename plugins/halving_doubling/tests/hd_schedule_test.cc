// Runs the halving-doubling plans of every rank against each other in a
// simulated network, for rank counts up to 40 and awkward counts, and checks that
//  - every transfer meets a matching transfer on its peer (same runs each
//    way, so message sizes agree) and the plans never deadlock;
//  - all_reduce: every element of every rank ends with each rank's
//    contribution exactly once (a reduction never double counts);
//  - all_gather: every rank ends with every rank's block.
// Each element carries the set of ranks it holds (a bit mask), so a missing,
// doubled or misplaced contribution shows.
#include "hd_schedule.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using chorus::hd::Range;
using chorus::hd::Transfer;

int g_failed = 0;
int g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failed;
    if (g_failed < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

bool same_runs(const std::vector<Range>& a, const std::vector<Range>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].offset != b[i].offset || a[i].count != b[i].count) return false;
  return true;
}

using State = std::vector<std::vector<uint64_t>>;  // [rank][element] -> ranks held

/// Runs every rank's plan; pairs transfers as a network would. Returns false
/// on a mismatch or deadlock.
bool simulate(const std::vector<std::vector<Transfer>>& plans, State& st, size_t elements,
              const std::string& what) {
  const int size = int(plans.size());
  std::vector<size_t> at(size_t(size), 0);
  for (;;) {
    bool progressed = false, all_done = true;
    for (int a = 0; a < size; ++a) {
      if (at[size_t(a)] >= plans[size_t(a)].size()) continue;
      all_done = false;
      const Transfer& ta = plans[size_t(a)][at[size_t(a)]];
      int b = ta.peer;
      if (b < 0 || b >= size || b == a) {
        expect(false, what + ": rank " + std::to_string(a) + " has a bad peer");
        return false;
      }
      if (at[size_t(b)] >= plans[size_t(b)].size()) continue;
      const Transfer& tb = plans[size_t(b)][at[size_t(b)]];
      if (tb.peer != a) continue;
      if (!same_runs(ta.send, tb.recv) || !same_runs(ta.recv, tb.send)) {
        expect(false, what + ": ranks " + std::to_string(a) + " and " + std::to_string(b) +
                          " disagree on what they exchange");
        return false;
      }
      auto before_a = st[size_t(a)], before_b = st[size_t(b)];
      auto apply = [&](int dst, const Transfer& t, const std::vector<uint64_t>& src) {
        size_t doubled = 0;
        for (const Range& r : t.recv) {
          if (r.offset + r.count > elements) {
            expect(false, what + ": run past the end of the buffer");
            return;
          }
          for (size_t i = r.offset; i < r.offset + r.count; ++i) {
            uint64_t& mine = st[size_t(dst)][i];
            if (t.reduce) {
              doubled += (mine & src[i]) != 0;
              mine |= src[i];
            } else {
              mine = src[i];
            }
          }
        }
        expect(doubled == 0, what + ": rank " + std::to_string(dst) + " reduced " +
                                 std::to_string(doubled) + " elements twice with one contribution");
      };
      apply(a, ta, before_b);
      apply(b, tb, before_a);
      ++at[size_t(a)];
      ++at[size_t(b)];
      progressed = true;
    }
    if (all_done) return true;
    if (!progressed) {
      expect(false, what + ": the plans deadlock");
      return false;
    }
  }
}

void check_all_reduce(int size, size_t count) {
  std::string what = "all_reduce size=" + std::to_string(size) + " count=" + std::to_string(count);
  State st(static_cast<size_t>(size), std::vector<uint64_t>(count));
  for (int r = 0; r < size; ++r)
    for (auto& e : st[size_t(r)]) e = 1ull << r;
  std::vector<std::vector<Transfer>> plans;
  for (int r = 0; r < size; ++r)
    plans.push_back(size > 1 ? chorus::hd::all_reduce_plan(r, size, count)
                             : std::vector<Transfer>{});
  if (!simulate(plans, st, count, what)) return;
  const uint64_t everyone = size == 64 ? ~0ull : (1ull << size) - 1;
  size_t wrong = 0;
  for (int r = 0; r < size; ++r)
    for (uint64_t e : st[size_t(r)]) wrong += e != everyone;
  expect(wrong == 0, what + ": " + std::to_string(wrong) + " elements incomplete");
}

void check_all_gather(int size, size_t count) {
  std::string what = "all_gather size=" + std::to_string(size) + " count=" + std::to_string(count);
  size_t n = size_t(size) * count;
  State st(static_cast<size_t>(size), std::vector<uint64_t>(n, 0));
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < count; ++i) st[size_t(r)][size_t(r) * count + i] = 1ull << r;
  std::vector<std::vector<Transfer>> plans;
  for (int r = 0; r < size; ++r)
    plans.push_back(size > 1 ? chorus::hd::all_gather_plan(r, size, count)
                             : std::vector<Transfer>{});
  if (!simulate(plans, st, n, what)) return;
  size_t wrong = 0;
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < n; ++i) wrong += st[size_t(r)][i] != 1ull << (i / count);
  expect(wrong == 0, what + ": " + std::to_string(wrong) + " elements wrong");
}

}  // namespace

int main() {
  using namespace chorus::hd;
  static_assert(floor_pow2(1) == 1 && floor_pow2(5) == 4 && floor_pow2(8) == 8);
  static_assert(steps(1) == 0 && steps(8) == 3);
  static_assert(fold(5, 6).extra && fold(5, 6).partner == 1 && fold(1, 6).partner == 5);
  static_assert(fold(2, 6).partner == -1 && !fold(3, 4).extra);
  static_assert(block_run(10, 4, 1, 2).offset == 3 && block_run(10, 4, 1, 2).count == 5);

  for (int size : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 23, 31, 32, 33, 40}) {
    size_t n = size_t(size);
    for (size_t count :
         {size_t(0), size_t(1), size_t(2), n > 1 ? n - 1 : 3, n, n + 1, 2 * n + 3, size_t(1000)}) {
      check_all_reduce(size, count);
      check_all_gather(size, count);
    }
  }
  std::printf("hd_schedule_test: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
