// The C API's calls that move data: every collective and point-to-point
// call, blocking and non-blocking, and the calls on their requests. The
// handle and error plumbing they share is in api_internal.h.
#include "core/api_internal.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

using namespace chorus::core::api;

namespace {

using chorus::core::Communicator;
using chorus::core::Request;
using chorus::core::Status;

/// A blocking call inside a group would wait for itself: refused.
Status blocking_in_group(const char* what) {
  return {CHORUS_ERR_INVALID_ARGUMENT,
          std::string("chorus_") + what +
              ": a blocking call inside chorus_group_start/chorus_group_end cannot complete "
              "before the group ends; use the non-blocking chorus_i" +
              what + " and wait for its request after chorus_group_end"};
}

/// Blocking call: argument check on the caller, then the operation in issue
/// order behind every earlier request (a collective: on its lane).
template <class Body>
Status run_blocking(Communicator& c, const char* what, const Status& checked, Body body,
                    bool p2p = false) {
  if (group_open()) {
    c.count_failed();
    return blocking_in_group(what);
  }
  if (!checked.is_ok()) {
    c.count_failed();
    return checked;
  }
  // execute() returns only once the request is done or was dropped unrun,
  // so the body can stay on this stack: the std::function then holds one
  // reference, small enough to be stored without an allocation per call.
  auto by_ref = [&body](Communicator& x) { return body(x); };
  if (p2p) return c.execute(what, by_ref, p2p);
  uint64_t order = 0;
  Communicator& lane = c.lane_for_call(order);
  return lane.execute(what, by_ref, p2p, order);
}

/// Non-blocking call: argument check on the caller, then queue. `check`
/// runs only once `comm` is known to be a live handle.
template <class Check, class Body>
int issue(chorus_comm_t* comm, const char* name, const char* what, chorus_request_t** req_out,
          Check check, Body body, bool p2p = false, const FusableAllReduce* fusable = nullptr) {
  return guarded([&] {
    if (int rc = check_comm(comm, name); rc != CHORUS_OK) return rc;
    if (!req_out) {
      comm->impl->count_failed();
      return invalid(std::string(name) + ": req_out is NULL");
    }
    if (const Status checked = check(); !checked.is_ok()) {
      comm->impl->count_failed();
      return set_error(checked);
    }
    // Inside a group: queued on this thread until chorus_group_end
    // (api_group.cc); the handle holds a stand-in.
    if (group_open()) {
      auto* handle = new chorus_request{nullptr, nullptr, comm->impl->request_wait_counter()};
      handle->impl = group_add(comm, what, std::move(body), p2p, fusable);
      *req_out = live_requests().remember(handle);
      return int(CHORUS_OK);
    }
    // A collective runs on its lane (collectives.lanes); the handle's waits
    // and cancel go to that lane's stream.
    uint64_t order = Request::kNoOrder;
    Communicator& target = p2p ? *comm->impl : comm->impl->lane_for_call(order);
    auto* handle = new chorus_request{nullptr, &target, comm->impl->request_wait_counter()};
    handle->impl = target.submit(what, std::move(body), p2p, order);
    *req_out = live_requests().remember(handle);
    return int(CHORUS_OK);
  });
}

/// A grouped call's request before its group ended: nothing runs it yet,
/// so a wait would never return.
bool group_not_ended(const chorus_request& req) {
  Communicator* comm = nullptr;
  std::shared_ptr<Request> leader;
  return req.impl->grouped() && !req.impl->done() && !req.impl->leader(comm, leader);
}
constexpr const char* kGroupOpen =
    ": issued inside chorus_group_start/chorus_group_end, and the group has not ended; call "
    "chorus_group_end (on the thread that opened the group) before waiting for or testing its "
    "requests";

}  // namespace

CHORUS_API int chorus_all_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype, int op) {
  CHORUS_COMM_CALL(
      "chorus_all_reduce",
      run_blocking(*comm->impl, "all_reduce",
                   comm->impl->check_all_reduce(in, out, count, dtype, op),
                   [=](Communicator& c) { return c.all_reduce(in, out, count, dtype, op); }));
}

