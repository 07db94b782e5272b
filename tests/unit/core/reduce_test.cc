// Reduction kernels: every dtype x op x instruction set against a scalar
// reference written here from the definitions (never by calling a kernel).
// float16/bfloat16 references compute exactly in double and round once with
// their own rounding code, independent of the kernels' float path.
#include "core/reduce.h"
#include "core/half.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace {

using chorus::core::reduce_best_isa;
using chorus::core::reduce_isa_name;
using chorus::core::reduce_isa_unavailable_reason;
using chorus::core::reduce_kernel;
using chorus::core::reduce_kernel_for_isa;
using chorus::core::reduce_unsupported_reason;
using chorus::core::ReduceIsa;

constexpr size_t kCounts[] = {0, 1, 7, 31, 33, 1000, 4099};
constexpr const char* kDtypeNames[] = {"bool",     "int8",    "int16",   "int32",    "int64",
                                       "uint8",    "uint16",  "uint32",  "uint64",   "float16",
                                       "bfloat16", "float32", "float64", "complex64"};
constexpr const char* kOpNames[] = {"sum", "prod", "max", "min"};

bool supported(int dtype, int op) {
  return !(dtype == CHORUS_COMPLEX64 && (op == CHORUS_MAX || op == CHORUS_MIN));
}

constexpr ReduceIsa kAllIsas[] = {ReduceIsa::kBaseline, ReduceIsa::kAvx2, ReduceIsa::kAvx512,
                                  ReduceIsa::kAvx512Bf16};

