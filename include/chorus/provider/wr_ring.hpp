// chorus::provider::WrRing: an endpoint's queue of posted work requests,
// addressed by absolute index, that holds only as many slots as it has needed.
// Part of the provider toolkit (docs/transport-abi.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace chorus::provider {

/// A FIFO of work requests addressed by absolute indices: the entries live
/// in [head(), tail()), and an index stays valid for its entry until pop()
/// passes it, whatever is pushed meanwhile. It holds no slots until the
/// first push, then kInitial, and doubles them whenever a push finds them
/// full. The endpoint bounds its posts (EndpointBase::kMaxOutstanding), and
/// so the slots; a job opens an endpoint for every peer, most of which never
/// have more than a few posts out, and rings sized for the bound up front
/// cost each rank about 90 KiB per endpoint it never used (docs/scale.md).
///
/// Not thread-safe: the endpoint's caller thread only. References returned
/// by at() and front() are invalidated by the next push().
template <class T>
class WrRing {
 public:
  static constexpr std::size_t kInitial = 16;

  bool empty() const { return head_ == tail_; }
  std::uint64_t head() const { return head_; }
  std::uint64_t tail() const { return tail_; }
  /// Slots held now (0 until the first push): what the ring costs.
  std::size_t capacity() const { return slots_.size(); }

  T& at(std::uint64_t index) { return slots_[index & mask_]; }
  const T& at(std::uint64_t index) const { return slots_[index & mask_]; }
  T& front() { return at(head_); }

  /// Appends `v` at index tail(), growing the slots if they are full.
  void push(const T& v) {
    if (tail_ - head_ == slots_.size()) grow();
    slots_[tail_++ & mask_] = v;
  }
  void pop() { ++head_; }

 private:
  void grow() {
    const std::size_t n = slots_.empty() ? kInitial : slots_.size() * 2;
    std::vector<T> bigger(n);
    // Every live entry keeps its absolute index; only its slot moves.
    for (std::uint64_t i = head_; i != tail_; ++i) bigger[i & (n - 1)] = std::move(at(i));
    slots_ = std::move(bigger);
    mask_ = n - 1;
  }

  std::vector<T> slots_;
  std::uint64_t mask_ = 0;
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
};

}  // namespace chorus::provider
