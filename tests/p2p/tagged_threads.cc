// Cases "threads", "behind" and "behind_threads" of tagged_check: tagged operations and
// collectives from two threads of a rank on one communicator, and tagged
// operations issued while a collective that needs the partner is pending.
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

// ---- case: behind a pending collective ----

namespace {

/// all_reduce of one float64 per rank, checked: the sum 1 + 2 + ... + size.
void check_small_sum(double got, const std::string& what) {
  expect(got == double(g_size) * (g_size + 1) / 2, what + ": got " + std::to_string(got));
}

}  // namespace

/// Tagged operations issued while a collective on the same communicator
/// cannot finish yet: MPI lets them progress (MPI_Irecv after an
/// MPI_Iallreduce, or on another thread of an MPI_THREAD_MULTIPLE program),
/// and chorus.h says they "do not wait for their turn behind other
/// operations". In each step the partner joins the collective only after
/// the tagged operation has matched, so an operation that waits behind the
/// collective deadlocks (and fails with TIMEOUT after timeout.collective).
/// That leaves the communicator failed, and every later step would wait for
/// its own timeout too: a rank stops at its first failed step, and the
/// others then fail at once against its closed connections.
void case_behind() {
  for (size_t j = 0; j < kSizeCount; ++j) {
    for (int variant = 0; variant < 2; ++variant) {
      const int round = int(j) * 2 + variant;
      const Pair pr = pair_of(round);
      const int dtype = kDtypes[(j + 5) % kDtypeCount];
      const Size sz = sizes_for(dtype)[j];
      // variant 0: a's iall_reduce, then its irecv; b sends (blocking), then
      // joins. variant 1: a's iall_reduce, then its isend; b receives
      // (blocking), then joins.
      g_step = std::string(variant == 0 ? "iall_reduce, irecv | send, all_reduce"
                                        : "iall_reduce, isend | recv, all_reduce") +
               ", size " + size_text(sz.label, sz.count, dtype) + " with rank " +
               std::to_string(pr.peer);
      // A tag of its own per step: a message that went out late, after a
      // failed step, is not taken by a later one.
      const Step s{pr.peer, dtype, sz.count, 180 + round, uint64_t(7500 + round)};
      const double one = g_rank + 1;
      double sum = -1;
      if (pr.peer >= 0 && pr.first) {
        chorus_request_t* coll = nullptr;
        expect_rc(chorus_iall_reduce(g_comm, &one, &sum, 1, CHORUS_FLOAT64, CHORUS_SUM, &coll),
                  CHORUS_OK, "iall_reduce");
        if (variant == 0) {
          In i = s.in();
          irecv(i);
          wait_recv(i);
          s.check(i);
        } else {
          Out o = s.out();
          isend(o);
          wait_send(o);
        }
        if (expect_rc(chorus_wait(coll, -1), CHORUS_OK, "wait for iall_reduce"))
          check_small_sum(sum, "iall_reduce");
        chorus_request_free(coll);
      } else {
        if (pr.peer >= 0 && variant == 0) {
          Out o = s.out();
          send(o);
        } else if (pr.peer >= 0) {
          In i = s.in();
          recv(i);
          s.check(i);
        }
        if (expect_rc(chorus_all_reduce(g_comm, &one, &sum, 1, CHORUS_FLOAT64, CHORUS_SUM),
                      CHORUS_OK, "all_reduce"))
          check_small_sum(sum, "all_reduce");
      }
      barrier();
      if (g_case.failures > 0) return;  // stop at the first failed step
    }
  }
}

/// The same with two threads on a: one receives a message from b and
/// answers it while the other announces (marker) and runs an all_reduce. b
/// takes the marker, sends, receives the answer, and only then joins.
void case_behind_threads() {
  for (size_t j = 0; j < kSizeCount; ++j) {
    const Pair pr = pair_of(int(j));
    const int dtype = kDtypes[(j + 2) % kDtypeCount];
    const Size sz = sizes_for(dtype)[j];
    g_step = "two threads: recv, send | all_reduce; size " + size_text(sz.label, sz.count, dtype) +
             " with rank " + std::to_string(pr.peer);
    const Step ask{pr.peer, dtype, sz.count, 400 + 2 * int(j), uint64_t(7700 + j)};
    const Step answer{pr.peer, dtype, sz.count, 401 + 2 * int(j), uint64_t(7800 + j)};
    const double one = g_rank + 1;
    double sum = -1;
    if (pr.peer >= 0 && pr.first) {
      // The helper thread only calls the library; its checks run here.
      In got = ask.in();
      Out reply = answer.out();
      int rc_recv = CHORUS_OK, rc_send = CHORUS_OK;
      chorus_p2p_status_t st{-7, -7, 0};
      std::thread helper([&] {
        rc_recv = chorus_recv_tagged(g_comm, got.buf.data(), got.capacity, got.dtype, pr.peer,
                                     ask.tag, &st);
        rc_send = chorus_send_tagged(g_comm, reply.buf.data(), reply.count, reply.dtype, pr.peer,
                                     answer.tag);
      });
      Out m = marker_out(pr.peer, ask.salt);
      isend(m);
      if (expect_rc(chorus_all_reduce(g_comm, &one, &sum, 1, CHORUS_FLOAT64, CHORUS_SUM), CHORUS_OK,
                    "all_reduce"))
        check_small_sum(sum, "all_reduce");
      wait_send(m);
      helper.join();
      expect_rc(rc_send, CHORUS_OK, "the helper thread's " + send_text(reply));
      got.ok = expect_rc(rc_recv, CHORUS_OK, "the helper thread's " + recv_text(got));
      got.st = st;
      ask.check(got);
    } else {
      if (pr.peer >= 0) {
        take_marker(pr.peer, ask.salt);
        Out o = ask.out();
        send(o);
        In i = answer.in();
        recv(i);
        answer.check(i);
      }
      if (expect_rc(chorus_all_reduce(g_comm, &one, &sum, 1, CHORUS_FLOAT64, CHORUS_SUM), CHORUS_OK,
                    "all_reduce"))
        check_small_sum(sum, "all_reduce");
    }
    barrier();
    if (g_case.failures > 0) return;  // stop at the first failed step
  }
}

}  // namespace chorus::p2p_test