/// Instruction sets this machine runs (always the baseline), lowest first.
/// The levels it cannot run are reported by the "every instruction set level
/// is tested" case.
std::vector<ReduceIsa> runnable_isas() {
  std::vector<ReduceIsa> isas;
  for (const ReduceIsa isa : kAllIsas) {
    if (reduce_kernel_for_isa(CHORUS_FLOAT32, CHORUS_SUM, isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

template <class T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::string hex(const void* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = n; i-- > 0;) {  // little-endian: most significant byte first
    std::snprintf(buf, sizeof buf, "%02x",
                  static_cast<unsigned>(static_cast<const uint8_t*>(p)[i]));
    s += buf;
  }
  return s;
}

// ---- reference arithmetic ----

/// Rounds x to the nearest value with `precision` significand bits, smallest
/// normal exponent `min_exp` (gradual underflow below) and largest finite
/// value `max_finite`; ties to even, overflow to infinity.
double round_to(double x, int precision, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const int quantum_exp = std::max(e - 1, min_exp) - (precision - 1);
  double r = std::ldexp(std::nearbyint(std::ldexp(std::fabs(x), -quantum_exp)), quantum_exp);
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  if (e == 0x1f) {
    return m != 0 ? std::numeric_limits<double>::quiet_NaN()
                  : sign * std::numeric_limits<double>::infinity();
  }
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

/// Bits of a double that is already a float16 value (or infinity).
uint16_t f16_bits(double r) {
  const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  const double a = std::fabs(r);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a < 0x1p-14) return sign | static_cast<uint16_t>(a * 0x1p24);
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) |
         static_cast<uint16_t>((m * 2 - 1) * 1024);
}

uint16_t f16_round(double x) { return f16_bits(round_to(x, 11, -14, 65504.0)); }

double bf16_value(uint16_t b) {
  uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t bf16_round(double x) {
  const float f = static_cast<float>(round_to(x, 8, -126, 0x1.fep127));  // exact
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

/// IEEE 754-2019 maximum/minimum on decoded values: true when src (b) wins.
/// inout wins every tie that is not -0 vs +0, and always when it is NaN.
bool src_wins(double a, double b, int op) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  if (a == 0 && b == 0 && std::signbit(a) != std::signbit(b)) {
    return op == CHORUS_MAX ? std::signbit(a) : std::signbit(b);
  }
  return op == CHORUS_MAX ? b > a : b < a;
}

template <class T>
T int_ref(int op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  using Wide = std::conditional_t<(sizeof(T) < 8), uint32_t, uint64_t>;
  switch (op) {
    case CHORUS_SUM:
      return static_cast<T>(static_cast<U>(Wide{static_cast<U>(a)} + Wide{static_cast<U>(b)}));
    case CHORUS_PROD:  // 16-bit operands would overflow int when promoted: multiply in Wide
      return static_cast<T>(static_cast<U>(Wide{static_cast<U>(a)} * Wide{static_cast<U>(b)}));
    case CHORUS_MAX:
      return std::max(a, b);
    default:
      return std::min(a, b);
  }
}

/// What one element should be: exact bytes, or "any NaN" (per float lane).
struct Expected {
  uint64_t bits = 0;     // for complex64: re in the low half, im in the high half
  bool any_nan = false;  // float sum/prod with a NaN result: payload is the hardware's
  bool any_nan_im = false;
};

Expected f16_expect(int op, uint16_t a, uint16_t b) {
  const double x = f16_value(a);
  const double y = f16_value(b);
  if (op == CHORUS_MAX || op == CHORUS_MIN) return {src_wins(x, y, op) ? b : a};
  const double r = op == CHORUS_SUM ? x + y : x * y;  // exact in double
  if (std::isnan(r)) return {0, true};
  return {f16_round(r)};
}

Expected bf16_expect(int op, uint16_t a, uint16_t b) {
  const double x = bf16_value(a);
  const double y = bf16_value(b);
  if (op == CHORUS_MAX || op == CHORUS_MIN) return {src_wins(x, y, op) ? b : a};
  // prod is exact in double; a sum may round there, but double has more than
  // 2 * 8 + 2 bits so rounding again to bfloat16 is still correct.
  const double r = op == CHORUS_SUM ? x + y : x * y;
  if (std::isnan(r)) return {0, true};
  return {bf16_round(r)};
}

template <class F, class Bits>
Expected float_expect(int op, F a, F b) {
  if (op == CHORUS_MAX || op == CHORUS_MIN) {
    return {std::bit_cast<Bits>(src_wins(a, b, op) ? b : a)};
  }
  const F r = op == CHORUS_SUM ? a + b : a * b;
  if (std::isnan(r)) return {0, true};
  return {std::bit_cast<Bits>(r)};
}

Expected complex_expect(int op, uint64_t a, uint64_t b) {
  const float ar = std::bit_cast<float>(static_cast<uint32_t>(a));
  const float ai = std::bit_cast<float>(static_cast<uint32_t>(a >> 32));
  const float br = std::bit_cast<float>(static_cast<uint32_t>(b));
  const float bi = std::bit_cast<float>(static_cast<uint32_t>(b >> 32));
  float re = 0;
  float im = 0;
  if (op == CHORUS_SUM) {
    re = ar + br;
    im = ai + bi;
  } else {
    // Each product rounded to float, then the sum rounded once. volatile keeps
    // the compiler from fusing them into an FMA (-ffp-contract=fast with -mfma).
    volatile float rr = ar * br;
    volatile float ii = ai * bi;
    volatile float ri = ar * bi;
    volatile float ir = ai * br;
    re = rr - ii;
    im = ri + ir;
  }
  Expected e;
  e.any_nan = std::isnan(re);
  e.any_nan_im = std::isnan(im);
  e.bits = uint64_t{std::bit_cast<uint32_t>(re)} | (uint64_t{std::bit_cast<uint32_t>(im)} << 32);
  return e;
}

Expected expect(int dtype, int op, const void* a, const void* b) {
  switch (dtype) {
    case CHORUS_BOOL: {
      const bool x = load<uint8_t>(a) != 0;
      const bool y = load<uint8_t>(b) != 0;
      return {(op == CHORUS_SUM || op == CHORUS_MAX) ? uint64_t{x || y} : uint64_t{x && y}};
    }
    case CHORUS_INT8:
      return {static_cast<uint8_t>(int_ref(op, load<int8_t>(a), load<int8_t>(b)))};
    case CHORUS_INT16:
      return {static_cast<uint16_t>(int_ref(op, load<int16_t>(a), load<int16_t>(b)))};
    case CHORUS_INT32:
      return {static_cast<uint32_t>(int_ref(op, load<int32_t>(a), load<int32_t>(b)))};
    case CHORUS_INT64:
      return {static_cast<uint64_t>(int_ref(op, load<int64_t>(a), load<int64_t>(b)))};
    case CHORUS_UINT8:
      return {int_ref(op, load<uint8_t>(a), load<uint8_t>(b))};
    case CHORUS_UINT16:
      return {int_ref(op, load<uint16_t>(a), load<uint16_t>(b))};
    case CHORUS_UINT32:
      return {int_ref(op, load<uint32_t>(a), load<uint32_t>(b))};
    case CHORUS_UINT64:
      return {int_ref(op, load<uint64_t>(a), load<uint64_t>(b))};
    case CHORUS_FLOAT16:
      return f16_expect(op, load<uint16_t>(a), load<uint16_t>(b));
    case CHORUS_BFLOAT16:
      return bf16_expect(op, load<uint16_t>(a), load<uint16_t>(b));
    case CHORUS_FLOAT32:
      return float_expect<float, uint32_t>(op, load<float>(a), load<float>(b));
    case CHORUS_FLOAT64:
      return float_expect<double, uint64_t>(op, load<double>(a), load<double>(b));
    default:
      return complex_expect(op, load<uint64_t>(a), load<uint64_t>(b));
  }
}

/// Whether `bits` is a NaN of a floating dtype (complex64: of one component).
bool is_nan(int dtype, uint64_t bits) {
  switch (dtype) {
    case CHORUS_FLOAT16:
      return (bits & 0x7fff) > 0x7c00;
    case CHORUS_BFLOAT16:
      return (bits & 0x7fff) > 0x7f80;
    case CHORUS_FLOAT32:
    case CHORUS_COMPLEX64:
      return (bits & 0x7fffffff) > 0x7f800000;
    case CHORUS_FLOAT64:
      return (bits & 0x7fffffffffffffff) > 0x7ff0000000000000;
    default:
      return false;
  }
}

/// "" when `got` is right for op(a, b), else a description.
std::string check_element(int dtype, int op, const void* a, const void* b, const void* got) {
  const size_t size = chorus_dtype_size(dtype);
  const Expected e = expect(dtype, op, a, b);
  uint64_t g = 0;
  std::memcpy(&g, got, size);
  bool ok = false;
  if (dtype == CHORUS_COMPLEX64) {
    const uint32_t g_re = static_cast<uint32_t>(g);
    const uint32_t g_im = static_cast<uint32_t>(g >> 32);
    const bool re_ok = e.any_nan ? is_nan(dtype, g_re) : g_re == static_cast<uint32_t>(e.bits);
    const bool im_ok =
        e.any_nan_im ? is_nan(dtype, g_im) : g_im == static_cast<uint32_t>(e.bits >> 32);
    ok = re_ok && im_ok;
  } else {
    ok = e.any_nan ? is_nan(dtype, g) : g == e.bits;
  }
  if (ok) return "";
  return std::string(kDtypeNames[dtype]) + " " + kOpNames[op] + "(" + hex(a, size) + ", " +
         hex(b, size) + ") = " + hex(got, size) + ", expected " +
         (e.any_nan || e.any_nan_im ? "NaN" : hex(&e.bits, size));
}

/// Whether one level's result `y` for op(a, b) may differ from the baseline's
/// `x`: never, except for sum/prod of two NaNs (which payload wins is up to
/// the hardware, see reduce.h), and complex64 with a NaN component (its
/// products mix components).
bool baseline_difference_allowed(int dtype, int op, const std::byte* a, const std::byte* b,
                                 const std::byte* x, const std::byte* y) {
  const size_t size = std::min<size_t>(chorus_dtype_size(dtype), 8);
  uint64_t xv = 0, yv = 0, av = 0, bv = 0;
  std::memcpy(&xv, x, size);
  std::memcpy(&yv, y, size);
  std::memcpy(&av, a, size);
  std::memcpy(&bv, b, size);
  if (dtype == CHORUS_COMPLEX64) return is_nan(dtype, xv) || is_nan(dtype, xv >> 32);
  return (op == CHORUS_SUM || op == CHORUS_PROD) && is_nan(dtype, av) && is_nan(dtype, bv) &&
         is_nan(dtype, xv) && is_nan(dtype, yv);
}

// ---- test data ----

template <class F>
F pick(std::mt19937_64& rng, std::initializer_list<F> values) {
  return values.begin()[rng() % values.size()];
}

/// Random elements of `dtype`, rich in the values that go wrong: extremes,
/// signed zeros, infinities, NaNs, subnormals, and neighbours that round.
void fill(std::mt19937_64& rng, int dtype, std::byte* p, size_t count) {
  const size_t size = chorus_dtype_size(dtype);
  for (size_t i = 0; i < count; ++i, p += size) {
    const uint64_t r = rng();
    const unsigned kind = rng() % 16;
    switch (dtype) {
      case CHORUS_BOOL:
        store<uint8_t>(p, kind < 6 ? 0 : static_cast<uint8_t>(r));  // any nonzero byte is true
        break;
      case CHORUS_FLOAT16:
        // Raw bit patterns cover every class; narrow exponents make sums round.
        store<uint16_t>(p, kind < 8 ? static_cast<uint16_t>(r)
                                    : static_cast<uint16_t>((r & 0x83ff) | (0x3400 + (kind << 8))));
        break;
      case CHORUS_BFLOAT16:
        store<uint16_t>(p, kind < 8 ? static_cast<uint16_t>(r)
                                    : static_cast<uint16_t>((r & 0x807f) | (0x3e00 + (kind << 7))));
        break;
      case CHORUS_FLOAT32:
      case CHORUS_COMPLEX64:
        for (size_t lane = 0; lane < size / 4; ++lane) {
          const uint64_t s = rng();
          float f = 0;
          if (kind < 6) {
            f = std::bit_cast<float>(static_cast<uint32_t>(s));
          } else if (kind < 13) {
            f = std::ldexp(static_cast<float>(static_cast<int32_t>(s)), -31 + int(s >> 60));
          } else {
            f = pick<float>(
                rng, {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                      std::bit_cast<float>(0x7f800001u),  // signalling NaN
                      std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min(),
                      std::numeric_limits<float>::max(), 1.0f, -1.0f});
          }
          store(p + 4 * lane, f);
        }
        break;
      case CHORUS_FLOAT64: {
        double d = 0;
        if (kind < 6) {
          d = std::bit_cast<double>(r);
        } else if (kind < 13) {
          d = std::ldexp(static_cast<double>(static_cast<int64_t>(r)), -63 + int(rng() % 16));
        } else {
          d = pick<double>(
              rng, {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN,
                    std::bit_cast<double>(0x7ff0000000000001ull),
                    std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::min(),
                    std::numeric_limits<double>::max(), 1.0, -1.0});
        }
        store(p, d);
        break;
      }
      default: {  // integers: random bits, often extremes
        uint64_t v = r;
        if (kind >= 12) v = pick<uint64_t>(rng, {0, 1, ~uint64_t{0}, uint64_t{1} << 63});
        if (kind == 11) v = (uint64_t{1} << (8 * size - 1)) - (rng() % 2);  // INT_MAX, INT_MIN
        std::memcpy(p, &v, size);
        break;
      }
    }
  }
}

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
                          size_t inout_off, std::mt19937_64& rng) {
  const size_t size = chorus_dtype_size(dtype);
  const size_t bytes = count * size;
  GuardedBuffer src(bytes, src_off * size);
  GuardedBuffer inout(bytes, inout_off * size);
  fill(rng, dtype, src.data(), count);
  fill(rng, dtype, inout.data(), count);
  const std::vector<std::byte> src_before(src.data(), src.data() + bytes);
  const std::vector<std::byte> inout_before(inout.data(), inout.data() + bytes);

  fn(src.data(), inout.data(), count);

  std::string problems;
  int shown = 0;
  for (size_t i = 0; i < count && shown < 3; ++i) {
    const std::string why = check_element(dtype, op, inout_before.data() + i * size,
                                          src_before.data() + i * size, inout.data() + i * size);
    if (!why.empty()) {
      problems += "[" + std::to_string(i) + "] " + why + "\n";
      ++shown;
    }
  }
  if (!inout.guards_intact() || !src.guards_intact()) problems += "wrote outside inout\n";
  if (bytes != 0 && std::memcmp(src.data(), src_before.data(), bytes) != 0) {
    problems += "modified src\n";
  }
  return problems;
}

/// fn(x, x, count): every element must be op(x[i], x[i]).
std::string run_aliased(chorus_reduce_fn_t fn, int dtype, int op, size_t count,
                        std::mt19937_64& rng) {
  const size_t size = chorus_dtype_size(dtype);
  GuardedBuffer buf(count * size, size);
  fill(rng, dtype, buf.data(), count);
  const std::vector<std::byte> before(buf.data(), buf.data() + count * size);
  fn(buf.data(), buf.data(), count);
  for (size_t i = 0; i < count; ++i) {
    const std::byte* x = before.data() + i * size;
    const std::string why = check_element(dtype, op, x, x, buf.data() + i * size);
    if (!why.empty()) return "aliased [" + std::to_string(i) + "] " + why;
  }
  return buf.guards_intact() ? "" : "aliased: wrote outside the buffer";
}

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

}  // namespace

TEST_CASE("every dtype and op matches the scalar reference on every instruction set", "[reduce]") {
  std::mt19937_64 rng(20240611);
  constexpr size_t kOffsets[][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  for (const ReduceIsa isa : runnable_isas()) {
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        if (!supported(dtype, op)) continue;
        INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[op]);
        const chorus_reduce_fn_t fn = reduce_kernel_for_isa(dtype, op, isa);
        REQUIRE(fn != nullptr);
        fn(nullptr, nullptr, 0);  // empty buffers may come without storage
        std::string problems;
        for (const size_t count : kCounts) {
          for (const auto& off : kOffsets) {
            const std::string p = run_and_check(fn, dtype, op, count, off[0], off[1], rng);
            if (!p.empty()) {
              problems += "count " + std::to_string(count) + ", src+" + std::to_string(off[0]) +
                          ", inout+" + std::to_string(off[1]) + ":\n" + p;
            }
          }
          problems += run_aliased(fn, dtype, op, count, rng);
        }
        CHECK(problems == "");
      }
    }
  }
}

