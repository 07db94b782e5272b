// Which pairs of ranks hold a notice endpoint, and the state of the notice
// relay (core/peer_notices.cc): a rank forwards each failure notice (peer
// lost, timeout, mismatch) it learns to its ring neighbours once, so notices
// reach every rank without an endpoint to every peer. Private to the core.
#pragma once

#include "core/data_peers.h"
#include "core/notice_wire.h"

#include <cstdint>
#include <vector>

namespace chorus::core {

/// Whether ranks `a` and `b` of `size` ranks hold a notice endpoint to each
/// other: ring neighbours always (the relay's path), and every pair with
/// data endpoints (a call's signatures travel on the pair's notice
/// endpoint). Symmetric and pure arithmetic, the same on every rank.
inline bool notice_links(const DataPeers& data, int size, int a, int b) {
  if (a == b || a < 0 || b < 0 || a >= size || b >= size) return false;
  return b == (a + 1) % size || a == (b + 1) % size || data.links(a, b);
}

/// The relayed kinds, numbered for NoticeRelay::seen and the relay slots;
/// -1 for kinds that go to one peer only (signatures, "finalized").
inline int relay_index(uint32_t kind) {
  switch (kind) {
    case kNoticePeerLost:
      return 0;
    case kNoticeTimeout:
      return 1;
    case kNoticeMismatch:
      return 2;
    default:
      return -1;
  }
}
constexpr int kRelayKinds = 3;

struct NoticeRelay {
  std::vector<uint8_t> seen;        // [origin]: bit relay_index(kind) once taken in or sent
  std::vector<char> reported_lost;  // [rank]: some notice named it lost
  int out = 0;                      // relayed sends not yet completed or failed
  int left = -1, right = -1;        // ring neighbours (-1 when there is none)
  bool goodbye = false;             // say_goodbye began: nothing more is relayed

  void reset(int rank, int size) {
    seen.assign(size_t(size), 0);
    reported_lost.assign(size_t(size), 0);
    out = 0;
    goodbye = false;
    left = size > 1 ? (rank - 1 + size) % size : -1;
    right = size > 1 ? (rank + 1) % size : -1;
    if (right == left) right = -1;  // two ranks: one neighbour
  }
  /// Marks (origin, kind) as known; false when it already was (a duplicate).
  bool first(int origin, uint32_t kind) {
    const int i = relay_index(kind);
    if (i < 0 || origin < 0 || size_t(origin) >= seen.size()) return false;
    const uint8_t bit = uint8_t(1u << i);
    if (seen[size_t(origin)] & bit) return false;
    seen[size_t(origin)] |= bit;
    return true;
  }
};

}  // namespace chorus::core
