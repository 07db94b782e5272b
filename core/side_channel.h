// SideChannel: how a communicator exchanges address blobs and barriers at
// init. Either Chorus's own bootstrap (TCP through rank 0) or all-gather and
// barrier callbacks that the host supplies (MPI_Allgather, a framework store),
// as JACCL's AllGatherFn and UCC's OOB hooks allow.
#pragma once

#include <chorus/chorus.h>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/deadline.h"
#include "core/status.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace chorus::core {

class SideChannel {
 public:
  virtual ~SideChannel() = default;
  /// Every rank contributes `mine`; on success all[r] is rank r's contribution.
  virtual Status all_gather(std::span<const std::byte> mine,
                            std::vector<std::vector<std::byte>>& all, Deadline deadline) = 0;
  /// all_gather, where all[r] is rank r's contribution cut by `keep`. The
  /// default cuts them once all have arrived; Chorus's own bootstrap cuts
  /// each as it completes, so the whole set is never held at once.
  virtual Status all_gather_filtered(std::span<const std::byte> mine,
                                     std::vector<std::vector<std::byte>>& all, Deadline deadline,
                                     const Bootstrap::BlobFilter& keep) {
    Status status = all_gather(mine, all, deadline);
    if (status.is_ok()) {
      for (std::size_t r = 0; r < all.size(); ++r) keep(static_cast<int>(r), all[r]);
    }
    return status;
  }
  virtual Status barrier(Deadline deadline) = 0;
  /// Bytes this rank has sent through the channel so far; 0 when the host
  /// carries it. May be read from any thread.
  virtual std::uint64_t bytes_sent() const { return 0; }
  /// The communicator is up and takes nothing more from the side channel:
  /// it may give back what it holds (Bootstrap::close_links).
  virtual void close_links() {}
};

/// Chorus's own side channel.
class BootstrapSideChannel final : public SideChannel {
 public:
  explicit BootstrapSideChannel(std::unique_ptr<Bootstrap> b) : bootstrap_(std::move(b)) {}
  Status all_gather(std::span<const std::byte> mine, std::vector<std::vector<std::byte>>& all,
                    Deadline deadline) override {
    return bootstrap_->all_gather(mine, all, deadline);
  }
  Status all_gather_filtered(std::span<const std::byte> mine,
                             std::vector<std::vector<std::byte>>& all, Deadline deadline,
                             const Bootstrap::BlobFilter& keep) override {
    return bootstrap_->all_gather(mine, all, deadline, keep);
  }
  Status barrier(Deadline deadline) override { return bootstrap_->barrier(deadline); }
  std::uint64_t bytes_sent() const override { return bootstrap_->bytes_sent(); }
  void close_links() override { bootstrap_->close_links(); }

 private:
  std::unique_ptr<Bootstrap> bootstrap_;
};

/// The host's callbacks. They block in host code, so Chorus's deadline cannot
/// interrupt them; the host's own mechanism (MPI, a store timeout) bounds them.
class HostSideChannel final : public SideChannel {
 public:
  HostSideChannel(int rank, int size, chorus_allgather_fn_t allgather, chorus_barrier_fn_t barrier,
                  void* ctx)
      : rank_(rank), size_(size), allgather_(allgather), barrier_(barrier), ctx_(ctx) {}

  /// Variable-size all-gather over the host's fixed-size one: sizes first,
  /// then every contribution padded to the largest.
  Status all_gather(std::span<const std::byte> mine, std::vector<std::vector<std::byte>>& all,
                    Deadline) override {
    uint64_t my_size = mine.size();
    std::vector<uint64_t> sizes(size_t(size_), 0);
    if (int rc = allgather_(ctx_, &my_size, sizes.data(), sizeof(uint64_t)); rc != 0)
      return fail("all-gather of sizes", rc);
    uint64_t max = 0;
    for (uint64_t s : sizes) max = std::max(max, s);
    if (max > (64u << 20))
      return {CHORUS_ERR_INVALID_ARGUMENT, "host all-gather returned an implausible size " +
                                               std::to_string(max) +
                                               "; is it gathering in rank order?"};
    std::vector<std::byte> padded(std::max<uint64_t>(max, 1));
    std::copy(mine.begin(), mine.end(), padded.begin());
    std::vector<std::byte> gathered(padded.size() * size_t(size_));
    if (int rc = allgather_(ctx_, padded.data(), gathered.data(), padded.size()); rc != 0)
      return fail("all-gather of addresses", rc);
    all.assign(size_t(size_), {});
    for (int r = 0; r < size_; ++r) {
      auto* b = gathered.data() + size_t(r) * padded.size();
      all[size_t(r)].assign(b, b + sizes[size_t(r)]);
    }
    return Status::ok();
  }

  Status barrier(Deadline deadline) override {
    if (barrier_) {
      if (int rc = barrier_(ctx_); rc != 0) return fail("barrier", rc);
      return Status::ok();
    }
    std::vector<std::vector<std::byte>> ignored;
    std::byte token{1};
    return all_gather({&token, 1}, ignored, deadline);
  }

 private:
  Status fail(const char* what, int rc) const {
    return {CHORUS_ERR_SYSTEM, "rank " + std::to_string(rank_) + ": the host's " + what +
                                   " callback failed with " + std::to_string(rc)};
  }
  int rank_;
  int size_;
  chorus_allgather_fn_t allgather_;
  chorus_barrier_fn_t barrier_;
  void* ctx_;
};

/// The key this job's transports authenticate their data connections with
/// (chorus_tp_context_info_t::job_key). Rank 0 draws a fresh job nonce and
/// shares it over the side channel; every rank derives
/// auth::transport_key(token, nonce). Collective: every rank calls it once,
/// after the side channel is up and before the transport context opens.
inline Result<std::vector<std::byte>> agree_transport_key(SideChannel& channel, int rank,
                                                          const std::string& token,
                                                          Deadline deadline) {
  try {
    std::vector<std::byte> mine;
    if (rank == 0) {
      const auth::Nonce nonce = auth::random_nonce();
      mine.assign(nonce.begin(), nonce.end());
    }
    std::vector<std::vector<std::byte>> all;
    if (Status s = channel.all_gather(mine, all, deadline); !s.is_ok()) {
      return s.with_context("rank " + std::to_string(rank) + ": agreeing on the transport key");
    }
    if (all.empty() || all[0].size() != auth::kNonceSize) {
      return Status(CHORUS_ERR_INTERNAL, "rank " + std::to_string(rank) +
                                             ": rank 0 shared a job nonce of the wrong size");
    }
    return auth::transport_key(token, all[0]);
  } catch (const std::exception& e) {
    return Status(CHORUS_ERR_SYSTEM, "rank " + std::to_string(rank) + ": " + e.what());
  }
}

}  // namespace chorus::core
