// Segment: the shared-memory layout of one endpoint direction, the address
// blob that names it, and the RAII mapping.
//
// Every endpoint creates one segment when it is opened, as a range of its
// context's memory file (shm_arena.h). The segment holds
// the ring its *peer* writes into and this endpoint reads from, plus the
// owner's wake-up word and closed flag. Each side maps its own segment and
// the peer's, so an endpoint touches two segments:
//
//   own segment  (owner = me):   ring peer->me, my bell, my closed flag
//   peer segment (owner = peer): ring me->peer, the peer's bell and flags
//
// The memory file is anonymous (memfd): it never has a name in /dev/shm, so
// nothing is left there whenever a process is SIGKILLed. The peer opens it
// through /proc/<owner pid>/fd/<fd> (the "name" in the blob), maps only the
// segment's range (the blob's offset) and closes its descriptor at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::shm {

class Arena;

inline constexpr std::uint32_t kSegmentMagic = 0x4d485343;  // "CSHM"
/// 3: frame headers grew to 24 bytes to carry the sender's immediate.
/// 4: frames are published by a stamp in their 32-byte header instead of a
///    `head` counter (gone); the header gained `cpu` (the owner's CPU while
///    it waits) on a line of its own.
/// 5: segments are ranges of one memfd per context (the blob carries the
///    offset); `attached` may be 2 (closed before any peer attached); the
///    header gained `connect_request` and `detached`.
inline constexpr std::uint16_t kLayoutVersion = 5;
inline constexpr std::size_t kCacheLine = 64;
/// Label of a context's memfd ("chorus-shm-<rank>", seen in /proc/<pid>/fd). Named segments of
/// layout 1 were
/// "/dev/shm/chorus-shm-<pid namespace inode>-<pid>-<nonce hex>"; the sweep
/// still removes those whose owner is dead.
inline constexpr const char* kNamePrefix = "chorus-shm-";

/// Header at offset 0 of every segment. The first block is written by the
/// owner before its blob leaves the process and never changes after. Every
/// later field is an atomic with one writer, named in its comment; fields
/// written by different sides sit on different cache lines.
struct SegmentHeader {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t reserved0;
  std::uint64_t nonce;
  std::int32_t owner_rank;
  std::int32_t peer_rank;
  std::int32_t channel;
  std::int32_t owner_pid;
  std::uint64_t ring_offset;
  std::uint64_t ring_capacity;
  /// Address, in the owner's process, of a word holding `nonce`: the peer
  /// reads it with process_vm_readv to learn whether cross-memory attach works.
  std::uint64_t probe_addr;

  /// Owner: 1 once its endpoint is closed (the peer then fails its posts).
  alignas(kCacheLine) std::atomic<std::uint32_t> closed;
  /// Owner: whether it can read the peer's memory (0 unknown until the
  /// owner connects, 1 yes, 2 no). The peer sends large messages by
  /// reference only on 1.
  std::atomic<std::uint32_t> cma_ok;
  /// 1 once the peer has mapped this segment (it sets it, from 0), 2 once
  /// the owner closed the endpoint before any peer did (the owner sets it,
  /// from 0; the range is then freed and an attach fails). Set by a
  /// compare-exchange on either side, so exactly one of them wins.
  std::atomic<std::uint32_t> attached;
  /// Peer: 1 when it attached by a polled connect (timeout 0) before the
  /// owner connected; the owner's poll then raises one connect request.
  std::atomic<std::uint32_t> connect_request;
  /// Peer: 1 once it has unmapped the segment again; a closed owner frees
  /// the range only then (Arena::retire).
  std::atomic<std::uint32_t> detached;

  /// Peer increments after anything the owner may be waiting for (a frame,
  /// ring space, an acknowledgement, its close); the owner futex-waits on it.
  alignas(kCacheLine) std::atomic<std::uint32_t> bell;
  /// Owner: 1 while it may be asleep on `bell`; the peer calls FUTEX_WAKE only then.
  std::atomic<std::uint32_t> sleeping;

