// Reduction kernels: inout[i] = op(inout[i], src[i]) for every supported
// (dtype, op) pair; semantics are documented in reduce.h.
//
// The kernels are written once with GCC/Clang vector extensions, so every
// operation is explicitly SIMD whatever the -O level, and compiled once per
// instruction set by including this file into itself (Highway's
// foreach_target scheme): the part after `#else  // CHORUS_REDUCE_KERNEL_PASS`
// is compiled for the baseline with 16-byte vectors (SSE2 on x86-64, NEON on
// aarch64) and, on x86, again under target("avx2,f16c") with 32-byte vectors.
// Every function of the second pass carries the target, so F16C intrinsics
// and 32-byte vectors never meet a function compiled without AVX.
// reduce_kernel() picks a pass once per process.
//
// Invariants every kernel keeps:
// - The same element-wise operations in the same order on every pass; only
//   the vector width differs. So results are bitwise identical across
//   instruction sets (float16 conversion: F16C on AVX2, integer bit
//   manipulation elsewhere, written to match F16C bit for bit).
// - No FMA contraction (complex prod, the only multiply-add, is compiled with
//   fp-contract off), so results do not depend on -march or on the CPU.
// - Element i depends on inout[i] and src[i] only, and the tail is computed by
//   the same vector code on a zero-padded copy. So src == inout works, and
//   results depend neither on alignment nor on where the count ends.

#ifndef CHORUS_REDUCE_KERNEL_PASS

#include "core/reduce.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#define CHORUS_REDUCE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define CHORUS_REDUCE_X86 0
#endif

namespace chorus::core {
namespace {
using KernelRow = std::array<chorus_reduce_fn_t, CHORUS_OP_COUNT>;
using KernelTable = std::array<KernelRow, CHORUS_DTYPE_COUNT>;
}  // namespace
}  // namespace chorus::core

#define CHORUS_REDUCE_KERNEL_PASS 1

#define CHORUS_REDUCE_NS baseline
#define CHORUS_REDUCE_VECTOR_BYTES 16
#define CHORUS_REDUCE_F16C 0
#include "core/reduce.cc"  // NOLINT(build/include): the baseline pass.
#undef CHORUS_REDUCE_NS
#undef CHORUS_REDUCE_VECTOR_BYTES
#undef CHORUS_REDUCE_F16C

#if CHORUS_REDUCE_X86
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
#define CHORUS_REDUCE_NS avx2
#define CHORUS_REDUCE_VECTOR_BYTES 32
#define CHORUS_REDUCE_F16C 1
#include "core/reduce.cc"  // NOLINT(build/include): the AVX2 pass.
#undef CHORUS_REDUCE_NS
#undef CHORUS_REDUCE_VECTOR_BYTES
#undef CHORUS_REDUCE_F16C
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // CHORUS_REDUCE_X86

namespace chorus::core {
namespace {

bool valid_pair(int dtype, int op) {
  return dtype >= 0 && dtype < CHORUS_DTYPE_COUNT && op >= 0 && op < CHORUS_OP_COUNT;
}

#if CHORUS_REDUCE_X86
bool cpu_runs_avx2() {
  // __builtin_cpu_supports("avx2") also checks that the OS saves YMM state.
  // F16C is read from CPUID directly: Clang's builtin does not know it.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

/// The table for `isa`, or nullptr when this build or CPU cannot run it.
/// Never hands out a table whose code the CPU cannot execute.
const KernelTable* table_for(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline:
      return &baseline::kKernels;
    case ReduceIsa::kAvx2: {
#if CHORUS_REDUCE_X86
      static const bool runs = cpu_runs_avx2();
      return runs ? &avx2::kKernels : nullptr;
#else
      return nullptr;
#endif
    }
  }
  return nullptr;
}

}  // namespace

ReduceIsa reduce_best_isa() {
  static const ReduceIsa best =
      table_for(ReduceIsa::kAvx2) != nullptr ? ReduceIsa::kAvx2 : ReduceIsa::kBaseline;
  return best;
}

const char* reduce_isa_name(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline:
      return "baseline";
    case ReduceIsa::kAvx2:
      return "avx2";
  }
  return "unknown";
}

chorus_reduce_fn_t reduce_kernel_for_isa(int dtype, int op, ReduceIsa isa) {
  if (!valid_pair(dtype, op)) return nullptr;
  const KernelTable* table = table_for(isa);
  return table != nullptr ? (*table)[dtype][op] : nullptr;
}

