// Collectives in flight on lanes (collectives.lanes, issue #18 part 2), on N
// >= 2 ranks under chorusrun with CHORUS_COLLECTIVES_LANES set to the lane
// count the test expects (--lanes). Every result is checked element by
// element on every rank against values computed here from (rank, index,
// salt), never copied from another rank's buffer.
//
// Cases:
//   concurrent  two non-blocking all_reduces both running at once on rank 0
//               (lanes.running reaches 2) before any other rank issues them;
//               with one lane this cannot happen, and the case fails
//   many        rounds of non-blocking all_reduce, all_gather,
//               reduce_scatter, broadcast and barrier of many sizes, a
//               blocking all_reduce among them, waited in reverse order
//   p2p         tagged send/recv around a ring while collectives are in flight
//   split       a split's child has lanes of its own and runs on them
//   counters    `lanes` and the per-algorithm operation counts add up
//   finalize    rank 0 finalizes a child communicator while one collective
//               runs on every lane (nobody else joins them) and one more is
//               queued: finalize returns promptly, every call ends ABORTED,
//               and the queued one never touched its buffer
//   mismatch    (last: it breaks the communicator) rank 1 passes another
//               count to one call: that call fails (MISMATCH), an earlier
//               call on another lane completes, a later one fails or had
//               completed with the right data, and calls issued after fail
//               everywhere, on every lane
//
// Orders between ranks are made by messages, never by sleeping; the only
// wait is rank 0 polling its own counter, bounded by 60 s.
#include <chorus/chorus.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

chorus_comm_t* g_world = nullptr;
int g_rank = 0, g_size = 1, g_lanes = 1;
long g_failures = 0, g_checks = 0;
std::string g_case;

void fail(const std::string& what) {
  ++g_failures;
  std::printf("rank %d: FAIL [%s] %s\n", g_rank, g_case.c_str(), what.c_str());
}

bool expect_ok(int rc, const std::string& what) {
  ++g_checks;
  if (rc == CHORUS_OK) return true;
  fail(what + ": " + chorus_status_name(rc) + " (" + chorus_last_error() + ")");
  return false;
}

/// The value rank `r` contributes at index `i` (small integers: sums of a
/// few ranks stay exact in float32).
int64_t value(int r, size_t i, int salt) { return int64_t((r + 1) * 3 + int(i % 1021) + salt); }

int64_t sum_of(size_t i, int salt, int size) {
  int64_t s = 0;
  for (int r = 0; r < size; ++r) s += value(r, i, salt);
  return s;
}

template <class T>
void check_all(const std::vector<T>& got, const std::function<int64_t(size_t)>& want,
               const std::string& what) {
  ++g_checks;
  for (size_t i = 0; i < got.size(); ++i)
    if (int64_t(got[i]) != want(i)) {
      fail(what + ": element " + std::to_string(i) + " is " + std::to_string(int64_t(got[i])) +
           ", expected " + std::to_string(want(i)));
      return;
    }
}

uint64_t counter(chorus_comm_t* comm, const std::string& name) {
  std::vector<chorus_counter_t> c(512);
  size_t n = 0;
  if (chorus_comm_counters(comm, c.data(), c.size(), &n) != CHORUS_OK) return UINT64_MAX;
  for (size_t i = 0; i < n && i < c.size(); ++i)
    if (name == c[i].name) return c[i].value;
  return UINT64_MAX;
}

/// One non-blocking collective with its buffers and its check.
struct Op {
  std::string what;
  std::vector<float> in_f, out_f;
  std::vector<int64_t> in_i, out_i;
  chorus_request_t* req = nullptr;
  std::function<void(Op&)> check;
};

