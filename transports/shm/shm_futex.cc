#include "shm_futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace chorus::shm {

namespace {

#ifndef SYS_futex_waitv
constexpr long kSysFutexWaitv = 449;
#else
constexpr long kSysFutexWaitv = SYS_futex_waitv;
#endif

// The futex2 interface's per-word description (include/uapi/linux/futex.h);
// declared here so older kernel headers still build.
struct WaitvEntry {
  std::uint64_t val;
  std::uint64_t uaddr;
  std::uint32_t flags;
  std::uint32_t reserved;
};
constexpr std::uint32_t kFutex2Size32 = 0x02;
constexpr std::uint32_t kFutex2Private = 128;

std::atomic<int> g_waitv_state{-1};  // -1 unknown, 0 missing, 1 present

timespec to_monotonic(std::chrono::steady_clock::time_point t) {
  // steady_clock is CLOCK_MONOTONIC on Linux/glibc.
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

void wait_one(const FutexWatch& w, std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
  timespec rel{};
  rel.tv_sec = static_cast<time_t>(left / 1'000'000'000);
  rel.tv_nsec = static_cast<long>(left % 1'000'000'000);
  const int op = FUTEX_WAIT | (w.process_private ? FUTEX_PRIVATE_FLAG : 0);
  ::syscall(SYS_futex, w.word, op, w.expected, &rel, nullptr, 0);
}

}  // namespace

bool futex_waitv_available() noexcept {
  int state = g_waitv_state.load(std::memory_order_relaxed);
  if (state < 0) {
    // A zero-length vector is EINVAL where the call exists, ENOSYS where not.
    errno = 0;
    const long rc = ::syscall(kSysFutexWaitv, nullptr, 0u, 0u, nullptr, CLOCK_MONOTONIC);
    state = (rc == -1 && errno == ENOSYS) ? 0 : 1;
    g_waitv_state.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

void futex_wait_any(std::span<const FutexWatch> watches,
                    std::chrono::steady_clock::time_point deadline) noexcept {
  if (watches.empty()) return;
  if (watches.size() == 1) {
    wait_one(watches[0], deadline);
    return;
  }
  if (!futex_waitv_available() || watches.size() > kMaxFutexWatches) {
    wait_one(watches[0],
             std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(1)));
    return;
  }
  WaitvEntry entries[kMaxFutexWatches];
  for (std::size_t i = 0; i < watches.size(); ++i) {
    entries[i].val = watches[i].expected;
    entries[i].uaddr = reinterpret_cast<std::uintptr_t>(watches[i].word);
    entries[i].flags = kFutex2Size32 | (watches[i].process_private ? kFutex2Private : 0);
    entries[i].reserved = 0;
  }
  const timespec abs = to_monotonic(deadline);
  ::syscall(kSysFutexWaitv, entries, static_cast<unsigned>(watches.size()), 0u, &abs,
            CLOCK_MONOTONIC);
}

void futex_wake_all(const std::atomic<std::uint32_t>* word, bool process_private) noexcept {
  const int op = FUTEX_WAKE | (process_private ? FUTEX_PRIVATE_FLAG : 0);
  ::syscall(SYS_futex, word, op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace chorus::shm
