// chorus::provider::CompletionQueue: a context's finished work, successes
// and failures in the order they happened, served by the transport ABI's
// poll/read_error rules. Part of the provider toolkit.
#pragma once

#include <chorus/transport.h>
#include <chorus/provider/error.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::provider {

/// Successes live in a ring that only grows (never per completion), failures
/// in a deque (allocation on the error path only). Both carry one sequence
/// number so poll() stops at the oldest failure, as fi_cq_read does.
/// Entries name their endpoint by its ABI handle.
/// Not thread-safe: owned by the context's single caller thread.
class CompletionQueue {
 public:
  CompletionQueue();

  void push(const chorus_tp_completion_t& done);
  /// `imm` is the sender's immediate of a RECV (0 for a plain send).
  void push(chorus_tp_endpoint_t* ep, std::uint32_t opcode, std::uint64_t wr_id,
            std::uint64_t byte_len, std::uint32_t imm = 0) {
    push(chorus_tp_completion_t{wr_id, opcode, imm, byte_len, ep});
  }
  void push_error(const chorus_tp_error_t& failed);
  /// `message` is cut to fit chorus_tp_error_t::message.
  void push_error(chorus_tp_endpoint_t* ep, std::uint32_t opcode, std::uint64_t wr_id, int status,
                  int peer_rank, std::string_view message);

  bool empty() const { return count_ == 0 && errors_.empty(); }
  std::size_t ready_successes() const { return count_; }

  /// True when the oldest entry of all is a failure.
  bool error_first() const {
    return !errors_.empty() && (count_ == 0 || errors_.front().first < ring_[head_].first);
  }

  /// The ABI's poll on this queue. Never blocks. Writes up to `max`
  /// successes older than every failure to `out`, calling
  /// `reaped(endpoint, opcode)` for each, and returns how many; when none
  /// was written and the oldest entry is a failure, returns
  /// CHORUS_ERR_PENDING (with last-error text).
  template <class Reaped>
  int poll(chorus_tp_completion_t* out, std::size_t max, Reaped&& reaped) {
    if (out == nullptr && max > 0) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "poll: NULL completion array");
    }
    std::size_t n = 0;
    const std::uint64_t limit = errors_.empty() ? UINT64_MAX : errors_.front().first;
    while (n < max && n < INT32_MAX && count_ > 0 && ring_[head_].first < limit) {
      out[n] = ring_[head_].second;
      reaped(out[n].endpoint, out[n].opcode);
      head_ = (head_ + 1) & (ring_.size() - 1);
      --count_;
      ++n;
    }
    if (n > 0) return static_cast<int>(n);
    if (error_first()) {
      return set_last_error(CHORUS_ERR_PENDING,
                            "a completion failed; read it with read_error before polling again");
    }
    return 0;
  }

  /// The ABI's read_error on this queue: pops the oldest failure into `out`,
  /// calling `reaped(endpoint, opcode)`. INVALID_ARGUMENT when there is none.
  template <class Reaped>
  int read_error(chorus_tp_error_t* out, Reaped&& reaped) {
    if (out == nullptr) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "read_error: NULL output");
    }
    if (errors_.empty()) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "read_error: no failed completion pending");
    }
    *out = errors_.front().second;
    errors_.pop_front();
    reaped(out->endpoint, out->opcode);
    return CHORUS_OK;
  }

  /// Drops every entry of `ep` (the endpoint is being closed: no completion
  /// of a closed endpoint is ever returned).
  void forget(const chorus_tp_endpoint_t* ep);

 private:
  using Entry = std::pair<std::uint64_t, chorus_tp_completion_t>;
  using Failure = std::pair<std::uint64_t, chorus_tp_error_t>;

  void grow();

  std::vector<Entry> ring_;  // capacity is a power of two
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::deque<Failure> errors_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace chorus::provider
