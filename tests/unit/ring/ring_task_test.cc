// The ring's v2 tasks (algorithms/ring/ring_task.h) on an in-process fake
// transport, without the core: every rank of a simulated communicator is a
// Task driven by hand, and every result is compared element by element with
// a reference computed here. The fake connects ring neighbours only (so a
// collective that talks to anyone else fails), delivers messages one per
// link and round (so completions come late and interleave), and refuses
// posts beyond two outstanding per endpoint (so the AGAIN path runs).
// Every collective runs, rooted ones at every root. Several tasks run at
// once: two communicators interleaved on one thread, and on two threads
// sharing each rank's per-communicator state.
#include <catch2/catch.hpp>

#include "algorithms/ring/ring_task.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using chorus::ring::RingComm;
using chorus::ring::Task;

// Outstanding posts per endpoint and direction: the fake takes kCap, but
// advertises kAdvertised, so the executor's windows overrun it and see AGAIN
// (a transport may refuse below its caps, e.g. when a shared queue is full).
constexpr uint32_t kCap = 2;
constexpr uint32_t kAdvertised = 8;

struct World;

struct FakeEp {
  World* world = nullptr;
  int rank = 0, peer = 0, channel = 0;
  uint32_t sends_out = 0, recvs_out = 0;
};

struct Post {
  FakeEp* ep;
  void* buf;
  size_t len;
  uint64_t wr_id;
};

/// One simulated communicator: `size` ranks, `channels` endpoints per
/// neighbour pair, staging slots per rank, and each rank's completion queue.
struct World {
  int size, channels;
  size_t slots, slot_size;
  // eps[(rank * size + peer) * channels + channel]; only ring neighbours are used.
  std::vector<FakeEp> eps;
  // Per directed link (from, to, channel): sends and receives not yet matched.
  std::vector<std::deque<Post>> link_sends, link_recvs;
  std::vector<std::vector<chorus_tp_completion_t>> cq;
  std::vector<std::vector<std::vector<std::byte>>> staging_mem;
  std::vector<std::vector<void*>> staging;
  std::vector<std::vector<chorus_tp_mr_t*>> staging_mr;
  std::vector<std::string> errors;
  size_t refused = 0;               // posts answered with AGAIN
  uint32_t cap_flags = 0;           // CHORUS_TP_CAP_* every rank declares
  uint64_t max_message = 1u << 20;  // caps.max_message_size
  size_t largest_send = 0;          // longest message posted so far

  World(int n, int ch, size_t nslots, size_t slot_bytes)
      : size(n), channels(ch), slots(nslots), slot_size(slot_bytes) {
    eps.resize(size_t(n * n * ch));
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p)
        for (int c = 0; c < ch; ++c) eps[index(r, p, c)] = {this, r, p, c, 0, 0};
    link_sends.resize(eps.size());
    link_recvs.resize(eps.size());
    cq.resize(size_t(n));
    staging_mem.resize(size_t(n));
    staging.resize(size_t(n));
    staging_mr.assign(size_t(n), std::vector<chorus_tp_mr_t*>(nslots, nullptr));
    errors.resize(size_t(n));
    for (int r = 0; r < n; ++r) {
      staging_mem[size_t(r)].assign(nslots, std::vector<std::byte>(slot_bytes));
      for (auto& s : staging_mem[size_t(r)]) staging[size_t(r)].push_back(s.data());
    }
  }
  size_t index(int r, int p, int c) const {
    return (size_t(r) * size_t(size) + size_t(p)) * size_t(channels) + size_t(c);
  }
  bool neighbours(int a, int b) const {
    return a != b && ((a + 1) % size == b || (b + 1) % size == a);
  }

  /// Matches the oldest send and receive of every link, once per call.
  /// Returns false when a receive was shorter than its message.
  bool deliver() {
    bool ok = true;
    for (size_t l = 0; l < eps.size(); ++l) {
      if (link_sends[l].empty() || link_recvs[l].empty()) continue;
      Post s = link_sends[l].front(), r = link_recvs[l].front();
      link_sends[l].pop_front();
      link_recvs[l].pop_front();
      if (r.len < s.len) ok = false;
      std::memcpy(r.buf, s.buf, std::min(r.len, s.len));
      --s.ep->sends_out;
      --r.ep->recvs_out;
      cq[size_t(s.ep->rank)].push_back(
          {s.wr_id, CHORUS_TP_SEND, 0, s.len, reinterpret_cast<chorus_tp_endpoint_t*>(s.ep)});
      cq[size_t(r.ep->rank)].push_back(
          {r.wr_id, CHORUS_TP_RECV, 0, s.len, reinterpret_cast<chorus_tp_endpoint_t*>(r.ep)});
    }
    return ok;
  }
};

