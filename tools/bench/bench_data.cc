#include "tools/bench/bench_data.h"

#include <chorus/types.h>

#include <complex>
#include <cstring>

namespace chorus::bench {
namespace {

bool is_signed_int(int d) {
  return d == CHORUS_INT8 || d == CHORUS_INT16 || d == CHORUS_INT32 || d == CHORUS_INT64;
}
bool is_unsigned_int(int d) {
  return d == CHORUS_UINT8 || d == CHORUS_UINT16 || d == CHORUS_UINT32 || d == CHORUS_UINT64;
}

/// One abstract input value: a complex number with integer parts.
using Value = std::complex<double>;

/// Input of `rank` at element `j` for a reduction `op` (or a data movement when op < 0).
Value gen(int dtype, int op, int rank, size_t j) {
  const long r = rank;
  const long i = long(j % 1000003);
  if (op < 0) return {double((r * 131 + i * 7) % 251), dtype == CHORUS_COMPLEX64 ? double((r + i) % 17) : 0.0};
  if (dtype == CHORUS_BOOL) {
    switch (op) {
      case CHORUS_SUM:
      case CHORUS_MAX:
        return {double((r + i) % 3 == 0), 0};
      default:
        return {double((r * 3 + i) % 7 != 0), 0};
    }
  }
  switch (op) {
    case CHORUS_SUM:
      return {double((r + i) % 4), dtype == CHORUS_COMPLEX64 ? double((r + 2 * i) % 3) : 0.0};
    case CHORUS_PROD:
      if (dtype == CHORUS_COMPLEX64) {
        long k = (r + i) % 7;
        return k == 0 ? Value(2, 0) : k == 1 ? Value(0, 1) : Value(1, 0);
      }
      return {(r + i) % 5 == 0 ? 2.0 : 1.0, 0};
    default: {
      long v = (r * 7 + i * 3) % 19;
      if (!is_unsigned_int(dtype)) v -= 9;
      return {double(v), 0};
    }
  }
}

Value combine(int dtype, int op, Value a, Value b) {
  if (dtype == CHORUS_BOOL) {
    bool x = a.real() != 0, y = b.real() != 0;
    return {double((op == CHORUS_SUM || op == CHORUS_MAX) ? (x || y) : (x && y)), 0};
  }
  switch (op) {
    case CHORUS_SUM:
      return a + b;
    case CHORUS_PROD:
      return a * b;
    case CHORUS_MAX:
      return {std::max(a.real(), b.real()), 0};
    default:
      return {std::min(a.real(), b.real()), 0};
  }
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return uint16_t(bits >> 16);  // exact: every value used here fits in bf16
}

/// Stores `v` as element `j` of `dtype`. Integer products are taken modulo
/// 2^64 and then truncated, which is the wrap-around the kernels implement.
void store(int dtype, void* base, size_t j, Value v, uint64_t int_bits) {
  auto* p = static_cast<std::byte*>(base) + j * element_size(dtype);
  auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (dtype) {
    case CHORUS_BOOL: put(uint8_t(v.real() != 0)); break;
    case CHORUS_INT8: put(int8_t(int64_t(int_bits))); break;
    case CHORUS_INT16: put(int16_t(int64_t(int_bits))); break;
    case CHORUS_INT32: put(int32_t(int64_t(int_bits))); break;
    case CHORUS_INT64: put(int64_t(int_bits)); break;
    case CHORUS_UINT8: put(uint8_t(int_bits)); break;
    case CHORUS_UINT16: put(uint16_t(int_bits)); break;
    case CHORUS_UINT32: put(uint32_t(int_bits)); break;
    case CHORUS_UINT64: put(uint64_t(int_bits)); break;
    case CHORUS_FLOAT16: put(_Float16(float(v.real()))); break;
    case CHORUS_BFLOAT16: put(to_bf16(float(v.real()))); break;
    case CHORUS_FLOAT32: put(float(v.real())); break;
    case CHORUS_FLOAT64: put(double(v.real())); break;
    case CHORUS_COMPLEX64: {
      float c[2] = {float(v.real()), float(v.imag())};
      std::memcpy(p, c, 8);
      break;
    }
    default: break;
  }
}

uint64_t int_of(Value v) { return uint64_t(int64_t(v.real())); }

/// Integer reduction in 64-bit two's complement, so sums and products wrap
/// exactly as the narrower kernels do.
uint64_t combine_int(int dtype, int op, uint64_t a, uint64_t b) {
  switch (op) {
    case CHORUS_SUM: return a + b;
    case CHORUS_PROD: return a * b;
    case CHORUS_MAX:
      return is_signed_int(dtype) ? uint64_t(std::max(int64_t(a), int64_t(b))) : std::max(a, b);
    default:
      return is_signed_int(dtype) ? uint64_t(std::min(int64_t(a), int64_t(b))) : std::min(a, b);
  }
}

void reduce_into(int dtype, int op, int nranks, size_t j, void* out, size_t slot) {
  Value acc = gen(dtype, op, 0, j);
  uint64_t iacc = int_of(acc);
  for (int r = 1; r < nranks; ++r) {
    Value v = gen(dtype, op, r, j);
    acc = combine(dtype, op, acc, v);
    iacc = combine_int(dtype, op, iacc, int_of(v));
  }
  store(dtype, out, slot, acc, iacc);
}

}  // namespace

size_t element_size(int dtype) { return chorus_dtype_size(dtype); }

void fill_input(int collective, int dtype, int op, int rank, int nranks, void* in, size_t elems,
                size_t count) {
  (void)nranks;
  (void)count;
  bool reduces = collective == CHORUS_COLL_ALL_REDUCE || collective == CHORUS_COLL_REDUCE_SCATTER ||
                 collective == CHORUS_COLL_REDUCE;
  int eff_op = reduces ? op : -1;
  for (size_t j = 0; j < elems; ++j) {
    Value v = gen(dtype, eff_op, rank, j);
    store(dtype, in, j, v, int_of(v));
  }
}

void expected_output(int collective, bool sendrecv, int dtype, int op, int rank, int nranks,
                     int root, size_t count, std::vector<std::byte>& out) {
  size_t es = element_size(dtype);
  if (sendrecv) {
    out.assign(count * es, std::byte{0});
    int left = (rank - 1 + nranks) % nranks;
    for (size_t j = 0; j < count; ++j) {
      Value v = gen(dtype, -1, left, j);
      store(dtype, out.data(), j, v, int_of(v));
    }
    return;
  }
  switch (collective) {
    case CHORUS_COLL_ALL_REDUCE:
      out.assign(count * es, std::byte{0});
      for (size_t j = 0; j < count; ++j) reduce_into(dtype, op, nranks, j, out.data(), j);
      break;
    case CHORUS_COLL_REDUCE_SCATTER:
      out.assign(count * es, std::byte{0});
      for (size_t j = 0; j < count; ++j)
        reduce_into(dtype, op, nranks, size_t(rank) * count + j, out.data(), j);
      break;
    case CHORUS_COLL_ALL_GATHER:
      out.assign(count * size_t(nranks) * es, std::byte{0});
      for (int q = 0; q < nranks; ++q)
        for (size_t j = 0; j < count; ++j) {
          Value v = gen(dtype, -1, q, j);
          store(dtype, out.data(), size_t(q) * count + j, v, int_of(v));
        }
      break;
    case CHORUS_COLL_BROADCAST:
      out.assign(count * es, std::byte{0});
      for (size_t j = 0; j < count; ++j) {
        Value v = gen(dtype, -1, root, j);
        store(dtype, out.data(), j, v, int_of(v));
      }
      break;
    case CHORUS_COLL_REDUCE:  // the all_reduce result, on the root only
      out.clear();
      if (rank != root) break;
      out.assign(count * es, std::byte{0});
      for (size_t j = 0; j < count; ++j) reduce_into(dtype, op, nranks, j, out.data(), j);
      break;
    case CHORUS_COLL_GATHER:  // the all_gather result, on the root only
      out.clear();
      if (rank != root) break;
      out.assign(count * size_t(nranks) * es, std::byte{0});
      for (int q = 0; q < nranks; ++q)
        for (size_t j = 0; j < count; ++j) {
          Value v = gen(dtype, -1, q, j);
          store(dtype, out.data(), size_t(q) * count + j, v, int_of(v));
        }
      break;
    case CHORUS_COLL_SCATTER:  // block `rank` of the root's input
      out.assign(count * es, std::byte{0});
      for (size_t j = 0; j < count; ++j) {
        Value v = gen(dtype, -1, root, size_t(rank) * count + j);
        store(dtype, out.data(), j, v, int_of(v));
      }
      break;
    case CHORUS_COLL_ALL_TO_ALL:  // block q: block `rank` of rank q's input
      out.assign(count * size_t(nranks) * es, std::byte{0});
      for (int q = 0; q < nranks; ++q)
        for (size_t j = 0; j < count; ++j) {
          Value v = gen(dtype, -1, q, size_t(rank) * count + j);
          store(dtype, out.data(), size_t(q) * count + j, v, int_of(v));
        }
      break;
    default:
      out.clear();
      break;
  }
}

uint64_t count_wrong(int dtype, const void* got, const void* expect, size_t elems) {
  size_t es = element_size(dtype);
  auto* g = static_cast<const std::byte*>(got);
  auto* e = static_cast<const std::byte*>(expect);
  // One memcmp of the whole buffer settles the common case (nothing wrong)
  // at memory speed; only a mismatch pays for the count per element.
  // (Nothing to compare at 0 elements, where the buffers may be null.)
  if (elems == 0 || std::memcmp(g, e, elems * es) == 0) return 0;
  uint64_t wrong = 0;
  for (size_t j = 0; j < elems; ++j) wrong += std::memcmp(g + j * es, e + j * es, es) != 0;
  return wrong;
}

}  // namespace chorus::bench
