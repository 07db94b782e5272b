// Shared by the reduction-kernel tests (reduce_test.cc, reduce_float_test.cc,
// reduce_isa_test.cc): the dtypes, ops and instruction sets under test, a
// scalar reference for op(a, b) written from the definitions, random test
// data, guarded buffers, and the helpers that run a kernel and check every
// element. Definitions in reduce_reference.cc.
#pragma once

#include "core/reduce.h"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace chorus::reduce_test {

using chorus::core::reduce_best_isa;
using chorus::core::reduce_isa_name;
using chorus::core::reduce_isa_unavailable_reason;
using chorus::core::reduce_kernel;
using chorus::core::reduce_kernel_for_isa;
using chorus::core::reduce_unsupported_reason;
using chorus::core::ReduceIsa;

inline constexpr size_t kCounts[] = {0, 1, 7, 31, 33, 1000, 4099};
inline constexpr const char* kDtypeNames[] = {
    "bool",   "int8",   "int16",   "int32",    "int64",   "uint8",   "uint16",
    "uint32", "uint64", "float16", "bfloat16", "float32", "float64", "complex64"};
inline constexpr const char* kOpNames[] = {"sum", "prod", "max", "min"};

inline constexpr ReduceIsa kAllIsas[] = {ReduceIsa::kBaseline, ReduceIsa::kAvx2, ReduceIsa::kAvx512,
                                         ReduceIsa::kAvx512Bf16};

bool supported(int dtype, int op);

/// Instruction sets this machine runs (always the baseline), lowest first.
/// The levels it cannot run are reported by the "every instruction set level
/// is tested" case.
std::vector<ReduceIsa> runnable_isas();

/// The `n` bytes at `p` as hex, most significant first (little-endian).
std::string hex(const void* p, size_t n);

// ---- reference arithmetic ----

double f16_value(uint16_t h);
/// `x` rounded once to float16 (ties to even), as bits.
uint16_t f16_round(double x);
double bf16_value(uint16_t b);
/// `x` rounded once to bfloat16 (ties to even), as bits.
uint16_t bf16_round(double x);

/// What one element should be: exact bytes, or "any NaN" (per float lane).
struct Expected {
  uint64_t bits = 0;     // for complex64: re in the low half, im in the high half
  bool any_nan = false;  // float sum/prod with a NaN result: payload is the hardware's
  bool any_nan_im = false;
};

Expected f16_expect(int op, uint16_t a, uint16_t b);
Expected bf16_expect(int op, uint16_t a, uint16_t b);

/// Whether `bits` is a NaN of a floating dtype (complex64: of one component).
bool is_nan(int dtype, uint64_t bits);

/// "" when `got` is right for op(a, b), else a description.
std::string check_element(int dtype, int op, const void* a, const void* b, const void* got);

/// Whether one level's result `y` for op(a, b) may differ from the baseline's
/// `x`: never, except for sum/prod of two NaNs (which payload wins is up to
/// the hardware, see reduce.h), and complex64 with a NaN component (its
/// products mix components).
bool baseline_difference_allowed(int dtype, int op, const std::byte* a, const std::byte* b,
                                 const std::byte* x, const std::byte* y);

// ---- test data ----

/// Random elements of `dtype`, rich in the values that go wrong: extremes,
/// signed zeros, infinities, NaNs, subnormals, and neighbours that round.
void fill(std::mt19937_64& rng, int dtype, std::byte* p, size_t count);

/// A buffer whose payload starts `offset_elems` elements past a 64-byte
/// boundary, with guard bytes on both sides to catch stray writes.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr std::byte kPattern{0xa5};

  GuardedBuffer(size_t bytes, size_t offset_bytes)
      : storage_(bytes + offset_bytes + 3 * kGuard, kPattern), bytes_(bytes) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    const size_t align_pad = (64 - base % 64) % 64;
    data_ = storage_.data() + align_pad + kGuard + offset_bytes;
  }

  std::byte* data() { return data_; }

  bool guards_intact() const {
    for (const std::byte* p = storage_.data(); p < data_; ++p) {
      if (*p != kPattern) return false;
    }
    for (const std::byte* p = data_ + bytes_; p < storage_.data() + storage_.size(); ++p) {
      if (*p != kPattern) return false;
    }
    return true;
  }

 private:
  std::vector<std::byte> storage_;
  size_t bytes_;
  std::byte* data_;
};

/// Runs `fn` over fresh random data and checks every element, the guards and
/// that src is untouched. Returns "" or the first problems found.
std::string run_and_check(chorus_reduce_fn_t fn, int dtype, int op, size_t count, size_t src_off,
                          size_t inout_off, std::mt19937_64& rng);

/// fn(x, x, count): every element must be op(x[i], x[i]).
std::string run_aliased(chorus_reduce_fn_t fn, int dtype, int op, size_t count,
                        std::mt19937_64& rng);

/// Applies (dtype, op) on `isa` to n copies of each (inout, src) pair, n long
/// enough to cover whole vectors and the tail, and returns the first copy's
/// results after checking all copies agree.
template <class T>
std::vector<T> apply_each(ReduceIsa isa, int dtype, int op, const std::vector<T>& inout,
                          const std::vector<T>& src) {
  constexpr size_t kCopies = 37;
  std::vector<T> a;
  std::vector<T> b;
  for (size_t i = 0; i < inout.size(); ++i) {
    a.insert(a.end(), kCopies, inout[i]);
    b.insert(b.end(), kCopies, src[i]);
  }
  chorus_reduce_fn_t fn = reduce_kernel_for_isa(dtype, op, isa);
  REQUIRE(fn != nullptr);
  fn(b.data(), a.data(), a.size());
  std::vector<T> out;
  for (size_t i = 0; i < inout.size(); ++i) {
    for (size_t k = 1; k < kCopies; ++k) {
      REQUIRE(std::memcmp(&a[i * kCopies], &a[i * kCopies + k], sizeof(T)) == 0);
    }
    out.push_back(a[i * kCopies]);
  }
  return out;
}

}  // namespace chorus::reduce_test
