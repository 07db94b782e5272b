// kernels-bench: the reduction kernels of core/reduce.h against memcpy of the
// same number of bytes, with Google Benchmark. Not part of ctest.
//
//   build/bin/kernels-bench --benchmark_filter=float32/sum/avx512/
//
// A kernel reads two arrays and writes one (inout op= src), memcpy reads one
// and writes one, so "bytes_per_second" counts the bytes of one operand (what
// a collective moves) and memcpy's rate is the bound to compare against.
// Every supported (dtype, op) pair runs at every instruction set level this
// CPU has (baseline, avx2, avx512, avx512bf16), with the buffers placed three
// ways (kPlacements): both on a 64-byte boundary (a64), both 16 bytes past one
// (m16: what malloc hands out for large blocks, glibc's mmap'd chunks start 16
// bytes into a page), and inout 16 and src 48 bytes past one (m16s48: no
// prologue can align both). Names read dtype/op/isa/placement/bytes and
// memcpy/placement/bytes; select with --benchmark_filter.
#include <benchmark/benchmark.h>

#include "core/reduce.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

using chorus::core::ReduceIsa;

// Sizes in bytes of one operand: L1-resident, L2, and well beyond the caches.
constexpr std::int64_t kSizes[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};

/// Where the two buffers start, in bytes past a 64-byte boundary.
struct Placement {
  const char* name;
  std::size_t inout_offset;
  std::size_t src_offset;
};
constexpr Placement kPlacements[] = {{"a64", 0, 0}, {"m16", 16, 16}, {"m16s48", 16, 48}};

/// `bytes` bytes starting `offset` bytes past a 64-byte boundary.
class PlacedBuffer {
 public:
  PlacedBuffer(std::size_t bytes, std::size_t offset)
      : storage_(
            static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + offset + 127) / 64 * 64))),
        data_(storage_.get() + offset),
        bytes_(bytes) {
    if (!storage_) throw std::bad_alloc();
  }
  unsigned char* data() { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> storage_;
  unsigned char* data_;
  std::size_t bytes_;
};

template <class T>
void put(unsigned char* p, T x) {
  std::memcpy(p, &x, sizeof x);
}

/// Small values of every dtype, so that repeated sums stay finite for long
/// and no kernel meets NaNs or subnormals (their own slower paths). Products
/// start at 1 or above (no zeros, no underflow) and may grow to infinity,
/// which costs nothing extra.
void fill(PlacedBuffer& v, int dtype, int op) {
  const std::size_t esize = chorus_dtype_size(dtype);
  const bool prod = op == CHORUS_PROD;
  for (std::size_t i = 0; i < v.size() / esize; ++i) {
    unsigned char* p = v.data() + i * esize;
    const double real = prod ? 1.0 + static_cast<double>(i % 17) / 64 : (i % 17) * 0.25;
    const std::uint64_t integer = prod ? 1 + i % 3 : i % 1000;
    switch (dtype) {
      case CHORUS_BOOL:
        put<std::uint8_t>(p, i % 3 != 0 ? 1 : 0);
        break;
      case CHORUS_FLOAT16:  // ~1.0 .. 1.06
        put<std::uint16_t>(p, static_cast<std::uint16_t>(0x3c00 + (i % 64)));
        break;
      case CHORUS_BFLOAT16:  // ~1.0 .. 1.5
        put<std::uint16_t>(p, static_cast<std::uint16_t>(0x3f80 + (i % 64)));
        break;
      case CHORUS_FLOAT32:
        put(p, static_cast<float>(real));
        break;
      case CHORUS_COMPLEX64:
        put(p, static_cast<float>(real));
        put(p + 4, static_cast<float>(real));
        break;
      case CHORUS_FLOAT64:
        put(p, real);
        break;
      default:  // integers, little-endian: the low bytes of a small value
        std::memcpy(p, &integer, esize);
        break;
    }
  }
}

void BM_reduce(benchmark::State& state, int dtype, int op, ReduceIsa isa, Placement place) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const chorus_reduce_fn_t fn = chorus::core::reduce_kernel_for_isa(dtype, op, isa);
  if (fn == nullptr) {
    state.SkipWithError("kernel not available at this instruction set level");
    return;
  }
  PlacedBuffer src(bytes, place.src_offset);
  PlacedBuffer inout(bytes, place.inout_offset);
  fill(src, dtype, op);
  fill(inout, dtype, op);
  const std::size_t count = bytes / chorus_dtype_size(dtype);
  for (auto _ : state) {
    fn(src.data(), inout.data(), count);
    benchmark::DoNotOptimize(inout.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

void BM_memcpy(benchmark::State& state, Placement place) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  PlacedBuffer src(bytes, place.src_offset);
  PlacedBuffer dst(bytes, place.inout_offset);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

void apply_sizes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t s : kSizes) b->Arg(s);
}

const int kRegistered = [] {
  for (const Placement& place : kPlacements) {
    const std::string name = std::string("memcpy/") + place.name;
    benchmark::RegisterBenchmark(name.c_str(), BM_memcpy, place)->Apply(apply_sizes);
  }
  struct Dtype {
    int id;
    const char* name;
  };
  const Dtype dtypes[] = {
      {CHORUS_FLOAT32, "float32"}, {CHORUS_BFLOAT16, "bfloat16"}, {CHORUS_FLOAT16, "float16"},
      {CHORUS_INT32, "int32"},     {CHORUS_FLOAT64, "float64"},   {CHORUS_COMPLEX64, "complex64"},
      {CHORUS_BOOL, "bool"},       {CHORUS_INT8, "int8"},         {CHORUS_UINT8, "uint8"},
      {CHORUS_INT16, "int16"},     {CHORUS_UINT16, "uint16"},     {CHORUS_UINT32, "uint32"},
      {CHORUS_INT64, "int64"},     {CHORUS_UINT64, "uint64"}};
  const std::pair<int, const char*> ops[] = {
      {CHORUS_SUM, "sum"}, {CHORUS_PROD, "prod"}, {CHORUS_MAX, "max"}, {CHORUS_MIN, "min"}};
  std::vector<ReduceIsa> isas;
  for (const ReduceIsa isa :
       {ReduceIsa::kAvx512Bf16, ReduceIsa::kAvx512, ReduceIsa::kAvx2, ReduceIsa::kBaseline}) {
    if (chorus::core::reduce_isa_unavailable_reason(isa)[0] == '\0') isas.push_back(isa);
  }
  for (const Dtype& d : dtypes) {
    for (const auto& [op, op_name] : ops) {
      if (chorus::core::reduce_unsupported_reason(d.id, op)[0] != '\0') continue;
      for (const ReduceIsa isa : isas) {
        for (const Placement& place : kPlacements) {
          const std::string name = std::string(d.name) + "/" + op_name + "/" +
                                   chorus::core::reduce_isa_name(isa) + "/" + place.name;
          benchmark::RegisterBenchmark(name.c_str(), BM_reduce, d.id, op, isa, place)
              ->Apply(apply_sizes);
        }
      }
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
