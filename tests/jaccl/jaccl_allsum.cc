// A JACCL program, written against the jaccl headers only: an all_sum
// benchmark in the style of JACCL's allreduce_bench (sizes x dtypes, timings
// on rank 0) in which every rank checks every element of every result against
// the exact sum, followed by checked all_max, all_min, all_gather,
// sum_scatter and send/recv.
//
// Usage: jaccl_allsum [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] [-n ITERS]
//                     [-w WARMUP] [--expect-size N] [--expect-rank R]
//                     [--check-max N]  (cap of the fixed checks' largest counts)
// Sizes take K/M/G suffixes. Exit status 0 only if every check passed.
#include <jaccl/jaccl.h>
#include <jaccl/types.h>

#include "test_values.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using jaccl_test::Checker;
using jaccl_test::from_int;
using jaccl_test::signed_value;
using jaccl_test::sum_value;

struct Options {
  size_t min_bytes = 8;
  size_t max_bytes = 16u << 20;
  size_t factor = 4;
  int iters = 3;
  int warmup = 1;
  int expect_size = -1;
  int expect_rank = -1;
  // The fixed checks' largest counts (elements; bytes for all_gather and
  // send/recv): --check-max shrinks them for slow machines (the soft-RoCE
  // guest), keeping every case.
  size_t check_max = 4u << 20;
};

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end && (*end == 'K' || *end == 'k')) v *= 1024.0;
  if (end && (*end == 'M' || *end == 'm')) v *= 1024.0 * 1024.0;
  if (end && (*end == 'G' || *end == 'g')) v *= 1024.0 * 1024.0 * 1024.0;
  return size_t(v);
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "-b" && has_value) {
      o.min_bytes = parse_size(argv[++i]);
    } else if (a == "-e" && has_value) {
      o.max_bytes = parse_size(argv[++i]);
    } else if (a == "-f" && has_value) {
      o.factor = size_t(std::atoi(argv[++i]));
    } else if (a == "-n" && has_value) {
      o.iters = std::atoi(argv[++i]);
    } else if (a == "-w" && has_value) {
      o.warmup = std::atoi(argv[++i]);
    } else if (a == "--expect-size" && has_value) {
      o.expect_size = std::atoi(argv[++i]);
    } else if (a == "--check-max" && has_value) {
      o.check_max = parse_size(argv[++i]);
    } else if (a == "--expect-rank" && has_value) {
      o.expect_rank = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] "
                   "[--expect-size N] [--expect-rank R] [--check-max BYTES]\n",
                   argv[0]);
      return false;
    }
  }
  if (o.min_bytes == 0 || o.factor < 2 || o.iters < 1 || o.warmup < 0) {
    std::fprintf(stderr, "%s: need -b > 0, -f >= 2, -n >= 1, -w >= 0\n", argv[0]);
    return false;
  }
  return true;
}

std::string label(const char* op, int dtype, size_t count) {
  return std::string(op) + " " + jaccl_test::dtype_name(dtype) + " count=" + std::to_string(count);
}

template <typename T>
void fill(std::vector<T>& v, int rank, int (*value)(int, size_t)) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = from_int<T>(value(rank, i));
}