int fake_post(bool send, chorus_tp_endpoint_t* e, const void* buf, size_t len, uint64_t wr) {
  auto* ep = reinterpret_cast<FakeEp*>(e);
  World& w = *ep->world;
  uint32_t& out = send ? ep->sends_out : ep->recvs_out;
  if (out >= kCap) {
    ++w.refused;
    return CHORUS_ERR_AGAIN;
  }
  ++out;
  if (send) w.largest_send = std::max(w.largest_send, len);
  // A send from rank a to b and a receive on b from a meet on link (a, b).
  const size_t link =
      send ? w.index(ep->rank, ep->peer, ep->channel) : w.index(ep->peer, ep->rank, ep->channel);
  (send ? w.link_sends : w.link_recvs)[link].push_back({ep, const_cast<void*>(buf), len, wr});
  return CHORUS_OK;
}
int fake_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t len, chorus_tp_mr_t*,
                   uint64_t wr) {
  return fake_post(true, ep, buf, len, wr);
}
int fake_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t len, chorus_tp_mr_t*, uint64_t wr) {
  return fake_post(false, ep, buf, len, wr);
}
const char* fake_last_error() { return "fake transport"; }

chorus_transport_plugin_v1_t make_tp() {
  chorus_transport_plugin_v1_t tp{};
  tp.struct_size = sizeof(tp);
  tp.post_send = fake_post_send;
  tp.post_recv = fake_post_recv;
  tp.last_error = fake_last_error;
  return tp;
}
const chorus_transport_plugin_v1_t kTp = make_tp();

void sum_i64(const void* src, void* inout, size_t n) {
  for (size_t i = 0; i < n; ++i)
    static_cast<int64_t*>(inout)[i] += static_cast<const int64_t*>(src)[i];
}

/// One rank as the core would present it to a task.
struct Rank {
  World* world;
  int rank;
  chorus_tp_caps_t caps{};
  chorus_algo_env_v2_t env{};

  Rank(World* w, int r) : world(w), rank(r) {
    caps.struct_size = sizeof(caps);
    caps.max_message_size = w->max_message;
    caps.flags = w->cap_flags;
    caps.max_outstanding_sends = kAdvertised;
    caps.max_outstanding_recvs = kAdvertised;
    env.struct_size = sizeof(env);
    env.rank = r;
    env.size = w->size;
    env.channels = w->channels;
    env.tp = &kTp;
    env.caps = &caps;
    env.staging_slots = w->slots;
    env.staging_slot_size = w->slot_size;
    env.staging = w->staging[size_t(r)].data();
    env.staging_mr = w->staging_mr[size_t(r)].data();
    env.core = this;
    env.endpoint = [](void* core, int peer, int channel) -> chorus_tp_endpoint_t* {
      auto* self = static_cast<Rank*>(core);
      World& wd = *self->world;
      if (!wd.neighbours(self->rank, peer) || channel < 0 || channel >= wd.channels)
        return nullptr;  // only ring neighbours are connected
      return reinterpret_cast<chorus_tp_endpoint_t*>(&wd.eps[wd.index(self->rank, peer, channel)]);
    };
    env.reduce_kernel = [](int dtype, int op) -> chorus_reduce_fn_t {
      return dtype == CHORUS_INT64 && op == CHORUS_SUM ? sum_i64 : nullptr;
    };
    env.mem_register = [](void*, const void*, size_t, chorus_tp_mr_t** mr) {
      *mr = nullptr;
      return int(CHORUS_OK);
    };
    env.fail = [](void* core, int status, const char* message) {
      auto* self = static_cast<Rank*>(core);
      self->world->errors[size_t(self->rank)] = message;
      return status;
    };
    env.log = [](void*, int, const char*) {};
  }
};

