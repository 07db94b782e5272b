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

/// Reduce to `root` as a pipeline along the ring ending at the root: one step
/// over one chunk (0). The rank after the root starts the chain by sending
/// its input; every later rank reduces each arriving piece into its own and
/// forwards it; the root only receives and reduces. The order of the
/// reduction is fixed by the ring, so results are the same on every run.
constexpr int reduce_steps(int size) { return size > 1 ? 1 : 0; }
constexpr Step reduce_step(int rank, int size, int root) {
  int position = mod(rank - root - 1, size);  // root + 1 is 0, the root is size - 1
  Step s;
  s.send_chunk = position == size - 1 ? -1 : 0;
  s.recv_chunk = position == 0 ? -1 : 0;
  s.reduce = true;
  s.send_after = position == 0 ? -1 : 0;
  return s;
}

/// Gather to `root` along the ring: chunk c is rank c's block. The chain
/// starts at root + 1 (position 0) and ends at the root (position size-1);
/// at step u the rank at position p sends the block of position p - u (its
/// own at step 0, then each one it received at step u - 1) and receives the
/// block of position p - 1 - u. size - 1 steps; blocks flow as a pipeline.
constexpr int gather_steps(int size) { return size - 1; }
constexpr Step gather_step(int rank, int size, int root, int u) {
  int p = mod(rank - root - 1, size);
  Step s;
  if (p != size - 1 && p - u >= 0) {
    s.send_chunk = mod(root + 1 + p - u, size);
    s.send_after = u == 0 ? -1 : u - 1;
  }
  if (p - 1 - u >= 0) s.recv_chunk = mod(root + p - u, size);
  return s;
}
/// Where a gather's chunk c sits in the work buffer of a rank that is not the
/// root: by its position in the chain, so the rank at position p needs room
/// for p + 1 blocks only.
constexpr int gather_slot(int chunk, int size, int root) { return mod(chunk - root - 1, size); }

/// Scatter from `root` along the ring: chunk c is rank c's block. The root
/// (position 0) sends the blocks farthest first, the block of position
/// size - 1 - u at step u; the rank at position q >= 1 receives the blocks of
/// positions size-1 down to q and forwards each one beyond it as soon as it
/// lands. size - 1 steps.
constexpr int scatter_steps(int size) { return size - 1; }
constexpr Step scatter_step(int rank, int size, int root, int u) {
  int q = mod(rank - root, size);
  int b = size - 1 - u;  // position of the block moving at step u
  Step s;
  if (q == 0 || b > q) {
    s.send_chunk = mod(root + b, size);
    s.send_after = q == 0 ? -1 : u;
  }
  if (q >= 1 && b >= q) s.recv_chunk = mod(root + b, size);
  return s;
}
/// Where a scatter's chunk c sits in the work buffer of a rank that is not the
/// root: blocks of positions q..size-1 in order, so q's own block comes first.
constexpr int scatter_slot(int chunk, int rank, int size, int root) {
  return mod(chunk - root, size) - mod(rank - root, size);
}

/// all_to_all over ring neighbours only. Every block travels right until it
/// reaches its destination. In round u (0..size-2) rank r sends the blocks
/// that started at rank r - u and still have to go further (to ranks r+1 ..
/// r+size-1-u, nearest first) and receives those that rank r - 1 sends: the
/// first is for r itself (from rank r-1-u), the others are forwarded in
/// round u + 1. Each (round, block) pair is one step of one block, so a
/// forwarded block is sent piece by piece as it lands.
///
/// Chunk ids: kA2aIn + d is the input block for rank d; kA2aOut + o (o in
/// 0..size-1, offset by `size`) is the output block from rank o; ids from
/// 2*size name blocks in transit, one per step that receives one.
constexpr int a2a_steps(int size) { return size * (size - 1) / 2; }
/// Index of step (round u, block i).
constexpr int a2a_index(int size, int u, int i) { return u * (size - 1) - u * (u - 1) / 2 + i; }
struct A2aStep {
  Step step;
  int origin = -1;  ///< rank the received block came from (-1: none)
  int dest = -1;    ///< rank the received block is for
};
constexpr A2aStep a2a_step(int rank, int size, int u, int i) {
  A2aStep a;
  if (i == 0 && u == 0) {
    a.step.send_chunk = mod(rank + 1, size);
  } else if (u == 0) {
    a.step.send_chunk = mod(rank + 1 + i, size);
  } else {
    a.step.send_chunk = 2 * size + a2a_index(size, u - 1, i + 1);
    a.step.send_after = a2a_index(size, u - 1, i + 1);
  }
  a.origin = mod(rank - 1 - u, size);
  a.dest = mod(rank + i, size);
  a.step.recv_chunk = i == 0 ? size + a.origin : 2 * size + a2a_index(size, u, i);
  return a;
}
/// Step `index` of the flattened all_to_all schedule.
constexpr A2aStep a2a_step_at(int rank, int size, int index) {
  int u = 0;
  while (index >= size - 1 - u) {
    index -= size - 1 - u;
    ++u;
  }
  return a2a_step(rank, size, u, index);
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
