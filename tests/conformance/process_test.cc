// Cases with a real peer process: the test forks the peer, the two trade
// address blobs over a socketpair, and the peer may exit, be killed or close
// its endpoint while the test has work outstanding.
#include "support.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace chorus::conformance;

namespace {

constexpr int kDeadlineMs = 10000;  // a peer failure must surface within this

void ensure(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

/// The forked peer's side: rank `rank` of `size` with `channels` endpoints to
/// rank 0, blobs traded over `ctl`, connected.
struct PeerSide {
  std::unique_ptr<Context> ctx;
  std::vector<Endpoint> eps;
};

PeerSide peer_connect(Control& ctl, int rank, int size, int channels) {
  PeerSide p;
  p.ctx = std::make_unique<Context>(rank, size);
  for (int c = 0; c < channels; ++c) {
    p.eps.push_back(open_endpoint(*p.ctx, 0, c));
    ctl.send("blob", p.eps.back().blob);
  }
  for (int c = 0; c < channels; ++c) {
    const Bytes theirs = ctl.expect("blob");
    check(connect_endpoint(p.eps[static_cast<std::size_t>(c)], theirs, 20000),
          "peer endpoint_connect");
  }
  ctl.send("connected");
  return p;
}

/// The test's side (rank 0) of peer_connect.
std::vector<Endpoint> test_connect(Context& ctx, Control& ctl, int peer, int channels) {
  std::vector<Endpoint> eps;
  std::vector<Bytes> theirs;
  for (int c = 0; c < channels; ++c) {
    eps.push_back(open_endpoint(ctx, peer, c));
    theirs.push_back(ctl.expect("blob"));
  }
  for (int c = 0; c < channels; ++c) ctl.send("blob", eps[static_cast<std::size_t>(c)].blob);
  for (int c = 0; c < channels; ++c) {
    check(connect_endpoint(eps[static_cast<std::size_t>(c)], theirs[static_cast<std::size_t>(c)],
                           20000),
          "endpoint_connect to peer " + std::to_string(peer));
  }
  ctl.expect("connected");
  return eps;
}

/// After a peer failure, a new post must fail now or complete with an error soon.
void expect_post_fails(Context& ctx, chorus_tp_endpoint_t* ep, bool send) {
  unsigned char byte = 0;
  const std::size_t errors_before = ctx.errors.size();
  const int rc = send ? tp().post_send(ep, &byte, 1, nullptr, 4242)
                      : tp().post_recv(ep, &byte, 1, nullptr, 4242);
  INFO((send ? "post_send" : "post_recv") << " after the peer failed -> " << status_name(rc) << " ("
                                          << (rc != CHORUS_OK ? last_error() : "") << ")");
  if (rc == CHORUS_OK) {
    REQUIRE(pump_until(
        {&ctx}, [&] { return ctx.errors.size() > errors_before; }, kDeadlineMs));
    CHECK(ctx.errors.back().wr_id == 4242);
    CHECK(ctx.errors.back().status == CHORUS_ERR_PEER_LOST);
  } else {
    CHECK(rc == CHORUS_ERR_PEER_LOST);
  }
}

}  // namespace

/// The echo sizes up to 64 MiB, capped at the transport's max_message_size
/// (rdma_rxe allows 8 MiB); the cap itself is always among them.
std::vector<std::size_t> echo_sizes(std::uint64_t max_message_size) {
  const std::size_t biggest = std::min<std::uint64_t>(64u << 20, max_message_size);
  std::vector<std::size_t> sizes;
  for (std::size_t s : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(4097),
                        std::size_t(65537), std::size_t((1u << 20) + 3)})
    if (s < biggest) sizes.push_back(s);
  sizes.push_back(biggest);
  return sizes;
}

