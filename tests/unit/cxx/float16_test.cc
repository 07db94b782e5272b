// chorus::half and chorus::bfloat16 (include/chorus/float16.hpp) and the
// dtype trait of the C++ wrapper: compile-time checks, every 16-bit pattern
// round trip, and float -> 16-bit rounding against independent references
// (the compiler's _Float16 conversion, nearest-value search in double, and
// the JACCL layer's conversion) on edge cases and a sweep of float patterns.
#include <catch2/catch.hpp>

#include <jaccl/types.h>
#include <chorus/chorus.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

// ---- compile time ----
static_assert(chorus::dtype_v<bool> == CHORUS_BOOL);
static_assert(chorus::dtype_v<int8_t> == CHORUS_INT8);
static_assert(chorus::dtype_v<int16_t> == CHORUS_INT16);
static_assert(chorus::dtype_v<int32_t> == CHORUS_INT32);
static_assert(chorus::dtype_v<int64_t> == CHORUS_INT64);
static_assert(chorus::dtype_v<long long> == CHORUS_INT64);
static_assert(chorus::dtype_v<unsigned long long> == CHORUS_UINT64);
static_assert(chorus::dtype_v<uint8_t> == CHORUS_UINT8);
static_assert(chorus::dtype_v<uint16_t> == CHORUS_UINT16);
static_assert(chorus::dtype_v<uint32_t> == CHORUS_UINT32);
static_assert(chorus::dtype_v<uint64_t> == CHORUS_UINT64);
static_assert(chorus::dtype_v<chorus::half> == CHORUS_FLOAT16);
static_assert(chorus::dtype_v<chorus::bfloat16> == CHORUS_BFLOAT16);
static_assert(chorus::dtype_v<float> == CHORUS_FLOAT32);
static_assert(chorus::dtype_v<const double> == CHORUS_FLOAT64);
static_assert(chorus::dtype_v<std::complex<float>> == CHORUS_COMPLEX64);
static_assert(chorus::dtype_of<float>() == CHORUS_FLOAT32);
static_assert(!chorus::is_element_v<long double>);
static_assert(!chorus::is_element_v<std::complex<double>>);
static_assert(!chorus::is_element_v<void>);
static_assert(chorus::Element<chorus::half>);

// Typed calls exist for element types, take const inputs, and refuse others.
template <class T>
concept TypedCalls = requires(chorus::Communicator& c, const T* in, T* out, size_t n) {
  c.all_reduce(in, out, n);
  c.all_reduce(in, out, n, CHORUS_MAX);
  c.all_gather(in, out, n);
  c.reduce_scatter(in, out, n, CHORUS_SUM);
  c.broadcast(out, n, 0);
  c.send(in, n, 1);
  c.recv(out, n, 1);
  { c.iall_reduce(in, out, n) } -> std::same_as<chorus::Request>;
  { c.iall_gather(in, out, n) } -> std::same_as<chorus::Request>;
  { c.ireduce_scatter(in, out, n) } -> std::same_as<chorus::Request>;
  { c.ibroadcast(out, n, 0) } -> std::same_as<chorus::Request>;
  { c.isend(in, n, 1) } -> std::same_as<chorus::Request>;
  { c.irecv(out, n, 1) } -> std::same_as<chorus::Request>;
};
static_assert(TypedCalls<chorus::half>);
static_assert(TypedCalls<chorus::bfloat16>);
static_assert(TypedCalls<int32_t>);
static_assert(TypedCalls<std::complex<float>>);
static_assert(!TypedCalls<long double>);
// An output or a receive buffer must not be const.
template <class T>
concept RecvIntoConst = requires(chorus::Communicator& c, const T* p) {
  c.recv(p, 1, 1);
};
static_assert(!RecvIntoConst<float>);

static_assert(chorus::half(1.0f).bits() == 0x3c00);
static_assert(chorus::bfloat16(1.0f).bits() == 0x3f80);
static_assert(float(chorus::half::from_bits(0x3555)) == 0x1.554p-2f);

bool is_nan16_half(uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
bool is_nan16_bf(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

/// Nearest bfloat16 to `f` by exhaustive search of its two neighbours in
/// double, ties to the even pattern; beyond the largest finite value the
/// upper neighbour is infinity, which counts as 2^128 (IEEE overflow rule).
uint16_t reference_bfloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7fffffffu;
  const uint16_t lo = uint16_t(mag >> 16), hi = uint16_t(lo + 1);
  auto value = [](uint16_t b) {
    if (b == 0x7f80u) return std::ldexp(1.0, 128);
    return double(std::bit_cast<float>(uint32_t{b} << 16));
  };
  const double x = double(std::bit_cast<float>(mag));
  const double dl = x - value(lo), dh = value(hi) - x;
  uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1u) == 0 ? lo : hi);
  return uint16_t(sign | r);
}

