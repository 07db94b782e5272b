// The completion queue's storage: the success ring and the failure list.
#include <chorus/provider/completion_queue.hpp>

#include <algorithm>
#include <cstring>

namespace chorus::provider {

CompletionQueue::CompletionQueue() : ring_(1024) {}

void CompletionQueue::grow() {
  std::vector<Entry> bigger(ring_.size() * 2);
  for (std::size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
  ring_.swap(bigger);
  head_ = 0;
}

void CompletionQueue::push(const chorus_tp_completion_t& done) {
  if (count_ == ring_.size()) grow();
  ring_[(head_ + count_) & (ring_.size() - 1)] = Entry{next_seq_++, done};
  ++count_;
}

void CompletionQueue::push_error(const chorus_tp_error_t& failed) {
  errors_.emplace_back(next_seq_++, failed);
}

void CompletionQueue::push_error(chorus_tp_endpoint_t* ep, std::uint32_t opcode,
                                 std::uint64_t wr_id, int status, int peer_rank,
                                 std::string_view message) {
  chorus_tp_error_t e{};
  e.wr_id = wr_id;
  e.opcode = opcode;
  e.status = status;
  e.peer_rank = peer_rank;
  e.endpoint = ep;
  const std::size_t n = std::min(message.size(), sizeof(e.message) - 1);
  std::memcpy(e.message, message.data(), n);
  e.message[n] = '\0';
  push_error(e);
}

void CompletionQueue::forget(const chorus_tp_endpoint_t* ep) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < count_; ++i) {
    const Entry& c = ring_[(head_ + i) & (ring_.size() - 1)];
    if (c.second.endpoint != ep) ring_[(head_ + kept++) & (ring_.size() - 1)] = c;
  }
  count_ = kept;
  std::erase_if(errors_, [ep](const Failure& f) { return f.second.endpoint == ep; });
}

}  // namespace chorus::provider