TEST_CASE("a peer process echoes messages of every size", "[process][sizes]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  CONFORMANCE_NEEDS_OTHER_PROCESSES();
  ChildProcess child([&](Control& ctl) {
    PeerSide me = peer_connect(ctl, 1, 2, 1);
    const std::vector<std::size_t> sizes = echo_sizes(me.ctx->caps().max_message_size);
    const std::size_t biggest = sizes.back();
    std::unique_ptr<unsigned char[]> buf(new unsigned char[biggest]);
    for (const std::size_t size : sizes) {
      me.ctx->completions.clear();
      check(tp().post_recv(me.eps[0].ep, buf.get(), biggest, nullptr, 1), "peer post_recv");
      ensure(pump_until(
                 {me.ctx.get()},
                 [&] { return !me.ctx->completions.empty() || !me.ctx->errors.empty(); }, 20000),
             "peer: no message of size " + std::to_string(size));
      ensure(me.ctx->errors.empty(), "peer: error completion");
      ensure(me.ctx->completions[0].byte_len == size,
             "peer: byte_len " + std::to_string(me.ctx->completions[0].byte_len) +
                 " for a message of " + std::to_string(size));
      check(tp().post_send(me.eps[0].ep, buf.get(), size, nullptr, 2), "peer post_send");
      ensure(pump_until(
                 {me.ctx.get()},
                 [&] { return me.ctx->completions.size() == 2 || !me.ctx->errors.empty(); }, 20000),
             "peer: echo did not complete");
      ensure(me.ctx->errors.empty(), "peer: echo failed");
    }
    ctl.expect("exit");
  });
  Context ctx(0, 2);
  std::vector<Endpoint> eps = test_connect(ctx, child.control(), 1, 1);
  const std::vector<std::size_t> sizes = echo_sizes(ctx.caps().max_message_size);
  const std::size_t biggest = sizes.back();
  INFO("max_message_size " << ctx.caps().max_message_size << ", largest echo " << biggest);
  std::unique_ptr<unsigned char[]> out(new unsigned char[biggest]), in(new unsigned char[biggest]);
  for (const std::size_t size : sizes) {
    INFO("size " << size);
    const auto seed = static_cast<std::uint32_t>(size + 5);
    fill_pattern(out.get(), size, seed);
    ctx.completions.clear();
    REQUIRE_OK(tp().post_recv(eps[0].ep, in.get(), biggest, nullptr, 10));
    REQUIRE_OK(tp().post_send(eps[0].ep, out.get(), size, nullptr, 11));
    REQUIRE(pump_until(
        {&ctx}, [&] { return ctx.completions.size() == 2 || !ctx.errors.empty(); }, 30000));
    REQUIRE(ctx.errors.empty());
    for (const auto& c : ctx.completions) {
      CHECK(c.byte_len == size);
      CHECK(c.wr_id == (c.opcode == CHORUS_TP_RECV ? 10u : 11u));
    }
    REQUIRE_FALSE(pattern_mismatch(in.get(), size, seed));
  }
  child.control().send("exit");
  REQUIRE(child.join() == 0);
}

TEST_CASE("a peer that fails produces errors, never a hang", "[process][failure]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  CONFORMANCE_NEEDS_OTHER_PROCESSES();

  SECTION("the peer process exits while receives are posted") {
    ChildProcess child([](Control& ctl) {
      PeerSide me = peer_connect(ctl, 1, 2, 1);
      ctl.expect("die");
      ::_exit(0);  // no endpoint_close, no context_close: the OS tears it down
    });
    Context ctx(0, 2);
    std::vector<Endpoint> eps = test_connect(ctx, child.control(), 1, 1);
    Bytes in(4 * 64);
    for (int i = 0; i < 4; ++i)
      REQUIRE_OK(tp().post_recv(eps[0].ep, &in[static_cast<std::size_t>(i) * 64], 64, nullptr,
                                static_cast<std::uint64_t>(i)));
    child.control().send("die");
    const auto t0 = Clock::now();
    REQUIRE(pump_until(
        {&ctx}, [&] { return ctx.errors.size() == 4; }, kDeadlineMs));
    INFO("errors surfaced after " << ms_since(t0) << " ms");
    CHECK(ctx.completions.empty());
    for (std::size_t i = 0; i < 4; ++i) {
      const chorus_tp_error_t& e = ctx.errors[i];
      INFO("error " << i << ": " << e.message);
      CHECK(e.wr_id == i);  // in post order
      CHECK(e.opcode == CHORUS_TP_RECV);
      CHECK(e.status == CHORUS_ERR_PEER_LOST);
      CHECK(e.peer_rank == 1);
      CHECK(e.endpoint == eps[0].ep);
      CHECK(std::strlen(e.message) > 0);
    }
    expect_post_fails(ctx, eps[0].ep, true);
    expect_post_fails(ctx, eps[0].ep, false);
    CHECK(child.join() == 0);
  }

  SECTION("the peer process is killed while a large send is stuck behind flow control") {
    ChildProcess child([](Control& ctl) {
      PeerSide me = peer_connect(ctl, 1, 2, 1);
      ctl.send("ready");
      for (;;) ::pause();  // never posts a receive
    });
    Context ctx(0, 2);
    std::vector<Endpoint> eps = test_connect(ctx, child.control(), 1, 1);
    child.control().expect("ready");
    const std::size_t size = std::min<std::uint64_t>(64u << 20, ctx.caps().max_message_size);
    std::unique_ptr<unsigned char[]> big(new unsigned char[size]);
    std::memset(big.get(), 7, size);
    REQUIRE_OK(tp().post_send(eps[0].ep, big.get(), size, nullptr, 77));
    pump_until(
        {&ctx}, [] { return false; }, 300);
    const bool completed_before_kill = !ctx.completions.empty();
    child.kill(SIGKILL);
    if (completed_before_kill) {
      // The transport buffered the whole message; the failure shows on the next post.
      expect_post_fails(ctx, eps[0].ep, false);
    } else {
      REQUIRE(pump_until(
          {&ctx}, [&] { return !ctx.errors.empty() || !ctx.completions.empty(); }, kDeadlineMs));
      REQUIRE(ctx.errors.size() == 1);
      CHECK(ctx.errors[0].wr_id == 77);
      CHECK(ctx.errors[0].opcode == CHORUS_TP_SEND);
      CHECK(ctx.errors[0].status == CHORUS_ERR_PEER_LOST);
      CHECK(ctx.errors[0].peer_rank == 1);
      INFO("error message: " << ctx.errors[0].message);
      CHECK(std::strlen(ctx.errors[0].message) > 0);
    }
    if (Plugin::get().transport() == "tcp") CHECK_FALSE(completed_before_kill);
    expect_post_fails(ctx, eps[0].ep, true);
    CHECK(child.join() == 128 + SIGKILL);
  }

  SECTION("the peer closes its endpoint and stays alive") {
    ChildProcess child([](Control& ctl) {
      PeerSide me = peer_connect(ctl, 1, 2, 1);
      ctl.expect("close");
      check(tp().endpoint_close(me.eps[0].ep), "peer endpoint_close");
      ctl.send("closed");
      ctl.expect("exit");
    });
    Context ctx(0, 2);
    std::vector<Endpoint> eps = test_connect(ctx, child.control(), 1, 1);
    Bytes in(2 * 64);
    REQUIRE_OK(tp().post_recv(eps[0].ep, in.data(), 64, nullptr, 0));
    REQUIRE_OK(tp().post_recv(eps[0].ep, in.data() + 64, 64, nullptr, 1));
    child.control().send("close");
    child.control().expect("closed");
    REQUIRE(pump_until(
        {&ctx}, [&] { return ctx.errors.size() == 2; }, kDeadlineMs));
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(ctx.errors[i].wr_id == i);
      CHECK(ctx.errors[i].status == CHORUS_ERR_PEER_LOST);
      CHECK(ctx.errors[i].peer_rank == 1);
    }
    expect_post_fails(ctx, eps[0].ep, true);
    child.control().send("exit");
    CHECK(child.join() == 0);
  }
}

