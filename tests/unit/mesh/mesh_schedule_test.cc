// The mesh schedules, checked without any transport: both ends of every
// endpoint agree on the messages, every element ends where it must, the
// reduction order is fixed, the staging cells fit, and the barrier's tokens
// reach everyone.
#include <catch2/catch.hpp>

#include <chorus/algorithm_sdk.hpp>

#include "algorithms/mesh/mesh_schedule.h"

#include <set>
#include <string>
#include <vector>

using namespace chorus::mesh;

namespace {

constexpr Kind kKinds[] = {Kind::kAllReduceOneShot, Kind::kAllReduce, Kind::kReduceScatter,
                           Kind::kAllGather,        Kind::kBroadcast, Kind::kReduceOneShot,
                           Kind::kReduce,           Kind::kGather,    Kind::kScatter};

/// Marks the elements of `r` in `hits`, counting how often each is covered.
void cover(std::vector<int>& hits, Range r) {
  REQUIRE(r.offset + r.count <= hits.size());
  for (size_t i = r.offset; i < r.offset + r.count; ++i) ++hits[i];
}

}  // namespace

TEST_CASE("split covers the range exactly, larger parts first", "[mesh]") {
  for (size_t total : {0u, 1u, 5u, 7u, 100u, 101u}) {
    for (int parts : {1, 2, 3, 4, 5, 8}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        Range r = split(total, parts, i);
        CHECK(r.offset == next);
        next += r.count;
        CHECK(r.count >= total / size_t(parts));
        CHECK(r.count <= total / size_t(parts) + 1);
      }
      CHECK(next == total);
    }
  }
}

TEST_CASE("lanes and pieces tile a range in order", "[mesh]") {
  for (size_t count : {0u, 1u, 3u, 64u, 1000u}) {
    Range whole{17, count};
    for (int lanes : {1, 2, 3, 8}) {
      size_t next = whole.offset;
      for (int l = 0; l < lanes; ++l) {
        Range s = lane_slice(whole, lanes, l);
        for (size_t piece : {1u, 7u, 64u}) {
          size_t at = s.offset;
          for (size_t k = 0; k < piece_count(s.count, piece); ++k) {
            Range p = piece_of(s, piece, k);
            CHECK(p.offset == at);
            CHECK(p.count >= 1);
            CHECK(p.count <= piece);
            at += p.count;
          }
          CHECK(at == s.offset + s.count);
        }
        CHECK(s.offset == next);
        next += s.count;
      }
      CHECK(next == whole.offset + whole.count);
    }
  }
}

TEST_CASE("work-request ids round-trip through the SDK's wr_id and stay in the task's bits",
          "[mesh]") {
  using chorus::sdk::WrId;
  struct Post {
    bool send;
    int lane;
    int peer;
    size_t seq;
  };
  const int max_peer = int(WrId::kPeerMask);
  for (Post p :
       {Post{false, 0, 0, 0}, Post{true, 63, 5, 7}, Post{false, kMaxLanes - 1, max_peer, 0},
        Post{true, 1, 1 << 19, size_t(kSeqMask)}}) {
    const uint64_t wr = WrId::pack(p.send, p.peer, post_index(p.lane, p.seq));
    CHECK((wr & ~uint64_t(CHORUS_ALGO_WR_ID_MASK)) == 0);
    CHECK(WrId::is_send(wr) == p.send);
    CHECK(WrId::peer(wr) == p.peer);
    CHECK(index_lane(WrId::index(wr)) == p.lane);
    CHECK(seq_matches(WrId::index(wr), p.seq));
    CHECK_FALSE(seq_matches(WrId::index(wr), p.seq + 1));
  }
  // Sequence numbers wrap at 2^28: a long stream still matches its posts.
  const size_t far = (size_t(1) << kSeqBits) * 3 + 5;
  const uint64_t index = WrId::index(WrId::pack(false, 2, post_index(4, far)));
  CHECK(index_lane(index) == 4);
  CHECK(seq_matches(index, far));
  CHECK(seq_matches(index, 5));
  CHECK_FALSE(seq_matches(index, far - 1));
}

TEST_CASE("peer order visits every other rank once, starting right of the rank", "[mesh]") {
  for (int size : {2, 3, 5, 8}) {
    for (int r = 0; r < size; ++r) {
      std::set<int> seen;
      std::set<int> cells;
      for (int i = 0; i < size - 1; ++i) {
        int p = peer_at(r, size, i);
        CHECK(p != r);
        seen.insert(p);
        int c = peer_index(r, p);
        CHECK(c >= 0);
        CHECK(c < size - 1);
        cells.insert(c);
      }
      CHECK(peer_at(r, size, 0) == mod(r + 1, size));
      CHECK(seen.size() == size_t(size - 1));
      CHECK(cells.size() == size_t(size - 1));
    }
  }
}

