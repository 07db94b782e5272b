// Values and checks shared by the JACCL test programs. Written against the
// jaccl headers only, as a JACCL user would.
#ifndef TESTS_JACCL_TEST_VALUES_H_
#define TESTS_JACCL_TEST_VALUES_H_

#include <jaccl/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

namespace jaccl_test {

/// Small integers, exact in every dtype under test (bfloat16 holds integers
/// up to 256 exactly), so sums over up to 32 ranks are exact in any order.
/// Depends on rank and index, so a misplaced chunk shows.
inline int sum_value(int rank, size_t i) { return int((i + 3 * size_t(rank)) % 8) + 1; }

/// Signed values in [-5, 5] for max/min.
inline int signed_value(int rank, size_t i) { return int((i * 5 + 3 * size_t(rank)) % 11) - 5; }

template <typename T>
T from_int(int v) {
  if constexpr (std::is_same_v<T, jaccl::complex64_t>)
    return T(float(v), 0.0f);
  else if constexpr (std::is_same_v<T, jaccl::float16_t> || std::is_same_v<T, jaccl::bfloat16_t>)
    return T(float(v));
  else
    return T(v);
}

template <typename T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, jaccl::complex64_t>)
    return double(x.real());
  else if constexpr (std::is_same_v<T, jaccl::float16_t> || std::is_same_v<T, jaccl::bfloat16_t>)
    return double(float(x));
  else
    return double(x);
}

inline const char* dtype_name(int dtype) {
  switch (dtype) {
    case jaccl::Float32:
      return "float32";
    case jaccl::BFloat16:
      return "bfloat16";
    case jaccl::Int32:
      return "int32";
    case jaccl::Float16:
      return "float16";
    default:
      return "other";
  }
}

inline size_t dtype_size(int dtype) {
  size_t size = 0;
  jaccl::dispatch_all_types(dtype, [&](auto tag) { size = sizeof(JACCL_GET_TYPE(tag)); });
  return size;
}

/// Counts failed checks and prints the first few of each, prefixed by rank.
class Checker {
 public:
  explicit Checker(int rank) : rank_(rank) {}

  /// Compare got[i] with expected(i) for i < count; returns true if all match.
  template <typename T, typename Expected>
  bool elements(const std::string& what, const T* got, size_t count, Expected expected) {
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      const double want = expected(i);
      const double have = to_double(got[i]);
      if (have != want) {
        if (bad < 3)
          std::fprintf(stderr, "rank %d: FAIL %s: element %zu is %g, expected %g\n", rank_,
                       what.c_str(), i, have, want);
        ++bad;
      }
    }
    if (bad > 3)
      std::fprintf(stderr, "rank %d: FAIL %s: %zu of %zu elements wrong\n", rank_, what.c_str(),
                   bad, count);
    ++checks_;
    if (bad) ++failures_;
    return bad == 0;
  }

  void fail(const std::string& what) {
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank_, what.c_str());
    ++checks_;
    ++failures_;
  }

  void pass() { ++checks_; }

  int checks() const { return checks_; }
  int failures() const { return failures_; }

 private:
  int rank_;
  int checks_ = 0;
  int failures_ = 0;
};

}  // namespace jaccl_test

#endif  // TESTS_JACCL_TEST_VALUES_H_