/// One collective on every rank of `world`, driven by hand.
struct Run {
  World& world;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::unique_ptr<Task>> tasks;
  std::vector<int> state;

  Run(World& w, const std::vector<const RingComm*>& comms,
      const std::vector<chorus_algo_call_v2_t>& calls)
      : world(w) {
    for (int r = 0; r < w.size; ++r) ranks.push_back(std::make_unique<Rank>(&w, r));
    for (int r = 0; r < w.size; ++r)
      tasks.push_back(
          std::make_unique<Task>(*comms[size_t(r)], &ranks[size_t(r)]->env, calls[size_t(r)]));
    for (auto& t : tasks) state.push_back(t->start());
  }
  bool pending() const {
    for (int s : state)
      if (s == CHORUS_ALGO_TASK_PENDING) return true;
    return false;
  }
  /// One round: the network moves, then every pending task gets its
  /// completions (possibly none, as the core pokes a task refused with AGAIN).
  bool step() {
    const bool ok = world.deliver();
    for (size_t r = 0; r < tasks.size(); ++r) {
      if (state[r] != CHORUS_ALGO_TASK_PENDING) continue;
      std::vector<chorus_tp_completion_t> mine;
      mine.swap(world.cq[r]);
      state[r] = tasks[r]->progress(mine.data(), mine.size());
    }
    return ok;
  }
  /// Drives to the end within a bound on rounds; false on a hang or a short receive.
  bool finish() {
    for (int round = 0; round < 1000000 && pending(); ++round)
      if (!step()) return false;
    return !pending();
  }
  std::string report() const {
    std::string s;
    for (size_t r = 0; r < state.size(); ++r)
      s += "rank " + std::to_string(r) + ": state " + std::to_string(state[r]) + " " +
           world.errors[r] + "\n";
    return s;
  }
};

chorus_algo_call_v2_t make_call(int collective, size_t count, const void* in, void* out,
                                int root = -1) {
  chorus_algo_call_v2_t c{};
  c.struct_size = sizeof(c);
  c.collective = collective;
  c.dtype = collective == CHORUS_COLL_BARRIER ? -1 : CHORUS_INT64;
  c.op = CHORUS_SUM;
  c.root = root;
  c.count = count;
  c.bytes = count * 8;
  c.in = in;
  c.out = out;
  return c;
}

int64_t value(int rank, size_t i, int salt) {
  return int64_t(rank) * 1000003 + int64_t(i) * 7 + salt;
}

/// all_reduce and reduce_scatter of int64 sums on every rank of `world`,
/// checked against references; `comms` is each rank's state.
struct ReduceJob {
  size_t count;
  int salt;
  std::vector<std::vector<int64_t>> in, out;
  std::vector<chorus_algo_call_v2_t> calls;

  ReduceJob(int collective, int size, size_t n, int s) : count(n), salt(s) {
    const size_t in_len = collective == CHORUS_COLL_REDUCE_SCATTER ? n * size_t(size) : n;
    in.resize(size_t(size));
    out.assign(size_t(size), std::vector<int64_t>(n, -1));
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < in_len; ++i) in[size_t(r)].push_back(value(r, i, salt));
      calls.push_back(make_call(collective, n, in[size_t(r)].data(), out[size_t(r)].data()));
    }
  }
  /// Element i of rank r's result; first mismatch reported in `where`.
  bool check(int collective, std::string& where) const {
    const int size = int(in.size());
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < count; ++i) {
        const size_t at = collective == CHORUS_COLL_REDUCE_SCATTER ? size_t(r) * count + i : i;
        int64_t want = 0;
        for (int q = 0; q < size; ++q) want += value(q, at, salt);
        if (out[size_t(r)][i] != want) {
          where = "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                  std::to_string(out[size_t(r)][i]) + " != " + std::to_string(want);
          return false;
        }
      }
    return true;
  }
};

std::vector<std::unique_ptr<RingComm>> make_comms(int size, bool bidirectional) {
  std::vector<std::unique_ptr<RingComm>> comms;
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::make_unique<RingComm>());
    comms.back()->settings.bidirectional = bidirectional;
  }
  return comms;
}
std::vector<const RingComm*> view(const std::vector<std::unique_ptr<RingComm>>& comms) {
  std::vector<const RingComm*> v;
  for (auto& c : comms) v.push_back(c.get());
  return v;
}

}  // namespace

