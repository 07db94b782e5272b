// Unit tests of the fusion rule of grouped calls (core/group_plan.h): no I/O.
#include "core/group_plan.h"

#include <chorus/chorus.h>

#include <catch2/catch.hpp>

using chorus::core::GroupedCall;
using chorus::core::plan_group_runs;

namespace {
GroupedCall ar(uint64_t bytes, int dtype = CHORUS_FLOAT32, int op = CHORUS_SUM) {
  return {true, dtype, op, bytes};
}
GroupedCall other() { return {false, -1, -1, 0}; }
using Runs = std::vector<size_t>;
}  // namespace

TEST_CASE("consecutive all_reduces of one dtype and op fuse up to the limit") {
  CHECK(plan_group_runs({}, 100) == Runs{});
  CHECK(plan_group_runs({ar(10)}, 100) == Runs{1});
  CHECK(plan_group_runs({ar(10), ar(0), ar(90)}, 100) == Runs{3});
  // The next call would pass the limit: a new run starts with it.
  CHECK(plan_group_runs({ar(40), ar(40), ar(40), ar(40)}, 100) == Runs{2, 2});
  // A call larger than the limit runs alone, and the one after it starts afresh.
  CHECK(plan_group_runs({ar(10), ar(150), ar(10), ar(10)}, 100) == Runs{1, 1, 2});
}

TEST_CASE("a different dtype, op or collective ends a run") {
  CHECK(plan_group_runs({ar(8), ar(8, CHORUS_INT32), ar(8, CHORUS_INT32)}, 100) == Runs{1, 2});
  CHECK(plan_group_runs({ar(8), ar(8, CHORUS_FLOAT32, CHORUS_MAX), ar(8)}, 100) == Runs{1, 1, 1});
  CHECK(plan_group_runs({ar(8), ar(8), other(), ar(8), ar(8)}, 100) == Runs{2, 1, 2});
  CHECK(plan_group_runs({other(), other()}, 100) == Runs{1, 1});
}

TEST_CASE("a limit of 0 never fuses") {
  CHECK(plan_group_runs({ar(0), ar(0), ar(8)}, 0) == Runs{1, 1, 1});
}
