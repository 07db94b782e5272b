// Non-blocking collectives through the C API, on N ranks (run under
// chorusrun; the stages that delay one rank need N >= 3).
//
//  outstanding: every kind of request in flight at once, blocking calls mixed
//               in between, every element checked on every rank;
//  rooted:      ireduce, igather, iscatter, iall_to_all and iall_to_allv in
//               flight at once through the C++ wrapper, the count/offset
//               arrays of iall_to_allv overwritten right after the issue;
//  ordering:    a blocking call returns only after the requests issued before
//               it completed;
//  test/wait:   chorus_test polls to completion; chorus_wait with a short
//               timeout returns CHORUS_ERR_AGAIN while a peer is late;
//  cancel:      a started request cannot be cancelled, a queued one can, and
//               everything issued after it then fails (on a child communicator);
//  abort:       chorus_comm_abort wakes a thread blocked in chorus_wait;
//  finalize:    finalizing with requests pending aborts them promptly.
//
// "Late" is an order here, not a sleep: the late rank waits on the world
// communicator (a barrier) until the others have made their checks. Time
// appears only as "not before the timeout" and as hang guards well past what
// an idle host needs.
#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

int g_failed = 0;
int g_rank = 0;
constexpr double kCollectiveTimeoutS = 20;  // timeout.collective, set in main

