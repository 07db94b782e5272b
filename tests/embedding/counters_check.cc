// Every counter of docs/embedding.md's table against operations whose effect
// is known, on 3 ranks (run under chorusrun): deltas of the snapshot before
// and after each step, on every rank.
//
//  errors:               a bad dtype, a bad peer, a bad op on a request, and a
//                        call after abort each count once; nothing else does
//  bytes/messages:       one send of 4000 bytes from rank 0 to rank 1, in the
//                        totals and under peer.<r>.*, on both ends only
//  ops.*:                all_reduce (ring pinned), send, recv, inline, queued
//  requests.*:           issued per request; cancelled for a queued request
//  wait.transport_ns:    grows on a rank blocked on a late peer
//  wait.request_ns:      grows while a host thread blocks in Request::wait
//  endpoints.*:          the data, notice and point-to-point endpoints of init
// retries (a full transport queue) has no deterministic trigger here; the
// conformance suite covers AGAIN at the transport.
#include <chorus/chorus.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = 0;
int g_failed = 0;
int g_checks = 0;

using Counters = std::map<std::string, uint64_t>;

Counters snapshot(const chorus::Communicator& c) {
  Counters m;
  for (auto& [k, v] : c.counters()) m[k] = v;
  return m;
}

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    std::printf("r%d FAIL %s\n", g_rank, what.c_str());
    ++g_failed;
  }
}

/// after[name] - before[name] must be `want` (missing counters read 0).
void expect_delta(const Counters& before, const Counters& after, const std::string& name,
                  uint64_t want) {
  auto get = [&](const Counters& m) {
    auto it = m.find(name);
    return it == m.end() ? uint64_t(0) : it->second;
  };
  const uint64_t got = get(after) - get(before);
  expect(got == want,
         name + " grew by " + std::to_string(got) + ", expected " + std::to_string(want));
}

