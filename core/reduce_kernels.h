// The reduction kernels of one instruction-set pass: the vector types and
// mask helpers (Vec, bit_as, the AVX-512 lane masks), the lane-wise ops
// (integer sum, prod, max and min, byte prod, bool, float32/float64 sum and
// prod), IEEE max/min for every floating type, complex64, and the (dtype,
// op) tables kKernels (and kKernelsBf16 on the AVX-512 pass). How a kernel
// walks its buffers is reduce_loop.h; float16 and bfloat16 sum and prod
// come from reduce_half.h.
//
// Not a header of its own, hence no include guard: core/reduce.cc includes it
// once per pass, with the standard and intrinsic headers already included
// and CHORUS_REDUCE_NS (the pass's namespace), CHORUS_REDUCE_VECTOR_BYTES,
// CHORUS_REDUCE_F16C and CHORUS_REDUCE_AVX512 defined.
//
// Invariants every kernel keeps:
// - The same element-wise operations in the same order on every pass; only
//   the vector width differs. So results are bitwise identical across
//   instruction sets. Where a pass takes another route it is exact by
//   construction and the tests compare it with the baseline bit for bit:
//   float16 conversion (F16C on AVX2 and AVX-512, integer bit manipulation
//   elsewhere, written to match F16C), float max/min on AVX-512 (integer
//   max/min and masked merges that pick the same input, see FloatMinMax) and
//   the AVX-512 float16/bfloat16 sum (x * 1 + y in one FMA, see Add).
// - No FMA contraction (complex prod, the only multiply-add, is compiled with
//   fp-contract off), so results do not depend on -march or on the CPU.
// - Element i depends on inout[i] and src[i] only, and every element goes
//   through the same vector code: in the loop, in the overlapping registers
//   at either end, or in a zero-padded register for buffers shorter than one
//   (reduce_loop.h). So src == inout works, and results depend neither on
//   alignment nor on where the count ends. Ops with a cheaper path for
//   ordinary blocks (apply_block(): no NaN for max/min, no subnormal for the
//   bfloat16 rounding instruction) give the same bits as apply().

#ifndef CHORUS_REDUCE_NS
#error "core/reduce_kernels.h is included by core/reduce.cc only, once per pass"
#endif

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

#if CHORUS_REDUCE_AVX512
// AVX-512 compares write one bit per lane into a mask register, and blends
// and masked operations read one. These wrap them for one register of
// signed integer lanes of 2, 4 or 8 bytes.

/// The mask type with one bit per lane of V.
template <class V>
using LaneMask = std::conditional_t<sizeof(V{}[0]) == 2, __mmask32,
                                    std::conditional_t<sizeof(V{}[0]) == 4, __mmask16, __mmask8>>;

/// Lanes of `x` whose sign bit is set.
template <class V>
[[gnu::always_inline]] inline LaneMask<V> lanes_negative(V x) {
  static_assert(sizeof(V) == 64 && sizeof(x[0]) >= 2);
  const __m512i v = bit_as<__m512i>(x);
  if constexpr (sizeof(x[0]) == 2) {
    return _mm512_movepi16_mask(v);
  } else if constexpr (sizeof(x[0]) == 4) {
    return _mm512_movepi32_mask(v);
  } else {
    return _mm512_movepi64_mask(v);
  }
}

/// Lanes where x > y as signed integers.
template <class V>
[[gnu::always_inline]] inline LaneMask<V> lanes_greater(V x, V y) {
  const __m512i a = bit_as<__m512i>(x);
  const __m512i b = bit_as<__m512i>(y);
  if constexpr (sizeof(x[0]) == 2) {
    return _mm512_cmpgt_epi16_mask(a, b);
  } else if constexpr (sizeof(x[0]) == 4) {
    return _mm512_cmpgt_epi32_mask(a, b);
  } else {
    return _mm512_cmpgt_epi64_mask(a, b);
  }
}

/// Signed integer maximum per lane (vpmaxs*).
template <class V>
[[gnu::always_inline]] inline V lanes_max(V x, V y) {
  return x > y ? x : y;
}

