// Futex: sleeping on 32-bit words that live in shared memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

namespace chorus::shm {

/// One word to sleep on and the value it held when the caller last looked.
struct FutexWatch {
  const std::atomic<std::uint32_t>* word;
  std::uint32_t expected;
  bool process_private;  // true for words that live in this process only
};

/// Largest number of words one futex_wait_any call can watch (the kernel's
/// futex_waitv limit).
inline constexpr std::size_t kMaxFutexWatches = 128;

/// Blocks until one of `watches` no longer holds its expected value (or is
/// woken), or `deadline` (CLOCK_MONOTONIC) passes. Returns at once when a
/// word already differs. Uses futex_waitv (Linux 5.16); without it, sleeps
/// on the first word only, in slices of at most 1 ms. Spurious returns are
/// possible; callers re-check their state.
void futex_wait_any(std::span<const FutexWatch> watches,
                    std::chrono::steady_clock::time_point deadline) noexcept;

/// Wakes every waiter on `word`, which lives in memory shared between
/// processes when `process_private` is false.
void futex_wake_all(const std::atomic<std::uint32_t>* word, bool process_private) noexcept;

/// Whether futex_waitv is available (probed once).
bool futex_waitv_available() noexcept;

}  // namespace chorus::shm
