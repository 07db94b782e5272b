// Mesh schedules: what each rank sends to and receives from every peer, how
// transfers are cut into lanes and pieces, where received contributions are
// staged, the fixed reduction order and the barrier's partners. Pure
// arithmetic, no I/O, so it is unit-tested on its own (tests/unit/mesh).
//
// Every function here is a function of values that are identical on every
// rank (rank count, count, dtype size, staging geometry, channels), which is
// what keeps the per-endpoint message sequences matched on both ends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace chorus::mesh {

/// A contiguous run of elements.
struct Range {
  size_t offset = 0;
  size_t count = 0;

  friend constexpr bool operator==(const Range&, const Range&) = default;
};

/// Part `index` of `total` elements split into `parts` nearly equal runs; the
/// first `total % parts` runs are one element longer (the ring's split).
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

/// Lane `lane`'s slice of `whole`: each channel carries its own part of every
/// range, so lanes never share memory, endpoints or staging cells.
constexpr Range lane_slice(Range whole, int lanes, int lane) {
  Range part = split(whole.count, lanes, lane);
  return {whole.offset + part.offset, part.count};
}

/// Piece `k` of `r` cut into runs of `piece` elements (the last may be short).
constexpr Range piece_of(Range r, size_t piece, size_t k) {
  size_t off = k * piece;
  return {r.offset + off, std::min(piece, r.count - off)};
}

/// The order peers are served in when posting: starting right of `rank` and
/// wrapping, so no peer is everyone's first target. `i` runs over 0..size-2.
constexpr int peer_at(int rank, int size, int i) { return mod(rank + 1 + i, size); }

/// Index of `peer` among the other ranks in rank order (0..size-2): the
/// staging cell a peer's contribution to a piece lands in.
constexpr int peer_index(int rank, int peer) { return peer < rank ? peer : peer - 1; }

/// Work-request ids. The algorithm SDK's chorus::sdk::WrId carries (send or
/// receive, peer rank, a 35-bit index) in the 56 bits a task owns; the mesh
/// puts the lane (channel) in the index's low 7 bits and, above them, the
/// post's position in its endpoint's sequence modulo 2^28, a sanity check on
/// completion order.
inline constexpr int kLaneBits = 7;
inline constexpr int kSeqBits = 28;
inline constexpr int kMaxLanes = 1 << kLaneBits;
inline constexpr uint64_t kSeqMask = (uint64_t(1) << kSeqBits) - 1;

constexpr uint64_t post_index(int lane, size_t seq) {
  return ((uint64_t(seq) & kSeqMask) << kLaneBits) | (unsigned(lane) & unsigned(kMaxLanes - 1));
}
constexpr int index_lane(uint64_t index) { return int(index & unsigned(kMaxLanes - 1)); }
constexpr uint64_t index_seq(uint64_t index) { return (index >> kLaneBits) & kSeqMask; }
/// Whether a completion's sequence number names position `seq` of its endpoint.
constexpr bool seq_matches(uint64_t index, size_t seq) {
  return index_seq(index) == (uint64_t(seq) & kSeqMask);
}

/// The collectives the mesh runs through one executor.
enum class Kind {
  kAllReduceOneShot,  ///< every rank sends its whole input to every peer and reduces all of it
  kAllReduce,         ///< reduce-scatter then all-gather over `size` chunks
  kReduceScatter,     ///< reduce-scatter over per-rank blocks
  kAllGather,         ///< all-gather of per-rank blocks
  kBroadcast,         ///< the root sends to every peer directly
  kReduceOneShot,     ///< every other rank sends its whole input to the root, which reduces it
  kReduce,            ///< reduce-scatter over `size` chunks, then every chunk to the root
  kGather,            ///< every other rank sends its block to the root directly
  kScatter,           ///< the root sends every other rank its block directly
  kAllToAll,          ///< every rank sends every peer its block directly (ranges per call)
};

/// What one rank moves between itself and one peer, in element ranges. On
/// each endpoint the reduce part's pieces go first, then the gather part's.
struct Exchange {
  /// Contribution sent to the peer (in the source buffer), reduced there.
  Range reduce_send;
  /// Where the peer's contribution is reduced into (in the destination).
  Range reduce_recv;
  /// Finished data sent to the peer (in the destination buffer).
  Range gather_send;
  /// Finished data received from the peer, stored as is (in the destination).
  Range gather_recv;
};

