// ChoiceMemo: the last algorithm choice of each collective on one
// communicator, so that a loop of identical calls asks the candidates'
// preferences once instead of on every call.
#pragma once

#include <chorus/algorithm.h>
#include <chorus/chorus.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace chorus::core {

class Plugin;

/// Remembers, per collective, the plugin chosen for the last call and the
/// answer of its `supports`. A plugin's preference and supports read only
/// its comm_init state, which is immutable (docs/plugins.md), and see the
/// call's (collective, dtype, op, count, root, bytes): the same key gives the
/// same answer, so a hit changes nothing that every rank must agree on.
/// all_to_allv is never remembered (its counts are arrays per rank).
///
/// Not thread-safe: only the thread running the communicator's calls (the
/// holder of its stream) uses it.
class ChoiceMemo {
 public:
  struct Choice {
    const Plugin* plugin = nullptr;
    size_t index = 0;        // the plugin's position in the algorithm list
    bool supported = false;  // its supports() for the call's (dtype, op)
    /// The ops.<collective>.<plugin> counter (Communicator::algo_counter).
    std::atomic<uint64_t>* counter = nullptr;
  };

  /// The remembered choice for `call`, or nullptr when this call differs
  /// from the last one of its collective.
  const Choice* find(const chorus_algo_call_v2_t& call) const {
    if (!cacheable(call)) return nullptr;
    const Entry& e = entries_[size_t(call.collective)];
    if (!e.valid || e.dtype != call.dtype || e.op != call.op || e.root != call.root ||
        e.count != call.count || e.bytes != call.bytes)
      return nullptr;
    return &e.choice;
  }

  void remember(const chorus_algo_call_v2_t& call, const Choice& choice) {
    if (!cacheable(call)) return;
    Entry& e = entries_[size_t(call.collective)];
    e.valid = true;
    e.dtype = call.dtype, e.op = call.op, e.root = call.root;
    e.count = call.count, e.bytes = call.bytes;
    e.choice = choice;
  }

 private:
  static bool cacheable(const chorus_algo_call_v2_t& call) {
    return call.collective >= 0 && call.collective < CHORUS_COLL_COUNT &&
           call.collective != CHORUS_COLL_ALL_TO_ALLV;
  }

  struct Entry {
    bool valid = false;
    int dtype = 0, op = 0, root = 0;
    size_t count = 0;
    uint64_t bytes = 0;
    Choice choice;
  };
  std::array<Entry, CHORUS_COLL_COUNT> entries_{};
};

}  // namespace chorus::core