std::vector<float> edge_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          0x1p-14f,
                          0x1p-24f,
                          0x1p-25f,
                          0x1.8p-25f,
                          0x1.000002p-25f,
                          0x1p-26f,
                          1.0f + 0x1p-11f,
                          1.0f + 0x1p-10f + 0x1p-11f,
                          1.0f + 0x1p-8f,
                          1.0f + 0x1p-7f + 0x1p-8f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          3.14159265f,
                          -2.71828182f,
                          0x1.ffep15f,
                          0x1.ffcp15f,
                          0x1.fffep127f};
  return v;
}

}  // namespace

TEST_CASE("half and bfloat16 round-trip every 16-bit pattern", "[float16]") {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = uint16_t(b);
    const uint16_t h = chorus::half(float(chorus::half::from_bits(bits))).bits();
    if (is_nan16_half(bits)) {
      INFO("half NaN " << b);
      CHECK(is_nan16_half(h));
      CHECK((h & 0x8000u) == (bits & 0x8000u));
    } else if (h != bits) {
      FAIL_CHECK("half " << b << " came back as " << h);
    }
    const uint16_t f = chorus::bfloat16(float(chorus::bfloat16::from_bits(bits))).bits();
    if (is_nan16_bf(bits)) {
      INFO("bfloat16 NaN " << b);
      CHECK(is_nan16_bf(f));
    } else if (f != bits) {
      FAIL_CHECK("bfloat16 " << b << " came back as " << f);
    }
  }
}

TEST_CASE("float to half rounds to nearest even like _Float16 and JACCL's float16_t", "[float16]") {
  auto check_one = [](float f) {
    const uint16_t got = chorus::half(f).bits();
    const uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    if (std::isnan(f)) {
      if (!is_nan16_half(got)) FAIL_CHECK("NaN " << std::bit_cast<uint32_t>(f) << " -> " << got);
      return;
    }
    if (got != want)
      FAIL_CHECK("float " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << "): got 0x"
                          << got << ", _Float16 gives 0x" << want);
    const uint16_t jaccl = jaccl::float16_t(f).bits_;
    if (got != jaccl)
      FAIL_CHECK("float " << f << ": got 0x" << std::hex << got << ", jaccl 0x" << jaccl);
  };
  for (float f : edge_floats()) check_one(f);
  // Explicit answers from the IEEE rules (independent of any implementation).
  CHECK(chorus::half(65504.0f).bits() == 0x7bff);
  CHECK(chorus::half(65520.0f).bits() == 0x7c00);  // the tie above max goes to infinity
  CHECK(chorus::half(0x1p-25f).bits() == 0x0000);  // tie between 0 and 2^-24: even
  CHECK(chorus::half(0x1.8p-25f).bits() == 0x0001);
  CHECK(chorus::half(1.0f + 0x1p-11f).bits() == 0x3c00);             // tie: even
  CHECK(chorus::half(1.0f + 0x1p-10f + 0x1p-11f).bits() == 0x3c02);  // tie: up to even
  CHECK(chorus::half(-0.0f).bits() == 0x8000);
  // A sweep over float bit patterns (every 4093rd, so each exponent and many
  // mantissas; about a million values).
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) check_one(std::bit_cast<float>(uint32_t(u)));
}

TEST_CASE("float to bfloat16 rounds to nearest even like a search in double and JACCL",
          "[float16]") {
  auto check_one = [](float f) {
    const uint16_t got = chorus::bfloat16(f).bits();
    if (std::isnan(f)) {
      if (!is_nan16_bf(got)) FAIL_CHECK("NaN " << std::bit_cast<uint32_t>(f) << " -> " << got);
      return;
    }
    const uint16_t want = reference_bfloat16(f);
    if (got != want)
      FAIL_CHECK("float " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << "): got 0x"
                          << got << ", nearest is 0x" << want);
    const uint16_t jaccl = jaccl::bfloat16_t(f).bits_;
    if (got != jaccl)
      FAIL_CHECK("float " << f << ": got 0x" << std::hex << got << ", jaccl 0x" << jaccl);
  };
  for (float f : edge_floats()) check_one(f);
  CHECK(chorus::bfloat16(1.0f + 0x1p-8f).bits() == 0x3f80);                     // tie: even
  CHECK(chorus::bfloat16(1.0f + 0x1p-7f + 0x1p-8f).bits() == 0x3f82);           // tie: up to even
  CHECK(chorus::bfloat16(std::numeric_limits<float>::max()).bits() == 0x7f80);  // overflows
  CHECK(chorus::bfloat16(0x1.fep127f).bits() == 0x7f7f);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) check_one(std::bit_cast<float>(uint32_t(u)));
}
