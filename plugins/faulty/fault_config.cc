#include "fault_config.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace chorus::faulty {
namespace {

constexpr const char* kValidKeys =
    "inner, inner_path, drop_after, delay_us, error_after, seed, and inner.<key> for the inner "
    "transport";
constexpr const char* kInnerPrefix = "inner.";

std::string where(const chorus_kv_t& kv) {
  return std::string(" (from ") + (kv.origin && *kv.origin ? kv.origin : "unknown origin") + ")";
}

/// A decimal integer in [0, max]; "1_000" and signs are not accepted.
bool parse_u64(const std::string& text, uint64_t max, uint64_t& out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    uint64_t d = uint64_t(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  if (v > max) return false;
  out = v;
  return true;
}

bool valid_plugin_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

std::vector<std::string> split_path(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int parse_config(const chorus_kv_t* config, size_t count, FaultConfig& out, std::string& error) {
  FaultConfig cfg;
  for (size_t i = 0; i < count; ++i) {
    const chorus_kv_t& kv = config[i];
    const std::string key = kv.key ? kv.key : "";
    const std::string value = kv.value ? kv.value : "";
    auto bad = [&](const std::string& why) {
      error = "faulty: bad value '" + value + "' for " + key + where(kv) + ": " + why;
      return CHORUS_ERR_INVALID_ARGUMENT;
    };
    auto number = [&](uint64_t max, uint64_t& field) {
      if (!parse_u64(value, max, field))
        return bad("expected an integer from 0 to " + std::to_string(max) + " (0 = off)");
      return CHORUS_OK;
    };
    int rc = CHORUS_OK;
    if (key == "inner") {
      bool is_path = value.find('/') != std::string::npos;
      if (!is_path && !valid_plugin_name(value))
        return bad("expected a transport name such as \"tcp\" or a path to its .so");
      if (value == "faulty") return bad("the faulty transport cannot wrap itself");
      cfg.inner = value;
    } else if (key == "inner_path") {
      cfg.inner_path = split_path(value);
    } else if (key == "drop_after") {
      rc = number(uint64_t(1) << 62, cfg.drop_after);
    } else if (key == "delay_us") {
      rc = number(kMaxDelayUs, cfg.delay_us);
    } else if (key == "error_after") {
      rc = number(uint64_t(1) << 62, cfg.error_after);
    } else if (key == "seed") {
      rc = number(std::numeric_limits<uint64_t>::max(), cfg.seed);
    } else if (key.rfind(kInnerPrefix, 0) == 0 && key.size() > std::string(kInnerPrefix).size()) {
      std::string sub = key.substr(std::string(kInnerPrefix).size());
      std::erase_if(cfg.inner_settings, [&](const InnerSetting& s) { return s.key == sub; });
      cfg.inner_settings.push_back({sub, value, kv.origin ? kv.origin : ""});
    } else {
      error = "faulty: unknown configuration key '" + key + "'" + where(kv) +
              "; valid keys: " + kValidKeys;
      return CHORUS_ERR_INVALID_ARGUMENT;
    }
    if (rc != CHORUS_OK) return rc;
  }
  out = std::move(cfg);
  return CHORUS_OK;
}

}  // namespace chorus::faulty
