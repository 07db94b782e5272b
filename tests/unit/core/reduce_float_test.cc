// Floating-point semantics of the reduction kernels: float16 and bfloat16
// rounding (once, to nearest even), complex64, NaN propagation and signed
// zeros in max/min, half.h's scalar conversions, every half value against
// the special values, subnormals under MXCSR.DAZ, and the NaN-free path of
// float max/min. The reference is reduce_reference.h's.

#include "core/half.h"
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

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

using namespace chorus::reduce_test;

namespace {

struct HalfCase {
  int op;
  uint16_t a;
  uint16_t b;
  uint16_t expected;
};

/// Runs the cases through the reference (checking it) and the kernels.
void check_half_cases(int dtype, const std::vector<HalfCase>& cases) {
  std::vector<uint16_t> a;
  std::vector<uint16_t> b;
  for (const HalfCase& c : cases) {
    const uint16_t ref =
        (dtype == CHORUS_FLOAT16 ? f16_expect(c.op, c.a, c.b) : bf16_expect(c.op, c.a, c.b)).bits;
    INFO(kOpNames[c.op] << "(" << hex(&c.a, 2) << ", " << hex(&c.b, 2) << ")");
    CHECK(hex(&ref, 2) == hex(&c.expected, 2));
  }
  for (const ReduceIsa isa : runnable_isas()) {
    for (const HalfCase& c : cases) {
      const uint16_t got = apply_each<uint16_t>(isa, dtype, c.op, {c.a}, {c.b})[0];
      INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[c.op] << "("
                                << hex(&c.a, 2) << ", " << hex(&c.b, 2) << ")");
      CHECK(hex(&got, 2) == hex(&c.expected, 2));
    }
  }
}

}  // namespace

TEST_CASE("float16 rounds once, to nearest even", "[reduce]") {
  check_half_cases(
      CHORUS_FLOAT16,
      {
          {CHORUS_SUM, 0x3c00, 0x1000, 0x3c00},   // 1 + 2^-11: tie, stays even
          {CHORUS_SUM, 0x3c01, 0x1000, 0x3c02},   // (1 + 2^-10) + 2^-11: tie, up to even
          {CHORUS_SUM, 0x3c00, 0x1001, 0x3c01},   // just above the tie
          {CHORUS_SUM, 0x3c00, 0x0001, 0x3c00},   // 1 + 2^-24 is far below half an ulp
          {CHORUS_PROD, 0x3c01, 0x3c01, 0x3c02},  // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20
          {CHORUS_SUM, 0x7bff, 0x4800, 0x7bff},   // 65504 + 8: below the tie with 65536
          {CHORUS_SUM, 0x7bff, 0x4c00, 0x7c00},   // 65504 + 16 = 65520: tie, to inf
          {CHORUS_PROD, 0x7bff, 0xc000, 0xfc00},  // overflow to -inf
          {CHORUS_SUM, 0x0001, 0x0001, 0x0002},   // subnormals add exactly
          {CHORUS_SUM, 0x03ff, 0x0001, 0x0400},   // largest subnormal + step = min normal
          {CHORUS_PROD, 0x0001, 0x3800, 0x0000},  // 2^-25: tie between 0 and 2^-24, to 0
          {CHORUS_PROD, 0x0003, 0x3800, 0x0002},  // 1.5 * 2^-24: tie, to even 2
          {CHORUS_PROD, 0x0001, 0xb800, 0x8000},  // underflow keeps the sign
          {CHORUS_PROD, 0x0400, 0x3800, 0x0200},  // min normal / 2 is subnormal
          {CHORUS_PROD, 0x0001, 0x0001, 0x0000},  // 2^-48 flushes to +0 by rounding
          {CHORUS_SUM, 0x8000, 0x8000, 0x8000},   // -0 + -0 = -0
          {CHORUS_SUM, 0x8000, 0x0000, 0x0000},   // -0 + +0 = +0
          {CHORUS_SUM, 0x3c00, 0xbc00, 0x0000},   // 1 - 1 = +0
          {CHORUS_SUM, 0x7c00, 0x7bff, 0x7c00},   // inf + max = inf
          {CHORUS_MAX, 0x7bff, 0x7c00, 0x7c00},  {CHORUS_MIN, 0xfc00, 0x0000, 0xfc00},
      });
  // NaN results: quiet NaNs; with one NaN operand, its sign and payload survive.
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto got =
        apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_SUM, {0x7c00, 0x7c01, 0x3c00, 0xfd55},
                             {0xfc00, 0x3c00, 0x7d00, 0});
    CHECK((got[0] & 0x7e00) == 0x7e00);  // inf - inf
    CHECK(got[1] == 0x7e01);             // signalling NaN comes out quiet
    CHECK(got[2] == 0x7f00);
    CHECK(got[3] == 0xff55);
    const auto prod = apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_PROD, {0x7c00}, {0x0000});
    CHECK((prod[0] & 0x7e00) == 0x7e00);  // inf * 0
  }
}

