// Configuration: one TOML file (or the embedded default), CHORUS_* environment
// overrides and API settings, merged and validated into a Config.
#pragma once

#include <chorus/types.h>

#include "core/status.h"

#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace chorus::core {

/// A plugin setting kept as text with its origin, handed to plugins as chorus_kv_t.
struct Setting {
  std::string key;
  std::string value;
  std::string origin;
};

/// The resolved configuration of one communicator. Every field has a default
/// (the embedded default: TCP on loopback, automatic algorithm choice).
struct Config {
  std::string transport = "auto";
  /// transport.<name>.* settings, by transport name.
  std::map<std::string, std::vector<Setting>> transport_settings;
  /// algorithm.<collective>: "auto" or an algorithm name.
  std::array<std::string, CHORUS_COLL_COUNT> algorithm{"auto", "auto", "auto", "auto", "auto",
                                                       "auto", "auto", "auto", "auto", "auto"};
  /// algorithm.<name>.* settings, by algorithm name.
  std::map<std::string, std::vector<Setting>> algorithm_settings;
  /// algorithm.deterministic: auto only picks algorithms bitwise reproducible across ranks and
  /// runs.
  bool deterministic = false;
  /// algorithm.switch_bytes: when > 0, auto uses the latency algorithm below this many bytes
  /// per rank and the bandwidth algorithm from it on, instead of the plugins' own preferences.
  uint64_t switch_bytes = 0;
  int channels = 1;
  size_t staging_slot_size = 1u << 20;
  int staging_slots = 8;

  /// check.signatures: compare every call's signature with the peers' (MISMATCH on a difference).
  bool check_signatures = true;
  bool p2p_tagged = true;  // point_to_point.tagged
  /// collectives.lanes: how many collectives of one communicator progress at
  /// once (each lane is a stream with its own endpoints; call i runs on lane
  /// i mod lanes).
  int lanes = 1;
  /// collectives.driver: "shared" (true), one thread drives the running
  /// calls of every lane (core/lane_driver.h); "threads", each lane its own.
  bool lane_driver_shared = true;
  /// collectives.fusion_bytes: the most bytes one fused all_reduce of a
  /// chorus_group_start/end group packs (core/api_group.cc); 0 never fuses.
  uint64_t fusion_bytes = 4u << 20;
  /// Internal: this communicator is a lane of another (communicator_lanes.cc)
  /// and runs collectives only, never point-to-point.
  bool is_lane = false;

  double timeout_init_s = 60;
  double timeout_connect_s = 30;
  double timeout_collective_s = 300;

  int log_level = CHORUS_LOG_WARN;
  /// Extra plugin folders: CHORUS_PLUGIN_PATH entries first, then the file's plugin_path.
  std::vector<std::string> plugin_path;

  int rank = -1;
  int world_size = -1;
  std::string coordinator;
  std::string job_token;
  std::string bind_address = "127.0.0.1";
  /// Not a key anyone sets: the per-job secret derived at init from
  /// job_token and rank 0's nonce (agree_transport_key), handed to the
  /// transport as chorus_tp_context_info_t::job_key.
  std::vector<std::byte> transport_key;

  /// Where the configuration came from: a file path or "embedded default".
  std::string source = "embedded default";
  /// Where each key's final value came from ("chorus.toml:3", "env CHORUS_RANK", "api").
  std::map<std::string, std::string> origins;
  /// Each key's final value as written in its source (TOML text, or the
  /// variable's text), for the keys in `origins`.
  std::map<std::string, std::string> values;
};

/// Everything configuration is read from; split out so tests need no real environment.
struct ConfigInputs {
  /// Config file from the API; empty = use CHORUS_CONFIG from `env`, else none.
  std::string api_config_path;
  /// Settings from the API: "key=value" with a TOML value.
  std::vector<std::string> api_settings;
  /// The process environment (only CHORUS_* entries matter).
  std::map<std::string, std::string> env;
};

/// Reads, merges (file < environment < API) and validates. An unknown key, a
/// wrong type or a bad value fails naming the file and line (or variable, or
/// API setting), the key and the fix.
Result<Config> load_config(const ConfigInputs& inputs);

/// A setting derived from a launcher's variables (lowest priority).
struct LauncherSetting {
  std::string key;
  std::string value;
  std::string origin;
};
/// Rank, size and (where the launcher allows) coordinator from Slurm, Open MPI /
/// PMIx or torchrun variables, in that order of preference.
std::vector<LauncherSetting> launcher_settings(const std::map<std::string, std::string>& env);
/// First host of a Slurm node list ("n[03-05],m" -> "n03").
std::string slurm_first_host(const std::string& nodelist);

/// The process environment as a map.
std::map<std::string, std::string> environment_map();

/// Parses "64", "64K", "1M", "2G" (binary multiples) into bytes.
Result<uint64_t> parse_size(const std::string& text);

/// Name of a log level ("warn"), and back.
const char* log_level_name(int level);
int log_level_from_name(const std::string& name);  // -1 if unknown

/// Collective from its config name ("all_reduce"), or -1.
int collective_from_name(const std::string& name);
/// The collective's name as configuration keys spell it ("all_reduce"), or
/// nullptr out of range. The same table as chorus_collective_name, without
/// needing the C API (the config fuzzer links the parser alone).
const char* collective_name(int collective);

}  // namespace chorus::core
