// Reduction kernels (core/reduce.h): every dtype x op x instruction set
// against the scalar reference of reduce_reference.h (never by calling a
// kernel), which instruction set reduce_kernel hands out, the pairs that have
// no kernel, and integer and bool semantics. Floating-point corner cases are
// in reduce_float_test.cc, instruction sets against each other in
// reduce_isa_test.cc.

#include "reduce_reference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace chorus::reduce_test;

TEST_CASE("every dtype and op matches the scalar reference on every instruction set", "[reduce]") {
  std::mt19937_64 rng(20240611);
  constexpr size_t kOffsets[][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  for (const ReduceIsa isa : runnable_isas()) {
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        if (!supported(dtype, op)) continue;
        INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[op]);
        const chorus_reduce_fn_t fn = reduce_kernel_for_isa(dtype, op, isa);
        REQUIRE(fn != nullptr);
        fn(nullptr, nullptr, 0);  // empty buffers may come without storage
        std::string problems;
        for (const size_t count : kCounts) {
          for (const auto& off : kOffsets) {
            const std::string p = run_and_check(fn, dtype, op, count, off[0], off[1], rng);
            if (!p.empty()) {
              problems += "count " + std::to_string(count) + ", src+" + std::to_string(off[0]) +
                          ", inout+" + std::to_string(off[1]) + ":\n" + p;
            }
          }
          problems += run_aliased(fn, dtype, op, count, rng);
        }
        CHECK(problems == "");
      }
    }
  }
}

TEST_CASE("reduce_kernel hands out the best instruction set's kernels", "[reduce]") {
  const ReduceIsa best = reduce_best_isa();
  INFO("best: " << reduce_isa_name(best));
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      CHECK(reduce_kernel(dtype, op) == reduce_kernel_for_isa(dtype, op, best));
    }
  }
  CHECK(std::string(reduce_isa_name(ReduceIsa::kBaseline)) == "baseline");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx2)) == "avx2");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx512)) == "avx512");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx512Bf16)) == "avx512bf16");
  // The best level is the highest one this CPU runs.
  CHECK(best == runnable_isas().back());
}

TEST_CASE("every instruction set level is tested, or says why not", "[reduce]") {
  // Every case here runs each level the CPU has (runnable_isas()). A level it
  // lacks is a missing capability (docs/testing.md): a warning naming what is
  // missing, and under CHORUS_TEST_REQUIRE=1 (CI) a failure, so that a CI
  // machine without AVX-512 cannot pass without testing those kernels. On a
  // build for another architecture the x86 levels do not apply.
  CHECK(std::string(reduce_isa_unavailable_reason(ReduceIsa::kBaseline)).empty());
  CHECK_FALSE(std::string(reduce_isa_unavailable_reason(static_cast<ReduceIsa>(7))).empty());
  const bool require = std::getenv("CHORUS_TEST_REQUIRE") != nullptr;
  for (const ReduceIsa isa : kAllIsas) {
    const std::string why = reduce_isa_unavailable_reason(isa);
    INFO(reduce_isa_name(isa) << ": " << why);
    // The reason and the lookup agree, for every (dtype, op).
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        if (!supported(dtype, op)) continue;
        CHECK((reduce_kernel_for_isa(dtype, op, isa) != nullptr) == why.empty());
      }
    }
    if (why.empty()) continue;
#if defined(__x86_64__) || defined(__i386__)
    const std::string what =
        std::string("not run: the ") + reduce_isa_name(isa) + " reduction kernels: " + why;
    if (require) {
      FAIL(what << " (CHORUS_TEST_REQUIRE=1: a missing capability fails)");
    } else {
      WARN(what << " (set CHORUS_TEST_REQUIRE=1 to make this a failure)");
    }
#else
    WARN("does not apply: the " << reduce_isa_name(isa) << " kernels: " << why);
#endif
  }
}

