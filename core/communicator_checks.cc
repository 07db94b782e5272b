// Issue-time argument checks: dtype, op, buffer size and address range,
// root, aliasing and all_to_allv counts, checked on the caller's thread
// before a call is queued (core/api.cc), so a bad argument fails at once
// instead of inside an algorithm.

#include "core/call_checks.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/limits.h"
#include "core/reduce.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace chorus::core {

namespace {

std::string dtype_list() {
  std::string s;
  for (int d = 0; d < CHORUS_DTYPE_COUNT; ++d)
    s += (d ? ", " : "") + std::string(chorus_dtype_name(d));
  return s;
}

Status check_dtype(int dtype) {
  if (chorus_dtype_size(dtype) == 0)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "unknown dtype " + std::to_string(dtype) + " (valid: " + dtype_list() + ")"};
  return Status::ok();
}

/// INVALID_ARGUMENT when `in` and `out` share bytes; `allowed` describes the
/// only overlapping form the collective accepts (empty: none). A C string,
/// so that the check costs no allocation on every call.
Status check_disjoint(const char* what, const void* in, uint64_t in_bytes, const void* out,
                      uint64_t out_bytes, const char* allowed) {
  if (!ranges_overlap(reinterpret_cast<uintptr_t>(in), in_bytes, reinterpret_cast<uintptr_t>(out),
                      out_bytes))
    return Status::ok();
  std::ostringstream os;
  os << what << ": input [" << in << ", +" << in_bytes << " bytes) and output [" << out << ", +"
     << out_bytes << " bytes) partly overlap; "
     << (*allowed == '\0'
             ? std::string("the buffers must be disjoint")
             : "the only overlap allowed is " + std::string(allowed) + ", else disjoint buffers")
     << " (docs/architecture.md, Buffers and aliasing)";
  return {CHORUS_ERR_INVALID_ARGUMENT, os.str()};
}

}  // namespace

Status check_buffer(const void* p, size_t count, size_t blocks, int dtype, const char* name) {
  // A known dtype has a size: only an unknown one pays for check_dtype's
  // Status (this runs several times per call).
  const size_t esize = chorus_dtype_size(dtype);
  if (esize == 0) return check_dtype(dtype);
  const auto bytes = buffer_bytes(count, blocks, esize);
  if (!bytes) {
    std::string size = "count " + std::to_string(count) + " of " + chorus_dtype_name(dtype) + " (" +
                       std::to_string(esize) + " bytes each)";
    if (blocks > 1) size += " times " + std::to_string(blocks) + " ranks";
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(name) + ": " + size + " overflows the largest buffer Chorus accepts, " +
                std::to_string(kMaxBufferBytes) +
                " bytes (PTRDIFF_MAX); split the operation into smaller calls"};
  }
  if (count > 0 && p == nullptr)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(name) + " is NULL with count " + std::to_string(count)};
  if (range_wraps(reinterpret_cast<uintptr_t>(p), *bytes)) {
    std::ostringstream os;
    os << name << " at " << p << " with " << *bytes
       << " bytes runs past the end of the address space; count or pointer is wrong";
    return {CHORUS_ERR_INVALID_ARGUMENT, os.str()};
  }
  return Status::ok();
}

Status check_op(int dtype, int op) {
  if (reduce_kernel(dtype, op)) return Status::ok();
  std::string reason = reduce_unsupported_reason(dtype, op);
  return {CHORUS_ERR_INVALID_ARGUMENT, reason.empty() ? "unsupported dtype/op pair" : reason};
}

Status CallChecks::check_all_reduce(const void* in, const void* out, size_t count, int dtype,
                                    int op) const {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  if (in == out) return Status::ok();  // in place
  return check_disjoint("all_reduce", in, bytes, out, bytes, "in == out (in place)");
}

Status CallChecks::check_all_gather(const void* in, const void* out, size_t count,
                                    int dtype) const {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, size_t(check_size_), dtype, "output"); !st.is_ok())
    return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  // In place: the input is this rank's own block of the output.
  if (reinterpret_cast<uintptr_t>(in) ==
      reinterpret_cast<uintptr_t>(out) + uint64_t(check_rank_) * bytes)
    return Status::ok();
  return check_disjoint("all_gather", in, bytes, out, bytes * uint64_t(check_size_),
                        "in == out + rank * count (in place)");
}

