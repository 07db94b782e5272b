// The ring schedules, checked without any transport: every chunk ends where
// it must, and each send forwards exactly what the previous step received.
#include <catch2/catch.hpp>

#include "algorithms/ring/ring_schedule.h"

#include <set>
#include <vector>

using namespace chorus::ring;

TEST_CASE("split covers the range exactly, larger parts first", "[ring]") {
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

TEST_CASE("all_reduce schedule: the left neighbour sends what this rank receives", "[ring]") {
  for (int size : {2, 3, 4, 5, 8}) {
    for (int u = 0; u < all_reduce_steps(size); ++u) {
      for (int r = 0; r < size; ++r) {
        Step mine = all_reduce_step(r, size, u);
        Step left = all_reduce_step(mod(r - 1, size), size, u);
        CHECK(mine.recv_chunk == left.send_chunk);
        CHECK(mine.reduce == (u < size - 1));
        if (u > 0) CHECK(mine.send_chunk == all_reduce_step(r, size, u - 1).recv_chunk);
      }
    }
  }
}

TEST_CASE("all_reduce schedule: every chunk is reduced over every rank exactly once", "[ring]") {
  for (int size : {2, 3, 4, 7}) {
    // contributions[r][c] = set of ranks whose data chunk c at rank r holds
    std::vector<std::vector<std::set<int>>> held(static_cast<size_t>(size), std::vector<std::set<int>>(static_cast<size_t>(size)));
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) held[size_t(r)][size_t(c)] = {r};
    for (int u = 0; u < all_reduce_steps(size); ++u) {
      auto before = held;
      for (int r = 0; r < size; ++r) {
        Step st = all_reduce_step(r, size, u);
        int left = mod(r - 1, size);
        const auto& incoming = before[size_t(left)][size_t(st.recv_chunk)];
        auto& mine = held[size_t(r)][size_t(st.recv_chunk)];
        if (st.reduce) {
          for (int x : incoming) {
            CHECK(mine.count(x) == 0);  // nothing counted twice
            mine.insert(x);
          }
        } else {
          mine = incoming;
        }
      }
    }
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) CHECK(held[size_t(r)][size_t(c)].size() == size_t(size));
  }
}

TEST_CASE("reduce_scatter schedule ends with the own block fully reduced", "[ring]") {
  for (int size : {2, 3, 4, 6}) {
    std::vector<std::vector<std::set<int>>> held(static_cast<size_t>(size), std::vector<std::set<int>>(static_cast<size_t>(size)));
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) held[size_t(r)][size_t(c)] = {r};
    for (int u = 0; u < reduce_scatter_steps(size); ++u) {
      auto before = held;
      for (int r = 0; r < size; ++r) {
        Step st = reduce_scatter_step(r, size, u);
        CHECK(st.recv_chunk == reduce_scatter_step(mod(r - 1, size), size, u).send_chunk);
        for (int x : before[size_t(mod(r - 1, size))][size_t(st.recv_chunk)])
          held[size_t(r)][size_t(st.recv_chunk)].insert(x);
        if (u > 0) CHECK(st.send_chunk == reduce_scatter_step(r, size, u - 1).recv_chunk);
      }
    }
    for (int r = 0; r < size; ++r) CHECK(held[size_t(r)][size_t(r)].size() == size_t(size));
  }
}

TEST_CASE("all_gather schedule delivers every block to every rank", "[ring]") {
  for (int size : {2, 3, 5}) {
    std::vector<std::set<int>> have(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) have[size_t(r)] = {r};
    for (int u = 0; u < all_gather_steps(size); ++u) {
      auto before = have;
      for (int r = 0; r < size; ++r) {
        Step st = all_gather_step(r, size, u);
        int left = mod(r - 1, size);
        CHECK(before[size_t(left)].count(st.recv_chunk) == 1);  // the sender has it
        CHECK(st.recv_chunk == all_gather_step(left, size, u).send_chunk);
        have[size_t(r)].insert(st.recv_chunk);
      }
    }
    for (int r = 0; r < size; ++r) CHECK(have[size_t(r)].size() == size_t(size));
  }
}

TEST_CASE("broadcast pipeline: root sends, the last rank only receives", "[ring]") {
  for (int size : {2, 3, 4}) {
    for (int root = 0; root < size; ++root) {
      int senders = 0, receivers = 0;
      for (int r = 0; r < size; ++r) {
        Step st = broadcast_step(r, size, root);
        senders += st.send_chunk >= 0;
        receivers += st.recv_chunk >= 0;
        if (r == root) CHECK(st.recv_chunk == -1);
        if (r == mod(root - 1, size)) CHECK(st.send_chunk == -1);
      }
      CHECK(senders == size - 1);
      CHECK(receivers == size - 1);
    }
  }
}

