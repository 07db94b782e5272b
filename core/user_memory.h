// UserMemory: copies to and from caller buffers without faulting. A copy
// from memory that is not readable (or into memory that is not writable)
// returns the errno (EFAULT) instead of raising SIGSEGV, so that a bad
// pointer handed to a tagged send or receive fails that call, as it does
// when a transport reads or writes the buffer itself.
//
// Ranges found good are remembered (the last kRanges, per direction); a copy
// inside one is a memcpy. Anything else is probed page by page with
// process_vm_readv on this process (one system call). Where the kernel
// refuses that call (a seccomp filter, ENOSYS, EPERM) the copy is a plain
// memcpy: a check must never refuse valid memory.
//
// Not thread-safe: one per engine, used by the communicator's executor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::core {

class UserMemory {
 public:
  static constexpr std::size_t kRanges = 16;

  /// Copies n bytes from the caller's `src`; 0 or the errno.
  int read(void* dst, const void* src, std::size_t n) noexcept;
  /// Copies n bytes into the caller's `dst`; 0 or the errno.
  int write(void* dst, const void* src, std::size_t n) noexcept;
  /// Whether the whole range may be read (written); 0 or the errno.
  int readable(const void* p, std::size_t n) noexcept { return check(readable_, p, n, false); }
  int writable(void* p, std::size_t n) noexcept { return check(writable_, p, n, true); }
  /// "the send buffer at 0x... (N bytes) is not readable memory of this
  /// process (Bad address)".
  static std::string describe(const char* which, const void* addr, std::size_t n, int err,
                              bool writable);

 private:
  struct Range {
    std::uintptr_t begin = 0, end = 0;
  };
  struct Cache {
    std::array<Range, kRanges> known{};
    std::size_t next = 0;
    bool has(std::uintptr_t b, std::uintptr_t e) const;
    void add(std::uintptr_t b, std::uintptr_t e);
  };
  /// Probes [b, e): readable (and, with `writable`, writable: each probed
  /// byte is copied onto itself). 0, or the errno.
  static int probe(std::uintptr_t b, std::uintptr_t e, bool writable) noexcept;
  int check(Cache& c, const void* p, std::size_t n, bool writable) noexcept;

  Cache readable_, writable_;
};

}  // namespace chorus::core
