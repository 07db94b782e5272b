// MemoryRegion: one mem_register() handle — the caller's range registered on
// every device the context uses.
#pragma once

#include "verbs_nic.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::verbs {

struct MemoryRegion {
  std::uintptr_t addr = 0;
  std::size_t length = 0;
  /// One registration per Nic of the context, in the context's Nic order.
  /// Empty for a zero-length range (nothing to register).
  std::vector<VerbsPtr<ibv_mr>> mrs;

  bool covers(std::uintptr_t a, std::size_t n) const {
    return a >= addr && n <= length && a - addr <= length - n;
  }
};

}  // namespace chorus::verbs

/// The ABI's opaque registration handle is the MemoryRegion itself.
struct chorus_tp_mr final : chorus::verbs::MemoryRegion {};