chorus_reduce_fn_t reduce_kernel(int dtype, int op) {
  static const KernelTable* const best = table_for(reduce_best_isa());
  return valid_pair(dtype, op) ? (*best)[dtype][op] : nullptr;
}

const char* reduce_unsupported_reason(int dtype, int op) {
  if (dtype < 0 || dtype >= CHORUS_DTYPE_COUNT) {
    return "unknown dtype: not a chorus_dtype_t value (0 to 13)";
  }
  if (op < 0 || op >= CHORUS_OP_COUNT) return "unknown op: not a chorus_op_t value (0 to 3)";
  if (dtype == CHORUS_COMPLEX64 && op == CHORUS_MAX) {
    return "max is not defined for complex64; use sum or prod";
  }
  if (dtype == CHORUS_COMPLEX64 && op == CHORUS_MIN) {
    return "min is not defined for complex64; use sum or prod";
  }
  return "";
}

}  // namespace chorus::core

#else  // CHORUS_REDUCE_KERNEL_PASS: the kernels, compiled once per instruction set.

namespace chorus::core {
namespace {
namespace CHORUS_REDUCE_NS {

constexpr int kVectorBytes = CHORUS_REDUCE_VECTOR_BYTES;

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
constexpr bool kFiniteMathOnly = true;
#else
constexpr bool kFiniteMathOnly = false;
#endif

/// `N` lanes of `T`; by default one full register of this pass.
template <class T, int N = kVectorBytes / int{sizeof(T)}>
using Vec [[gnu::vector_size(sizeof(T) * N)]] = T;

/// std::bit_cast for vectors, defined inside the pass: std::bit_cast itself
/// is compiled without AVX and would pass 32-byte vectors in a changed ABI.
template <class To, class From>
[[gnu::always_inline]] inline To bit_as(From v) {
  static_assert(sizeof(To) == sizeof(From));
  return __builtin_bit_cast(To, v);
}

/// Per lane, b where `sign`'s sign bit is set, else a; the other bits of
/// `sign` are ignored. Used with signed integer lanes of 2, 4 or 8 bytes.
/// AVX2 blends 4- and 8-byte lanes on the sign bit alone; 2-byte lanes need
/// the bit spread over the lane first (one compare), and so does the baseline.
template <class V>
[[gnu::always_inline]] inline V select_by_sign(V sign, V b, V a) {
#if CHORUS_REDUCE_F16C
  static_assert(sizeof(V) == 32);
  constexpr size_t kLaneBytes = sizeof(V) / (sizeof(V) / sizeof(sign[0]));
  if constexpr (kLaneBytes == 4) {
    return bit_as<V>(_mm256_blendv_ps(bit_as<__m256>(a), bit_as<__m256>(b), bit_as<__m256>(sign)));
  } else if constexpr (kLaneBytes == 8) {
    return bit_as<V>(
        _mm256_blendv_pd(bit_as<__m256d>(a), bit_as<__m256d>(b), bit_as<__m256d>(sign)));
  } else {
    return bit_as<V>(
        _mm256_blendv_epi8(bit_as<__m256i>(a), bit_as<__m256i>(b), bit_as<__m256i>(sign < 0)));
  }
#else
  const V mask = sign < 0;
  return (b & mask) | (a & ~mask);
#endif
}

/// An op on vectors of `kLanes` lanes of type `T`. Each op derived from it
/// provides `static V apply(V inout, V src)`; kElemSize is the size of one
/// dtype element (two lanes for complex64).
template <class T, int kLanesArg = kVectorBytes / int{sizeof(T)}>
struct OpOn {
  static constexpr int kLanes = kLanesArg;
  static constexpr size_t kElemSize = sizeof(T);
  static constexpr bool kAppliesAt = false;
  using V = Vec<T, kLanesArg>;
};

/// inout = Op(inout, src) on one register's worth of bytes at `d` and `s`.
/// Loads and stores go through memcpy, so any alignment works. An op that
/// can use memory operands itself (F16C conversions) sets kAppliesAt and
/// provides apply_at().
template <class Op>
[[gnu::always_inline]] inline void step(const std::byte* s, std::byte* d) {
  if constexpr (Op::kAppliesAt) {
    Op::apply_at(s, d);
  } else {
    using V = typename Op::V;
    V a;
    V b;
    std::memcpy(&a, d, sizeof(V));
    std::memcpy(&b, s, sizeof(V));
    a = Op::apply(a, b);
    std::memcpy(d, &a, sizeof(V));
  }
}

/// The kernel body: step() over whole registers, then over a zero-padded
/// copy of the remainder.
template <class Op>
[[gnu::always_inline]] inline void run(const void* src, void* inout, size_t count) {
  constexpr size_t kStep = sizeof(typename Op::V);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(inout);
  const size_t bytes = count * Op::kElemSize;
  size_t i = 0;
#pragma GCC unroll 4
  for (; i + kStep <= bytes; i += kStep) step<Op>(s + i, d + i);
  if (i < bytes) {
    std::byte a[kStep] = {};
    std::byte b[kStep] = {};
    std::memcpy(a, d + i, bytes - i);
    std::memcpy(b, s + i, bytes - i);
    step<Op>(b, a);
    std::memcpy(d + i, a, bytes - i);
  }
}

template <class Op>
void kernel(const void* src, void* inout, size_t count) {
  run<Op>(src, inout, count);
}

// ---- lane-wise sum, prod, max, min ----
// Used for integers and for float32/float64 sum and prod. Signed integers use
// the unsigned Sum/Prod, so overflow wraps without UB.

template <class T>
struct Sum : OpOn<T> {
  using typename OpOn<T>::V;
  [[gnu::always_inline]] static V apply(V a, V b) { return a + b; }
};

template <class T>
struct Prod : OpOn<T> {
  using typename OpOn<T>::V;
  [[gnu::always_inline]] static V apply(V a, V b) { return a * b; }
};

template <class T>
struct Max : OpOn<T> {
  using typename OpOn<T>::V;
  [[gnu::always_inline]] static V apply(V a, V b) { return b > a ? b : a; }
};

template <class T>
struct Min : OpOn<T> {
  using typename OpOn<T>::V;
  [[gnu::always_inline]] static V apply(V a, V b) { return b < a ? b : a; }
};

// ---- bool: any nonzero byte is true, results are 0 or 1 ----

struct BoolOr : OpOn<uint8_t> {
  [[gnu::always_inline]] static V apply(V a, V b) { return bit_as<V>((a | b) != 0) & 1; }
};

struct BoolAnd : OpOn<uint8_t> {
  [[gnu::always_inline]] static V apply(V a, V b) { return bit_as<V>((a != 0) & (b != 0)) & 1; }
};

// ---- floating-point max/min ----

/// IEEE 754-2019 maximum (kMax) or minimum on the bit patterns of a float
/// type, viewed as the signed integer type I of the same width; kInf is the
/// pattern of +infinity. NaN propagates: inout's NaN if inout is NaN, else
/// src's, bit for bit. Non-NaN values compare in float order with -0 < +0, so
/// the result never depends on operand order. The result is one of the
/// inputs, chosen by integer compares and NaN tests that MXCSR (DAZ/FTZ,
/// rounding) cannot change.
///
/// Float order equals signed-integer order on the bit patterns unless both
/// operands are negative, where it is reversed (-0 is INT_MIN, just below
/// every positive pattern). So "b is larger" is the integer compare flipped
/// when both sign bits are set; ties pick b, which then equals a. NaN tests
/// are x != x for float32/float64 and kInf - |x| (negative exactly for NaNs)
/// for the 16-bit formats. Every condition lives in the lanes' sign bits
/// until the one blend: 8 vector operations per AVX2 register for float32,
/// 11 for float16/bfloat16, and no lane is handled outside the vector code.
template <class I, I kInf, bool kMax>
struct FloatMinMax : OpOn<I> {
  using typename OpOn<I>::V;
  [[gnu::always_inline]] static V apply(V a, V b) {
    constexpr I kMagnitude = std::numeric_limits<I>::max();
    const V both_negative = a & b;
    V b_wins;
    if constexpr (kMax) {
      b_wins = (b > a) ^ both_negative;
    } else {
      b_wins = (b < a) ^ both_negative;
    }
    V a_nan;
    V b_nan;
    if constexpr (sizeof(I) >= 4 && !kFiniteMathOnly) {
      // x != x: one quiet unordered compare (no exception for quiet NaNs;
      // denormals-are-zero turns no NaN into a number). -ffinite-math-only
      // would fold it to false, so such builds take the integer test.
      using F = std::conditional_t<sizeof(I) == 4, float, double>;
      using VF = Vec<F, OpOn<I>::kLanes>;
      a_nan = bit_as<VF>(a) != bit_as<VF>(a);
      b_nan = bit_as<VF>(b) != bit_as<VF>(b);
    } else {
      a_nan = kInf - (a & kMagnitude);
      b_nan = kInf - (b & kMagnitude);
    }
    return select_by_sign((b_wins | b_nan) & ~a_nan, b, a);
  }
};

// ---- float16 and bfloat16 ----

/// Float lanes, and the 32-bit integer lanes used to build them.
using VF = Vec<float>;
using VU = Vec<uint32_t>;
using VS = Vec<int32_t>;
/// One register of float16 or bfloat16 elements.
using VH = Vec<uint16_t>;

/// IEEE binary16 -> float for halves held in the top 16 bits of 32-bit lanes
/// (low bits zero). Exact, and bit-exact with F16C: a signalling NaN comes
/// out quiet. Multiplying and subtracting powers of two are exact, so neither
/// the rounding mode nor DAZ/FTZ can change the result.
[[gnu::always_inline]] inline VF half_to_float(VU h) {
  const VU sign = h & 0x80000000u;
  const VU twice = h + h;  // exponent and mantissa at the top, sign dropped
  // Normal, infinity, NaN: put the bits in float position with the exponent
  // raised by 224, then scale by 2^-112: 15 + 224 - 112 = 127 for the bias,
  // and exponent 31 lands on 255 (the multiply also quiets a NaN).
  const VU normal = bit_as<VU>(bit_as<VF>((twice >> 4) + (224u << 23)) * 0x1p-112f);
  // Zero, subnormal: the mantissa under exponent 2^-1, minus 0.5, is m * 2^-24.
  const VU subnormal = bit_as<VU>(bit_as<VF>((twice >> 17) | (126u << 23)) - 0.5f);
  const VS is_subnormal = bit_as<VS>(twice >> 1) < (1 << 26);  // exponent field 0
  return bit_as<VF>((is_subnormal ? subnormal : normal) | sign);
}

/// float -> IEEE binary16 in the low 16 bits of each lane (upper bits zero),
/// bit-exact with F16C's vcvtps2ph in round-to-nearest-even: overflow gives
/// infinity, and a NaN keeps its sign and top 10 payload bits and is quieted.
/// The adder does the rounding, so this assumes the default rounding mode;
/// DAZ/FTZ only touch inputs below 2^-126, which round to zero anyway.
[[gnu::always_inline]] inline VU float_to_half(VF f) {
  const VU u = bit_as<VU>(f);
  const VU a = u & 0x7fffffffu;
  // |f| * 4, except that |f| >= 2^16 overflows to infinity on the way.
  VF base = (bit_as<VF>(a) * 0x1p+112f) * 0x1p-110f;
  // Adding 2^(e+15), e = max(exponent of f, -14), leaves |f| * 4 with the
  // ulp of the half result (2^(e-10), scaled by 4), so the adder rounds to
  // nearest even at exactly the half's precision, subnormals included.
  const VS exponent = bit_as<VS>(a & 0x7f800000u);
  const VS bias = exponent < (113 << 23) ? VS{} + (113 << 23) : exponent;
  base += bit_as<VF>(bit_as<VU>(bias) + (15u << 23));  // unsigned: inf + 15 wraps
  // The sum's exponent (mod 32) plus its mantissa's leading one form the half.
  const VU bits = bit_as<VU>(base);
  const VU rounded = ((bits >> 13) & 0x7c00) + (bits & 0x0fff);
  const VU nan = 0x7e00 | ((a >> 13) & 0x3ff);
  const VU r = bit_as<VS>(a) > 0x7f800000 ? nan : rounded;
  return r | ((u >> 16) & 0x8000);
}

/// float16 widened to two float registers and narrowed back. Which elements
/// land in `lo` and which in `hi` is the format's business; narrow() puts
/// them back where widen() took them from.
struct Float16 {
#if CHORUS_REDUCE_F16C
  // F16C converts 8 contiguous halves: lo is the first 128 bits, hi the rest.
  // The conversions read and write memory directly (load_widen and
  // narrow_store), which saves the lane extract and insert per register.
  static_assert(kVectorBytes == 32);
  static constexpr bool kConvertsInMemory = true;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  [[gnu::always_inline]] static void load_widen(const std::byte* p, VF& lo, VF& hi) {
    lo = bit_as<VF>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    hi = bit_as<VF>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  }
  [[gnu::always_inline]] static void narrow_store(std::byte* p, VF lo, VF hi) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(bit_as<__m256>(lo), kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16),
                     _mm256_cvtps_ph(bit_as<__m256>(hi), kRound));
  }
  [[gnu::always_inline]] static void widen(VH h, VF& lo, VF& hi) {
    const __m256i v = bit_as<__m256i>(h);
    lo = bit_as<VF>(_mm256_cvtph_ps(_mm256_castsi256_si128(v)));
    hi = bit_as<VF>(_mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)));
  }
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
    return bit_as<VH>(_mm256_set_m128i(_mm256_cvtps_ph(bit_as<__m256>(hi), kRound),
                                       _mm256_cvtps_ph(bit_as<__m256>(lo), kRound)));
  }
