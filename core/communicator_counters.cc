// Counters: the per-communicator byte, message, operation (per algorithm),
// request, wait, retry and error counts, in total and per peer, the bytes
// this rank sent on the bootstrap side channel and the endpoints it opened,
// that chorus_comm_counters reports.

#include "core/communicator.h"
#include "core/communicator_internal.h"

#include <chorus/chorus.h>

namespace chorus::core {

std::atomic<uint64_t>* Communicator::algo_counter(int collective, const Plugin* chosen) {
  // algo_ops_ holds one counter per (collective, candidate) in the order of
  // candidates_ (communicator_wireup.cc), so the position finds it: no name
  // is built on the per-call path.
  if (collective < 0 || collective >= CHORUS_COLL_COUNT) return nullptr;
  size_t at = 0;
  for (int c = 0; c < collective; ++c) at += candidates_[size_t(c)].size();
  const auto& list = candidates_[size_t(collective)];
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == chosen)
      return at + i < algo_ops_.size() ? algo_ops_[at + i].second.get() : nullptr;
  return nullptr;
}

std::vector<std::pair<std::string, uint64_t>> Communicator::counters() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  uint64_t bs = 0, ms = 0, br = 0, mr = 0;
  for (int p = 0; p < size_ && peer_counters_; ++p) {
    const PeerCounters& c = peer_counters_[size_t(p)];
    bs += get(c.bytes_sent), ms += get(c.msgs_sent), br += get(c.bytes_recv),
        mr += get(c.msgs_recv);
  }
  out.emplace_back("bytes_sent", bs);
  out.emplace_back("messages_sent", ms);
  out.emplace_back("bytes_received", br);
  out.emplace_back("messages_received", mr);
  for (const auto& [name, value] : algo_ops_) out.emplace_back("ops." + name, get(*value));
  out.emplace_back("ops.send", get(send_ops_));
  out.emplace_back("ops.recv", get(recv_ops_));
  out.emplace_back("ops.inline", get(inline_ops_));
  out.emplace_back("ops.queued", get(queued_ops_));
  out.emplace_back("ops.run_by_waiter", get(waiter_ops_));
  out.emplace_back("requests.issued", get(requests_issued_));
  out.emplace_back("requests.cancelled", get(requests_cancelled_));
  out.emplace_back("wait.transport_ns", get(transport_wait_ns_));
  out.emplace_back("wait.request_ns", get(*request_wait_ns_));
  out.emplace_back("retries", get(retries_));
  out.emplace_back("errors", get(errors_));
  out.emplace_back("bootstrap.bytes_sent", bootstrap_ ? bootstrap_->bytes_sent() : 0);
  // Endpoints opened at init (set before the communicator is handed out).
  out.emplace_back("endpoints.data", opened_[0]);
  out.emplace_back("endpoints.data_peers", uint64_t(data_peers_.of(rank_).size()));
  // Connected so far: a mesh connects its non-neighbours at first use.
  out.emplace_back("endpoints.data_connected", data_connected_.load(std::memory_order_relaxed));
  // Notice endpoints connected so far: a mesh over a transport with polled
  // connects connects those to non-neighbours when a signature first needs them.
  out.emplace_back("endpoints.notice_connected", notice_connected_.load(std::memory_order_relaxed));
  out.emplace_back("endpoints.notice", opened_[1]);
  out.emplace_back("endpoints.point_to_point", opened_[2]);
  // Tagged point-to-point pairs (two endpoints each) connected so far: all
  // at init, or on first use over a transport with polled connects.
  out.emplace_back("endpoints.p2p_connected", p2p_connected_.load(std::memory_order_relaxed));
  for (const auto& [name, peers] : auto_peer_counts_)
    out.emplace_back("transport.auto." + name + "_peers", peers);
  for (int p = 0; p < size_ && peer_counters_; ++p) {
    if (p == rank_) continue;
    const PeerCounters& c = peer_counters_[size_t(p)];
    std::string base = "peer." + std::to_string(p) + ".";
    out.emplace_back(base + "bytes_sent", get(c.bytes_sent));
    out.emplace_back(base + "messages_sent", get(c.msgs_sent));
    out.emplace_back(base + "bytes_received", get(c.bytes_recv));
    out.emplace_back(base + "messages_received", get(c.msgs_recv));
  }
  add_lane_counters(out);
  return out;
}

}  // namespace chorus::core
