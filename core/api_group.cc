// Grouped calls (chorus_group_start / chorus_group_end): the per-thread
// group that queues the non-blocking calls issued inside it, and what
// chorus_group_end does with them: per communicator, in issue order, runs of
// all_reduces that fuse (core/group_plan.h) run as one all_reduce through
// the normal dispatch, on the calls' own buffers when those lie end to end
// and packed into a staging buffer otherwise; every other
// call is issued as if it were issued there. Each call's request is a
// stand-in that completes with the outcome of the request that ran it
// (core/request.h, "Grouped calls").
#include "core/api_internal.h"
#include "core/group_plan.h"

#include <chorus/chorus.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

using namespace chorus::core::api;
using chorus::core::Communicator;
using chorus::core::Request;

namespace chorus::core::api {
namespace {

/// One call queued in an open group.
struct QueuedCall {
  chorus_comm* comm;
  const char* what;
  std::function<Status(Communicator&)> body;
  bool p2p;
  bool fusable;
  FusableAllReduce ar;
  std::shared_ptr<Request> stand_in;
};

/// This thread's group: how deeply nested, and the calls queued so far.
struct Group {
  int depth = 0;
  std::vector<QueuedCall> calls;
};

Group& group() {
  thread_local Group g;
  return g;
}

constexpr const char* kGroupRule =
    "; every rank must group the same calls in the same order, with the same "
    "collectives.fusion_bytes";

/// A grouped call's failure from a mismatch names the grouping rule.
Status with_group_hint(Status st) {
  if (st.code() != CHORUS_ERR_MISMATCH) return st;
  return {st.code(), st.message() + " (a call issued inside chorus_group_start/chorus_group_end" +
                         kGroupRule + ")"};
}

/// Issues one call as if it were issued now; its stand-in follows it.
void launch_one(QueuedCall& call) {
  uint64_t order = Request::kNoOrder;
  Communicator& target = call.p2p ? *call.comm->impl : call.comm->impl->lane_for_call(order);
  auto body = [inner = std::move(call.body)](Communicator& c) { return with_group_hint(inner(c)); };
  auto leader = target.submit(call.what, std::move(body), call.p2p, order);
  call.stand_in->set_leader(&target, leader);
  leader->lead(call.stand_in);
}

/// Staging buffers of fused calls, kept for the next ones: a fresh buffer
/// of a few MiB costs a page fault per page on every call, more than the
/// copies in and out. Process-wide and thread-safe (fused calls of several
/// lanes or communicators run at once); keeps at most kKeep buffers, each
/// at most the largest collectives.fusion_bytes in use.
class StagingPool {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
  };
  Buffer take(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      // The smallest kept buffer that is large enough.
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->size >= bytes && (best == free_.end() || it->size < best->size)) best = it;
      if (best != free_.end()) {
        Buffer b = std::move(*best);
        free_.erase(best);
        return b;
      }
    }
    return {std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
  }
  void give(Buffer b) {
    std::lock_guard lock(mu_);
    if (free_.size() < kKeep) {
      free_.push_back(std::move(b));
      return;
    }
    // Full: keep the larger buffers.
    auto smallest =
        std::min_element(free_.begin(), free_.end(),
                         [](const Buffer& x, const Buffer& y) { return x.size < y.size; });
    if (smallest->size < b.size) *smallest = std::move(b);
  }

 private:
  static constexpr size_t kKeep = 4;
  std::mutex mu_;
  std::vector<Buffer> free_;
};

StagingPool& staging_pool() {
  static StagingPool pool;
  return pool;
}

/// One element range of a fused all_reduce: where a call's data goes.
struct Segment {
  const void* in;
  void* out;
  size_t count;
};

/// The input and output ranges of a fused run whose calls' buffers lie end
/// to end, in call order, both for the inputs and for the outputs; the two
/// ranges are the same (every call in place) or do not overlap. Nulls
/// otherwise: the run is packed into a staging buffer.
struct FusedSpan {
  const void* in = nullptr;
  void* out = nullptr;
};
FusedSpan contiguous_span(const std::vector<Segment>& segments, size_t esize) {
  // Calls of no elements may carry any pointer: the first with elements
  // anchors the ranges.
  auto first =
      std::find_if(segments.begin(), segments.end(), [](const Segment& s) { return s.count > 0; });
  if (first == segments.end()) return {};
  const auto* in0 = static_cast<const std::byte*>(first->in);
  auto* out0 = static_cast<std::byte*>(first->out);
  if (in0 == nullptr || out0 == nullptr) return {};
  size_t at = 0;
  for (const Segment& s : segments) {
    if (s.count > 0 && (static_cast<const std::byte*>(s.in) != in0 + at ||
                        static_cast<std::byte*>(s.out) != out0 + at))
      return {};
    at += s.count * esize;
  }
  const bool same = in0 == out0;
  const bool apart = in0 + at <= out0 || out0 + at <= in0;
  if (at == 0 || !(same || apart)) return {};
  return {in0, out0};
}

