// Cases "mismatch" and "args" of tagged_check, and the modes that need a
// configuration of their own on every rank: "timeout" (timeout.collective =
// 2) and "disabled" (point_to_point.tagged = false).
#include "tagged_harness.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::p2p_test {

// ---- case: mismatch ----

namespace {

/// Another dtype of the same element size.
int other_dtype(int dtype) {
  switch (chorus_dtype_size(dtype)) {
    case 1:
      return dtype == CHORUS_UINT8 ? CHORUS_INT8 : CHORUS_UINT8;
    case 2:
      return dtype == CHORUS_FLOAT16 ? CHORUS_BFLOAT16 : CHORUS_FLOAT16;
    case 4:
      return dtype == CHORUS_FLOAT32 ? CHORUS_INT32 : CHORUS_FLOAT32;
    default:
      return dtype == CHORUS_FLOAT64 ? CHORUS_INT64 : CHORUS_FLOAT64;
  }
}

/// A refused receive: MISMATCH, an error text naming the sender, nothing
/// written.
void expect_refused(In& in, int rc, const std::string& err, int sender) {
  expect_rc(rc, CHORUS_ERR_MISMATCH, recv_text(in));
  expect(
      rc != CHORUS_ERR_MISMATCH || err.find("rank " + std::to_string(sender)) != std::string::npos,
      "the MISMATCH text does not name rank " + std::to_string(sender) + ": " + err);
  check_untouched(in.buf.data(), 0, in.buf.size(), recv_text(in) + " (refused)");
}

/// A checked exchange both ways with the partner: the pair still works.
void follow_up(const Pair& pr, int round, bool big) {
  if (pr.peer < 0) return;
  const int dtype = CHORUS_INT64;
  const Step s{pr.peer, dtype, big ? kBigBytes / 8 : size_t(100 + round), 150,
               uint64_t(6500 + round)};
  Out o = s.out();
  In i = s.in();
  irecv(i), isend(o), wait_recv(i), wait_send(o);
  s.check(i);
}

}  // namespace

void case_mismatch() {
  int round = 0;
  for (size_t j = 0; j < kSizeCount; ++j) {
    const int dtype = kDtypes[j % kDtypeCount];
    const Size sz = sizes_for(dtype)[j];
    const bool eager = is_eager(dtype, sz.count);
    // The sender of a refused message: OK up to the eager size (the
    // message left at once), MISMATCH above it (the refusal answers its
    // request to send).
    const int sender_rc = eager ? CHORUS_OK : CHORUS_ERR_MISMATCH;
    const std::string szt = size_text(sz.label, sz.count, dtype);

    // A receive one element smaller than the message, non-blocking and
    // blocking (at size 0 there is nothing smaller).
    for (int blocking = 0; blocking < 2; ++blocking, ++round) {
      const Pair pr = pair_of(round);
      g_step = std::string("receive one element smaller, ") +
               (blocking ? "blocking" : "non-blocking") + ", size " + szt + " with rank " +
               std::to_string(pr.peer);
      if (sz.count == 0) {
        if (g_rank == 0 && blocking == 0)
          std::printf("mismatch: smaller receive not run at size 0 (no smaller count)\n");
        continue;
      }
      const int tag = 140;
      if (pr.peer >= 0 && pr.first) {
        Out o = make_out(dtype, sz.count, pr.peer, tag, uint64_t(6000 + round));
        if (blocking) {
          send(o, sender_rc);
        } else {
          isend(o);
          wait_send(o, sender_rc);
        }
      } else if (pr.peer >= 0) {
        In in = make_in(dtype, sz.count - 1, pr.peer, tag);
        int rc;
        std::string err;
        if (blocking) {
          rc = chorus_recv_tagged(g_comm, in.buf.data(), in.capacity, dtype, pr.peer, tag, nullptr);
          err = chorus_last_error();
        } else {
          irecv(in);
          rc = chorus_wait(in.req, -1);
          err = chorus_last_error();
          chorus_p2p_status_t st{};
          expect(chorus_request_p2p_status(in.req, &st) != CHORUS_OK,
                 "chorus_request_p2p_status of a refused receive must fail");
          chorus_request_free(in.req);
          in.req = nullptr;
        }
        expect_refused(in, rc, err, pr.peer);
      }
      follow_up(pr, round, !eager);
      barrier();
    }

    // Another dtype of the same element size: the same bytes, refused.
    {
      const Pair pr = pair_of(round++);
      g_step = "receive of another dtype, size " + szt + " with rank " + std::to_string(pr.peer);
      const int tag = 141;
      if (pr.peer >= 0 && pr.first) {
        Out o = make_out(dtype, sz.count, pr.peer, tag, uint64_t(6000 + round));
        isend(o);
        wait_send(o, sender_rc);
      } else if (pr.peer >= 0) {
        In in = make_in(other_dtype(dtype), sz.count, pr.peer, tag);
        irecv(in);
        const int rc = chorus_wait(in.req, -1);
        const std::string err = chorus_last_error();
        chorus_request_free(in.req);
        in.req = nullptr;
        expect_refused(in, rc, err, pr.peer);
      }
      follow_up(pr, round, eager);
      barrier();
    }

    // A larger receive takes the message; status.count is the message's.
    // Odd sizes receive from any source with any tag.
    {
      const Pair pr = pair_of(round++);
      g_step =
          "receive larger than the message, size " + szt + " with rank " + std::to_string(pr.peer);
      const int tag = 142;
      const uint64_t salt = 6000 + uint64_t(round);
      if (pr.peer >= 0 && pr.first) {
        Out o = make_out(dtype, sz.count, pr.peer, tag, salt);
        send(o);
      } else if (pr.peer >= 0) {
        In in = j % 2 ? make_in(dtype, sz.count + 37, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG)
                      : make_in(dtype, sz.count + 37, pr.peer, tag);
        irecv(in);
        wait_recv(in);
        check_in(in, pr.peer, tag, sz.count, salt);
      }
      follow_up(pr, round, false);
      barrier();
    }
  }
  g_step = "after the mismatches";
  checked_all_reduce(4099, 3);
}