CHORUS_API int chorus_all_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype) {
  CHORUS_COMM_CALL(
      "chorus_all_gather",
      run_blocking(*comm->impl, "all_gather", comm->impl->check_all_gather(in, out, count, dtype),
                   [=](Communicator& c) { return c.all_gather(in, out, count, dtype); }));
}

CHORUS_API int chorus_reduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                     int dtype, int op) {
  CHORUS_COMM_CALL(
      "chorus_reduce_scatter",
      run_blocking(*comm->impl, "reduce_scatter",
                   comm->impl->check_reduce_scatter(in, out, count, dtype, op),
                   [=](Communicator& c) { return c.reduce_scatter(in, out, count, dtype, op); }));
}

CHORUS_API int chorus_broadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root) {
  CHORUS_COMM_CALL(
      "chorus_broadcast",
      run_blocking(*comm->impl, "broadcast", comm->impl->check_broadcast(buf, count, dtype, root),
                   [=](Communicator& c) { return c.broadcast(buf, count, dtype, root); }));
}

CHORUS_API int chorus_barrier(chorus_comm_t* comm) {
  CHORUS_COMM_CALL("chorus_barrier", run_blocking(*comm->impl, "barrier", Status::ok(),
                                                  [](Communicator& c) { return c.barrier(); }));
}

CHORUS_API int chorus_send(chorus_comm_t* comm, const void* buf, size_t count, int dtype,
                           int peer) {
  CHORUS_COMM_CALL("chorus_send",
                   run_blocking(
                       *comm->impl, "send", comm->impl->check_p2p("send", buf, count, dtype, peer),
                       [=](Communicator& c) { return c.send(buf, count, dtype, peer); }, true));
}

CHORUS_API int chorus_recv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer) {
  CHORUS_COMM_CALL("chorus_recv",
                   run_blocking(
                       *comm->impl, "recv", comm->impl->check_p2p("recv", buf, count, dtype, peer),
                       [=](Communicator& c) { return c.recv(buf, count, dtype, peer); }, true));
}

CHORUS_API int chorus_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                             int dtype, int op, int root) {
  CHORUS_COMM_CALL(
      "chorus_reduce",
      run_blocking(*comm->impl, "reduce", comm->impl->check_reduce(in, out, count, dtype, op, root),
                   [=](Communicator& c) { return c.reduce(in, out, count, dtype, op, root); }));
}

CHORUS_API int chorus_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                             int dtype, int root) {
  CHORUS_COMM_CALL(
      "chorus_gather",
      run_blocking(*comm->impl, "gather", comm->impl->check_gather(in, out, count, dtype, root),
                   [=](Communicator& c) { return c.gather(in, out, count, dtype, root); }));
}

CHORUS_API int chorus_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int root) {
  CHORUS_COMM_CALL(
      "chorus_scatter",
      run_blocking(*comm->impl, "scatter", comm->impl->check_scatter(in, out, count, dtype, root),
                   [=](Communicator& c) { return c.scatter(in, out, count, dtype, root); }));
}

CHORUS_API int chorus_all_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype) {
  CHORUS_COMM_CALL(
      "chorus_all_to_all",
      run_blocking(*comm->impl, "all_to_all", comm->impl->check_all_to_all(in, out, count, dtype),
                   [=](Communicator& c) { return c.all_to_all(in, out, count, dtype); }));
}

CHORUS_API int chorus_all_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                                  const size_t* send_offsets, void* out, const size_t* recv_counts,
                                  const size_t* recv_offsets, int dtype) {
  CHORUS_COMM_CALL("chorus_all_to_allv",
                   run_blocking(*comm->impl, "all_to_allv",
                                comm->impl->check_all_to_allv(in, send_counts, send_offsets, out,
                                                              recv_counts, recv_offsets, dtype),
                                [=](Communicator& c) {
                                  return c.all_to_allv(in, send_counts, send_offsets, out,
                                                       recv_counts, recv_offsets, dtype);
                                }));
}

