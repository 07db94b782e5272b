// all_gather along the ring (bootstrap_ring.h). Each blob travels as kPass
// frames of at most frame::kMaxBlob bytes, so a blob of any size up to
// frame::kMaxGatherBlob goes through, and a rank passes a piece on as soon as
// it has it. Rank 0 sends only its own blob and takes every other one from
// rank size-1; the step check (every rank is in this call) is the star's
// (bootstrap_star.cc).
//
// Failures: a rank that gets an abort on any connection fails the call (and
// so tells every connection, fail()); aborts therefore travel both around
// the ring and through rank 0. A rank that loses a ring neighbour it still
// needs (a read that ends, a write that fails) first waits a moment for rank
// 0's verdict, which names the rank that failed first (a neighbour that
// failed because of another one closes without an abort frame when a write
// to us was under way), and fails with its own finding only without one. A
// neighbour or rank 0 that closes after this rank has all it needs from it is
// no error of this call: it may simply be done.

#include "core/bootstrap_impl.h"

#include <optional>
#include <utility>

namespace chorus::core {

namespace {

/// How long a rank that lost a ring neighbour waits for rank 0's verdict.
constexpr auto kVerdictWait = std::chrono::seconds(1);

}  // namespace

/// Sends `blob` as the blob of rank `index`, in pieces. The caller keeps
/// `blob` alive until the call ends.
void Bootstrap::Impl::pass_blob(const ConnPtr& to, int index, std::span<const std::byte> blob) {
  std::size_t offset = 0;
  do {
    const std::size_t piece = std::min(blob.size() - offset, frame::kMaxBlob);
    const bool more = offset + piece < blob.size();
    auto& head = pass_heads_.emplace_back();
    const auto frame_head = frame::encode_header(
        frame::Type::kPass, static_cast<std::uint32_t>(frame::kOpHeaderSize + piece));
    const auto op_head = frame::encode_op(
        {seq_, frame::Op::kAllGather, index, more ? frame::kMorePieces : std::uint16_t{0}});
    std::copy(frame_head.begin(), frame_head.end(), head.begin());
    std::copy(op_head.begin(), op_head.end(), head.begin() + frame::kHeaderSize);
    send(to, std::array<asio::const_buffer, 2>{asio::buffer(head),
                                               asio::buffer(blob.data() + offset, piece)});
    offset += piece;
  } while (offset < blob.size());
}

/// Frees the headers of this rank's own blob once a finished all_gather no
/// longer writes them.
void Bootstrap::Impl::release_passes() {
  if (writes_in_flight_ != 0) return;
  pass_heads_.clear();
}

void Bootstrap::Impl::filter_blob(int rank, Bytes& blob) const {
  if (gather_filter_ == nullptr || !*gather_filter_) return;
  (*gather_filter_)(rank, blob);
  blob.shrink_to_fit();
}

/// Sends a kPass frame received from a neighbour on, unchanged; the write
/// shares it.
void Bootstrap::Impl::pass_on(const ConnPtr& to, const std::shared_ptr<const PassedFrame>& passed) {
  send(to,
       std::array<asio::const_buffer, 2>{asio::buffer(passed->head), asio::buffer(passed->payload)},
       passed);
}

/// Takes the oldest kPass frame of `from` into got[index] and hands it out as
/// `passed`, for passing on. Returns an error for a frame that breaks the
/// protocol, nullopt otherwise (`index` is -1 when the frame belongs to
/// another call and was left in place: rank 0, which saw every rank's step
/// check, will fail the job).
std::optional<Status> Bootstrap::Impl::take_pass(Conn& from, std::vector<Bytes>& got,
                                                 std::vector<char>& done, int& complete, int& index,
                                                 std::shared_ptr<const PassedFrame>& passed) {
  index = -1;
  const Frame& f = from.passes.front();
  const auto head = frame::decode_op(f.payload);
  const auto broke = [&](const std::string& why) {
    return error(CHORUS_ERR_PEER_LOST, who(from), " broke the side-channel protocol (", why,
                 " during all_gather #", seq_, ")");
  };
  if (!head) return broke("malformed pass frame");
  if (head->seq != seq_ || head->op != frame::Op::kAllGather) return std::nullopt;
  const int origin = head->arg;
  if (origin < 0 || origin >= size_ || origin == rank_ || done[static_cast<std::size_t>(origin)]) {
    return broke(cat("a piece of rank ", origin, "'s blob that this rank does not expect"));
  }
  Bytes& blob = got[static_cast<std::size_t>(origin)];
  const std::size_t piece = f.payload.size() - frame::kOpHeaderSize;
  if (blob.size() + piece > frame::kMaxGatherBlob) {
    return broke(cat("rank ", origin, "'s blob exceeds ", frame::kMaxGatherBlob, " bytes"));
  }
  blob.insert(blob.end(), f.payload.begin() + static_cast<std::ptrdiff_t>(frame::kOpHeaderSize),
              f.payload.end());
  if ((head->flags & frame::kMorePieces) == 0) {
    done[static_cast<std::size_t>(origin)] = 1;
    ++complete;
    filter_blob(origin, blob);
  }
  auto out = std::make_shared<PassedFrame>();
  out->head =
      frame::encode_header(frame::Type::kPass, static_cast<std::uint32_t>(f.payload.size()));
  out->payload = std::move(from.passes.front().payload);
  passed = std::move(out);
  from.passes.pop_front();
  index = origin;
  return std::nullopt;
}

/// Rank 0, after every rank's step check: waits for every other blob from
/// rank size-1 (its own went to rank 1 already).
Status Bootstrap::Impl::root_gather(std::span<const std::byte> mine, std::vector<Bytes>& out,
                                    Deadline deadline, Clock::time_point start) {
  const auto n = static_cast<std::size_t>(size_);
  const ConnPtr& source = peers_[n - 1];
  std::vector<Bytes> got(n);
  std::vector<char> done(n, 0);
  got[0].assign(mine.begin(), mine.end());
  filter_blob(0, got[0]);
  done[0] = 1;
  int complete = 1;
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        int index = -1;
        std::shared_ptr<const PassedFrame> passed;  // rank 0 passes nothing on
        while (!source->passes.empty()) {
          if (auto bad = take_pass(*source, got, done, complete, index, passed)) return bad;
          if (index < 0) break;
        }
        events_.clear();
        for (std::size_t r = 1; r < n; ++r) {
          const Conn& c = *peers_[r];
          if (c.gone == Gone::kAbort) return gone_status(c);
          if (!c.write_error.empty()) {
            return error(CHORUS_ERR_PEER_LOST, "lost rank ", r, " on the side channel (",
                         c.write_error, ")");
          }
        }
        if (complete == size_ && writes_in_flight_ == 0) return Status::ok();
        if (source->gone != Gone::kNo && complete < size_) return gone_status(*source);
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, "all_gather #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " waiting for rank ", size_ - 1,
                     " (the ring's last rank) with ", complete, " of ", size_, " blobs complete");
      });
  if (!status.is_ok()) return fail(std::move(status));
  release_passes();
  out = std::move(got);
  return Status::ok();
}

