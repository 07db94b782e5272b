#include "config.h"

#include "error.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

namespace chorus::tcp {

namespace {

constexpr std::string_view kValidKeys = "sockets, sndbuf, rcvbuf, nodelay, spin_us";

std::string describe(const chorus_kv_t& kv) {
  std::string s = "transport.tcp.";
  s += kv.key;
  s += " = '";
  s += kv.value != nullptr ? kv.value : "";
  s += "' (from ";
  s += kv.origin != nullptr && kv.origin[0] != '\0' ? kv.origin : "unknown origin";
  s += ")";
  return s;
}

[[noreturn]] void bad_value(const chorus_kv_t& kv, std::string_view expected) {
  throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) + ": expected " + std::string(expected));
}

std::uint64_t parse_uint(const chorus_kv_t& kv, std::string_view text, std::string_view expected) {
  std::uint64_t v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) bad_value(kv, expected);
  return v;
}

std::int64_t parse_int(const chorus_kv_t& kv, std::int64_t lo, std::int64_t hi,
                       std::string_view expected) {
  const std::string_view text = kv.value;
  std::int64_t v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || v < lo || v > hi) bad_value(kv, expected);
  return v;
}

/// Bytes with an optional binary suffix: 4194304, 4M, 4MiB, 512k, 1G.
std::uint64_t parse_bytes(const chorus_kv_t& kv) {
  constexpr std::string_view kExpected =
      "a byte count from 0 to 1GiB, optionally with a K/KiB, M/MiB or G/GiB suffix (0 keeps the "
      "kernel's autotuning)";
  std::string_view text = kv.value;
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string suffix(text.substr(digits));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  unsigned shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gib") {
    shift = 30;
  } else {
    bad_value(kv, kExpected);
  }
  const std::uint64_t v = parse_uint(kv, text.substr(0, digits), kExpected);
  if (v > (Config::kMaxBufferBytes >> shift)) bad_value(kv, kExpected);
  return v << shift;
}

bool parse_bool(const chorus_kv_t& kv) {
  const std::string_view v = kv.value;
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(kv, "true or false");
}

}  // namespace

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
                  "transport.tcp config entry " + std::to_string(i) + " has a NULL key or value");
    }
    const std::string_view key = kv.key;
    if (key == "sockets") {
      cfg.sockets = static_cast<int>(parse_int(kv, 1, kMaxSockets, "an integer from 1 to 16"));
    } else if (key == "sndbuf") {
      cfg.sndbuf = parse_bytes(kv);
    } else if (key == "rcvbuf") {
      cfg.rcvbuf = parse_bytes(kv);
    } else if (key == "nodelay") {
      cfg.nodelay = parse_bool(kv);
    } else if (key == "spin_us") {
      cfg.spin_us =
          static_cast<int>(parse_int(kv, 0, kMaxSpinUs, "microseconds from 0 to 1000000"));
    } else {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) + ": unknown key; valid keys below " +
                                                   "transport.tcp are: " + std::string(kValidKeys));
    }
  }
  return cfg;
}

}  // namespace chorus::tcp