// The argument check of a non-blocking call, run by issue() once it has
// found `comm` live.
#define CHORUS_CHECK(expr) [&] { return comm->impl->expr; }

CHORUS_API int chorus_iall_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, int op, chorus_request_t** req_out) {
  const FusableAllReduce fusable{in, out, count, dtype, op};
  return issue(
      comm, "chorus_iall_reduce", "all_reduce", req_out,
      CHORUS_CHECK(check_all_reduce(in, out, count, dtype, op)),
      [=](Communicator& c) { return c.all_reduce(in, out, count, dtype, op); }, false, &fusable);
}

CHORUS_API int chorus_iall_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, chorus_request_t** req_out) {
  return issue(comm, "chorus_iall_gather", "all_gather", req_out,
               CHORUS_CHECK(check_all_gather(in, out, count, dtype)),
               [=](Communicator& c) { return c.all_gather(in, out, count, dtype); });
}

CHORUS_API int chorus_ireduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                      int dtype, int op, chorus_request_t** req_out) {
  return issue(comm, "chorus_ireduce_scatter", "reduce_scatter", req_out,
               CHORUS_CHECK(check_reduce_scatter(in, out, count, dtype, op)),
               [=](Communicator& c) { return c.reduce_scatter(in, out, count, dtype, op); });
}

CHORUS_API int chorus_ibroadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root,
                                 chorus_request_t** req_out) {
  return issue(comm, "chorus_ibroadcast", "broadcast", req_out,
               CHORUS_CHECK(check_broadcast(buf, count, dtype, root)),
               [=](Communicator& c) { return c.broadcast(buf, count, dtype, root); });
}

CHORUS_API int chorus_ireduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int op, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_ireduce", "reduce", req_out,
               CHORUS_CHECK(check_reduce(in, out, count, dtype, op, root)),
               [=](Communicator& c) { return c.reduce(in, out, count, dtype, op, root); });
}

CHORUS_API int chorus_igather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_igather", "gather", req_out,
               CHORUS_CHECK(check_gather(in, out, count, dtype, root)),
               [=](Communicator& c) { return c.gather(in, out, count, dtype, root); });
}

CHORUS_API int chorus_iscatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                               int dtype, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_iscatter", "scatter", req_out,
               CHORUS_CHECK(check_scatter(in, out, count, dtype, root)),
               [=](Communicator& c) { return c.scatter(in, out, count, dtype, root); });
}

CHORUS_API int chorus_iall_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, chorus_request_t** req_out) {
  return issue(comm, "chorus_iall_to_all", "all_to_all", req_out,
               CHORUS_CHECK(check_all_to_all(in, out, count, dtype)),
               [=](Communicator& c) { return c.all_to_all(in, out, count, dtype); });
}

CHORUS_API int chorus_iall_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                                   const size_t* send_offsets, void* out, const size_t* recv_counts,
                                   const size_t* recv_offsets, int dtype,
                                   chorus_request_t** req_out) {
  return guarded([&] {
    // The arrays are read here, before issue(): check the handle first.
    if (int err = check_comm(comm, "chorus_iall_to_allv"); err != CHORUS_OK) return err;
    const Status checked = comm->impl->check_all_to_allv(in, send_counts, send_offsets, out,
                                                         recv_counts, recv_offsets, dtype);
    // The host may reuse its count and offset arrays once this returns: the
    // request keeps its own copies (only read when the check passed).
    std::vector<size_t> sc, so, rc, ro;
    if (checked.is_ok()) {
      const size_t n = size_t(comm->impl->size());
      sc.assign(send_counts, send_counts + n);
      so.assign(send_offsets, send_offsets + n);
      rc.assign(recv_counts, recv_counts + n);
      ro.assign(recv_offsets, recv_offsets + n);
    }
    return issue(
        comm, "chorus_iall_to_allv", "all_to_allv", req_out, [&] { return checked; },
        [=, sc = std::move(sc), so = std::move(so), rc = std::move(rc),
         ro = std::move(ro)](Communicator& c) {
          return c.all_to_allv(in, sc.data(), so.data(), out, rc.data(), ro.data(), dtype);
        });
  });
}