Status CallChecks::check_reduce_scatter(const void* in, const void* out, size_t count, int dtype,
                                        int op) const {
  if (auto st = check_buffer(in, count, size_t(check_size_), dtype, "input"); !st.is_ok())
    return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  return check_disjoint("reduce_scatter", in, bytes * uint64_t(check_size_), out, bytes, "");
}

Status CallChecks::check_broadcast(const void* buf, size_t count, int dtype, int root) const {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (root < 0 || root >= check_size_)
    return {CHORUS_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(check_size_) +
                                             " ranks"};
  return Status::ok();
}

Status CallChecks::check_p2p(const char* what, const void* buf, size_t count, int dtype,
                             int peer) const {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (peer < 0 || peer >= check_size_ || peer == check_rank_)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(what) + ": peer " + std::to_string(peer) + " is not another rank (rank " +
                std::to_string(check_rank_) + " of " + std::to_string(check_size_) + ")"};
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Issue-time checks of reduce, gather, scatter, all_to_all(v)

namespace {

/// Whether [a, a+n) and [b, b+m) share a byte.
bool overlaps(const void* a, size_t n, const void* b, size_t m) {
  if (!a || !b || n == 0 || m == 0) return false;
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + m && y < x + n;
}

Status check_root(const char* what, int root, int size) {
  if (root < 0 || root >= size)
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + " root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(size) +
                                             " ranks (valid: 0.." + std::to_string(size - 1) + ")"};
  return Status::ok();
}

Status bad_overlap(const char* what, const std::string& allowed) {
  return {CHORUS_ERR_INVALID_ARGUMENT,
          std::string(what) + ": the input and output buffers overlap; " + allowed};
}

}  // namespace

Status CallChecks::check_reduce(const void* in, const void* out, size_t count, int dtype, int op,
                                int root) const {
  if (auto st = check_root("reduce", root, check_size_); !st.is_ok()) return st;
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (check_rank_ == root) {
    if (auto st = check_buffer(out, count, 1, dtype, "output (on the root)"); !st.is_ok())
      return st;
    size_t bytes = count * chorus_dtype_size(dtype);
    if (in != out && overlaps(in, bytes, out, bytes))
      return bad_overlap("reduce", "they must be the same buffer (in place) or disjoint");
  }
  return check_op(dtype, op);
}

Status CallChecks::check_gather(const void* in, const void* out, size_t count, int dtype,
                                int root) const {
  return check_rooted_blocks("gather", in, "input", out, "output", count, dtype, root);
}

Status CallChecks::check_scatter(const void* in, const void* out, size_t count, int dtype,
                                 int root) const {
  return check_rooted_blocks("scatter", out, "output", in, "input", count, dtype, root);
}

Status CallChecks::check_rooted_blocks(const char* what, const void* block_buf,
                                       const char* block_name, const void* root_buf,
                                       const char* root_name, size_t count, int dtype,
                                       int root) const {
  // gather and scatter are mirror images: every rank passes one block, the
  // root also the size*count buffer, whose block `root` may be the same memory.
  if (auto st = check_root(what, root, check_size_); !st.is_ok()) return st;
  if (auto st = check_buffer(block_buf, count, 1, dtype, block_name); !st.is_ok()) return st;
  if (check_rank_ != root) return Status::ok();
  const std::string on_root = std::string(root_name) + " (on the root)";
  if (auto st = check_buffer(root_buf, count, size_t(check_size_), dtype, on_root.c_str());
      !st.is_ok())
    return st;
  size_t block = count * chorus_dtype_size(dtype);
  const void* own = static_cast<const std::byte*>(root_buf) + size_t(root) * block;
  if (block_buf != own && overlaps(block_buf, block, root_buf, block * size_t(check_size_)))
    return bad_overlap(what, std::string("on the root the ") + block_name + " may be " +
                                 (root_name[0] == 'o' ? "out" : "in") +
                                 " + root*count (in place) and must otherwise lie outside the " +
                                 root_name);
  return Status::ok();
}

