/**
 * @file chorus/float16.hpp
 * @brief The 16-bit floating types of the C++ layer: chorus::half (IEEE
 *        binary16, CHORUS_FLOAT16) and chorus::bfloat16 (CHORUS_BFLOAT16).
 *
 * Both are two bytes holding the bit pattern the library reduces, so a
 * `std::vector<chorus::half>` is a valid CHORUS_FLOAT16 buffer. Converting
 * from float rounds to nearest, ties to even (as the reduction kernels and
 * the JACCL layer's `float16_t` / `bfloat16_t` do); overflow gives infinity;
 * a NaN stays a NaN (quiet, sign and top payload bits kept). Converting to
 * float is exact. Arithmetic is not provided: convert to float, compute, and
 * convert back, so each rounding is explicit. C++17 or newer.
 */
#ifndef CHORUS_FLOAT16_HPP_
#define CHORUS_FLOAT16_HPP_

#include <cstdint>

// C++17 has no std::bit_cast; GCC (11+) and Clang give the same as a builtin,
// usable in constant expressions. Undefined at the end of this header.
#define CHORUS_BIT_CAST(type, value) __builtin_bit_cast(type, value)

namespace chorus {

/// IEEE 754 binary16.
class half {
 public:
  half() = default;
  /// Rounds `f` to the nearest half, ties to even.
  constexpr half(float f) noexcept : bits_(from_float(f)) {}  // NOLINT: implicit, like float
  constexpr operator float() const noexcept { return to_float(bits_); }

  /// The half whose bit pattern is `bits`.
  static constexpr half from_bits(uint16_t bits) noexcept {
    half h;
    h.bits_ = bits;
    return h;
  }
  constexpr uint16_t bits() const noexcept { return bits_; }

  static constexpr float to_float(uint16_t h) noexcept {
    const uint32_t sign = uint32_t{h & 0x8000u} << 16;
    const uint32_t magnitude = h & 0x7fffu;
    uint32_t bits = 0;
    if (magnitude >= 0x7c00u) {  // infinity or NaN (quieted)
      bits = (magnitude << 13) | 0x7f800000u | (magnitude > 0x7c00u ? 0x00400000u : 0u);
    } else if (magnitude >= 0x0400u) {  // normal: exponent bias 15 -> 127
      bits = (magnitude << 13) + ((127u - 15u) << 23);
    } else {  // zero or subnormal: magnitude * 2^-24, exact in float
      bits = CHORUS_BIT_CAST(uint32_t, static_cast<float>(magnitude) * 0x1p-24f);
    }
    return CHORUS_BIT_CAST(float, bits | sign);
  }

  static constexpr uint16_t from_float(float f) noexcept {
    const uint32_t u = CHORUS_BIT_CAST(uint32_t, f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    uint32_t r = 0;
    if (a > 0x7f800000u) {  // NaN: quiet, keep the top 10 payload bits
      r = 0x7e00u | ((a >> 13) & 0x3ffu);
    } else if (a >= 0x47800000u) {  // >= 2^16 (and infinity): past the largest half
      r = 0x7c00u;
    } else if (a >= 0x38800000u) {  // a normal half; the rounding carry may reach infinity
      r = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    } else if (a > 0x33000000u) {  // a subnormal half, in units of 2^-24
      const uint32_t shift = 126u - (a >> 23);
      const uint32_t mantissa = (a & 0x007fffffu) | 0x00800000u;
      const uint32_t rest = mantissa & ((1u << shift) - 1u);
      const uint32_t half_unit = 1u << (shift - 1u);
      r = mantissa >> shift;
      if (rest > half_unit || (rest == half_unit && (r & 1u) != 0)) ++r;
    }  // else |f| <= 2^-25: zero (2^-25 itself is a tie and goes to even, zero)
    return static_cast<uint16_t>(r | sign);
  }

 private:
  uint16_t bits_ = 0;
};

/// bfloat16: the upper 16 bits of an IEEE binary32.
class bfloat16 {
 public:
  bfloat16() = default;
  /// Rounds `f` to the nearest bfloat16, ties to even.
  constexpr bfloat16(float f) noexcept : bits_(from_float(f)) {}  // NOLINT: implicit, like float
  constexpr operator float() const noexcept { return to_float(bits_); }

  /// The bfloat16 whose bit pattern is `bits`.
  static constexpr bfloat16 from_bits(uint16_t bits) noexcept {
    bfloat16 b;
    b.bits_ = bits;
    return b;
  }
  constexpr uint16_t bits() const noexcept { return bits_; }

  static constexpr float to_float(uint16_t b) noexcept {
    return CHORUS_BIT_CAST(float, uint32_t{b} << 16);
  }
  static constexpr uint16_t from_float(float f) noexcept {
    const uint32_t u = CHORUS_BIT_CAST(uint32_t, f);
    // A NaN must not round into infinity: keep its top bits, set the quiet bit.
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }

 private:
  uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2 && alignof(half) == 2);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);

}  // namespace chorus

#undef CHORUS_BIT_CAST

#endif  // CHORUS_FLOAT16_HPP_
