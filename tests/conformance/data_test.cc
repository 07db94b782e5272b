// Data movement on connected pairs in one process: ordering, sizes,
// outstanding-post limits, short receives, both directions at once.
#include "support.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

using namespace chorus::conformance;

namespace {

std::uint64_t wr(std::uint32_t channel, std::uint32_t index) {
  return (std::uint64_t{channel} << 32) | index;
}

/// A heap buffer that is not zero-initialised (64 MiB of zeroing per case
/// adds up) and is freed with the case.
struct Buffer {
  explicit Buffer(std::size_t n) : size(n), data(new unsigned char[std::max<std::size_t>(n, 1)]) {}
  std::size_t size;
  std::unique_ptr<unsigned char[]> data;
  unsigned char* get() { return data.get(); }
};

}  // namespace

TEST_CASE("messages on an endpoint arrive in send order", "[data][order]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  constexpr int kChannels = 2;
  constexpr std::uint32_t kMessages = 3000;
  constexpr std::size_t kSlot = 64;
  Pair p(kChannels);
  const std::uint32_t window = std::min<std::uint32_t>(
      {256, p.a.caps().max_outstanding_sends, p.b.caps().max_outstanding_recvs});
  auto size_of = [](std::uint32_t i) { return std::size_t{8} + (i * 7u) % 57u; };

  std::vector<Bytes> out(kChannels, Bytes(kMessages * kSlot)),
      in(kChannels, Bytes(kMessages * kSlot, 0));
  std::vector<std::unique_ptr<Registration>> regs;
  for (std::uint32_t c = 0; c < kChannels; ++c) {
    for (std::uint32_t i = 0; i < kMessages; ++i) {
      unsigned char* m = &out[c][i * kSlot];
      fill_pattern(m, size_of(i), i * 31 + c);
      std::memcpy(m, &i, sizeof i);  // sequence number up front
      std::memcpy(m + 4, &c, sizeof c);
    }
    regs.push_back(std::make_unique<Registration>(p.a, out[c].data(), out[c].size()));
    regs.push_back(std::make_unique<Registration>(p.b, in[c].data(), in[c].size()));
  }

  std::uint32_t sends_posted[kChannels] = {}, recvs_posted[kChannels] = {};
  std::uint32_t sends_done[kChannels] = {}, recvs_done[kChannels] = {};
  std::size_t seen_a = 0, seen_b = 0;
  std::vector<std::string> problems;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto all_done = [&] {
    for (int c = 0; c < kChannels; ++c) {
      if (sends_done[c] < kMessages || recvs_done[c] < kMessages) return false;
    }
    return true;
  };
  while (!all_done() && Clock::now() < deadline) {
    for (std::uint32_t c = 0; c < kChannels; ++c) {
      // Receives first on even rounds, sends first on odd ones: both the
      // "receive already waiting" and the "message already waiting" paths.
      while (recvs_posted[c] < kMessages && recvs_posted[c] - recvs_done[c] < window) {
        const std::uint32_t i = recvs_posted[c]++;
        REQUIRE_OK(
            tp().post_recv(p.eb[c].ep, &in[c][i * kSlot], kSlot, regs[c * 2 + 1]->mr(), wr(c, i)));
      }
      while (sends_posted[c] < kMessages && sends_posted[c] - sends_done[c] < window) {
        const std::uint32_t i = sends_posted[c]++;
        REQUIRE_OK(tp().post_send(p.ea[c].ep, &out[c][i * kSlot], size_of(i), regs[c * 2]->mr(),
                                  wr(c, i)));
      }
    }
    p.a.pump();
    p.b.pump();
    REQUIRE(p.a.errors.empty());
    REQUIRE(p.b.errors.empty());
    for (; seen_a < p.a.completions.size(); ++seen_a) {
      const auto& cq = p.a.completions[seen_a];
      const auto c = static_cast<std::uint32_t>(cq.wr_id >> 32);
      REQUIRE(cq.opcode == CHORUS_TP_SEND);
      REQUIRE(c < kChannels);
      REQUIRE(cq.endpoint == p.ea[c].ep);
      if ((cq.wr_id & 0xffffffffu) != sends_done[c])
        problems.push_back("send completion out of order");
      ++sends_done[c];
    }
    for (; seen_b < p.b.completions.size(); ++seen_b) {
      const auto& cq = p.b.completions[seen_b];
      const auto c = static_cast<std::uint32_t>(cq.wr_id >> 32);
      const auto i = static_cast<std::uint32_t>(cq.wr_id & 0xffffffffu);
      REQUIRE(cq.opcode == CHORUS_TP_RECV);
      REQUIRE(c < kChannels);
      REQUIRE(cq.endpoint == p.eb[c].ep);
      REQUIRE(i == recvs_done[c]);  // receive completions in post order
      REQUIRE(cq.byte_len == size_of(i));
      std::uint32_t seq, chan;
      std::memcpy(&seq, &in[c][i * kSlot], 4);
      std::memcpy(&chan, &in[c][i * kSlot + 4], 4);
      REQUIRE(seq == i);  // ...and each consumed the oldest receive
      REQUIRE(chan == c);
      ++recvs_done[c];
    }
  }
  REQUIRE(all_done());
  CHECK(problems.empty());
  std::size_t mismatched = 0;
  for (std::uint32_t c = 0; c < kChannels; ++c) {
    for (std::uint32_t i = 0; i < kMessages; ++i) {
      mismatched += std::memcmp(&in[c][i * kSlot], &out[c][i * kSlot], size_of(i)) != 0 ? 1 : 0;
    }
  }
  REQUIRE(mismatched == 0);
}

