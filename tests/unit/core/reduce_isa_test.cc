// The reduction kernels' instruction sets against each other and against
// the reference: bit-for-bit agreement with the baseline, every tail length
// and every start offset of inout and src (guard bytes catch stray writes).

#include "reduce_reference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace chorus::reduce_test;

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
