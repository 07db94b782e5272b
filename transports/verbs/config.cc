#include "config.h"

#include "error.h"

#include <charconv>
#include <string_view>

namespace chorus::verbs {

namespace {

constexpr std::string_view kValidKeys =
    "device, port, gid_index, retry_count, timeout, rnr_retry, devices_file, queue_depth, "
    "keepalive_ms, traffic_class, service_level";

std::string origin_of(const chorus_kv_t& kv) {
  return kv.origin != nullptr && kv.origin[0] != '\0' ? kv.origin : "unknown origin";
}

std::string describe(const chorus_kv_t& kv) {
  return describe_setting(kv.key, kv.value != nullptr ? kv.value : "", origin_of(kv));
}

[[noreturn]] void bad_value(const chorus_kv_t& kv, std::string_view expected) {
  throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) + ": expected " + std::string(expected));
}

int parse_int(const chorus_kv_t& kv, int lo, int hi, std::string_view expected) {
  const std::string_view text = kv.value;
  long long v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || v < lo || v > hi) bad_value(kv, expected);
  return static_cast<int>(v);
}

}  // namespace

std::string describe_setting(const std::string& key, const std::string& value,
                             const std::string& origin) {
  return "transport.verbs." + key + " = '" + value + "' (from " + origin + ")";
}

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config cfg;
  if (count > 0 && entries == nullptr) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "context info has config_count > 0 but config is NULL");
  }
  for (std::size_t i = 0; i < count; ++i) {
    const chorus_kv_t& kv = entries[i];
    if (kv.key == nullptr || kv.value == nullptr) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport.verbs config entry " + std::to_string(i) + " has a NULL key or value");
    }
    const std::string_view key = kv.key;
    if (key == "device") {
      if (kv.value[0] == '\0') bad_value(kv, "a device name such as rxe0 or mlx5_0");
      cfg.device = kv.value;
      cfg.device_origin = origin_of(kv);
    } else if (key == "port") {
      cfg.port = parse_int(kv, 1, 255, "a port number from 1 to 255");
      cfg.port_origin = origin_of(kv);
    } else if (key == "gid_index") {
      cfg.gid_index = parse_int(kv, 0, 65535, "a GID table index (0, 1, ...)");
      cfg.gid_index_origin = origin_of(kv);
    } else if (key == "retry_count") {
      cfg.retry_count =
          parse_int(kv, 0, 7, "an integer from 0 to 7 (rdma_rxe retries for ever at 7)");
    } else if (key == "timeout") {
      cfg.timeout = parse_int(kv, 1, 31,
                              "an IB timeout exponent from 1 to 31 (4.096 us * 2^timeout; 0, "
                              "\"wait for ever\", is not allowed: a dead peer would hang)");
    } else if (key == "rnr_retry") {
      cfg.rnr_retry = parse_int(kv, 0, 7, "an integer from 0 to 7 (7 = retry for ever)");
    } else if (key == "devices_file") {
      if (kv.value[0] == '\0') bad_value(kv, "the path of a device-matrix JSON file");
      cfg.devices_file = kv.value;
      cfg.devices_file_origin = origin_of(kv);
    } else if (key == "queue_depth") {
      cfg.queue_depth = parse_int(kv, 1, kMaxQueueDepth, "an integer from 1 to 65536");
    } else if (key == "keepalive_ms") {
      cfg.keepalive_ms = parse_int(kv, 0, 3600 * 1000, "milliseconds from 0 (off) to 3600000");
    } else if (key == "traffic_class") {
      cfg.traffic_class = parse_int(kv, 0, 255, "an integer from 0 to 255");
    } else if (key == "service_level") {
      cfg.service_level = parse_int(kv, 0, 15, "an integer from 0 to 15");
    } else {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) +
                                                   ": unknown key; valid keys below "
                                                   "transport.verbs are: " +
                                                   std::string(kValidKeys));
    }
  }
  if (!cfg.device.empty() && !cfg.devices_file.empty()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                describe_setting("device", cfg.device, cfg.device_origin) + " and " +
                    describe_setting("devices_file", cfg.devices_file, cfg.devices_file_origin) +
                    " are both set; use one: device for every peer, or the matrix per peer");
  }
  return cfg;
}

}  // namespace chorus::verbs
