#include "config.h"

#include "error.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

namespace chorus::shm {

namespace {

constexpr std::string_view kValidKeys = "spin_us, ring_size, cma, cma_threshold, peer_check_ms";

std::string describe(const chorus_kv_t& kv) {
  std::string s = "transport.shm.";
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

std::int64_t parse_int(const chorus_kv_t& kv, std::int64_t lo, std::int64_t hi,
                       std::string_view expected) {
  const std::string_view text = kv.value;
  std::int64_t v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || v < lo || v > hi) bad_value(kv, expected);
  return v;
}

/// Bytes with an optional binary suffix (1048576, 1M, 1MiB, 64k), within [lo, hi].
std::uint64_t parse_bytes(const chorus_kv_t& kv, std::uint64_t lo, std::uint64_t hi,
                          std::string_view expected) {
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
    bad_value(kv, expected);
  }
  std::uint64_t v = 0;
  const std::string_view num = text.substr(0, digits);
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || num.empty() || v > (hi >> shift)) bad_value(kv, expected);
  v <<= shift;
  if (v < lo) bad_value(kv, expected);
  return v;
}

}  // namespace

Config Config::parse(const chorus_kv_t* entries, std::size_t count) {
  Config c;
  for (std::size_t i = 0; i < count; ++i) {
    const chorus_kv_t& kv = entries[i];
    if (kv.key == nullptr || kv.value == nullptr) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, "transport.shm: configuration entry " +
                                                   std::to_string(i) + " has a NULL key or value");
    }
    const std::string_view key = kv.key;
    if (key == "spin_us") {
      c.spin_us = static_cast<int>(parse_int(kv, 0, kMaxSpinUs, "an integer from 0 to 1000000"));
    } else if (key == "ring_size") {
      c.ring_size = parse_bytes(kv, kMinRing, kMaxRing,
                                "a power of two from 64K to 256M (bytes, or with a K/M suffix)");
      if ((c.ring_size & (c.ring_size - 1)) != 0)
        bad_value(kv, "a power of two from 64K to 256M (bytes, or with a K/M suffix)");
    } else if (key == "cma") {
      const std::string_view v = kv.value;
      if (v == "auto") {
        c.cma = CmaMode::kAuto;
      } else if (v == "on" || v == "true" || v == "yes" || v == "1") {
        c.cma = CmaMode::kOn;
      } else if (v == "off" || v == "false" || v == "no" || v == "0") {
        c.cma = CmaMode::kOff;
      } else {
        bad_value(kv, "auto, on or off");
      }
    } else if (key == "cma_threshold") {
      c.cma_threshold = parse_bytes(kv, 0, std::uint64_t{1} << 30,
                                    "a byte count from 0 to 1G (bytes, or with a K/M/G suffix)");
    } else if (key == "peer_check_ms") {
      c.peer_check_ms =
          static_cast<int>(parse_int(kv, 10, 60'000, "an integer from 10 to 60000 (milliseconds)"));
    } else {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, "unknown key " + describe(kv) +
                                                   "; valid keys below transport.shm are: " +
                                                   std::string(kValidKeys));
    }
  }
  return c;
}

}  // namespace chorus::shm
