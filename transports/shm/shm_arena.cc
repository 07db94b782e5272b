#include "shm_arena.h"

#include "shm.h"
#include "shm_futex.h"
#include "shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <new>

namespace chorus::shm {

Arena::Arena(int rank) {
  // An anonymous memory file: nothing is left behind when this process
  // dies, whenever that happens. A peer opens it through /proc/<pid>/fd/<fd>,
  // which needs ptrace read access to this process (the same user).
  char label[48];
  std::snprintf(label, sizeof label, "%s%d", kNamePrefix, rank);
  fd_ = ::memfd_create(label, MFD_CLOEXEC);
  if (fd_ < 0) {
    throw Error(CHORUS_ERR_SYSTEM,
                std::string("memfd_create(") + label + ") failed: " + errno_text(errno));
  }
  name_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_);
  void* base = MAP_FAILED;
  if (::ftruncate(fd_, static_cast<off_t>(kPage)) == 0) {
    base = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  }
  if (base == MAP_FAILED) {
    const int err = errno;
    ::close(fd_);
    throw Error(CHORUS_ERR_SYSTEM, "setting up the shared memory file " + std::string(label) +
                                       " failed: " + errno_text(err));
  }
  // tmpfs pages are zero; placement-new makes the atomics' lifetime explicit.
  header_ = new (base) ArenaHeader{};
  header_->nonce = random_u64();
  header_->magic = kArenaMagic;
}

Arena::~Arena() {
  // Peers that still map a range keep the file's pages alive until they
  // unmap them; the descriptor (the name peers open) goes now.
  if (header_ != nullptr) ::munmap(header_, kPage);
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t Arena::allocate(std::uint64_t bytes) {
  sweep();
  const std::uint64_t offset = end_;
  if (::ftruncate(fd_, static_cast<off_t>(offset + bytes)) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "growing the shared memory file " + name_ + " to " +
                                       std::to_string(offset + bytes) +
                                       " bytes failed: " + errno_text(errno) +
                                       " (file size limit? see transport.shm.ring_size)");
  }
  end_ = offset + bytes;
  return offset;
}

void Arena::punch(std::uint64_t offset, std::uint64_t bytes) noexcept {
  // Best effort: a range that stays is only memory this context holds until
  // it closes.
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(bytes));
}

void Arena::retire(std::uint64_t offset, std::uint64_t bytes, bool free_now,
                   std::uint64_t detached_offset, int peer_pid) noexcept {
  if (free_now) {
    punch(offset, bytes);
  } else {
    try {
      pending_.push_back({offset, bytes, detached_offset, peer_pid});
    } catch (...) {
      // Out of memory: the range stays allocated until the context closes.
    }
  }
  sweep();
}

void Arena::sweep() noexcept {
  std::erase_if(pending_, [this](const Pending& p) {
    // The owner no longer maps the range: read the peer's word from the file.
    std::uint32_t detached = 0;
    const bool read = ::pread(fd_, &detached, sizeof detached,
                              static_cast<off_t>(p.detached_offset)) == sizeof detached;
    const bool exited = p.peer_pid > 0 && ::kill(p.peer_pid, 0) != 0 && errno == ESRCH;
    if (!(read && detached != 0) && !exited) return false;
    punch(p.offset, p.bytes);
    return true;
  });
}

void ring_request_bell(int fd, std::uint64_t nonce) noexcept {
  void* base = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return;
  auto* h = static_cast<ArenaHeader*>(base);
  if (h->magic == kArenaMagic && h->nonce == nonce) {
    // Pairs with the owner's "sleeping = 1; read the bell; scan": either it
    // finds the request in its scan, or we see its flag and wake it.
    h->request_bell.fetch_add(1, std::memory_order_seq_cst);
    if (h->sleeping.load(std::memory_order_seq_cst) != 0) futex_wake_all(&h->request_bell, false);
  }
  ::munmap(base, kPage);
}

}  // namespace chorus::shm
