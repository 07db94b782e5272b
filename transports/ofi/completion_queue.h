// CompletionQueue: a context's finished work, successes and failures in the
// order they happened.
#pragma once

#include <chorus/transport.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

namespace chorus::ofi {

class Endpoint;

/// One successful completion. `seq` orders it against failed completions.
struct Completion {
  std::uint64_t seq;
  std::uint64_t wr_id;
  std::uint64_t byte_len;
  Endpoint* endpoint;
  std::uint32_t opcode;
};

struct FailedCompletion {
  std::uint64_t seq;
  Endpoint* endpoint;
  chorus_tp_error_t error;
};

/// Successes live in a ring that only grows (never per completion), failures
/// in a deque (allocation on the error path only). Both carry a sequence
/// number so poll() can stop at the oldest failure, as fi_cq_read does.
/// Not thread-safe: owned by the context's single caller thread.
class CompletionQueue {
 public:
  CompletionQueue();

  void push(Endpoint* ep, std::uint32_t opcode, std::uint64_t wr_id, std::uint64_t byte_len);
  void push_error(Endpoint* ep, std::uint32_t opcode, std::uint64_t wr_id, int status,
                  int peer_rank, std::string_view message);

  bool empty() const { return count_ == 0 && errors_.empty(); }
  std::size_t ready_successes() const { return count_; }

  /// True when the oldest entry of all is a failure.
  bool error_first() const {
    return !errors_.empty() && (count_ == 0 || errors_.front().seq < ring_[head_].seq);
  }

  /// Pops up to `max` successes that are older than every failure, handing
  /// each to `sink(index, completion)`; returns how many.
  template <class Sink>
  std::size_t pop(std::size_t max, Sink&& sink) {
    std::size_t n = 0;
    const std::uint64_t limit = errors_.empty() ? UINT64_MAX : errors_.front().seq;
    while (n < max && count_ > 0 && ring_[head_].seq < limit) {
      sink(n++, ring_[head_]);
      head_ = (head_ + 1) & (ring_.size() - 1);
      --count_;
    }
    return n;
  }

  /// Pops the oldest failure; false when there is none.
  bool pop_error(FailedCompletion& out);

  /// Drops every entry of `ep` (the endpoint is being closed).
  void forget(const Endpoint* ep);

 private:
  void grow();

  std::vector<Completion> ring_;  // capacity is a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::deque<FailedCompletion> errors_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace chorus::ofi
