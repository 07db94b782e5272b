#include "verbs_config.h"

#include "verbs.h"

#include <chorus/provider/settings.hpp>

#include <string_view>

namespace chorus::verbs {

namespace {

constexpr provider::Settings kSettings(
    "verbs",
    "device, port, gid_index, retry_count, timeout, rnr_retry, devices_file, queue_depth, "
    "keepalive_ms, connect_poll_timeout_ms, traffic_class, service_level");

std::string origin_of(const chorus_kv_t& kv) { return provider::Settings::origin(kv); }

}  // namespace

std::string describe_setting(const std::string& key, const std::string& value,
                             const std::string& origin) {
  return "transport.verbs." + key + " = '" + value + "' (from " + origin + ")";
}

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config cfg;
  kSettings.each(entries, count, [&](const chorus_kv_t& kv) {
    const std::string_view key = kv.key;
    if (key == "device") {
      if (kv.value[0] == '\0') kSettings.bad_value(kv, "a device name such as rxe0 or mlx5_0");
      cfg.device = kv.value;
      cfg.device_origin = origin_of(kv);
    } else if (key == "port") {
      cfg.port = kSettings.parse_int(kv, 1, 255, "a port number from 1 to 255");
      cfg.port_origin = origin_of(kv);
    } else if (key == "gid_index") {
      cfg.gid_index = kSettings.parse_int(kv, 0, 65535, "a GID table index (0, 1, ...)");
      cfg.gid_index_origin = origin_of(kv);
    } else if (key == "retry_count") {
      cfg.retry_count =
          kSettings.parse_int(kv, 0, 7, "an integer from 0 to 7 (rdma_rxe retries for ever at 7)");
    } else if (key == "timeout") {
      cfg.timeout =
          kSettings.parse_int(kv, 1, 31,
                              "an IB timeout exponent from 1 to 31 (4.096 us * 2^timeout; 0, "
                              "\"wait for ever\", is not allowed: a dead peer would hang)");
    } else if (key == "rnr_retry") {
      cfg.rnr_retry = kSettings.parse_int(kv, 0, 7, "an integer from 0 to 7 (7 = retry for ever)");
    } else if (key == "devices_file") {
      if (kv.value[0] == '\0') kSettings.bad_value(kv, "the path of a device-matrix JSON file");
      cfg.devices_file = kv.value;
      cfg.devices_file_origin = origin_of(kv);
    } else if (key == "queue_depth") {
      cfg.queue_depth = kSettings.parse_int(kv, 1, kMaxQueueDepth, "an integer from 1 to 65536");
    } else if (key == "keepalive_ms") {
      cfg.keepalive_ms =
          kSettings.parse_int(kv, 0, 3600 * 1000, "milliseconds from 0 (off) to 3600000");
    } else if (key == "connect_poll_timeout_ms") {
      cfg.connect_poll_timeout_ms = kSettings.parse_int(
          kv, 0, 24 * 3600 * 1000, "milliseconds from 0 (no limit) to 86400000");
    } else if (key == "traffic_class") {
      cfg.traffic_class = kSettings.parse_int(kv, 0, 255, "an integer from 0 to 255");
    } else if (key == "service_level") {
      cfg.service_level = kSettings.parse_int(kv, 0, 15, "an integer from 0 to 15");
    } else {
      kSettings.unknown_key(kv);
    }
  });
  if (!cfg.device.empty() && !cfg.devices_file.empty()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                describe_setting("device", cfg.device, cfg.device_origin) + " and " +
                    describe_setting("devices_file", cfg.devices_file, cfg.devices_file_origin) +
                    " are both set; use one: device for every peer, or the matrix per peer");
  }
  return cfg;
}

}  // namespace chorus::verbs