void expect(bool ok, const std::string& what) {
  if (!ok || std::getenv("NB_VERBOSE"))
    std::printf("r%d %s: %s\n", g_rank, ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

void expect_rc(int rc, int want, const std::string& what) {
  expect(rc == want, what + " -> " + chorus_status_name(rc) +
                         (rc != CHORUS_OK ? std::string(": ") + chorus_last_error() : ""));
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Distinct, exactly representable inputs per (rank, element, salt).
float fval(int rank, size_t i, int salt) { return float((rank + 1) * 3 + int(i % 97) + salt); }
int64_t ival(int rank, size_t i, int salt) {
  return int64_t(rank) * 1000003 + int64_t(i) * 7 + salt;
}

chorus_comm_t* split_all(chorus_comm_t* parent) {
  chorus_comm_t* child = nullptr;
  expect_rc(chorus_comm_split(parent, 0, 0, &child), CHORUS_OK, "split for a scratch communicator");
  return child;
}

void stage_outstanding(chorus_comm_t* comm, int rank, int n) {
  const size_t count = 4099;  // not a multiple of anything
  for (int round = 0; round < 3; ++round) {
    std::vector<float> ar_in(count), ar_out(count, -1.0f);
    std::vector<int32_t> ag_in(count), ag_out(count * size_t(n), -1);
    std::vector<int64_t> rs_in(count * size_t(n)), rs_out(count, -1);
    std::vector<double> bc(count, -1.0);
    std::vector<float> blk(count), blk_out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) {
      ar_in[i] = fval(rank, i, round);
      ag_in[i] = int32_t(rank * 100000 + int(i));
      blk[i] = fval(rank, i, 50 + round);
    }
    for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = ival(rank, i, round);
    const int root = (round + 1) % n;
    if (rank == root)
      for (size_t i = 0; i < count; ++i) bc[i] = 0.5 * double(i) + round;

    chorus_request_t *r_ar = nullptr, *r_ag = nullptr, *r_rs = nullptr, *r_bc = nullptr,
                     *r_bar = nullptr, *r_ip = nullptr;
    std::vector<float> ip(count);
    for (size_t i = 0; i < count; ++i) ip[i] = fval(rank, i, 9);
    expect_rc(chorus_iall_reduce(comm, ar_in.data(), ar_out.data(), count, CHORUS_FLOAT32,
                                 CHORUS_SUM, &r_ar),
              CHORUS_OK, "iall_reduce issue");
    expect_rc(chorus_iall_gather(comm, ag_in.data(), ag_out.data(), count, CHORUS_INT32, &r_ag),
              CHORUS_OK, "iall_gather issue");
    // A blocking call in the middle of the outstanding ones.
    expect_rc(
        chorus_all_reduce(comm, blk.data(), blk_out.data(), count, CHORUS_FLOAT32, CHORUS_MAX),
        CHORUS_OK, "blocking all_reduce between requests");
    int done = 0;
    expect_rc(chorus_test(r_ar, &done), CHORUS_OK,
              "test of an earlier request after a blocking call");
    expect(done == 1, "requests issued before a blocking call are complete when it returns");
    expect_rc(chorus_ireduce_scatter(comm, rs_in.data(), rs_out.data(), count, CHORUS_INT64,
                                     CHORUS_SUM, &r_rs),
              CHORUS_OK, "ireduce_scatter issue");
    expect_rc(chorus_ibroadcast(comm, bc.data(), count, CHORUS_FLOAT64, root, &r_bc), CHORUS_OK,
              "ibroadcast issue");
    expect_rc(chorus_ibarrier(comm, &r_bar), CHORUS_OK, "ibarrier issue");
    expect_rc(
        chorus_iall_reduce(comm, ip.data(), ip.data(), count, CHORUS_FLOAT32, CHORUS_MIN, &r_ip),
        CHORUS_OK, "in-place iall_reduce issue");

    // Complete them in an order different from the issue order.
    expect_rc(chorus_wait(r_ip, -1), CHORUS_OK, "wait in-place all_reduce");
    expect_rc(chorus_wait(r_bar, -1), CHORUS_OK, "wait barrier");
    for (;;) {  // poll one to completion with chorus_test
      int d = 0;
      int rc = chorus_test(r_rs, &d);
      if (d) {
        expect_rc(rc, CHORUS_OK, "test reduce_scatter");
        break;
      }
      expect_rc(rc, CHORUS_OK, "test while pending");
      sleep_ms(1);
    }
    expect_rc(chorus_wait(r_bc, 10000), CHORUS_OK, "wait broadcast");
    expect_rc(chorus_wait(r_ag, -1), CHORUS_OK, "wait all_gather");
    expect_rc(chorus_wait(r_ar, 0), CHORUS_OK, "wait(0) on a completed request");
    expect_rc(chorus_wait(r_ar, -1), CHORUS_OK, "waiting twice returns the status again");

    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float s = 0, mx = -1e30f, mn = 1e30f;
      for (int r = 0; r < n; ++r) {
        s += fval(r, i, round);
        mx = std::max(mx, fval(r, i, 50 + round));
        mn = std::min(mn, fval(r, i, 9));
      }
      wrong += ar_out[i] != s;
      wrong += blk_out[i] != mx;
      wrong += ip[i] != mn;
      wrong += bc[i] != 0.5 * double(i) + round;
      int64_t rs = 0;
      for (int r = 0; r < n; ++r) rs += ival(r, size_t(rank) * count + i, round);
      wrong += rs_out[i] != rs;
      for (int r = 0; r < n; ++r)
        wrong += ag_out[size_t(r) * count + i] != int32_t(r * 100000 + int(i));
    }
    expect(wrong == 0, "round " + std::to_string(round) +
                           ": every element of 6 concurrent results (" + std::to_string(wrong) +
                           " wrong)");
    for (auto* r : {r_ar, r_ag, r_rs, r_bc, r_bar, r_ip}) chorus_request_free(r);
  }

  // Many small requests in flight, each with its own buffer, freed in bulk.
  const int k = 32;
  std::vector<std::vector<int32_t>> bufs(k, std::vector<int32_t>(17));
  std::vector<chorus_request_t*> reqs(k);
  for (int j = 0; j < k; ++j) {
    for (size_t i = 0; i < 17; ++i) bufs[size_t(j)][i] = int32_t(rank + j + int(i));
    expect_rc(chorus_iall_reduce(comm, bufs[size_t(j)].data(), bufs[size_t(j)].data(), 17,
                                 CHORUS_INT32, CHORUS_SUM, &reqs[size_t(j)]),
              CHORUS_OK, "small iall_reduce issue");
  }
  size_t wrong = 0;
  for (int j = k - 1; j >= 0; --j) {
    expect_rc(chorus_wait(reqs[size_t(j)], -1), CHORUS_OK, "small iall_reduce wait");
    chorus_request_free(reqs[size_t(j)]);
    for (size_t i = 0; i < 17; ++i)
      wrong += bufs[size_t(j)][i] != int32_t(n * (n - 1) / 2 + n * (j + int(i)));
  }
  expect(wrong == 0,
         "32 outstanding small all_reduces: every element (" + std::to_string(wrong) + " wrong)");

  // Argument errors are reported at issue and leave nothing queued.
  chorus_request_t* bad = nullptr;
  expect_rc(chorus_ibroadcast(comm, bufs[0].data(), 17, CHORUS_INT32, n + 5, &bad),
            CHORUS_ERR_INVALID_ARGUMENT, "ibroadcast with a bad root fails at issue");
  expect(bad == nullptr, "no request handle on an issue error");
  expect_rc(chorus_iall_reduce(comm, nullptr, nullptr, 5, CHORUS_FLOAT32, CHORUS_SUM, &bad),
            CHORUS_ERR_INVALID_ARGUMENT, "iall_reduce with NULL buffers fails at issue");

  // isend/irecv, ordered so that one side receives first.
  if (n >= 2) {
    std::vector<int64_t> out(1000), in(1000, -1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = ival(rank, i, 77);
    int right = (rank + 1) % n, left = (rank - 1 + n) % n;
    chorus_request_t *a = nullptr, *b = nullptr;
    if (rank % 2 == 0) {
      expect_rc(chorus_isend(comm, out.data(), out.size(), CHORUS_INT64, right, &a), CHORUS_OK,
                "isend");
      expect_rc(chorus_irecv(comm, in.data(), in.size(), CHORUS_INT64, left, &b), CHORUS_OK,
                "irecv");
    } else {
      expect_rc(chorus_irecv(comm, in.data(), in.size(), CHORUS_INT64, left, &b), CHORUS_OK,
                "irecv");
      expect_rc(chorus_isend(comm, out.data(), out.size(), CHORUS_INT64, right, &a), CHORUS_OK,
                "isend");
    }
    // With n odd, rank n-1 and rank 0 both send first, but the chain still
    // resolves: rank 1 receives first, so rank 0's send completes and its
    // receive from rank n-1 follows.
    expect_rc(chorus_wait(a, -1), CHORUS_OK, "wait isend");
    expect_rc(chorus_wait(b, -1), CHORUS_OK, "wait irecv");
    size_t bad_elems = 0;
    for (size_t i = 0; i < in.size(); ++i) bad_elems += in[i] != ival(left, i, 77);
    expect(bad_elems == 0, "irecv data from the left neighbour, every element");
    chorus_request_free(a);
    chorus_request_free(b);
  }
}

// test/wait timeouts and cancellation, on a scratch communicator. Rank 0 is
// late: it enters the barrier on `c` only after a barrier on `world` that the
// others enter once they have seen their barrier on `c` pending, failed to
// cancel it (started), cancelled the request queued behind it and issued one
// more. Then they see that last request refused.
void stage_cancel(chorus_comm_t* world, int rank) {
  chorus_comm_t* c = split_all(world);
  if (!c) return;
  if (rank == 0) {
    expect_rc(chorus_barrier(world), CHORUS_OK, "late rank waits for the others' checks");
    expect_rc(chorus_barrier(c), CHORUS_OK, "late rank's blocking barrier");
  } else {
    chorus_request_t *r1 = nullptr, *r2 = nullptr, *r3 = nullptr;
    float x[4] = {1, 2, 3, 4};
    expect_rc(chorus_ibarrier(c, &r1), CHORUS_OK, "ibarrier issue");
    expect_rc(chorus_iall_reduce(c, x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, &r2), CHORUS_OK,
              "iall_reduce issue behind it");
    auto t0 = std::chrono::steady_clock::now();
    expect_rc(chorus_wait(r1, 200), CHORUS_ERR_AGAIN, "wait(200 ms) while rank 0 is late");
    const double waited = since(t0);
    expect(waited >= 0.19 && waited < 2.0,
           "wait with a timeout returns once it has passed, not before (" + std::to_string(waited) +
               " s)");
    int done = 1;
    expect_rc(chorus_test(r1, &done), CHORUS_OK, "test while pending");
    expect(done == 0, "test reports pending");
    expect_rc(chorus_cancel(r1), CHORUS_ERR_NOT_SUPPORTED,
              "cancel of a started request is refused");
    expect_rc(chorus_cancel(r2), CHORUS_OK, "cancel of a queued request");
    expect_rc(chorus_test(r2, &done), CHORUS_ERR_ABORTED, "cancelled request completes as aborted");
    expect(done == 1, "cancelled request is done");
    expect(x[0] == 1 && x[3] == 4, "cancelled request never touched its buffer");
    expect_rc(chorus_cancel(r2), CHORUS_ERR_NOT_SUPPORTED, "cancel twice is refused");
    expect_rc(chorus_iall_reduce(c, x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, &r3), CHORUS_OK,
              "issue after cancel");
    expect_rc(chorus_barrier(world), CHORUS_OK, "let rank 0 in");
    expect_rc(chorus_wait(r1, -1), CHORUS_OK, "the started barrier completes once rank 0 arrives");
    expect_rc(chorus_wait(r3, 5000), CHORUS_ERR_ABORTED,
              "requests issued after a cancelled one fail");
    expect(std::strstr(chorus_last_error(), "cancelled") != nullptr,
           std::string("the error says why: ") + chorus_last_error());
    for (auto* r : {r1, r2, r3}) chorus_request_free(r);
  }
  chorus_comm_finalize(c);
}

// chorus_comm_abort from another thread wakes a waiter; finalize with pending
// requests aborts them. Rank 1 does both alone on scratch communicators.
void stage_abort_and_finalize(chorus_comm_t* world, int rank) {
  chorus_comm_t* d = split_all(world);
  chorus_comm_t* e = split_all(world);
  if (!d || !e) return;
  if (rank == 1) {
    chorus_request_t* r = nullptr;
    expect_rc(chorus_ibarrier(d, &r), CHORUS_OK, "ibarrier nobody else joins");
    std::atomic<bool> aborted{false};
    std::chrono::steady_clock::time_point t_abort;
    std::thread aborter([&] {
      sleep_ms(300);
      t_abort = std::chrono::steady_clock::now();
      aborted = true;
      chorus_comm_abort(d);
    });
    expect_rc(chorus_wait(r, -1), CHORUS_ERR_ABORTED, "abort wakes chorus_wait");
    const bool after_abort = aborted;
    aborter.join();
    expect(after_abort, "woken only once the abort was called");
    // The barrier would otherwise end at timeout.collective (kCollectiveTimeoutS).
    expect(since(t_abort) < kCollectiveTimeoutS / 2,
           "woken promptly (" + std::to_string(since(t_abort)) + " s after the abort)");
    chorus_request_t* later = nullptr;
    expect_rc(chorus_ibarrier(d, &later), CHORUS_OK, "issue after abort");
    expect_rc(chorus_wait(later, 5000), CHORUS_ERR_ABORTED, "requests after abort fail");
    chorus_request_free(r);
    chorus_request_free(later);

    chorus_request_t *p1 = nullptr, *p2 = nullptr;
    std::vector<float> y(1000, 1.0f);
    expect_rc(chorus_ibarrier(e, &p1), CHORUS_OK, "pending ibarrier before finalize");
    expect_rc(chorus_iall_reduce(e, y.data(), y.data(), y.size(), CHORUS_FLOAT32, CHORUS_SUM, &p2),
              CHORUS_OK, "pending iall_reduce before finalize");
    sleep_ms(50);
    const auto t0 = std::chrono::steady_clock::now();
    expect_rc(chorus_comm_finalize(e), CHORUS_OK, "finalize with pending requests");
    // Without the abort, the running barrier would hold finalize until
    // timeout.collective.
    expect(since(t0) < kCollectiveTimeoutS / 2,
           "finalize with pending requests returns promptly (" + std::to_string(since(t0)) + " s)");
    int done = 0;
    expect_rc(chorus_test(p1, &done), CHORUS_ERR_ABORTED, "running request aborted by finalize");
    expect(done == 1, "it is done");
    expect_rc(chorus_test(p2, &done), CHORUS_ERR_ABORTED, "queued request aborted by finalize");
    expect(y[0] == 1.0f && y[999] == 1.0f, "the queued request never touched its buffer");
    expect_rc(chorus_cancel(p2), CHORUS_ERR_NOT_SUPPORTED,
              "cancel after finalize is refused safely");
    chorus_request_free(p1);
    chorus_request_free(p2);
    e = nullptr;
  }
  // The others keep d and e open until rank 1 is done, so what rank 1 sees
  // comes from abort and finalize, not from peers closing their endpoints.
  expect_rc(chorus_barrier(world), CHORUS_OK, "world barrier after the abort/finalize stage");
  chorus_comm_finalize(d);
  chorus_comm_finalize(e);
}

}  // namespace

/// Never called: makes the compiler instantiate and type-check chorus.hpp's
/// wrappers of the minor-1 collectives (typed and untyped).
[[maybe_unused]] void wrapper_compiles(chorus::Communicator& c, float* f, int64_t* i, size_t* z) {
  c.reduce(f, f, 1, 0);
  c.reduce(f, f, 1, CHORUS_FLOAT32, CHORUS_SUM, 0);
  c.gather(i, i, 1, 0);
  c.scatter(i, i, 1, 0);
  c.all_to_all(f, f, 1);
  c.all_to_allv(f, z, z, f, z, z);
  chorus::Request r = c.ireduce(f, f, 1, 0, CHORUS_MAX);
  r = c.igather(f, f, 1, CHORUS_FLOAT32, 0);
  r = c.iscatter(f, f, 1, CHORUS_FLOAT32, 0);
  r = c.iall_to_all(f, f, 1, CHORUS_FLOAT32);
  r = c.iall_to_allv(f, z, z, f, z, z, CHORUS_FLOAT32);
}

/// Wraps the request a chorus_i* call just made; chorus::Request owns and waits it.
chorus::Request take(int rc, chorus_request_t** r, const char* what) {
  expect_rc(rc, CHORUS_OK, what);
  return chorus::Request(std::exchange(*r, nullptr));
}

/// The minor-1 collectives as requests, all outstanding at once.
void stage_rooted(chorus_comm_t* comm, int rank, int n) {
  const size_t count = 1031;
  const int root = n / 2;
  std::vector<float> r_in(count), r_out(count, -1.0f);
  std::vector<int64_t> g_in(count), g_out(count * size_t(n), -1);
  std::vector<double> s_in(count * size_t(n)), s_out(count, -1.0);
  std::vector<int32_t> a_in(count * size_t(n)), a_out(count * size_t(n), -1);
  std::vector<int32_t> v_in(size_t(n) * 3), v_out(size_t(n) * 3, -1);
  for (size_t i = 0; i < count; ++i) {
    r_in[i] = fval(rank, i, 3);
    g_in[i] = ival(rank, i, 4);
  }
  for (size_t i = 0; i < s_in.size(); ++i) s_in[i] = 0.25 * double(i) + rank;
  for (size_t i = 0; i < a_in.size(); ++i) a_in[i] = int32_t(rank * 1000000 + int(i));
  // all_to_allv: rank r sends peer p (r + p) % 3 elements, packed.
  auto sends = [](int from, int to) { return size_t((from + to) % 3); };
  const size_t ranks = static_cast<size_t>(n);
  std::vector<size_t> sc(ranks), so(ranks), rc(ranks), ro(ranks);
  for (int p = 0, at = 0, to = 0; p < n; ++p) {
    sc[size_t(p)] = sends(rank, p), so[size_t(p)] = size_t(at), at += int(sc[size_t(p)]);
    rc[size_t(p)] = sends(p, rank), ro[size_t(p)] = size_t(to), to += int(rc[size_t(p)]);
  }
  for (size_t i = 0; i < v_in.size(); ++i) v_in[i] = int32_t(rank * 1000 + int(i));
  try {
    chorus_request_t* h = nullptr;
    // take() reads `h` only after the call that sets it has returned.
    chorus::Request rr =
        take(chorus_ireduce(comm, r_in.data(), rank == root ? r_out.data() : nullptr, count,
                            CHORUS_FLOAT32, CHORUS_MAX, root, &h),
             &h, "ireduce issue");
    chorus::Request rg =
        take(chorus_igather(comm, g_in.data(), rank == root ? g_out.data() : nullptr, count,
                            CHORUS_INT64, root, &h),
             &h, "igather issue");
    chorus::Request rs = take(chorus_iscatter(comm, rank == root ? s_in.data() : nullptr,
                                              s_out.data(), count, CHORUS_FLOAT64, root, &h),
                              &h, "iscatter issue");
    chorus::Request ra =
        take(chorus_iall_to_all(comm, a_in.data(), a_out.data(), count, CHORUS_INT32, &h), &h,
             "iall_to_all issue");
    chorus::Request rv =
        take(chorus_iall_to_allv(comm, v_in.data(), sc.data(), so.data(), v_out.data(), rc.data(),
                                 ro.data(), CHORUS_INT32, &h),
             &h, "iall_to_allv issue");
    const std::vector<size_t> ro_kept = ro, rc_kept = rc;
    // The request holds its own copies of the arrays.
    std::fill(sc.begin(), sc.end(), size_t(7777));
    std::fill(ro.begin(), ro.end(), size_t(0));
    rv.wait();
    ra.wait();
    rs.wait();
    rg.wait();
    rr.wait();
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (rank == root) {
        float mx = -1e30f;
        for (int r = 0; r < n; ++r) mx = std::max(mx, fval(r, i, 3));
        wrong += r_out[i] != mx;
        for (int r = 0; r < n; ++r) wrong += g_out[size_t(r) * count + i] != ival(r, i, 4);
      }
      wrong += s_out[i] != 0.25 * double(size_t(rank) * count + i) + root;
      for (int r = 0; r < n; ++r)
        wrong += a_out[size_t(r) * count + i] != int32_t(r * 1000000 + rank * int(count) + int(i));
    }
    for (int p = 0; p < n; ++p) {
      size_t their_off = 0;  // where p's block for this rank starts in p's input
      for (int q = 0; q < rank; ++q) their_off += sends(p, q);
      for (size_t j = 0; j < rc_kept[size_t(p)]; ++j)
        wrong += v_out[ro_kept[size_t(p)] + j] != int32_t(p * 1000 + int(their_off + j));
    }
    expect(wrong == 0, "5 concurrent rooted/all_to_all requests (" + std::to_string(wrong) +
                           " wrong elements)");
  } catch (const chorus::Error& e) {
    expect(false, std::string("rooted requests: ") + e.what());
  }
}

