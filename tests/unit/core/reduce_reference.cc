// The reference side of the reduction-kernel tests (reduce_reference.h):
// expected results computed from the definitions of each dtype and op,
// never by calling a kernel, and random test data rich in special values.
// float16/bfloat16 references compute exactly in double and round once with
// their own rounding code, independent of the kernels' float path.
#include "reduce_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

namespace chorus::reduce_test {
namespace {

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

template <class F>
F pick(std::mt19937_64& rng, std::initializer_list<F> values) {
  return values.begin()[rng() % values.size()];
}

}  // namespace

bool supported(int dtype, int op) {
  return !(dtype == CHORUS_COMPLEX64 && (op == CHORUS_MAX || op == CHORUS_MIN));
}

std::vector<ReduceIsa> runnable_isas() {
  std::vector<ReduceIsa> isas;
  for (const ReduceIsa isa : kAllIsas) {
    if (reduce_kernel_for_isa(CHORUS_FLOAT32, CHORUS_SUM, isa) != nullptr) isas.push_back(isa);
  }
  return isas;
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

}  // namespace chorus::reduce_test