/// The exchange of `rank` with `peer`. `count` is the call's count (per-rank
/// block for reduce-scatter and all-gather).
constexpr Exchange exchange(Kind kind, int rank, int size, int peer, size_t count, int root) {
  Exchange x;
  switch (kind) {
    case Kind::kAllReduceOneShot:
      x.reduce_send = {0, count};
      x.reduce_recv = {0, count};
      break;
    case Kind::kAllReduce:
      x.reduce_send = split(count, size, peer);
      x.reduce_recv = split(count, size, rank);
      x.gather_send = split(count, size, rank);
      x.gather_recv = split(count, size, peer);
      break;
    case Kind::kReduceScatter:
      x.reduce_send = {static_cast<size_t>(peer) * count, count};
      x.reduce_recv = {0, count};
      break;
    case Kind::kAllGather:
      x.gather_send = {static_cast<size_t>(rank) * count, count};
      x.gather_recv = {static_cast<size_t>(peer) * count, count};
      break;
    case Kind::kBroadcast:
      if (rank == root) x.gather_send = {0, count};
      if (peer == root) x.gather_recv = {0, count};
      break;
    case Kind::kReduceOneShot:
      if (peer == root) x.reduce_send = {0, count};
      if (rank == root) x.reduce_recv = {0, count};
      break;
    case Kind::kReduce:
      x.reduce_send = split(count, size, peer);
      x.reduce_recv = split(count, size, rank);
      if (peer == root) x.gather_send = split(count, size, rank);
      if (rank == root) x.gather_recv = split(count, size, peer);
      break;
    case Kind::kGather:
      if (peer == root) x.gather_send = {0, count};
      if (rank == root) x.gather_recv = {static_cast<size_t>(peer) * count, count};
      break;
    case Kind::kScatter:
      if (rank == root) x.gather_send = {static_cast<size_t>(peer) * count, count};
      if (peer == root) x.gather_recv = {0, count};
      break;
    case Kind::kAllToAll:
      // Per-peer ranges come from the call's counts and offsets
      // (all_to_all_exchange); nothing here depends on them.
      break;
  }
  return x;
}

/// The part of the reduction a rank does itself: its own contribution (in the
/// source) and where the result goes (in the destination). Empty for kinds
/// that do not reduce.
struct Reduction {
  Range own;
  Range result;
};

constexpr bool reduces(Kind kind) {
  return kind == Kind::kAllReduceOneShot || kind == Kind::kAllReduce ||
         kind == Kind::kReduceScatter || kind == Kind::kReduceOneShot || kind == Kind::kReduce;
}

/// The exchange of all_to_all(v) with one peer: its block of the input goes
/// out from the source (gather_send, read from the input), the peer's block
/// lands in the output.
constexpr Exchange all_to_all_exchange(size_t send_offset, size_t send_count, size_t recv_offset,
                                       size_t recv_count) {
  Exchange x;
  x.gather_send = {send_offset, send_count};
  x.gather_recv = {recv_offset, recv_count};
  return x;
}

constexpr Reduction reduction(Kind kind, int rank, int size, size_t count, int root = 0) {
  switch (kind) {
    case Kind::kAllReduceOneShot:
      return {{0, count}, {0, count}};
    case Kind::kAllReduce:
      return {split(count, size, rank), split(count, size, rank)};
    case Kind::kReduceScatter:
      return {{static_cast<size_t>(rank) * count, count}, {0, count}};
    case Kind::kReduceOneShot:
      if (rank == root) return {{0, count}, {0, count}};
      return {};
    case Kind::kReduce:
      return {split(count, size, rank), split(count, size, rank)};
    default:
      return {};
  }
}

/// Applies the contributions of ranks 0..size-1 to one piece in rank order:
/// `copy(0)` stores rank 0's contribution as the result, then `apply(j)`
/// does result = result op contribution_j for j = 1..size-1. Every rank that
/// reduces a piece therefore computes ((c0 op c1) op c2) ... bitwise alike,
/// whichever rank it is and whatever order the data arrived in.
template <class Copy, class Apply>
constexpr void reduce_in_rank_order(int size, Copy&& copy, Apply&& apply) {
  copy(0);
  for (int j = 1; j < size; ++j) apply(j);
}

/// Receive staging: contributions land in "cells" of `piece_bytes`. A piece
/// in flight needs one cell per peer (a "group"); each lane has `groups`
/// groups, so `groups` pieces per lane are in flight at once.
struct CellLayout {
  /// Bytes per piece and per cell: a multiple of kCellAlign, so of every
  /// element size, and of the vector width the kernels like.
  size_t piece_bytes = 0;
  /// Cells cut from one staging slot (or from the temporary buffer).
  size_t cells_per_slot = 0;
  /// Pieces in flight per lane.
  size_t groups = 0;
  /// Lanes (channels) the transfer is striped over.
  int lanes = 1;
  /// Peers sending contributions: size - 1.
  int peers = 0;
  /// The cells do not fit the staging slots at a useful size: use one
  /// temporary buffer of temp_bytes() instead.
  bool temporary = false;

  constexpr size_t cells() const {
    return static_cast<size_t>(lanes) * groups * static_cast<size_t>(peers);
  }
};