/// Per lane, the signed integer minimum of x and y where `where` is set, else
/// `other` (one masked instruction).
template <class V>
[[gnu::always_inline]] inline V lanes_min_where(LaneMask<V> where, V other, V x, V y) {
  const __m512i o = bit_as<__m512i>(other);
  const __m512i a = bit_as<__m512i>(x);
  const __m512i b = bit_as<__m512i>(y);
  if constexpr (sizeof(x[0]) == 2) {
    return bit_as<V>(_mm512_mask_min_epi16(o, where, a, b));
  } else if constexpr (sizeof(x[0]) == 4) {
    return bit_as<V>(_mm512_mask_min_epi32(o, where, a, b));
  } else {
    return bit_as<V>(_mm512_mask_min_epi64(o, where, a, b));
  }
}

/// Per lane, b where `take_b` is set, else a.
template <class V>
[[gnu::always_inline]] inline V lanes_blend(LaneMask<V> take_b, V b, V a) {
  const __m512i x = bit_as<__m512i>(a);
  const __m512i y = bit_as<__m512i>(b);
  if constexpr (sizeof(a[0]) == 2) {
    return bit_as<V>(_mm512_mask_blend_epi16(take_b, x, y));
  } else if constexpr (sizeof(a[0]) == 4) {
    return bit_as<V>(_mm512_mask_blend_epi32(take_b, x, y));
  } else {
    return bit_as<V>(_mm512_mask_blend_epi64(take_b, x, y));
  }
}
#else

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
#endif  // CHORUS_REDUCE_AVX512

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core

#include "core/reduce_loop.h"  // OpOn, and how a kernel walks the buffers

namespace chorus::core {
namespace {
namespace CHORUS_REDUCE_NS {

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

/// int8/uint8 prod. x86 has no byte multiply, and the generic vector
/// product widens through unpacks and packs (11 operations, 8 of them
/// shuffles, per AVX-512 register). The low byte of a 16-bit product depends
/// only on the low bytes of its factors, so one 16-bit multiply gives the
/// even bytes' products in the low bytes, and multiplying the odd bytes (the
/// high bytes shifted down) by the other side's odd bytes left in place puts
/// theirs in the high bytes: 5 operations, no shuffles. Wraps modulo 256
/// like Prod<uint8_t>, bit for bit.
struct ByteProd : OpOn<uint8_t> {
  [[gnu::always_inline]] static V apply(V a, V b) {
    using W = Vec<uint16_t, kLanes / 2>;
    const W x = bit_as<W>(a);
    const W y = bit_as<W>(b);
    const W even = x * y;
    const W odd = (x >> 8) * (y & 0xff00);  // low byte zero
    return bit_as<V>((even & 0x00ff) | odd);
  }
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
/// AVX-512 picks the same input another way, in 7 operations per 64-byte
/// register for float32 and 9 for the 16-bit types: see apply().
template <class I, I kInf, bool kMax>
struct FloatMinMax : OpOn<I> {
  using typename OpOn<I>::V;
#if CHORUS_REDUCE_AVX512
  /// Without NaNs the masked merges of apply() change nothing, so a block of
  /// four registers with no NaN lane (one unordered compare per register, or
  /// for the 16-bit types an unsigned max of the magnitudes, and one test)
  /// takes only the integer max and the masked min: 3 operations per
  /// register instead of 7 or 9.
  static constexpr int kBlock = 4;
  [[gnu::always_inline]] static bool apply_block(const V (&a)[kBlock], const V (&b)[kBlock],
                                                 V (&r)[kBlock]) {
    if constexpr ((sizeof(I) == 4 || sizeof(I) == 8) && !kFiniteMathOnly) {
      unsigned nan = 0;
#pragma GCC unroll 4
      for (int k = 0; k < kBlock; ++k) {
        if constexpr (sizeof(I) == 4) {
          nan |= _mm512_cmp_ps_mask(bit_as<__m512>(a[k]), bit_as<__m512>(b[k]), _CMP_UNORD_Q);
        } else {
          nan |= _mm512_cmp_pd_mask(bit_as<__m512d>(a[k]), bit_as<__m512d>(b[k]), _CMP_UNORD_Q);
        }
      }
      if (nan != 0) return false;
    } else {
      using U = std::make_unsigned_t<I>;
      using VU = Vec<U, OpOn<I>::kLanes>;
      constexpr U kMagnitude = std::numeric_limits<I>::max();
      VU m = VU{};
#pragma GCC unroll 4
      for (int k = 0; k < kBlock; ++k) {
        const VU x = bit_as<VU>(a[k]) & kMagnitude;
        const VU y = bit_as<VU>(b[k]) & kMagnitude;
        m = m > x ? m : x;  // vpmaxu*
        m = m > y ? m : y;
      }
      if (lanes_greater(bit_as<V>(m), V{} + kInf) != 0) return false;  // m < 2^(bits-1)
    }
#pragma GCC unroll 4
    for (int k = 0; k < kBlock; ++k) r[k] = ordered(a[k], b[k]);
    return true;
  }