TEST_CASE("message sizes from 0 bytes to 64 MiB arrive intact", "[data][sizes]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;
  const std::uint64_t max = std::min(p.a.caps().max_message_size, p.b.caps().max_message_size);
  const std::size_t size =
      GENERATE(as<std::size_t>{}, 0, 1, 3, 4097, 65537, (1u << 20) + 3, (16u << 20) - 1, 64u << 20);
  if (size > max) {
    WARN("size " << size << " exceeds max_message_size " << max << ", not run");
    return;
  }
  const bool recv_first = GENERATE(true, false);
  const bool a_to_b = GENERATE(true, false);
  INFO("size " << size << (recv_first ? ", receive posted first" : ", send posted first")
               << (a_to_b ? ", rank 0 -> 1" : ", rank 1 -> 0"));
  Context& sctx = a_to_b ? p.a : p.b;
  Context& rctx = a_to_b ? p.b : p.a;
  chorus_tp_endpoint_t* sep = a_to_b ? p.ea[0].ep : p.eb[0].ep;
  chorus_tp_endpoint_t* rep = a_to_b ? p.eb[0].ep : p.ea[0].ep;

  // The receive buffer is a little larger than the message: byte_len must
  // report the message, not the buffer.
  const std::size_t slack = 64;
  Buffer out(size), in(size + slack);
  const auto seed = static_cast<std::uint32_t>(size * 3 + 17);
  fill_pattern(out.get(), size, seed);
  std::memset(in.get(), 0xEE, size + slack);
  Registration rs(sctx, out.get(), size), rr(rctx, in.get(), size + slack);

  if (recv_first) REQUIRE_OK(tp().post_recv(rep, in.get(), size + slack, rr.mr(), 2));
  REQUIRE_OK(tp().post_send(sep, out.get(), size, rs.mr(), 1));
  if (!recv_first) {
    // Let the message reach the receiver before a receive exists for it.
    pump_until(
        {&p.a, &p.b}, [] { return false; }, 50);
    REQUIRE_OK(tp().post_recv(rep, in.get(), size + slack, rr.mr(), 2));
  }
  REQUIRE(pump_until(
      {&p.a, &p.b}, [&] { return sctx.completions.size() == 1 && rctx.completions.size() == 1; },
      30000));
  REQUIRE(p.a.errors.empty());
  REQUIRE(p.b.errors.empty());
  const auto& sc = sctx.completions[0];
  const auto& rc = rctx.completions[0];
  CHECK(sc.opcode == CHORUS_TP_SEND);
  CHECK(sc.wr_id == 1);
  CHECK(sc.endpoint == sep);
  CHECK(sc.byte_len == size);
  CHECK(rc.opcode == CHORUS_TP_RECV);
  CHECK(rc.wr_id == 2);
  CHECK(rc.endpoint == rep);
  REQUIRE(rc.byte_len == size);
  const auto bad = pattern_mismatch(in.get(), size, seed);
  INFO("first wrong byte at offset " << (bad ? *bad : 0));
  REQUIRE_FALSE(bad.has_value());
}

