// ChoiceMemo (core/choice_memo.h): a remembered choice comes back only for
// the same (collective, dtype, op, count, root, bytes), each collective keeps
// its own, and all_to_allv is never remembered.
#include <catch2/catch.hpp>

#include "core/choice_memo.h"

using chorus::core::ChoiceMemo;
using chorus::core::Plugin;

namespace {

chorus_algo_call_v2_t call(int collective, int dtype, int op, size_t count, int root) {
  chorus_algo_call_v2_t c{};
  c.struct_size = sizeof(c);
  c.collective = collective;
  c.dtype = dtype;
  c.op = op;
  c.count = count;
  c.root = root;
  c.bytes = uint64_t(count) * chorus_dtype_size(dtype);
  return c;
}

// Stand-ins for plugin addresses: only compared, never used.
const Plugin* fake_plugin(int n) { return reinterpret_cast<const Plugin*>(uintptr_t(0x1000 * n)); }

}  // namespace

TEST_CASE("ChoiceMemo answers only for the same call", "[choice_memo]") {
  ChoiceMemo memo;
  const auto base = call(CHORUS_COLL_ALL_REDUCE, CHORUS_FLOAT32, CHORUS_SUM, 2, -1);
  REQUIRE(memo.find(base) == nullptr);

  ChoiceMemo::Choice c;
  c.plugin = fake_plugin(1);
  c.index = 1;
  c.supported = true;
  memo.remember(base, c);
  const auto* hit = memo.find(base);
  REQUIRE(hit != nullptr);
  REQUIRE(hit->plugin == fake_plugin(1));
  REQUIRE(hit->index == 1);
  REQUIRE(hit->supported);

  // The buffers are not part of the key: another in/out is the same call.
  auto moved = base;
  moved.in = &memo;
  moved.out = &c;
  REQUIRE(memo.find(moved) == hit);

  auto other = base;
  other.count = 3, other.bytes = 12;
  REQUIRE(memo.find(other) == nullptr);
  other = base;
  other.dtype = CHORUS_INT32;
  REQUIRE(memo.find(other) == nullptr);
  other = base;
  other.op = CHORUS_MAX;
  REQUIRE(memo.find(other) == nullptr);
  other = base;
  other.root = 0;
  REQUIRE(memo.find(other) == nullptr);
  other = base;
  other.bytes = 16;  // same count, other bytes (never from the core, but a key field)
  REQUIRE(memo.find(other) == nullptr);
  REQUIRE(memo.find(call(CHORUS_COLL_REDUCE_SCATTER, CHORUS_FLOAT32, CHORUS_SUM, 2, -1)) ==
          nullptr);

  // A later call of the collective replaces the entry; others keep theirs.
  const auto ag = call(CHORUS_COLL_ALL_GATHER, CHORUS_FLOAT32, -1, 2, -1);
  ChoiceMemo::Choice ring;
  ring.plugin = fake_plugin(2);
  memo.remember(ag, ring);
  REQUIRE(memo.find(ag)->plugin == fake_plugin(2));
  REQUIRE(memo.find(base)->plugin == fake_plugin(1));
  const auto larger = call(CHORUS_COLL_ALL_REDUCE, CHORUS_FLOAT32, CHORUS_SUM, 1 << 20, -1);
  memo.remember(larger, ring);
  REQUIRE(memo.find(base) == nullptr);
  REQUIRE(memo.find(larger)->plugin == fake_plugin(2));
}

TEST_CASE("ChoiceMemo never remembers all_to_allv or an unknown collective", "[choice_memo]") {
  ChoiceMemo memo;
  ChoiceMemo::Choice c;
  c.plugin = fake_plugin(3);
  const auto v = call(CHORUS_COLL_ALL_TO_ALLV, CHORUS_FLOAT32, -1, 0, -1);
  memo.remember(v, c);
  REQUIRE(memo.find(v) == nullptr);
  const auto bad = call(CHORUS_COLL_COUNT, CHORUS_FLOAT32, -1, 1, -1);
  memo.remember(bad, c);
  REQUIRE(memo.find(bad) == nullptr);
  auto negative = bad;
  negative.collective = -1;
  REQUIRE(memo.find(negative) == nullptr);
}