#else
  // Even elements (low half of each 32-bit lane) in lo, odd ones in hi: no
  // shuffles, just shifts and masks.
  static constexpr bool kConvertsInMemory = false;
  [[gnu::always_inline]] static void widen(VH h, VF& lo, VF& hi) {
    const VU w = bit_as<VU>(h);
    lo = half_to_float(w << 16);
    hi = half_to_float(w & 0xffff0000u);
  }
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
    return bit_as<VH>(float_to_half(lo) | (float_to_half(hi) << 16));
  }
#endif
};

/// bfloat16 is the top half of a float: widening is a shift or a mask.
/// Narrowing rounds to nearest even by adding 0x7fff plus the kept part's
/// lowest bit, then dropping the low 16 bits: four operations per register of
/// floats, with no separate NaN path. That is exact for the only floats
/// narrow() sees, sums and products of two widened bfloat16 values: a NaN
/// among them is either an operand quieted by the hardware or the default NaN
/// (x86 and Arm both set the quiet bit on every NaN they produce), and either
/// way its low 16 bits are zero, so the increment cannot carry into the kept
/// bits and the NaN is truncated with its sign, top payload bits and quiet
/// bit: float_to_bfloat16() bit for bit. A float with payload in its low
/// bits (which float_to_bfloat16() must guard) never reaches this code.
struct BFloat16 {
  static constexpr bool kConvertsInMemory = false;
  /// The rounded bfloat16 in the top 16 bits of each lane; low bits garbage.
  [[gnu::always_inline]] static VU round_top(VF f) {
    const VU u = bit_as<VU>(f);
    return u + (((u >> 16) & 1) + 0x7fff);
  }
  // Even elements in lo, odd ones in hi, as for the software float16 path.
  [[gnu::always_inline]] static void widen(VH h, VF& lo, VF& hi) {
    const VU w = bit_as<VU>(h);
    lo = bit_as<VF>(w << 16);
    hi = bit_as<VF>(w & 0xffff0000);
  }
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
    const VU even = round_top(lo) >> 16;
    const VU odd = round_top(hi);
#if CHORUS_REDUCE_F16C
    // One word blend instead of masking and or-ing: odd words from `odd`.
    return bit_as<VH>(_mm256_blend_epi16(bit_as<__m256i>(even), bit_as<__m256i>(odd), 0xaa));
#else
    return bit_as<VH>(even | (odd & 0xffff0000));
#endif
  }
};