/// A non-root rank, after its step check went to rank 0: sends its own blob
/// on, takes the others from its ring predecessor (and rank 0's from rank 0
/// on rank 1) and passes each on while the ring needs it.
Status Bootstrap::Impl::peer_gather(std::span<const std::byte> mine, std::vector<Bytes>& out,
                                    Deadline deadline, Clock::time_point start) {
  const auto n = static_cast<std::size_t>(size_);
  const bool ringed = ring::linked(rank_, size_);
  const ConnPtr prev = ringed ? link_to(ring::prev(rank_, size_)) : nullptr;
  const ConnPtr next = ringed ? link_to(ring::next(rank_, size_)) : nullptr;
  const bool feeds_root = ring::feeds_root(rank_, size_);
  if (next) pass_blob(next, rank_, mine);
  if (feeds_root) pass_blob(coord_, rank_, mine);
  std::vector<Bytes> got(n);
  std::vector<char> done(n, 0);
  got[static_cast<std::size_t>(rank_)].assign(mine.begin(), mine.end());
  filter_blob(rank_, got[static_cast<std::size_t>(rank_)]);
  done[static_cast<std::size_t>(rank_)] = 1;
  int complete = 1;
  std::vector<ConnPtr> sources;
  if (prev) sources.push_back(prev);
  if (rank_ == 1) sources.push_back(coord_);
  std::vector<ConnPtr> watched = links_;
  watched.push_back(coord_);
  std::optional<Status> lost;  // a neighbour lost, until rank 0's verdict or kVerdictWait
  Clock::time_point verdict_until{};
  asio::steady_timer verdict_timer(io_);
  const auto expects_from = [&](const ConnPtr& c) {
    if (c == coord_) return rank_ == 1 && !done[0];
    return complete < size_;
  };
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        for (const ConnPtr& s : sources) {
          int index = -1;
          std::shared_ptr<const PassedFrame> passed;
          while (!s->passes.empty()) {
            if (auto bad = take_pass(*s, got, done, complete, index, passed)) return bad;
            if (index < 0) break;
            if (next && ring::forwards(rank_, size_, index)) pass_on(next, passed);
            if (feeds_root && index != 0) pass_on(coord_, passed);
          }
        }
        // State, not events: a few connections, and an event seen while
        // frames were still queued must not be lost.
        events_.clear();
        for (const ConnPtr& c : watched) {
          if (c->gone == Gone::kAbort) return gone_status(*c);
        }
        if (lost) {
          if (Clock::now() >= verdict_until) return lost;
          return std::nullopt;
        }
        for (const ConnPtr& c : watched) {
          std::optional<Status> found;
          if (!c->write_error.empty()) {
            found = error(CHORUS_ERR_PEER_LOST, "lost ", who(*c), " on the side channel (",
                          c->write_error, ")");
          }
          const bool source = c == prev || (c == coord_ && rank_ == 1);
          if (source && c->gone != Gone::kNo && c->passes.empty() && expects_from(c)) {
            found = gone_status(*c);
          }
          if (!found) continue;
          if (c == coord_ || coord_->gone != Gone::kNo) return found;
          lost = std::move(found);
          verdict_until = Clock::now() + kVerdictWait;
          verdict_timer.expires_at(verdict_until);
          verdict_timer.async_wait([](const asio::error_code&) {});
          return std::nullopt;
        }
        if (complete == size_ && writes_in_flight_ == 0) return Status::ok();
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, "all_gather #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " with ", complete, " of ", size_,
                     " blobs complete, waiting for rank ", prev ? prev->rank : 0,
                     prev ? " (its ring predecessor)" : " (coordinator)",
                     "; every rank must call it");
      });
  if (!status.is_ok()) return fail(std::move(status));
  release_passes();
  out = std::move(got);
  return Status::ok();
}

}  // namespace chorus::core
