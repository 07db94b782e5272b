// Which calls of a chorus_group_start/end group fuse: the pure rule, with no
// communicator and no I/O, so that it is unit-tested alone
// (tests/unit/core/group_plan_test.cc). core/api_group.cc applies it to each
// communicator's calls at chorus_group_end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::core {

/// One grouped call on one communicator, as the fusion rule sees it.
struct GroupedCall {
  bool all_reduce = false;  // a chorus_iall_reduce; nothing else ever fuses
  int dtype = -1;
  int op = -1;
  uint64_t bytes = 0;
};

/// Splits `calls` (one communicator's, in issue order) into runs: the
/// length of each run, in order, summing to calls.size(). A run of two or
/// more calls is a maximal stretch of consecutive all_reduces with one
/// dtype and one op whose bytes add up to at most `limit`; every other call
/// (a different collective, a different dtype or op, or an all_reduce that
/// would carry the run past `limit`) starts a new run, and a run that
/// holds a single call runs that call unchanged. `limit` 0 never fuses.
/// Depends only on its arguments, so every rank that grouped the same calls
/// with the same limit gets the same runs.
inline std::vector<size_t> plan_group_runs(const std::vector<GroupedCall>& calls, uint64_t limit) {
  std::vector<size_t> runs;
  size_t i = 0;
  while (i < calls.size()) {
    size_t j = i + 1;
    if (limit > 0 && calls[i].all_reduce && calls[i].bytes <= limit) {
      uint64_t bytes = calls[i].bytes;
      while (j < calls.size() && calls[j].all_reduce && calls[j].dtype == calls[i].dtype &&
             calls[j].op == calls[i].op && calls[j].bytes <= limit - bytes) {
        bytes += calls[j].bytes;
        ++j;
      }
    }
    runs.push_back(j - i);
    i = j;
  }
  return runs;
}

}  // namespace chorus::core
