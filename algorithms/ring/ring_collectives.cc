// The ring's collectives that run one schedule each: all_reduce, all_gather,
// reduce_scatter, broadcast, reduce, gather and scatter. Each start_* copies
// what must be copied, picks the buffers the chunks live in (the caller's, or
// task-owned scratch for data that must not touch the caller's input) and
// starts one executor phase (ring_task.cc).
#include "algorithms/ring/ring_task.h"

#include <cstdint>
#include <cstring>

namespace chorus::ring {

int Task::start_all_reduce() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  if (call_.in != call_.out) std::memmove(call_.out, call_.in, count * esize_);
  if (env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  int rc = CHORUS_OK;
  chorus_reduce_fn_t kernel = kernel_or_fail(rc);
  if (rc != CHORUS_OK) return rc;
  Place work{static_cast<std::byte*>(call_.out), nullptr};
  if (rc = register_work(work.base, count * esize_, &work.mr); rc != CHORUS_OK) return rc;
  const int rank = env_->rank, size = env_->size;
  Plan plan;
  plan.steps = all_reduce_steps(size);
  plan.step = [=](int u, bool rev) { return directed_step(all_reduce_step, rank, size, u, rev); };
  plan.chunk = [=](int c) { return split(count, size, c); };
  return run(work, kernel, std::move(plan));
}

int Task::start_all_gather(const void* in, void* out, size_t count, std::function<int()> then) {
  if (count == 0) return then ? then() : CHORUS_ALGO_TASK_DONE;
  auto* base = static_cast<std::byte*>(out);
  const size_t block = count * esize_;
  const size_t total = size_t(env_->size) * block;
  std::byte* mine = base + size_t(env_->rank) * block;
  // An input inside the output (other than in place) could be overwritten
  // by a receive before it is sent: copy it first, as for one rank.
  const auto at = reinterpret_cast<std::uintptr_t>(in);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const bool overlaps = at + block > lo && at < lo + total;
  if (in != mine && (overlaps || env_->size == 1)) std::memmove(mine, in, block);
  if (env_->size == 1) return then ? then() : CHORUS_ALGO_TASK_DONE;
  Place work{base, nullptr};
  if (int rc = register_work(base, total, &work.mr); rc != CHORUS_OK) return rc;
  const int rank = env_->rank, size = env_->size;
  Plan plan;
  plan.steps = all_gather_steps(size);
  plan.step = [=](int u, bool rev) { return directed_step(all_gather_step, rank, size, u, rev); };
  plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
  plan.in_place_posts = true;
  if (!overlaps) {
    plan.own_chunk = rank;
    plan.own_in = static_cast<const std::byte*>(in);
    if (int rc = register_work(in, block, &plan.own_in_mr); rc != CHORUS_OK) return rc;
  }
  return run(work, nullptr, std::move(plan), std::move(then));
}

int Task::start_reduce_scatter() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t block = count * esize_;
  if (env_->size == 1) {
    if (call_.in != call_.out) std::memmove(call_.out, call_.in, block);
    return CHORUS_ALGO_TASK_DONE;
  }
  int rc = CHORUS_OK;
  chorus_reduce_fn_t kernel = kernel_or_fail(rc);
  if (rc != CHORUS_OK) return rc;
  // Partial sums travel around the ring and accumulate in a scratch copy of
  // the input: the caller's input stays untouched.
  const size_t total = size_t(env_->size) * block;
  if (rc = take_scratch(scratch_, total); rc != CHORUS_OK) return rc;
  std::memcpy(scratch_.data(), call_.in, total);
  Place work{scratch_.data(), nullptr};
  if (rc = register_work(work.base, total, &work.mr); rc != CHORUS_OK) return rc;
  const int rank = env_->rank, size = env_->size;
  Plan plan;
  plan.steps = reduce_scatter_steps(size);
  plan.step = [=](int u, bool rev) {
    return directed_step(reduce_scatter_step, rank, size, u, rev);
  };
  plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
  return run(work, kernel, std::move(plan), [this, block] {
    std::memcpy(call_.out, scratch_.data() + size_t(env_->rank) * block, block);
    return int(CHORUS_ALGO_TASK_DONE);
  });
}

int Task::start_broadcast() {
  const size_t count = call_.count;
  if (count == 0 || env_->size == 1) return CHORUS_ALGO_TASK_DONE;
  Place work{static_cast<std::byte*>(call_.out), nullptr};
  if (int rc = register_work(work.base, count * esize_, &work.mr); rc != CHORUS_OK) return rc;
  const int rank = env_->rank, size = env_->size, root = call_.root;
  Plan plan;
  plan.steps = broadcast_steps(size);
  plan.step = [=](int, bool rev) {
    return rev ? mirror_chunks(broadcast_step(mirror(rank, size), size, mirror(root, size)), size)
               : broadcast_step(rank, size, root);
  };
  plan.chunk = [=](int) { return Range{0, count}; };
  return run(work, nullptr, std::move(plan));
}

