// Config::parse: the `transport.tcp.*` keys, their ranges and their errors.
#include "tcp_config.h"

#include <chorus/provider/settings.hpp>

#include <string_view>

namespace chorus::tcp {

namespace {

constexpr provider::Settings kSettings("tcp");

constexpr std::string_view kBufferBytes =
    "a byte count from 0 to 1GiB, optionally with a K/KiB, M/MiB or G/GiB suffix (0 keeps the "
    "kernel's autotuning)";

}  // namespace

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config cfg;
  kSettings.parse(
      entries, count,
      kSettings.integer("sockets", cfg.sockets, 1, kMaxSockets, "an integer from 1 to 16"),
      kSettings.bytes("sndbuf", cfg.sndbuf, 0, kMaxBufferBytes, kBufferBytes),
      kSettings.bytes("rcvbuf", cfg.rcvbuf, 0, kMaxBufferBytes, kBufferBytes),
      kSettings.boolean("nodelay", cfg.nodelay),
      kSettings.integer("spin_us", cfg.spin_us, 0, kMaxSpinUs, "microseconds from 0 to 1000000"));
  return cfg;
}

}  // namespace chorus::tcp