TEST_CASE("reduce_kernel hands out the best instruction set's kernels", "[reduce]") {
  const ReduceIsa best = reduce_best_isa();
  INFO("best: " << reduce_isa_name(best));
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      CHECK(reduce_kernel(dtype, op) == reduce_kernel_for_isa(dtype, op, best));
    }
  }
  CHECK(std::string(reduce_isa_name(ReduceIsa::kBaseline)) == "baseline");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx2)) == "avx2");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx512)) == "avx512");
  CHECK(std::string(reduce_isa_name(ReduceIsa::kAvx512Bf16)) == "avx512bf16");
  // The best level is the highest one this CPU runs.
  CHECK(best == runnable_isas().back());
}

TEST_CASE("every instruction set level is tested, or says why not", "[reduce]") {
  // Every case here runs each level the CPU has (runnable_isas()). A level it
  // lacks is a missing capability (docs/testing.md): a warning naming what is
  // missing, and under CHORUS_TEST_REQUIRE=1 (CI) a failure, so that a CI
  // machine without AVX-512 cannot pass without testing those kernels. On a
  // build for another architecture the x86 levels do not apply.
  CHECK(std::string(reduce_isa_unavailable_reason(ReduceIsa::kBaseline)).empty());
  CHECK_FALSE(std::string(reduce_isa_unavailable_reason(static_cast<ReduceIsa>(7))).empty());
  const bool require = std::getenv("CHORUS_TEST_REQUIRE") != nullptr;
  for (const ReduceIsa isa : kAllIsas) {
    const std::string why = reduce_isa_unavailable_reason(isa);
    INFO(reduce_isa_name(isa) << ": " << why);
    // The reason and the lookup agree, for every (dtype, op).
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        if (!supported(dtype, op)) continue;
        CHECK((reduce_kernel_for_isa(dtype, op, isa) != nullptr) == why.empty());
      }
    }
    if (why.empty()) continue;
#if defined(__x86_64__) || defined(__i386__)
    const std::string what =
        std::string("not run: the ") + reduce_isa_name(isa) + " reduction kernels: " + why;
    if (require) {
      FAIL(what << " (CHORUS_TEST_REQUIRE=1: a missing capability fails)");
    } else {
      WARN(what << " (set CHORUS_TEST_REQUIRE=1 to make this a failure)");
    }
#else
    WARN("does not apply: the " << reduce_isa_name(isa) << " kernels: " << why);
#endif
  }
}

