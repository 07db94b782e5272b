// The key registry and the effective configuration built from a Config.
#include "core/config_keys.h"

#include <chorus/chorus.h>

#include <sstream>

namespace chorus::core {
namespace {

/// Every collective's name, from the configuration's table.
std::vector<const char*> collective_names() {
  std::vector<const char*> out;
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c) out.push_back(collective_name(c));
  return out;
}

// Order and wording follow docs/configuration.md's table; the unit test
// compares the two in both directions.
constexpr ConfigKey kKeys[] = {
    {"transport.name", "a transport name such as \"tcp\", \"shm\", \"verbs\", \"ofi\" or \"auto\"",
     "\"auto\"", "CHORUS_TRANSPORT, CHORUS_TRANSPORT_NAME"},
    {"transport.auto.local", "a transport name other than \"auto\"", "\"shm\"",
     "CHORUS_TRANSPORT_AUTO_LOCAL"},
    {"transport.auto.fabric", "a transport name other than \"auto\"", "\"tcp\"",
     "CHORUS_TRANSPORT_AUTO_FABRIC"},
    {"transport.auto.host_id", "a string of 1 to 255 printable characters without spaces", "",
     "CHORUS_TRANSPORT_AUTO_HOST_ID"},
    {"transport.<name>.<key>", "a string, number or boolean (the transport checks it)", "",
     "CHORUS_TRANSPORT_<NAME>_<KEY>"},
    {"algorithm.<collective>", "\"auto\", \"ring\", \"mesh\" or an algorithm plugin's name",
     "\"auto\"", "CHORUS_ALGORITHM_<COLLECTIVE>"},
    {"algorithm.channels", "an integer from 1 to 64", "1", "CHORUS_ALGORITHM_CHANNELS"},
    {"algorithm.deterministic", "true or false", "false", "CHORUS_ALGORITHM_DETERMINISTIC"},
    {"algorithm.switch_bytes", "a size: 0 or more bytes, an integer or a string such as \"64K\"",
     "0", "CHORUS_ALGORITHM_SWITCH_BYTES"},
    {"algorithm.staging_slot_size", "a size from 4K to 1G, an integer or a string such as \"256K\"",
     "\"1M\"", "CHORUS_ALGORITHM_STAGING_SLOT_SIZE"},
    {"algorithm.staging_slots", "an integer from 2 to 1024", "8", "CHORUS_ALGORITHM_STAGING_SLOTS"},
    {"algorithm.<name>.<key>", "a string, number or boolean (the algorithm checks it)", "",
     "CHORUS_ALGORITHM_<NAME>_<KEY>"},
    {"timeout.init", "a positive number of seconds", "60", "CHORUS_TIMEOUT_INIT"},
    {"timeout.connect", "a positive number of seconds", "30", "CHORUS_TIMEOUT_CONNECT"},
    {"timeout.collective", "a positive number of seconds", "300", "CHORUS_TIMEOUT_COLLECTIVE"},
    {"check.signatures", "true or false", "true", "CHORUS_CHECK_SIGNATURES"},
    {"point_to_point.tagged", "true or false", "true", "CHORUS_POINT_TO_POINT_TAGGED"},
    {"collectives.lanes", "an integer from 1 to 16", "1", "CHORUS_COLLECTIVES_LANES"},
    {"collectives.driver", "\"shared\" or \"threads\"", "\"shared\"", "CHORUS_COLLECTIVES_DRIVER"},
    {"collectives.fusion_bytes", "a size from 0 to 1G, an integer or a string such as \"4M\"",
     "\"4M\"", "CHORUS_COLLECTIVES_FUSION_BYTES"},
    {"log.level", "one of \"error\", \"warn\", \"info\", \"debug\", \"trace\"", "\"warn\"",
     "CHORUS_LOG, CHORUS_LOG_LEVEL"},
    {"plugin_path", "a folder as a string, or an array of folder strings", "",
     "CHORUS_PLUGIN_PATH"},
    {"bootstrap.rank", "an integer from 0 to 16777216", "", "CHORUS_RANK"},
    {"bootstrap.world_size", "an integer from 1 to 16777216", "", "CHORUS_WORLD_SIZE"},
    {"bootstrap.coordinator", "a string \"host:port\" such as \"127.0.0.1:29500\"", "",
     "CHORUS_COORDINATOR"},
    {"bootstrap.job_token", "a string", "", "CHORUS_JOB_TOKEN"},
    {"network.bind_address", "a non-empty address string such as \"127.0.0.1\"", "\"127.0.0.1\"",
     "CHORUS_BIND_ADDRESS"},
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

std::span<const ConfigKey> config_keys() { return kKeys; }

const ConfigKey* find_config_key(std::string_view key) {
  for (const auto& k : kKeys)
    if (k.key == key) return &k;
  // Concrete names of the fixed patterns.
  for (const char* c : collective_names())
    if (key == std::string("algorithm.") + c) return find_config_key("algorithm.<collective>");
  return nullptr;
}

std::vector<std::string> concrete_config_keys() {
  std::vector<std::string> out;
  for (const auto& k : kKeys) {
    if (k.key == "algorithm.<collective>") {
      for (const char* c : collective_names()) out.push_back(std::string("algorithm.") + c);
    } else if (k.key.find('<') == std::string_view::npos) {
      out.emplace_back(k.key);
    }
  }
  return out;
}

std::vector<EffectiveSetting> effective_settings(const Config& cfg) {
  std::vector<EffectiveSetting> out;
  auto origin = [&](const std::string& key) {
    auto it = cfg.origins.find(key);
    return it == cfg.origins.end() ? std::string("default") : it->second;
  };
  auto add = [&](const std::string& key, std::string value) {
    std::string src = origin(key);
    if (src == "default" && value.empty()) src = "unset";
    out.push_back({key, std::move(value), std::move(src)});
  };
  auto setting = [&](const std::map<std::string, std::vector<Setting>>& all,
                     const std::string& owner, const std::string& sub) -> const Setting* {
    auto it = all.find(owner);
    if (it == all.end()) return nullptr;
    for (const auto& s : it->second)
      if (s.key == sub) return &s;
    return nullptr;
  };
  for (const auto& k : kKeys) {
    const std::string key(k.key);
    if (key == "transport.name") {
      add(key, quoted(cfg.transport));
    } else if (key.rfind("transport.auto.", 0) == 0) {
      const Setting* s = setting(cfg.transport_settings, "auto", key.substr(15));
      if (s)
        out.push_back({key, quoted(s->value), s->origin});
      else
        add(key, std::string(k.default_value));
    } else if (key == "algorithm.<collective>") {
      for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
        add(std::string("algorithm.") + collective_name(c), quoted(cfg.algorithm[size_t(c)]));
    } else if (key == "algorithm.channels") {
      add(key, std::to_string(cfg.channels));
    } else if (key == "algorithm.deterministic") {
      add(key, cfg.deterministic ? "true" : "false");
    } else if (key == "algorithm.switch_bytes") {
      add(key, std::to_string(cfg.switch_bytes));
    } else if (key == "algorithm.staging_slot_size") {
      add(key, std::to_string(cfg.staging_slot_size));
    } else if (key == "algorithm.staging_slots") {
      add(key, std::to_string(cfg.staging_slots));
    } else if (key == "timeout.init") {
      add(key, number(cfg.timeout_init_s));
    } else if (key == "timeout.connect") {
      add(key, number(cfg.timeout_connect_s));
    } else if (key == "timeout.collective") {
      add(key, number(cfg.timeout_collective_s));
    } else if (key == "check.signatures") {
      add(key, cfg.check_signatures ? "true" : "false");
    } else if (key == "point_to_point.tagged") {
      add(key, cfg.p2p_tagged ? "true" : "false");
    } else if (key == "collectives.lanes") {
      add(key, std::to_string(cfg.lanes));
    } else if (key == "collectives.driver") {
      add(key, quoted(cfg.lane_driver_shared ? "shared" : "threads"));
    } else if (key == "collectives.fusion_bytes") {
      add(key, std::to_string(cfg.fusion_bytes));
    } else if (key == "log.level") {
      add(key, quoted(log_level_name(cfg.log_level)));
    } else if (key == "plugin_path") {
      std::string v;
      for (const auto& p : cfg.plugin_path) v += (v.empty() ? "" : ", ") + quoted(p);
      add(key, cfg.plugin_path.empty() ? "" : "[" + v + "]");
    } else if (key == "bootstrap.rank") {
      add(key, cfg.rank < 0 ? "" : std::to_string(cfg.rank));
    } else if (key == "bootstrap.world_size") {
      add(key, cfg.world_size < 0 ? "" : std::to_string(cfg.world_size));
    } else if (key == "bootstrap.coordinator") {
      add(key, cfg.coordinator.empty() ? "" : quoted(cfg.coordinator));
    } else if (key == "bootstrap.job_token") {
      // A secret: say whether it is set, never what it is.
      add(key, cfg.job_token.empty() ? "" : "\"(set, not shown)\"");
    } else if (key == "network.bind_address") {
      add(key, quoted(cfg.bind_address));
    }
  }
  // Plugin settings: as given (text), with their own origins.
  auto plugin_settings = [&](const char* prefix,
                             const std::map<std::string, std::vector<Setting>>& all) {
    for (const auto& [owner, list] : all) {
      if (std::string_view(prefix) == "transport." && owner == "auto") continue;
      for (const auto& s : list)
        out.push_back({std::string(prefix) + owner + "." + s.key, quoted(s.value), s.origin});
    }
  };
  plugin_settings("transport.", cfg.transport_settings);
  plugin_settings("algorithm.", cfg.algorithm_settings);
  return out;
}

}  // namespace chorus::core
