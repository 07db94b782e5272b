// Reduction kernels: inout[i] = op(inout[i], src[i]) for every supported
// (dtype, op) pair; semantics are documented in reduce.h. This file owns the
// dispatch: it compiles the kernels once per instruction set, picks one set
// per process, and answers reduce_kernel() and the other lookups of reduce.h.
//
// The kernels (reduce_kernels.h, their loop in reduce_loop.h, float16 and
// bfloat16 in reduce_half.h) are
// written once with GCC/Clang vector extensions, so every operation is
// explicitly SIMD whatever the -O level, and compiled once per instruction
// set by including them here once per pass (Highway's foreach_target
// scheme): for the baseline with 16-byte vectors (SSE2 on x86-64, NEON on
// aarch64) and, on x86, again under target("avx2,f16c") with 32-byte vectors
// and under target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c") with
// 64-byte vectors. Every function of a pass carries its target, so its
// intrinsics and wide vectors never meet a function compiled without them,
// and the library still runs on a CPU that has neither. The AVX-512 pass
// has a second table, the avx512bf16 level, whose bfloat16 sum and prod use
// an AVX512_BF16 instruction through inline assembly (no target attribute
// needed). reduce_kernel() picks a level once per process, from CPUID and
// the register state the OS saves. The invariants that keep the passes
// bitwise identical are listed in reduce_kernels.h.

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

// CHORUS_REDUCE_F16C: the pass may use AVX2 and F16C intrinsics (both x86
// passes); CHORUS_REDUCE_AVX512: it uses 64-byte vectors, AVX-512 intrinsics
// and mask registers instead.
#define CHORUS_REDUCE_NS baseline
#define CHORUS_REDUCE_VECTOR_BYTES 16
#define CHORUS_REDUCE_F16C 0
#define CHORUS_REDUCE_AVX512 0
#include "core/reduce_kernels.h"  // the baseline pass
#undef CHORUS_REDUCE_NS
#undef CHORUS_REDUCE_VECTOR_BYTES
#undef CHORUS_REDUCE_F16C
#undef CHORUS_REDUCE_AVX512

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
#define CHORUS_REDUCE_AVX512 0
#include "core/reduce_kernels.h"  // the AVX2 pass
#undef CHORUS_REDUCE_NS
#undef CHORUS_REDUCE_VECTOR_BYTES
#undef CHORUS_REDUCE_F16C
#undef CHORUS_REDUCE_AVX512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// AVX512F brings FMA instructions, so GCC could contract a multiply-add here;
// complex prod, the only one, is compiled with fp-contract off, and the FMA
// of the float16/bfloat16 sum is exact on purpose (reduce_kernels.h).
#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge
// operand, which -Wmaybe-uninitialized reports (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define CHORUS_REDUCE_NS avx512
#define CHORUS_REDUCE_VECTOR_BYTES 64
#define CHORUS_REDUCE_F16C 1
#define CHORUS_REDUCE_AVX512 1
#include "core/reduce_kernels.h"  // the AVX-512 pass
#undef CHORUS_REDUCE_NS
#undef CHORUS_REDUCE_VECTOR_BYTES
#undef CHORUS_REDUCE_F16C
#undef CHORUS_REDUCE_AVX512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
#endif  // CHORUS_REDUCE_X86

namespace chorus::core {
namespace {

bool valid_pair(int dtype, int op) {
  return dtype >= 0 && dtype < CHORUS_DTYPE_COUNT && op >= 0 && op < CHORUS_OP_COUNT;
}

#if CHORUS_REDUCE_X86
/// Why this CPU cannot run the AVX2 pass, or "".
const char* avx2_missing() {
  // __builtin_cpu_supports("avx2") also checks that the OS saves YMM state.
  // F16C is read from CPUID directly: Clang's builtin does not know it.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return "the CPU or OS lacks AVX2";
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_F16C) == 0) {
    return "the CPU lacks F16C";
  }
  return "";
}