TEST_CASE("unsupported and out-of-range pairs have no kernel and say why", "[reduce]") {
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      if (supported(dtype, op)) {
        CHECK(reduce_kernel(dtype, op) != nullptr);
        CHECK(std::string(reduce_unsupported_reason(dtype, op)).empty());
      } else {
        CHECK(reduce_kernel(dtype, op) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kBaseline) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kAvx2) == nullptr);
        CHECK(reduce_kernel_for_isa(dtype, op, ReduceIsa::kAvx512) == nullptr);
        const std::string why = reduce_unsupported_reason(dtype, op);
        CHECK_THAT(why, Catch::Contains(kDtypeNames[dtype]) && Catch::Contains(kOpNames[op]));
      }
    }
  }
  CHECK(std::string(reduce_unsupported_reason(CHORUS_COMPLEX64, CHORUS_MAX)) ==
        "max is not defined for complex64; use sum or prod");

  for (const int dtype : {-1, int{CHORUS_DTYPE_COUNT}, 1000, std::numeric_limits<int>::min()}) {
    INFO("dtype " << dtype);
    CHECK(reduce_kernel(dtype, CHORUS_SUM) == nullptr);
    CHECK(reduce_kernel_for_isa(dtype, CHORUS_SUM, ReduceIsa::kBaseline) == nullptr);
    CHECK_THAT(reduce_unsupported_reason(dtype, CHORUS_SUM), Catch::Contains("unknown dtype"));
  }
  for (const int op : {-1, int{CHORUS_OP_COUNT}, 99}) {
    INFO("op " << op);
    CHECK(reduce_kernel(CHORUS_FLOAT32, op) == nullptr);
    CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, op, ReduceIsa::kAvx2) == nullptr);
    CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, op, ReduceIsa::kAvx512) == nullptr);
    CHECK_THAT(reduce_unsupported_reason(CHORUS_FLOAT32, op), Catch::Contains("unknown op"));
  }
  CHECK(reduce_kernel_for_isa(CHORUS_FLOAT32, CHORUS_SUM, static_cast<ReduceIsa>(7)) == nullptr);
}

TEST_CASE("integer sum and prod wrap around modulo 2^bits", "[reduce]") {
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    CHECK(apply_each<int8_t>(isa, CHORUS_INT8, CHORUS_SUM, {127, -128, -1}, {1, -1, 1}) ==
          std::vector<int8_t>{-128, 127, 0});
    CHECK(apply_each<int8_t>(isa, CHORUS_INT8, CHORUS_PROD, {16, -128, 100}, {16, -1, 3}) ==
          std::vector<int8_t>{0, -128, 44});
    CHECK(apply_each<uint8_t>(isa, CHORUS_UINT8, CHORUS_SUM, {255, 200}, {1, 100}) ==
          std::vector<uint8_t>{0, 44});
    CHECK(apply_each<uint16_t>(isa, CHORUS_UINT16, CHORUS_PROD, {65535, 256}, {65535, 256}) ==
          std::vector<uint16_t>{1, 0});
    CHECK(apply_each<int16_t>(isa, CHORUS_INT16, CHORUS_PROD, {-32768, 256}, {-1, 255}) ==
          std::vector<int16_t>{-32768, -256});
    constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
    constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
    CHECK(apply_each<int32_t>(isa, CHORUS_INT32, CHORUS_SUM, {kMax32, kMin32}, {1, -1}) ==
          std::vector<int32_t>{kMin32, kMax32});
    CHECK(apply_each<int32_t>(isa, CHORUS_INT32, CHORUS_PROD, {kMin32, 65536}, {-1, 65536}) ==
          std::vector<int32_t>{kMin32, 0});
    constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
    constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_SUM, {kMax64}, {1}) ==
          std::vector<int64_t>{kMin64});
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_PROD, {kMin64, kMax64}, {-1, 2}) ==
          std::vector<int64_t>{kMin64, -2});
    CHECK(apply_each<uint64_t>(isa, CHORUS_UINT64, CHORUS_PROD, {~uint64_t{0}}, {~uint64_t{0}}) ==
          std::vector<uint64_t>{1});
    CHECK(
        apply_each<uint32_t>(isa, CHORUS_UINT32, CHORUS_MAX, {0x80000000u, 1}, {1, 0xffffffffu}) ==
        std::vector<uint32_t>{0x80000000u, 0xffffffffu});
    CHECK(apply_each<int64_t>(isa, CHORUS_INT64, CHORUS_MIN, {kMin64, -1}, {kMax64, 0}) ==
          std::vector<int64_t>{kMin64, -1});
  }
}

TEST_CASE("bool results are 0 or 1 whatever nonzero bytes come in", "[reduce]") {
  const std::vector<uint8_t> a = {0, 0, 1, 2, 0x80, 0xff, 0x10, 0};
  const std::vector<uint8_t> b = {0, 3, 0, 0x40, 0xff, 1, 0x10, 0x80};
  const std::vector<uint8_t> any = {0, 1, 1, 1, 1, 1, 1, 1};
  const std::vector<uint8_t> all = {0, 0, 0, 1, 1, 1, 1, 0};
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_SUM, a, b) == any);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_MAX, a, b) == any);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_PROD, a, b) == all);
    CHECK(apply_each(isa, CHORUS_BOOL, CHORUS_MIN, a, b) == all);
  }
}

namespace {

struct HalfCase {
  int op;
  uint16_t a;
  uint16_t b;
  uint16_t expected;
};

/// Runs the cases through the reference (checking it) and the kernels.
void check_half_cases(int dtype, const std::vector<HalfCase>& cases) {
  std::vector<uint16_t> a;
  std::vector<uint16_t> b;
  for (const HalfCase& c : cases) {
    const uint16_t ref =
        (dtype == CHORUS_FLOAT16 ? f16_expect(c.op, c.a, c.b) : bf16_expect(c.op, c.a, c.b)).bits;
    INFO(kOpNames[c.op] << "(" << hex(&c.a, 2) << ", " << hex(&c.b, 2) << ")");
    CHECK(hex(&ref, 2) == hex(&c.expected, 2));
  }
  for (const ReduceIsa isa : runnable_isas()) {
    for (const HalfCase& c : cases) {
      const uint16_t got = apply_each<uint16_t>(isa, dtype, c.op, {c.a}, {c.b})[0];
      INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[c.op] << "("
                                << hex(&c.a, 2) << ", " << hex(&c.b, 2) << ")");
      CHECK(hex(&got, 2) == hex(&c.expected, 2));
    }
  }
}

}  // namespace

