// Element-wise reduction kernels, one per (dtype, op), looked up once per
// collective and handed to algorithms as a plain chorus_reduce_fn_t.
#pragma once

#include <chorus/types.h>

namespace chorus::core {

/// Kernel for (`dtype`, `op`), or nullptr when the pair is not supported
/// (unknown dtype or op, or max/min on complex64).
///
/// The kernel computes inout[i] = op(inout[i], src[i]) for i < count. It never
/// blocks, allocates or fails, may be called from any thread, accepts any
/// alignment, and allows src == inout (x op x); partial overlap is not allowed.
/// The choice of instruction set is made once per process (see
/// reduce_best_isa()); every instruction set gives bitwise identical results,
/// with one exception noted below.
///
/// Semantics, per dtype:
/// - bool (one byte): sum and max are logical or, prod and min logical and.
///   Any nonzero input byte counts as true; outputs are always 0 or 1.
/// - integers: sum and prod wrap modulo 2^bits, signed types included.
/// - float16, bfloat16: each element is widened to float, combined, and
///   rounded once back to nearest-even. float has more than twice their
///   precision, so the result equals the correctly rounded sum or product.
/// - float32, float64: IEEE arithmetic, never contracted into FMA.
/// - complex64 (float32 re, im pairs): sum, and prod by the textbook formula
///   (ar*br - ai*bi) + (ar*bi + ai*br)i with each product rounded to float,
///   without C99 Annex G infinity recovery. max and min are unsupported.
/// - max/min on floating types follow IEEE 754-2019 maximum/minimum: NaN
///   propagates (MPI and NCCL users expect it) and -0 < +0, so the result
///   does not depend on operand order unless both are NaN. A NaN result is
///   bitwise inout's NaN when inout is NaN, else src's NaN (payload kept,
///   not quieted). The order comes from integer comparisons of the bit
///   patterns, and the NaN tests are integer or quiet unordered compares, so
///   MXCSR (DAZ, FTZ) and the rounding mode do not affect the result. As
///   with sum and prod, a float32/float64 signalling NaN raises the invalid
///   flag (FE_INVALID), which traps only if the caller unmasked it.
/// - sum/prod with a NaN operand give a quiet NaN carrying that operand's
///   sign and payload. When *both* operands are NaN, which payload wins is up
///   to the hardware and may differ between instruction sets: the one
///   exception to bitwise identical results.
/// Floating-point sum/prod assume the default round-to-nearest mode.
chorus_reduce_fn_t reduce_kernel(int dtype, int op);

/// Why (`dtype`, `op`) has no kernel, e.g. "max is not defined for complex64;
/// use sum or prod", or "" when the pair is supported. The text is static.
const char* reduce_unsupported_reason(int dtype, int op);

/// Instruction-set levels the kernels are compiled for.
enum class ReduceIsa {
  /// x86-64 baseline (SSE2) or the target's baseline elsewhere (NEON on aarch64).
  kBaseline = 0,
  /// x86-64 AVX2 with F16C conversions.
  kAvx2 = 1,
  /// x86-64 AVX-512 (F, BW, DQ, VL) with 64-byte vectors and mask registers;
  /// float16 through the 512-bit forms of the F16C conversions.
  kAvx512 = 2,
  /// kAvx512 on a CPU that also has AVX512_BF16: bfloat16 sum and prod round
  /// through vcvtne2ps2bf16, every other kernel is kAvx512's.
  kAvx512Bf16 = 3,
};

/// The level reduce_kernel() uses: the best this CPU and build support.
/// Decided on first use; thread-safe.
ReduceIsa reduce_best_isa();

/// Lower-case name of `isa` ("baseline", "avx2", "avx512", "avx512bf16"), for
/// logs.
const char* reduce_isa_name(ReduceIsa isa);

/// Why this CPU or build cannot run `isa`, e.g. "the CPU lacks AVX512BW" or
/// "the OS does not save the AVX-512 registers (XCR0 bits 5-7)", or "" when it
/// can. The text is static. Thread-safe.
const char* reduce_isa_unavailable_reason(ReduceIsa isa);

/// Kernel for (`dtype`, `op`) at a given instruction-set level, or nullptr when
/// the pair is unsupported or this CPU or build cannot run `isa`. For tests and
/// benchmarks that compare levels; everything else calls reduce_kernel().
chorus_reduce_fn_t reduce_kernel_for_isa(int dtype, int op, ReduceIsa isa);

}  // namespace chorus::core