TEST_CASE("unsupported and out-of-range pairs have no kernel and say why", "[reduce]") {
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      if (supported(dtype, op)) {
        CHECK(reduce_kernel(dtype, op) != nullptr);
        CHECK(std::string(reduce_unsupported_reason(dtype, op)).empty());
      } else {
        CHECK(reduce_kernel(dtype, op) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kBaseline) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kAvx2) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kAvx512) == nullptr);
        const std::string why = reduce_unsupported_reason(dtype, op);
        CHECK_THAT(why, Catch::Contains(kDtypeNames[dtype]) && Catch::Contains(kOpNames[op]));
      }
    }
  }
  CHECK(std::string(reduce_unsupported_reason(CHORUS_COMPLEX64, CHORUS_MAX)) ==
        "max is not defined for complex64; use sum or prod");

  for (const int dtype : {-1, int{CHORUS_DTYPE_COUNT}, 1000, std::numeric_limits<int>::min()}) {
    INFO("dtype " << dtype);
    CHECK(reduce_kernel(dtype, CHORUS_SUM) == nullptr);
    CHECK(reduce_kernel_for_isa(dtype, CHORUS_SUM, ReduceIsa::kBaseline) == nullptr);
    CHECK_THAT(reduce_unsupported_reason(dtype, CHORUS_SUM), Catch::Contains("unknown dtype"));
  }
  for (const int op : {-1, int{CHORUS_OP_COUNT}, 99}) {
    INFO("op " << op);
    CHECK(reduce_kernel(CHORUS_FLOAT32, op) == nullptr);
    CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, op, ReduceIsa::kAvx2) == nullptr);
    CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, op, ReduceIsa::kAvx512) == nullptr);
    CHECK_THAT(reduce_unsupported_reason(CHORUS_FLOAT32, op), Catch::Contains("unknown op"));
  }
  CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, CHORUS_SUM, static_cast<ReduceIsa>(7)) == nullptr);
}

TEST_CASE("integer sum and prod wrap around modulo 2^bits", "[reduce]") {
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    CHECK(apply_each<int8_t>(isa, CHORUS_INT8, CHORUS_SUM, {127, -128, -1}, {1, -1, 1}) ==
          std::vector<int8_t>{-128, 127, 0});
    CHECK(apply_each<int8_t>(isa, CHORUS_INT8, CHORUS_PROD, {16, -128, 100}, {16, -1, 3}) ==
          std::vector<int8_t>{0, -128, 44});
    CHECK(apply_each<uint8_t>(isa, CHORUS_UINT8, CHORUS_SUM, {255, 200}, {1, 100}) ==
          std::vector<uint8_t>{0, 44});
    CHECK(apply_each<uint16_t>(isa, CHORUS_UINT16, CHORUS_PROD, {65535, 256}, {65535, 256}) ==
          std::vector<uint16_t>{1, 0});
    CHECK(apply_each<int16_t>(isa, CHORUS_INT16, CHORUS_PROD, {-32768, 256}, {-1, 255}) ==
          std::vector<int16_t>{-32768, -256});
    constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
    constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
    CHECK(apply_each<int32_t>(isa, CHORUS_INT32, CHORUS_SUM, {kMax32, kMin32}, {1, -1}) ==
          std::vector<int32_t>{kMin32, kMax32});
    CHECK(apply_each<int32_t>(isa, CHORUS_INT32, CHORUS_PROD, {kMin32, 65536}, {-1, 65536}) ==
          std::vector<int32_t>{kMin32, 0});
    constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
    constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_SUM, {kMax64}, {1}) ==
          std::vector<int64_t>{kMin64});
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_PROD, {kMin64, kMax64}, {-1, 2}) ==
          std::vector<int64_t>{kMin64, -2});
    CHECK(apply_each<uint64_t>(isa, CHORUS_UINT64, CHORUS_PROD, {~uint64_t{0}}, {~uint64_t{0}}) ==
          std::vector<uint64_t>{1});
    CHECK(
        apply_each<uint32_t>(isa, CHORUS_UINT32, CHORUS_MAX, {0x80000000u, 1}, {1, 0xffffffffu}) ==
        std::vector<uint32_t>{0x80000000u, 0xffffffffu});
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_MIN, {kMin64, -1}, {kMax64, 0}) ==
          std::vector<int64_t>{kMin64, -1});
  }
}

TEST_CASE("bool results are 0 or 1 whatever nonzero bytes come in", "[reduce]") {
  const std::vector<uint8_t> a = {0, 0, 1, 2, 0x80, 0xff, 0x10, 0};
  const std::vector<uint8_t> b = {0, 3, 0, 0x40, 0xff, 1, 0x10, 0x80};
  const std::vector<uint8_t> any = {0, 1, 1, 1, 1, 1, 1, 1};
  const std::vector<uint8_t> all = {0, 0, 0, 1, 1, 1, 1, 0};
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_SUM, a, b) == any);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_MAX, a, b) == any);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_PROD, a, b) == all);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_MIN, a, b) == all);
  }
}