  /// Owner: the CPU it last started waiting on, plus 1 (0 unknown). Stored
  /// only when it changes, so the line stays shared while both ranks keep
  /// their cores. A waiting peer that finds its own CPU here yields the core
  /// instead of spinning on it (the rank it waits for cannot run meanwhile).
  /// A hint only: nothing depends on it being current.
  alignas(kCacheLine) std::atomic<std::uint32_t> cpu;

  /// Owner (consumer): bytes ever consumed from the ring. (The producer's
  /// position has no word here: each frame's stamp publishes it, see
  /// shm_endpoint.cc.)
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;
  /// Owner: sequence number of the last by-reference message it finished
  /// reading (or dropped), so the peer can complete that send.
  std::atomic<std::uint64_t> rndv_done;
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// Identity of this host and namespace, compared at connect so that ranks
/// that cannot share memory fail with a clear message instead of hanging.
struct HostIdentity {
  unsigned char boot_id[16] = {};
  std::uint64_t pid_ns = 0;   // inode of /proc/self/ns/pid
  std::uint64_t shm_dev = 0;  // st_dev of /dev/shm (which tmpfs instance)
  static const HostIdentity& local();
};

/// The address blob (fixed layout, host byte order: both ends share a host).
struct Blob {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t size;
  std::int32_t rank;  // owner of the segment
  std::int32_t peer;  // the rank it is meant for
  std::int32_t channel;
  std::int32_t pid;
  std::uint64_t nonce;
  std::uint64_t pid_ns;
  std::uint64_t shm_dev;
  unsigned char boot_id[16];
  std::uint64_t offset;         // of the segment in the owner's memfd (page-aligned)
  std::uint64_t ring_capacity;  // of the segment's ring
  std::uint64_t arena_nonce;    // ArenaHeader::nonce of that memfd
  char name[40];                // NUL-terminated: "/proc/<pid>/fd/<fd>" of the owner's memfd
};
inline constexpr std::uint32_t kBlobMagic = 0x424d4853;  // "SHMB"
static_assert(sizeof(Blob) == 128);

/// A mapped segment. Created by its owner or attached by the peer.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  /// Allocates a segment with a ring of `ring_capacity` bytes (a power of
  /// two) in `arena`, maps it and fills the immutable header. Only the
  /// header page is touched: the ring's pages cost nothing until a peer
  /// attaches (populate_ring()). Throws Error.
  static Segment create(Arena& arena, std::uint64_t nonce, int owner_rank, int peer_rank,
                        int channel, std::uint64_t ring_capacity, std::uint64_t probe_addr);
  /// Opens the peer's memfd named in `blob`, maps the segment's range,
  /// checks its header against the blob, marks it attached and closes the
  /// descriptor. With `request`, also sets `connect_request` and rings the
  /// peer context's request bell. Throws Error (PEER_LOST when the owner
  /// closed it or exited).
  static Segment attach(const Blob& blob, bool request);

  SegmentHeader* header() const { return header_; }
  unsigned char* ring() const { return ring_; }
  /// Owner: where the segment lies in the arena.
  std::uint64_t offset() const { return offset_; }
  /// Owner: maps the ring's pages now (the owner connects), so that the data
  /// path takes no page faults.
  void populate_ring() noexcept;
  /// Owner: the connected peer's pid, for freeing the range if that peer
  /// exits without unmapping it cleanly.
  void set_peer_pid(int pid) { peer_pid_ = pid; }

 private:
  void release() noexcept;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  SegmentHeader* header_ = nullptr;
  unsigned char* ring_ = nullptr;
  Arena* arena_ = nullptr;  ///< owner only: the arena the range is returned to
  std::uint64_t offset_ = 0;
  int peer_pid_ = -1;
};

/// Removes named segments (layout 1, older Chorus versions) left in /dev/shm
/// by processes of this pid namespace that no longer exist. Returns how many
/// were removed. Never throws.
int sweep_stale_segments() noexcept;

/// A random 64-bit value from getrandom().
std::uint64_t random_u64();

}  // namespace chorus::shm
