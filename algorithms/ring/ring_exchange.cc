// The ring's all_to_all and all_to_allv: every block travels right over ring
// neighbours until it reaches its rank (ring_schedule.h, a2a_step). For
// all_to_allv the ranks in between must know each block's size, so the task
// first all-gathers every rank's send counts (a phase of its own), then runs
// the exchange.
#include "algorithms/ring/ring_task.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::ring {

int Task::start_all_to_all() {
  const size_t count = call_.count;
  if (count == 0) return CHORUS_ALGO_TASK_DONE;
  const size_t n = size_t(env_->size);
  a2a_counts_.assign(n, count);
  a2a_offsets_.resize(n);
  for (size_t p = 0; p < n; ++p) a2a_offsets_[p] = p * count;
  const auto* src = static_cast<const std::byte*>(call_.in);
  if (call_.in == call_.out) {  // in place: blocks arriving must not land on blocks still to send
    const size_t bytes = n * count * esize_;
    if (int rc = take_scratch(scratch2_, bytes); rc != CHORUS_OK) return rc;
    std::memcpy(scratch2_.data(), src, bytes);
    src = scratch2_.data();
  }
  return start_exchange(src, a2a_counts_.data(), a2a_offsets_.data(),
                        static_cast<std::byte*>(call_.out), a2a_counts_.data(), a2a_offsets_.data(),
                        [count](int, int) { return count; });
}

int Task::start_all_to_allv() {
  const size_t n = size_t(env_->size);
  auto exchange = [this, n] {
    return start_exchange(
        static_cast<const std::byte*>(call_.in), call_.send_counts, call_.send_offsets,
        static_cast<std::byte*>(call_.out), call_.recv_counts, call_.recv_offsets,
        [this, n](int o, int d) { return size_t(counts_all_[size_t(o) * n + size_t(d)]); });
  };
  if (n == 1) return exchange();
  // Every rank learns every rank's send counts first: a ring all_gather of
  // `size` uint64 per rank, then the exchange in the call's dtype.
  counts_mine_.assign(call_.send_counts, call_.send_counts + n);
  counts_all_.assign(n * n, 0);
  esize_ = sizeof(uint64_t);
  return start_all_gather(counts_mine_.data(), counts_all_.data(), n, [this, exchange] {
    esize_ = chorus_dtype_size(call_.dtype);
    return exchange();
  });
}

/// A block whose size disagrees with this rank's recv_counts lands in
/// scratch instead of the output, so the exchange stays matched on every
/// rank, and the call then fails with INVALID_ARGUMENT naming the pair.
int Task::start_exchange(const std::byte* in, const size_t* sc, const size_t* so, std::byte* out,
                         const size_t* rc, const size_t* ro, std::function<size_t(int, int)> sent) {
  const int rank = env_->rank, size = env_->size;
  std::memcpy(out + ro[rank] * esize_, in + so[rank] * esize_, sc[rank] * esize_);
  if (size == 1) return CHORUS_ALGO_TASK_DONE;
  const int n = a2a_steps(size);
  a2a_steps_.assign(size_t(n), Step{});
  // Blocks in transit (and mismatched arrivals): element offset and count in
  // scratch, by step index.
  transit_.assign(size_t(n), Range{});
  size_t scratch_elems = 0;
  size_t mismatch_sent = 0;
  for (int k = 0; k < n; ++k) {
    A2aStep a = a2a_step_at(rank, size, k);
    const size_t c = sent(a.origin, a.dest);
    if (a.step.recv_chunk == size + a.origin && c != rc[a.origin]) {
      mismatch_from_ = a.origin;
      mismatch_sent = c;
      a.step.recv_chunk = 2 * size + k;
    }
    if (a.step.recv_chunk >= 2 * size) {
      transit_[size_t(k)] = {scratch_elems, c};
      scratch_elems += c;
    }
    a2a_steps_[size_t(k)] = a.step;
  }
  size_t in_end = 0, out_end = 0;
  for (int p = 0; p < size; ++p) {
    if (sc[p]) in_end = std::max(in_end, so[p] + sc[p]);
    if (rc[p]) out_end = std::max(out_end, ro[p] + rc[p]);
  }
  if (int r = take_scratch(scratch_, scratch_elems * esize_); r != CHORUS_OK) return r;
  a2a_from_ = {const_cast<std::byte*>(in), nullptr};
  a2a_to_ = {out, nullptr};
  a2a_passing_ = {scratch_.data(), nullptr};
  if (int r = register_work(a2a_from_.base, in_end * esize_, &a2a_from_.mr); r != CHORUS_OK)
    return r;
  if (int r = register_work(a2a_to_.base, out_end * esize_, &a2a_to_.mr); r != CHORUS_OK) return r;
  if (int r = register_work(a2a_passing_.base, scratch_elems * esize_, &a2a_passing_.mr);
      r != CHORUS_OK)
    return r;
  Plan plan;
  plan.steps = n;
  plan.forward_only = true;
  plan.step = [this](int k, bool) { return a2a_steps_[size_t(k)]; };
  plan.chunk = [this, sc, so, rc, ro, size](int c) {
    if (c < size) return Range{so[c], sc[c]};
    if (c < 2 * size) return Range{ro[c - size], rc[c - size]};
    return transit_[size_t(c - 2 * size)];
  };
  plan.place = [this, size](int c) {
    return c < size ? a2a_from_ : c < 2 * size ? a2a_to_ : a2a_passing_;
  };
  if (mismatch_from_ < 0) return run(Place{}, nullptr, std::move(plan));
  const size_t expected = rc[mismatch_from_];
  return run(Place{}, nullptr, std::move(plan), [this, mismatch_sent, expected, rank] {
    const std::string from = std::to_string(mismatch_from_);
    return fail(env_, CHORUS_ERR_INVALID_ARGUMENT,
                "ring all_to_allv: rank " + from + " sends " + std::to_string(mismatch_sent) +
                    " elements to rank " + std::to_string(rank) + " but its recv_counts[" + from +
                    "] is " + std::to_string(expected) +
                    "; send_counts[q] on rank p must equal recv_counts[p] on rank q (the block "
                    "was not stored)");
  });
}

}  // namespace chorus::ring