TEST_CASE("the advertised number of outstanding posts fits, one more is AGAIN", "[data][limits]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;
  const std::uint32_t max_sends = p.a.caps().max_outstanding_sends;
  const std::uint32_t max_recvs = p.b.caps().max_outstanding_recvs;
  constexpr std::uint32_t kTestable = 1u << 16;
  if (max_sends > kTestable || max_recvs > kTestable) {
    WARN("max_outstanding_sends " << max_sends << " / recvs " << max_recvs
                                  << " too large to exhaust in a test, not run");
    return;
  }
  constexpr std::size_t kMsg = 16;
  Bytes out(std::size_t{max_sends} * kMsg), in(std::size_t{max_recvs} * kMsg);
  for (std::uint32_t i = 0; i < max_sends; ++i) fill_pattern(&out[i * kMsg], kMsg, i);
  Registration rs(p.a, out.data(), out.size()), rr(p.b, in.data(), in.size());

  // Every receive the peer advertises may be outstanding at once...
  for (std::uint32_t i = 0; i < max_recvs; ++i) {
    REQUIRE_OK(tp().post_recv(p.eb[0].ep, &in[i * kMsg], kMsg, rr.mr(), i));
  }
  unsigned char spare[kMsg];
  REQUIRE_STATUS(tp().post_recv(p.eb[0].ep, spare, kMsg, nullptr, 999999), CHORUS_ERR_AGAIN);
  // ...and every send, none reaped yet.
  for (std::uint32_t i = 0; i < max_sends; ++i) {
    REQUIRE_OK(tp().post_send(p.ea[0].ep, &out[i * kMsg], kMsg, rs.mr(), i));
  }
  REQUIRE_STATUS(tp().post_send(p.ea[0].ep, out.data(), kMsg, rs.mr(), 999999), CHORUS_ERR_AGAIN);

  // Drain: receives are recycled when max_sends > max_recvs.
  std::uint32_t received = 0, reposted = max_recvs;
  std::size_t seen = 0;
  const bool ok = pump_until(
      {&p.a, &p.b},
      [&] {
        for (; seen < p.b.completions.size(); ++seen) {
          const auto& c = p.b.completions[seen];
          if (c.wr_id != received || c.byte_len != kMsg) return true;  // checked below
          const std::size_t slot = (c.wr_id % max_recvs) * kMsg;
          if (pattern_mismatch(&in[slot], kMsg, static_cast<std::uint32_t>(c.wr_id))) return true;
          ++received;
          if (reposted < max_sends) {
            const std::uint32_t i = reposted++;
            if (tp().post_recv(p.eb[0].ep, &in[(i % max_recvs) * kMsg], kMsg, rr.mr(), i) !=
                CHORUS_OK)
              return true;
          }
        }
        return received == max_sends && p.a.completions.size() == max_sends;
      },
      30000);
  REQUIRE(ok);
  REQUIRE(p.a.errors.empty());
  REQUIRE(p.b.errors.empty());
  REQUIRE(received == max_sends);
  for (std::uint32_t i = 0; i < max_sends; ++i) REQUIRE(p.a.completions[i].wr_id == i);
  // The queue has room again.
  REQUIRE_OK(tp().post_recv(p.eb[0].ep, in.data(), kMsg, rr.mr(), 5000000));
  REQUIRE_OK(tp().post_send(p.ea[0].ep, out.data(), kMsg, rs.mr(), 5000000));
  REQUIRE(pump_until(
      {&p.a, &p.b}, [&] { return p.b.completions.size() == max_sends + 1; }, 10000));
}

