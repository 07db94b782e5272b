// The bootstrap's collectives: argument checks, and the star through rank 0
// that every collective starts with (each rank sends its contribution, or
// for an all_gather only the call's sequence number and kind, so that rank 0
// judges whether all ranks are in the same call). Barrier and broadcast end
// with rank 0 sending the result to each rank: O(N) bytes out of rank 0 for
// a blob of fixed size. all_gather goes on along the ring (bootstrap_pass.cc).

#include "core/bootstrap_impl.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

namespace chorus::core {

namespace {

std::string call_text(frame::Op op, int root) {
  if (op == frame::Op::kBroadcast) return cat("broadcast(root ", root, ")");
  return frame::op_name(op);
}

}  // namespace

Status Bootstrap::Impl::collective(frame::Op op, int root, std::span<const std::byte> mine,
                                   std::vector<Bytes>& out, Deadline deadline) {
  if (!failed_.is_ok()) {
    return failed_.with_context(cat("rank ", rank_, ": ", frame::op_name(op),
                                    ": side channel unusable after an earlier error"));
  }
  ++seq_;
  const std::size_t limit = op == frame::Op::kAllGather ? frame::kMaxGatherBlob : kMaxBlob;
  if (mine.size() > limit) {
    return fail(error(CHORUS_ERR_INVALID_ARGUMENT, frame::op_name(op), ": a ", mine.size(),
                      "-byte blob exceeds the side channel's limit of ", limit, " bytes"));
  }
  if (op == frame::Op::kBroadcast && (root < 0 || root >= size_)) {
    return fail(
        error(CHORUS_ERR_INVALID_ARGUMENT, "broadcast: root ", root, " is outside 0..", size_ - 1));
  }
  if (size_ == 1) {
    out.clear();
    if (op != frame::Op::kBarrier) out.emplace_back(mine.begin(), mine.end());
    if (op == frame::Op::kAllGather) filter_blob(0, out.back());
    return Status::ok();
  }
  return rank_ == 0 ? root_collective(op, root, mine, out, deadline)
                    : peer_collective(op, root, mine, out, deadline);
}

/// Rank 0: a contribution from every peer, checked against this call (its
/// sequence number, kind and root); got[r] is rank r's blob.
Status Bootstrap::Impl::collect_contributions(frame::Op op, int root, std::vector<Bytes>& got,
                                              Deadline deadline, Clock::time_point start) {
  const auto n = static_cast<std::size_t>(size_);
  std::size_t next = 1;  // peers below `next` have contributed
  const Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        while (next < n && !peers_[next]->inbox.empty()) ++next;
        if (next == n) return Status::ok();
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (c->inbox.empty() && c->gone != Gone::kNo) return gone_status(*c);
        }
        return std::nullopt;
      },
      [&] {
        std::vector<int> missing;
        for (std::size_t r = 1; r < n; ++r) {
          if (peers_[r]->inbox.empty()) missing.push_back(static_cast<int>(r));
        }
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " waiting for ", ranks_text(missing),
                     " (no contribution yet: not called there, or stalled?)");
      });
  if (!status.is_ok()) return status;

  for (std::size_t r = 1; r < n; ++r) {
    Frame f = std::move(peers_[r]->inbox.front());
    peers_[r]->inbox.pop_front();
    const auto head =
        f.type == frame::Type::kContribute ? frame::decode_op(f.payload) : std::nullopt;
    if (!head) {
      return error(CHORUS_ERR_PEER_LOST, "rank ", r, " broke the side-channel protocol (",
                   "malformed ", frame::type_name(f.type), " frame during ", frame::op_name(op),
                   ")");
    }
    if (head->seq != seq_ || head->op != op || (op == frame::Op::kBroadcast && head->arg != root)) {
      return error(CHORUS_ERR_INVALID_ARGUMENT,
                   "side-channel collectives called out of step: call #", seq_, " is ",
                   call_text(op, root), " on rank 0 but call #", head->seq, " on rank ", r, " is ",
                   call_text(head->op, head->arg));
    }
    f.payload.erase(f.payload.begin(),
                    f.payload.begin() + static_cast<std::ptrdiff_t>(frame::kOpHeaderSize));
    got[r] = std::move(f.payload);
  }
  return Status::ok();
}

