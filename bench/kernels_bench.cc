// kernels-bench: the reduction kernels of core/reduce.h against memcpy of the
// same number of bytes, with Google Benchmark. Not part of ctest.
//
//   build/bin/kernels-bench --benchmark_filter=float32/sum/avx512/
//
// A kernel reads two arrays and writes one (inout op= src), memcpy reads one
// and writes one, so "bytes_per_second" counts the bytes of one operand (what
// a collective moves) and memcpy's rate is the bound to compare against.
// Each size is run at every instruction set level this CPU has (baseline,
// avx2, avx512, avx512bf16), to show what each level's vector code buys, and with the
// buffers placed three ways (kPlacements): both on a 64-byte boundary, both
// 16 bytes past one (what malloc hands out for large blocks: glibc's mmap'd
// chunks start 16 bytes into a page), and inout and src at different offsets
// from a boundary, so that no prologue can align both. Names read
// dtype/op/isa/placement/bytes, and memcpy/placement/bytes.
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

void fill(PlacedBuffer& v, int dtype) {
  // Small values of every type, so sums stay finite and take the fast path.
  const std::size_t esize = chorus_dtype_size(dtype);
  for (std::size_t i = 0; i < v.size() / esize; ++i) {
    unsigned char* p = v.data() + i * esize;
    switch (dtype) {
      case CHORUS_FLOAT32: {
        const float f = static_cast<float>(i % 17) * 0.25f;
        std::memcpy(p, &f, 4);
        break;
      }
      case CHORUS_INT32: {
        const std::int32_t x = static_cast<std::int32_t>(i % 1000);
        std::memcpy(p, &x, 4);
        break;
      }
      case CHORUS_BFLOAT16: {
        const std::uint16_t x = static_cast<std::uint16_t>(0x3f80 + (i % 64));  // ~1.0 .. 1.5
        std::memcpy(p, &x, 2);
        break;
      }
      case CHORUS_FLOAT16: {
        const std::uint16_t x = static_cast<std::uint16_t>(0x3c00 + (i % 64));  // ~1.0 .. 1.06
        std::memcpy(p, &x, 2);
        break;
      }
      default:
        std::memset(p, 0, esize);
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
  fill(src, dtype);
  fill(inout, dtype);
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
  const Dtype dtypes[] = {{CHORUS_FLOAT32, "float32"},
                          {CHORUS_BFLOAT16, "bfloat16"},
                          {CHORUS_FLOAT16, "float16"},
                          {CHORUS_INT32, "int32"}};
  const std::pair<int, const char*> ops[] = {
      {CHORUS_SUM, "sum"}, {CHORUS_MAX, "max"}, {CHORUS_MIN, "min"}};
  std::vector<ReduceIsa> isas;
  for (const ReduceIsa isa :
       {ReduceIsa::kAvx512Bf16, ReduceIsa::kAvx512, ReduceIsa::kAvx2, ReduceIsa::kBaseline}) {
    if (chorus::core::reduce_isa_unavailable_reason(isa)[0] == '\0') isas.push_back(isa);
  }
  for (const Dtype& d : dtypes) {
    for (const auto& [op, op_name] : ops) {
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