/// Runs calls[first, first + n) (all_reduces of one dtype and op on one
/// communicator) as one all_reduce over a staging buffer.
void launch_fused(std::vector<QueuedCall*>& calls, size_t first, size_t n) {
  const int dtype = calls[first]->ar.dtype;
  const int op = calls[first]->ar.op;
  std::vector<Segment> segments;
  std::vector<uint64_t> counts;
  size_t total = 0;
  for (size_t k = first; k < first + n; ++k) {
    const FusableAllReduce& a = calls[k]->ar;
    segments.push_back({a.in, a.out, a.count});
    counts.push_back(a.count);
    total += a.count;
  }
  const auto fused_calls = int32_t(n);
  const uint32_t digest = fused_digest(counts.data(), counts.size());
  // The inputs are read when the fused call runs, not here: as for any
  // non-blocking call, buffers belong to the call until it completes.
  auto body = [segments = std::move(segments), total, dtype, op, fused_calls,
               digest](Communicator& c) -> Status {
    const size_t esize = chorus_dtype_size(dtype);
    auto failed = [&](const Status& st) -> Status {
      return {st.code(), st.message() + " (this all_reduce ran " + std::to_string(fused_calls) +
                             " grouped calls fused at chorus_group_end; each of them fails" +
                             (st.code() == CHORUS_ERR_MISMATCH ? kGroupRule : "") + ")"};
    };
    // The calls' buffers already lie end to end (a framework's gradient
    // bucket): the fused call runs on them as they are, with no copy.
    if (const FusedSpan span = contiguous_span(segments, esize); span.in != nullptr) {
      Status st = c.all_reduce(span.in, span.out, total, dtype, op, fused_calls, digest);
      return st.is_ok() ? st : failed(st);
    }
    // Back to the pool however the call ends.
    struct Held {
      StagingPool::Buffer b;
      ~Held() {
        if (b.data) staging_pool().give(std::move(b));
      }
    } held;
    if (total > 0) held.b = staging_pool().take(total * esize);
    std::byte* staging = held.b.data.get();
    size_t at = 0;
    for (const Segment& s : segments) {
      if (s.count > 0) std::memcpy(staging + at, s.in, s.count * esize);
      at += s.count * esize;
    }
    Status st = c.all_reduce(staging, staging, total, dtype, op, fused_calls, digest);
    if (!st.is_ok()) return failed(st);
    at = 0;
    for (const Segment& s : segments) {
      if (s.count > 0) std::memcpy(s.out, staging + at, s.count * esize);
      at += s.count * esize;
    }
    return st;
  };
  chorus_comm* comm = calls[first]->comm;
  uint64_t order = Request::kNoOrder;
  Communicator& target = comm->impl->lane_for_call(order);
  auto leader = target.submit("all_reduce (fused)", std::move(body), false, order);
  for (size_t k = first; k < first + n; ++k) {
    calls[k]->stand_in->set_leader(&target, leader);
    leader->lead(calls[k]->stand_in);
  }
}

/// Runs every call of a group that just ended. Returns OK, or the first
/// reason a call could not be issued (its request carries it too).
int run_group(std::vector<QueuedCall>& calls) {
  // Communicators in the order they first appear; each one's calls in issue
  // order. Different communicators are independent streams.
  std::vector<chorus_comm*> comms;
  for (const QueuedCall& c : calls)
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end()) comms.push_back(c.comm);
  int rc = CHORUS_OK;
  for (chorus_comm* comm : comms) {
    std::vector<QueuedCall*> mine;
    for (QueuedCall& c : calls)
      if (c.comm == comm) mine.push_back(&c);
    if (!live(comm)) {
      const std::string text =
          "chorus_group_end: the communicator of a grouped call was finalized before the group "
          "ended, so the call never ran; finalize a communicator only after chorus_group_end";
      for (QueuedCall* c : mine) c->stand_in->finish_unrun({CHORUS_ERR_ABORTED, text});
      if (rc == CHORUS_OK) rc = set_error({CHORUS_ERR_ABORTED, text});
      continue;
    }
    std::vector<GroupedCall> shape;
    for (const QueuedCall* c : mine)
      shape.push_back({c->fusable, c->ar.dtype, c->ar.op,
                       c->fusable ? uint64_t(c->ar.count) * chorus_dtype_size(c->ar.dtype) : 0});
    const auto runs = plan_group_runs(shape, comm->impl->config().fusion_bytes);
    size_t at = 0;
    for (const size_t n : runs) {
      if (n == 1)
        launch_one(*mine[at]);
      else
        launch_fused(mine, at, n);
      at += n;
    }
  }
  return rc;
}

}  // namespace

bool group_open() { return group().depth > 0; }

std::shared_ptr<Request> group_add(chorus_comm* comm, const char* what,
                                   std::function<Status(Communicator&)> body, bool p2p,
                                   const FusableAllReduce* ar) {
  auto stand_in = Request::make_grouped(what);
  group().calls.push_back(
      {comm, what, std::move(body), p2p, ar != nullptr, ar ? *ar : FusableAllReduce{}, stand_in});
  return stand_in;
}

}  // namespace chorus::core::api

CHORUS_API int chorus_group_start(void) {
  return guarded([] {
    ++group().depth;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_group_end(void) {
  return guarded([] {
    Group& g = group();
    if (g.depth == 0)
      return invalid(
          "chorus_group_end: no group is open on this thread; call chorus_group_start first, on "
          "the same thread (groups belong to the thread that opened them)");
    if (--g.depth > 0) return int(CHORUS_OK);
    std::vector<QueuedCall> calls = std::move(g.calls);
    g.calls.clear();
    try {
      return run_group(calls);
    } catch (...) {
      // Whatever did not get issued must not leave a request that never
      // completes: its stand-in fails now.
      for (QueuedCall& c : calls) {
        Communicator* comm = nullptr;
        std::shared_ptr<Request> leader;
        if (!c.stand_in->leader(comm, leader))
          c.stand_in->finish_unrun(
              {CHORUS_ERR_SYSTEM,
               "chorus_group_end: the call could not be issued (out of memory)"});
      }
      throw;
    }
  });
}