inline constexpr size_t kCellAlign = 64;
/// Smallest piece worth staging; below it the cells go to a temporary buffer.
inline constexpr size_t kMinPiece = 4096;
/// Pieces in flight per lane that the layout aims for (double buffering).
inline constexpr size_t kWantGroups = 2;
/// No more pieces in flight per lane than this, whatever the staging holds.
inline constexpr size_t kMaxGroups = 16;

constexpr size_t align_down(size_t v, size_t a) { return v / a * a; }

/// Piece size for transfers that need no staging (gathers): one slot, capped
/// by the transport's largest message, in whole elements.
constexpr size_t direct_piece_bytes(size_t slot_size, uint64_t max_message, size_t esize) {
  size_t cap = static_cast<size_t>(std::min<uint64_t>(slot_size, max_message));
  size_t p = align_down(cap, kCellAlign);
  if (p == 0) p = align_down(cap, esize);
  return p;
}

/// Lays out the receive cells for `peers` (= size - 1 >= 1) peers over
/// `channels` lanes in `slots` staging slots of `slot_size` bytes. Prefers
/// every channel, then one lane, then a temporary buffer.
constexpr CellLayout cell_layout(size_t slots, size_t slot_size, int channels, int peers,
                                 uint64_t max_message) {
  size_t msg_cap =
      align_down(static_cast<size_t>(std::min<uint64_t>(max_message, SIZE_MAX)), kCellAlign);
  for (int lanes : {channels, 1}) {
    if (lanes < 1) continue;
    size_t want = static_cast<size_t>(lanes) * kWantGroups * static_cast<size_t>(peers);
    size_t per_slot = (want + slots - 1) / slots;
    size_t piece = std::min(align_down(slot_size / per_slot, kCellAlign), msg_cap);
    if (piece < kMinPiece) continue;
    CellLayout l;
    l.piece_bytes = piece;
    l.cells_per_slot = slot_size / piece;
    l.lanes = lanes;
    l.peers = peers;
    size_t total = slots * l.cells_per_slot;
    l.groups = std::min(kMaxGroups, total / (static_cast<size_t>(lanes) * size_t(peers)));
    return l;
  }
  CellLayout l;
  l.piece_bytes = std::min(kMinPiece, msg_cap);
  l.groups = kWantGroups;
  l.lanes = 1;
  l.peers = peers;
  l.cells_per_slot = l.cells();
  l.temporary = true;
  return l;
}

/// Where cell `cell` of a layout lives: staging slot (or 0 for the temporary
/// buffer) and byte offset inside it.
struct CellPlace {
  size_t slot = 0;
  size_t offset = 0;
};

/// Cell of (lane, group, peer index): lanes own disjoint runs of cells.
constexpr size_t cell_index(const CellLayout& l, int lane, size_t group, int peer_idx) {
  return (static_cast<size_t>(lane) * l.groups + group) * static_cast<size_t>(l.peers) +
         static_cast<size_t>(peer_idx);
}

constexpr CellPlace cell_place(const CellLayout& l, size_t cell) {
  return {cell / l.cells_per_slot, (cell % l.cells_per_slot) * l.piece_bytes};
}

/// Dissemination barrier with radix `radix` (2 = the classic one; `size` =
/// every rank tells every other in one round). In round k rank r tells ranks
/// r + j*radix^k and hears from r - j*radix^k, for j = 1..radix-1 as long as
/// j*radix^k < size. After round k it knows ranks r - d, d < radix^(k+1),
/// have arrived; after the last round, all of them.
constexpr int barrier_rounds(int size, int radix) {
  int rounds = 0;
  for (long long reach = 1; reach < size; reach *= radix) ++rounds;
  return rounds;
}

/// Distance of partner `j` (1..radix-1) in round `round`, or 0 if that
/// partner does not exist (j * radix^round >= size).
constexpr int barrier_distance(int size, int radix, int round, int j) {
  long long d = j;
  for (int k = 0; k < round; ++k) d *= radix;
  return d < size ? static_cast<int>(d) : 0;
}

/// Messages a rank sends (and receives) in `round`.
constexpr int barrier_fanout(int size, int radix, int round) {
  int n = 0;
  for (int j = 1; j < radix; ++j)
    if (barrier_distance(size, radix, round, j) > 0) ++n;
  return n;
}

/// The radix used when none is configured: 2, the classic dissemination
/// barrier (ceil(log2 size) rounds of one token). On the 2-core test host it
/// beat one all-to-all round (radix = size) at every rank count from 3 to 8,
/// because each extra incoming token costs the receiver a wake-up; on
/// fabrics with cheap posts `barrier_radix = <size>` gives one round.
constexpr int default_barrier_radix(int size) {
  (void)size;
  return 2;
}

}  // namespace chorus::mesh
