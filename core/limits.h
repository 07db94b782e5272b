// Size and address arithmetic for the arguments of every collective: the
// largest buffer Chorus accepts and the overlap test. Pure functions, tested
// alone (tests/unit/core/limits_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace chorus::core {

/// The largest buffer one argument may describe, in bytes. No object can be
/// larger than PTRDIFF_MAX (pointer differences inside it would overflow), and
/// keeping every byte count at or below 2^63 - 1 lets the algorithms add a
/// piece size or multiply by a rank count's worth of offsets without wrapping.
inline constexpr uint64_t kMaxBufferBytes = uint64_t(PTRDIFF_MAX);

/// `count` * `blocks` * `esize` bytes, or std::nullopt when that exceeds
/// kMaxBufferBytes (including when the product overflows 64 bits).
/// `blocks` and `esize` must be at least 1.
constexpr std::optional<uint64_t> buffer_bytes(uint64_t count, uint64_t blocks, uint64_t esize) {
  if (blocks == 0 || esize == 0) return std::nullopt;
  const uint64_t per_count = blocks * esize;  // a rank count times 16 bytes: no overflow
  if (per_count / esize != blocks) return std::nullopt;
  if (count > kMaxBufferBytes / per_count) return std::nullopt;
  return count * per_count;
}

/// True when [addr, addr + bytes) runs past the end of the address space.
constexpr bool range_wraps(uintptr_t addr, uint64_t bytes) {
  return bytes > 0 && bytes - 1 > UINTPTR_MAX - addr;
}

/// True when [a, a + a_bytes) and [b, b + b_bytes) share at least one byte.
/// Empty ranges share none. Neither range may wrap (range_wraps).
constexpr bool ranges_overlap(uintptr_t a, uint64_t a_bytes, uintptr_t b, uint64_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  return a < b ? b - a < a_bytes : a - b < b_bytes;
}

}  // namespace chorus::core