TEST_CASE("ring tasks: every collective, neighbours only, late completions and AGAIN",
          "[ring][task]") {
  for (int size : {2, 3, 4, 5}) {
    for (bool bidir : {false, true}) {
      CAPTURE(size, bidir);
      const size_t ns = size_t(size);
      World world(size, 2, 4, 64);  // pieces of 8 int64: many per chunk
      auto comms = make_comms(size, bidir);
      for (int coll : {CHORUS_COLL_ALL_REDUCE, CHORUS_COLL_REDUCE_SCATTER}) {
        CAPTURE(coll);
        ReduceJob job(coll, size, 203, coll);
        Run run(world, view(comms), job.calls);
        REQUIRE(run.finish());
        INFO(run.report());
        std::string where;
        CHECK(job.check(coll, where));
        INFO(where);
      }
      // all_gather: block q of every rank's output is rank q's input.
      const size_t n = 77;
      std::vector<std::vector<int64_t>> in(ns), out(ns);
      std::vector<chorus_algo_call_v2_t> calls;
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < n; ++i) in[size_t(r)].push_back(value(r, i, 11));
        out[size_t(r)].assign(n * size_t(size), -1);
        calls.push_back(
            make_call(CHORUS_COLL_ALL_GATHER, n, in[size_t(r)].data(), out[size_t(r)].data()));
      }
      Run gather(world, view(comms), calls);
      REQUIRE(gather.finish());
      for (int r = 0; r < size; ++r)
        for (int q = 0; q < size; ++q)
          for (size_t i = 0; i < n; ++i)
            REQUIRE(out[size_t(r)][size_t(q) * n + i] == value(q, i, 11));
      // broadcast from root size-1, in place.
      std::vector<std::vector<int64_t>> buf(ns);
      calls.clear();
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < n; ++i) buf[size_t(r)].push_back(value(r, i, 13));
        calls.push_back(make_call(CHORUS_COLL_BROADCAST, n, buf[size_t(r)].data(),
                                  buf[size_t(r)].data(), size - 1));
      }
      Run bcast(world, view(comms), calls);
      REQUIRE(bcast.finish());
      for (int r = 0; r < size; ++r)
        for (size_t i = 0; i < n; ++i) REQUIRE(buf[size_t(r)][i] == value(size - 1, i, 13));
      // all_to_allv: rank r sends (r + 2p) % 5 + 1 elements to rank p.
      auto sent = [](int from, int to) { return size_t((from + 2 * to) % 5 + 1); };
      std::vector<std::vector<size_t>> sc(ns), so(ns), rc(ns), ro(ns);
      std::vector<std::vector<int64_t>> ain(ns), aout(ns);
      calls.clear();
      for (int r = 0; r < size; ++r) {
        size_t s_off = 0, r_off = 0;
        for (int p = 0; p < size; ++p) {
          sc[size_t(r)].push_back(sent(r, p));
          so[size_t(r)].push_back(s_off);
          s_off += sent(r, p);
          rc[size_t(r)].push_back(sent(p, r));
          ro[size_t(r)].push_back(r_off);
          r_off += sent(p, r);
        }
        for (size_t i = 0; i < s_off; ++i) ain[size_t(r)].push_back(value(r, i, 17));
        aout[size_t(r)].assign(r_off, -1);
        chorus_algo_call_v2_t c =
            make_call(CHORUS_COLL_ALL_TO_ALLV, 0, ain[size_t(r)].data(), aout[size_t(r)].data());
        c.send_counts = sc[size_t(r)].data();
        c.send_offsets = so[size_t(r)].data();
        c.recv_counts = rc[size_t(r)].data();
        c.recv_offsets = ro[size_t(r)].data();
        calls.push_back(c);
      }
      Run a2av(world, view(comms), calls);
      REQUIRE(a2av.finish());
      INFO(a2av.report());
      for (int r = 0; r < size; ++r)
        for (int p = 0; p < size; ++p)
          for (size_t i = 0; i < sent(p, r); ++i)
            REQUIRE(aout[size_t(r)][ro[size_t(r)][size_t(p)] + i] ==
                    value(p, so[size_t(p)][size_t(r)] + i, 17));
      // barrier
      calls.assign(ns, make_call(CHORUS_COLL_BARRIER, 0, nullptr, nullptr));
      Run barrier(world, view(comms), calls);
      REQUIRE(barrier.finish());
      for (int s : barrier.state) CHECK(s == CHORUS_ALGO_TASK_DONE);
      CHECK(world.refused > 0);  // the AGAIN path ran
    }
  }
}

