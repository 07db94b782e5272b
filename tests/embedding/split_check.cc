// chorus_comm_split on 4 ranks (run under chorusrun -n 4), through the C++
// wrapper:
//  - even/odd split with reversed keys: child rank and size follow (key,
//    parent rank);
//  - collectives on the child and on the parent at the same time, from two
//    threads, blocking and non-blocking, every element checked;
//  - CHORUS_UNDEFINED gets no communicator while the others get one;
//  - a split of a child (grandchild) works;
//  - counters: per-peer bytes agree across ranks (what r sent to p is what p
//    received from r), collective counts are exact and separate per child.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_failed = 0;
int g_rank = 0;

void expect(bool ok, const std::string& what) {
  if (!ok || std::getenv("SPLIT_VERBOSE"))
    std::printf("r%d %s: %s\n", g_rank, ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

std::map<std::string, uint64_t> counter_map(const chorus::Communicator& c) {
  std::map<std::string, uint64_t> m;
  for (auto& [k, v] : c.counters()) m[k] = v;
  return m;
}

uint64_t ops_of(const std::map<std::string, uint64_t>& m, const std::string& coll) {
  uint64_t n = 0;
  for (auto& [k, v] : m)
    if (k.rfind("ops." + coll + ".", 0) == 0) n += v;
  return n;
}

// Child work: `iters` all_reduces (alternating blocking / non-blocking) and an
// all_gather of parent ranks, checked against what the members contribute.
void child_work(chorus::Communicator& child, const std::vector<int>& members, int prank,
                int iters) {
  const size_t count = 3001;
  size_t wrong = 0;
  for (int it = 0; it < iters; ++it) {
    std::vector<int64_t> x(count), y(count, -1);
    for (size_t i = 0; i < count; ++i) x[i] = int64_t(prank) * 100000 + int64_t(i) + it;
    if (it % 2) {
      auto req = child.iall_reduce(x.data(), y.data(), count, CHORUS_SUM);
      req.wait();
    } else {
      child.all_reduce(x.data(), y.data(), count, CHORUS_SUM);
    }
    for (size_t i = 0; i < count; ++i) {
      int64_t want = 0;
      for (int p : members) want += int64_t(p) * 100000 + int64_t(i) + it;
      wrong += y[i] != want;
    }
  }
  std::vector<int32_t> g(members.size(), -1);
  int32_t me = prank;
  child.all_gather(&me, g.data(), 1, CHORUS_INT32);
  for (size_t r = 0; r < members.size(); ++r) wrong += g[r] != members[r];
  expect(wrong == 0, "child " + std::string(child.id()) + ": " + std::to_string(iters) +
                         " all_reduces and an all_gather, every element (" + std::to_string(wrong) +
                         " wrong)");
}

void parent_work(chorus::Communicator& world, int rank, int n, int iters) {
  const size_t count = 2503;
  size_t wrong = 0;
  for (int it = 0; it < iters; ++it) {
    std::vector<float> a(count), b(count * size_t(n), -1.0f);
    for (size_t i = 0; i < count; ++i) a[i] = float(rank * 10 + int(i % 50) + it);
    auto r1 = world.iall_gather(a.data(), b.data(), count, CHORUS_FLOAT32);
    std::vector<float> s(a);
    world.all_reduce(s.data(), s.data(), count, CHORUS_MAX);
    r1.wait();
    for (size_t i = 0; i < count; ++i) {
      wrong += s[i] != float((n - 1) * 10 + int(i % 50) + it);
      for (int r = 0; r < n; ++r)
        wrong += b[size_t(r) * count + i] != float(r * 10 + int(i % 50) + it);
    }
  }
  expect(wrong == 0, "parent: " + std::to_string(iters) +
                         " all_gather + all_reduce pairs concurrently with "
                         "the child, every element (" +
                         std::to_string(wrong) + " wrong)");
}

}  // namespace

int main() {
  try {
    chorus::Communicator world(-1, -1, "", {"timeout.collective = 20"});
    const int rank = world.rank(), n = world.size();
    g_rank = rank;
    if (n != 4) {
      std::fprintf(stderr, "split_check needs 4 ranks, got %d\n", n);
      return 2;
    }
    auto t0 = std::chrono::steady_clock::now();

    // Even/odd, keys reversed: child ranks are in descending parent rank.
    chorus::Communicator half = world.split(rank % 2, -rank);
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r)
      if (r % 2 == rank % 2) members.push_back(r);
    int want_rank = int(std::find(members.begin(), members.end(), rank) - members.begin());
    expect(half.handle() != nullptr, "even/odd split gives a communicator");
    expect(half.size() == 2 && half.rank() == want_rank,
           "child rank " + std::to_string(half.rank()) + " of " + std::to_string(half.size()) +
               ", expected " + std::to_string(want_rank) + " of 2");
    expect(std::string(half.id()) == "w0.s0c" + std::to_string(rank % 2),
           std::string("child id ") + half.id());

    // The child and the parent at the same time, from two threads.
    const int iters = 12;
    std::thread child_thread([&] {
      try {
        child_work(half, members, rank, iters);
      } catch (const chorus::Error& e) {
        expect(false, std::string("child thread: ") + e.what());
      }
    });
    try {
      parent_work(world, rank, n, iters);
    } catch (const chorus::Error& e) {
      expect(false, std::string("parent thread: ") + e.what());
    }
    child_thread.join();

    // Counters of the child: exact collective counts, and per-peer bytes that
    // agree with what the peer saw. Snapshot before any more child traffic.
    auto hc = counter_map(half);
    expect(ops_of(hc, "all_reduce") == uint64_t(iters),
           "child counted " + std::to_string(ops_of(hc, "all_reduce")) + " all_reduces, expected " +
               std::to_string(iters));
    expect(ops_of(hc, "all_gather") == 1, "child counted exactly one all_gather");
    expect(hc["requests.issued"] == uint64_t(iters / 2), "child counted its non-blocking requests");
    uint64_t peer = uint64_t(1 - half.rank());
    std::string p = "peer." + std::to_string(peer) + ".";
    expect(hc[p + "bytes_sent"] > 0 && hc[p + "bytes_sent"] == hc["bytes_sent"],
           "child: all bytes went to the one peer (" + std::to_string(hc[p + "bytes_sent"]) + ")");
    expect(hc["errors"] == 0, "child: no errors counted");
    // Exchange (sent to p, received from p) over the parent and compare.
    auto wc = counter_map(world);
    std::vector<uint64_t> mine(size_t(2 * n), 0), all(size_t(2 * n * n), 0);
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      mine[size_t(2 * q)] = wc["peer." + std::to_string(q) + ".bytes_sent"];
      mine[size_t(2 * q + 1)] = wc["peer." + std::to_string(q) + ".bytes_received"];
    }
    // Traffic of this gather itself would skew the snapshot, so the snapshot
    // was taken before it and the gather is not counted in it.
    world.all_gather(mine.data(), all.data(), mine.size(), CHORUS_UINT64);
    size_t mismatched = 0;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        if (a != b)
          mismatched += all[size_t(a * 2 * n + 2 * b)] != all[size_t(b * 2 * n + 2 * a + 1)];
    expect(mismatched == 0,
           "parent: bytes r sent to p == bytes p received from r, for every pair (" +
               std::to_string(mismatched) + " mismatched)");
    expect(ops_of(wc, "all_gather") >= uint64_t(iters), "parent counted its all_gathers");

    // CHORUS_UNDEFINED: rank 3 stays out; the other three form one group
    // ranked by parent rank (equal keys).
    chorus::Communicator three = world.split(rank == 3 ? CHORUS_UNDEFINED : 7, 0);
    if (rank == 3) {
      expect(three.handle() == nullptr, "CHORUS_UNDEFINED gets no communicator");
    } else {
      expect(three.handle() != nullptr && three.size() == 3 && three.rank() == rank,
             "three-rank child, ranked by parent rank on equal keys");
      if (three.handle()) {
        double v = rank + 0.25, s = 0;
        three.all_reduce(&v, &s, 1, CHORUS_SUM);
        expect(s == 0.25 * 3 + 0 + 1 + 2, "all_reduce on the three-rank child");
        // Grandchild: split the child again (everyone together, reversed).
        chorus::Communicator g = three.split(0, -three.rank());
        expect(g.size() == 3 && g.rank() == 2 - three.rank(), "grandchild ranks follow the keys");
        int32_t mine_r = rank, got[3] = {-1, -1, -1};
        g.all_gather(&mine_r, got, 1, CHORUS_INT32);
        expect(got[0] == 2 && got[1] == 1 && got[2] == 0,
               "grandchild all_gather in grandchild order");
        expect(std::string(g.id()) == "w0.s1c7.s0c0", std::string("grandchild id ") + g.id());
      }
    }

    // The parent is still fine after all that, and a child outlives a
    // finished use of the parent.
    int32_t f = g_failed;
    world.all_reduce(&f, &f, 1, CHORUS_SUM);
    half.barrier();
    if (rank == 0)
      std::printf("split_check: %d failure(s), %.2f s\n", f,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return f == 0 && g_failed == 0 ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "r%d: %s\n", g_rank, e.what());
    return 1;
  }
}