int main() {
  static_assert(kCollectiveTimeoutS == 20, "keep in step with the setting below");
  const char* settings[] = {"timeout.collective = 20"};
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings;
  opts.settings_count = 1;
  chorus_comm_t* world = nullptr;
  if (chorus_comm_init(&opts, &world) != CHORUS_OK) {
    std::fprintf(stderr, "init: %s\n", chorus_last_error());
    return 1;
  }
  int rank = 0, n = 1;
  chorus_comm_rank(world, &rank);
  chorus_comm_size(world, &n);
  g_rank = rank;
  auto t0 = std::chrono::steady_clock::now();
  stage_outstanding(world, rank, n);
  stage_rooted(world, rank, n);
  if (n >= 3) {
    stage_cancel(world, rank);
    stage_abort_and_finalize(world, rank);
  }
  // Everyone agrees on the outcome (and the world is still healthy).
  int failed = g_failed;
  expect_rc(chorus_all_reduce(world, &failed, &failed, 1, CHORUS_INT32, CHORUS_SUM), CHORUS_OK,
            "final all_reduce of failure counts");
  if (rank == 0)
    std::printf("nonblocking_check: %d ranks, %d failure(s), %.2f s\n", n, failed, since(t0));
  chorus_comm_finalize(world);
  return failed == 0 && g_failed == 0 ? 0 : 1;
}
