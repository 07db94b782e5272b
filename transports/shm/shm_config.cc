#include "shm_config.h"

#include <chorus/provider/settings.hpp>

#include <string_view>

namespace chorus::shm {

namespace {

constexpr provider::Settings kSettings("shm");

constexpr std::string_view kRingSize =
    "a power of two from 64K to 256M (bytes, or with a K/M suffix)";
constexpr std::string_view kCmaThreshold =
    "a byte count from 0 to 1G (bytes, or with a K/M/G suffix)";

}  // namespace

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config c;
  const auto ring_size = [&](const chorus_kv_t& kv) {
    c.ring_size = kSettings.parse_bytes(kv, kMinRing, kMaxRing, kRingSize);
    if ((c.ring_size & (c.ring_size - 1)) != 0) kSettings.bad_value(kv, kRingSize);
  };
  const auto cma = [&](const chorus_kv_t& kv) {
    if (std::string_view(kv.value) == "auto") {
      c.cma = CmaMode::kAuto;
    } else {
      c.cma = kSettings.parse_bool(kv, "auto, on or off") ? CmaMode::kOn : CmaMode::kOff;
    }
  };
  const auto cma_threshold = [&](const chorus_kv_t& kv) {
    c.cma_threshold = kSettings.parse_bytes(kv, 0, std::uint64_t{1} << 30, kCmaThreshold);
    c.cma_threshold_set = true;
  };
  kSettings.parse(
      entries, count,
      kSettings.integer("spin_us", c.spin_us, 0, kMaxSpinUs, "an integer from 0 to 1000000"),
      provider::SettingKey{"ring_size", ring_size}, provider::SettingKey{"cma", cma},
      provider::SettingKey{"cma_threshold", cma_threshold},
      kSettings.integer("peer_check_ms", c.peer_check_ms, 10, 60'000,
                        "an integer from 10 to 60000 (milliseconds)"),
      kSettings.boolean("spread", c.spread));
  return c;
}

}  // namespace chorus::shm