TEST_CASE("ring tasks: rooted collectives and all_to_all in place, neighbours only",
          "[ring][task]") {
  for (int size : {2, 3, 5}) {
    for (bool bidir : {false, true}) {
      CAPTURE(size, bidir);
      const size_t ns = size_t(size), n = 45;
      World world(size, 2, 4, 64);
      auto comms = make_comms(size, bidir);
      for (int root = 0; root < size; ++root) {
        CAPTURE(root);
        // reduce: out on the root is the sum; the inputs stay untouched.
        std::vector<std::vector<int64_t>> in(ns), out(ns);
        std::vector<chorus_algo_call_v2_t> calls;
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < n; ++i) in[size_t(r)].push_back(value(r, i, 19));
          out[size_t(r)].assign(n, -1);
          calls.push_back(
              make_call(CHORUS_COLL_REDUCE, n, in[size_t(r)].data(), out[size_t(r)].data(), root));
        }
        Run reduce(world, view(comms), calls);
        REQUIRE(reduce.finish());
        INFO(reduce.report());
        for (size_t i = 0; i < n; ++i) {
          int64_t want = 0;
          for (int q = 0; q < size; ++q) want += value(q, i, 19);
          REQUIRE(out[size_t(root)][i] == want);
          for (int r = 0; r < size; ++r) REQUIRE(in[size_t(r)][i] == value(r, i, 19));
        }
        // gather to the root, then scatter those blocks back out.
        std::vector<int64_t> gathered(n * ns, -1);
        calls.clear();
        for (int r = 0; r < size; ++r)
          calls.push_back(make_call(CHORUS_COLL_GATHER, n, in[size_t(r)].data(),
                                    r == root ? gathered.data() : nullptr, root));
        Run gather(world, view(comms), calls);
        REQUIRE(gather.finish());
        for (int q = 0; q < size; ++q)
          for (size_t i = 0; i < n; ++i) REQUIRE(gathered[size_t(q) * n + i] == value(q, i, 19));
        calls.clear();
        for (int r = 0; r < size; ++r) {
          out[size_t(r)].assign(n, -1);
          calls.push_back(make_call(CHORUS_COLL_SCATTER, n, r == root ? gathered.data() : nullptr,
                                    out[size_t(r)].data(), root));
        }
        Run scatter(world, view(comms), calls);
        REQUIRE(scatter.finish());
        for (int r = 0; r < size; ++r)
          for (size_t i = 0; i < n; ++i) REQUIRE(out[size_t(r)][i] == value(r, i, 19));
      }
      // all_to_all in place: block p of rank r goes to block r of rank p.
      std::vector<std::vector<int64_t>> buf(ns);
      std::vector<chorus_algo_call_v2_t> calls;
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < n * ns; ++i) buf[size_t(r)].push_back(value(r, i, 23));
        calls.push_back(
            make_call(CHORUS_COLL_ALL_TO_ALL, n, buf[size_t(r)].data(), buf[size_t(r)].data()));
      }
      Run a2a(world, view(comms), calls);
      REQUIRE(a2a.finish());
      for (int r = 0; r < size; ++r)
        for (int p = 0; p < size; ++p)
          for (size_t i = 0; i < n; ++i)
            REQUIRE(buf[size_t(r)][size_t(p) * n + i] == value(p, size_t(r) * n + i, 23));
    }
  }
}

