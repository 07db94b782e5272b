// The registry of configuration keys: every key the parser accepts, with its
// type, valid values, default and environment variable. docs/configuration.md's
// key table is checked against it (unit test "config.keys_documented").
#pragma once

#include "core/config.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::core {

/// One accepted key. Patterns have placeholders: "transport.<name>.<key>".
struct ConfigKey {
  std::string_view key;
  /// What a valid value is, as said in errors ("an integer from 1 to 64").
  std::string_view valid;
  /// The default as TOML text, or "" when the key has none (unset).
  std::string_view default_value;
  /// Environment variable(s), comma separated.
  std::string_view env;
};

/// Every key, in docs/configuration.md's table order.
std::span<const ConfigKey> config_keys();

/// The registry entry whose key (or pattern) `key` is; nullptr if none.
const ConfigKey* find_config_key(std::string_view key);

/// Every concrete key name (patterns expanded where the names are fixed, e.g.
/// algorithm.<collective>), for suggestions.
std::vector<std::string> concrete_config_keys();

/// One key's effective value and where it came from: a file "path:line", an
/// "environment variable NAME", an "API setting '...'", a "launcher variable
/// NAME", or "default".
struct EffectiveSetting {
  std::string key;
  std::string value;  // TOML text
  std::string source;
};

/// Every fixed key's effective value (defaults included, unset keys as "")
/// followed by each plugin setting that was given, in registry order.
std::vector<EffectiveSetting> effective_settings(const Config& cfg);

}  // namespace chorus::core
