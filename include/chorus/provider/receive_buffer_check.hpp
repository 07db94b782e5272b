// chorus::provider::ReceiveBufferCheck: finds out, without faulting, whether
// a posted receive buffer is writable memory of this process, so a transport
// that copies into it with memcpy reports a bad pointer as an error instead
// of dying of SIGSEGV. Part of the provider toolkit (docs/transport-abi.md).
#pragma once

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::provider {

/// Probes each page of a buffer with process_vm_readv on this process,
/// copying one byte of every page onto itself: the kernel reads it (the page
/// must be readable) and writes it back (writable), and answers EFAULT
/// instead of raising a signal. The bytes keep their values. A probe costs a
/// system call (about a microsecond, plus tens of nanoseconds per page), so
/// the last kRanges page ranges found good are remembered (ranges that
/// overlap or touch are joined) and a buffer inside one of them costs a few
/// comparisons: the steady state of a program that reuses its buffers makes
/// no system call at all.
///
/// Not thread-safe: one per context, used by the context's caller thread.
///
/// @note A range found good stays "good" until it is evicted. A buffer that
///       was valid, then unmapped, then posted again (a use after free) is
///       not detected and faults as before.
class ReceiveBufferCheck {
 public:
  static constexpr std::size_t kRanges = 16;

  /// 0 when every byte of [addr, addr + length) may be written (always for
  /// length 0), else the errno of the probe (EFAULT). When the kernel cannot
  /// probe (process_vm_readv refused by a seccomp filter, ENOSYS or EPERM)
  /// the buffer is taken as good: a check must never refuse valid memory.
  /// Never blocks; never writes a byte outside the buffer.
  int check(const void* addr, std::size_t length) noexcept {
    if (length == 0) return 0;
    const auto begin = reinterpret_cast<std::uintptr_t>(addr);
    const std::uintptr_t end = begin + length;
    if (end < begin) return EFAULT;  // wraps around the address space
    const Range& last = known_[last_hit_];
    if (begin >= last.begin && end <= last.end) return 0;
    for (std::size_t i = 0; i < kRanges; ++i) {
      if (begin >= known_[i].begin && end <= known_[i].end) {
        last_hit_ = i;
        return 0;
      }
    }
    return probe(begin, end);
  }

  /// "the receive buffer at 0x... (N bytes) is not writable memory of this
  /// process (Bad address)", for an error completion.
  static std::string describe(const void* addr, std::size_t length, int err);

 private:
  struct Range {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;  // empty while begin == end
  };
  int probe(std::uintptr_t begin, std::uintptr_t end) noexcept;

  std::array<Range, kRanges> known_{};
  std::size_t last_hit_ = 0;
  std::size_t next_slot_ = 0;
};

}  // namespace chorus::provider
