// ReceiveBufferCheck's probe: process_vm_readv of this process onto itself.
#include <chorus/provider/receive_buffer_check.hpp>

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::provider {

namespace {

std::uintptr_t page_size() {
  static const std::uintptr_t size = [] {
    const long s = ::sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<std::uintptr_t>(s) : std::uintptr_t{4096};
  }();
  return size;
}

}  // namespace

int ReceiveBufferCheck::probe(std::uintptr_t begin, std::uintptr_t end) noexcept {
  const std::uintptr_t page = page_size();
  const pid_t self = ::getpid();
  // One byte per page: the buffer's first byte, then the first byte of every
  // later page it covers. Local and remote vectors name the same bytes.
  constexpr std::size_t kBatch = 256;
  iovec iov[kBatch];
  std::uintptr_t at = begin;
  while (at < end) {
    std::size_t n = 0;
    while (n < kBatch && at < end) {
      iov[n++] = {reinterpret_cast<void*>(at), 1};
      at = (at & ~(page - 1)) + page;
    }
    const ssize_t got = ::process_vm_readv(self, iov, n, iov, n, 0);
    if (got == static_cast<ssize_t>(n)) continue;
    if (got < 0 && (errno == ENOSYS || errno == EPERM || errno == EACCES)) return 0;
    if (got < 0 && errno == EINTR) {
      at = reinterpret_cast<std::uintptr_t>(iov[0].iov_base);  // this batch again
      continue;
    }
    return got < 0 ? errno : EFAULT;  // a short count: a later page faulted
  }
  const Range good{begin & ~(page - 1), (end + page - 1) & ~(page - 1)};
  // A range that overlaps or touches a remembered one joins it (their union
  // has no gap), so the pieces of one large buffer, received into at
  // different offsets, end up as one entry instead of evicting the others.
  for (std::size_t i = 0; i < kRanges; ++i) {
    Range& r = known_[i];
    if (r.begin != r.end && good.begin <= r.end && good.end >= r.begin) {
      r = {std::min(r.begin, good.begin), std::max(r.end, good.end)};
      last_hit_ = i;
      return 0;
    }
  }
  known_[next_slot_] = good;
  last_hit_ = next_slot_;
  next_slot_ = (next_slot_ + 1) % kRanges;
  return 0;
}

std::string ReceiveBufferCheck::describe(const void* addr, std::size_t length, int err) {
  char text[160];
  std::snprintf(text, sizeof text,
                "the receive buffer at %p (%zu bytes) is not writable memory of this process (%s)",
                addr, length, std::strerror(err));
  return text;
}

}  // namespace chorus::provider
