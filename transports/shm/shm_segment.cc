#include "shm_segment.h"

#include "shm.h"
#include "shm_arena.h"
#include "shm_config.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string_view>
#include <utility>

namespace chorus::shm {

namespace {

constexpr std::uint64_t kRingAlign = 4096;

std::uint64_t header_bytes() {
  return (sizeof(SegmentHeader) + kRingAlign - 1) / kRingAlign * kRingAlign;
}

/// Parses the 36-character UUID text of boot_id into 16 bytes.
void parse_boot_id(const std::string& text, unsigned char out[16]) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 1 < text.size() && n < 16;) {
    if (text[i] == '-') {
      ++i;
      continue;
    }
    unsigned v = 0;
    std::from_chars(text.data() + i, text.data() + i + 2, v, 16);
    out[n++] = static_cast<unsigned char>(v);
    i += 2;
  }
}

/// Closes an fd on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const HostIdentity& HostIdentity::local() {
  // Computed per call site's first use in this process; a forked child that
  // changed namespaces is not supported (nor is one that changed hosts).
  static const HostIdentity id = [] {
    HostIdentity h;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    std::getline(in, text);
    parse_boot_id(text, h.boot_id);
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) == 0) h.pid_ns = st.st_ino;
    if (::stat("/dev/shm", &st) == 0) h.shm_dev = st.st_dev;
    return h;
  }();
  return id;
}

std::uint64_t random_u64() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    throw Error(CHORUS_ERR_SYSTEM, "getrandom failed: " + errno_text(errno));
  }
  return v;
}

Segment::~Segment() { release(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    header_ = std::exchange(o.header_, nullptr);
    ring_ = std::exchange(o.ring_, nullptr);
    arena_ = std::exchange(o.arena_, nullptr);
    offset_ = std::exchange(o.offset_, 0);
    peer_pid_ = std::exchange(o.peer_pid_, -1);
  }
  return *this;
}

void Segment::release() noexcept {
  if (base_ == nullptr) return;
  if (arena_ != nullptr) {
    // Owner. Whoever wins `attached` decides: a peer that has not attached
    // yet never will (its attach sees 2), so the range can go at once;
    // otherwise the peer may still read our closed flag there, and the
    // range goes once it has unmapped it.
    std::uint32_t none = 0;
    const bool sealed = header_->attached.compare_exchange_strong(none, 2);
    const bool gone = sealed || header_->detached.load(std::memory_order_acquire) != 0;
    ::munmap(base_, size_);
    arena_->retire(offset_, size_, gone, offset_ + offsetof(SegmentHeader, detached), peer_pid_);
  } else {
    header_->detached.store(1, std::memory_order_release);
    ::munmap(base_, size_);
  }
  base_ = nullptr;
  header_ = nullptr;
  ring_ = nullptr;
  arena_ = nullptr;
}

void Segment::populate_ring() noexcept {
#ifdef MADV_POPULATE_READ
  if (arena_ != nullptr) ::madvise(ring_, header_->ring_capacity, MADV_POPULATE_READ);
#endif
}

Segment Segment::create(Arena& arena, std::uint64_t nonce, int owner_rank, int peer_rank,
                        int channel, std::uint64_t ring_capacity, std::uint64_t probe_addr) {
  const std::uint64_t size = header_bytes() + ring_capacity;
  const std::uint64_t offset = arena.allocate(size);
  // No MAP_POPULATE: an endpoint that is never connected touches its header
  // page only. The ring's pages are faulted in when a peer attaches (it
  // writes them) and when this side connects (populate_ring()).
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena.fd(),
                      static_cast<off_t>(offset));
  if (base == MAP_FAILED) {
    const int err = errno;
    arena.retire(offset, size, true, 0, -1);
    throw Error(CHORUS_ERR_SYSTEM, "mmap of " + std::to_string(size) + " bytes at offset " +
                                       std::to_string(offset) + " of " + arena.name() +
                                       " failed: " + errno_text(err));
  }
  Segment s;
  s.base_ = base;
  s.size_ = size;
  s.arena_ = &arena;
  s.offset_ = offset;
  // tmpfs pages are zero; placement-new makes the atomics' lifetime explicit.
  auto* h = new (base) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kLayoutVersion;
  h->nonce = nonce;
  h->owner_rank = owner_rank;
  h->peer_rank = peer_rank;
  h->channel = channel;
  h->owner_pid = static_cast<std::int32_t>(::getpid());
  h->ring_offset = header_bytes();
  h->ring_capacity = ring_capacity;
  h->probe_addr = probe_addr;
  s.header_ = h;
  s.ring_ = static_cast<unsigned char*>(base) + header_bytes();
  return s;
}