// ---- case: argument errors ----

void case_args() {
  const int n = g_size, next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  int32_t buf[4] = {1, 2, 3, 4};
  auto refused = [&](int rc, const std::string& what, const std::string& needle) {
    const std::string err = rc == CHORUS_OK ? "" : chorus_last_error();
    if (expect_rc(rc, CHORUS_ERR_INVALID_ARGUMENT, what))
      expect(err.find(needle) != std::string::npos,
             what + ": the error text does not mention '" + needle + "': " + err);
  };
  auto refused_isend = [&](int peer, int tag, const std::string& what, const std::string& needle) {
    chorus_request_t* req = nullptr;
    refused(chorus_isend_tagged(g_comm, buf, 4, CHORUS_INT32, peer, tag, &req), what, needle);
    expect(req == nullptr, what + ": set req_out on failure");
    chorus_request_free(req);
  };
  auto refused_irecv = [&](int source, int tag, const std::string& what,
                           const std::string& needle) {
    chorus_request_t* req = nullptr;
    refused(chorus_irecv_tagged(g_comm, buf, 4, CHORUS_INT32, source, tag, &req), what, needle);
    expect(req == nullptr, what + ": set req_out on failure");
    chorus_request_free(req);
  };
  g_step = "argument errors";
  // Nothing is posted anywhere while these run: each must return at once.
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, next, -5), "send_tagged tag -5", "tag");
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, next, CHORUS_ANY_TAG),
          "send_tagged with CHORUS_ANY_TAG", "tag");
  refused_isend(next, -5, "isend_tagged tag -5", "tag");
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, CHORUS_ANY_SOURCE, 3),
          "send_tagged to CHORUS_ANY_SOURCE", "peer");
  refused_isend(CHORUS_ANY_SOURCE, 3, "isend_tagged to CHORUS_ANY_SOURCE", "peer");
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, g_rank, 3), "send_tagged to itself",
          "peer");
  refused_isend(g_rank, 3, "isend_tagged to itself", "peer");
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, n, 3), "send_tagged to rank size",
          "peer");
  refused(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, -2, 3), "send_tagged to rank -2",
          "peer");
  refused(chorus_recv_tagged(g_comm, buf, 4, CHORUS_INT32, g_rank, 3, nullptr),
          "recv_tagged from itself", "peer");
  refused_irecv(g_rank, 3, "irecv_tagged from itself", "peer");
  refused(chorus_recv_tagged(g_comm, buf, 4, CHORUS_INT32, n, 3, nullptr),
          "recv_tagged from rank size", "peer");
  refused_irecv(-2, 3, "irecv_tagged from rank -2", "peer");
  refused(chorus_recv_tagged(g_comm, buf, 4, CHORUS_INT32, prev, -2, nullptr), "recv_tagged tag -2",
          "tag");
  refused_irecv(prev, -9, "irecv_tagged tag -9", "tag");
  refused(chorus_send_tagged(g_comm, nullptr, 4, CHORUS_INT32, next, 3),
          "send_tagged of a NULL buffer", "NULL");
  refused(chorus_recv_tagged(g_comm, buf, 4, 99, prev, 3, nullptr), "recv_tagged of dtype 99",
          "99");
  refused(chorus_send_tagged(nullptr, buf, 4, CHORUS_INT32, next, 3), "send_tagged on NULL",
          "NULL");
  barrier();

  // chorus_request_p2p_status: AGAIN while pending (the message is sent
  // only after the barrier), INVALID_ARGUMENT for other requests.
  g_step = "chorus_request_p2p_status";
  In in = make_in(CHORUS_INT32, 4, prev, 170);
  irecv(in);
  chorus_p2p_status_t st{-7, -7, 7};
  expect_rc(chorus_request_p2p_status(in.req, &st), CHORUS_ERR_AGAIN,
            "chorus_request_p2p_status of a pending receive");
  expect(st.source == -7 && st.tag == -7 && st.count == 7,
         "chorus_request_p2p_status wrote its output while pending");
  refused(chorus_request_p2p_status(in.req, nullptr), "chorus_request_p2p_status(req, NULL)",
          "NULL");
  barrier();
  Out o = make_out(CHORUS_INT32, 4, next, 170, 7000);
  isend(o);
  wait_send(o);  // freed: take a fresh send request for the next check
  Out o2 = make_out(CHORUS_INT32, 2, next, 171, 7001);
  isend(o2);
  expect_rc(chorus_wait(o2.req, -1), CHORUS_OK, "wait for i" + send_text(o2));
  refused(chorus_request_p2p_status(o2.req, &st), "chorus_request_p2p_status of a send",
          "not a tagged receive");
  chorus_request_free(o2.req);
  o2.req = nullptr;
  wait_recv(in);
  check_in(in, prev, 170, 4, 7000);
  In in2 = make_in(CHORUS_INT32, 2, prev, 171);
  recv(in2);
  check_in(in2, prev, 171, 2, 7001);
  // An untagged receive's request is not a tagged receive either.
  std::vector<int32_t> u(8, 5), v(8, 0);
  chorus_request_t *rs = nullptr, *rr = nullptr;
  // Untagged operations run in issue order: even ranks send first.
  auto post_recv = [&] {
    expect_rc(chorus_irecv(g_comm, v.data(), 8, CHORUS_INT32, prev, &rr), CHORUS_OK,
              "untagged irecv");
  };
  auto post_send = [&] {
    expect_rc(chorus_isend(g_comm, u.data(), 8, CHORUS_INT32, next, &rs), CHORUS_OK,
              "untagged isend");
  };
  if (g_rank % 2 == 0)
    post_send(), post_recv();
  else
    post_recv(), post_send();
  expect_rc(chorus_wait(rs, -1), CHORUS_OK, "wait for untagged isend");
  expect_rc(chorus_wait(rr, -1), CHORUS_OK, "wait for untagged irecv");
  refused(chorus_request_p2p_status(rr, &st), "chorus_request_p2p_status of an untagged receive",
          "not a tagged receive");
  expect(v == u, "untagged receive content");
  chorus_request_free(rs);
  chorus_request_free(rr);
  barrier();
}

