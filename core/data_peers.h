// DataPeers: which pairs of ranks of a communicator have data endpoints, from
// the union of the `peers` declarations of the algorithms that may run on it.
// Pure arithmetic on (rule, size), the same on every rank, so both ends of a
// pair agree on whether the pair is connected and on the shape of each
// other's address table.
#pragma once

#include <chorus/algorithm.h>

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::core {

class DataPeers {
 public:
  DataPeers() = default;
  /// `rule`: CHORUS_ALGO_PEERS_RING or _ALL (anything else reads as ALL).
  DataPeers(uint32_t rule, int size)
      : ring_(rule == CHORUS_ALGO_PEERS_RING), size_(size > 0 ? size : 1) {}

  /// True when the rule is RING (whatever the size: at 3 ranks or fewer a
  /// ring's neighbours are every other rank anyway).
  bool ring() const { return ring_; }

  /// Whether ranks `a` and `b` have data endpoints to each other. Symmetric;
  /// false for a == b and for ranks out of range.
  bool links(int a, int b) const {
    if (a == b || a < 0 || b < 0 || a >= size_ || b >= size_) return false;
    if (!ring_) return true;
    return b == (a + 1) % size_ || a == (b + 1) % size_;
  }

  /// The peers rank `r` has data endpoints to, ascending, each once.
  std::vector<int> of(int r) const {
    std::vector<int> out;
    if (!ring_) {
      for (int p = 0; p < size_; ++p)
        if (p != r) out.push_back(p);
      return out;
    }
    const int left = (r - 1 + size_) % size_, right = (r + 1) % size_;
    for (int p : {left < right ? left : right, left < right ? right : left})
      if (p != r && (out.empty() || out.back() != p)) out.push_back(p);
    return out;
  }

  /// "ranks 3 and 5", "rank 1", "every other rank": whom rank `r` reaches.
  std::string describe(int r) const {
    if (!ring_) return "every other rank";
    const std::vector<int> peers = of(r);
    if (peers.empty()) return "no other rank";
    if (peers.size() == 1) return "rank " + std::to_string(peers[0]);
    std::string s = "ranks ";
    for (size_t i = 0; i < peers.size(); ++i)
      s += (i == 0 ? "" : i + 1 == peers.size() ? " and " : ", ") + std::to_string(peers[i]);
    return s;
  }

 private:
  bool ring_ = false;
  int size_ = 1;
};

}  // namespace chorus::core
