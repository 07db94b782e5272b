// Reduction kernels: inout[i] = op(inout[i], src[i]) for every supported
// (dtype, op) pair; semantics are documented in reduce.h. This file owns the
// dispatch: it compiles the kernels once per instruction set, picks one set
// per process, and answers reduce_kernel() and the other lookups of reduce.h.
//
// The kernels (reduce_kernels.h, float16 and bfloat16 in reduce_half.h) are
// written once with GCC/Clang vector extensions, so every operation is
// explicitly SIMD whatever the -O level, and compiled once per instruction
// set by including them here twice (Highway's foreach_target scheme): for
// the baseline with 16-byte vectors (SSE2 on x86-64, NEON on aarch64) and,
// on x86, again under target("avx2,f16c") with 32-byte vectors. Every
// function of the second pass carries the target, so F16C intrinsics and
// 32-byte vectors never meet a function compiled without AVX.
// reduce_kernel() picks a pass once per process. The invariants that keep
// the passes bitwise identical are listed in reduce_kernels.h.

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

#define CHORUS_REDUCE_NS baseline
#define CHORUS_REDUCE_VECTOR_BYTES 16
#define CHORUS_REDUCE_F16C 0
#include "core/reduce_kernels.h"  // the baseline pass
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
#include "core/reduce_kernels.h"  // the AVX2 pass
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