struct Add {
  [[gnu::always_inline]] static VF apply(VF a, VF b) { return a + b; }
};

struct Mul {
  [[gnu::always_inline]] static VF apply(VF a, VF b) { return a * b; }
};

/// float16/bfloat16 sum or prod: widen to float, combine, round once.
template <class Format, class Arith>
struct HalfArith : OpOn<uint16_t> {
  [[gnu::always_inline]] static V apply(V a, V b) {
    VF a_lo, a_hi, b_lo, b_hi;
    Format::widen(a, a_lo, a_hi);
    Format::widen(b, b_lo, b_hi);
    return Format::narrow(Arith::apply(a_lo, b_lo), Arith::apply(a_hi, b_hi));
  }
  // Same arithmetic, with the format converting straight from and to memory;
  // step() calls it only when the format can.
  static constexpr bool kAppliesAt = Format::kConvertsInMemory;
  [[gnu::always_inline]] static void apply_at(const std::byte* s, std::byte* d) {
    VF a_lo, a_hi, b_lo, b_hi;
    Format::load_widen(d, a_lo, a_hi);
    Format::load_widen(s, b_lo, b_hi);
    Format::narrow_store(d, Arith::apply(a_lo, b_lo), Arith::apply(a_hi, b_hi));
  }
};

// ---- complex64 ----

