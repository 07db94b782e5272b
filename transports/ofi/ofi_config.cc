#include "ofi_config.h"

#include "ofi.h"

#include <chorus/provider/settings.hpp>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace chorus::ofi {

namespace {

constexpr provider::Settings kSettings(
    "ofi",
    "provider, domain, node, interface, registration, liveness, spin_us, poll_max_us, "
    "env.FI_<NAME> (or env_fi_<name> from the environment)");

std::string describe(const chorus_kv_t& kv) { return kSettings.describe(kv); }

/// Keys are matched case-insensitively for the env pass-through only: the
/// environment route lower-cases them (CHORUS_TRANSPORT_OFI_ENV_FI_X -> env_fi_x).
std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

bool valid_fi_variable(const std::string& name) {
  if (name.size() < 4 || name.rfind("FI_", 0) != 0) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isupper(c) || std::isdigit(c) || c == '_';
  });
}

}  // namespace

const char* liveness_name(Liveness l) {
  switch (l) {
    case Liveness::kAuto:
      return "auto";
    case Liveness::kPid:
      return "pid";
    case Liveness::kSocket:
      return "socket";
    case Liveness::kOff:
      return "off";
  }
  return "?";
}

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config cfg;
  kSettings.each(entries, count, [&](const chorus_kv_t& kv) {
    const std::string_view key = kv.key;
    const std::string_view value = kv.value;
    if (key == "provider") {
      if (value.empty())
        kSettings.bad_value(kv, "a libfabric provider name such as tcp;ofi_rxm or shm");
      cfg.provider = value;
    } else if (key == "domain") {
      cfg.domain = value;
    } else if (key == "node") {
      cfg.node = value;
    } else if (key == "interface") {
      cfg.interface = value;
    } else if (key == "registration") {
      if (value == "auto") {
        cfg.always_register = false;
      } else if (value == "always") {
        cfg.always_register = true;
      } else {
        kSettings.bad_value(kv, "auto (follow the provider's mr_mode) or always");
      }
    } else if (key == "liveness") {
      if (value == "auto") {
        cfg.liveness = Liveness::kAuto;
      } else if (value == "pid") {
        cfg.liveness = Liveness::kPid;
      } else if (value == "socket") {
        cfg.liveness = Liveness::kSocket;
      } else if (value == "off") {
        cfg.liveness = Liveness::kOff;
      } else {
        kSettings.bad_value(kv, "auto, pid, socket or off");
      }
    } else if (key == "spin_us") {
      cfg.spin_us = kSettings.parse_int(kv, 0, kMaxSpinUs, "microseconds from 0 to 1000000");
    } else if (key == "poll_max_us") {
      cfg.poll_max_us = kSettings.parse_int(kv, 10, 100000, "microseconds from 10 to 100000");
    } else if (key.rfind("env.", 0) == 0 || key.rfind("env_", 0) == 0) {
      const std::string name = upper(key.substr(4));
      if (!valid_fi_variable(name)) {
        throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                    describe(kv) +
                        ": only libfabric variables (FI_ followed by capitals, digits "
                        "and underscores) can be passed through");
      }
      auto it = std::find_if(cfg.fi_env.begin(), cfg.fi_env.end(),
                             [&](const auto& e) { return e.first == name; });
      if (it != cfg.fi_env.end()) {
        it->second = value;
        cfg.fi_env_origin[static_cast<std::size_t>(it - cfg.fi_env.begin())] = kv.origin;
      } else {
        cfg.fi_env.emplace_back(name, value);
        cfg.fi_env_origin.emplace_back(kv.origin != nullptr ? kv.origin : "unknown origin");
      }
    } else {
      kSettings.unknown_key(kv);
    }
  });
  if (!cfg.node.empty() && !cfg.interface.empty()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "transport.ofi.node ('" + cfg.node + "') and transport.ofi.interface ('" +
                    cfg.interface + "') both name the source address; set only one");
  }
  return cfg;
}

}  // namespace chorus::ofi
