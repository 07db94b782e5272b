// The ring algorithm's own settings (`algorithm.ring.<key>`), parsed from the
// text the core hands over. Pure, so it is unit-tested without a
// communicator (tests/unit/ring).
#pragma once

#include <chorus/types.h>

#include <string>

namespace chorus::ring {

struct Settings {
  /// Run half of the lanes the other way round the ring, so every link
  /// carries traffic in both directions (JACCL's ring does the same). Has no
  /// effect with two ranks, where both neighbours are the same peer.
  bool bidirectional = false;
};

/// Fills `out` from `kv`. On a bad entry returns false and puts a message
/// naming the key, its value and where it came from into `error`.
inline bool parse_settings(const chorus_kv_t* kv, size_t n, Settings& out, std::string& error) {
  Settings s;
  for (size_t i = 0; i < n; ++i) {
    std::string key = kv[i].key ? kv[i].key : "";
    std::string value = kv[i].value ? kv[i].value : "";
    std::string where = std::string(" (set by ") + (kv[i].origin ? kv[i].origin : "?") + ")";
    if (key == "bidirectional") {
      if (value == "true" || value == "1") {
        s.bidirectional = true;
      } else if (value == "false" || value == "0") {
        s.bidirectional = false;
      } else {
        error = "algorithm.ring.bidirectional = '" + value + "'" + where + " must be true or false";
        return false;
      }
    } else {
      error = "unknown setting algorithm.ring." + key + where +
              "; the ring algorithm knows bidirectional";
      return false;
    }
  }
  out = s;
  return true;
}

}  // namespace chorus::ring
