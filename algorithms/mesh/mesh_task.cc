// The mesh task (mesh.h): turns one call of each collective into an executor
// Call (buffers, registrations, the local copies that need no peer), or into
// a barrier, and forwards the task's completions to it.
#include "algorithms/mesh/mesh.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace chorus::mesh {

using sdk::fail;

int Mesh::Task::start() {
  switch (call_.collective) {
    case CHORUS_COLL_ALL_REDUCE:
      return all_reduce();
    case CHORUS_COLL_ALL_GATHER:
      return all_gather();
    case CHORUS_COLL_REDUCE_SCATTER:
      return reduce_scatter();
    case CHORUS_COLL_BROADCAST:
      return broadcast();
    case CHORUS_COLL_BARRIER:
      return barrier();
    case CHORUS_COLL_REDUCE:
      return reduce();
    case CHORUS_COLL_GATHER:
      return gather();
    case CHORUS_COLL_SCATTER:
      return scatter();
    case CHORUS_COLL_ALL_TO_ALL:
      return all_to_all();
    case CHORUS_COLL_ALL_TO_ALLV:
      return exchange(static_cast<const std::byte*>(call_.in), call_.send_counts,
                      call_.send_offsets, static_cast<std::byte*>(call_.out), call_.recv_counts,
                      call_.recv_offsets);
    default:
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "mesh: asked for collective " + std::to_string(call_.collective) +
                      ", which it does not declare");
  }
}

int Mesh::Task::progress(const chorus_tp_completion_t* completions, size_t n) {
  if (executor_) return executor_->progress(completions, n);
  if (barrier_) return barrier_->progress(completions, n);
  return fail(env_, CHORUS_ERR_INTERNAL, "mesh: progress on a task that posted nothing");
}

int Mesh::Task::run(const Call& call) {
  executor_.emplace(env_);
  return executor_->start(call);
}

int Mesh::Task::all_reduce() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  if (env_->size == 1) {
    if (call_.in != call_.out) std::memmove(call_.out, call_.in, count * esize);
    return CHORUS_ALGO_TASK_DONE;
  }
  Call call;
  call.kernel = env_->reduce_kernel(call_.dtype, call_.op);
  if (!call.kernel) return fail(env_, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  const size_t bytes = count * esize;
  call.kind = bytes <= mesh_.settings.one_shot_max ? Kind::kAllReduceOneShot : Kind::kAllReduce;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(call_.in);
  call.dst = static_cast<std::byte*>(call_.out);
  if (int rc = register_buffer(env_, call_.in, bytes, &call.src_mr); rc != CHORUS_OK) return rc;
  // One shot only reads `in` on the wire; the two-phase form also sends and
  // receives finished chunks in `out`.
  if (call.kind == Kind::kAllReduce) {
    call.dst_mr = call.src_mr;
    if (call_.in != call_.out)
      if (int rc = register_buffer(env_, call_.out, bytes, &call.dst_mr); rc != CHORUS_OK)
        return rc;
  }
  return run(call);
}

int Mesh::Task::reduce_scatter() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  if (env_->size == 1) {
    std::memmove(call_.out, call_.in, count * esize);
    return CHORUS_ALGO_TASK_DONE;
  }
  Call call;
  call.kernel = env_->reduce_kernel(call_.dtype, call_.op);
  if (!call.kernel) return fail(env_, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  call.kind = Kind::kReduceScatter;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(call_.in);
  call.dst = static_cast<std::byte*>(call_.out);  // written by the reduction only
  if (int rc = register_buffer(env_, call_.in, size_t(env_->size) * count * esize, &call.src_mr);
      rc != CHORUS_OK)
    return rc;
  return run(call);
}

int Mesh::Task::all_gather() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  auto* base = static_cast<std::byte*>(call_.out);
  const size_t total = size_t(env_->size) * count * esize;
  std::byte* mine = base + size_t(env_->rank) * count * esize;
  const auto* src = static_cast<const std::byte*>(call_.in);
  // An input inside the output (other than in place) could be overwritten
  // by a receive before it is sent: copy it first, as for one rank.
  const auto at = reinterpret_cast<std::uintptr_t>(src);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const bool overlaps = at + count * esize > lo && at < lo + total;
  if (src != mine && (overlaps || env_->size == 1)) std::memmove(mine, src, count * esize);
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  Call call;
  call.kind = Kind::kAllGather;
  call.count = count;
  call.esize = esize;
  call.dst = base;
  if (int rc = register_buffer(env_, base, total, &call.dst_mr); rc != CHORUS_OK) return rc;
  if (!overlaps) {
    call.own_in = src;
    call.own_offset = size_t(env_->rank) * count;
    if (int rc = register_buffer(env_, src, count * esize, &call.own_in_mr); rc != CHORUS_OK)
      return rc;
  }
  return run(call);
}

int Mesh::Task::broadcast() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0 || env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  Call call;
  call.kind = Kind::kBroadcast;
  call.root = call_.root;
  call.count = count;
  call.esize = esize;
  call.dst = static_cast<std::byte*>(call_.out);
  if (int rc = register_buffer(env_, call_.out, count * esize, &call.dst_mr); rc != CHORUS_OK)
    return rc;
  return run(call);
}

int Mesh::Task::barrier() {
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  const int radix = mesh_.settings.barrier_radix ? mesh_.settings.barrier_radix
                                                 : default_barrier_radix(env_->size);
  barrier_.emplace(env_);
  return barrier_->start(radix);
}

