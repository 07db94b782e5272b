// Many endpoints through one context: 8 peer processes x 2 channels, every
// message echoed back, checked per endpoint for order and content.
#include "support.h"

#include <cstring>
#include <memory>
#include <stdexcept>

using namespace chorus::conformance;

namespace {

constexpr int kPeers = 8;
constexpr int kChannels = 2;
constexpr int kMessages = 40;
constexpr std::size_t kMaxSize = 64 * 1024;

std::size_t size_of(int peer, int channel, int i) {
  return (static_cast<std::size_t>(i) * 997 + static_cast<std::size_t>(peer) * 131 +
          static_cast<std::size_t>(channel) * 17) %
             kMaxSize +
         1;
}
std::uint32_t seed_of(int peer, int channel, int i) {
  return static_cast<std::uint32_t>(peer * 100000 + channel * 1000 + i);
}
std::uint64_t wr_of(int peer, int channel, int i) {
  return (std::uint64_t(peer) << 40) | (std::uint64_t(channel) << 32) | std::uint64_t(i);
}

/// The peer: receive everything on both channels, then echo it back in order.
void echo_peer(Control& ctl, int rank) {
  Context ctx(rank, kPeers + 1);
  std::vector<Endpoint> eps;
  for (int c = 0; c < kChannels; ++c) {
    eps.push_back(open_endpoint(ctx, 0, c));
    ctl.send("blob", eps.back().blob);
  }
  for (int c = 0; c < kChannels; ++c) {
    check(connect_endpoint(eps[static_cast<std::size_t>(c)], ctl.expect("blob"), 20000),
          "peer connect");
  }
  std::vector<Bytes> bufs(kChannels * kMessages, Bytes(kMaxSize));
  for (int c = 0; c < kChannels; ++c) {
    for (int i = 0; i < kMessages; ++i) {
      check(tp().post_recv(eps[static_cast<std::size_t>(c)].ep,
                           bufs[static_cast<std::size_t>(c * kMessages + i)].data(), kMaxSize,
                           nullptr, wr_of(rank, c, i)),
            "peer post_recv");
    }
  }
  int received = 0, sent = 0;
  std::size_t seen = 0;
  const bool ok = pump_until(
      {&ctx},
      [&] {
        if (!ctx.errors.empty()) return true;
        for (; seen < ctx.completions.size(); ++seen) {
          const auto& cq = ctx.completions[seen];
          if (cq.opcode == CHORUS_TP_SEND) {
            ++sent;
            continue;
          }
          const int c = static_cast<int>((cq.wr_id >> 32) & 0xff);
          const int i = static_cast<int>(cq.wr_id & 0xffffffff);
          // Echo in arrival order, which per channel is send order.
          check(tp().post_send(eps[static_cast<std::size_t>(c)].ep,
                               bufs[static_cast<std::size_t>(c * kMessages + i)].data(),
                               cq.byte_len, nullptr, cq.wr_id),
                "peer post_send");
          ++received;
        }
        return received == kChannels * kMessages && sent == kChannels * kMessages;
      },
      30000);
  if (!ctx.errors.empty())
    throw std::runtime_error(std::string("peer error completion: ") + ctx.errors[0].message);
  if (!ok)
    throw std::runtime_error("peer timed out after " + std::to_string(received) + " receives");
  ctl.send("done");
  ctl.expect("exit");
}

}  // namespace

