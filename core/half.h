// Scalar float16 and bfloat16 <-> float conversions, bit for bit the ones the
// reduction kernels use (and, for float16, x86 F16C's), for code that prepares
// or checks such data. The kernels themselves use vector forms in reduce_half.h.
#pragma once

#include <bit>
#include <cstdint>

namespace chorus::core {

/// IEEE binary16 -> float. Exact; a signalling NaN comes back quiet.
constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = h & 0x7fffu;
  uint32_t bits = 0;
  if (magnitude >= 0x7c00u) {  // infinity or NaN
    bits = (magnitude << 13) | 0x7f800000u | (magnitude > 0x7c00u ? 0x00400000u : 0u);
  } else if (magnitude >= 0x0400u) {  // normal: rebias the exponent from 15 to 127
    bits = (magnitude << 13) + ((127u - 15u) << 23);
  } else {  // zero or subnormal: mantissa * 2^-24
    bits = std::bit_cast<uint32_t>(static_cast<float>(magnitude) * 0x1p-24f);
  }
  return std::bit_cast<float>(bits | sign);
}

/// float -> IEEE binary16, round to nearest even. Overflow gives infinity; a
/// NaN keeps its sign and top 10 payload bits and is quieted.
constexpr uint16_t float_to_half(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t r = 0;
  if (a > 0x7f800000u) {
    r = 0x7e00u | ((a >> 13) & 0x3ffu);
  } else if (a >= 0x47800000u) {  // >= 2^16
    r = 0x7c00u;
  } else if (a >= 0x38800000u) {  // normal half; a rounding carry may reach infinity
    r = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  } else if (a > 0x33000000u) {               // subnormal half: units of 2^-24
    const uint32_t shift = 126u - (a >> 23);  // 14 to 24
    const uint32_t mantissa = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half_unit = 1u << (shift - 1u);
    r = mantissa >> shift;
    if (rest > half_unit || (rest == half_unit && (r & 1u) != 0)) ++r;
  }  // else |f| <= 2^-25 rounds to zero (2^-25 itself is a tie, to even)
  return static_cast<uint16_t>(r | sign);
}

/// bfloat16 -> float: the bfloat16 is the float's top half. Exact.
constexpr float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

/// float -> bfloat16, round to nearest even. Overflow gives infinity; a NaN
/// keeps its top payload bits and is quieted, so it never becomes infinity.
constexpr uint16_t float_to_bfloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace chorus::core