Segment Segment::attach(const Blob& blob, bool request) {
  const std::string name(blob.name, ::strnlen(blob.name, sizeof blob.name));
  const std::string who = "rank " + std::to_string(blob.rank) + "'s segment " + name + " at " +
                          std::to_string(blob.offset);
  auto gone = [&](const char* how) {
    return Error(CHORUS_ERR_PEER_LOST,
                 who + " " + how + ": that rank closed its endpoint or context, or exited");
  };
  FdGuard fd{::open(name.c_str(), O_RDWR | O_CLOEXEC)};
  if (fd.fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw gone("no longer exists");
    throw Error(CHORUS_ERR_SYSTEM,
                "opening " + who + " failed: " + errno_text(err) +
                    " (the ranks must run as one user, and a rank must not make itself "
                    "non-dumpable)");
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "fstat(" + name + ") failed: " + errno_text(errno));
  }
  const std::uint64_t size = header_bytes() + blob.ring_capacity;
  // The descriptor number may have been reused for another file since the
  // blob was made: only a memory file large enough is looked at (mapping
  // past its end would fault on the first access).
  if (!S_ISREG(st.st_mode) || blob.offset % kPage != 0 || blob.offset < kPage ||
      blob.ring_capacity < Config::kMinRing ||
      static_cast<std::uint64_t>(st.st_size) < blob.offset + size) {
    throw gone("is gone (that descriptor now holds something else)");
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd,
                      static_cast<off_t>(blob.offset));
  if (base == MAP_FAILED) {
    throw Error(CHORUS_ERR_SYSTEM, "mmap of " + who + " failed: " + errno_text(errno));
  }
  Segment s;  // unmaps (and says `detached`) if anything below throws
  s.base_ = base;
  s.size_ = size;
  auto* h = static_cast<SegmentHeader*>(base);
  s.header_ = h;
  s.ring_ = static_cast<unsigned char*>(base) + header_bytes();
  // A range that does not carry the blob's nonce is not the segment the blob
  // describes: leave it alone.
  auto matches = [&] {
    return h->magic == kSegmentMagic && h->version == kLayoutVersion && h->nonce == blob.nonce &&
           h->owner_rank == blob.rank && h->peer_rank == blob.peer && h->channel == blob.channel &&
           h->owner_pid == blob.pid && h->ring_offset == header_bytes() &&
           h->ring_capacity == blob.ring_capacity &&
           (h->ring_capacity & (h->ring_capacity - 1)) == 0;
  };
  if (!matches()) {
    s.header_ = nullptr;  // not ours to mark detached
    ::munmap(std::exchange(s.base_, nullptr), size);
    throw gone("is gone");
  }
  std::uint32_t was = 0;
  if (!h->attached.compare_exchange_strong(was, 1) && was != 1) {
    s.header_ = nullptr;
    ::munmap(std::exchange(s.base_, nullptr), size);
    throw gone("was closed");
  }
  // The owner may have closed and freed the range between our first check
  // and the exchange (which then hit a fresh zero page): look again.
  if (!matches()) {
    s.header_ = nullptr;
    ::munmap(std::exchange(s.base_, nullptr), size);
    throw gone("is gone");
  }
  h->detached.store(0, std::memory_order_relaxed);
  // The attaching side is the ring's only writer: map its pages writable
  // now, so the first lap around the ring takes no write faults.
#ifdef MADV_POPULATE_WRITE
  ::madvise(s.ring_, h->ring_capacity, MADV_POPULATE_WRITE);
#endif
  if (request) {
    h->connect_request.store(1, std::memory_order_seq_cst);
    ring_request_bell(fd.fd, blob.arena_nonce);
  }
  return s;
}

int sweep_stale_segments() noexcept {
  int removed = 0;
  try {
    const HostIdentity& id = HostIdentity::local();
    char own_ns[32];
    std::snprintf(own_ns, sizeof own_ns, "%llx-", static_cast<unsigned long long>(id.pid_ns));
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) return 0;
    const std::string_view prefix = kNamePrefix;
    while (const dirent* e = ::readdir(dir)) {
      std::string_view name = e->d_name;
      if (name.substr(0, prefix.size()) != prefix) continue;
      name.remove_prefix(prefix.size());
      // Only this pid namespace's segments: another namespace's pid numbers
      // mean nothing here.
      if (name.substr(0, std::strlen(own_ns)) != own_ns) continue;
      name.remove_prefix(std::strlen(own_ns));
      int pid = 0;
      auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
      if (ec != std::errc() || pid <= 0 || ptr == name.data() + name.size() || *ptr != '-')
        continue;
      if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
      const std::string path = std::string("/") + e->d_name;
      if (::shm_unlink(path.c_str()) == 0) ++removed;
    }
    ::closedir(dir);
  } catch (...) {
    // Best effort: a failed sweep leaves files that the next one removes.
  }
  return removed;
}

}  // namespace chorus::shm
