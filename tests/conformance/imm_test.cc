// Immediates (transport ABI minor 5): post_send_imm, CHORUS_TP_CAP_IMM_DATA
// and a receive completion's imm_data, on connected pairs in one process.
#include "support.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

using namespace chorus::conformance;

namespace {

/// Whether the table has post_send_imm (struct_size covers it and it is set).
bool table_has_post_send_imm() {
  const chorus_transport_plugin_v1_t& t = tp();
  return t.struct_size >= offsetof(chorus_transport_plugin_v1_t, post_send_imm) + sizeof(void*) &&
         t.post_send_imm != nullptr;
}

/// One message of the interleaved stream: its size, and its immediate when
/// it is sent with post_send_imm.
struct Message {
  std::size_t size;
  bool with_imm;
  std::uint32_t imm;
};

/// 0 B, one word, a page, just under 64 KiB (two frames through shm's
/// default ring), 64 KiB (by reference on shm), 1 MiB and 3 MiB (striped on
/// tcp with several sockets, many fragments through a small shm ring);
/// each once with an immediate and once plain, alternately first.
std::vector<Message> message_stream(std::uint32_t channel) {
  const std::size_t sizes[] = {
      0, 8, 4096, 65535, 65536, std::size_t{1} << 20, std::size_t{3} << 20};
  std::vector<Message> out;
  std::uint32_t k = 0;
  for (const std::size_t size : sizes) {
    // All bits set once per channel; otherwise values unique per message.
    const std::uint32_t imm = k == 2 ? 0xFFFFFFFFu : 0x5A000000u + channel * 0x100u + k;
    const Message with{size, true, imm};
    const Message plain{size, false, 0};
    if (k % 2 == 0) {
      out.push_back(with);
      out.push_back(plain);
    } else {
      out.push_back(plain);
      out.push_back(with);
    }
    ++k;
  }
  return out;
}

}  // namespace

TEST_CASE("post_send_imm is present exactly when CHORUS_TP_CAP_IMM_DATA is declared",
          "[imm][abi]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context ctx(0, 2);
  const bool cap = (ctx.caps().flags & CHORUS_TP_CAP_IMM_DATA) != 0;
  INFO("CHORUS_TP_CAP_IMM_DATA " << (cap ? "declared" : "not declared"));
  if (cap) {
    CHECK(tp().minor >= 5);
    REQUIRE(table_has_post_send_imm());
    return;
  }
  if (!table_has_post_send_imm()) return;  // absent: nothing to call
  // Present in the table but not for this context: it must refuse.
  Pair p;
  unsigned char word[8] = {};
  REQUIRE_STATUS(tp().post_send_imm(p.ea[0].ep, word, sizeof word, nullptr, 1, 7),
                 CHORUS_ERR_NOT_SUPPORTED);
  CHECK_FALSE(last_error().empty());
}