/// Component-wise float sum over (re, im) pairs.
struct ComplexSum : Sum<float> {
  static constexpr size_t kElemSize = 8;
};

/// (ar + ai i)(br + bi i) = (ar*br - ai*bi) + (ar*bi + ai*br)i on interleaved
/// (re, im) floats. Each product is rounded to float before the add, as the
/// scalar formula without contraction; complex_prod_kernel() guarantees that.
struct ComplexProd : OpOn<float> {
  static constexpr size_t kElemSize = 8;

  [[gnu::always_inline]] static V apply(V a, V b) {
    return apply(a, b, std::make_index_sequence<kLanes>{});
  }

  template <size_t... kIdx>
  [[gnu::always_inline]] static V apply(V a, V b, std::index_sequence<kIdx...>) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const V a_re = __builtin_shufflevector(a, a, (kIdx & ~size_t{1})...);
    const V a_im = __builtin_shufflevector(a, a, (kIdx | 1)...);
    const V b_swapped = __builtin_shufflevector(b, b, (kIdx ^ 1)...);
    // Multiplying by -1 is exact, so re = ar*br + (-(ai*bi)) = ar*br - ai*bi.
    const V sign = {((kIdx & 1) != 0 ? 1.0f : -1.0f)...};
    return a_re * b + (a_im * b_swapped) * sign;
  }
};

