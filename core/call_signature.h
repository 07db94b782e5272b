// Call signatures: what one rank's call looks like to the peers it talks to,
// and the per-peer matching that finds calls the ranks disagree on
// (docs/reliability.md §4.5). Pure bookkeeping, no I/O: the communicator
// sends and receives the signatures on its notice endpoints.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace chorus::core {

/// One call as the peers see it. Collectives use `call` = CHORUS_COLL_*,
/// point-to-point kSigSend / kSigRecv with `count` in bytes.
struct CallSig {
  static constexpr int32_t kSigSend = 100;
  static constexpr int32_t kSigRecv = 101;
  /// In `seq` of a send/recv signature from the tagged engine: the rest is
  /// the number of collectives the communicator had issued before the call
  /// (not a per-pair position).
  static constexpr uint64_t kP2pPosition = 1ull << 63;

  uint64_t seq = 0;    // collectives: the communicator's collective count; p2p: per pair/direction
  uint64_t count = 0;  // elements (collectives) or bytes (send/recv)
  int32_t rank = -1;   // the rank that made the call
  int32_t call = -1;
  int32_t dtype = -1;  // -1 where the call has none (barrier, send/recv)
  int32_t op = -1;     // -1 where the call has none
  int32_t root = -1;   // rooted collectives; a fused all_reduce: how many calls it fused
  int32_t peer = -1;   // send/recv: the other rank; a fused all_reduce: fused_digest
  char algo[16] = {};  // the algorithm chosen (collectives), NUL-terminated

  bool is_collective() const { return call >= 0 && call < kSigSend; }
  /// An all_reduce that runs several grouped calls as one
  /// (core/api_group.cc): `root` holds the number of calls, `peer` the
  /// digest of their element counts in issue order (fused_digest), so ranks
  /// that fused differently disagree even when the totals are equal.
  bool is_fused() const { return call == 0 /* CHORUS_COLL_ALL_REDUCE */ && root >= 0; }
  /// A call known only by the digest its data carried (call < 0).
  bool is_unknown() const { return call < 0; }
  /// "all_reduce(count=1024, float32, sum)", "send(4096 bytes to rank 1)".
  std::string describe(bool with_algo = false, bool with_seq = false) const;
};
static_assert(sizeof(CallSig) == 56);

/// The 32-bit digest of a collective's signature that the data messages of
/// the call carry as the transport's immediate (docs/reliability.md §4.5):
/// equal for signatures that agree (everything signatures_agree compares),
/// never 0, which stands for "no collective" (a send or receive).
uint32_t signature_digest(const CallSig& sig);

/// The 32-bit digest of the element counts of the calls a fused all_reduce
/// runs, in issue order (CallSig::peer of the fused call).
uint32_t fused_digest(const uint64_t* counts, size_t n);

/// The two sides of a pair agree when a collective meets the same collective
/// (sequence, collective, count, dtype, op, root, algorithm all equal, and for
/// a fused all_reduce the digest of its calls' counts) and a
/// send meets a receive of the same size. `mine` is this rank's side of the
/// stream, `theirs` the peer's.
bool signatures_agree(const CallSig& mine, const CallSig& theirs);

/// "rank 0 called all_reduce(count=1024, float32, sum) but rank 2 called
/// all_gather(count=1024, uint8)": the lower rank first, so every rank
/// reports one mismatch with the same words. Adds the algorithm or the
/// call number only when the calls differ in nothing else.
std::string describe_mismatch(const CallSig& a, const CallSig& b);

/// One direction of one pair of ranks: the calls that move data from the
/// sender to the receiver, in program order. Matching is FIFO because data
/// on an endpoint is matched FIFO; a collective that talks to the peer is
/// in both directions. `mine` holds this rank's signatures that wait for
/// the peer's, `theirs` the peer's that arrived before this rank's.
struct SigStream {
  std::deque<CallSig> mine, theirs;
  uint64_t pushed = 0;   // signatures of this rank ever pushed
  uint64_t matched = 0;  // of those, matched against the peer's
  /// Pairs up what can be paired. Returns false at the first disagreement,
  /// with the two signatures in `a` (this rank's) and `b` (the peer's).
  bool match(CallSig& a, CallSig& b);
};

}  // namespace chorus::core