TEST_CASE("immediates arrive exactly with their messages; plain sends report 0", "[imm][data]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  constexpr int kChannels = 3;
  Pair p(kChannels);
  if ((p.a.caps().flags & CHORUS_TP_CAP_IMM_DATA) == 0 ||
      (p.b.caps().flags & CHORUS_TP_CAP_IMM_DATA) == 0) {
    WARN("not run: the transport does not declare CHORUS_TP_CAP_IMM_DATA");
    return;
  }
  REQUIRE(table_has_post_send_imm());
  const bool recv_first = GENERATE(true, false);
  INFO((recv_first ? "receives posted before the sends" : "receives posted after the sends"));

  struct Slot {
    Message m;
    std::unique_ptr<unsigned char[]> out, in;
    std::uint32_t seed;
  };
  std::vector<std::vector<Slot>> slots(kChannels);
  std::vector<std::unique_ptr<Registration>> regs;
  const std::uint64_t max = std::min(p.a.caps().max_message_size, p.b.caps().max_message_size);
  for (std::uint32_t c = 0; c < kChannels; ++c) {
    std::uint32_t i = 0;
    for (const Message& m : message_stream(c)) {
      if (m.size > max) continue;
      Slot s{m, std::make_unique<unsigned char[]>(m.size + 1),
             std::make_unique<unsigned char[]>(m.size + 1), c * 1000 + i++};
      fill_pattern(s.out.get(), m.size, s.seed);
      std::memset(s.in.get(), 0xEE, m.size + 1);
      regs.push_back(std::make_unique<Registration>(p.a, s.out.get(), m.size + 1));
      regs.push_back(std::make_unique<Registration>(p.b, s.in.get(), m.size + 1));
      slots[c].push_back(std::move(s));
    }
  }
  auto mr_out = [&](std::uint32_t c, std::size_t i) {
    std::size_t n = 0;
    for (std::uint32_t d = 0; d < c; ++d) n += slots[d].size();
    return regs[(n + i) * 2]->mr();
  };
  auto mr_in = [&](std::uint32_t c, std::size_t i) {
    std::size_t n = 0;
    for (std::uint32_t d = 0; d < c; ++d) n += slots[d].size();
    return regs[(n + i) * 2 + 1]->mr();
  };
  auto wr = [](std::uint32_t c, std::size_t i) { return (std::uint64_t{c} << 32) | i; };
  auto post_recvs = [&] {
    for (std::uint32_t c = 0; c < kChannels; ++c)
      for (std::size_t i = 0; i < slots[c].size(); ++i)
        REQUIRE_OK(tp().post_recv(p.eb[c].ep, slots[c][i].in.get(), slots[c][i].m.size + 1,
                                  mr_in(c, i), wr(c, i)));
  };

  if (recv_first) post_recvs();
  // Channels interleaved, so several endpoints carry messages at once.
  std::size_t total = 0;
  for (std::size_t i = 0;; ++i) {
    bool any = false;
    for (std::uint32_t c = 0; c < kChannels; ++c) {
      if (i >= slots[c].size()) continue;
      any = true;
      ++total;
      const Slot& s = slots[c][i];
      if (s.m.with_imm) {
        REQUIRE_OK(
            tp().post_send_imm(p.ea[c].ep, s.out.get(), s.m.size, mr_out(c, i), wr(c, i), s.m.imm));
      } else {
        REQUIRE_OK(tp().post_send(p.ea[c].ep, s.out.get(), s.m.size, mr_out(c, i), wr(c, i)));
      }
    }
    if (!any) break;
  }
  if (!recv_first) {
    // Let messages reach the receiver before receives exist for them.
    pump_until(
        {&p.a, &p.b}, [] { return false; }, 50);
    post_recvs();
  }
  REQUIRE(pump_until(
      {&p.a, &p.b},
      [&] { return p.a.completions.size() == total && p.b.completions.size() == total; }, 60000));
  REQUIRE(p.a.errors.empty());
  REQUIRE(p.b.errors.empty());

  std::vector<std::size_t> next(kChannels, 0);
  for (const chorus_tp_completion_t& done : p.b.completions) {
    const auto c = static_cast<std::uint32_t>(done.wr_id >> 32);
    const auto i = static_cast<std::size_t>(done.wr_id & 0xffffffffu);
    REQUIRE(c < kChannels);
    REQUIRE(done.opcode == CHORUS_TP_RECV);
    REQUIRE(done.endpoint == p.eb[c].ep);
    REQUIRE(i == next[c]++);
    const Slot& s = slots[c][i];
    INFO("channel " << c << ", message " << i << ": " << s.m.size << " bytes, "
                    << (s.m.with_imm ? "post_send_imm" : "post_send"));
    CHECK(done.byte_len == s.m.size);
    CHECK(done.imm_data == s.m.imm);
    CHECK_FALSE(pattern_mismatch(s.in.get(), s.m.size, s.seed).has_value());
    CHECK(s.in[s.m.size] == 0xEE);
  }
}