TEST_CASE("8 peers x 2 channels are served through one context", "[scale][process]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  CONFORMANCE_NEEDS_OTHER_PROCESSES();
  // Fork every peer before this process opens anything.
  std::vector<std::unique_ptr<ChildProcess>> peers;
  for (int r = 1; r <= kPeers; ++r) {
    peers.push_back(std::make_unique<ChildProcess>([r](Control& ctl) { echo_peer(ctl, r); }));
  }
  Context hub(0, kPeers + 1);
  std::vector<std::vector<Endpoint>> eps(kPeers + 1);
  std::vector<std::vector<Bytes>> blobs(kPeers + 1);
  for (int r = 1; r <= kPeers; ++r) {
    Control& ctl = peers[static_cast<std::size_t>(r - 1)]->control();
    for (int c = 0; c < kChannels; ++c) {
      eps[static_cast<std::size_t>(r)].push_back(open_endpoint(hub, r, c));
      blobs[static_cast<std::size_t>(r)].push_back(ctl.expect("blob"));
    }
    for (int c = 0; c < kChannels; ++c)
      ctl.send("blob", eps[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].blob);
  }
  for (int r = 1; r <= kPeers; ++r) {
    for (int c = 0; c < kChannels; ++c) {
      REQUIRE_OK(connect_endpoint(eps[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)],
                                  blobs[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)],
                                  20000));
    }
  }
  // Post every receive for the echoes, then every send.
  std::vector<Bytes> out, in;
  out.reserve(kPeers * kChannels * kMessages);
  in.reserve(kPeers * kChannels * kMessages);
  for (int r = 1; r <= kPeers; ++r) {
    for (int c = 0; c < kChannels; ++c) {
      for (int i = 0; i < kMessages; ++i) {
        out.emplace_back(size_of(r, c, i));
        fill_pattern(out.back().data(), out.back().size(), seed_of(r, c, i));
        in.emplace_back(kMaxSize);
        REQUIRE_OK(tp().post_recv(eps[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].ep,
                                  in.back().data(), kMaxSize, nullptr, wr_of(r, c, i)));
      }
    }
  }
  std::size_t k = 0;
  for (int r = 1; r <= kPeers; ++r) {
    for (int c = 0; c < kChannels; ++c) {
      for (int i = 0; i < kMessages; ++i, ++k) {
        REQUIRE_OK(tp().post_send(eps[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].ep,
                                  out[k].data(), out[k].size(), nullptr, wr_of(r, c, i)));
      }
    }
  }
  const std::size_t total = static_cast<std::size_t>(kPeers * kChannels * kMessages);
  REQUIRE(pump_until(
      {&hub}, [&] { return hub.completions.size() == 2 * total || !hub.errors.empty(); }, 30000));
  REQUIRE(hub.errors.empty());

  // Per endpoint and direction: completions in post order, on the right
  // endpoint, and every echo equal to what was sent.
  std::vector<int> next_send((kPeers + 1) * kChannels, 0), next_recv((kPeers + 1) * kChannels, 0);
  std::size_t bad_order = 0, bad_endpoint = 0, bad_data = 0;
  for (const auto& cq : hub.completions) {
    const int r = static_cast<int>(cq.wr_id >> 40);
    const int c = static_cast<int>((cq.wr_id >> 32) & 0xff);
    const int i = static_cast<int>(cq.wr_id & 0xffffffff);
    REQUIRE((r >= 1 && r <= kPeers && c < kChannels && i < kMessages));
    bad_endpoint += cq.endpoint != eps[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].ep;
    auto& next = cq.opcode == CHORUS_TP_SEND ? next_send : next_recv;
    bad_order += next[static_cast<std::size_t>(r * kChannels + c)]++ != i;
    if (cq.opcode == CHORUS_TP_RECV) {
      const std::size_t idx = static_cast<std::size_t>(((r - 1) * kChannels + c) * kMessages + i);
      bad_data += cq.byte_len != size_of(r, c, i) ||
                  std::memcmp(in[idx].data(), out[idx].data(), out[idx].size()) != 0;
    }
  }
  CHECK(bad_order == 0);
  CHECK(bad_endpoint == 0);
  CHECK(bad_data == 0);
  for (auto& peer : peers) peer->control().expect("done");
  for (auto& peer : peers) peer->control().send("exit");
  for (auto& peer : peers) CHECK(peer->join() == 0);
}
