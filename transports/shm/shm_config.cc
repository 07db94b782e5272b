#include "shm_config.h"

#include <chorus/provider/settings.hpp>

#include <string_view>

namespace chorus::shm {

namespace {

constexpr provider::Settings kSettings("shm",
                                       "spin_us, ring_size, cma, cma_threshold, peer_check_ms");

constexpr std::string_view kRingSize =
    "a power of two from 64K to 256M (bytes, or with a K/M suffix)";

}  // namespace

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config c;
  kSettings.each(entries, count, [&](const chorus_kv_t& kv) {
    const std::string_view key = kv.key;
    if (key == "spin_us") {
      c.spin_us = kSettings.parse_int(kv, 0, kMaxSpinUs, "an integer from 0 to 1000000");
    } else if (key == "ring_size") {
      c.ring_size = kSettings.parse_bytes(kv, kMinRing, kMaxRing, kRingSize);
      if ((c.ring_size & (c.ring_size - 1)) != 0) kSettings.bad_value(kv, kRingSize);
    } else if (key == "cma") {
      const std::string_view v = kv.value;
      if (v == "auto") {
        c.cma = CmaMode::kAuto;
      } else {
        c.cma = kSettings.parse_bool(kv, "auto, on or off") ? CmaMode::kOn : CmaMode::kOff;
      }
    } else if (key == "cma_threshold") {
      c.cma_threshold =
          kSettings.parse_bytes(kv, 0, std::uint64_t{1} << 30,
                                "a byte count from 0 to 1G (bytes, or with a K/M/G suffix)");
    } else if (key == "peer_check_ms") {
      c.peer_check_ms =
          kSettings.parse_int(kv, 10, 60'000, "an integer from 10 to 60000 (milliseconds)");
    } else {
      kSettings.unknown_key(kv);
    }
  });
  return c;
}

}  // namespace chorus::shm
