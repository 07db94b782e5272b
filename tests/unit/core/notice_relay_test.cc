// Unit tests of which pairs hold a notice endpoint and of the relay's
// bookkeeping (core/notice_relay.h): pure arithmetic, no I/O.
#include "core/notice_relay.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using chorus::core::DataPeers;
using chorus::core::kNoticeFinalized;
using chorus::core::kNoticeMismatch;
using chorus::core::kNoticePeerLost;
using chorus::core::kNoticeSignature;
using chorus::core::kNoticeTimeout;
using chorus::core::notice_links;
using chorus::core::NoticeRelay;
using chorus::core::relay_index;

namespace {

/// The notice peers of `r`, computed pair by pair.
std::set<int> notice_peers(const DataPeers& d, int n, int r) {
  std::set<int> out;
  for (int p = 0; p < n; ++p)
    if (notice_links(d, n, r, p)) out.insert(p);
  return out;
}

}  // namespace

TEST_CASE("a ring-only communicator links each rank to its two ring neighbours", "[notice]") {
  for (int n = 1; n <= 17; ++n) {
    const DataPeers ring(CHORUS_ALGO_PEERS_RING, n);
    for (int r = 0; r < n; ++r) {
      const std::set<int> peers = notice_peers(ring, n, r);
      std::set<int> want;
      if (n > 1) want = {(r + 1) % n, (r + n - 1) % n};
      INFO("n = " << n << ", rank " << r);
      CHECK(peers == want);
      CHECK(peers.size() == size_t(std::min(2, n - 1)));
      for (int p = 0; p < n; ++p) CHECK(notice_links(ring, n, r, p) == notice_links(ring, n, p, r));
    }
  }
}

TEST_CASE("a communicator with data endpoints to every peer links every pair", "[notice]") {
  for (int n : {2, 3, 4, 9}) {
    const DataPeers all(CHORUS_ALGO_PEERS_ALL, n);
    for (int r = 0; r < n; ++r) CHECK(notice_peers(all, n, r).size() == size_t(n - 1));
  }
}

TEST_CASE("ranks out of range and self are never linked", "[notice]") {
  const DataPeers all(CHORUS_ALGO_PEERS_ALL, 4);
  CHECK_FALSE(notice_links(all, 4, 2, 2));
  CHECK_FALSE(notice_links(all, 4, -1, 0));
  CHECK_FALSE(notice_links(all, 4, 0, 4));
}

TEST_CASE("only the failure kinds are relayed", "[notice]") {
  CHECK(relay_index(kNoticePeerLost) == 0);
  CHECK(relay_index(kNoticeTimeout) == 1);
  CHECK(relay_index(kNoticeMismatch) == 2);
  CHECK(relay_index(kNoticeFinalized) == -1);
  CHECK(relay_index(kNoticeSignature) == -1);
}

TEST_CASE("the relay takes each (origin, kind) once", "[notice]") {
  NoticeRelay r;
  r.reset(3, 8);
  CHECK(r.left == 2);
  CHECK(r.right == 4);
  CHECK(r.first(5, kNoticePeerLost));
  CHECK_FALSE(r.first(5, kNoticePeerLost));   // the copy from the other direction
  CHECK(r.first(5, kNoticeTimeout));          // another kind of the same origin
  CHECK(r.first(6, kNoticePeerLost));         // another origin
  CHECK_FALSE(r.first(5, kNoticeFinalized));  // never relayed
  CHECK_FALSE(r.first(8, kNoticePeerLost));   // out of range
  CHECK_FALSE(r.first(-1, kNoticePeerLost));
  r.reset(3, 8);
  CHECK(r.first(5, kNoticePeerLost));  // a new communicator starts afresh

  NoticeRelay two;
  two.reset(0, 2);  // one neighbour, not two
  CHECK(two.left == 1);
  CHECK(two.right == -1);
  NoticeRelay one;
  one.reset(0, 1);
  CHECK(one.left == -1);
  CHECK(one.right == -1);
}
