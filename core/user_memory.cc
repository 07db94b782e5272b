// UserMemory (core/user_memory.h): fault-free copies to and from caller
// buffers, with page probes by process_vm_readv on this process.
#include "core/user_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::core {

namespace {
std::uintptr_t page_size() {
  static const std::uintptr_t size = [] {
    const long s = ::sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<std::uintptr_t>(s) : std::uintptr_t{4096};
  }();
  return size;
}
}  // namespace

bool UserMemory::Cache::has(std::uintptr_t b, std::uintptr_t e) const {
  for (const auto& r : known)
    if (b >= r.begin && e <= r.end) return true;
  return false;
}

void UserMemory::Cache::add(std::uintptr_t b, std::uintptr_t e) {
  const std::uintptr_t page = page_size();
  const Range good{b & ~(page - 1), (e + page - 1) & ~(page - 1)};
  for (auto& r : known)
    if (r.begin != r.end && good.begin <= r.end && good.end >= r.begin) {
      r = {std::min(r.begin, good.begin), std::max(r.end, good.end)};
      return;
    }
  known[next] = good;
  next = (next + 1) % kRanges;
}

int UserMemory::probe(std::uintptr_t b, std::uintptr_t e, bool writable) noexcept {
  const std::uintptr_t page = page_size();
  const pid_t self = ::getpid();
  constexpr std::size_t kBatch = 64;
  iovec remote[kBatch], local[kBatch];
  unsigned char scratch[kBatch];
  std::uintptr_t at = b;
  while (at < e) {
    std::size_t n = 0;
    const std::uintptr_t first = at;
    while (n < kBatch && at < e) {
      remote[n] = {reinterpret_cast<void*>(at), 1};
      // Readable only: into a scratch byte. Writable: onto itself, which
      // the kernel reads and then writes back unchanged.
      local[n] = writable ? remote[n] : iovec{&scratch[n], 1};
      ++n;
      at = (at & ~(page - 1)) + page;
    }
    const ssize_t got = ::process_vm_readv(self, local, n, remote, n, 0);
    if (got == static_cast<ssize_t>(n)) continue;
    if (got < 0 && (errno == ENOSYS || errno == EPERM || errno == EACCES)) return 0;
    if (got < 0 && errno == EINTR) {
      at = first;
      continue;
    }
    return got < 0 ? errno : EFAULT;
  }
  return 0;
}

int UserMemory::check(Cache& c, const void* p, std::size_t n, bool writable) noexcept {
  if (n == 0) return 0;
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t e = b + n;
  if (e < b) return EFAULT;
  if (c.has(b, e)) return 0;
  if (int err = probe(b, e, writable)) return err;
  c.add(b, e);
  return 0;
}

int UserMemory::read(void* dst, const void* src, std::size_t n) noexcept {
  if (int err = check(readable_, src, n, false)) return err;
  if (n) std::memcpy(dst, src, n);
  return 0;
}

int UserMemory::write(void* dst, const void* src, std::size_t n) noexcept {
  if (int err = check(writable_, dst, n, true)) return err;
  if (n) std::memcpy(dst, src, n);
  return 0;
}

std::string UserMemory::describe(const char* which, const void* addr, std::size_t n, int err,
                                 bool writable) {
  char text[200];
  std::snprintf(text, sizeof text,
                "the %s buffer at %p (%zu bytes) is not %s memory of this "
                "process (%s)",
                which, addr, n, writable ? "writable" : "readable", std::strerror(err));
  return text;
}

}  // namespace chorus::core
