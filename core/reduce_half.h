// float16 and bfloat16 in the reduction kernels of one instruction-set pass:
// IEEE binary16 <-> float conversions (F16C on the AVX2 pass, its 512-bit
// form on the AVX-512 pass, elsewhere integer bit manipulation written to
// match F16C bit for bit), bfloat16
// widening and rounding, and sum and prod (HalfArith): widen to float,
// combine, round once. Their max and min are FloatMinMax in
// reduce_kernels.h.
//
// Not a header of its own, hence no include guard: core/reduce_kernels.h
// includes it once per pass, after the vector machinery it builds on.

#ifndef CHORUS_REDUCE_NS
#error "core/reduce_half.h is included by core/reduce_kernels.h only, once per pass"
#endif

namespace chorus::core {
namespace {
namespace CHORUS_REDUCE_NS {

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
  static constexpr bool kHoldInputs = false;
#if CHORUS_REDUCE_AVX512
  // vcvtph2ps/vcvtps2ph on 16 halves: the same instructions as F16C's, with
  // the same rounding (from the immediate, not MXCSR) and NaN quieting. lo is
  // the first 256 bits, hi the rest, converted in memory as on AVX2.
  static_assert(kVectorBytes == 64);
  static constexpr bool kConvertsInMemory = true;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  [[gnu::always_inline]] static void load_widen(const std::byte* p, VF& lo, VF& hi) {
    lo = bit_as<VF>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
    hi = bit_as<VF>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))));
  }
  [[gnu::always_inline]] static void narrow_store(std::byte* p, VF lo, VF hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(bit_as<__m512>(lo), kRound));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32),
                        _mm512_cvtps_ph(bit_as<__m512>(hi), kRound));
  }
  [[gnu::always_inline]] static void widen(VH h, VF& lo, VF& hi) {
    const __m512i v = bit_as<__m512i>(h);
    lo = bit_as<VF>(_mm512_cvtph_ps(_mm512_castsi512_si256(v)));
    hi = bit_as<VF>(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)));
  }
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
    return bit_as<VH>(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(bit_as<__m512>(lo), kRound)),
                           _mm512_cvtps_ph(bit_as<__m512>(hi), kRound), 1));
  }
#elif CHORUS_REDUCE_F16C
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
  static constexpr bool kHoldInputs = CHORUS_REDUCE_AVX512;  // see HalfArith::apply()
  /// The rounded bfloat16 in the top 16 bits of each lane; low bits garbage.
  [[gnu::always_inline]] static VU round_top(VF f) {
    const VU u = bit_as<VU>(f);
#if CHORUS_REDUCE_AVX512
    // The same sum in three operations: test the kept part's lowest bit into
    // a mask, add 0x7fff, and 0x8000 instead where the bit is set.
    const __m512i x = bit_as<__m512i>(u);
    const __mmask16 odd = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x10000));
    return bit_as<VU>(_mm512_mask_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd, x,
                                            _mm512_set1_epi32(0x8000)));
#else
    return u + (((u >> 16) & 1) + 0x7fff);
#endif
  }
  // Even elements in lo, odd ones in hi, as for the software float16 path.
  [[gnu::always_inline]] static void widen(VH h, VF& lo, VF& hi) {
    const VU w = bit_as<VU>(h);
    lo = bit_as<VF>(w << 16);
    hi = bit_as<VF>(w & 0xffff0000);
  }
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
#if CHORUS_REDUCE_AVX512
    // One two-source word permute takes the top word of every lane of both:
    // word 2i from lo's lane i, word 2i+1 from hi's (indices 32 to 63).
    const VH top_words = {1,  33, 3,  35, 5,  37, 7,  39, 9,  41, 11, 43, 13, 45, 15, 47,
                          17, 49, 19, 51, 21, 53, 23, 55, 25, 57, 27, 59, 29, 61, 31, 63};
    return bit_as<VH>(_mm512_permutex2var_epi16(bit_as<__m512i>(round_top(lo)),
                                                bit_as<__m512i>(top_words),
                                                bit_as<__m512i>(round_top(hi))));
#else
    const VU even = round_top(lo) >> 16;
    const VU odd = round_top(hi);