TEST_CASE("ring tasks: two communicators interleaved on one thread", "[ring][task]") {
  const int size = 4;
  World a(size, 1, 4, 64), b(size, 2, 8, 128);
  auto comms_a = make_comms(size, false), comms_b = make_comms(size, true);
  ReduceJob ja(CHORUS_COLL_ALL_REDUCE, size, 1001, 1), jb(CHORUS_COLL_REDUCE_SCATTER, size, 333, 2);
  Run ra(a, view(comms_a), ja.calls), rb(b, view(comms_b), jb.calls);
  for (int round = 0; round < 1000000 && (ra.pending() || rb.pending()); ++round) {
    if (ra.pending()) REQUIRE(ra.step());
    if (rb.pending()) REQUIRE(rb.step());
  }
  INFO(ra.report() + rb.report());
  REQUIRE_FALSE(ra.pending());
  REQUIRE_FALSE(rb.pending());
  std::string where;
  CHECK(ja.check(CHORUS_COLL_ALL_REDUCE, where));
  CHECK(jb.check(CHORUS_COLL_REDUCE_SCATTER, where));
  INFO(where);
}

TEST_CASE("ring tasks: two threads share each rank's state (and its scratch pool)",
          "[ring][task]") {
  const int size = 3;
  auto comms = make_comms(size, true);  // one RingComm per rank, used by both threads
  for (int repeat = 0; repeat < 3; ++repeat) {
    World a(size, 2, 4, 64), b(size, 2, 4, 64);
    ReduceJob ja(CHORUS_COLL_REDUCE_SCATTER, size, 2049, 3 + repeat);
    ReduceJob jb(CHORUS_COLL_REDUCE_SCATTER, size, 1500, 7 + repeat);
    bool done_a = false, done_b = false;
    std::thread ta([&] {
      Run r(a, view(comms), ja.calls);
      done_a = r.finish();
    });
    std::thread tb([&] {
      Run r(b, view(comms), jb.calls);
      done_b = r.finish();
    });
    ta.join();
    tb.join();
    REQUIRE(done_a);
    REQUIRE(done_b);
    std::string where;
    CHECK(ja.check(CHORUS_COLL_REDUCE_SCATTER, where));
    CHECK(jb.check(CHORUS_COLL_REDUCE_SCATTER, where));
    INFO(where);
  }
  // Both threads' scratch went back to the pools, to be reused.
  for (auto& c : comms) CHECK(c->scratch.idle() >= 1);
}

TEST_CASE("ring all_gather posts pieces larger than a slot when the transport takes large posts",
          "[ring][task]") {
  // Slots of 64 bytes; with CHORUS_TP_CAP_LARGE_POSTS an all_gather (nothing
  // staged or reduced) is cut by sdk::in_place_post_bytes instead, here the
  // 256-byte max_message_size; all_reduce keeps slot-sized pieces.
  for (int size : {2, 3, 4}) {
    for (bool large : {false, true}) {
      CAPTURE(size, large);
      const size_t ns = size_t(size), n = 203;  // 1624 bytes a block: 7 pieces of 256
      World world(size, 1, 4, 64);
      world.max_message = 256;
      world.cap_flags = large ? uint32_t(CHORUS_TP_CAP_LARGE_POSTS) : 0u;
      auto comms = make_comms(size, false);
      std::vector<std::vector<int64_t>> in(ns), out(ns);
      std::vector<chorus_algo_call_v2_t> calls;
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < n; ++i) in[size_t(r)].push_back(value(r, i, 23));
        out[size_t(r)].assign(n * ns, -1);
        calls.push_back(
            make_call(CHORUS_COLL_ALL_GATHER, n, in[size_t(r)].data(), out[size_t(r)].data()));
      }
      Run gather(world, view(comms), calls);
      REQUIRE(gather.finish());
      INFO(gather.report());
      for (int r = 0; r < size; ++r)
        for (int q = 0; q < size; ++q)
          for (size_t i = 0; i < n; ++i)
            REQUIRE(out[size_t(r)][size_t(q) * n + i] == value(q, i, 23));
      CHECK(world.largest_send == (large ? 256u : 64u));
      world.largest_send = 0;
      ReduceJob job(CHORUS_COLL_ALL_REDUCE, size, n, 29);
      Run reduce(world, view(comms), job.calls);
      REQUIRE(reduce.finish());
      std::string where;
      CHECK(job.check(CHORUS_COLL_ALL_REDUCE, where));
      INFO(where);
      CHECK(world.largest_send == 64u);
    }
  }
}