CHORUS_API int chorus_ibarrier(chorus_comm_t* comm, chorus_request_t** req_out) {
  return issue(
      comm, "chorus_ibarrier", "barrier", req_out, [] { return Status::ok(); },
      [](Communicator& c) { return c.barrier(); });
}

CHORUS_API int chorus_isend(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer,
                            chorus_request_t** req_out) {
  return issue(
      comm, "chorus_isend", "send", req_out,
      CHORUS_CHECK(check_p2p("send", buf, count, dtype, peer)),
      [=](Communicator& c) { return c.send(buf, count, dtype, peer); }, true);
}

CHORUS_API int chorus_irecv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer,
                            chorus_request_t** req_out) {
  return issue(
      comm, "chorus_irecv", "recv", req_out,
      CHORUS_CHECK(check_p2p("recv", buf, count, dtype, peer)),
      [=](Communicator& c) { return c.recv(buf, count, dtype, peer); }, true);
}

CHORUS_API int chorus_test(chorus_request_t* req, int* done_out) {
  return guarded([&] {
    if (!req || !done_out) return invalid("chorus_test: NULL argument");
    if (!live(req)) return invalid(std::string("chorus_test") + kNotLiveRequest);
    if (group_not_ended(*req)) return invalid("chorus_test: " + req->impl->what() + kGroupOpen);
    if (!req->impl->done()) {
      *done_out = 0;
      return int(CHORUS_OK);
    }
    *done_out = 1;
    return set_error(req->impl->status());
  });
}

CHORUS_API int chorus_wait(chorus_request_t* req, int timeout_ms) {
  return guarded([&] {
    if (!req) return invalid("chorus_wait: req is NULL");
    if (!live(req)) return invalid(std::string("chorus_wait") + kNotLiveRequest);
    if (group_not_ended(*req)) return invalid("chorus_wait: " + req->impl->what() + kGroupOpen);
    auto t0 = std::chrono::steady_clock::now();
    // Waiting for a request that has not started: run it on this thread
    // (bounded by the call's own deadline). A wait with a limit must return
    // by it: it only drives a point-to-point request, until the limit. A
    // grouped call's stand-in: the request that runs it (alone or fused).
    Communicator* runs_on = req->comm;
    std::shared_ptr<Request> runner = req->impl;
    if (req->impl->grouped()) req->impl->leader(runs_on, runner);
    if (!req->impl->done() && !runner->done()) runs_on->run_if_next(runner, timeout_ms);
    int left = timeout_ms;
    if (timeout_ms >= 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
      left = int(std::max<long long>(0, timeout_ms - spent));
    }
    bool done = req->impl->wait_for(left);
    uint64_t ns = uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    // Counted through the shared counter: a done request's communicator may
    // already be finalized.
    req->wait_ns->fetch_add(ns, std::memory_order_relaxed);
    if (!done) {
      last_error() = "chorus_wait: " + req->impl->what() + " still pending after " +
                     std::to_string(timeout_ms) + " ms";
      return int(CHORUS_ERR_AGAIN);
    }
    return set_error(req->impl->status());
  });
}

