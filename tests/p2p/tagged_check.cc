// Conformance of tagged point-to-point (chorus_*_tagged; issue #18 part 3)
// on N >= 2 ranks under chorusrun. Every received element is checked on
// every rank against a value computed here from (sender, receiver, tag,
// salt), never copied from the sender's buffer; receive buffers start
// filled with a sentinel, and bytes past a message must keep it.
//
//   tagged_check [--case NAME]...   the cases below (default: all but the "behind" ones)
//   tagged_check --mode timeout     needs timeout.collective = 2 on every rank
//   tagged_check --mode disabled    needs point_to_point.tagged = false on every rank
//
// Cases (the ones that move data do it at 0 and 1 element, just below, at
// and just above the eager limit in bytes for the dtype, and a multi-MiB
// size):
//   orders    every posting order of a pair, one way and both ways
//   tags      distinct tags received in another order; one tag many times
//             (non-overtaking); CHORUS_ANY_TAG takes the oldest; status
//   any       CHORUS_ANY_SOURCE at a root; specific and any-source mixed
//   traffic   collectives and untagged send/recv between the posts of a
//             tagged exchange; 64 tagged operations in flight at once; 1500
//             sends in flight to one peer across a barrier
//   mismatch  a smaller receive, another dtype, a larger receive
//   args      argument errors, refused at once
//   threads   tagged exchanges on one thread, all_reduce on another
//   behind, behind_threads (only when named) tagged operations issued while
//             a collective that needs the partner is pending: on the same
//             thread after an iall_reduce, or on another thread during an
//             all_reduce
//   lazy      (only when named, 5+ ranks) pairs connected on first use in
//             every posting order, counted by endpoints.p2p_connected
//   lazy_timeout (only when named, tcp, 3 ranks, timeout.collective = 2) a
//             send whose pair cannot connect before its deadline
//
// Orders between ranks are made by messages, never by sleeping: "late"
// means after a barrier, or after taking a marker message the other rank
// sends just before it blocks (a rank blocked in a call cannot join a
// barrier). The only time checked is "not before the timeout" in the
// timeout mode.
//
// The shared helpers are in tagged_harness.{h,cc}, each case in the file
// tagged_harness.h names.
#include "tagged_harness.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

using namespace chorus::p2p_test;

int main(int argc, char** argv) {
  std::string mode = "cases";
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--case" && i + 1 < argc) {
      only.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: tagged_check [--case "
                   "orders|tags|any|traffic|mismatch|args|threads|behind|behind_threads|lazy|lazy_"
                   "timeout]... "
                   "| --mode timeout|disabled\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    chorus::Communicator world;
    g_comm = world.handle();
    g_rank = world.rank();
    g_size = world.size();
    if (g_size < 2) {
      std::fprintf(stderr, "tagged_check needs at least 2 ranks\n");
      return 2;
    }
    const std::vector<std::pair<std::string, std::function<void()>>> cases = {
        {"orders", case_orders},
        {"tags", case_tags},
        {"any", case_any},
        {"traffic", case_traffic},
        {"mismatch", case_mismatch},
        {"args", case_args},
        {"threads", [&] { case_threads(world); }},
        {"behind", case_behind},
        {"behind_threads", case_behind_threads},
        {"lazy", case_lazy},
        {"lazy_timeout", case_lazy_timeout},
    };
    // Not in the default list: the "behind" cases deadlock on the current
    // engine (tagged operations wait in the ordered stream behind a pending
    // collective); their own ctest entries run them (CMakeLists.txt here).
    // "lazy" must be the first tagged traffic of the communicator.
    const std::vector<std::string> not_by_default = {"behind", "behind_threads", "lazy",
                                                     "lazy_timeout"};
    if (mode == "timeout") {
      run_case("timeout", case_timeout);
    } else if (mode == "disabled") {
      run_case("disabled", case_disabled);
    } else if (mode == "cases") {
      for (const auto& name : only)
        if (std::none_of(cases.begin(), cases.end(),
                         [&](const auto& c) { return c.first == name; })) {
          std::fprintf(stderr, "tagged_check: no case '%s'\n", name.c_str());
          return 2;
        }
      for (const auto& [name, body] : cases) {
        const bool chosen = only.empty() ? std::find(not_by_default.begin(), not_by_default.end(),
                                                     name) == not_by_default.end()
                                         : std::find(only.begin(), only.end(), name) != only.end();
        if (chosen) run_case(name, body);
      }
    } else {
      std::fprintf(stderr, "tagged_check: no mode '%s'\n", mode.c_str());
      return 2;
    }
  } catch (const chorus::Error& e) {
    std::printf("rank %d FAIL: %s\n", g_rank, e.what());
    return 1;
  }
  if (!g_failed_cases.empty()) {
    std::string names;
    for (const auto& c : g_failed_cases) names += " " + c;
    std::printf("rank %d tagged_check: FAILED:%s\n", g_rank, names.c_str());
    return 1;
  }
  std::printf("rank %d tagged_check: all cases passed\n", g_rank);
  return 0;
}
