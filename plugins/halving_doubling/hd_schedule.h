// Recursive halving-doubling schedules: which elements a rank sends to and
// receives from whom at each step. Pure arithmetic, no I/O, so it is tested on
// its own (tests/hd_schedule_test.cc).
//
// Ranks are folded onto the largest power of two p <= size: a rank r >= p (an
// "extra" rank) hands its data to its "host" r - p first and gets the result
// back from it last; the p ranks below p run the power-of-two algorithm with
// virtual rank v = r. Every step pairs v with v ^ mask and moves "groups": the
// aligned run of `mask` virtual ranks containing v,
//   group(v, mask) = [v & ~(mask - 1), (v & ~(mask - 1)) + mask).
//  - all_reduce: the vector is split into p blocks (block b belongs to virtual
//    rank b). Halving steps (mask p/2 .. 1) send the partner's group of blocks
//    and reduce the partner's copy of our own group into ours; afterwards v
//    holds block v fully reduced. Doubling steps (mask 1 .. p/2) send our
//    group and receive the partner's, so every v ends with every block.
//  - all_gather: virtual rank v holds the per-rank blocks v and, when it hosts
//    an extra rank, v + p; doubling steps move whole groups of those.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace chorus::hd {

/// A contiguous run of elements.
struct Range {
  size_t offset = 0;
  size_t count = 0;
};

/// Part `index` of `total` elements split into `parts` nearly equal runs; the
/// first `total % parts` runs are one element longer. Every rank computes the
/// same split, which is what keeps message sizes matched on both ends.
constexpr Range split(size_t total, int parts, int index) {
  size_t p = static_cast<size_t>(parts);
  size_t i = static_cast<size_t>(index);
  size_t base = total / p;
  size_t rem = total % p;
  return {i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

/// Largest power of two <= n (n >= 1).
constexpr int floor_pow2(int n) {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

/// log2 of a power of two.
constexpr int log2_exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

/// How a rank takes part in the fold onto the power of two.
struct Fold {
  int pow2 = 1;        ///< p, the ranks that run the power-of-two algorithm
  int partner = -1;    ///< the extra rank this rank hosts, or its host; -1: none
  bool extra = false;  ///< rank >= p: hands its data to `partner` and waits
};

constexpr Fold fold(int rank, int size) {
  Fold f;
  f.pow2 = floor_pow2(size);
  if (rank >= f.pow2) {
    f.extra = true;
    f.partner = rank - f.pow2;
  } else if (rank + f.pow2 < size) {
    f.partner = rank + f.pow2;
  }
  return f;
}

/// First virtual rank of the aligned group of `mask` ranks holding `v`.
constexpr int group_start(int v, int mask) { return v & ~(mask - 1); }

/// Number of halving (or doubling) steps among p ranks.
constexpr int steps(int pow2) { return log2_exact(pow2); }

/// Mask of halving step s (s = 0 .. steps-1): p/2, p/4, ..., 1.
constexpr int halving_mask(int pow2, int s) { return pow2 >> (s + 1); }

/// Mask of doubling step s: 1, 2, ..., p/2.
constexpr int doubling_mask(int s) { return 1 << s; }

/// Elements of blocks [first, first + n) when `count` elements are split into
/// `pow2` blocks: the blocks are consecutive, so this is one run.
constexpr Range block_run(size_t count, int pow2, int first, int n) {
  Range a = split(count, pow2, first);
  Range b = split(count, pow2, first + n - 1);
  return {a.offset, b.offset + b.count - a.offset};
}

/// all_reduce, element run of group(v, mask) of blocks.
constexpr Range reduce_group(size_t count, int pow2, int v, int mask) {
  return block_run(count, pow2, group_start(v, mask), mask);
}

/// all_gather, element runs of the per-rank blocks that group(v, mask) of
/// virtual ranks holds: blocks [g, g + mask), then the hosted extra ranks'
/// blocks [g + p, min(g + mask, size - p) + p). Empty runs are left out.
inline std::vector<Range> gather_group(size_t count, int size, int v, int mask) {
  int pow2 = floor_pow2(size);
  int extras = size - pow2;
  int g = group_start(v, mask);
  std::vector<Range> runs;
  if (count == 0) return runs;
  runs.push_back({size_t(g) * count, size_t(mask) * count});
  int hosted = std::min(g + mask, extras) - g;
  if (hosted > 0) runs.push_back({size_t(g + pow2) * count, size_t(hosted) * count});
  return runs;
}

/// all_gather, what a host sends its extra rank at the end: every block but
/// the extra rank's own, as at most two runs.
inline std::vector<Range> gather_all_but(size_t count, int size, int rank) {
  std::vector<Range> runs;
  if (count == 0) return runs;
  if (rank > 0) runs.push_back({0, size_t(rank) * count});
  if (rank + 1 < size) runs.push_back({size_t(rank + 1) * count, size_t(size - rank - 1) * count});
  return runs;
}

/// One pairwise exchange: runs of the work buffer sent to `peer`, and runs
/// received from it, each in order. The peer's matching transfer sends exactly
/// our `recv` runs and receives exactly our `send` runs.
struct Transfer {
  int peer = -1;
  std::vector<Range> send;
  std::vector<Range> recv;
  /// Received data is reduced into the runs instead of replacing them.
  bool reduce = false;
};

/// all_reduce of `count` elements as rank `rank` of `size` (size > 1) runs
/// it: the fold, the halving steps, the doubling steps, the unfold.
inline std::vector<Transfer> all_reduce_plan(int rank, int size, size_t count) {
  std::vector<Transfer> plan;
  const Range all{0, count};
  const Fold f = fold(rank, size);
  if (f.extra) {
    plan.push_back({f.partner, {all}, {}, false});
    plan.push_back({f.partner, {}, {all}, false});
    return plan;
  }
  if (f.partner >= 0) plan.push_back({f.partner, {}, {all}, true});
  const int v = rank, p = f.pow2;
  for (int s = 0; s < steps(p); ++s) {
    int m = halving_mask(p, s), peer = v ^ m;
    plan.push_back({peer, {reduce_group(count, p, peer, m)}, {reduce_group(count, p, v, m)}, true});
  }
  for (int s = 0; s < steps(p); ++s) {
    int m = doubling_mask(s), peer = v ^ m;
    plan.push_back(
        {peer, {reduce_group(count, p, v, m)}, {reduce_group(count, p, peer, m)}, false});
  }
  if (f.partner >= 0) plan.push_back({f.partner, {all}, {}, false});
  return plan;
}

/// all_gather of `count` elements per rank (the output holds size * count).
inline std::vector<Transfer> all_gather_plan(int rank, int size, size_t count) {
  std::vector<Transfer> plan;
  const Fold f = fold(rank, size);
  if (f.extra) {
    plan.push_back({f.partner, {{size_t(rank) * count, count}}, {}, false});
    plan.push_back({f.partner, {}, gather_all_but(count, size, rank), false});
    return plan;
  }
  if (f.partner >= 0) plan.push_back({f.partner, {}, {{size_t(f.partner) * count, count}}, false});
  const int v = rank;
  for (int s = 0; s < steps(f.pow2); ++s) {
    int m = doubling_mask(s), peer = v ^ m;
    plan.push_back(
        {peer, gather_group(count, size, v, m), gather_group(count, size, peer, m), false});
  }
  if (f.partner >= 0)
    plan.push_back({f.partner, gather_all_but(count, size, f.partner), {}, false});
  return plan;
}

}  // namespace chorus::hd