TEST_CASE("float16 rounds once, to nearest even", "[reduce]") {
  check_half_cases(
      CHORUS_FLOAT16,
      {
          {CHORUS_SUM, 0x3c00, 0x1000, 0x3c00},   // 1 + 2^-11: tie, stays even
          {CHORUS_SUM, 0x3c01, 0x1000, 0x3c02},   // (1 + 2^-10) + 2^-11: tie, up to even
          {CHORUS_SUM, 0x3c00, 0x1001, 0x3c01},   // just above the tie
          {CHORUS_SUM, 0x3c00, 0x0001, 0x3c00},   // 1 + 2^-24 is far below half an ulp
          {CHORUS_PROD, 0x3c01, 0x3c01, 0x3c02},  // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20
          {CHORUS_SUM, 0x7bff, 0x4800, 0x7bff},   // 65504 + 8: below the tie with 65536
          {CHORUS_SUM, 0x7bff, 0x4c00, 0x7c00},   // 65504 + 16 = 65520: tie, to inf
          {CHORUS_PROD, 0x7bff, 0xc000, 0xfc00},  // overflow to -inf
          {CHORUS_SUM, 0x0001, 0x0001, 0x0002},   // subnormals add exactly
          {CHORUS_SUM, 0x03ff, 0x0001, 0x0400},   // largest subnormal + step = min normal
          {CHORUS_PROD, 0x0001, 0x3800, 0x0000},  // 2^-25: tie between 0 and 2^-24, to 0
          {CHORUS_PROD, 0x0003, 0x3800, 0x0002},  // 1.5 * 2^-24: tie, to even 2
          {CHORUS_PROD, 0x0001, 0xb800, 0x8000},  // underflow keeps the sign
          {CHORUS_PROD, 0x0400, 0x3800, 0x0200},  // min normal / 2 is subnormal
          {CHORUS_PROD, 0x0001, 0x0001, 0x0000},  // 2^-48 flushes to +0 by rounding
          {CHORUS_SUM, 0x8000, 0x8000, 0x8000},   // -0 + -0 = -0
          {CHORUS_SUM, 0x8000, 0x0000, 0x0000},   // -0 + +0 = +0
          {CHORUS_SUM, 0x3c00, 0xbc00, 0x0000},   // 1 - 1 = +0
          {CHORUS_SUM, 0x7c00, 0x7bff, 0x7c00},   // inf + max = inf
          {CHORUS_MAX, 0x7bff, 0x7c00, 0x7c00},  {CHORUS_MIN, 0xfc00, 0x0000, 0xfc00},
      });
  // NaN results: quiet NaNs; with one NaN operand, its sign and payload survive.
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto got =
        apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_SUM, {0x7c00, 0x7c01, 0x3c00, 0xfd55},
                             {0xfc00, 0x3c00, 0x7d00, 0});
    CHECK((got[0] & 0x7e00) == 0x7e00);  // inf - inf
    CHECK(got[1] == 0x7e01);             // signalling NaN comes out quiet
    CHECK(got[2] == 0x7f00);
    CHECK(got[3] == 0xff55);
    const auto prod = apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_PROD, {0x7c00}, {0x0000});
    CHECK((prod[0] & 0x7e00) == 0x7e00);  // inf * 0
  }
}

TEST_CASE("bfloat16 rounds once, to nearest even", "[reduce]") {
  check_half_cases(
      CHORUS_BFLOAT16,
      {
          {CHORUS_SUM, 0x3f80, 0x3b80, 0x3f80},   // 1 + 2^-8: tie, stays even
          {CHORUS_SUM, 0x3f81, 0x3b80, 0x3f82},   // tie, up to even
          {CHORUS_SUM, 0x3f80, 0x3b81, 0x3f81},   // just above the tie
          {CHORUS_PROD, 0x3f81, 0x3f81, 0x3f82},  // (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14
          {CHORUS_SUM, 0x7f7f, 0x7b00, 0x7f80},   // max + 2^119: tie with 2^128, to inf
          {CHORUS_SUM, 0x7f7f, 0x7a80, 0x7f7f},   // max + 2^118: below the tie
          {CHORUS_SUM, 0x7f7f, 0x7f7f, 0x7f80},   // float overflow
          {CHORUS_PROD, 0xff7f, 0x4000, 0xff80},  // -max * 2 = -inf
          {CHORUS_SUM, 0x0001, 0x0001, 0x0002},   // subnormals add exactly
          {CHORUS_PROD, 0x0001, 0x3f00, 0x0000},  // 2^-134: tie between 0 and 2^-133, to 0
          {CHORUS_PROD, 0x0003, 0x3f00, 0x0002},  // tie, to even
          {CHORUS_PROD, 0x0081, 0x3f00, 0x0040},  // (1 + 2^-7) 2^-126 / 2: tie, to even
          {CHORUS_SUM, 0x8000, 0x8000, 0x8000},
          {CHORUS_SUM, 0x8000, 0x0000, 0x0000},
          {CHORUS_MAX, 0x8000, 0x0000, 0x0000},
          {CHORUS_MIN, 0x0000, 0x8000, 0x8000},
      });
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto got = apply_each<uint16_t>(isa, CHORUS_BFLOAT16, CHORUS_SUM,
                                          {0x7f80, 0x7f81, 0x3f80}, {0xff80, 0x3f80, 0xffc5});
    CHECK((got[0] & 0x7fc0) == 0x7fc0);  // inf - inf is a quiet NaN
    CHECK(got[1] == 0x7fc1);             // signalling NaN comes out quiet, payload kept
    CHECK(got[2] == 0xffc5);
  }
}

TEST_CASE("complex64 sum and prod", "[reduce]") {
  struct C {
    float re;
    float im;
  };
  const std::vector<C> a = {{1, 2}, {0, 1}, {3, -4}, {1e30f, 1e30f}, {0.1f, 0.2f}};
  const std::vector<C> b = {{3, 4}, {0, 1}, {3, 4}, {1e30f, -1e30f}, {0.3f, 0.7f}};
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const auto prod = apply_each<C>(isa, CHORUS_COMPLEX64, CHORUS_PROD, a, b);
    CHECK(prod[0].re == -5);  // (1+2i)(3+4i) = -5+10i
    CHECK(prod[0].im == 10);
    CHECK(prod[1].re == -1);  // i*i = -1
    CHECK(prod[1].im == 0);
    CHECK(prod[2].re == 25);  // z * conj(z) = |z|^2
    CHECK(prod[2].im == 0);
    CHECK(std::isinf(prod[3].re));  // 1e60 overflows: no rescaling (no Annex G)
    CHECK(std::isnan(prod[3].im));  // 1e60 - 1e60 = inf - inf
    // Each product rounded to float, then the difference rounded once.
    CHECK(prod[4].re == float(float(0.1f * 0.3f) - float(0.2f * 0.7f)));
    CHECK(prod[4].im == float(float(0.1f * 0.7f) + float(0.2f * 0.3f)));
    const auto sum = apply_each<C>(isa, CHORUS_COMPLEX64, CHORUS_SUM, a, b);
    CHECK(sum[0].re == 4);
    CHECK(sum[0].im == 6);
    CHECK(sum[2].im == 0);
  }
}