#if CHORUS_REDUCE_F16C
    // One word blend instead of masking and or-ing: odd words from `odd`.
    return bit_as<VH>(_mm256_blend_epi16(bit_as<__m256i>(even), bit_as<__m256i>(odd), 0xaa));
#else
    return bit_as<VH>(even | (odd & 0xffff0000));
#endif
#endif
  }
};

#if CHORUS_REDUCE_AVX512
/// bfloat16 for CPUs with AVX512_BF16 (the kAvx512Bf16 level): rounding and
/// merging in one vcvtne2ps2bf16, which rounds to nearest even whatever
/// MXCSR says, quiets NaNs by setting the bit that the float operations
/// already set (so a NaN is truncated, as above) and raises no flags. It
/// also flushes subnormal inputs and outputs to zero, which the baseline
/// does not. A float rounds to a bfloat16 subnormal only if it is subnormal
/// itself (both have float's exponent range), so a register holding a
/// subnormal float takes BFloat16::narrow() instead; vfpclassps finds them
/// in one operation per register. vfpclassps reads subnormals as zero under
/// MXCSR.DAZ, so a call made with DAZ set uses BFloat16 throughout
/// (half_kernel()). The instruction is inline assembly: it needs no target
/// attribute, so the rest of the pass keeps running on CPUs without it.
struct BFloat16Ne : BFloat16 {
  [[gnu::always_inline]] static VH narrow(VF lo, VF hi) {
    constexpr int kSubnormal = 0x20;
    const __mmask16 subnormal = _mm512_fpclass_ps_mask(bit_as<__m512>(lo), kSubnormal) |
                                _mm512_fpclass_ps_mask(bit_as<__m512>(hi), kSubnormal);
    if (__builtin_expect(subnormal != 0, 0)) return BFloat16::narrow(lo, hi);
    // Words 0-15: lo's lanes (even elements), words 16-31: hi's (odd ones).
    __m512i halves;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(halves) : "v"(hi), "v"(lo));
    const VH interleave = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return bit_as<VH>(_mm512_permutexvar_epi16(bit_as<__m512i>(interleave), halves));
  }
};
#endif

struct Add {
#if CHORUS_REDUCE_AVX512
  // a * 1 + b in one FMA: a * 1 is exact, so this is a + b rounded once, with
  // the same result and flags under any MXCSR (which NaN wins when both are
  // NaN may differ, as reduce.h allows). On the AMD EPYC of
  // docs/benchmarks.md the float16 conversions seem to compete with adds for
  // execution pipes but not with FMAs: float16 sum went from 55 to 65 GB/s
  // at 4 KiB. (Clang folds it back into an add; the result is the same.)
  [[gnu::always_inline]] static VF apply(VF a, VF b) {
    return bit_as<VF>(_mm512_fmadd_ps(bit_as<__m512>(a), _mm512_set1_ps(1.0f), bit_as<__m512>(b)));
  }
#else
  [[gnu::always_inline]] static VF apply(VF a, VF b) { return a + b; }
#endif
};

struct Mul {
  [[gnu::always_inline]] static VF apply(VF a, VF b) { return a * b; }
};

/// float16/bfloat16 sum or prod: widen to float, combine, round once.
template <class Format, class Arith>
struct HalfArith : OpOn<uint16_t> {
  [[gnu::always_inline]] static V apply(V a, V b) {
    if constexpr (Format::kHoldInputs) {
      // Held in registers: otherwise GCC folds the loads into both widening
      // operations and reads every input register twice.
      __asm__("" : "+v"(a), "+v"(b));
    }
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

#if CHORUS_REDUCE_AVX512
/// bfloat16 sum or prod at the kAvx512Bf16 level: BFloat16Ne, or BFloat16
/// when the caller runs with MXCSR.DAZ set (read once per call).
template <class Arith>
void bf16_ne_kernel(const void* src, void* inout, size_t count) {
  constexpr unsigned kDenormalsAreZero = 0x40;
  if ((_mm_getcsr() & kDenormalsAreZero) != 0) {
    run<HalfArith<BFloat16, Arith>>(src, inout, count);
  } else {
    run<HalfArith<BFloat16Ne, Arith>>(src, inout, count);
  }
}
#endif

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core
