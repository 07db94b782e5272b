// Case "threads" of tagged_check: tagged operations and collectives from
// two threads of a rank on one communicator.
#include "tagged_harness.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus::p2p_test {

// ---- case: threads ----

/// Tagged ping-pong with a partner that changes every iteration on one
/// thread, checked all_reduces on another, both on the world communicator
/// through the C++ wrapper (chorus.hpp). Both threads record their results
/// under a lock; they are reported once the helper thread has ended.
void case_threads(Communicator& world) {
  std::mutex report_mu;
  constexpr int kPingPongs = 48;
  constexpr int kAllReduces = 40;
  std::vector<std::string> failures;
  long checks = 0;
  auto report = [&](bool ok, const std::string& what) {
    std::lock_guard lock(report_mu);
    ++checks;
    if (!ok) failures.push_back(what);
  };
  std::thread pinger([&] {
    for (int it = 0; it < kPingPongs; ++it) {
      const Pair pr = pair_of(it);
      if (pr.peer < 0) continue;
      const int dtype = kDtypes[size_t(it) % kDtypeCount];
      const size_t count = sizes_for(dtype)[size_t(it) % kSizeCount].count;
      const size_t esize = chorus_dtype_size(dtype);
      const int tag = 300 + it % 50;
      const std::string what = "ping-pong " + std::to_string(it) + " with rank " +
                               std::to_string(pr.peer) + ", " + std::to_string(count) + " x " +
                               chorus_dtype_name(dtype);
      std::vector<unsigned char> out(count * esize), in(count * esize, kSentinel);
      fill(out.data(), out.size(), key_of(g_rank, pr.peer, tag, 8000 + uint64_t(it)));
      try {
        chorus_p2p_status_t st{};
        if (pr.first) {
          chorus::Request r = world.isend_tagged(out.data(), count, dtype, pr.peer, tag);
          st = world.recv_tagged(in.data(), count, dtype, pr.peer, tag);
          r.wait();
        } else {
          chorus::Request r = world.irecv_tagged(in.data(), count, dtype, CHORUS_ANY_SOURCE, tag);
          r.wait();
          st = r.p2p_status();
          world.send_tagged(out.data(), count, dtype, pr.peer, tag);
        }
        report(st.source == pr.peer && st.tag == tag && st.count == count,
               what + ": status (" + std::to_string(st.source) + ", " + std::to_string(st.tag) +
                   ", " + std::to_string(st.count) + ")");
        const uint64_t key = key_of(pr.peer, g_rank, tag, 8000 + uint64_t(it));
        std::vector<unsigned char> want(count * esize);
        fill(want.data(), want.size(), key);
        size_t bad = 0;
        while (bad < want.size() && want[bad] == in[bad]) ++bad;
        report(bad == want.size(),
               what + ": first wrong element " + std::to_string(bad / std::max<size_t>(1, esize)));
      } catch (const chorus::Error& e) {
        report(false, what + ": " + e.what());
      }
    }
  });
  for (int it = 0; it < kAllReduces; ++it) {
    const size_t count = it % 3 == 0 ? 100000 : it % 3 == 1 ? 1 : 3001;
    std::vector<int64_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = int64_t(g_rank) * 1000003 + int64_t(i) * 7 + it;
    try {
      world.all_reduce(in.data(), out.data(), count);
      const int64_t ranks = int64_t(g_size) * (g_size - 1) / 2;
      size_t bad = 0;
      while (bad < count && out[bad] == ranks * 1000003 + int64_t(g_size) * (int64_t(bad) * 7 + it))
        ++bad;
      report(bad == count, "all_reduce " + std::to_string(it) + " of " + std::to_string(count) +
                               " int64: first wrong element " + std::to_string(bad));
    } catch (const chorus::Error& e) {
      report(false, "all_reduce " + std::to_string(it) + ": " + e.what());
    }
  }
  pinger.join();
  g_step = "two threads";
  g_case.checks += checks;
  for (const auto& f : failures) fail(f);
  barrier();
}

}  // namespace chorus::p2p_test