/// Runs `f`, which must throw chorus::Error.
template <class F>
void expect_throws(F&& f, const std::string& what) {
  try {
    f();
    expect(false, what + " did not fail");
  } catch (const chorus::Error&) {
    expect(true, what);
  }
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  chorus_options_t o;
  chorus_options_init(&o);
  const char* settings[] = {"algorithm.all_reduce=\"ring\""};
  o.settings = settings;
  o.settings_count = 1;
  try {
    chorus::Communicator comm(&o);
    g_rank = comm.rank();
    const int me = comm.rank();
    if (comm.size() != 3) {
      std::printf("r%d FAIL: run with 3 ranks\n", me);
      return 1;
    }
    std::vector<float> a(100, 1.0f), b(100);

    // errors: three bad-argument failures, then nothing else fails.
    Counters c0 = snapshot(comm);
    expect_throws([&] { comm.all_reduce(a.data(), b.data(), a.size(), 999, CHORUS_SUM); },
                  "all_reduce with dtype 999");
    expect_throws([&] { comm.send(a.data(), a.size(), me); }, "send to itself");
    expect_throws([&] { comm.iall_reduce(a.data(), b.data(), a.size(), 77); },
                  "iall_reduce with op 77");
    Counters c1 = snapshot(comm);
    expect_delta(c0, c1, "errors", 3);
    expect_delta(c0, c1, "requests.issued", 0);
    expect_delta(c0, c1, "ops.inline", 0);

    // ops.<collective>.<algorithm>, ops.inline: two blocking all_reduces.
    comm.all_reduce(a.data(), b.data(), a.size());
    comm.all_reduce(a.data(), b.data(), a.size());
    Counters c2 = snapshot(comm);
    expect_delta(c1, c2, "ops.all_reduce.ring", 2);
    expect_delta(c1, c2, "ops.inline", 2);
    expect_delta(c1, c2, "ops.queued", 0);
    expect_delta(c1, c2, "errors", 0);

    // endpoints.*: what init opened, one channel at 3 ranks (a ring's two
    // neighbours are every other rank here, so ring-only or not, 2 peers).
    for (const auto& [name, want] : {std::pair<const char*, uint64_t>{"endpoints.data", 2},
                                     {"endpoints.data_peers", 2},
                                     {"endpoints.notice", 2},
                                     {"endpoints.point_to_point", 4}})
      expect(c2.count(name) && c2[name] == want, std::string(name) + " is " +
                                                     std::to_string(c2[name]) + ", expected " +
                                                     std::to_string(want));

    // Bytes and messages: 1000 int32 from rank 0 to rank 1, sent late so that
    // rank 1 blocks in the transport's wait.
    std::vector<int32_t> msg(1000, 7), got(1000);
    Counters c3 = snapshot(comm);
    if (me == 0) {
      sleep_ms(50);
      comm.send(msg.data(), msg.size(), 1);
    } else if (me == 1) {
      comm.recv(got.data(), got.size(), 0);
    }
    Counters c4 = snapshot(comm);
    const uint64_t sent = me == 0 ? 4000 : 0, received = me == 1 ? 4000 : 0;
    expect_delta(c3, c4, "bytes_sent", sent);
    expect_delta(c3, c4, "messages_sent", me == 0 ? 1 : 0);
    expect_delta(c3, c4, "bytes_received", received);
    expect_delta(c3, c4, "messages_received", me == 1 ? 1 : 0);
    expect_delta(c3, c4, "peer.1.bytes_sent", sent);
    expect_delta(c3, c4, "peer.1.messages_sent", me == 0 ? 1 : 0);
    expect_delta(c3, c4, "peer.0.bytes_received", received);
    expect_delta(c3, c4, "peer.0.messages_received", me == 1 ? 1 : 0);
    expect_delta(c3, c4, "peer.2.bytes_sent", 0);
    expect_delta(c3, c4, "ops.send", me == 0 ? 1 : 0);
    expect_delta(c3, c4, "ops.recv", me == 1 ? 1 : 0);
    if (me == 1)
      expect(c4["wait.transport_ns"] > c3["wait.transport_ns"],
             "wait.transport_ns grew while waiting for a late sender");

    // requests.issued, ops.queued, wait.request_ns: rank 1 blocks in
    // Request::wait on a receive whose sender is late.
    comm.barrier();
    Counters c5 = snapshot(comm);
    if (me == 0) {
      sleep_ms(50);
      comm.isend(msg.data(), msg.size(), 1).wait();
    } else if (me == 1) {
      comm.irecv(got.data(), got.size(), 0).wait();
    }
    Counters c6 = snapshot(comm);
    expect_delta(c5, c6, "requests.issued", me < 2 ? 1 : 0);
    expect_delta(c5, c6, "ops.queued", me < 2 ? 1 : 0);
    if (me == 1)
      expect(c6["wait.request_ns"] > c5["wait.request_ns"],
             "wait.request_ns grew while Request::wait blocked");

    // requests.cancelled: on a child of ranks 0 and 1, rank 0's irecv runs
    // (its sender waits for the world barrier) while a barrier request is
    // still queued behind it, so that one can be cancelled.
    chorus::Communicator child = comm.split(me < 2 ? 0 : CHORUS_UNDEFINED, me);
    if (me == 0) {
      Counters k0 = snapshot(child);
      chorus::Request running = child.irecv(got.data(), got.size(), 1);
      chorus::Request queued = child.ibarrier();
      expect(queued.cancel(), "a queued request can be cancelled");
      comm.barrier();
      running.wait();
      expect_throws([&] { queued.wait(); }, "the cancelled request reports it");
      Counters k1 = snapshot(child);
      expect_delta(k0, k1, "requests.cancelled", 1);
      expect_delta(k0, k1, "requests.issued", 2);
      expect_delta(k0, k1, "errors", 0);
    } else if (me == 1) {
      comm.barrier();
      child.send(msg.data(), msg.size(), 0);
    } else {
      comm.barrier();
    }

    // errors: a call on an aborted communicator counts too.
    comm.barrier();
    Counters c7 = snapshot(comm);
    comm.abort();
    expect_throws([&] { comm.barrier(); }, "barrier after abort");
    expect_delta(c7, snapshot(comm), "errors", 1);
  } catch (const chorus::Error& e) {
    std::printf("r%d FAIL: %s\n", g_rank, e.what());
    return 1;
  }
  std::printf("r%d counters_check: %d checks, %d failed\n", g_rank, g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
