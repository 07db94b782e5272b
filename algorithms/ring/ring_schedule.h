// Ring schedules: which chunk a rank sends and receives at each step. Pure
// arithmetic, no I/O, so it is unit-tested on its own (tests/unit/ring).
#pragma once

#include <algorithm>
#include <cstddef>

namespace chorus::ring {

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

constexpr int mod(int a, int n) { return ((a % n) + n) % n; }

/// Number of pieces of at most `piece` elements that `count` elements make.
constexpr size_t piece_count(size_t count, size_t piece) { return (count + piece - 1) / piece; }

/// One step of a ring schedule: send a chunk to the right neighbour, receive
/// a chunk from the left one. A chunk index of -1 means "nothing".
struct Step {
  int send_chunk = -1;
  int recv_chunk = -1;
  /// Received data is reduced into the chunk (true) or replaces it (false).
  bool reduce = false;
  /// Piece k of this step's send may start once piece k of receive step
  /// `send_after` has landed (-1: the data is ready from the start). The
  /// send chunk and that receive chunk are the same chunk, so they have the
  /// same pieces.
  int send_after = -1;
};

/// All-reduce = reduce-scatter then all-gather over `size` chunks, 2(size-1)
/// steps. At step u rank r sends chunk r-u and receives chunk r-u-1; after
/// step size-2 it owns the fully reduced chunk r+1, and the all-gather steps
/// pass finished chunks on.
constexpr int all_reduce_steps(int size) { return 2 * (size - 1); }
constexpr Step all_reduce_step(int rank, int size, int u) {
  return {mod(rank - u, size), mod(rank - u - 1, size), u < size - 1, u == 0 ? -1 : u - 1};
}

/// Reduce-scatter over per-rank blocks: size-1 steps; the last receive is
/// block `rank`, which then holds the full reduction.
constexpr int reduce_scatter_steps(int size) { return size - 1; }
constexpr Step reduce_scatter_step(int rank, int size, int u) {
  return {mod(rank - u - 1, size), mod(rank - u - 2, size), true, u == 0 ? -1 : u - 1};
}

/// All-gather over per-rank blocks: size-1 steps starting from the own block.
constexpr int all_gather_steps(int size) { return size - 1; }
constexpr Step all_gather_step(int rank, int size, int u) {
  return {mod(rank - u, size), mod(rank - u - 1, size), false, u == 0 ? -1 : u - 1};
}

/// Broadcast as a pipeline along the ring from `root`: one step over one
/// chunk (0); the root only sends, the rank before the root only receives,
/// every other rank forwards each piece as soon as it has landed.
constexpr int broadcast_steps(int size) { return size > 1 ? 1 : 0; }
constexpr Step broadcast_step(int rank, int size, int root) {
  int position = mod(rank - root, size);
  Step s;
  s.send_chunk = position == size - 1 ? -1 : 0;
  s.recv_chunk = position == 0 ? -1 : 0;
  s.reduce = false;
  s.send_after = position == 0 ? -1 : 0;
  return s;
}

/// The same schedules run the other way round the ring (send left, receive
/// right) by relabelling: position p of the mirrored ring is rank -p, and its
/// chunk c is chunk -c (mod size). The relabelling maps neighbours to
/// neighbours and each rank's own block to itself, so reduce_scatter and
/// all_gather still end with block r on rank r.
constexpr int mirror(int x, int size) { return mod(-x, size); }
constexpr Step mirror_chunks(Step s, int size) {
  if (s.send_chunk >= 0) s.send_chunk = mirror(s.send_chunk, size);
  if (s.recv_chunk >= 0) s.recv_chunk = mirror(s.recv_chunk, size);
  return s;
}
/// Step `u` of schedule `f` for `rank`, in the forward or the reverse ring.
template <class F>
constexpr Step directed_step(F f, int rank, int size, int u, bool reverse) {
  return reverse ? mirror_chunks(f(mirror(rank, size), size, u), size) : f(rank, size, u);
}

}  // namespace chorus::ring
