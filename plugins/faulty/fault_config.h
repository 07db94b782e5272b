// The transport.faulty.* settings: which transport to wrap, what to pass it,
// and which faults to inject. Parsing only; no I/O.
#pragma once

#include <chorus/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::faulty {

/// One setting handed on to the inner transport (`inner.<key>` with the
/// prefix removed), with its origin.
struct InnerSetting {
  std::string key;
  std::string value;
  std::string origin;
};

struct FaultConfig {
  /// Inner transport: a plugin name ("tcp") or a path to its .so.
  std::string inner = "tcp";
  /// Folders searched for the inner plugin before CHORUS_PLUGIN_PATH and the
  /// faulty plugin's own folder.
  std::vector<std::string> inner_path;
  /// 0: off. Otherwise the first `drop_after` sends of each endpoint pass;
  /// posting the next one closes the endpoint's inner connection.
  uint64_t drop_after = 0;
  /// 0: off. Otherwise every send is held this many microseconds before it is
  /// posted to the inner transport.
  uint64_t delay_us = 0;
  /// 0: off. Otherwise the context's completion number error_after + 1 is
  /// reported as a failure (once per context).
  uint64_t error_after = 0;
  /// 0: every delay is exactly delay_us. Otherwise each send's delay is drawn
  /// from [0, 2 * delay_us] by a generator seeded with (seed, rank).
  uint64_t seed = 0;
  std::vector<InnerSetting> inner_settings;
};

/// Longest delay accepted, in microseconds (10 s).
constexpr uint64_t kMaxDelayUs = 10'000'000;

/// Validates `config` into `out`. On failure returns INVALID_ARGUMENT and a
/// message naming the key, its value and its origin.
int parse_config(const chorus_kv_t* config, size_t count, FaultConfig& out, std::string& error);

}  // namespace chorus::faulty