/// Issues op number `k` of a round (the kind rotates with k).
void issue(Op& op, chorus_comm_t* comm, int rank, int size, size_t k, int salt) {
  static const size_t kCounts[] = {1, 7, 1000, 65536 / 4, 300001, 16, 4096};
  const size_t count = kCounts[k % (sizeof(kCounts) / sizeof(kCounts[0]))];
  const int kind = int(k % 5);
  int rc = CHORUS_OK;
  if (kind == 0) {  // all_reduce float32 sum
    op.what = "iall_reduce f32 x" + std::to_string(count) + " #" + std::to_string(k);
    op.in_f.resize(count);
    for (size_t i = 0; i < count; ++i) op.in_f[i] = float(value(rank, i, salt));
    op.out_f.assign(count, -1.0f);
    rc = chorus_iall_reduce(comm, op.in_f.data(), op.out_f.data(), count, CHORUS_FLOAT32,
                            CHORUS_SUM, &op.req);
    op.check = [=](Op& o) {
      check_all(
          o.out_f, [=](size_t i) { return sum_of(i, salt, size); }, o.what);
    };
  } else if (kind == 1) {  // all_gather int64
    op.what = "iall_gather i64 x" + std::to_string(count) + " #" + std::to_string(k);
    op.in_i.resize(count);
    for (size_t i = 0; i < count; ++i) op.in_i[i] = value(rank, i, salt);
    op.out_i.assign(count * size_t(size), -1);
    rc = chorus_iall_gather(comm, op.in_i.data(), op.out_i.data(), count, CHORUS_INT64, &op.req);
    op.check = [=](Op& o) {
      check_all(
          o.out_i, [=](size_t j) { return value(int(j / count), j % count, salt); }, o.what);
    };
  } else if (kind == 2) {  // reduce_scatter int64 sum
    op.what = "ireduce_scatter i64 x" + std::to_string(count) + " #" + std::to_string(k);
    op.in_i.resize(count * size_t(size));
    for (size_t j = 0; j < op.in_i.size(); ++j) op.in_i[j] = value(rank, j, salt);
    op.out_i.assign(count, -1);
    rc = chorus_ireduce_scatter(comm, op.in_i.data(), op.out_i.data(), count, CHORUS_INT64,
                                CHORUS_SUM, &op.req);
    op.check = [=](Op& o) {
      check_all(
          o.out_i, [=](size_t i) { return sum_of(size_t(rank) * count + i, salt, size); }, o.what);
    };
  } else if (kind == 3) {  // broadcast int64 from a rotating root
    const int root = int(k % size_t(size));
    op.what = "ibroadcast i64 x" + std::to_string(count) + " root " + std::to_string(root) + " #" +
              std::to_string(k);
    op.out_i.resize(count);
    for (size_t i = 0; i < count; ++i) op.out_i[i] = rank == root ? value(root, i, salt) : -1;
    rc = chorus_ibroadcast(comm, op.out_i.data(), count, CHORUS_INT64, root, &op.req);
    op.check = [=](Op& o) {
      check_all(
          o.out_i, [=](size_t i) { return value(root, i, salt); }, o.what);
    };
  } else {
    op.what = "ibarrier #" + std::to_string(k);
    rc = chorus_ibarrier(comm, &op.req);
    op.check = [](Op&) {};
  }
  expect_ok(rc, "issuing " + op.what);
}

void finish(Op& op) {
  if (!op.req) return;
  if (expect_ok(chorus_wait(op.req, -1), "waiting for " + op.what)) op.check(op);
  chorus_request_free(op.req);
  op.req = nullptr;
}