// ---- modes that need their own configuration ----

/// timeout.collective = 2 s: receives that nothing matches fail with
/// TIMEOUT, not before it, and the communicator goes on working.
void case_timeout() {
  constexpr double kTimeoutS = 2;
  const int n = g_size, next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  barrier();
  g_step = "a blocking receive from any source, any tag, that nothing matches";
  {
    In in = make_in(CHORUS_INT32, 4, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG);
    const auto t0 = std::chrono::steady_clock::now();
    recv(in, CHORUS_ERR_TIMEOUT);
    expect(since(t0) >= kTimeoutS * 0.9,
           "TIMEOUT after " + std::to_string(since(t0)) + " s, before timeout.collective");
    check_untouched(in.buf.data(), 0, in.buf.size(), "timed-out receive");
  }
  barrier();
  // An eager message nobody receives yet: its send completes, and it
  // waits for a receive through the timeouts below.
  Out early = make_out(CHORUS_INT32, 5, next, 998, 9000);
  send(early);
  g_step = "an irecv that nothing matches";
  {
    In in = make_in(CHORUS_INT32, 4, prev, 999);
    const auto t0 = std::chrono::steady_clock::now();
    irecv(in);
    wait_recv(in, CHORUS_ERR_TIMEOUT);
    expect(since(t0) >= kTimeoutS * 0.9,
           "TIMEOUT after " + std::to_string(since(t0)) + " s, before timeout.collective");
    check_untouched(in.buf.data(), 0, in.buf.size(), "timed-out receive");
  }
  barrier();
  g_step = "after the timeouts";
  {
    // The message a timed-out receive waited for, sent now, goes to the
    // next receive; the early message is still there.
    In late = make_in(CHORUS_INT32, 4, prev, 999), first = make_in(CHORUS_INT32, 5, prev, 998);
    irecv(late);
    Out o = make_out(CHORUS_INT32, 4, next, 999, 9001);
    send(o);
    wait_recv(late);
    check_in(late, prev, 999, 4, 9001);
    recv(first);
    check_in(first, prev, 998, 5, 9000);
    // Matched exchanges at the eager limit and above it, and a collective.
    for (size_t count : {kEagerBytes / 8, kEagerBytes / 8 + 1, kBigBytes / 8}) {
      Out so = make_out(CHORUS_INT64, count, next, 997, 9002 + count);
      In si = make_in(CHORUS_INT64, count, prev, 997);
      irecv(si), isend(so), wait_send(so), wait_recv(si);
      check_in(si, prev, 997, count, 9002 + count);
    }
    checked_all_reduce(4099, 11);
  }
  barrier();
}

