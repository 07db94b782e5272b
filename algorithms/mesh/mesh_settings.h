// The mesh algorithm's own settings (`algorithm.mesh.<key>`), parsed from the
// text the core hands over. Pure, so it is unit-tested without a
// communicator (tests/unit/mesh).
#pragma once

#include <chorus/types.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::mesh {

struct Settings {
  /// all_reduce of at most this many bytes per rank runs "one shot": every
  /// rank sends its whole input to every peer and reduces all of it.
  uint64_t one_shot_max = 64u << 10;
  /// Barrier radix; 0 picks one from the rank count.
  int barrier_radix = 0;
};

/// Parses "4096", "64K", "1M", "2G" (binary units; K/KB/KiB alike, "B"
/// allowed). Returns false for anything else or on overflow.
inline bool parse_bytes(std::string_view text, uint64_t& out) {
  uint64_t value = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, value);
  if (ec != std::errc() || p == b) return false;
  std::string unit;
  for (; p != e; ++p) unit += char(std::toupper(static_cast<unsigned char>(*p)));
  uint64_t mult = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") {
    mult = 1ull << 10;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mult = 1ull << 20;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mult = 1ull << 30;
  } else if (!unit.empty() && unit != "B") {
    return false;
  }
  if (value > UINT64_MAX / mult) return false;
  out = value * mult;
  return true;
}

/// Fills `out` from `kv`. On a bad entry returns false and puts a message
/// naming the key, its value and where it came from into `error`.
inline bool parse_settings(const chorus_kv_t* kv, size_t n, Settings& out, std::string& error) {
  Settings s;
  for (size_t i = 0; i < n; ++i) {
    std::string key = kv[i].key ? kv[i].key : "";
    std::string value = kv[i].value ? kv[i].value : "";
    std::string where = std::string(" (set by ") + (kv[i].origin ? kv[i].origin : "?") + ")";
    if (key == "one_shot_max") {
      if (!parse_bytes(value, s.one_shot_max)) {
        error = "algorithm.mesh.one_shot_max = '" + value + "'" + where +
                " is not a size in bytes (e.g. 65536, 64K, 1M)";
        return false;
      }
    } else if (key == "barrier_radix") {
      int r = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), r);
      if (ec != std::errc() || p != value.data() + value.size() || (r != 0 && r < 2)) {
        error = "algorithm.mesh.barrier_radix = '" + value + "'" + where +
                " must be 0 (automatic) or an integer >= 2";
        return false;
      }
      s.barrier_radix = r;
    } else {
      error = "unknown setting algorithm.mesh." + key + where +
              "; the mesh algorithm knows one_shot_max and barrier_radix";
      return false;
    }
  }
  out = s;
  return true;
}

}  // namespace chorus::mesh