TEST_CASE("a receive shorter than the message completes with an error", "[data][short]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;
  Bytes m1(100), m2(200), small(10), big(256);
  fill_pattern(m1.data(), m1.size(), 1);
  fill_pattern(m2.data(), m2.size(), 2);
  Registration r1(p.a, m1.data(), m1.size()), r2(p.a, m2.data(), m2.size());
  Registration rsmall(p.b, small.data(), small.size()), rbig(p.b, big.data(), big.size());

  REQUIRE_OK(tp().post_recv(p.eb[0].ep, small.data(), small.size(), rsmall.mr(), 7));
  REQUIRE_OK(tp().post_send(p.ea[0].ep, m1.data(), m1.size(), r1.mr(), 1));

  // The failure is reported as PENDING by poll and read with read_error.
  int rc = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  chorus_tp_completion_t c[4];
  while (Clock::now() < deadline) {
    p.a.pump();
    rc = tp().poll(p.b.get(), c, 4);
    REQUIRE(rc <= 0);  // nothing may succeed here
    if (rc == CHORUS_ERR_PENDING) break;
  }
  REQUIRE_STATUS(rc, CHORUS_ERR_PENDING);
  chorus_tp_error_t err{};
  REQUIRE_OK(tp().read_error(p.b.get(), &err));
  INFO("error message: " << err.message);
  CHECK(err.wr_id == 7);
  CHECK(err.opcode == CHORUS_TP_RECV);
  CHECK(err.endpoint == p.eb[0].ep);
  CHECK((err.status == CHORUS_ERR_INVALID_ARGUMENT || err.status == CHORUS_ERR_SYSTEM));
  CHECK(err.peer_rank == 0);
  CHECK(std::string(err.message).find("100") != std::string::npos);
  // Nothing else is pending; a second read_error says so.
  chorus_tp_error_t none{};
  CHECK(tp().read_error(p.b.get(), &none) == CHORUS_ERR_INVALID_ARGUMENT);

  // The stream stays consistent: the next message either arrives intact (the
  // transport discarded the long one) or the endpoint reports failure; never
  // the tail of the first message.
  REQUIRE_OK(tp().post_send(p.ea[0].ep, m2.data(), m2.size(), r2.mr(), 2));
  const int post_rc = tp().post_recv(p.eb[0].ep, big.data(), big.size(), rbig.mr(), 8);
  const bool discarded_model = post_rc == CHORUS_OK;
  if (discarded_model) {
    p.b.completions.clear();
    p.b.errors.clear();
    REQUIRE(pump_until(
        {&p.a, &p.b}, [&] { return !p.b.completions.empty() || !p.b.errors.empty(); }, 10000));
    if (!p.b.completions.empty()) {
      CHECK(p.b.completions[0].wr_id == 8);
      REQUIRE(p.b.completions[0].byte_len == 200);
      REQUIRE_FALSE(pattern_mismatch(big.data(), 200, 2));
    } else {
      CHECK(p.b.errors[0].wr_id == 8);
    }
  }
  if (Plugin::get().transport() == "tcp") {
    // The TCP transport documents the discard model.
    CHECK(discarded_model);
    CHECK(p.b.errors.empty());
    CHECK(std::string(err.message).find("message of 100 bytes arrived for a receive of 10 bytes") !=
          std::string::npos);
  }
}

