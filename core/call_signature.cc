#include "core/call_signature.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <chorus/chorus.h>

#include <cstdio>
#include <cstring>

namespace chorus::core {

std::string CallSig::describe(bool with_algo, bool with_seq) const {
  std::string s;
  if (is_unknown()) return "another call (its data did not carry this call's signature)";
  if (call == kSigSend || call == kSigRecv) {
    s = std::string(call == kSigSend ? "send(" : "recv(") + std::to_string(count) + " bytes " +
        (call == kSigSend ? "to" : "from") + " rank " + std::to_string(peer) + ")";
  } else {
    const char* name = chorus_collective_name(call);
    s = name ? name : "collective " + std::to_string(call);
    s += "(";
    if (call == CHORUS_COLL_ALL_TO_ALLV) {
      // Per-peer counts differ between ranks by design; only the dtype is compared.
      if (const char* d = chorus_dtype_name(dtype)) s += d;
    } else if (call != CHORUS_COLL_BARRIER) {
      s += "count=" + std::to_string(count);
      if (const char* d = chorus_dtype_name(dtype)) s += std::string(", ") + d;
      if (const char* o = chorus_op_name(op)) s += std::string(", ") + o;
      if (is_fused()) {
        char digest[16];
        std::snprintf(digest, sizeof(digest), "%08x", uint32_t(peer));
        s += ", fused from " + std::to_string(root) + " grouped calls, counts digest " + digest;
      } else if (root >= 0) {
        s += ", root=" + std::to_string(root);
      }
    }
    if (with_algo) {
      s += std::string(call != CHORUS_COLL_BARRIER ? ", " : "") + "algorithm ";
      s.append(algo, strnlen(algo, sizeof(algo)));
    }
    s += ")";
  }
  if (with_seq) s += " as call #" + std::to_string(seq);
  return s;
}

uint32_t signature_digest(const CallSig& sig) {
  // The fields signatures_agree compares, packed without padding; the rank
  // and the peer differ between the two sides and stay out.
  struct Packed {
    uint64_t seq, count;
    int32_t call, dtype, op, root, fused, pad;
    char algo[sizeof(CallSig::algo)];
  } p{};
  static_assert(sizeof(Packed) == 56);
  if (sig.is_fused()) p.fused = sig.peer;
  p.seq = sig.seq;
  p.count = sig.count;
  p.call = sig.call;
  p.dtype = sig.dtype;
  p.op = sig.op;
  p.root = sig.root;
  // As strncmp sees it: the name up to its NUL, zeros after.
  std::strncpy(p.algo, sig.algo, sizeof(p.algo) - 1);
  const uint64_t h = XXH3_64bits(&p, sizeof(p));
  const auto d = uint32_t(h ^ (h >> 32));
  return d != 0 ? d : 1;
}

uint32_t fused_digest(const uint64_t* counts, size_t n) {
  const uint64_t h = XXH3_64bits(counts, n * sizeof(uint64_t));
  return uint32_t(h ^ (h >> 32));
}

bool signatures_agree(const CallSig& mine, const CallSig& theirs) {
  if (mine.is_collective() || theirs.is_collective())
    return mine.call == theirs.call && mine.seq == theirs.seq && mine.count == theirs.count &&
           mine.dtype == theirs.dtype && mine.op == theirs.op && mine.root == theirs.root &&
           (!mine.is_fused() || mine.peer == theirs.peer) &&
           std::strncmp(mine.algo, theirs.algo, sizeof(mine.algo)) == 0;
  // A send on one side meets a receive of the same size on the other.
  return mine.call != theirs.call && mine.count == theirs.count;
}

std::string describe_mismatch(const CallSig& a, const CallSig& b) {
  const CallSig& lo = a.rank <= b.rank ? a : b;
  const CallSig& hi = a.rank <= b.rank ? b : a;
  bool with_algo = false, with_seq = false;
  if (lo.describe() == hi.describe()) {
    with_algo = std::strncmp(lo.algo, hi.algo, sizeof(lo.algo)) != 0;
    with_seq = !with_algo;
  }
  return "rank " + std::to_string(lo.rank) + " called " + lo.describe(with_algo, with_seq) +
         " but rank " + std::to_string(hi.rank) + " called " + hi.describe(with_algo, with_seq);
}

bool SigStream::match(CallSig& a, CallSig& b) {
  while (!mine.empty() && !theirs.empty()) {
    a = mine.front();
    b = theirs.front();
    // Collectives carry the communicator's call number. A collective may
    // leave a pair without traffic (all_to_allv with zero counts both ways,
    // a tree that skips it), so one side's signature can have no partner:
    // the older call number is dropped as matched. Calls that disagree are
    // still compared at equal call numbers (and on_signature compares a
    // peer's call with the one running here).
    if (a.is_collective() && b.is_collective() && a.seq != b.seq) {
      (a.seq < b.seq ? mine : theirs).pop_front();
      if (a.seq < b.seq) ++matched;
      continue;
    }
    mine.pop_front();
    theirs.pop_front();
    ++matched;
    if (!signatures_agree(a, b)) return false;
  }
  return true;
}

}  // namespace chorus::core