TEST_CASE("bfloat16 rounds once, to nearest even", "[reduce]") {
  check_half_cases(
      CHORUS_BFLOAT16,
      {
          {CHORUS_SUM, 0x3f80, 0x3b80, 0x3f80},   // 1 + 2^-8: tie, stays even
          {CHORUS_SUM, 0x3f81, 0x3b80, 0x3f82},   // tie, up to even
          {CHORUS_SUM, 0x3f80, 0x3b81, 0x3f81},   // just above the tie
          {CHORUS_PROD, 0x3f81, 0x3f81, 0x3f82},  // (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14
          {CHORUS_SUM, 0x7f7f, 0x7b00, 0x7f80},   // max + 2^119: tie with 2^128, to inf
          {CHORUS_SUM, 0x7f7f, 0x7a80, 0x7f7f},   // max + 2^118: below the tie
          {CHORUS_SUM, 0x7f7f, 0x7f7f, 0x7f80},   // float overflow
          {CHORUS_PROD, 0xff7f, 0x4000, 0xff80},  // -max * 2 = -inf
          {CHORUS_SUM, 0x0001, 0x0001, 0x0002},   // subnormals add exactly
          {CHORUS_PROD, 0x0001, 0x3f00, 0x0000},  // 2^-134: tie between 0 and 2^-133, to 0
          {CHORUS_PROD, 0x0003, 0x3f00, 0x0002},  // tie, to even
          {CHORUS_PROD, 0x0081, 0x3f00, 0x0040},  // (1 + 2^-7) 2^-126 / 2: tie, to even
          {CHORUS_SUM, 0x8000, 0x8000, 0x8000},
          {CHORUS_SUM, 0x8000, 0x0000, 0x0000},
          {CHORUS_MAX, 0x8000, 0x0000, 0x0000},
          {CHORUS_MIN, 0x0000, 0x8000, 0x8000},
      });
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto got = apply_each<uint16_t>(isa, CHORUS_BFLOAT16, CHORUS_SUM,
                                          {0x7f80, 0x7f81, 0x3f80}, {0xff80, 0x3f80, 0xffc5});
    CHECK((got[0] & 0x7fc0) == 0x7fc0);  // inf - inf is a quiet NaN
    CHECK(got[1] == 0x7fc1);             // signalling NaN comes out quiet, payload kept
    CHECK(got[2] == 0xffc5);
  }
}

TEST_CASE("complex64 sum and prod", "[reduce]") {
  struct C {
    float re;
    float im;
  };
  const std::vector<C> a = {{1, 2}, {0, 1}, {3, -4}, {1e30f, 1e30f}, {0.1f, 0.2f}};
  const std::vector<C> b = {{3, 4}, {0, 1}, {3, 4}, {1e30f, -1e30f}, {0.3f, 0.7f}};
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto prod = apply_each<C>(isa, CHORUS_COMPLEX64, CHORUS_PROD, a, b);
    CHECK(prod[0].re == -5);  // (1+2i)(3+4i) = -5+10i
    CHECK(prod[0].im == 10);
    CHECK(prod[1].re == -1);  // i*i = -1
    CHECK(prod[1].im == 0);
    CHECK(prod[2].re == 25);  // z * conj(z) = |z|^2
    CHECK(prod[2].im == 0);
    CHECK(std::isinf(prod[3].re));  // 1e60 overflows: no rescaling (no Annex G)
    CHECK(std::isnan(prod[3].im));  // 1e60 - 1e60 = inf - inf
    // Each product rounded to float, then the difference rounded once.
    CHECK(prod[4].re == float(float(0.1f * 0.3f) - float(0.2f * 0.7f)));
    CHECK(prod[4].im == float(float(0.1f * 0.7f) + float(0.2f * 0.3f)));
    const auto sum = apply_each<C>(isa, CHORUS_COMPLEX64, CHORUS_SUM, a, b);
    CHECK(sum[0].re == 4);
    CHECK(sum[0].im == 6);
    CHECK(sum[2].im == 0);
  }
}