TEST_CASE("max and min propagate NaN and order -0 below +0", "[reduce]") {
  const uint32_t qnan = 0x7fc00001;
  const uint32_t neg_nan = 0xffc00002;
  const uint32_t snan = 0x7f800003;
  const uint32_t one = 0x3f800000;
  const uint32_t minus_inf = 0xff800000;
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    const std::vector<uint32_t> a = {qnan, one, qnan, minus_inf, 0x80000000, 0, 0xbf800000, 1};
    const std::vector<uint32_t> b = {one, snan, neg_nan, neg_nan, 0, 0x80000000, 0xc0000000, 0};
    CHECK(apply_each(isa, CHORUS_FLOAT32, CHORUS_MAX, a, b) ==
          std::vector<uint32_t>{qnan, snan, qnan, neg_nan, 0, 0, 0xbf800000, 1});
    CHECK(apply_each(isa, CHORUS_FLOAT32, CHORUS_MIN, a, b) ==
          std::vector<uint32_t>{qnan, snan, qnan, neg_nan, 0x80000000, 0x80000000, 0xc0000000, 0});
    const std::vector<uint64_t> da = {0x7ff8000000000001, 0x8000000000000000, 0xfff0000000000000};
    const std::vector<uint64_t> db = {0x3ff0000000000000, 0, 0x7ff0000000000002};
    CHECK(apply_each(isa, CHORUS_FLOAT64, CHORUS_MAX, da, db) ==
          std::vector<uint64_t>{0x7ff8000000000001, 0, 0x7ff0000000000002});
    CHECK(apply_each(isa, CHORUS_FLOAT64, CHORUS_MIN, da, db) ==
          std::vector<uint64_t>{0x7ff8000000000001, 0x8000000000000000, 0x7ff0000000000002});
    // float16 and bfloat16: the NaN comes back bit for bit (not quieted).
    CHECK(apply_each<uint16_t>(isa, CHORUS_FLOAT16, CHORUS_MAX, {0x7c01, 0x3c00, 0x8000},
                               {0x3c00, 0xfd00, 0x0000}) ==
          std::vector<uint16_t>{0x7c01, 0xfd00, 0x0000});
    CHECK(apply_each<uint16_t>(isa, CHORUS_BFLOAT16, CHORUS_MIN, {0x3f80, 0xff81, 0x0000},
                               {0x7f81, 0x3f80, 0x8000}) ==
          std::vector<uint16_t>{0x7f81, 0xff81, 0x8000});
  }
}

TEST_CASE("instruction sets agree bit for bit", "[reduce]") {
  const std::vector<ReduceIsa> isas = runnable_isas();
  if (isas.size() < 2) {
    WARN("not run: this CPU or build has only the baseline kernels");
    return;
  }
  std::mt19937_64 rng(7);
  constexpr size_t kCount = 20011;
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      if (!supported(dtype, op)) continue;
      const size_t size = chorus_dtype_size(dtype);
      std::vector<std::byte> src(kCount * size);
      std::vector<std::byte> base(kCount * size);
      fill(rng, dtype, src.data(), kCount);
      fill(rng, dtype, base.data(), kCount);
      std::vector<std::byte> before = base;
      reduce_kernel_for_isa(dtype, op, ReduceIsa::kBaseline)(src.data(), base.data(), kCount);
      for (size_t k = 1; k < isas.size(); ++k) {
        INFO(reduce_isa_name(isas[k]) << " " << kDtypeNames[dtype] << " " << kOpNames[op]);
        std::vector<std::byte> other = before;
        reduce_kernel_for_isa(dtype, op, isas[k])(src.data(), other.data(), kCount);
        // NaN + NaN may keep either payload (see reduce.h); all else must match.
        const bool nan_payload_free = op == CHORUS_SUM || op == CHORUS_PROD;
        size_t differing = 0;
        for (size_t i = 0; i < kCount * size; i += size) {
          uint64_t x = 0;
          uint64_t y = 0;
          std::memcpy(&x, &base[i], size);
          std::memcpy(&y, &other[i], size);
          if (x == y) continue;
          bool both_nan = nan_payload_free;
          if (dtype == CHORUS_COMPLEX64) {
            for (const int shift : {0, 32}) {
              const uint32_t xc = static_cast<uint32_t>(x >> shift);
              const uint32_t yc = static_cast<uint32_t>(y >> shift);
              both_nan = both_nan && (xc == yc || (is_nan(dtype, xc) && is_nan(dtype, yc)));
            }
          } else {
            both_nan = both_nan && is_nan(dtype, x) && is_nan(dtype, y);
          }
          if (!both_nan) ++differing;
        }
        CHECK(differing == 0);
      }
    }
  }

  // Every float16 through both conversions: x + -0 and x * 1 give x back, with
  // signalling NaNs quieted.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> expected = all;
  for (uint16_t& e : expected) {
    if ((e & 0x7fff) > 0x7c00) e |= 0x0200;
  }
  for (const ReduceIsa isa : runnable_isas()) {
    INFO(reduce_isa_name(isa));
    std::vector<uint16_t> x = all;
    std::vector<uint16_t> minus_zero(all.size(), 0x8000);
    reduce_kernel_for_isa(CHORUS_FLOAT16, CHORUS_SUM, isa)(minus_zero.data(), x.data(), x.size());
    CHECK(x == expected);
    x = all;
    std::vector<uint16_t> ones(all.size(), 0x3c00);
    reduce_kernel_for_isa(CHORUS_FLOAT16, CHORUS_PROD, isa)(ones.data(), x.data(), x.size());
    CHECK(x == expected);
  }
}

TEST_CASE("half.h scalar conversions match the reference", "[reduce][half]") {
  using chorus::core::bfloat16_to_float;
  using chorus::core::float_to_bfloat16;
  using chorus::core::float_to_half;
  using chorus::core::half_to_float;
  size_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const double v = f16_value(static_cast<uint16_t>(h));
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v) ? !std::isnan(f) : (double{f} != v || std::signbit(f) != std::signbit(v))) {
      ++bad;
    }
    if (!std::isnan(v) && float_to_half(f) != h) ++bad;
    if (bfloat16_to_float(static_cast<uint16_t>(h)) != bf16_value(static_cast<uint16_t>(h)) &&
        !std::isnan(bf16_value(static_cast<uint16_t>(h)))) {
      ++bad;
    }
  }
  CHECK(bad == 0);

  std::mt19937 rng(3);
  bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = i < 16 ? 0x33000000u + static_cast<uint32_t>(i) - 8 : rng();
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) {
      bad += (float_to_half(f) & 0x7e00) != 0x7e00;
      bad += (float_to_bfloat16(f) & 0x7fc0) != 0x7fc0;
      continue;
    }
    bad += float_to_half(f) != f16_round(f);
    bad += float_to_bfloat16(f) != bf16_round(f);
  }
  CHECK(bad == 0);
  static_assert(chorus::core::float_to_half(1.0f) == 0x3c00);
  static_assert(chorus::core::float_to_bfloat16(-2.0f) == 0xc000);
}

