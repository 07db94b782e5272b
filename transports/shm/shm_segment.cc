#include "shm_segment.h"

#include "shm.h"
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
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    header_ = std::exchange(o.header_, nullptr);
    ring_ = std::exchange(o.ring_, nullptr);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Segment::release() noexcept {
  unlink();
  if (base_ != nullptr) ::munmap(base_, size_);
  base_ = nullptr;
  header_ = nullptr;
  ring_ = nullptr;
}

void Segment::unlink() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Segment Segment::create(std::uint64_t nonce, int owner_rank, int peer_rank, int channel,
                        std::uint64_t ring_capacity, std::uint64_t probe_addr) {
  // An anonymous memory file: it has no name in /dev/shm, so nothing is
  // left behind when this process dies, whenever that happens. The peer
  // opens it through /proc/<pid>/fd/<fd> (the same-user check that 0600
  // gave a named segment: opening another process's fd needs ptrace read
  // access to it), as long as this process holds the descriptor.
  char label[48];
  std::snprintf(label, sizeof label, "%s%d-%d-%d", kNamePrefix, owner_rank, peer_rank, channel);
  FdGuard fd{::memfd_create(label, MFD_CLOEXEC)};
  if (fd.fd < 0) {
    throw Error(CHORUS_ERR_SYSTEM,
                std::string("memfd_create(") + label + ") failed: " + errno_text(errno));
  }
  Segment s;
  s.name_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd.fd);
  s.size_ = header_bytes() + ring_capacity;
  if (::ftruncate(fd.fd, static_cast<off_t>(s.size_)) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "ftruncate(" + s.name_ + ", " + std::to_string(s.size_) +
                                       ") failed: " + errno_text(errno) +
                                       " (out of memory? see transport.shm.ring_size)");
  }
  // MAP_POPULATE: fault every page in now rather than on the data path (a
  // first touch of a tmpfs page costs far more than copying into it).
  void* base =
      ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (base == MAP_FAILED) {
    throw Error(CHORUS_ERR_SYSTEM, "mmap(" + s.name_ + ") failed: " + errno_text(errno));
  }
  s.base_ = base;
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
  s.fd_ = std::exchange(fd.fd, -1);
  return s;
}

Segment Segment::attach(const Blob& blob) {
  const std::string name(blob.name, ::strnlen(blob.name, sizeof blob.name));
  FdGuard fd{::open(name.c_str(), O_RDWR | O_CLOEXEC)};
  if (fd.fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      throw Error(CHORUS_ERR_PEER_LOST,
                  "rank " + std::to_string(blob.rank) + "'s segment " + name +
                      " no longer exists: that rank closed its endpoint or exited");
    }
    throw Error(CHORUS_ERR_SYSTEM,
                "opening rank " + std::to_string(blob.rank) + "'s segment " + name +
                    " failed: " + errno_text(err) +
                    " (the ranks must run as one user, and a rank must not make itself "
                    "non-dumpable)");
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "fstat(" + name + ") failed: " + errno_text(errno));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < header_bytes() + Config::kMinRing) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "segment " + name + " is too small (" + std::to_string(size) + " bytes)");
  }
  Segment s;
  s.name_ = name;
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (base == MAP_FAILED) {
    throw Error(CHORUS_ERR_SYSTEM, "mmap(" + name + ") failed: " + errno_text(errno));
  }
  s.base_ = base;
  s.size_ = size;
  auto* h = static_cast<SegmentHeader*>(base);
  // A name that exists but does not carry the blob's nonce is not the
  // segment the blob describes: leave it alone.
  const bool matches =
      h->magic == kSegmentMagic && h->version == kLayoutVersion && h->nonce == blob.nonce &&
      h->owner_rank == blob.rank && h->peer_rank == blob.peer && h->channel == blob.channel &&
      h->owner_pid == blob.pid && h->ring_offset == header_bytes() &&
      h->ring_capacity >= Config::kMinRing && (h->ring_capacity & (h->ring_capacity - 1)) == 0 &&
      h->ring_offset + h->ring_capacity == size;
  if (!matches) {
    // The descriptor number was reused: the owner closed that endpoint.
    throw Error(CHORUS_ERR_PEER_LOST,
                "rank " + std::to_string(blob.rank) + "'s segment " + name +
                    " is gone (that descriptor now holds something else): that rank closed its "
                    "endpoint or exited");
  }
  s.header_ = h;
  s.ring_ = static_cast<unsigned char*>(base) + h->ring_offset;
  // The attaching side is the ring's only writer: map its pages writable
  // now, so the first lap around the ring takes no write faults.
#ifdef MADV_POPULATE_WRITE
  ::madvise(s.ring_, h->ring_capacity, MADV_POPULATE_WRITE);
#endif
  h->attached.store(1, std::memory_order_release);
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