TEST_CASE("max and min propagate NaN and order -0 below +0", "[reduce]") {
  const uint32_t qnan = 0x7fc00001;
  const uint32_t neg_nan = 0xffc00002;
  const uint32_t snan = 0x7f800003;
  const uint32_t one = 0x3f800000;
  const uint32_t minus_inf = 0xff800000;
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const std::vector<uint32_t> a = {qnan, one, qnan, minus_inf, 0x80000000, 0, 0xbf800000, 1};
    const std::vector<uint32_t> b = {one, snan, neg_nan, neg_nan, 0, 0x80000000, 0xc0000000, 0};
    CHECK(apply_each(isa, CHORUS_FLOAT32, CHORUS_MAX, a, b) ==
          std::vector<uint32_t>{qnan, snan, qnan, neg_nan, 0, 0, 0xbf800000, 1});
    CHECK(apply_each(isa, CHORUS_FLOAT32, CHORUS_MIN, a, b) ==
          std::vector<uint32_t>{qnan, snan, qnan, neg_nan, 0x80000000, 0x80000000, 0xc0000000, 0});
    const std::vector<uint64_t> da = {0x7ff8000000000001, 0x8000000000000000, 0xfff0000000000000};
    const std::vector<uint64_t> db = {0x3ff0000000000000, 0, 0x7ff0000000000002};
    CHECK(apply_each(isa, CHORUS_FLOAT64, CHORUS_MAX, da, db) ==
          std::vector<uint64_t>{0x7ff8000000000001, 0, 0x7ff0000000000002});
    CHECK(apply_each(isa, CHORUS_FLOAT64, CHORUS_MIN, da, db) ==
          std::vector<uint64_t>{0x7ff8000000000001, 0x8000000000000000, 0x7ff0000000000002});
    // float16 and bfloat16: the NaN comes back bit for bit (not quieted).
    CHECK(apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_MAX, {0x7c01, 0x3c00, 0x8000},
                               {0x3c00, 0xfd00, 0x0000}) ==
          std::vector<uint16_t>{0x7c01, 0xfd00, 0x0000});
    CHECK(apply_each<uint16_t>(isa, CHORUS_BFLOAT16, CHORUS_MIN, {0x3f80, 0xff81, 0x0000},
                               {0x7f81, 0x3f80, 0x8000}) ==
          std::vector<uint16_t>{0x7f81, 0xff81, 0x8000});
  }
}

TEST_CASE("half.h scalar conversions match the reference", "[reduce][half]") {
  using chorus::core::bfloat16_to_float;
  using chorus::core::float_to_bfloat16;
  using chorus::core::float_to_half;
  using chorus::core::half_to_float;
  size_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const double v = f16_value(static_cast<uint16_t>(h));
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v) ? !std::isnan(f) : (double{f} != v || std::signbit(f) != std::signbit(v))) {
      ++bad;
    }
    if (!std::isnan(v) && float_to_half(f) != h) ++bad;
    if (bfloat16_to_float(static_cast<uint16_t>(h)) != bf16_value(static_cast<uint16_t>(h)) &&
        !std::isnan(bf16_value(static_cast<uint16_t>(h)))) {
      ++bad;
    }
  }
  CHECK(bad == 0);

  std::mt19937 rng(3);
  bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = i < 16 ? 0x33000000u + static_cast<uint32_t>(i) - 8 : rng();
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) {
      bad += (float_to_half(f) & 0x7e00) != 0x7e00;
      bad += (float_to_bfloat16(f) & 0x7fc0) != 0x7fc0;
      continue;
    }
    bad += float_to_half(f) != f16_round(f);
    bad += float_to_bfloat16(f) != bf16_round(f);
  }
  CHECK(bad == 0);
  static_assert(chorus::core::float_to_half(1.0f) == 0x3c00);
  static_assert(chorus::core::float_to_bfloat16(-2.0f) == 0xc000);
}