#if defined(__clang__)
void complex_prod_kernel(const void* src, void* inout, size_t count) {
#else
[[gnu::optimize("fp-contract=off")]] void complex_prod_kernel(const void* src, void* inout,
                                                              size_t count) {
#endif
  run<ComplexProd>(src, inout, count);
}

// ---- the table ----

using F16Max = FloatMinMax<int16_t, 0x7c00, true>;
using F16Min = FloatMinMax<int16_t, 0x7c00, false>;
using Bf16Max = FloatMinMax<int16_t, 0x7f80, true>;
using Bf16Min = FloatMinMax<int16_t, 0x7f80, false>;
using F32Max = FloatMinMax<int32_t, 0x7f800000, true>;
using F32Min = FloatMinMax<int32_t, 0x7f800000, false>;
using F64Max = FloatMinMax<int64_t, 0x7ff0000000000000, true>;
using F64Min = FloatMinMax<int64_t, 0x7ff0000000000000, false>;

template <class SumOp, class ProdOp, class MaxOp, class MinOp>
constexpr KernelRow row(SumOp /*sum*/, ProdOp /*prod*/, MaxOp /*max*/, MinOp /*min*/) {
  KernelRow r{};
  r[CHORUS_SUM] = kernel<SumOp>;
  r[CHORUS_PROD] = kernel<ProdOp>;
  r[CHORUS_MAX] = kernel<MaxOp>;
  r[CHORUS_MIN] = kernel<MinOp>;
  return r;
}

template <class T>
constexpr KernelRow int_row() {
  using U = std::make_unsigned_t<T>;
  return row(Sum<U>{}, Prod<U>{}, Max<T>{}, Min<T>{});
}

constexpr KernelTable make_table() {
  KernelTable t{};
  t[CHORUS_BOOL] = row(BoolOr{}, BoolAnd{}, BoolOr{}, BoolAnd{});
  t[CHORUS_INT8] = int_row<int8_t>();
  t[CHORUS_INT16] = int_row<int16_t>();
  t[CHORUS_INT32] = int_row<int32_t>();
  t[CHORUS_INT64] = int_row<int64_t>();
  t[CHORUS_UINT8] = int_row<uint8_t>();
  t[CHORUS_UINT16] = int_row<uint16_t>();
  t[CHORUS_UINT32] = int_row<uint32_t>();
  t[CHORUS_UINT64] = int_row<uint64_t>();
  t[CHORUS_FLOAT16] = row(HalfArith<Float16, Add>{}, HalfArith<Float16, Mul>{}, F16Max{}, F16Min{});
  t[CHORUS_BFLOAT16] =
      row(HalfArith<BFloat16, Add>{}, HalfArith<BFloat16, Mul>{}, Bf16Max{}, Bf16Min{});
  t[CHORUS_FLOAT32] = row(Sum<float>{}, Prod<float>{}, F32Max{}, F32Min{});
  t[CHORUS_FLOAT64] = row(Sum<double>{}, Prod<double>{}, F64Max{}, F64Min{});
  t[CHORUS_COMPLEX64][CHORUS_SUM] = kernel<ComplexSum>;
  t[CHORUS_COMPLEX64][CHORUS_PROD] = complex_prod_kernel;
  return t;
}

constexpr KernelTable kKernels = make_table();

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core

#endif  // CHORUS_REDUCE_KERNEL_PASS