CHORUS_API int chorus_request_free(chorus_request_t* req) {
  return guarded([&] {
    if (req && !live_requests().forget(req))
      return invalid(std::string("chorus_request_free") + kNotLiveRequest);
    delete req;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_cancel(chorus_request_t* req) {
  return guarded([&] {
    if (!req) return invalid("chorus_cancel: req is NULL");
    if (!live(req)) return invalid(std::string("chorus_cancel") + kNotLiveRequest);
    if (req->impl->grouped())
      return set_error({CHORUS_ERR_NOT_SUPPORTED,
                        "chorus_cancel: " + req->impl->what() +
                            " was issued inside chorus_group_start/chorus_group_end; a grouped "
                            "call cannot be cancelled (it may run fused with others): wait for "
                            "it, or chorus_comm_abort() the communicator"});
    // A done request may belong to a finalized communicator: do not touch it.
    if (req->impl->done())
      return set_error(
          {CHORUS_ERR_NOT_SUPPORTED,
           "chorus_cancel: " + req->impl->what() +
               " already complete; only a request that has not started can be cancelled"});
    return set_error(req->comm->cancel(req->impl));
  });
}

// Tagged point-to-point: handed to the p2p engine when the stream reaches
// them, then progressed alongside everything else (core/p2p_stream.cc).

CHORUS_API int chorus_send_tagged(chorus_comm_t* comm, const void* buf, size_t count, int dtype,
                                  int peer, int tag) {
  CHORUS_COMM_CALL(
      "chorus_send_tagged",
      run_blocking(
          *comm->impl, "send_tagged", comm->impl->check_tagged(true, buf, count, dtype, peer, tag),
          [=](Communicator& c) {
            return c.start_tagged(true, const_cast<void*>(buf), count, dtype, peer, tag);
          },
          true));
}

CHORUS_API int chorus_recv_tagged(chorus_comm_t* comm, void* buf, size_t count, int dtype,
                                  int source, int tag, chorus_p2p_status_t* status) {
  return guarded([&] {
    if (int rc = check_comm(comm, "chorus_recv_tagged"); rc != CHORUS_OK) return rc;
    if (group_open()) {
      comm->impl->count_failed();
      return set_error(blocking_in_group("recv_tagged"));
    }
    const Status checked = comm->impl->check_tagged(false, buf, count, dtype, source, tag);
    if (!checked.is_ok()) {
      comm->impl->count_failed();
      return set_error(checked);
    }
    auto req = comm->impl->execute_request(
        "recv_tagged",
        [=](Communicator& c) { return c.start_tagged(false, buf, count, dtype, source, tag); },
        true);
    if (status && req->status().is_ok()) {
      int src = -1, t = -1;
      size_t n = 0;
      if (req->p2p_status(src, t, n)) *status = {src, t, n};
    }
    return set_error(req->status());
  });
}

CHORUS_API int chorus_isend_tagged(chorus_comm_t* comm, const void* buf, size_t count, int dtype,
                                   int peer, int tag, chorus_request_t** req_out) {
  return issue(
      comm, "chorus_isend_tagged", "send_tagged", req_out,
      CHORUS_CHECK(check_tagged(true, buf, count, dtype, peer, tag)),
      [=](Communicator& c) {
        return c.start_tagged(true, const_cast<void*>(buf), count, dtype, peer, tag);
      },
      true);
}

CHORUS_API int chorus_irecv_tagged(chorus_comm_t* comm, void* buf, size_t count, int dtype,
                                   int source, int tag, chorus_request_t** req_out) {
  return issue(
      comm, "chorus_irecv_tagged", "recv_tagged", req_out,
      CHORUS_CHECK(check_tagged(false, buf, count, dtype, source, tag)),
      [=](Communicator& c) { return c.start_tagged(false, buf, count, dtype, source, tag); }, true);
}

CHORUS_API int chorus_request_p2p_status(chorus_request_t* req, chorus_p2p_status_t* status_out) {
  return guarded([&] {
    if (!req || !status_out) return invalid("chorus_request_p2p_status: NULL argument");
    if (!live(req)) return invalid(std::string("chorus_request_p2p_status") + kNotLiveRequest);
    if (!req->impl->done()) {
      last_error() = "chorus_request_p2p_status: " + req->impl->what() + " is still pending";
      return int(CHORUS_ERR_AGAIN);
    }
    int src = -1, tag = -1;
    size_t n = 0;
    if (!req->impl->p2p_status(src, tag, n))
      return invalid("chorus_request_p2p_status: " + req->impl->what() +
                     (req->impl->status().is_ok() ? " is not a tagged receive"
                                                  : " failed; it received nothing"));
    *status_out = {src, tag, n};
    return int(CHORUS_OK);
  });
}