int Task::start_reduce() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t bytes = count * esize_;
  const int rank = env_->rank, size = env_->size, root = call_.root;
  if (size == 1) {
    if (call_.in != call_.out) std::memmove(call_.out, call_.in, bytes);
    return CHORUS_ALGO_TASK_DONE;
  }
  int rc = CHORUS_OK;
  chorus_reduce_fn_t kernel = kernel_or_fail(rc);
  if (rc != CHORUS_OK) return rc;
  // The partial result accumulates in the work buffer: the root's output,
  // a scratch copy of the input on the ranks in between (the caller's input
  // stays untouched), and the input itself where the chain starts (only sent).
  std::byte* work;
  if (rank == root) {
    if (call_.in != call_.out) std::memcpy(call_.out, call_.in, bytes);
    work = static_cast<std::byte*>(call_.out);
  } else if (mod(rank - root - 1, size) == 0 && !(ring_.settings.bidirectional && size > 2)) {
    // (With lanes in both directions this rank is inside the reverse chain.)
    work = static_cast<std::byte*>(const_cast<void*>(call_.in));
  } else {
    if (rc = take_scratch(scratch_, bytes); rc != CHORUS_OK) return rc;
    work = scratch_.data();
    std::memcpy(work, call_.in, bytes);
  }
  Place place{work, nullptr};
  if (rc = register_work(work, bytes, &place.mr); rc != CHORUS_OK) return rc;
  Plan plan;
  plan.steps = reduce_steps(size);
  plan.step = [=](int, bool rev) {
    return rev ? mirror_chunks(reduce_step(mirror(rank, size), size, mirror(root, size)), size)
               : reduce_step(rank, size, root);
  };
  plan.chunk = [=](int) { return Range{0, count}; };
  return run(place, kernel, std::move(plan));
}

int Task::start_gather() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t block = count * esize_;
  const int rank = env_->rank, size = env_->size, root = call_.root;
  auto* src = static_cast<std::byte*>(const_cast<void*>(call_.in));  // only ever sent
  if (rank == root) {
    std::byte* own = static_cast<std::byte*>(call_.out) + size_t(root) * block;
    if (src != own) std::memcpy(own, src, block);  // the core refused other overlaps
  }
  if (size == 1) return CHORUS_ALGO_TASK_DONE;
  Plan plan;
  plan.steps = gather_steps(size);
  plan.step = [=](int u, bool) { return gather_step(rank, size, root, u); };
  plan.forward_only = true;
  if (rank == root) {
    plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
    Place work{static_cast<std::byte*>(call_.out), nullptr};
    if (int rc = register_work(work.base, size_t(size) * block, &work.mr); rc != CHORUS_OK)
      return rc;
    return run(work, nullptr, std::move(plan));
  }
  // Off the root: the own block is sent from the input; the blocks passing
  // through sit in scratch by chain position (0 .. position-1).
  const int position = mod(rank - root - 1, size);
  const size_t passing_bytes = size_t(position) * block;
  if (int rc = take_scratch(scratch_, passing_bytes); rc != CHORUS_OK) return rc;
  Place own{src, nullptr}, passing{scratch_.data(), nullptr};
  if (int rc = register_work(src, block, &own.mr); rc != CHORUS_OK) return rc;
  if (int rc = register_work(passing.base, passing_bytes, &passing.mr); rc != CHORUS_OK) return rc;
  plan.chunk = [=](int c) {
    return c == rank ? Range{0, count} : Range{size_t(gather_slot(c, size, root)) * count, count};
  };
  plan.place = [=](int c) { return c == rank ? own : passing; };
  return run(Place{}, nullptr, std::move(plan));
}

int Task::start_scatter() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t block = count * esize_;
  const int rank = env_->rank, size = env_->size, root = call_.root;
  auto* dst = static_cast<std::byte*>(call_.out);
  if (rank == root) {
    const auto* own = static_cast<const std::byte*>(call_.in) + size_t(root) * block;
    if (dst != own) std::memcpy(dst, own, block);  // the core refused other overlaps
  }
  if (size == 1) return CHORUS_ALGO_TASK_DONE;
  Plan plan;
  plan.steps = scatter_steps(size);
  plan.step = [=](int u, bool) { return scatter_step(rank, size, root, u); };
  plan.forward_only = true;
  if (rank == root) {
    plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
    Place work{static_cast<std::byte*>(const_cast<void*>(call_.in)), nullptr};  // only ever sent
    if (int rc = register_work(work.base, size_t(size) * block, &work.mr); rc != CHORUS_OK)
      return rc;
    return run(work, nullptr, std::move(plan));
  }
  // Off the root: the own block lands in the output; the blocks for ranks
  // further down the chain pass through scratch.
  const int beyond = size - 1 - mod(rank - root, size);
  const size_t passing_bytes = size_t(beyond) * block;
  if (int rc = take_scratch(scratch_, passing_bytes); rc != CHORUS_OK) return rc;
  Place own{dst, nullptr}, passing{scratch_.data(), nullptr};
  if (int rc = register_work(dst, block, &own.mr); rc != CHORUS_OK) return rc;
  if (int rc = register_work(passing.base, passing_bytes, &passing.mr); rc != CHORUS_OK) return rc;
  plan.chunk = [=](int c) {
    return c == rank ? Range{0, count}
                     : Range{size_t(scatter_slot(c, rank, size, root) - 1) * count, count};
  };
  plan.place = [=](int c) { return c == rank ? own : passing; };
  return run(Place{}, nullptr, std::move(plan));
}

}  // namespace chorus::ring
