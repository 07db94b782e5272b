#include "completion_queue.h"

#include <algorithm>
#include <cstring>

namespace chorus::verbs {

CompletionQueue::CompletionQueue() : ring_(1024) {}

void CompletionQueue::grow() {
  std::vector<Completion> bigger(ring_.size() * 2);
  for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
  ring_.swap(bigger);
  head_ = 0;
}

void CompletionQueue::push(Endpoint* ep, std::uint32_t opcode, std::uint64_t wr_id,
                           std::uint64_t byte_len) {
  if (count_ == ring_.size()) grow();
  ring_[(head_ + count_) & (ring_.size() - 1)] =
      Completion{next_seq_++, wr_id, byte_len, ep, opcode};
  ++count_;
}

void CompletionQueue::push_error(Endpoint* ep, std::uint32_t opcode, std::uint64_t wr_id,
                                 int status, int peer_rank, std::string_view message) {
  FailedCompletion f{};
  f.seq = next_seq_++;
  f.endpoint = ep;
  f.error.wr_id = wr_id;
  f.error.opcode = opcode;
  f.error.status = status;
  f.error.peer_rank = peer_rank;
  const std::size_t n = std::min(message.size(), sizeof(f.error.message) - 1);
  std::memcpy(f.error.message, message.data(), n);
  f.error.message[n] = '\0';
  errors_.push_back(f);
}

bool CompletionQueue::pop_error(FailedCompletion& out) {
  if (errors_.empty()) return false;
  out = errors_.front();
  errors_.pop_front();
  return true;
}

void CompletionQueue::forget(const Endpoint* ep) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < count_; ++i) {
    const Completion& c = ring_[(head_ + i) & (ring_.size() - 1)];
    if (c.endpoint != ep) ring_[(head_ + kept++) & (ring_.size() - 1)] = c;
  }
  count_ = kept;
  std::erase_if(errors_, [ep](const FailedCompletion& f) { return f.endpoint == ep; });
}

}  // namespace chorus::verbs