TEST_CASE("wait sleeps until a message from another process arrives", "[process][wait]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  CONFORMANCE_NEEDS_OTHER_PROCESSES();
  // The peer sends this long after "go": long enough that a spinning wait
  // would burn far more CPU than the bound below allows.
  static constexpr int kPeerDelayMs = 1000;
  ChildProcess child([](Control& ctl) {
    PeerSide me = peer_connect(ctl, 1, 2, 1);
    ctl.expect("go");
    std::this_thread::sleep_for(std::chrono::milliseconds(kPeerDelayMs));
    Bytes msg(64, 0x5A);
    check(tp().post_send(me.eps[0].ep, msg.data(), msg.size(), nullptr, 1), "peer post_send");
    ensure(pump_until(
               {me.ctx.get()}, [&] { return !me.ctx->completions.empty(); }, 10000),
           "peer: send did not complete");
    ctl.expect("exit");
  });
  Context ctx(0, 2);
  std::vector<Endpoint> eps = test_connect(ctx, child.control(), 1, 1);
  Bytes in(64);
  REQUIRE_OK(tp().post_recv(eps[0].ep, in.data(), in.size(), nullptr, 9));
  chorus_tp_completion_t c[4];
  REQUIRE(tp().poll(ctx.get(), c, 4) == 0);

  // Taken before "go": the message cannot arrive before the peer has slept.
  const auto t0 = Clock::now();
  const auto cpu0 = cpu_time();
  child.control().send("go");
  // Each wait may sleep up to kDeadlineMs: one that slept through the
  // arrival returns TIMEOUT, so "no wait timed out" says it woke for it.
  int waits = 0, got = 0, timeouts = 0;
  while (got == 0 && timeouts == 0 && waits < 100) {
    const int rc = tp().wait(ctx.get(), kDeadlineMs);
    ++waits;
    REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT));
    if (rc == CHORUS_ERR_TIMEOUT) ++timeouts;
    got = tp().poll(ctx.get(), c, 4);
    REQUIRE(got >= 0);
  }
  const double elapsed = ms_since(t0);
  const double cpu_ms = std::chrono::duration<double, std::milli>(cpu_time() - cpu0).count();
  INFO("arrived after " << elapsed << " ms, " << waits << " wait calls, " << timeouts
                        << " timed out, " << cpu_ms << " ms CPU");
  REQUIRE(got == 1);
  CHECK(c[0].wr_id == 9);
  CHECK(c[0].byte_len == 64);
  CHECK(in == Bytes(64, 0x5A));
  CHECK(elapsed >= kPeerDelayMs);  // not before the peer sent it
  CHECK(timeouts == 0);            // wait woke up for it, not at its own timeout
  CHECK(waits <= 20);              // spurious wake-ups are allowed, spinning is not
  // A spinning wait burns about kPeerDelayMs of CPU; a sleeping one a few ms.
  CHECK(cpu_ms < kPeerDelayMs * 0.5);
  child.control().send("exit");
  CHECK(child.join() == 0);
}