void case_concurrent() {
  // Two all_reduces on two lanes. Rank 0 issues both and waits until both
  // run at once; only then does it let the others issue theirs, so both
  // are certainly running (waiting for the others) at that moment.
  Op a, b;
  if (g_rank == 0) {
    issue(a, g_world, g_rank, g_size, 0, 11);
    issue(b, g_world, g_rank, g_size, 5, 12);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    uint64_t running = 0;
    while ((running = counter(g_world, "lanes.running")) < 2 && running != UINT64_MAX &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++g_checks;
    if (running != 2)
      fail("lanes.running is " +
           (running == UINT64_MAX ? std::string("absent") : std::to_string(running)) +
           " with two all_reduces issued and the other ranks not yet in them; expected 2 (are "
           "collectives.lanes >= 2?)");
    int go = 1;
    for (int r = 1; r < g_size; ++r)
      expect_ok(chorus_send_tagged(g_world, &go, 1, CHORUS_INT32, r, 77), "sending go");
  } else {
    int go = 0;
    expect_ok(chorus_recv_tagged(g_world, &go, 1, CHORUS_INT32, 0, 77, nullptr), "receiving go");
    issue(a, g_world, g_rank, g_size, 0, 11);
    issue(b, g_world, g_rank, g_size, 5, 12);
  }
  finish(b);
  finish(a);
}

void run_round(chorus_comm_t* comm, int rank, int size, int round, size_t n_ops) {
  std::vector<Op> ops(n_ops);
  for (size_t k = 0; k < n_ops; ++k) {
    issue(ops[k], comm, rank, size, k, round * 100 + int(k));
    if (k == n_ops / 2) {  // a blocking call among the non-blocking ones
      std::vector<int64_t> in(333), out(333, -1);
      for (size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i, round);
      if (expect_ok(
              chorus_all_reduce(comm, in.data(), out.data(), in.size(), CHORUS_INT64, CHORUS_SUM),
              "blocking all_reduce"))
        check_all(
            out, [=](size_t i) { return sum_of(i, round, size); }, "blocking all_reduce");
    }
  }
  for (size_t k = n_ops; k-- > 0;) finish(ops[k]);
}

void case_many() {
  for (int round = 0; round < 3; ++round) run_round(g_world, g_rank, g_size, round, 24);
}

void case_p2p() {
  // Tagged messages around the ring while collectives are in flight.
  std::vector<Op> ops(6);
  for (size_t k = 0; k < ops.size(); ++k) issue(ops[k], g_world, g_rank, g_size, k, 40 + int(k));
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  for (int tag = 0; tag < 8; ++tag) {
    std::vector<int64_t> out(2000), in(2000, -1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = value(g_rank, i, tag);
    chorus_request_t* rs = nullptr;
    chorus_request_t* rr = nullptr;
    expect_ok(chorus_irecv_tagged(g_world, in.data(), in.size(), CHORUS_INT64, left, tag, &rr),
              "irecv_tagged");
    expect_ok(chorus_isend_tagged(g_world, out.data(), out.size(), CHORUS_INT64, right, tag, &rs),
              "isend_tagged");
    expect_ok(chorus_wait(rs, -1), "waiting for isend_tagged");
    if (expect_ok(chorus_wait(rr, -1), "waiting for irecv_tagged"))
      check_all(
          in, [&](size_t i) { return value(left, i, tag); }, "tagged from the left");
    chorus_request_free(rs);
    chorus_request_free(rr);
  }
  for (size_t k = ops.size(); k-- > 0;) finish(ops[k]);
}

void case_split() {
  chorus_comm_t* child = nullptr;
  if (!expect_ok(chorus_comm_split(g_world, g_rank % 2, g_rank, &child), "split")) return;
  int crank = 0, csize = 1;
  chorus_comm_rank(child, &crank);
  chorus_comm_size(child, &csize);
  run_round(child, crank, csize, 7, 12);
  ++g_checks;
  if (counter(child, "lanes") != uint64_t(g_lanes))
    fail("the child's lanes counter is " + std::to_string(counter(child, "lanes")) + ", expected " +
         std::to_string(g_lanes));
  expect_ok(chorus_comm_finalize(child), "finalizing the child");
}

void case_counters() {
  ++g_checks;
  const uint64_t lanes = counter(g_world, "lanes");
  if (g_lanes > 1 && lanes != uint64_t(g_lanes))
    fail("counter lanes is " + std::to_string(lanes) + ", expected " + std::to_string(g_lanes));
  // 16 all_reduces: their per-algorithm counts, summed over the lanes, grow by 16.
  auto all_reduces = [] {
    std::vector<chorus_counter_t> c(512);
    size_t n = 0;
    chorus_comm_counters(g_world, c.data(), c.size(), &n);
    uint64_t s = 0;
    for (size_t i = 0; i < n && i < c.size(); ++i)
      if (std::strncmp(c[i].name, "ops.all_reduce.", 15) == 0) s += c[i].value;
    return s;
  };
  const uint64_t before = all_reduces();
  std::vector<Op> ops(16);
  for (size_t k = 0; k < ops.size(); ++k) issue(ops[k], g_world, g_rank, g_size, 0, 60 + int(k));
  for (auto& op : ops) finish(op);
  ++g_checks;
  if (all_reduces() - before != 16)
    fail("ops.all_reduce.* grew by " + std::to_string(all_reduces() - before) + ", expected 16");
}

void case_finalize() {
  chorus_comm_t* child = nullptr;
  if (!expect_ok(chorus_comm_split(g_world, 0, g_rank, &child), "split")) return;
  if (g_rank == 0) {
    const size_t n = size_t(g_lanes) + 1;  // one per lane, and one queued behind them
    std::vector<std::vector<float>> buf(n, std::vector<float>(1000, 1.0f));
    std::vector<chorus_request_t*> reqs(n, nullptr);
    for (size_t k = 0; k < n; ++k)
      expect_ok(chorus_iall_reduce(child, buf[k].data(), buf[k].data(), buf[k].size(),
                                   CHORUS_FLOAT32, CHORUS_SUM, &reqs[k]),
                "issuing all_reduce " + std::to_string(k));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    uint64_t running = 0;
    while ((running = counter(child, "lanes.running")) < uint64_t(g_lanes) &&
           running != UINT64_MAX && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++g_checks;
    if (g_lanes > 1 && running != uint64_t(g_lanes))
      fail("lanes.running is " + std::to_string(running) + ", expected " + std::to_string(g_lanes));
    const auto t0 = std::chrono::steady_clock::now();
    expect_ok(chorus_comm_finalize(child), "finalize with a call running on every lane");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++g_checks;
    // timeout.collective is 60 s: a call left running would hold finalize that long.
    if (took > 20) fail("finalize took " + std::to_string(took) + " s with calls running");
    for (size_t k = 0; k < n; ++k) {
      int done = 0;
      ++g_checks;
      const int rc = chorus_test(reqs[k], &done);
      if (rc != CHORUS_ERR_ABORTED || done != 1)
        fail("all_reduce " + std::to_string(k) + " after finalize: " + chorus_status_name(rc) +
             " done=" + std::to_string(done) + ", expected CHORUS_ERR_ABORTED, done");
      chorus_request_free(reqs[k]);
    }
    ++g_checks;
    if (g_lanes > 1 && (buf[n - 1][0] != 1.0f || buf[n - 1][999] != 1.0f))
      fail("the queued all_reduce wrote to its buffer");
    child = nullptr;
  }
  // The others keep the child open until rank 0 is done with it, so what
  // rank 0 sees comes from its finalize, not from peers leaving.
  expect_ok(chorus_barrier(g_world), "world barrier after rank 0's finalize");
  if (child) chorus_comm_finalize(child);
}

void case_mismatch() {
  // k0 (lane a) and k2 (lane c) match; k1 (lane b) does not: rank 1 passes
  // twice the count.
  std::vector<float> in0(5000), out0(5000, -1), in2(64), out2(64, -1);
  std::vector<float> in1(400), out1(400);
  for (size_t i = 0; i < in0.size(); ++i) in0[i] = float(value(g_rank, i, 90));
  for (size_t i = 0; i < in2.size(); ++i) in2[i] = float(value(g_rank, i, 92));
  const size_t n1 = g_rank == 1 ? 400 : 200;
  chorus_request_t *r0 = nullptr, *r1 = nullptr, *r2 = nullptr;
  expect_ok(chorus_iall_reduce(g_world, in0.data(), out0.data(), in0.size(), CHORUS_FLOAT32,
                               CHORUS_SUM, &r0),
            "issuing k0");
  expect_ok(
      chorus_iall_reduce(g_world, in1.data(), out1.data(), n1, CHORUS_FLOAT32, CHORUS_SUM, &r1),
      "issuing k1");
  expect_ok(chorus_iall_reduce(g_world, in2.data(), out2.data(), in2.size(), CHORUS_FLOAT32,
                               CHORUS_SUM, &r2),
            "issuing k2");
  const int rc2 = chorus_wait(r2, -1);
  const std::string e2 = chorus_last_error();
  const int rc1 = chorus_wait(r1, -1);
  const std::string e1 = chorus_last_error();
  if (expect_ok(chorus_wait(r0, -1), "k0, issued before the mismatched call"))
    check_all(
        out0, [](size_t i) { return sum_of(i, 90, g_size); }, "k0");
  // MISMATCH names both calls; when the sender's signature misses the
  // notice grace (a loaded machine), a receiver may report what its
  // transport saw instead: a message larger than the receive.
  ++g_checks;
  if (rc1 != CHORUS_ERR_MISMATCH && !(rc1 == CHORUS_ERR_INVALID_ARGUMENT &&
                                      e1.find("arrived for a receive") != std::string::npos))
    fail(std::string("k1 returned ") + chorus_status_name(rc1) + " (" + e1 +
         "), expected CHORUS_ERR_MISMATCH");
  ++g_checks;
  if (rc2 == CHORUS_OK)
    check_all(
        out2, [](size_t i) { return sum_of(i, 92, g_size); }, "k2 (completed)");
  else if ((rc2 != CHORUS_ERR_MISMATCH && rc2 != CHORUS_ERR_ABORTED) ||
           e2.find("lane") == std::string::npos)
    fail(std::string("k2 returned ") + chorus_status_name(rc2) + " (" + e2 +
         "), expected OK, or CHORUS_ERR_MISMATCH / CHORUS_ERR_ABORTED naming the lane");
  for (auto* r : {r0, r1, r2}) chorus_request_free(r);
  // Every call issued now fails, on every lane.
  for (int k = 0; k < 2 * g_lanes; ++k) {
    float x = 1, y = 0;
    const int rc = chorus_all_reduce(g_world, &x, &y, 1, CHORUS_FLOAT32, CHORUS_SUM);
    ++g_checks;
    // MISMATCH, or ABORTED where this rank's k1 failed with the transport's
    // INVALID_ARGUMENT (a later call's own arguments were fine).
    if (rc != CHORUS_ERR_MISMATCH && rc != CHORUS_ERR_ABORTED)
      fail("all_reduce #" + std::to_string(k) + " after the mismatch returned " +
           chorus_status_name(rc) +
           ", expected CHORUS_ERR_MISMATCH or ABORTED: " + chorus_last_error());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--lanes" && i + 1 < argc) {
      g_lanes = std::atoi(argv[++i]);
    } else if (a == "--case" && i + 1 < argc) {
      only.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: lanes_check --lanes N [--case "
                   "concurrent|many|p2p|split|counters|finalize|mismatch]...\n");
      return 2;
    }
  }
  if (chorus_comm_init(nullptr, &g_world) != CHORUS_OK) {
    std::fprintf(stderr, "init failed: %s\n", chorus_last_error());
    return 1;
  }
  chorus_comm_rank(g_world, &g_rank);
  chorus_comm_size(g_world, &g_size);
  if (g_size < 2) {
    std::fprintf(stderr, "lanes_check needs at least 2 ranks\n");
    return 2;
  }
  const std::vector<std::pair<std::string, void (*)()>> cases = {
      {"concurrent", case_concurrent}, {"many", case_many},         {"p2p", case_p2p},
      {"split", case_split},           {"counters", case_counters}, {"finalize", case_finalize},
      {"mismatch", case_mismatch}};
  for (const auto& [name, body] : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    g_case = name;
    const long before = g_failures;
    body();
    std::printf("rank %d: case %s: %s\n", g_rank, name.c_str(),
                g_failures == before ? "ok" : "FAILED");
  }
  chorus_comm_finalize(g_world);
  std::printf("rank %d: %ld checks, %ld failures\n", g_rank, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