/// Reduce to a root. Up to one_shot_max bytes every other rank sends its
/// whole input to the root, which reduces all of it in rank order (one
/// message latency); above, a reduce-scatter over `size` chunks (rank r
/// reducing chunk r, as in all_reduce) whose chunks then go to the root
/// alone, so no link carries more than the all_reduce's first half.
int Mesh::Task::reduce() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t bytes = count * esize;
  if (env_->size == 1) {
    if (call_.in != call_.out) std::memmove(call_.out, call_.in, bytes);
    return CHORUS_ALGO_TASK_DONE;
  }
  Call call;
  call.kernel = env_->reduce_kernel(call_.dtype, call_.op);
  if (!call.kernel) return fail(env_, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  call.kind = bytes <= mesh_.settings.one_shot_max ? Kind::kReduceOneShot : Kind::kReduce;
  call.root = call_.root;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(call_.in);
  if (int rc = register_buffer(env_, call_.in, bytes, &call.src_mr); rc != CHORUS_OK) return rc;
  const bool is_root = env_->rank == call_.root;
  if (call.kind == Kind::kReduceOneShot) {
    // Only the root reduces, on the CPU: its output is never on the wire.
    call.dst = is_root ? static_cast<std::byte*>(call_.out) : nullptr;
  } else {
    // Off the root the reduced chunk waits in scratch the task borrows
    // from the communicator's cache until it goes out.
    call.dst =
        is_root ? static_cast<std::byte*>(call_.out) : scratch_.borrow(mesh_.reduce_scratch, bytes);
    call.dst_mr = call.src_mr;
    if (static_cast<const void*>(call.dst) != call_.in)
      if (int rc = register_buffer(env_, call.dst, bytes, &call.dst_mr); rc != CHORUS_OK) return rc;
  }
  return run(call);
}

int Mesh::Task::gather() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t block = count * esize;
  const int root = call_.root;
  const bool is_root = env_->rank == root;
  if (is_root) {
    std::byte* own = static_cast<std::byte*>(call_.out) + size_t(root) * block;
    if (call_.in != own) std::memcpy(own, call_.in, block);  // the core refused other overlaps
  }
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  Call call;
  call.kind = Kind::kGather;
  call.root = root;
  call.count = count;
  call.esize = esize;
  if (is_root) {
    call.dst = static_cast<std::byte*>(call_.out);
    if (int rc = register_buffer(env_, call_.out, size_t(env_->size) * block, &call.dst_mr);
        rc != CHORUS_OK)
      return rc;
  } else {
    call.gather_src = static_cast<const std::byte*>(call_.in);
    if (int rc = register_buffer(env_, call_.in, block, &call.gather_src_mr); rc != CHORUS_OK)
      return rc;
  }
  return run(call);
}

int Mesh::Task::scatter() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t block = count * esize;
  const int root = call_.root;
  const bool is_root = env_->rank == root;
  if (is_root) {
    const auto* own = static_cast<const std::byte*>(call_.in) + size_t(root) * block;
    if (call_.out != own) std::memcpy(call_.out, own, block);  // the core refused other overlaps
  }
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  Call call;
  call.kind = Kind::kScatter;
  call.root = root;
  call.count = count;
  call.esize = esize;
  if (is_root) {
    call.gather_src = static_cast<const std::byte*>(call_.in);
    if (int rc = register_buffer(env_, call_.in, size_t(env_->size) * block, &call.gather_src_mr);
        rc != CHORUS_OK)
      return rc;
  } else {
    call.dst = static_cast<std::byte*>(call_.out);
    if (int rc = register_buffer(env_, call_.out, block, &call.dst_mr); rc != CHORUS_OK) return rc;
  }
  return run(call);
}

/// all_to_all(v): every block goes straight to its rank, all peers at once.
int Mesh::Task::exchange(const std::byte* in, const size_t* sc, const size_t* so, std::byte* out,
                         const size_t* rc, const size_t* ro) {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const int rank = env_->rank, size = env_->size;
  std::memcpy(out + ro[rank] * esize, in + so[rank] * esize, sc[rank] * esize);
  if (size == 1) return CHORUS_ALGO_TASK_DONE;
  size_t in_end = 0, out_end = 0;
  for (int p = 0; p < size; ++p) {
    if (sc[p]) in_end = std::max(in_end, so[p] + sc[p]);
    if (rc[p]) out_end = std::max(out_end, ro[p] + rc[p]);
  }
  Call call;
  call.kind = Kind::kAllToAll;
  call.esize = esize;
  call.gather_src = in;
  call.dst = out;
  call.send_counts = sc;
  call.send_offsets = so;
  call.recv_counts = rc;
  call.recv_offsets = ro;
  if (int r = register_buffer(env_, in, in_end * esize, &call.gather_src_mr); r != CHORUS_OK)
    return r;
  if (int r = register_buffer(env_, out, out_end * esize, &call.dst_mr); r != CHORUS_OK) return r;
  return run(call);
}

int Mesh::Task::all_to_all() {
  const size_t esize = chorus_dtype_size(call_.dtype);
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t n = size_t(env_->size);
  counts_.assign(n, count);
  offsets_.resize(n);
  for (size_t p = 0; p < n; ++p) offsets_[p] = p * count;
  const auto* src = static_cast<const std::byte*>(call_.in);
  if (call_.in == call_.out) {  // in place: blocks arriving must not land on blocks still to send
    input_copy_.assign(src, src + n * count * esize);
    src = input_copy_.data();
  }
  return exchange(src, counts_.data(), offsets_.data(), static_cast<std::byte*>(call_.out),
                  counts_.data(), offsets_.data());
}

}  // namespace chorus::mesh
