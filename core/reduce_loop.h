// How the reduction kernels of one instruction-set pass walk their buffers:
// OpOn (what every op provides), step() and block_step() over whole
// registers, step_partial() for buffers shorter than one register, and
// run(), which aligns the loop on inout and covers both ends, and kernel(),
// the function the table hands out.
//
// Not a header of its own, hence no include guard: core/reduce_kernels.h
// includes it once per pass, after Vec, bit_as and the mask helpers.

#ifndef CHORUS_REDUCE_NS
#error "core/reduce_loop.h is included by core/reduce_kernels.h only, once per pass"
#endif

namespace chorus::core {
namespace {
namespace CHORUS_REDUCE_NS {

/// An op on vectors of `kLanes` lanes of type `T`. Each op derived from it
/// provides `static V apply(V inout, V src)`; kElemSize is the size of one
/// dtype element (two lanes for complex64).
template <class T, int kLanesArg = kVectorBytes / int{sizeof(T)}>
struct OpOn {
  static constexpr int kLanes = kLanesArg;
  static constexpr size_t kElemSize = sizeof(T);
  static constexpr bool kAppliesAt = false;
  /// Registers per block_step(); 1: the op has no apply_block().
  static constexpr int kBlock = 1;
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

/// inout = Op(inout, src) on Op::kBlock registers at `d` and `s`. An op with
/// a cheaper path for ordinary data (no NaN for max/min, no subnormal result
/// for bfloat16 rounding) provides apply_block(), which checks the whole
/// block once and returns false, leaving `r` unspecified, when some lane
/// needs the general apply(); one test and branch per block instead of
/// selects in every register.
template <class Op>
[[gnu::always_inline]] inline void block_step(const std::byte* s, std::byte* d) {
  using V = typename Op::V;
  constexpr int kN = Op::kBlock;
  V a[kN];
  V b[kN];
  V r[kN];
#pragma GCC unroll 8
  for (int k = 0; k < kN; ++k) {
    std::memcpy(&a[k], d + k * sizeof(V), sizeof(V));
    std::memcpy(&b[k], s + k * sizeof(V), sizeof(V));
  }
  if (__builtin_expect(!Op::apply_block(a, b, r), 0)) {
#pragma GCC unroll 8
    for (int k = 0; k < kN; ++k) r[k] = Op::apply(a[k], b[k]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < kN; ++k) std::memcpy(d + k * sizeof(V), &r[k], sizeof(V));
}

/// One register's worth of bytes at `p`, any alignment.
template <class V>
[[gnu::always_inline]] inline V load(const std::byte* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

/// inout = Op(inout, src) on the first `n` bytes at `d` and `s`, n less than
/// one register and a whole number of elements (buffers shorter than one
/// register). The lanes past n compute on
/// zeros and are never stored, so the results are those of step(). AVX-512
/// uses masked loads and stores (masked-off bytes are neither read nor
/// written, so this never touches memory past n, even across a page); the
/// other passes go through a zero-padded copy on the stack.
template <class Op>
[[gnu::always_inline]] inline void step_partial(const std::byte* s, std::byte* d, size_t n) {
  using V = typename Op::V;
#if CHORUS_REDUCE_AVX512
  static_assert(sizeof(V) == 64);
  const __mmask64 m = (__mmask64{1} << n) - 1;  // n < 64
  const V a = bit_as<V>(_mm512_maskz_loadu_epi8(m, d));
  const V b = bit_as<V>(_mm512_maskz_loadu_epi8(m, s));
  _mm512_mask_storeu_epi8(d, m, bit_as<__m512i>(Op::apply(a, b)));
#else
  std::byte a[sizeof(V)] = {};
  std::byte b[sizeof(V)] = {};
  std::memcpy(a, d, n);
  std::memcpy(b, s, n);
  step<Op>(b, a);
  std::memcpy(d, a, n);
#endif
}

/// The kernel body. Buffers of less than one register take step_partial().
/// Otherwise the loop runs over whole registers from inout's first
/// register-size boundary, and the bytes before it and after its last whole
/// register are covered by one unaligned register at each end, [0, kStep)
/// and [bytes - kStep, bytes). Those two are computed from the original
/// data before the loop and stored after it: where they overlap the loop's
/// registers they write again the very values the loop wrote (the same
/// lane-wise operation on the same inputs), and src == inout still works as
/// every input is read before anything is stored over it. Two full loads
/// and stores cost less than masked or copied partial registers, and the
/// loop's stores and inout loads (and src's too when src sits at the same
/// offset, as two malloc'd blocks usually do) never split a cache line,
/// which costs up to a third of the rate. Elements see the same lane-wise
/// operations wherever the boundaries fall, so results do not depend on
/// alignment.
template <class Op>
[[gnu::always_inline]] inline void run(const void* src, void* inout, size_t count) {
  using V = typename Op::V;
  constexpr size_t kStep = sizeof(V);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(inout);
  const size_t bytes = count * Op::kElemSize;
  if (bytes < kStep) {
    if (bytes != 0) step_partial<Op>(s, d, bytes);
    return;
  }
  // Bytes to the boundary; none when that is not a whole number of elements
  // (inout not aligned to its element size: the loop runs unaligned).
  size_t i = (kStep - reinterpret_cast<uintptr_t>(d) % kStep) % kStep;
  if (i % Op::kElemSize != 0) i = 0;
  const bool head = i != 0;
  const bool tail = (bytes - i) % kStep != 0;
  V first{};
  V last{};
  if (head) first = Op::apply(load<V>(d), load<V>(s));
  if (tail) last = Op::apply(load<V>(d + bytes - kStep), load<V>(s + bytes - kStep));
  if constexpr (Op::kBlock > 1) {
    constexpr size_t kBlockBytes = Op::kBlock * kStep;
    for (; i + kBlockBytes <= bytes; i += kBlockBytes) block_step<Op>(s + i, d + i);
  }
#pragma GCC unroll 4
  for (; i + kStep <= bytes; i += kStep) step<Op>(s + i, d + i);
  if (head) std::memcpy(d, &first, kStep);
  if (tail) std::memcpy(d + bytes - kStep, &last, kStep);
}

template <class Op>
void kernel(const void* src, void* inout, size_t count) {
  run<Op>(src, inout, count);
}

}  // namespace CHORUS_REDUCE_NS
}  // namespace
}  // namespace chorus::core
