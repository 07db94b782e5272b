// split: creates a child communicator from a color and key, agreeing the
// members and their order through the parent's own all_gather and wiring
// the child up with the parent's configuration (spawn, which also makes a
// communicator's lanes).

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/log.h"

#include <algorithm>

namespace chorus::core {

Status Communicator::init_child(const Config& cfg, int rank, int size, std::string id,
                                std::vector<std::byte>& blob_out) {
  cfg_ = cfg;
  cfg_.rank = rank;
  cfg_.world_size = size;
  rank_ = rank;
  size_ = size;
  set_check_shape(rank, size);
  id_ = std::move(id);
  LogCommScope log_scope(&id_);
  auto tp = load_transport();
  if (!tp.is_ok()) return tp.status().with_context(who());
  transport_ = *tp;
  tp_ = transport_->transport();
  if (auto st = select_algorithms(); !st.is_ok()) return st;
  if (auto st = open_context(); !st.is_ok()) return st;
  return open_endpoints(blob_out);
}

namespace {

/// Variable-size all-gather over a communicator's fixed-size one: sizes
/// first, then every blob padded to the largest.
Status gather_blobs(Communicator& comm, const std::vector<std::byte>& mine,
                    std::vector<std::vector<std::byte>>& all) {
  uint64_t my_size = mine.size();
  std::vector<uint64_t> sizes(size_t(comm.size()));
  if (auto st = comm.all_gather(&my_size, sizes.data(), 1, CHORUS_UINT64); !st.is_ok()) return st;
  uint64_t max = 1;
  for (uint64_t v : sizes) max = std::max(max, v);
  std::vector<std::byte> padded(max);
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<std::byte> gathered(size_t(max) * size_t(comm.size()));
  if (auto st = comm.all_gather(padded.data(), gathered.data(), size_t(max), CHORUS_UINT8);
      !st.is_ok())
    return st;
  all.assign(size_t(comm.size()), {});
  for (int r = 0; r < comm.size(); ++r) {
    auto* b = gathered.data() + size_t(r) * size_t(max);
    all[size_t(r)].assign(b, b + sizes[size_t(r)]);
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::spawn(const Config& cfg,
                                                          const std::vector<int>& members,
                                                          const std::string& id) {
  int child_rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank_) child_rank = int(i);
  const bool joins = child_rank >= 0;
  // The child opens its context and endpoints locally. A failure here is
  //    not returned yet: every rank must still take part in the exchanges
  //    below, or the others would wait for it until their deadline.
  std::unique_ptr<Communicator> child;
  Status local;
  std::vector<std::byte> blob;
  if (joins) {
    child.reset(new Communicator());
    local = child->init_child(cfg, child_rank, int(members.size()), id, blob);
    if (!local.is_ok()) blob.clear();
  }
  // Exchange the address tables over this communicator; each child keeps
  //    its members' tables in child-rank order.
  std::vector<std::vector<std::byte>> tables;
  if (auto st = gather_blobs(*this, blob, tables); !st.is_ok())
    return st.with_context(id + ": exchanging the endpoint addresses");
  if (local.is_ok() && child) {
    std::vector<std::vector<std::byte>> child_tables;
    for (int r : members) {
      const int owner = int(child_tables.size());  // its rank in the new communicator
      if (tables[size_t(r)].empty()) {
        local = {CHORUS_ERR_PEER_LOST, who() + ": " + id + ": rank " + std::to_string(r) +
                                           " could not set up its part of the new communicator"};
        break;
      }
      child_tables.push_back(std::move(tables[size_t(r)]));
      child->keep_own_entries(owner, child_tables.back());
    }
    Deadline deadline = Deadline::after(seconds_ms(cfg_.timeout_init_s));
    if (local.is_ok()) local = child->connect_from(child_tables, deadline);
    if (local.is_ok()) local = child->setup_staging();
    if (local.is_ok()) local = child->init_algorithms();
  }
  // Agree: it succeeds only if it succeeded everywhere.
  int32_t ok = local.is_ok() ? 1 : 0;
  if (auto st = all_reduce(&ok, &ok, 1, CHORUS_INT32, CHORUS_MIN); !st.is_ok())
    return st.with_context(id + ": agreeing on the outcome");
  if (!local.is_ok()) return local;
  if (!ok)
    return Status{CHORUS_ERR_PEER_LOST, who() + ": " + id +
                                            ": another rank failed to set up its part of the new "
                                            "communicator (see that rank's error)"};
  return child;
}

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  const uint64_t split_no = splits_++;
  // 1. Who goes where: every rank learns every (color, key).
  int32_t mine[2] = {color < 0 ? -1 : color, key};
  std::vector<int32_t> all_ck(size_t(size_) * 2);
  if (auto st = all_gather(mine, all_ck.data(), 2, CHORUS_INT32); !st.is_ok())
    return st.with_context("split");
  std::vector<int> members;  // parent ranks of this rank's child, in child order
  if (color >= 0) {
    for (int r = 0; r < size_; ++r)
      if (all_ck[size_t(r) * 2] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all_ck[size_t(a) * 2 + 1] < all_ck[size_t(b) * 2 + 1];
    });
  }
  int child_rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank_) child_rank = int(i);

  // 2. The child, wired up through this communicator.
  const std::string child_id = id_ + ".s" + std::to_string(split_no) + "c" + std::to_string(color);
  auto spawned = spawn(cfg_, color >= 0 ? members : std::vector<int>{}, child_id);
  if (!spawned.is_ok()) return spawned.status();
  std::unique_ptr<Communicator> child = std::move(*spawned);
  // The child's lanes (collectives.lanes), among its own members.
  if (child)
    if (auto st = child->open_lanes(); !st.is_ok()) return st.with_context("split");
  if (child)
    child->log(CHORUS_LOG_INFO, "split from comm " + id_ + ": rank " + std::to_string(child_rank) +
                                    " of " + std::to_string(members.size()) + " (color " +
                                    std::to_string(color) + ", key " + std::to_string(key) + ")");
  return child;
}

}  // namespace chorus::core