TEST_CASE("both directions stream at once, each rank on its own thread", "[data][duplex]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Pair p;
  constexpr int kMessages = 48;
  constexpr std::size_t kBig = 1u << 20;
  auto size_of = [](int i) {
    return i % 3 == 2 ? std::size_t{100 + static_cast<std::size_t>(i)} : kBig;
  };

  struct Side {
    Context* ctx;
    chorus_tp_endpoint_t* ep;
    std::uint32_t seed_out, seed_in;
    std::vector<Bytes> out, in;
    std::string error;
  };
  Side sides[2] = {{&p.a, p.ea[0].ep, 100, 200, {}, {}, {}},
                   {&p.b, p.eb[0].ep, 200, 100, {}, {}, {}}};
  for (Side& s : sides) {
    for (int i = 0; i < kMessages; ++i) {
      s.out.emplace_back(size_of(i));
      fill_pattern(s.out.back().data(), size_of(i), s.seed_out + static_cast<std::uint32_t>(i));
      s.in.emplace_back(kBig);
    }
  }
  auto run = [&](Side& s) {
    try {
      // A window of 8 in flight each way; wait() sleeps while the peer's
      // thread does its share.
      int posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      while ((done_s < kMessages || done_r < kMessages) && Clock::now() < deadline) {
        while (posted_r < kMessages && posted_r - done_r < 8) {
          check(tp().post_recv(s.ep, s.in[static_cast<std::size_t>(posted_r)].data(), kBig, nullptr,
                               static_cast<std::uint64_t>(posted_r) | (1ull << 40)),
                "post_recv");
          ++posted_r;
        }
        while (posted_s < kMessages && posted_s - done_s < 8) {
          check(tp().post_send(s.ep, s.out[static_cast<std::size_t>(posted_s)].data(),
                               size_of(posted_s), nullptr, static_cast<std::uint64_t>(posted_s)),
                "post_send");
          ++posted_s;
        }
        const std::size_t before = s.ctx->completions.size();
        s.ctx->pump();
        if (!s.ctx->errors.empty())
          throw std::runtime_error(std::string("error completion: ") + s.ctx->errors[0].message);
        for (std::size_t k = before; k < s.ctx->completions.size(); ++k) {
          const auto& c = s.ctx->completions[k];
          if (c.opcode == CHORUS_TP_SEND) {
            if (c.wr_id != static_cast<std::uint64_t>(done_s))
              throw std::runtime_error("send completions out of order");
            ++done_s;
          } else {
            const int i = static_cast<int>(c.wr_id & 0xffffffff);
            if (i != done_r) throw std::runtime_error("receive completions out of order");
            if (c.byte_len != size_of(i)) throw std::runtime_error("wrong byte_len");
            if (pattern_mismatch(s.in[static_cast<std::size_t>(i)].data(), size_of(i),
                                 s.seed_in + static_cast<std::uint32_t>(i)))
              throw std::runtime_error("payload mismatch in message " + std::to_string(i));
            ++done_r;
          }
        }
        if (s.ctx->completions.size() == before) {
          const int rc = tp().wait(s.ctx->get(), 100);
          if (rc != CHORUS_OK && rc != CHORUS_ERR_TIMEOUT) check(rc, "wait");
        }
      }
      if (done_s < kMessages || done_r < kMessages) {
        throw std::runtime_error("timed out: " + std::to_string(done_s) + " sends and " +
                                 std::to_string(done_r) + " receives done of " +
                                 std::to_string(kMessages));
      }
    } catch (const std::exception& e) {
      s.error = e.what();
    }
  };
  std::thread t1([&] { run(sides[1]); });
  run(sides[0]);
  t1.join();
  CHECK(sides[0].error == "");
  CHECK(sides[1].error == "");
}

TEST_CASE("closing endpoints and contexts with posts outstanding never hangs", "[data][close]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  const auto t0 = Clock::now();
  {
    Pair p(2);
    Buffer big(8u << 20);
    std::memset(big.get(), 1, big.size);
    Bytes in(64 * 8);
    for (int i = 0; i < 8; ++i)
      REQUIRE_OK(tp().post_recv(p.eb[0].ep, &in[static_cast<std::size_t>(i) * 64], 64, nullptr,
                                static_cast<std::uint64_t>(i)));
    // Nobody will ever receive these: they stay stuck behind flow control.
    REQUIRE_OK(tp().post_send(p.ea[1].ep, big.get(), big.size, nullptr, 1));
    REQUIRE_OK(tp().post_send(p.ea[1].ep, big.get(), big.size, nullptr, 2));
    pump_until(
        {&p.a, &p.b}, [] { return false; }, 100);
    REQUIRE_OK(tp().endpoint_close(p.eb[0].ep));
    REQUIRE_OK(tp().endpoint_close(p.ea[1].ep));
    // Polling after closing must not hand back completions of closed endpoints.
    p.a.completions.clear();
    p.b.completions.clear();
    pump_until(
        {&p.a, &p.b}, [] { return false; }, 200);
    for (const auto& c : p.a.completions) CHECK(c.endpoint != p.ea[1].ep);
    for (const auto& c : p.b.completions) CHECK(c.endpoint != p.eb[0].ep);
    // The context closes with its remaining endpoints still open.
    REQUIRE_OK(p.a.close());
    REQUIRE_OK(p.b.close());
  }
  // A hang guard, not a speed check: well over 10x what the above takes.
  CHECK(ms_since(t0) < 30000);
}
