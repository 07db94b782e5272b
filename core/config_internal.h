// What config.cc and config_entry.cc share, and no one else: one key as it
// came from one source, and the steps that turn it into a Config field.
//   config.cc        sources in order (file, API, environment, launcher),
//                    CHORUS_* variable names, the public helpers
//   config_entry.cc  one key's value: type checks, ranges, units, and the
//                    field it sets
#pragma once

#include "core/config.h"
#include "core/status.h"

#include <toml++/toml.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::core::config_detail {

/// One key as it came from one source. Exactly one of `node` (file, API) and
/// `raw` (environment text) carries the value.
struct Entry {
  std::string key;
  std::string origin;
  const toml::node* node = nullptr;
  std::string raw;
  bool from_env = false;
};

std::string lower(std::string s);
std::string upper(std::string s);
/// Appends every leaf of `table` to `out` as "a.b.c" keys, with file:line
/// origins when `file` is set.
void flatten(const toml::table& table, const std::string& prefix, const std::string& file,
             std::vector<Entry>& out);
/// "string", "integer", ... for the value `e` carries.
std::string type_name(const Entry& e);
/// INVALID_ARGUMENT naming `e`'s key and origin.
Status bad(const Entry& e, const std::string& what);
/// Like bad(), with the value quoted.
Status bad_value(const Entry& e, const std::string& what);
/// INVALID_ARGUMENT when `text` holds a byte outside printable ASCII.
Status ascii_only(std::string_view text, const std::string& where);
/// A hint for a TOML parse error on `line` that looks like an unquoted word.
std::string bare_word_hint(std::string_view text, std::size_t line);
/// Checks `e` and sets the field of `cfg` it names.
Status apply(const Entry& e, Config& cfg);

}  // namespace chorus::core::config_detail
