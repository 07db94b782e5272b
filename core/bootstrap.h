// Bootstrap: the TCP side channel that ranks use to find each other, swap
// address blobs and hold barriers before any transport is up: a star through
// rank 0 for joining, barriers and broadcasts, a ring for all_gather.
#pragma once

#include "core/deadline.h"
#include "core/frame.h"
#include "core/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::core {

/// How a rank finds the job.
struct BootstrapOptions {
  /// This process's rank, 0 <= rank < size.
  int rank = -1;
  /// Number of ranks in the job, >= 1.
  int size = 0;
  /// "host:port": an IPv4 address, an IPv6 address in brackets ("[::1]:29500")
  /// or a host name. Rank 0 listens on that address only; the others connect
  /// to it. Unused when size == 1.
  std::string coordinator;
  /// Ranks whose token differs are refused, so two jobs sharing a coordinator
  /// address cannot mix. May be empty. Not (yet) authentication: see
  /// frame::job_tag().
  std::string job_token;
  /// Which job the launcher says this process belongs to ("slurm:1234.0";
  /// core/job_identity.h). May be empty. Rank 0 refuses a rank whose
  /// identity differs, so ranks of two launched jobs never merge, even
  /// without a token. Not secret, not authentication.
  std::string job_identity;
  /// Receives log lines; levels are chorus_log_level_t. May be empty. Called
  /// on the thread that is inside a Bootstrap call.
  std::function<void(int level, const std::string& message)> log;
};

/// A host and port split out of "host:port".
struct HostPort {
  std::string host;  ///< without the brackets of an IPv6 literal
  std::uint16_t port = 0;
};

/// Splits "host:port", "[v6-address]:port" or "name:port". Pure.
/// @returns CHORUS_ERR_INVALID_ARGUMENT for a missing host or port, a port
///          outside 1..65535, or an unbracketed IPv6 address.
Result<HostPort> parse_host_port(std::string_view text);

/// The side channel of one job: a star of TCP connections through rank 0,
/// and a ring of the other ranks (core/bootstrap_ring.h), each link
/// authenticated like a connection to rank 0.
///
/// Every collective here is called by every rank, in the same order (the
/// frames carry a sequence number and the operation, and rank 0 fails all
/// ranks with CHORUS_ERR_INVALID_ARGUMENT on a mismatch). For a barrier or a
/// broadcast each non-root rank sends its part to rank 0, which sends the
/// result back to all; an all_gather goes around the ring, and rank 0 sends
/// only its own blob. Rank 0 thus sends O(N) bytes per call for blobs of a
/// fixed size.
///
/// Errors: any failure (timeout, lost peer, mismatch, bad argument) is final.
/// The Bootstrap tells the other ranks (rank 0 relays it to everyone), so
/// they fail promptly with CHORUS_ERR_PEER_LOST (CHORUS_ERR_INVALID_ARGUMENT
/// for a job-wide usage error), and every later call returns the first error
/// again. A rank whose connection drops makes the other ranks' pending and
/// next calls fail with CHORUS_ERR_PEER_LOST naming it.
///
/// @note Not thread-safe: one thread at a time may use a Bootstrap (calls
///       from different threads must be serialised by the caller). Different
///       Bootstrap objects are independent. Every call blocks the calling
///       thread until it completes or its deadline passes. Background
///       threads: Asio's resolver thread while a host name is being looked
///       up, and on rank 0, after the join, the one that refuses late
///       callers (core/late_arrivals.h); neither touches the job's state.
class Bootstrap {
 public:
  /// Largest blob a broadcast may carry.
  static constexpr std::size_t kMaxBlob = frame::kMaxBlob;
  /// Largest blob a rank may contribute to an all_gather (sent in pieces of
  /// kMaxBlob bytes).
  static constexpr std::size_t kMaxGatherBlob = frame::kMaxGatherBlob;

  /// Joins the job. Blocks until every rank has joined (rank 0: all size-1
  /// peers said hello and were welcomed; others: connected, welcomed, and
  /// linked with their ring neighbours) or the deadline passes. Non-root
  /// ranks retry while the coordinator is not listening yet. Rank 0 drops
  /// (and logs) connections that are not ranks of this job and keeps
  /// waiting. size == 1 opens no sockets. Once the job
  /// has formed, rank 0 keeps the port and a thread of its own answers every
  /// later caller with a refusal (docs/reliability.md, "Two jobs, one port").
  /// @returns the Bootstrap, or CHORUS_ERR_INVALID_ARGUMENT (bad options,
  ///          refused by rank 0), CHORUS_ERR_TIMEOUT (names the missing ranks
  ///          or the unreachable coordinator), CHORUS_ERR_SYSTEM (cannot listen
  ///          or resolve), CHORUS_ERR_PEER_LOST (rank 0 gave up the job).
  static Result<std::unique_ptr<Bootstrap>> connect(const BootstrapOptions& options,
                                                    Deadline deadline);

  /// Closes the sockets at once; never blocks on the network. Peers still
  /// expecting this rank see it as lost.
  ~Bootstrap();

  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const;
  int size() const;

  /// Every rank contributes `mine` (at most kMaxGatherBlob bytes, may be
  /// empty); on success all[r] holds rank r's blob on every rank. `all` is
  /// only written on success.
  Status all_gather(std::span<const std::byte> mine, std::vector<std::vector<std::byte>>& all,
                    Deadline deadline);

  /// Cuts rank `rank`'s gathered blob down to what this rank keeps of it, in
  /// place. Called on the calling thread, inside all_gather.
  using BlobFilter = std::function<void(int rank, std::vector<std::byte>& blob)>;
  /// all_gather, where all[r] is rank r's blob after `keep` has cut it. Each
  /// blob is cut as soon as it is complete (this rank's own at the start), so
  /// the rank never holds every blob whole: for blobs that grow with the job
  /// (the communicator's address table) that is O(N) memory instead of O(N^2).
  /// The blobs passed on along the ring are the whole ones.
  Status all_gather(std::span<const std::byte> mine, std::vector<std::vector<std::byte>>& all,
                    Deadline deadline, const BlobFilter& keep);

  /// Returns on a rank only once every rank has entered the barrier.
  Status barrier(Deadline deadline);

  /// On success `data` on every rank equals `data` on rank `root` (at most
  /// kMaxBlob bytes). Non-root `data` is only written on success.
  Status broadcast(std::vector<std::byte>& data, int root, Deadline deadline);

  /// Bytes this rank has written to the side channel so far, on all its
  /// connections (joining included). May be read from any thread.
  std::uint64_t bytes_sent() const;

  /// Once the job's last side-channel collective is done (the
  /// communicator's init barrier): closes this rank's connections to the
  /// other ranks (rank 0: one per rank; any other rank: rank 0's and its ring
  /// links), so that no rank's descriptors grow with the job. Rank 0 keeps
  /// its port and goes on refusing late callers. Every later collective
  /// fails at once with CHORUS_ERR_INTERNAL. Never blocks on the network.
  void close_links();

 private:
  class Impl;
  explicit Bootstrap(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::core