/// One row of the table: time `iters` all_sums of `count` elements, then
/// check the out-of-place and an in-place result element by element.
template <typename T>
void bench_row(jaccl::Group& g, Checker& check, const Options& o, int dtype, size_t count) {
  const int rank = g.rank();
  const int size = g.size();
  const size_t bytes = count * sizeof(T);
  std::vector<T> in(count), out(count), inplace(count);
  fill(in, rank, sum_value);
  auto expected = [size](size_t i) {
    int s = 0;
    for (int r = 0; r < size; ++r) s += sum_value(r, i);
    return double(s);
  };

  for (int i = 0; i < o.warmup; ++i) g.all_sum(in.data(), out.data(), bytes, dtype);
  g.barrier();
  std::vector<double> times_us;
  for (int i = 0; i < o.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    g.all_sum(in.data(), out.data(), bytes, dtype);
    const auto t1 = std::chrono::steady_clock::now();
    times_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(times_us.begin(), times_us.end());
  bool ok = check.elements(label("all_sum", dtype, count), out.data(), count, expected);

  fill(inplace, rank, sum_value);
  g.all_sum(inplace.data(), inplace.data(), bytes, dtype);
  ok = check.elements(label("all_sum in-place", dtype, count), inplace.data(), count, expected) &&
       ok;

  if (rank == 0) {
    const double us = times_us[times_us.size() / 2];  // the median iteration
    const double algbw = double(bytes) / us / 1e3;  // GB/s
    const double busbw = algbw * 2.0 * (size - 1) / size;
    std::printf("%12zu %12zu %10s %12.1f %12.3f %12.3f %7s\n", bytes, count,
                jaccl_test::dtype_name(dtype), us, algbw, busbw, ok ? "OK" : "FAIL");
    std::fflush(stdout);
  }
}

template <typename T>
void check_max_min(jaccl::Group& g, Checker& check, int dtype, size_t count) {
  const int size = g.size();
  std::vector<T> in(count), out(count);
  fill(in, g.rank(), signed_value);
  g.all_max(in.data(), out.data(), count * sizeof(T), dtype);
  check.elements(label("all_max", dtype, count), out.data(), count, [size](size_t i) {
    int m = signed_value(0, i);
    for (int r = 1; r < size; ++r) m = std::max(m, signed_value(r, i));
    return double(m);
  });
  g.all_min(in.data(), out.data(), count * sizeof(T), dtype);
  check.elements(label("all_min", dtype, count), out.data(), count, [size](size_t i) {
    int m = signed_value(0, i);
    for (int r = 1; r < size; ++r) m = std::min(m, signed_value(r, i));
    return double(m);
  });
}

template <typename T>
void check_sum_scatter(jaccl::Group& g, Checker& check, int dtype, size_t count) {
  const int rank = g.rank();
  const int size = g.size();
  std::vector<T> in(count * size_t(size)), out(count);
  fill(in, rank, sum_value);
  g.sum_scatter(in.data(), out.data(), count * sizeof(T), dtype);
  check.elements(label("sum_scatter", dtype, count), out.data(), count, [=](size_t i) {
    int s = 0;
    for (int r = 0; r < size; ++r) s += sum_value(r, size_t(rank) * count + i);
    return double(s);
  });
}

uint8_t byte_of(int rank, size_t i) { return uint8_t(rank * 31 + i * 7 + 1); }

void check_all_gather(jaccl::Group& g, Checker& check, size_t n_bytes) {
  const int size = g.size();
  std::vector<uint8_t> in(n_bytes), out(n_bytes * size_t(size));
  for (size_t i = 0; i < n_bytes; ++i) in[i] = byte_of(g.rank(), i);
  g.all_gather(in.data(), out.data(), n_bytes);
  check.elements("all_gather bytes=" + std::to_string(n_bytes), out.data(), out.size(),
                 [=](size_t i) { return double(byte_of(int(i / n_bytes), i % n_bytes)); });
}

/// Every rank sends to its right neighbour and receives from its left; even
/// ranks send first so blocking sends cannot wait on each other in a cycle.
void check_send_recv(jaccl::Group& g, Checker& check, size_t n_bytes) {
  const int rank = g.rank();
  const int size = g.size();
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  std::vector<uint8_t> out(n_bytes), in(n_bytes, 0);
  for (size_t i = 0; i < n_bytes; ++i) out[i] = byte_of(rank, i);
  if (rank % 2 == 0) {
    g.send(out.data(), n_bytes, right);
    g.recv(in.data(), n_bytes, left);
  } else {
    g.recv(in.data(), n_bytes, left);
    g.send(out.data(), n_bytes, right);
  }
  check.elements(
      "send/recv from rank " + std::to_string(left) + " bytes=" + std::to_string(n_bytes),
      in.data(), n_bytes, [=](size_t i) { return double(byte_of(left, i)); });
}

int run(const Options& o) {
  std::shared_ptr<jaccl::Group> group = jaccl::init(/*strict=*/true);
  jaccl::Group& g = *group;
  const int rank = g.rank();
  const int size = g.size();
  Checker check(rank);

  if (o.expect_size >= 0 && size != o.expect_size)
    check.fail("group size is " + std::to_string(size) + ", expected " +
               std::to_string(o.expect_size));
  if (o.expect_rank >= 0 && rank != o.expect_rank)
    check.fail("rank is " + std::to_string(rank) + ", expected " + std::to_string(o.expect_rank));

  const int dtypes[] = {jaccl::Float32, jaccl::BFloat16, jaccl::Int32, jaccl::Float16};
  if (rank == 0) {
    std::printf("# jaccl all_sum: %d ranks, %d warmup + %d timed iterations, %zu B .. %zu B\n",
                size, o.warmup, o.iters, o.min_bytes, o.max_bytes);
    std::printf("%12s %12s %10s %12s %12s %12s %7s\n", "bytes", "count", "type", "median(us)",
                "algbw(GB/s)", "busbw(GB/s)", "check");
  }
  for (int dtype : dtypes) {
    const size_t element = jaccl_test::dtype_size(dtype);
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      const size_t count = std::max<size_t>(1, bytes / element);
      jaccl::dispatch_all_types(dtype, [&](auto tag) {
        using T = JACCL_GET_TYPE(tag);
        if constexpr (!std::is_same_v<T, bool>) bench_row<T>(g, check, o, dtype, count);
      });
    }
  }

  // Counts that do not split evenly over the ranks, plus one larger than a
  // pipeline slot.
  const size_t counts[] = {1, 3, 17, 1001, 65537, 300001};
  auto capped = [&](size_t n) { return std::min(n, o.check_max + n % 64); };
  for (int dtype : dtypes)
    for (size_t full : counts) {
      const size_t count = capped(full);
      jaccl::dispatch_all_types(dtype, [&](auto tag) {
        using T = JACCL_GET_TYPE(tag);
        if constexpr (!std::is_same_v<T, bool>) {  // no vector<bool>::data()
          check_max_min<T>(g, check, dtype, count);
          check_sum_scatter<T>(g, check, dtype, count);
        }
      });
    }
  for (size_t n : {size_t(1), size_t(7), size_t(4099), size_t(1u << 20) + 5})
    check_all_gather(g, check, capped(n));
  if (size > 1)
    for (size_t n : {size_t(1), size_t(4099), size_t(4u << 20) + 1})
      check_send_recv(g, check, capped(n));

  // Everyone's verdict, so every rank exits with the job's result.
  int32_t failures = check.failures();
  int32_t total = 0;
  g.all_sum(&failures, &total, sizeof(total), jaccl::Int32);
  g.barrier();
  if (rank == 0)
    std::printf("# %s: %d checks per rank, %d failures over all ranks\n",
                total == 0 ? "PASS" : "FAIL", check.checks(), total);
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jaccl_allsum: %s\n", e.what());
    return 1;
  }
}