Status CallChecks::check_all_to_all(const void* in, const void* out, size_t count,
                                    int dtype) const {
  if (auto st = check_buffer(in, count, size_t(check_size_), dtype, "input"); !st.is_ok())
    return st;
  if (auto st = check_buffer(out, count, size_t(check_size_), dtype, "output"); !st.is_ok())
    return st;
  size_t bytes = count * chorus_dtype_size(dtype) * size_t(check_size_);
  if (in != out && overlaps(in, bytes, out, bytes))
    return bad_overlap("all_to_all", "they must be the same buffer (in place) or disjoint");
  return Status::ok();
}

Status CallChecks::check_all_to_allv(const void* in, const size_t* send_counts,
                                     const size_t* send_offsets, const void* out,
                                     const size_t* recv_counts, const size_t* recv_offsets,
                                     int dtype) const {
  if (auto st = check_dtype(dtype); !st.is_ok()) return st;
  if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "all_to_allv: send_counts, send_offsets, recv_counts and recv_offsets must each point "
            "to " +
                std::to_string(check_size_) + " entries (one per rank); one of them is NULL"};
  const size_t esize = chorus_dtype_size(dtype);
  const size_t max_elems = std::numeric_limits<size_t>::max() / esize;
  // Extent of each side in elements; every block must be addressable.
  auto extent = [&](const char* side, const size_t* counts, const size_t* offsets, const void* buf,
                    size_t& end) -> Status {
    end = 0;
    for (int p = 0; p < check_size_; ++p) {
      size_t c = counts[p], o = offsets[p];
      if (c == 0) continue;
      if (c > max_elems || o > max_elems - c)
        return {CHORUS_ERR_INVALID_ARGUMENT,
                std::string("all_to_allv: ") + side + "_offsets[" + std::to_string(p) + "] + " +
                    side + "_counts[" + std::to_string(p) + "] (" + std::to_string(o) + " + " +
                    std::to_string(c) + " elements of " + chorus_dtype_name(dtype) +
                    ") overflows the addressable size"};
      end = std::max(end, o + c);
    }
    if (end > 0 && buf == nullptr)
      return {CHORUS_ERR_INVALID_ARGUMENT, std::string("all_to_allv: ") +
                                               (side[0] == 's' ? "input" : "output") +
                                               " is NULL with non-zero " + side + "_counts"};
    return Status::ok();
  };
  size_t in_end = 0, out_end = 0;
  if (auto st = extent("send", send_counts, send_offsets, in, in_end); !st.is_ok()) return st;
  if (auto st = extent("recv", recv_counts, recv_offsets, out, out_end); !st.is_ok()) return st;
  if (send_counts[check_rank_] != recv_counts[check_rank_])
    return {CHORUS_ERR_INVALID_ARGUMENT, "all_to_allv: send_counts[" + std::to_string(check_rank_) +
                                             "] = " + std::to_string(send_counts[check_rank_]) +
                                             " but recv_counts[" + std::to_string(check_rank_) +
                                             "] = " + std::to_string(recv_counts[check_rank_]) +
                                             " on rank " + std::to_string(check_rank_) +
                                             "; what a rank sends itself it receives"};
  // Received blocks must be disjoint: two peers writing one place race.
  std::vector<std::pair<size_t, int>> blocks;
  for (int p = 0; p < check_size_; ++p)
    if (recv_counts[p] > 0) blocks.emplace_back(recv_offsets[p], p);
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    int a = blocks[i - 1].second, b = blocks[i].second;
    if (recv_offsets[a] + recv_counts[a] > recv_offsets[b])
      return {CHORUS_ERR_INVALID_ARGUMENT, "all_to_allv: the receive blocks of ranks " +
                                               std::to_string(a) + " and " + std::to_string(b) +
                                               " overlap in the output (recv_offsets/recv_counts)"};
  }
  if (overlaps(in, in_end * esize, out, out_end * esize))
    return bad_overlap("all_to_allv", "all_to_allv has no in-place form; use separate buffers");
  return Status::ok();
}

}  // namespace chorus::core
