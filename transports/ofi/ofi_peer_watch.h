// PeerWatch: noticing that a peer process is gone, for providers that do not
// report it (docs/ofi.md, "Peer loss").
//
// libfabric's RDM providers are connectionless to the application: shm
// completes sends into a dead peer's queue, and tcp;ofi_rxm (1.17) neither
// fails operations pending on a dropped connection nor refuses new sends
// (they return -FI_EAGAIN forever). The transport therefore watches peers
// itself:
//  - a peer on this host (same boot id and pid namespace) through a pidfd,
//    which becomes readable the moment the process exits;
//  - any other peer through a small TCP "watch" connection between the two
//    contexts, whose end (FIN, RST or keepalive timeout) means the process
//    or its host is gone.
#pragma once

#include "ofi.h"
#include "ofi_config.h"
#include "ofi_wire.h"

#include <poll.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace chorus::ofi {

/// Who this process is, for the blob: a peer compares it with its own to
/// decide whether a pidfd can watch us.
struct ProcessIdentity {
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;  // /proc/self/stat field 22, clock ticks since boot
  std::array<std::byte, 16> boot_id{};
  std::uint64_t pid_namespace = 0;

  static ProcessIdentity current();
};

/// One context's view of its peers' liveness. Not thread-safe: owned by the
/// context's single caller thread.
class PeerWatch {
 public:
  /// Opens the watch listener on `bind_address` when `mode` may need it.
  /// Throws Error.
  PeerWatch(int rank, int size, Liveness mode, const std::string& bind_address);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// This context's random token (in its blob): names its doorbell too.
  std::uint64_t token() const { return token_; }
  /// Writes this process's identity and the watch listener into a blob.
  void describe_self(wire::Blob& blob) const;
  /// The blob's owner is this very process.
  bool same_process(const wire::Blob& peer) const {
    return peer.pid == self_.pid && peer.boot_id == self_.boot_id &&
           peer.pid_namespace == self_.pid_namespace;
  }

  /// Starts watching the rank that owns `peer` (once per rank; later calls
  /// for other channels return at once). A peer that is provably gone
  /// already (its pid no longer exists) throws Error(PEER_LOST). The higher
  /// rank dials the watch connection and may block until `deadline`.
  void watch(const wire::Blob& peer, const Deadline& deadline);

  /// A polled connect's call-me to the blob's owner (the higher rank) over
  /// its watch listener: a connection of its own, closed once the 16 bytes
  /// are sent, so it needs no later progress of this context. Waits for the
  /// TCP connect until `deadline`. False when the peer has no listener or
  /// it could not be reached (then the fabric call-me must do).
  bool call_me(const wire::Blob& peer, const Deadline& deadline);
  /// Endpoint keys named by call-mes that check() received since the last call.
  std::vector<std::uint32_t> take_call_mes();
  /// The file descriptors wait() must sleep on.
  void add_pollfds(std::vector<pollfd>& fds) const;

  /// Looks at every watched fd without blocking (accepts watch connections,
  /// notices exits and closed connections). Returns the ranks found dead
  /// since the last call, with why.
  std::vector<std::pair<int, std::string>> check();

  /// How `rank` is watched, for log and error messages ("pidfd of pid 1234").
  std::string how(int rank) const;

 private:
  struct Peer {
    int rank = -1;
    std::uint32_t pid = 0;
    UniqueFd pidfd;
    UniqueFd socket;
    bool dead = false;
    bool reported = false;
    std::string why;
    std::string how = "not watched";
  };
  struct Pending {
    UniqueFd fd;
    std::size_t got = 0;
    std::array<std::byte, 16> hello{};
    Deadline::Clock::time_point since;
  };

  void listen(const std::string& bind_address);
  void accept_new();
  void read_pending();
  void dial(Peer& p, const wire::Blob& peer, const Deadline& deadline);
  /// A connected socket to the blob's watch listener. Throws Error.
  UniqueFd connect_listener(const wire::Blob& blob, const Deadline& deadline,
                            std::string& where) const;
  Peer& peer(int rank);

  int rank_;
  int size_;
  Liveness mode_;
  ProcessIdentity self_;
  std::uint64_t token_ = 0;
  UniqueFd listener_;
  std::uint8_t listen_family_ = 0;
  std::array<std::byte, 16> listen_address_{};
  std::uint16_t listen_port_ = 0;
  std::map<int, Peer> peers_;
  std::vector<Pending> pending_;
  std::vector<std::uint32_t> call_mes_;
};

}  // namespace chorus::ofi