// The reverse ring: every rank receives from its right neighbour, and the
// schedules still end with the same blocks in the same places.
TEST_CASE("reverse ring: all_gather delivers every block, received from the right", "[ring]") {
  for (int size : {3, 4, 5}) {
    std::vector<std::set<int>> have(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) have[size_t(r)] = {r};
    for (int u = 0; u < all_gather_steps(size); ++u) {
      auto before = have;
      for (int r = 0; r < size; ++r) {
        Step st = directed_step(all_gather_step, r, size, u, true);
        int right = mod(r + 1, size);
        CHECK(st.recv_chunk == directed_step(all_gather_step, right, size, u, true).send_chunk);
        CHECK(before[size_t(right)].count(st.recv_chunk) == 1);
        have[size_t(r)].insert(st.recv_chunk);
      }
    }
    for (int r = 0; r < size; ++r) CHECK(have[size_t(r)].size() == size_t(size));
  }
}

TEST_CASE("reverse ring: reduce_scatter ends with the own block fully reduced", "[ring]") {
  for (int size : {3, 4, 6}) {
    std::vector<std::vector<std::set<int>>> held(static_cast<size_t>(size),
                                                 std::vector<std::set<int>>(static_cast<size_t>(size)));
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) held[size_t(r)][size_t(c)] = {r};
    for (int u = 0; u < reduce_scatter_steps(size); ++u) {
      auto before = held;
      for (int r = 0; r < size; ++r) {
        Step st = directed_step(reduce_scatter_step, r, size, u, true);
        int right = mod(r + 1, size);
        CHECK(st.recv_chunk == directed_step(reduce_scatter_step, right, size, u, true).send_chunk);
        for (int x : before[size_t(right)][size_t(st.recv_chunk)])
          held[size_t(r)][size_t(st.recv_chunk)].insert(x);
        if (u > 0)
          CHECK(st.send_chunk == directed_step(reduce_scatter_step, r, size, u - 1, true).recv_chunk);
      }
    }
    for (int r = 0; r < size; ++r) CHECK(held[size_t(r)][size_t(r)].size() == size_t(size));
  }
}

TEST_CASE("reverse ring: all_reduce reduces every chunk over every rank", "[ring]") {
  for (int size : {3, 5}) {
    // held[r][c]: the ranks whose contribution chunk c on rank r contains.
    std::vector<std::vector<std::set<int>>> held(static_cast<size_t>(size),
                                                 std::vector<std::set<int>>(static_cast<size_t>(size)));
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) held[size_t(r)][size_t(c)] = {r};
    for (int u = 0; u < all_reduce_steps(size); ++u) {
      auto before = held;
      for (int r = 0; r < size; ++r) {
        Step st = directed_step(all_reduce_step, r, size, u, true);
        int right = mod(r + 1, size);
        CHECK(st.recv_chunk == directed_step(all_reduce_step, right, size, u, true).send_chunk);
        auto& mine = held[size_t(r)][size_t(st.recv_chunk)];
        const auto& incoming = before[size_t(right)][size_t(st.recv_chunk)];
        if (st.reduce) {
          for (int x : incoming) {
            CHECK(mine.count(x) == 0);  // nobody's contribution is added twice
            mine.insert(x);
          }
        } else {
          mine = incoming;
        }
      }
    }
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) CHECK(held[size_t(r)][size_t(c)].size() == size_t(size));
  }
}

TEST_CASE("reverse ring: broadcast flows from the root to its left", "[ring]") {
  for (int size : {3, 4}) {
    for (int root = 0; root < size; ++root) {
      for (int r = 0; r < size; ++r) {
        Step st = mirror_chunks(broadcast_step(mirror(r, size), size, mirror(root, size)), size);
        if (r == root) CHECK(st.recv_chunk == -1);
        // In the reverse ring the last rank of the pipeline is the root's right neighbour.
        if (r == mod(root + 1, size)) CHECK(st.send_chunk == -1);
        if (r != root && r != mod(root + 1, size)) CHECK((st.send_chunk == 0 && st.recv_chunk == 0));
      }
    }
  }
}