TEST_CASE("both ends of every endpoint agree on the messages", "[mesh]") {
  for (Kind kind : kKinds) {
    for (int size : {2, 3, 4, 5, 7}) {
      for (size_t count : {0u, 1u, 2u, 5u, 7u, 100u, 1001u}) {
        for (int root = 0; root < size; ++root) {
          for (int a = 0; a < size; ++a) {
            for (int b = 0; b < size; ++b) {
              if (a == b) continue;
              Exchange ab = exchange(kind, a, size, b, count, root);
              Exchange ba = exchange(kind, b, size, a, count, root);
              // a -> b: reduce part then gather part, as b expects them.
              CHECK(ab.reduce_send.count == ba.reduce_recv.count);
              CHECK(ab.gather_send.count == ba.gather_recv.count);
              // Split the same way into lanes and pieces, the messages match.
              for (int lanes : {1, 3}) {
                for (int l = 0; l < lanes; ++l) {
                  for (size_t piece : {1u, 4u, 64u}) {
                    CHECK(piece_count(lane_slice(ab.reduce_send, lanes, l).count, piece) ==
                          piece_count(lane_slice(ba.reduce_recv, lanes, l).count, piece));
                    CHECK(piece_count(lane_slice(ab.gather_send, lanes, l).count, piece) ==
                          piece_count(lane_slice(ba.gather_recv, lanes, l).count, piece));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a contribution carries the elements the receiver reduces", "[mesh]") {
  for (int size : {2, 3, 4, 5, 7}) {
    for (size_t count : {0u, 1u, 2u, 5u, 7u, 100u}) {
      for (int a = 0; a < size; ++a) {
        for (int b = 0; b < size; ++b) {
          if (a == b) continue;
          // all_reduce: input and output have the same layout.
          for (Kind kind : {Kind::kAllReduceOneShot, Kind::kAllReduce}) {
            Exchange ab = exchange(kind, a, size, b, count, 0);
            CHECK(ab.reduce_send == reduction(kind, b, size, count).result);
            CHECK(ab.reduce_send == reduction(kind, b, size, count).own);
          }
          // reduce_scatter: a sends block b of its input; b's own part is block b too.
          Exchange ab = exchange(Kind::kReduceScatter, a, size, b, count, 0);
          CHECK(ab.reduce_send == reduction(Kind::kReduceScatter, b, size, count).own);
        }
      }
    }
  }
}

TEST_CASE("reductions receive into the result's shape and gather from it", "[mesh]") {
  for (Kind kind : kKinds) {
    for (int size : {2, 3, 5}) {
      for (size_t count : {0u, 1u, 4u, 7u, 100u}) {
        for (int r = 0; r < size; ++r) {
          Reduction red = reduction(kind, r, size, count);
          CHECK(red.own.count == red.result.count);
          if (!reduces(kind)) CHECK(red.result.count == 0);
          for (int p = 0; p < size; ++p) {
            if (p == r) continue;
            Exchange x = exchange(kind, r, size, p, count, 0);
            if (reduces(kind)) {
              // Cells for piece k of the result come from every peer alike.
              CHECK(x.reduce_recv == red.result);
              // A gathered piece k is the reduced piece k.
              if (x.gather_send.count) CHECK(x.gather_send == red.result);
            } else {
              CHECK(x.reduce_send.count == 0);
              CHECK(x.reduce_recv.count == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("every output element is produced exactly once", "[mesh]") {
  for (int size : {1, 2, 3, 4, 5, 7}) {
    for (size_t count : {0u, 1u, 2u, 5u, 7u, 100u}) {
      for (int r = 0; r < size; ++r) {
        // all_reduce (both forms): own reduction + gathered chunks = everything.
        for (Kind kind : {Kind::kAllReduceOneShot, Kind::kAllReduce}) {
          std::vector<int> hits(count, 0);
          cover(hits, reduction(kind, r, size, count).result);
          for (int p = 0; p < size; ++p)
            if (p != r) cover(hits, exchange(kind, r, size, p, count, 0).gather_recv);
          for (int h : hits) CHECK(h == 1);
        }
        // reduce_scatter: the whole output is the own reduction.
        CHECK(reduction(Kind::kReduceScatter, r, size, count).result == Range{0, count});
        // all_gather: own block (copied locally) + every peer's block.
        std::vector<int> hits(size_t(size) * count, 0);
        cover(hits, Range{size_t(r) * count, count});
        for (int p = 0; p < size; ++p)
          if (p != r) cover(hits, exchange(Kind::kAllGather, r, size, p, count, 0).gather_recv);
        for (int h : hits) CHECK(h == 1);
        // broadcast: non-roots receive everything from the root only.
        for (int root = 0; root < size; ++root) {
          std::vector<int> b(count, 0);
          for (int p = 0; p < size; ++p) {
            if (p == r) continue;
            Exchange x = exchange(Kind::kBroadcast, r, size, p, count, root);
            cover(b, x.gather_recv);
            CHECK(x.gather_send == (r == root ? Range{0, count} : Range{}));
          }
          for (int h : b) CHECK(h == (r == root ? 0 : 1));
        }
      }
    }
  }
}

TEST_CASE("all_reduce chunks: rank r reduces chunk r and every peer gets it", "[mesh]") {
  for (int size : {2, 3, 4, 5, 8}) {
    for (size_t count : {1u, 3u, 8u, 9u, 1000u}) {
      for (int r = 0; r < size; ++r) {
        CHECK(reduction(Kind::kAllReduce, r, size, count).result == split(count, size, r));
        for (int p = 0; p < size; ++p) {
          if (p == r) continue;
          Exchange x = exchange(Kind::kAllReduce, r, size, p, count, 0);
          CHECK(x.reduce_send == split(count, size, p));
          CHECK(x.gather_recv == split(count, size, p));
        }
      }
    }
  }
}

TEST_CASE("contributions are applied in rank order from rank 0", "[mesh]") {
  for (int size : {1, 2, 3, 5, 8}) {
    std::string result;
    std::vector<int> order;
    reduce_in_rank_order(
        size,
        [&](int j) {
          result = std::to_string(j);
          order.push_back(j);
        },
        [&](int j) {
          result = "(" + result + "+" + std::to_string(j) + ")";
          order.push_back(j);
        });
    std::string expect = "0";
    for (int j = 1; j < size; ++j) expect = "(" + expect + "+" + std::to_string(j) + ")";
    CHECK(result == expect);
    for (int j = 0; j < size; ++j) CHECK(order[size_t(j)] == j);
  }
}

TEST_CASE("staging cells fit the slots, never overlap and keep pieces in flight", "[mesh]") {
  for (size_t slots : {2u, 3u, 8u, 64u}) {
    for (size_t slot_size : {4096u, 5000u, 65536u, 1u << 20}) {
      for (int channels : {1, 2, 4}) {
        for (int peers : {1, 2, 3, 7, 63, 1000}) {
          for (uint64_t max_msg : {uint64_t(1) << 40, uint64_t(16384), uint64_t(4096)}) {
            CellLayout l = cell_layout(slots, slot_size, channels, peers, max_msg);
            CAPTURE(slots, slot_size, channels, peers, max_msg);
            CHECK(l.peers == peers);
            CHECK(l.piece_bytes % kCellAlign == 0);
            CHECK(l.piece_bytes > 0);
            CHECK(l.piece_bytes <= max_msg);
            CHECK(l.groups >= kWantGroups);
            CHECK(l.groups <= kMaxGroups);
            CHECK((l.lanes == channels || l.lanes == 1));
            if (!l.temporary) {
              CHECK(l.piece_bytes >= kMinPiece);
              CHECK(l.cells() <= slots * l.cells_per_slot);
              CellPlace last = cell_place(l, l.cells() - 1);
              CHECK(last.slot < slots);
              CHECK(last.offset + l.piece_bytes <= slot_size);
            } else {
              CHECK(cell_place(l, l.cells() - 1).slot == 0);
            }
            std::set<std::pair<size_t, size_t>> seen;
            for (int lane = 0; lane < l.lanes; ++lane)
              for (size_t g = 0; g < l.groups; ++g)
                for (int p = 0; p < peers; ++p) {
                  CellPlace at = cell_place(l, cell_index(l, lane, g, p));
                  CHECK(at.offset % kCellAlign == 0);
                  seen.insert({at.slot, at.offset});
                }
            CHECK(seen.size() == l.cells());
          }
        }
      }
    }
  }
}

TEST_CASE("the default staging gives each channel double-buffered megabyte pieces", "[mesh]") {
  CellLayout l = cell_layout(8, 1u << 20, 1, 3, uint64_t(1) << 40);
  CHECK_FALSE(l.temporary);
  CHECK(l.piece_bytes == (1u << 20));
  CHECK(l.groups == 2);
  CHECK(direct_piece_bytes(1u << 20, uint64_t(1) << 40, 8) == (1u << 20));
  CHECK(direct_piece_bytes(1u << 20, 1000, 8) == 960);
  CHECK(direct_piece_bytes(5000, uint64_t(1) << 40, 4) == 4992);
}

TEST_CASE("barrier: partners pair up and every rank hears from every rank", "[mesh]") {
  for (int size = 1; size <= 20; ++size) {
    for (int radix = 2; radix <= size + 2; ++radix) {
      CAPTURE(size, radix);
      int rounds = barrier_rounds(size, radix);
      // known[r] = ranks r has (transitively) heard from.
      std::vector<std::set<int>> known(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) known[size_t(r)] = {r};
      for (int k = 0; k < rounds; ++k) {
        auto before = known;  // a token of round k carries what its sender knew before it
        for (int r = 0; r < size; ++r) {
          std::set<int> from, to;
          for (int j = 1; j < radix; ++j) {
            int d = barrier_distance(size, radix, k, j);
            if (d == 0) continue;
            CHECK(d < size);
            from.insert(mod(r - d, size));
            to.insert(mod(r + d, size));
            for (int x : before[size_t(mod(r - d, size))]) known[size_t(r)].insert(x);
          }
          CHECK(int(from.size()) == barrier_fanout(size, radix, k));
          CHECK(int(to.size()) == barrier_fanout(size, radix, k));
          CHECK(from.count(r) == 0);
        }
      }
      for (int r = 0; r < size; ++r) CHECK(known[size_t(r)].size() == size_t(size));
      // Within one barrier a rank hears from each peer at most once, so one
      // token per endpoint and direction keeps consecutive barriers matched.
      std::set<int> all_from;
      int total = 0;
      for (int k = 0; k < rounds; ++k)
        for (int j = 1; j < radix; ++j)
          if (int d = barrier_distance(size, radix, k, j); d > 0) {
            all_from.insert(d);
            ++total;
          }
      CHECK(int(all_from.size()) == total);
    }
  }
  CHECK(barrier_rounds(1, 2) == 0);
  CHECK(barrier_rounds(2, 2) == 1);
  CHECK(barrier_rounds(5, 2) == 3);
  CHECK(barrier_rounds(8, 2) == 3);
  CHECK(barrier_rounds(9, 2) == 4);
  CHECK(barrier_rounds(5, 5) == 1);
  for (int size : {2, 4, 64}) CHECK(default_barrier_radix(size) == 2);
}

TEST_CASE("rooted collectives: the root's output is produced exactly once", "[mesh]") {
  for (int size : {2, 3, 4, 5, 7}) {
    for (size_t count : {0u, 1u, 2u, 5u, 7u, 100u}) {
      for (int root = 0; root < size; ++root) {
        for (int r = 0; r < size; ++r) {
          // reduce, both forms: the own reduction plus the chunks gathered to
          // the root cover the output once there; off the root nothing is
          // received into the output.
          for (Kind kind : {Kind::kReduceOneShot, Kind::kReduce}) {
            std::vector<int> hits(count, 0);
            Reduction red = reduction(kind, r, size, count, root);
            if (r == root) cover(hits, red.result);
            for (int p = 0; p < size; ++p) {
              if (p == r) continue;
              Exchange x = exchange(kind, r, size, p, count, root);
              if (r != root) CHECK(x.gather_recv.count == 0);
              cover(hits, x.gather_recv);
              // only the root receives gathered results
              if (p != root) CHECK(x.gather_send.count == 0);
            }
            for (int h : hits) CHECK(h == (r == root ? 1 : 0));
            if (kind == Kind::kReduceOneShot && r != root) CHECK(red.result.count == 0);
          }
          // gather: every peer's block lands once on the root, at its place.
          std::vector<int> g(size_t(size) * count, 0);
          cover(g, Range{size_t(r) * count, count});
          for (int p = 0; p < size; ++p)
            if (p != r) cover(g, exchange(Kind::kGather, r, size, p, count, root).gather_recv);
          for (size_t i = 0; i < g.size(); ++i)
            CHECK(g[i] == (r == root ? 1 : (i / std::max<size_t>(count, 1) == size_t(r) ? 1 : 0)));
          // scatter: a non-root receives its block, from the root only.
          std::vector<int> sc(count, 0);
          for (int p = 0; p < size; ++p) {
            if (p == r) continue;
            Exchange x = exchange(Kind::kScatter, r, size, p, count, root);
            cover(sc, x.gather_recv);
            if (r == root) CHECK(x.gather_send == Range{size_t(p) * count, count});
          }
          for (int h : sc) CHECK(h == (r == root ? 0 : 1));
        }
      }
    }
  }
}
