// Parsing and validation of transport.<name>.* settings.
#include <chorus/provider/error.hpp>
#include <chorus/provider/settings.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace chorus::provider {

std::string Settings::origin(const chorus_kv_t& kv) {
  return kv.origin != nullptr && kv.origin[0] != '\0' ? kv.origin : "unknown origin";
}

std::string Settings::describe(const chorus_kv_t& kv) const {
  std::string s = "transport.";
  s += name_;
  s += '.';
  s += kv.key != nullptr ? kv.key : "";
  s += " = '";
  s += kv.value != nullptr ? kv.value : "";
  s += "' (from ";
  s += origin(kv);
  s += ")";
  return s;
}

void Settings::bad_value(const chorus_kv_t& kv, std::string_view expected) const {
  throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) + ": expected " + std::string(expected));
}

void Settings::unknown_key(const chorus_kv_t& kv) const {
  throw Error(CHORUS_ERR_INVALID_ARGUMENT, describe(kv) + ": unknown key; valid keys below " +
                                               "transport." + std::string(name_) +
                                               " are: " + std::string(valid_keys_));
}

void Settings::unknown_key(const chorus_kv_t& kv,
                           std::initializer_list<std::string_view> valid_keys) const {
  std::string list;
  for (const std::string_view key : valid_keys) {
    if (!list.empty()) list += ", ";
    list += key;
  }
  Settings(name_, list).unknown_key(kv);
}

void Settings::check_table(const chorus_kv_t* entries, std::size_t count) const {
  if (count > 0 && entries == nullptr) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "context info has config_count > 0 but config is NULL");
  }
}

void Settings::check_entry(const chorus_kv_t& kv, std::size_t index) const {
  if (kv.key == nullptr || kv.value == nullptr) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "transport." + std::string(name_) + " config entry " +
                                                 std::to_string(index) +
                                                 " has a NULL key or value");
  }
}

int Settings::parse_int(const chorus_kv_t& kv, int lo, int hi, std::string_view expected) const {
  const std::string_view text = kv.value;
  int v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || v < lo || v > hi) bad_value(kv, expected);
  return v;
}

std::uint64_t Settings::parse_bytes(const chorus_kv_t& kv, std::uint64_t lo, std::uint64_t hi,
                                    std::string_view expected) const {
  const std::string_view text = kv.value;
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
  const std::string_view num = text.substr(0, digits);
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || num.empty() || v > (hi >> shift)) bad_value(kv, expected);
  v <<= shift;
  if (v < lo) bad_value(kv, expected);
  return v;
}

bool Settings::parse_bool(const chorus_kv_t& kv, std::string_view expected) const {
  const std::string_view v = kv.value;
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(kv, expected);
}

}  // namespace chorus::provider
