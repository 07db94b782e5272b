#include "tcp_config.h"

#include <chorus/provider/settings.hpp>

#include <string_view>

namespace chorus::tcp {

namespace {

constexpr provider::Settings kSettings("tcp", "sockets, sndbuf, rcvbuf, nodelay, spin_us");

constexpr std::string_view kBufferBytes =
    "a byte count from 0 to 1GiB, optionally with a K/KiB, M/MiB or G/GiB suffix (0 keeps the "
    "kernel's autotuning)";

}  // namespace

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config cfg;
  kSettings.each(entries, count, [&](const chorus_kv_t& kv) {
    const std::string_view key = kv.key;
    if (key == "sockets") {
      cfg.sockets = kSettings.parse_int(kv, 1, kMaxSockets, "an integer from 1 to 16");
    } else if (key == "sndbuf") {
      cfg.sndbuf = kSettings.parse_bytes(kv, 0, kMaxBufferBytes, kBufferBytes);
    } else if (key == "rcvbuf") {
      cfg.rcvbuf = kSettings.parse_bytes(kv, 0, kMaxBufferBytes, kBufferBytes);
    } else if (key == "nodelay") {
      cfg.nodelay = kSettings.parse_bool(kv);
    } else if (key == "spin_us") {
      cfg.spin_us = kSettings.parse_int(kv, 0, kMaxSpinUs, "microseconds from 0 to 1000000");
    } else {
      kSettings.unknown_key(kv);
    }
  });
  return cfg;
}

}  // namespace chorus::tcp
