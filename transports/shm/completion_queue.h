// CompletionQueue: a context's finished work, successes and failures in
// completion order.
#pragma once

#include <chorus/transport.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace chorus::shm {

/// Successes live in a grow-only ring (no allocation once it has grown to
/// the working set); failures, which are rare, in a deque. A sequence number
/// shared by both keeps their relative order, so poll() can hand out the
/// successes that are older than the oldest failure and then report PENDING.
/// Single-threaded: owned by one context.
class CompletionQueue {
 public:
  bool empty() const { return count_ == 0 && errors_.empty(); }

  void push_success(const chorus_tp_completion_t& c) {
    if (count_ == ring_.size()) grow();
    ring_[(head_ + count_) & (ring_.size() - 1)] = {next_seq_++, c};
    ++count_;
  }

  void push_error(const chorus_tp_error_t& e) { errors_.emplace_back(next_seq_++, e); }

  /// Pops up to `max` successes older than the oldest failure into `out` and
  /// returns how many; returns CHORUS_ERR_PENDING when the oldest entry is a
  /// failure. `reaped(endpoint, opcode)` is called for each entry popped.
  template <class F>
  int poll(chorus_tp_completion_t* out, std::size_t max, F&& reaped) {
    std::size_t n = 0;
    const std::uint64_t limit = errors_.empty() ? UINT64_MAX : errors_.front().first;
    while (n < max && count_ > 0 && ring_[head_].first < limit) {
      out[n] = ring_[head_].second;
      reaped(out[n].endpoint, out[n].opcode);
      head_ = (head_ + 1) & (ring_.size() - 1);
      --count_;
      ++n;
    }
    if (n == 0 && !errors_.empty() && (count_ == 0 || ring_[head_].first > limit)) {
      return CHORUS_ERR_PENDING;
    }
    return static_cast<int>(n);
  }

  /// Pops the oldest failure; false when there is none.
  template <class F>
  bool read_error(chorus_tp_error_t* out, F&& reaped) {
    if (errors_.empty()) return false;
    *out = errors_.front().second;
    reaped(out->endpoint, out->opcode);
    errors_.pop_front();
    return true;
  }

  /// Drops every entry of `ep` (it is being closed: no completion of a
  /// closed endpoint is ever returned).
  void purge(chorus_tp_endpoint_t* ep) {
    std::vector<Entry> keep;
    for (std::size_t i = 0; i < count_; ++i) {
      const Entry& e = ring_[(head_ + i) & (ring_.size() - 1)];
      if (e.second.endpoint != ep) keep.push_back(e);
    }
    for (std::size_t i = 0; i < keep.size(); ++i) ring_[i] = keep[i];
    head_ = 0;
    count_ = keep.size();
    std::erase_if(errors_, [ep](const auto& e) { return e.second.endpoint == ep; });
  }

 private:
  using Entry = std::pair<std::uint64_t, chorus_tp_completion_t>;

  void grow() {
    std::vector<Entry> bigger(ring_.empty() ? 256 : ring_.size() * 2);
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
    ring_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<Entry> ring_;  // size is 0 or a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::deque<std::pair<std::uint64_t, chorus_tp_error_t>> errors_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace chorus::shm