/// point_to_point.tagged = false: every tagged call is NOT_SUPPORTED and
/// names the key; the rest of the communicator works.
void case_disabled() {
  const int n = g_size, next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  int32_t buf[4] = {1, 2, 3, 4};
  auto unsupported = [&](int rc, const std::string& what) {
    const std::string err = rc == CHORUS_OK ? "" : chorus_last_error();
    if (expect_rc(rc, CHORUS_ERR_NOT_SUPPORTED, what))
      expect(err.find("point_to_point.tagged") != std::string::npos,
             what + ": the error text does not name point_to_point.tagged: " + err);
  };
  g_step = "tagged calls with point_to_point.tagged = false";
  unsupported(chorus_send_tagged(g_comm, buf, 4, CHORUS_INT32, next, 3), "send_tagged");
  unsupported(chorus_recv_tagged(g_comm, buf, 4, CHORUS_INT32, prev, 3, nullptr), "recv_tagged");
  unsupported(
      chorus_recv_tagged(g_comm, buf, 4, CHORUS_INT32, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, nullptr),
      "recv_tagged from any source");
  chorus_request_t* req = nullptr;
  unsupported(chorus_isend_tagged(g_comm, buf, 4, CHORUS_INT32, next, 3, &req), "isend_tagged");
  expect(req == nullptr, "isend_tagged set req_out on failure");
  unsupported(chorus_irecv_tagged(g_comm, buf, 4, CHORUS_INT32, prev, 3, &req), "irecv_tagged");
  expect(req == nullptr, "irecv_tagged set req_out on failure");
  g_step = "the rest of the communicator";
  checked_untagged_ring(3000, 9100);
  checked_all_reduce(4099, 12);
  barrier();
}

}  // namespace chorus::p2p_test