/// Why this CPU or OS cannot run the AVX-512 pass, or "". The CPU must have
/// every extension the pass is compiled for, and the OS must save the opmask
/// and the 512-bit register state on context switches (XCR0 bits 5 to 7, as
/// well as 1 and 2 for XMM and YMM); without that the instructions fault even
/// on a CPU that has them.
const char* avx512_missing() {
  if (const char* why = avx2_missing(); *why != '\0') return why;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) {
    return "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE)";
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return "the CPU has no CPUID leaf 7";
  if ((ebx & bit_AVX512F) == 0) return "the CPU lacks AVX512F";
  if ((ebx & bit_AVX512BW) == 0) return "the CPU lacks AVX512BW";
  if ((ebx & bit_AVX512DQ) == 0) return "the CPU lacks AVX512DQ";
  if ((ebx & bit_AVX512VL) == 0) return "the CPU lacks AVX512VL";
  unsigned xcr0 = 0;
  unsigned xcr0_high = 0;
  // Inline asm: the _xgetbv() intrinsic would need target("xsave").
  __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kZmmState = 0xe6;  // XMM, YMM, opmask, ZMM0-15 upper, ZMM16-31
  if ((xcr0 & kZmmState) != kZmmState) {
    return "the OS does not save the AVX-512 registers (XCR0 bits 5-7)";
  }
  return "";
}

/// Why this CPU or OS cannot run the kAvx512Bf16 level, or "".
const char* avx512_bf16_missing() {
  if (const char* why = avx512_missing(); *why != '\0') return why;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  constexpr unsigned kAvx512Bf16Bit = 1u << 5;  // CPUID.(EAX=7,ECX=1):EAX
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0 || (eax & kAvx512Bf16Bit) == 0) {
    return "the CPU lacks AVX512_BF16";
  }
  return "";
}
#endif

/// Why `isa` cannot run here, or "" (see reduce_isa_unavailable_reason()).
const char* unavailable_reason(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline:
      return "";
#if CHORUS_REDUCE_X86
    case ReduceIsa::kAvx2: {
      static const char* const why = avx2_missing();
      return why;
    }
    case ReduceIsa::kAvx512: {
      static const char* const why = avx512_missing();
      return why;
    }
    case ReduceIsa::kAvx512Bf16: {
      static const char* const why = avx512_bf16_missing();
      return why;
    }
#else
    case ReduceIsa::kAvx2:
    case ReduceIsa::kAvx512:
    case ReduceIsa::kAvx512Bf16:
      return "not an x86 build";
#endif
  }
  return "not a ReduceIsa value";
}

/// The table for `isa`, or nullptr when this build or CPU cannot run it.
/// Never hands out a table whose code the CPU cannot execute.
const KernelTable* table_for(ReduceIsa isa) {
  if (*unavailable_reason(isa) != '\0') return nullptr;
  switch (isa) {
    case ReduceIsa::kBaseline:
      return &baseline::kKernels;
#if CHORUS_REDUCE_X86
    case ReduceIsa::kAvx2:
      return &avx2::kKernels;
    case ReduceIsa::kAvx512:
      return &avx512::kKernels;
    case ReduceIsa::kAvx512Bf16:
      return &avx512::kKernelsBf16;
#else
    case ReduceIsa::kAvx2:
    case ReduceIsa::kAvx512:
    case ReduceIsa::kAvx512Bf16:
      return nullptr;
#endif
  }
  return nullptr;
}

}  // namespace

ReduceIsa reduce_best_isa() {
  static const ReduceIsa best = [] {
    for (const ReduceIsa isa : {ReduceIsa::kAvx512Bf16, ReduceIsa::kAvx512, ReduceIsa::kAvx2}) {
      if (table_for(isa) != nullptr) return isa;
    }
    return ReduceIsa::kBaseline;
  }();
  return best;
}

const char* reduce_isa_name(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline:
      return "baseline";
    case ReduceIsa::kAvx2:
      return "avx2";
    case ReduceIsa::kAvx512:
      return "avx512";
    case ReduceIsa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

const char* reduce_isa_unavailable_reason(ReduceIsa isa) { return unavailable_reason(isa); }

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
