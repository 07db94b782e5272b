// chorus::provider::Settings: parses and validates a transport's
// `transport.<name>.*` settings (the chorus_kv_t table of context_open), with
// errors that name the key, its value and where it came from. Part of the
// provider toolkit.
#pragma once

#include <chorus/types.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace chorus::provider {

/// One key of a settings table (Settings::parse): its name and what an
/// entry for it does, `apply(const chorus_kv_t&)`, which may throw through
/// Settings::bad_value. Made by Settings::integer, bytes, boolean or
/// directly for keys with their own rules.
template <class F>
struct SettingKey {
  std::string_view name;
  F apply;
};
template <class F>
SettingKey(std::string_view, F) -> SettingKey<F>;

/// Stateless apart from the names it quotes; any thread. Every failure throws
/// provider::Error(CHORUS_ERR_INVALID_ARGUMENT) with a message of the form
/// "transport.<name>.<key> = '<value>' (from <origin>): expected <what>".
class Settings {
 public:
  /// `name` is the transport's name; `valid_keys` lists its keys for the
  /// unknown-key message. Both must outlive the Settings.
  constexpr Settings(std::string_view name, std::string_view valid_keys)
      : name_(name), valid_keys_(valid_keys) {}
  /// For parse(), which lists the valid keys from its table.
  explicit constexpr Settings(std::string_view name) : name_(name) {}

  /// Checks the table as each() does and hands each entry to the key of
  /// that name; an entry for no key in `keys` fails as unknown_key, listing
  /// `keys` in their order.
  template <class... F>
  void parse(const chorus_kv_t* entries, std::size_t count, const SettingKey<F>&... keys) const {
    each(entries, count, [&](const chorus_kv_t& kv) {
      const std::string_view key = kv.key;
      if (!((key == keys.name && (keys.apply(kv), true)) || ...)) unknown_key(kv, {keys.name...});
    });
  }
  /// A key whose value parse_int stores in `out`.
  template <class T>
  auto integer(std::string_view key, T& out, int lo, int hi, std::string_view expected) const {
    return SettingKey{key, [this, &out, lo, hi, expected](const chorus_kv_t& kv) {
                        out = static_cast<T>(parse_int(kv, lo, hi, expected));
                      }};
  }
  /// A key whose value parse_bytes stores in `out`.
  auto bytes(std::string_view key, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi,
             std::string_view expected) const {
    return SettingKey{key, [this, &out, lo, hi, expected](const chorus_kv_t& kv) {
                        out = parse_bytes(kv, lo, hi, expected);
                      }};
  }
  /// A key whose value parse_bool stores in `out`.
  auto boolean(std::string_view key, bool& out) const {
    return SettingKey{key, [this, &out](const chorus_kv_t& kv) { out = parse_bool(kv); }};
  }

  /// Calls `apply(entry)` for each entry, after checking the table and each
  /// entry's key and value are not NULL.
  template <class F>
  void each(const chorus_kv_t* entries, std::size_t count, F&& apply) const {
    check_table(entries, count);
    for (std::size_t i = 0; i < count; ++i) {
      check_entry(entries[i], i);
      apply(entries[i]);
    }
  }

  /// "transport.<name>.<key> = '<value>' (from <origin>)".
  std::string describe(const chorus_kv_t& kv) const;
  /// The origin text of `kv` ("unknown origin" when the host gave none).
  static std::string origin(const chorus_kv_t& kv);

  [[noreturn]] void bad_value(const chorus_kv_t& kv, std::string_view expected) const;
  [[noreturn]] void unknown_key(const chorus_kv_t& kv) const;
  /// unknown_key naming `valid_keys` (joined with ", ") as the valid keys.
  [[noreturn]] void unknown_key(const chorus_kv_t& kv,
                                std::initializer_list<std::string_view> valid_keys) const;

  /// A decimal integer in [lo, hi].
  int parse_int(const chorus_kv_t& kv, int lo, int hi, std::string_view expected) const;
  /// A byte count with an optional binary suffix (4194304, 4M, 4MiB, 512k,
  /// 1G; case-insensitive), in [lo, hi].
  std::uint64_t parse_bytes(const chorus_kv_t& kv, std::uint64_t lo, std::uint64_t hi,
                            std::string_view expected) const;
  /// true/false, 1/0, yes/no, on/off; `expected` names the accepted values
  /// when a caller accepts more (such as "auto") before calling this.
  bool parse_bool(const chorus_kv_t& kv, std::string_view expected = "true or false") const;

 private:
  void check_table(const chorus_kv_t* entries, std::size_t count) const;
  void check_entry(const chorus_kv_t& kv, std::size_t index) const;

  std::string_view name_;
  std::string_view valid_keys_;
};

}  // namespace chorus::provider