namespace {

/// float16 or bfloat16 values that exercise every path of the conversions:
/// signed zeros, the smallest and largest subnormals, the smallest normal,
/// one and its neighbours (sums with them land on rounding ties), the largest
/// finite value, infinities, and quiet and signalling NaNs of both signs with
/// payload bits at the top, at the bottom, and everywhere.
std::vector<uint16_t> half_specials(int dtype) {
  if (dtype == CHORUS_FLOAT16) {
    return {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x3c00,
            0x3c01, 0xbc01, 0x1000, 0x1400, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
            0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7d55, 0xfdff, 0x7fff, 0xffff};
  }
  return {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x3f80,
          0x3f81, 0xbf81, 0x3b80, 0x3c00, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
          0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7faa, 0xffbf, 0x7fff, 0xffff};
}

/// op(a, b) for float16/bfloat16, with the NaN rules of reduce.h made exact:
/// one NaN operand gives that NaN, quieted, for sum and prod; both NaN
/// operands give some NaN (the hardware's choice).
Expected half_expect(int dtype, int op, uint16_t a, uint16_t b) {
  const uint16_t quiet = dtype == CHORUS_FLOAT16 ? 0x0200 : 0x0040;
  const bool a_nan = is_nan(dtype, a);
  const bool b_nan = is_nan(dtype, b);
  if ((op == CHORUS_SUM || op == CHORUS_PROD) && a_nan != b_nan) {
    return {static_cast<uint16_t>((a_nan ? a : b) | quiet)};
  }
  return dtype == CHORUS_FLOAT16 ? f16_expect(op, a, b) : bf16_expect(op, a, b);
}

}  // namespace

TEST_CASE("float16 and bfloat16: every value against every special value", "[reduce]") {
  // All 65536 bit patterns as inout with each special as src, then the
  // other way round: every class meets every class, including NaN payloads,
  // -0/+0, infinities, subnormals and ties, in whole vectors and in tails.
  for (const int dtype : {CHORUS_FLOAT16, CHORUS_BFLOAT16}) {
    const std::vector<uint16_t> specials = half_specials(dtype);
    for (const ReduceIsa isa : runnable_isas()) {
      for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
        INFO(reduce_isa_name(isa) << " " << kDtypeNames[dtype] << " " << kOpNames[op]);
        const chorus_reduce_fn_t fn = reduce_kernel_for_isa(dtype, op, isa);
        REQUIRE(fn != nullptr);
        size_t bad = 0;
        std::string first;
        for (const uint16_t special : specials) {
          for (const bool special_is_src : {true, false}) {
            std::vector<uint16_t> inout(65536);
            std::vector<uint16_t> src(65536, special);
            for (size_t i = 0; i < inout.size(); ++i) inout[i] = static_cast<uint16_t>(i);
            if (!special_is_src) std::swap(inout, src);
            const std::vector<uint16_t> before = inout;
            // An odd count leaves a tail on every instruction set.
            fn(src.data(), inout.data(), inout.size() - 3);
            for (size_t i = 0; i < inout.size(); ++i) {
              const Expected e = i < inout.size() - 3 ? half_expect(dtype, op, before[i], src[i])
                                                      : Expected{before[i]};
              const bool ok = e.any_nan ? is_nan(dtype, inout[i]) : inout[i] == e.bits;
              if (!ok && bad++ == 0) {
                first = kOpNames[op] + std::string("(") + hex(&before[i], 2) + ", " +
                        hex(&src[i], 2) + ") = " + hex(&inout[i], 2) + ", expected " +
                        hex(&e.bits, 2);
              }
            }
          }
        }
        INFO(first);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("every tail length from 0 to 70 elements, on every instruction set", "[reduce]") {
  // Counts 0..70 cover a tail of every length for 1- to 8-byte elements at
  // every vector width (16, 32 and 64 bytes); each instruction set must match
  // the reference and, element by element, the baseline (NaN + NaN in
  // sum/prod excepted).
  std::mt19937_64 rng(70);
  const std::vector<ReduceIsa> isas = runnable_isas();
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      if (!supported(dtype, op)) continue;
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      const size_t size = chorus_dtype_size(dtype);
      std::string problems;
      for (size_t count = 0; count <= 70; ++count) {
        std::vector<std::byte> src(count * size);
        std::vector<std::byte> inout(count * size);
        fill(rng, dtype, src.data(), count);
        fill(rng, dtype, inout.data(), count);
        std::vector<std::vector<std::byte>> results;
        for (const ReduceIsa isa : isas) {
          // Guard bytes after the end catch a tail written too far.
          std::vector<std::byte> out = inout;
          out.resize(count * size + 64, std::byte{0x5a});
          reduce_kernel_for_isa(dtype, op, isa)(src.data(), out.data(), count);
          for (size_t i = count * size; i < out.size(); ++i) {
            if (out[i] != std::byte{0x5a}) {
              problems += std::string(reduce_isa_name(isa)) + " count " + std::to_string(count) +
                          ": wrote past the end\n";
              break;
            }
          }
          for (size_t i = 0; i < count; ++i) {
            const std::string why =
                check_element(dtype, op, &inout[i * size], &src[i * size], &out[i * size]);
            if (!why.empty()) {
              problems += std::string(reduce_isa_name(isa)) + " count " + std::to_string(count) +
                          " [" + std::to_string(i) + "] " + why + "\n";
            }
          }
          results.push_back(std::move(out));
        }
        for (size_t k = 1; k < results.size(); ++k) {
          for (size_t i = 0; i < count * size; i += size) {
            if (std::memcmp(&results[0][i], &results[k][i], size) == 0) continue;
            if (!baseline_difference_allowed(dtype, op, &inout[i], &src[i], &results[0][i],
                                             &results[k][i])) {
              problems += std::string(reduce_isa_name(isas[k])) + " differs from baseline, count " +
                          std::to_string(count) + " [" + std::to_string(i / size) + "]\n";
            }
          }
        }
      }
      CHECK(problems == "");
    }
  }
}

TEST_CASE("every start offset 0-63 of inout and of src on every instruction set", "[reduce]") {
  // The kernels run their loop from inout's first register-size boundary
  // and cover the bytes before and after it with one unaligned register at
  // each end. Every byte offset of inout with src at the same offset, at 0
  // and at 16 (what malloc gives large blocks) puts the boundary everywhere,
  // including inout not aligned to its own element size; every offset of src
  // under inout at 0 and at 16 covers sources that cannot be aligned with
  // it. 700-odd bytes give a loop; about 100 bytes give none at AVX-512, only
  // the two end registers, overlapping. Each result is checked against the
  // reference and, element by element, the baseline.
  std::mt19937_64 rng(63);
  const std::vector<ReduceIsa> isas = runnable_isas();
  std::vector<std::pair<size_t, size_t>> placements;  // (inout, src) bytes past 64
  for (size_t off = 0; off < 64; ++off) {
    for (const size_t other : {off, size_t{0}, size_t{16}}) {
      placements.emplace_back(off, other);
      if (other != off) placements.emplace_back(other, off);
    }
  }
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      if (!supported(dtype, op)) continue;
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      const size_t size = chorus_dtype_size(dtype);
      std::string problems;
      for (const size_t count : {704 / size + 3, 100 / size + 1}) {
        const size_t bytes = count * size;
        for (const auto& [inout_off, src_off] : placements) {
          std::vector<std::byte> a(bytes);
          std::vector<std::byte> b(bytes);
          fill(rng, dtype, a.data(), count);
          fill(rng, dtype, b.data(), count);
          std::vector<std::byte> base;
          for (const ReduceIsa isa : isas) {
            GuardedBuffer src(bytes, src_off);
            GuardedBuffer inout(bytes, inout_off);
            std::memcpy(src.data(), b.data(), bytes);
            std::memcpy(inout.data(), a.data(), bytes);
            reduce_kernel_for_isa(dtype, op, isa)(src.data(), inout.data(), count);
            const std::string where = std::string(reduce_isa_name(isa)) + " inout+" +
                                      std::to_string(inout_off) + " src+" + std::to_string(src_off);
            if (!inout.guards_intact()) problems += where + ": wrote outside inout\n";
            if (std::memcmp(src.data(), b.data(), bytes) != 0)
              problems += where + ": changed src\n";
            const std::byte* out = inout.data();
            for (size_t i = 0; i < bytes; i += size) {
              const std::string why = check_element(dtype, op, &a[i], &b[i], out + i);
              if (!why.empty())
                problems += where + " [" + std::to_string(i / size) + "] " + why + "\n";
              if (!base.empty() && std::memcmp(&base[i], out + i, size) != 0 &&
                  !baseline_difference_allowed(dtype, op, &a[i], &b[i], &base[i], out + i)) {
                problems += where + " [" + std::to_string(i / size) + "] differs from baseline\n";
              }
            }
            if (base.empty()) base.assign(out, out + bytes);
          }
          if (problems.size() > 2000) break;
        }
      }
      CHECK(problems == "");
    }
  }
}