namespace {

/// float16 or bfloat16 values that exercise every path of the conversions:
/// signed zeros, the smallest and largest subnormals, the smallest normal,
/// one and its neighbours (sums with them land on rounding ties), the largest
/// finite value, infinities, and quiet and signalling NaNs of both signs with
/// payload bits at the top, at the bottom, and everywhere.
std::vector<uint16_t> half_specials(int dtype) {
  if (dtype == CHORUS_FLOAT16) {
    return {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x3c00,
            0x3c01, 0xbc01, 0x1000, 0x1400, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
            0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7d55, 0xfdff, 0x7fff, 0xffff};
  }
  return {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x3f80,
          0x3f81, 0xbf81, 0x3b80, 0x3c00, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
          0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7faa, 0xffbf, 0x7fff, 0xffff};
}

/// op(a, b) for float16/bfloat16, with the NaN rules of reduce.h made exact:
/// one NaN operand gives that NaN, quieted, for sum and prod; both NaN
/// operands give some NaN (the hardware's choice).
Expected half_expect(int dtype, int op, uint16_t a, uint16_t b) {
  const uint16_t quiet = dtype == CHORUS_FLOAT16 ? 0x0200 : 0x0040;
  const bool a_nan = is_nan(dtype, a);
  const bool b_nan = is_nan(dtype, b);
  if ((op == CHORUS_SUM || op == CHORUS_PROD) && a_nan != b_nan) {
    return {static_cast<uint16_t>((a_nan ? a : b) | quiet)};
  }
  return dtype == CHORUS_FLOAT16 ? f16_expect(op, a, b) : bf16_expect(op, a, b);
}

}  // namespace