Status Bootstrap::Impl::root_collective(frame::Op op, int root, std::span<const std::byte> mine,
                                        std::vector<Bytes>& out, Deadline deadline) {
  const auto start = Clock::now();
  const auto n = static_cast<std::size_t>(size_);
  // A peer that left or aborted since the last call without contributing to
  // this one fails it at once; one that contributed and then left got what it
  // needed from the last call, and fails the next.
  events_.clear();
  for (std::size_t r = 1; r < n; ++r) {
    const Conn& c = *peers_[r];
    if (c.inbox.empty() && c.gone != Gone::kNo) return fail(gone_status(c));
  }

  // rank 0's all_gather blob enters the ring at rank 1 at once.
  if (op == frame::Op::kAllGather) pass_blob(peers_[1], 0, mine);
  std::vector<Bytes> got(n);
  if (Status s = collect_contributions(op, root, got, deadline, start); !s.is_ok()) {
    return fail(std::move(s));
  }
  if (op == frame::Op::kAllGather) return root_gather(mine, out, deadline, start);
  got[0].assign(mine.begin(), mine.end());

  // The result to every peer: the root's blob, or one empty frame for a
  // barrier, straight from `got`.
  const std::vector<std::size_t> items{op == frame::Op::kBroadcast ? static_cast<std::size_t>(root)
                                                                   : 0};
  delivery_heads_.resize(items.size());
  // One buffer list for all peers: each write holds a span of it, not a copy.
  std::vector<asio::const_buffer>& buffers = delivery_buffers_;
  buffers.clear();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::size_t blob = op == frame::Op::kBarrier ? 0 : got[items[i]].size();
    auto& head = delivery_heads_[i];
    const auto frame_head = frame::encode_header(
        frame::Type::kDeliver, static_cast<std::uint32_t>(frame::kOpHeaderSize + blob));
    const auto op_head = frame::encode_op({seq_, op, static_cast<std::int32_t>(items[i])});
    std::copy(frame_head.begin(), frame_head.end(), head.begin());
    std::copy(op_head.begin(), op_head.end(), head.begin() + frame::kHeaderSize);
    buffers.emplace_back(asio::buffer(head));
    if (blob > 0) buffers.emplace_back(asio::buffer(got[items[i]]));
  }
  for (std::size_t r = 1; r < n; ++r) send(peers_[r], std::span<const asio::const_buffer>(buffers));
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        // Only failed writes count here: a peer that has read its result may
        // close at once, which is no error of this call.
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (!c->write_error.empty()) {
            return error(CHORUS_ERR_PEER_LOST, "lost rank ", c->rank, " while sending it the ",
                         frame::op_name(op), " result (", c->write_error, ")");
          }
        }
        if (writes_in_flight_ == 0) return Status::ok();
        return std::nullopt;
      },
      [&] {
        std::vector<int> slow;
        for (std::size_t r = 1; r < n; ++r) {
          if (peers_[r]->writes > 0) slow.push_back(static_cast<int>(r));
        }
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " sending the result to ",
                     ranks_text(slow), " (not reading?)");
      });
  if (!status.is_ok()) return fail(std::move(status));

  out.clear();
  if (op == frame::Op::kBroadcast) {
    out.push_back(std::move(got[static_cast<std::size_t>(root)]));
  }
  return Status::ok();
}

Status Bootstrap::Impl::peer_collective(frame::Op op, int root, std::span<const std::byte> mine,
                                        std::vector<Bytes>& out, Deadline deadline) {
  const auto start = Clock::now();
  Conn& c = *coord_;
  // An all_gather's blob goes along the ring; rank 0 gets only the step check.
  const std::span<const std::byte> contribution =
      op == frame::Op::kAllGather ? std::span<const std::byte>() : mine;
  const auto frame_head =
      frame::encode_header(frame::Type::kContribute,
                           static_cast<std::uint32_t>(frame::kOpHeaderSize + contribution.size()));
  const auto op_head = frame::encode_op({seq_, op, root});
  std::copy(frame_head.begin(), frame_head.end(), contribution_head_.begin());
  std::copy(op_head.begin(), op_head.end(), contribution_head_.begin() + frame::kHeaderSize);
  const std::array<asio::const_buffer, 2> buffers{
      asio::buffer(contribution_head_), asio::buffer(contribution.data(), contribution.size())};
  if (c.gone == Gone::kNo) send(coord_, buffers);
  if (op == frame::Op::kAllGather) return peer_gather(mine, out, deadline, start);

  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        events_.clear();
        if (!c.inbox.empty() && c.writes == 0) return Status::ok();
        if (c.inbox.empty() && c.gone != Gone::kNo) return gone_status(c);
        if (!c.write_error.empty()) {
          return error(CHORUS_ERR_PEER_LOST, "lost ", who(c), " on the side channel (",
                       c.write_error, ")");
        }
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " waiting for rank 0 (coordinator ",
                     coordinator_, ") with ", c.inbox.size(),
                     " of 1 result frames received; rank 0 waits for every rank to call it");
      });
  if (!status.is_ok()) return fail(std::move(status));

  Frame f = std::move(c.inbox.front());
  c.inbox.pop_front();
  const auto head = frame::decode_op(f.payload);
  const int index = op == frame::Op::kBroadcast ? root : 0;
  if (!head || head->seq != seq_ || head->op != op || head->arg != index) {
    return fail(error(CHORUS_ERR_PEER_LOST, who(c),
                      " broke the side-channel protocol (unexpected result frame for ",
                      frame::op_name(op), " #", seq_, ")"));
  }
  f.payload.erase(f.payload.begin(),
                  f.payload.begin() + static_cast<std::ptrdiff_t>(frame::kOpHeaderSize));
  std::vector<Bytes> got;
  got.push_back(std::move(f.payload));
  out = std::move(got);
  return Status::ok();
}

}  // namespace chorus::core