TEST_CASE("bfloat16 sum and prod match the baseline with MXCSR.DAZ set", "[reduce]") {
#if defined(__x86_64__) || defined(__i386__)
  // avx512bf16 rounds with an instruction that flushes subnormals and finds
  // them with one that reads them as zero under DAZ, so it must notice DAZ.
  // Operands just above the smallest normal, of both signs, cancel into
  // subnormal float sums, and times src values in [0.5, 1) give subnormal
  // products; DAZ (without FTZ) lets both through, and every level must round
  // them as the baseline does, bit for bit.
  std::mt19937_64 rng(126);
  constexpr size_t kCount = 4099;
  auto tiny = [&rng] { return static_cast<uint16_t>((rng() & 0x80ff) | ((rng() % 3) << 7)); };
  std::vector<uint16_t> inout(kCount);
  for (uint16_t& x : inout) x = tiny();
  for (const int op : {CHORUS_SUM, CHORUS_PROD}) {
    std::vector<uint16_t> src(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      src[i] = op == CHORUS_PROD ? static_cast<uint16_t>((rng() & 0x807f) | 0x3f00) : tiny();
      if (op == CHORUS_SUM && i % 5 == 0) src[i] = inout[i] ^ 0x8001;  // near cancellation
    }
    std::vector<std::vector<uint16_t>> results;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr((csr | 0x40) & ~0x8000u);  // DAZ on, FTZ off
    for (const ReduceIsa isa : runnable_isas()) {
      results.push_back(inout);
      reduce_kernel_for_isa(CHORUS_BFLOAT16, op, isa)(src.data(), results.back().data(), kCount);
    }
    _mm_setcsr(csr);
    for (size_t k = 1; k < results.size(); ++k) {
      INFO(kOpNames[op] << " " << reduce_isa_name(runnable_isas()[k]));
      size_t differing = 0;
      for (size_t i = 0; i < kCount; ++i) differing += results[k][i] != results[0][i] ? 1 : 0;
      CHECK(differing == 0);
    }
    // The data does reach the subnormal range.
    size_t subnormal = 0;
    for (const uint16_t r : results[0]) subnormal += (r & 0x7f80) == 0 && (r & 0x7f) != 0 ? 1 : 0;
    CHECK(subnormal > kCount / 20);
  }
#else
  WARN("does not apply: MXCSR is x86's");
#endif
}

TEST_CASE("float max and min on data without NaN and with one NaN per block", "[reduce]") {
  // The AVX-512 max/min check a block of four registers for NaNs once and,
  // when there are none, skip the NaN merges. Random data has a NaN in
  // nearly every block, so here the NaNs are replaced (by infinities) to
  // reach that path, and then one NaN at a time, in inout or in src, at
  // every position of the first two blocks, must still win as it should.
  std::mt19937_64 rng(4);
  for (const int dtype : {CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32, CHORUS_FLOAT64}) {
    for (const int op : {CHORUS_MAX, CHORUS_MIN}) {
      INFO(kDtypeNames[dtype] << " " << kOpNames[op]);
      const size_t size = chorus_dtype_size(dtype);
      const size_t count = 4 * 512 / size + 5;  // two 4x64-byte blocks, then more
      std::vector<std::byte> src(count * size);
      std::vector<std::byte> inout(count * size);
      fill(rng, dtype, src.data(), count);
      fill(rng, dtype, inout.data(), count);
      const uint64_t sign = uint64_t{1} << (8 * size - 1);
      const uint64_t inf = dtype == CHORUS_FLOAT16    ? 0x7c00
                           : dtype == CHORUS_BFLOAT16 ? 0x7f80
                           : dtype == CHORUS_FLOAT32  ? 0x7f800000
                                                      : 0x7ff0000000000000;
      for (std::vector<std::byte>* v : {&src, &inout}) {
        for (size_t i = 0; i < count; ++i) {
          uint64_t x = 0;
          std::memcpy(&x, v->data() + i * size, size);
          if (is_nan(dtype, x)) x = (x & sign) | inf;
          std::memcpy(v->data() + i * size, &x, size);
        }
      }
      std::string problems;
      // Position count: no NaN at all; else a quiet NaN with a payload at
      // position pos % span, in src for the first span, in inout for the second.
      const size_t span = 512 / size;
      for (size_t pos = 0; pos <= 2 * span && problems.size() < 2000; ++pos) {
        std::vector<std::byte> a = inout;
        std::vector<std::byte> b = src;
        if (pos < 2 * span) {
          const uint64_t nan = (pos % 2 ? sign : 0) | inf | (inf >> 1 & ~inf) | 1;
          std::memcpy((pos < span ? b : a).data() + (pos % span) * size, &nan, size);
        }
        std::vector<std::byte> base;
        for (const ReduceIsa isa : runnable_isas()) {
          std::vector<std::byte> out = a;
          reduce_kernel_for_isa(dtype, op, isa)(b.data(), out.data(), count);
          for (size_t i = 0; i < count * size; i += size) {
            const std::string why = check_element(dtype, op, &a[i], &b[i], &out[i]);
            const bool same = base.empty() || std::memcmp(&base[i], &out[i], size) == 0;
            if (!why.empty() || !same) {
              problems += std::string(reduce_isa_name(isa)) + " NaN at " + std::to_string(pos) +
                          " [" + std::to_string(i / size) + "] " +
                          (why.empty() ? "differs from baseline" : why) + "\n";
            }
          }
          if (base.empty()) base = out;
        }
      }
      CHECK(problems == "");
    }
  }
}