TEST_CASE("float16 and bfloat16: every value against every special value", "[reduce]") {
  // All 65536 bit patterns as inout with each special as src, then the
  // other way round: every class meets every class, including NaN payloads,
  // -0/+0, infinities, subnormals and ties, in whole vectors and in tails.
  for (const int dtype : {CHORUS_FLOAT16, CHORUS_BFLOAT16}) {
    const std::vector<uint16_t> specials = half_specials(dtype);
    for (const ReduceIsa isa : runnable_isas()) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[op]);
        const chorus_reduce_fn_t fn = reduce_kernel_for_isa(dtype, op, isa);
        REQUIRE(fn != nullptr);
        size_t bad = 0;
        std::string first;
        for (const uint16_t special : specials) {
          for (const bool special_is_src : {true, false}) {
            std::vector<uint16_t> inout(65536);
            std::vector<uint16_t> src(65536, special);
            for (size_t i = 0; i < inout.size(); ++i) inout[i] = static_cast<uint16_t>(i);
            if (!special_is_src) std::swap(inout, src);
            const std::vector<uint16_t> before = inout;
            // An odd count leaves a tail on every instruction set.
            fn(src.data(), inout.data(), inout.size() - 3);
            for (size_t i = 0; i < inout.size(); ++i) {
              const Expected e = i < inout.size() - 3 ? half_expect(dtype, op, before[i], src[i])
                                                      : Expected{before[i]};
              const bool ok = e.any_nan ? is_nan(dtype, inout[i]) : inout[i] == e.bits;
              if (!ok && bad++ == 0) {
                first = kOpNames[op] + std::string("(") + hex(&before[i], 2) + ", " +
                        hex(&src[i], 2) + ") = " + hex(&inout[i], 2) + ", expected " +
                        hex(&e.bits, 2);
              }
            }
          }
        }
        INFO(first);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("bfloat16 sum and prod match the baseline with MXCSR.DAZ set", "[reduce]") {
#if defined(__x86_64__) || defined(__i386__)
  // avx512bf16 rounds with an instruction that flushes subnormals and finds
  // them with one that reads them as zero under DAZ, so it must notice DAZ.
  // Operands just above the smallest normal, of both signs, cancel into
  // subnormal float sums, and times src values in [0.5, 1) give subnormal
  // products; DAZ (without FTZ) lets both through, and every level must round
  // them as the baseline does, bit for bit.
  std::mt19937_64 rng(126);
  constexpr size_t kCount = 4099;
  auto tiny = [&rng] { return static_cast<uint16_t>((rng() & 0x80ff) | ((rng() % 3) << 7)); };
  std::vector<uint16_t> inout(kCount);
  for (uint16_t& x : inout) x = tiny();
  for (const int op : {CHORUS_SUM, CHORUS_PROD}) {
    std::vector<uint16_t> src(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      src[i] = op == CHORUS_PROD ? static_cast<uint16_t>((rng() & 0x807f) | 0x3f00) : tiny();
      if (op == CHORUS_SUM && i % 5 == 0) src[i] = inout[i] ^ 0x8001;  // near cancellation
    }
    std::vector<std::vector<uint16_t>> results;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr((csr | 0x40) & ~0x8000u);  // DAZ on, FTZ off
    for (const ReduceIsa isa : runnable_isas()) {
      results.push_back(inout);
      reduce_kernel_for_isa(CHORUS_BFLOAT16, op, isa)(src.data(), results.back().data(), kCount);
    }
    _mm_setcsr(csr);
    for (size_t k = 1; k < results.size(); ++k) {
      INFO(kOpNames[op] << " " << reduce_isa_name(runnable_isas()[k]));
      size_t differing = 0;
      for (size_t i = 0; i < kCount; ++i) differing += results[k][i] != results[0][i] ? 1 : 0;
      CHECK(differing == 0);
    }
    // The data does reach the subnormal range.
    size_t subnormal = 0;
    for (const uint16_t r : results[0]) subnormal += (r & 0x7f80) == 0 && (r & 0x7f) != 0 ? 1 : 0;
    CHECK(subnormal > kCount / 20);
  }
#else
  WARN("does not apply: MXCSR is x86's");
#endif
}

TEST_CASE("float max and min on data without NaN and with one NaN per block", "[reduce]") {
  // The AVX-512 max/min check a block of four registers for NaNs once and,
  // when there are none, skip the NaN merges. Random data has a NaN in
  // nearly every block, so here the NaNs are replaced (by infinities) to
  // reach that path, and then one NaN at a time, in inout or in src, at
  // every position of the first two blocks, must still win as it should.
  std::mt19937_64 rng(4);
  for (const int dtype : {CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32, CHORUS_FLOAT64}) {
    for (const int op : {CHORUS_MAX, CHORUS_MIN}) {
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      const size_t size = chorus_dtype_size(dtype);
      const size_t count = 4 * 512 / size + 5;  // two 4x64-byte blocks, then more
      std::vector<std::byte> src(count * size);
      std::vector<std::byte> inout(count * size);
      fill(rng, dtype, src.data(), count);
      fill(rng, dtype, inout.data(), count);
      const uint64_t sign = uint64_t{1} << (8 * size - 1);
      const uint64_t inf = dtype == CHORUS_FLOAT16    ? 0x7c00
                           : dtype == CHORUS_BFLOAT16 ? 0x7f80
                           : dtype == CHORUS_FLOAT32  ? 0x7f800000
                                                      : 0x7ff0000000000000;
      for (std::vector<std::byte>* v : {&src, &inout}) {
        for (size_t i = 0; i < count; ++i) {
          uint64_t x = 0;
          std::memcpy(&x, v->data() + i * size, size);
          if (is_nan(dtype, x)) x = (x & sign) | inf;
          std::memcpy(v->data() + i * size, &x, size);
        }
      }
      std::string problems;
      // Position count: no NaN at all; else a quiet NaN with a payload at
      // position pos % span, in src for the first span, in inout for the second.
      const size_t span = 512 / size;
      for (size_t pos = 0; pos <= 2 * span && problems.size() < 2000; ++pos) {
        std::vector<std::byte> a = inout;
        std::vector<std::byte> b = src;
        if (pos < 2 * span) {
          const uint64_t nan = (pos % 2 ? sign : 0) | inf | (inf >> 1 & ~inf) | 1;
          std::memcpy((pos < span ? b : a).data() + (pos % span) * size, &nan, size);
        }
        std::vector<std::byte> base;
        for (const ReduceIsa isa : runnable_isas()) {
          std::vector<std::byte> out = a;
          reduce_kernel_for_isa(dtype, op, isa)(b.data(), out.data(), count);
          for (size_t i = 0; i < count * size; i += size) {
            const std::string why = check_element(dtype, op, &a[i], &b[i], &out[i]);
            const bool same = base.empty() || std::memcmp(&base[i], &out[i], size) == 0;
            if (!why.empty() || !same) {
              problems += std::string(reduce_isa_name(isa)) + " NaN at " + std::to_string(pos) +
                          " [" + std::to_string(i / size) + "] " +
                          (why.empty() ? "differs from baseline" : why) + "\n";
            }
          }
          if (base.empty()) base = out;
        }
      }
      CHECK(problems == "");
    }
  }
}