  /// apply() for lanes where neither operand is NaN.
  [[gnu::always_inline]] static V ordered(V a, V b) {
    const V r = lanes_max(a, b);
    if constexpr (kMax) {
      return lanes_min_where(lanes_negative(r), r, a, b);
    } else {
      return lanes_min_where(lanes_greater(r, V{} - 1), r, a, b);  // r >= 0: one compare
    }
  }
#endif

  [[gnu::always_inline]] static V apply(V a, V b) {
    constexpr I kMagnitude = std::numeric_limits<I>::max();
#if CHORUS_REDUCE_AVX512
    // By the order above, the float maximum of two numbers is their signed
    // integer maximum unless both are negative, where it is their integer
    // minimum (and the reverse for the float minimum); both are negative
    // exactly when the integer maximum is. One masked min turns the integer
    // maximum into the answer. Then src where src is NaN and, last, inout
    // where inout is NaN, so that inout's NaN wins. The NaN tests are the
    // ones below; no condition needs spreading over its lane.
    using M = LaneMask<V>;
    const V r = ordered(a, b);
    M a_nan;
    M b_nan;
    if constexpr (sizeof(I) == 4 && !kFiniteMathOnly) {
      // Quiet unordered compares, as x != x below.
      a_nan = _mm512_cmp_ps_mask(bit_as<__m512>(a), bit_as<__m512>(a), _CMP_UNORD_Q);
      b_nan = _mm512_cmp_ps_mask(bit_as<__m512>(b), bit_as<__m512>(b), _CMP_UNORD_Q);
    } else if constexpr (sizeof(I) == 8 && !kFiniteMathOnly) {
      a_nan = _mm512_cmp_pd_mask(bit_as<__m512d>(a), bit_as<__m512d>(a), _CMP_UNORD_Q);
      b_nan = _mm512_cmp_pd_mask(bit_as<__m512d>(b), bit_as<__m512d>(b), _CMP_UNORD_Q);
    } else {
      a_nan = lanes_greater(a & kMagnitude, V{} + kInf);
      b_nan = lanes_greater(b & kMagnitude, V{} + kInf);
    }
    return lanes_blend(a_nan, a, lanes_blend(b_nan, b, r));
#else
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
#endif
  }
};

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core

#include "core/reduce_half.h"  // float16 and bfloat16 sum and prod, for this pass

namespace chorus::core {
namespace {
namespace CHORUS_REDUCE_NS {

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
#if CHORUS_REDUCE_X86
  t[CHORUS_INT8][CHORUS_PROD] = kernel<ByteProd>;
  t[CHORUS_UINT8][CHORUS_PROD] = kernel<ByteProd>;
#endif
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

#if CHORUS_REDUCE_AVX512
/// The kAvx512Bf16 level: this pass with bfloat16 sum and prod rounded by
/// vcvtne2ps2bf16 (BFloat16Ne in reduce_half.h).
constexpr KernelTable make_bf16_table() {
  KernelTable t = make_table();
  t[CHORUS_BFLOAT16][CHORUS_SUM] = bf16_ne_kernel<Add>;
  t[CHORUS_BFLOAT16][CHORUS_PROD] = bf16_ne_kernel<Mul>;
  return t;
}

constexpr KernelTable kKernelsBf16 = make_bf16_table();
#endif

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core
