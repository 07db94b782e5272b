// Arena: the one memory file (memfd) that holds every segment of a context.
//
// A context opens one memfd when it is opened and keeps it until it closes;
// each endpoint's segment is a page-aligned range of it, appended with
// ftruncate (the file is sparse: a range costs memory only for the pages
// that are touched). So a rank holds one descriptor for all its segments,
// however many endpoints it opens, instead of one per endpoint until the
// peer attached. A peer opens the file through /proc/<pid>/fd/<fd>, maps
// only the range its blob names, and closes its descriptor at once.
//
// Page 0 of the file is the ArenaHeader: the context's connect-request bell,
// which a peer rings after a polled connect so that this context's poll and
// wait learn of it without watching every unconnected endpoint.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::shm {

inline constexpr std::uint32_t kArenaMagic = 0x41534843;  // "CHSA"
inline constexpr std::size_t kPage = 4096;

/// Page 0 of an arena. `magic` and `nonce` are written before any blob
/// leaves the process and never change.
struct ArenaHeader {
  std::uint32_t magic;
  std::uint32_t reserved0;
  std::uint64_t nonce;
  /// Peers increment it after setting `connect_request` in one of this
  /// context's segments; the context futex-waits on it while it sleeps.
  alignas(64) std::atomic<std::uint32_t> request_bell;
  /// Owner: 1 while it may be asleep on `request_bell` (peers FUTEX_WAKE only then).
  std::atomic<std::uint32_t> sleeping;
};
static_assert(sizeof(ArenaHeader) <= kPage);

/// The owner's side of an arena. One thread at a time (the context's).
class Arena {
 public:
  /// Creates the memfd ("chorus-shm-<rank>") and its header page. Throws Error.
  explicit Arena(int rank);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// "/proc/<pid>/fd/<fd>": what a peer opens.
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  ArenaHeader* header() const { return header_; }

  /// A fresh range of `bytes` (a multiple of kPage) at the end of the file:
  /// its offset. Ranges are never reused, so a peer that still maps a closed
  /// endpoint's range never sees another endpoint's data there. Throws Error.
  std::uint64_t allocate(std::uint64_t bytes);
  /// The owner closed the endpoint at `offset`. When `free_now`, its pages
  /// are given back at once (punched out of the file); otherwise the peer
  /// still maps it, and the range is punched once the peer has let it go
  /// (its `detached` word, at `detached_offset` inside the range, is 1) or
  /// process `peer_pid` (when > 0) has exited: checked at each later
  /// allocate() and retire().
  void retire(std::uint64_t offset, std::uint64_t bytes, bool free_now,
              std::uint64_t detached_offset, int peer_pid) noexcept;
  /// Ranges retired but still mapped by their peer.
  std::size_t pending_ranges() const { return pending_.size(); }
  /// Frees the retired ranges whose peer has let go (see retire()).
  void sweep() noexcept;

 private:
  struct Pending {
    std::uint64_t offset;
    std::uint64_t bytes;
    std::uint64_t detached_offset;
    int peer_pid;
  };
  void punch(std::uint64_t offset, std::uint64_t bytes) noexcept;

  int fd_ = -1;
  std::string name_;
  ArenaHeader* header_ = nullptr;
  std::uint64_t end_ = kPage;  // the file's size: page 0 plus every range so far
  std::vector<Pending> pending_;
};

/// Rings the connect-request bell of the arena `fd` refers to (a peer's,
/// opened by the caller) when its header carries `nonce`; wakes the arena's
/// owner if it sleeps. Maps the header page only for the call. Never throws.
void ring_request_bell(int fd, std::uint64_t nonce) noexcept;

}  // namespace chorus::shm