namespace {

/// The chunks a rank sends (or receives) in step order, skipping empty steps:
/// what the executor puts on (or expects from) the wire, one chunk after the
/// other.
template <class F>
std::vector<int> sequence(int steps, F step, bool send) {
  std::vector<int> out;
  for (int u = 0; u < steps; ++u) {
    Step st = step(u);
    int c = send ? st.send_chunk : st.recv_chunk;
    if (c >= 0) out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("reduce schedule: a chain ending at the root, each rank once", "[ring]") {
  for (int size : {2, 3, 4, 7}) {
    for (int root : {0, size / 2, size - 1}) {
      // contributions the chunk holds at each rank after the single step
      std::vector<std::set<int>> held(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) held[size_t(r)] = {r};
      // The chain order: rank root+1 first; each rank adds what its left sent.
      for (int k = 1; k < size; ++k) {
        int r = mod(root + 1 + k, size), left = mod(r - 1, size);
        Step mine = reduce_step(r, size, root), theirs = reduce_step(left, size, root);
        REQUIRE(mine.recv_chunk == 0);
        REQUIRE(theirs.send_chunk == 0);
        CHECK(mine.reduce);
        for (int x : held[size_t(left)]) {
          CHECK(held[size_t(r)].count(x) == 0);
          held[size_t(r)].insert(x);
        }
      }
      CHECK(held[size_t(root)].size() == size_t(size));
      CHECK(reduce_step(root, size, root).send_chunk == -1);
      CHECK(reduce_step(mod(root + 1, size), size, root).recv_chunk == -1);
    }
  }
}

TEST_CASE("gather and scatter schedules: neighbours agree, data is there before it is sent",
          "[ring]") {
  for (int size : {2, 3, 4, 5, 8}) {
    for (int root : {0, size / 2, size - 1}) {
      for (bool scatter : {false, true}) {
        auto step = [&](int r, int u) {
          return scatter ? scatter_step(r, size, root, u) : gather_step(r, size, root, u);
        };
        const int steps = scatter ? scatter_steps(size) : gather_steps(size);
        std::vector<std::set<int>> have(static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) {
          if (!scatter) have[size_t(r)] = {r};
          if (scatter && r == root)
            for (int c = 0; c < size; ++c) have[size_t(r)].insert(c);
        }
        for (int r = 0; r < size; ++r) {
          int left = mod(r - 1, size);
          CHECK(sequence(
                    steps, [&](int u) { return step(r, u); }, false) ==
                sequence(
                    steps, [&](int u) { return step(left, u); }, true));
        }
        // Every send forwards what an earlier (or the same) step received, or
        // data the rank had from the start.
        for (int r = 0; r < size; ++r)
          for (int u = 0; u < steps; ++u) {
            Step st = step(r, u);
            if (st.send_chunk < 0) continue;
            if (st.send_after >= 0) {
              CHECK(st.send_after <= u);
              CHECK(step(r, st.send_after).recv_chunk == st.send_chunk);
            } else {
              CHECK(have[size_t(r)].count(st.send_chunk) == 1);
            }
          }
        for (int r = 0; r < size; ++r)
          for (int u = 0; u < steps; ++u)
            if (int c = step(r, u).recv_chunk; c >= 0) have[size_t(r)].insert(c);
        if (scatter) {
          for (int r = 0; r < size; ++r) CHECK(have[size_t(r)].count(r) == 1);
          // scratch slots: distinct and in range for the blocks passing through
          for (int r = 0; r < size; ++r) {
            if (r == root) continue;
            std::set<int> slots;
            for (int c : have[size_t(r)])
              if (c != r) {
                int s = scatter_slot(c, r, size, root) - 1;
                CHECK(s >= 0);
                CHECK(s < size - 1 - mod(r - root, size));
                slots.insert(s);
              }
            CHECK(slots.size() + 1 == have[size_t(r)].size());
          }
        } else {
          CHECK(have[size_t(root)].size() == size_t(size));
          for (int r = 0; r < size; ++r) {
            if (r == root) continue;
            for (int c : have[size_t(r)])
              if (c != r) CHECK(gather_slot(c, size, root) < mod(r - root - 1, size));
          }
        }
      }
    }
  }
}

TEST_CASE("all_to_all over the ring: every block reaches its rank once, forwarded as it lands",
          "[ring]") {
  for (int size : {2, 3, 4, 5, 8}) {
    const int steps = a2a_steps(size);
    // identity of the data moved: (origin, destination)
    auto sent_id = [&](int r, int k) {
      int u = 0, i = k;
      while (i >= size - 1 - u) i -= size - 1 - u, ++u;
      return std::pair<int, int>{mod(r - u, size), mod(r + 1 + i, size)};
    };
    for (int r = 0; r < size; ++r) {
      int left = mod(r - 1, size);
      std::set<int> got_from;
      std::set<int> chunks;
      for (int k = 0; k < steps; ++k) {
        A2aStep mine = a2a_step_at(r, size, k);
        // what arrives here at step k is what the left neighbour sends there
        CHECK(std::pair<int, int>{mine.origin, mine.dest} == sent_id(left, k));
        CHECK(chunks.insert(mine.step.recv_chunk).second);  // one chunk per arrival
        if (mine.dest == r) {
          CHECK(mine.step.recv_chunk == size + mine.origin);
          CHECK(got_from.insert(mine.origin).second);
        } else {
          CHECK(mine.step.recv_chunk >= 2 * size);
        }
        // a forwarded block is the one an earlier step received
        if (mine.step.send_after >= 0) {
          CHECK(mine.step.send_after < k);
          A2aStep earlier = a2a_step_at(r, size, mine.step.send_after);
          CHECK(earlier.step.recv_chunk == mine.step.send_chunk);
          CHECK(std::pair<int, int>{earlier.origin, earlier.dest} == sent_id(r, k));
        } else {
          CHECK(sent_id(r, k).first == r);
          CHECK(mine.step.send_chunk == sent_id(r, k).second);
        }
      }
      CHECK(got_from.size() == size_t(size - 1));
      CHECK(got_from.count(r) == 0);
    }
  }
}
