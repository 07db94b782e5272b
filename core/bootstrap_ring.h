// Ring arithmetic of the bootstrap's all_gather: which ranks link to which,
// and which blobs a rank passes on. Pure: no I/O, unit-tested alone.
//
// The non-root ranks 1..size-1 form a ring (next(r) = r + 1, wrapping from
// size-1 to 1). Rank 0 stays off it: it sends its own blob to rank 1, which
// passes it on as if it were its own, and it receives every other blob from
// rank size-1. So rank 0 sends one blob per all_gather, whatever the blob
// sizes, and every other rank sends at most two of each (rank size-1 feeds
// both rank 1 and rank 0).
#pragma once

namespace chorus::core::ring {

/// Ranks on the ring of non-root ranks.
constexpr int members(int size) { return size - 1; }

/// The ring successor of non-root rank `rank`.
constexpr int next(int rank, int size) { return rank == size - 1 ? 1 : rank + 1; }

/// The ring predecessor of non-root rank `rank`.
constexpr int prev(int rank, int size) { return rank == 1 ? size - 1 : rank - 1; }

/// Whether non-root `rank` has ring neighbours at all (a ring of one has none).
constexpr bool linked(int rank, int size) { return rank >= 1 && members(size) >= 2; }

/// Whether non-root `rank` opens the link to its neighbour `peer` (the lower
/// rank of a pair connects to the higher one's listener).
constexpr bool connects_to(int rank, int peer) { return rank < peer; }

/// Whether non-root `rank` takes a link from a lower-ranked neighbour, i.e.
/// needs a listener.
constexpr bool listens(int rank, int size) {
  return linked(rank, size) && (prev(rank, size) < rank || next(rank, size) < rank);
}

/// Where the blob of `origin` enters the ring: rank 0's at rank 1.
constexpr int entry(int origin) { return origin == 0 ? 1 : origin; }

/// Whether non-root `rank` passes the blob of `origin` to its successor: it
/// travels until the rank before the one where it entered.
constexpr bool forwards(int rank, int size, int origin) {
  return linked(rank, size) && next(rank, size) != entry(origin);
}

/// Whether `rank` passes blobs to rank 0 (every one but rank 0's own).
constexpr bool feeds_root(int rank, int size) { return size >= 2 && rank == size - 1; }

/// Blobs non-root `rank` receives from its ring predecessor in one
/// all_gather: every rank's but its own, and rank 0's when rank 0 sends it
/// directly (to rank 1).
constexpr int from_prev(int rank, int size) {
  if (!linked(rank, size)) return 0;
  return size - 2 + (rank == 1 ? 0 : 1);
}

}  // namespace chorus::core::ring
