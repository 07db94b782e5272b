/**
 * @file jaccl/types.h
 * @brief Element types that match JACCL's dtypes on the host: IEEE half
 *        (`float16_t`), bfloat16 (`bfloat16_t`) and `complex64_t`, and
 *        `dispatch_all_types` to turn a `jaccl::Dtype` into a C++ type.
 *
 * Conversions from float round to nearest even (NaN stays NaN, overflow
 * becomes infinity); conversions to float are exact. Arithmetic goes through
 * float and rounds once, as Chorus's reduction kernels do.
 */
#ifndef JACCL_TYPES_H_
#define JACCL_TYPES_H_

#include <jaccl/group.h>

#include <bit>
#include <complex>
#include <cstdint>

namespace jaccl {

/** IEEE 754 binary16, stored as its bit pattern in `bits_`. */
struct float16_t {
  uint16_t bits_ = 0;

  float16_t() = default;
  /** Rounds `x` to the nearest half (ties to even). */
  float16_t(const float& x) : bits_(from_float(x)) {}  // NOLINT: implicit, as in JACCL

  /** Exact. */
  operator float() const { return to_float(bits_); }  // NOLINT: implicit, as in JACCL

  bool operator<(float16_t x) const { return float(*this) < float(x); }
  bool operator>(float16_t x) const { return float(*this) > float(x); }
  float16_t operator+(float16_t x) const { return float(*this) + float(x); }
  float16_t& operator+=(float16_t x) { return *this = *this + x; }

  static uint16_t from_float(float x) {
    uint32_t f = std::bit_cast<uint32_t>(x);
    const uint32_t sign = (f >> 16) & 0x8000u;
    f &= 0x7fffffffu;
    if (f >= 0x47800000u)  // >= 65536, inf or NaN: no finite half is that large
      return uint16_t(sign | (f > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (f < 0x38800000u) {
      // Below the smallest normal half: adding 0.5f lines the half's subnormal
      // step (2^-24) up with float's last mantissa bit, so the FPU rounds.
      const float r = std::bit_cast<float>(f) + 0.5f;
      return uint16_t(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
    }
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits
    // to nearest even; a carry out of the mantissa bumps the exponent, which
    // is what rounding up to the next binade (or to infinity) needs.
    const uint32_t odd = (f >> 13) & 1u;
    f += 0xc8000fffu + odd;
    return uint16_t(sign | (f >> 13));
  }

  static float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
      const float magnitude = float(mantissa) * 0x1p-24f;  // subnormal or zero, exact
      return sign ? -magnitude : magnitude;
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

/** bfloat16: the upper half of a float32, stored in `bits_`. */
struct bfloat16_t {
  uint16_t bits_ = 0;

  bfloat16_t() = default;
  /** Rounds `x` to the nearest bfloat16 (ties to even); NaN stays a quiet NaN. */
  bfloat16_t(const float& x) : bits_(from_float(x)) {}  // NOLINT: implicit, as in JACCL

  /** Exact. */
  operator float() const { return std::bit_cast<float>(uint32_t(bits_) << 16); }  // NOLINT

  bool operator<(bfloat16_t x) const { return float(*this) < float(x); }
  bool operator>(bfloat16_t x) const { return float(*this) > float(x); }
  bfloat16_t operator+(bfloat16_t x) const { return float(*this) + float(x); }
  bfloat16_t& operator+=(bfloat16_t x) { return *this = *this + x; }

  static uint16_t from_float(float x) {
    uint32_t f = std::bit_cast<uint32_t>(x);
    if ((f & 0x7fffffffu) > 0x7f800000u) return uint16_t((f >> 16) | 0x0040u);
    f += 0x7fffu + ((f >> 16) & 1u);
    return uint16_t(f >> 16);
  }
};

static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2);

/** Complex64: two float32, real first. */
using complex64_t = std::complex<float>;

/** Lexicographic order (real, then imaginary), as JACCL defines it. */
inline bool operator<(complex64_t lhs, complex64_t rhs) {
  return lhs.real() < rhs.real() || (lhs.real() == rhs.real() && lhs.imag() < rhs.imag());
}
inline bool operator>(complex64_t lhs, complex64_t rhs) { return rhs < lhs; }

/** A tag carrying a type, handed to the callable of dispatch_all_types. */
template <typename T>
struct type_identity {
  using type = T;
};

/** The type carried by a type_identity tag `x`. */
#define JACCL_GET_TYPE(x) typename decltype(x)::type

/**
 * Call `f(type_identity<T>{})` with the C++ type T of `dtype`. An unknown
 * dtype calls nothing.
 */
template <typename F>
void dispatch_all_types(int dtype, F&& f) {
  switch (dtype) {
    case Dtype::Bool:
      f(type_identity<bool>{});
      break;
    case Dtype::Int8:
      f(type_identity<int8_t>{});
      break;
    case Dtype::Int16:
      f(type_identity<int16_t>{});
      break;
    case Dtype::Int32:
      f(type_identity<int32_t>{});
      break;
    case Dtype::Int64:
      f(type_identity<int64_t>{});
      break;
    case Dtype::UInt8:
      f(type_identity<uint8_t>{});
      break;
    case Dtype::UInt16:
      f(type_identity<uint16_t>{});
      break;
    case Dtype::UInt32:
      f(type_identity<uint32_t>{});
      break;
    case Dtype::UInt64:
      f(type_identity<uint64_t>{});
      break;
    case Dtype::Float16:
      f(type_identity<float16_t>{});
      break;
    case Dtype::BFloat16:
      f(type_identity<bfloat16_t>{});
      break;
    case Dtype::Float32:
      f(type_identity<float>{});
      break;
    case Dtype::Float64:
      f(type_identity<double>{});
      break;
    case Dtype::Complex64:
      f(type_identity<complex64_t>{});
      break;
    default:
      break;
  }
}

}  // namespace jaccl

#endif  // JACCL_TYPES_H_
