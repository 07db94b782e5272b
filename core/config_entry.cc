// One configuration key's value: its type, range and units are checked and
// the Config field it names is set (config_detail::apply), with every error
// naming the key, where it came from and the fix. The order of the sources
// is config.cc's.
#include "core/config_internal.h"

#include "core/config_keys.h"
#include "core/suggest.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace chorus::core::config_detail {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

void flatten(const toml::table& table, const std::string& prefix, const std::string& file,
             std::vector<Entry>& out) {
  for (const auto& [k, v] : table) {
    std::string key = prefix + std::string(k.str());
    if (const auto* sub = v.as_table()) {
      flatten(*sub, key + ".", file, out);
      continue;
    }
    Entry e;
    e.key = key;
    e.node = &v;
    e.origin = file.empty() ? "" : file + ":" + std::to_string(v.source().begin.line);
    out.push_back(std::move(e));
  }
}

std::string type_name(const Entry& e) {
  if (e.from_env) return "text";
  switch (e.node->type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

Status bad(const Entry& e, const std::string& what) {
  return {CHORUS_ERR_INVALID_ARGUMENT, e.origin + ": key '" + e.key + "': " + what};
}

/// A value of the wrong type or out of range: the error also says what the
/// key takes (from the key registry).
Status bad_value(const Entry& e, const std::string& what) {
  const ConfigKey* k = find_config_key(e.key);
  if (!k) return bad(e, what);
  return bad(e, what + "; " + e.key + " takes " + std::string(k->valid));
}

Result<std::string> get_string(const Entry& e) {
  if (e.from_env) return e.raw;
  if (auto s = e.node->value<std::string>()) return *s;
  return bad_value(e, "expected a string, got " + type_name(e));
}

Result<int64_t> get_int(const Entry& e) {
  if (e.from_env) {
    int64_t v = 0;
    const char* b = e.raw.data();
    auto [p, ec] = std::from_chars(b, b + e.raw.size(), v);
    if (ec != std::errc() || p != b + e.raw.size())
      return bad_value(e, "expected an integer, got '" + e.raw + "'");
    return v;
  }
  if (e.node->type() == toml::node_type::integer) return *e.node->value<int64_t>();
  return bad_value(e, "expected an integer, got " + type_name(e));
}

Result<double> get_number(const Entry& e) {
  if (e.from_env) {
    char* end = nullptr;
    double v = std::strtod(e.raw.c_str(), &end);
    if (e.raw.empty() || *end != '\0')
      return bad_value(e, "expected a number, got '" + e.raw + "'");
    return v;
  }
  if (e.node->type() == toml::node_type::integer) return double(*e.node->value<int64_t>());
  if (e.node->type() == toml::node_type::floating_point) return *e.node->value<double>();
  return bad_value(e, "expected a number, got " + type_name(e));
}

/// Config text must be ASCII (a UTF-8 byte-order mark at the start is
/// allowed). Debian 12's toml++ (3.2) reaches a __builtin_unreachable on some
/// non-ASCII characters where it checks for whitespace (found by
/// tests/fuzz/config_fuzz), which is undefined behaviour on hostile input.
Status ascii_only(std::string_view text, const std::string& where) {
  size_t start = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  size_t line = 1, column = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (i >= start && c >= 0x80)
      return Status(
          CHORUS_ERR_INVALID_ARGUMENT,
          where + ":" + std::to_string(line) + ":" + std::to_string(column) +
              ": non-ASCII byte 0x" + "0123456789ABCDEF"[c >> 4] + "0123456789ABCDEF"[c & 15] +
              "; Chorus configuration must be ASCII (write other characters as \\u escapes "
              "inside quoted strings)");
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return Status::ok();
}

/// For a TOML syntax error on a line `key = word` whose value is a bare word
/// (toml++ then reports a bad boolean, number or date): a hint to quote it.
/// "" when the line is something else.
std::string bare_word_hint(std::string_view text, std::size_t line) {
  std::size_t begin = 0;
  for (std::size_t l = 1; l < line && begin != std::string_view::npos; ++l) {
    begin = text.find('\n', begin);
    if (begin != std::string_view::npos) ++begin;
  }
  if (begin == std::string_view::npos) return "";
  std::string_view row = text.substr(begin, text.find('\n', begin) - begin);
  if (auto hash = row.find('#'); hash != std::string_view::npos) row = row.substr(0, hash);
  auto eq = row.find('=');
  if (eq == std::string_view::npos) return "";
  auto trim = [](std::string_view v) {
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  };
  std::string_view key = trim(row.substr(0, eq)), value = trim(row.substr(eq + 1));
  if (key.empty() || value.empty() || value == "true" || value == "false") return "";
  if (!std::isalpha(static_cast<unsigned char>(value.front()))) return "";
  if (!std::all_of(value.begin(), value.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
      }))
    return "";
  return "; strings must be quoted in TOML: write " + std::string(key) + " = \"" +
         std::string(value) + "\"";
}

/// A plugin setting rendered as text: plugins receive scalars only.
Result<std::string> get_scalar_text(const Entry& e) {
  if (e.from_env) return e.raw;
  switch (e.node->type()) {
    case toml::node_type::string:
      return *e.node->value<std::string>();
    case toml::node_type::integer:
      return std::to_string(*e.node->value<int64_t>());
    case toml::node_type::floating_point: {
      std::ostringstream os;
      os << *e.node->value<double>();
      return os.str();
    }
    case toml::node_type::boolean:
      return std::string(*e.node->value<bool>() ? "true" : "false");
    default:
      return bad(e, "plugin settings must be strings, numbers or booleans, got " + type_name(e));
  }
}

Result<uint64_t> get_size(const Entry& e) {
  if (!e.from_env && e.node->type() == toml::node_type::integer) {
    int64_t v = *e.node->value<int64_t>();
    if (v < 0) return bad_value(e, "must not be negative");
    return uint64_t(v);
  }
  auto text = get_string(e);
  if (!text.is_ok()) return bad_value(e, "expected a size, got " + type_name(e));
  auto size = parse_size(*text);
  if (!size.is_ok()) return bad_value(e, size.status().message());
  return size;
}

bool valid_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

/// "transport.name, transport.auto.local, ..." from the key registry.
std::string known_keys() {
  std::string out;
  for (const auto& k : config_keys()) out += (out.empty() ? "" : ", ") + std::string(k.key);
  return out;
}

/// Applies one validated entry to `cfg`. plugin_path is handled by the caller.
Status apply(const Entry& e, Config& cfg) {
  const std::string& k = e.key;
  auto dot = k.find('.');
  std::string head = k.substr(0, dot);
  std::string rest = dot == std::string::npos ? "" : k.substr(dot + 1);

  auto set_timeout = [&](double& field) -> Status {
    auto v = get_number(e);
    if (!v.is_ok()) return v.status();
    // +inf (and anything too large for a deadline) means no deadline; a
    // positive value below 1 ms waits 1 ms (core/deadline.h).
    if (std::isnan(*v) || !(*v > 0))
      return bad(e, "a timeout is a positive number of seconds (inf: no deadline)");
    field = *v;
    return Status::ok();
  };

  // A boolean: true/false in TOML; true, false, 1 or 0 from the environment.
  auto set_bool = [&](bool& field) -> Status {
    if (e.from_env) {
      if (e.raw != "true" && e.raw != "false" && e.raw != "1" && e.raw != "0")
        return bad(e, "expected true or false, got '" + e.raw + "'");
      field = e.raw == "true" || e.raw == "1";
      return Status::ok();
    }
    if (auto b = e.node->value<bool>(); b && e.node->type() == toml::node_type::boolean) {
      field = *b;
      return Status::ok();
    }
    return bad(e, "expected a boolean, got " + type_name(e));
  };

  if (head == "transport") {
    if (rest == "name") {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (!valid_name(*v)) return bad(e, "'" + *v + "' is not a transport name");
      cfg.transport = *v;
      return Status::ok();
    }
    if (rest.rfind("auto.", 0) == 0) {
      // The composite transport's own keys are checked here; its
      // sub-transports check theirs (transport.shm.*, transport.tcp.*).
      std::string sub = rest.substr(5);
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (sub == "local" || sub == "fabric") {
        if (!valid_name(*v) || *v == "auto")
          return bad(e, "'" + *v + "' is not a transport name (e.g. shm, tcp, verbs, ofi)");
      } else if (sub == "host_id") {
        if (v->empty() || v->size() > 255 ||
            !std::all_of(v->begin(), v->end(), [](unsigned char c) { return std::isgraph(c); }))
          return bad(e, "a host id is 1 to 255 printable characters without spaces");
      } else {
        return bad(e,
                   "unknown key; transport.auto takes local, fabric and host_id (settings of "
                   "a sub-transport go under its own name, e.g. transport.tcp.sockets)");
      }
      auto& list = cfg.transport_settings["auto"];
      std::erase_if(list, [&](const Setting& s) { return s.key == sub; });
      list.push_back({sub, *v, e.origin});
      return Status::ok();
    }
    auto d2 = rest.find('.');
    if (d2 != std::string::npos && d2 > 0 && d2 + 1 < rest.size()) {
      auto text = get_scalar_text(e);
      if (!text.is_ok()) return text.status();
      auto& list = cfg.transport_settings[rest.substr(0, d2)];
      std::string sub = rest.substr(d2 + 1);
      std::erase_if(list, [&](const Setting& s) { return s.key == sub; });
      list.push_back({sub, *text, e.origin});
      return Status::ok();
    }
  } else if (head == "algorithm") {
    if (int coll = collective_from_name(rest); coll >= 0) {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (!valid_name(*v)) return bad(e, "'" + *v + "' is not an algorithm name");
      cfg.algorithm[coll] = *v;
      return Status::ok();
    }
    if (rest == "deterministic") {
      if (e.from_env) {
        if (e.raw != "true" && e.raw != "false" && e.raw != "1" && e.raw != "0")
          return bad_value(e, "expected true or false, got '" + e.raw + "'");
        cfg.deterministic = e.raw == "true" || e.raw == "1";
        return Status::ok();
      }
      if (auto b = e.node->value<bool>(); b && e.node->type() == toml::node_type::boolean) {
        cfg.deterministic = *b;
        return Status::ok();
      }
      return bad_value(e, "expected a boolean, got " + type_name(e));
    }
    if (rest == "switch_bytes") {
      auto v = get_size(e);
      if (!v.is_ok()) return v.status();
      cfg.switch_bytes = *v;
      return Status::ok();
    }
    if (rest == "channels") {
      auto v = get_int(e);
      if (!v.is_ok()) return v.status();
      if (*v < 1 || *v > 64) return bad(e, "channels must be between 1 and 64");
      cfg.channels = int(*v);
      return Status::ok();
    }
    if (rest == "staging_slots") {
      auto v = get_int(e);
      if (!v.is_ok()) return v.status();
      if (*v < 2 || *v > 1024) return bad(e, "staging_slots must be between 2 and 1024");
      cfg.staging_slots = int(*v);
      return Status::ok();
    }
    if (rest == "staging_slot_size") {
      auto v = get_size(e);
      if (!v.is_ok()) return v.status();
      if (*v < 4096 || *v > (1ull << 30))
        return bad(e, "staging_slot_size must be between 4K and 1G");
      cfg.staging_slot_size = size_t(*v);
      return Status::ok();
    }
    auto d2 = rest.find('.');
    if (d2 != std::string::npos && d2 > 0 && d2 + 1 < rest.size()) {
      auto text = get_scalar_text(e);
      if (!text.is_ok()) return text.status();
      auto& list = cfg.algorithm_settings[rest.substr(0, d2)];
      std::string sub = rest.substr(d2 + 1);
      std::erase_if(list, [&](const Setting& s) { return s.key == sub; });
      list.push_back({sub, *text, e.origin});
      return Status::ok();
    }
  } else if (head == "check") {
    if (rest == "signatures") return set_bool(cfg.check_signatures);
  } else if (head == "point_to_point") {
    if (rest == "tagged") return set_bool(cfg.p2p_tagged);
  } else if (head == "collectives") {
    if (rest == "lanes") {
      auto v = get_int(e);
      if (!v.is_ok()) return v.status();
      if (*v < 1 || *v > 16) return bad(e, "lanes must be between 1 and 16");
      cfg.lanes = int(*v);
      return Status::ok();
    }
    if (rest == "driver") {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (*v != "shared" && *v != "threads")
        return bad(e,
                   "driver must be \"shared\" (one thread drives every lane) or \"threads\" "
                   "(each lane its own thread)");
      cfg.lane_driver_shared = *v == "shared";
      return Status::ok();
    }
    if (rest == "fusion_bytes") {
      auto v = get_size(e);
      if (!v.is_ok()) return v.status();
      if (*v > (1ull << 30))
        return bad(e,
                   "fusion_bytes must be between 0 (never fuse grouped all_reduces) and 1G: "
                   "it sizes the staging buffer of one fused call");
      cfg.fusion_bytes = *v;
      return Status::ok();
    }
  } else if (head == "timeout") {
    if (rest == "init") return set_timeout(cfg.timeout_init_s);
    if (rest == "connect") return set_timeout(cfg.timeout_connect_s);
    if (rest == "collective") return set_timeout(cfg.timeout_collective_s);
  } else if (head == "log") {
    if (rest == "level") {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      int level = log_level_from_name(lower(*v));
      if (level < 0)
        return bad(e, "'" + *v + "' is not one of error, warn, info, debug, trace" +
                          did_you_mean(lower(*v), {"error", "warn", "info", "debug", "trace"}));
      cfg.log_level = level;
      return Status::ok();
    }
  } else if (head == "bootstrap") {
    if (rest == "rank" || rest == "world_size") {
      auto v = get_int(e);
      if (!v.is_ok()) return v.status();
      if (rest == "rank" && (*v < 0 || *v > (1 << 24)))
        return bad_value(e, std::to_string(*v) + " is out of range");
      if (rest == "world_size" && (*v < 1 || *v > (1 << 24)))
        return bad_value(e, std::to_string(*v) + " is out of range");
      (rest == "rank" ? cfg.rank : cfg.world_size) = int(*v);
      return Status::ok();
    }
    if (rest == "coordinator" || rest == "job_token") {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (rest == "coordinator") {
        auto colon = v->rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == v->size())
          return bad(e, "'" + *v + "' is not host:port (e.g. 127.0.0.1:29500)");
        cfg.coordinator = *v;
      } else {
        cfg.job_token = *v;
      }
      return Status::ok();
    }
  } else if (head == "network") {
    if (rest == "bind_address") {
      auto v = get_string(e);
      if (!v.is_ok()) return v.status();
      if (v->empty()) return bad(e, "bind_address must not be empty");
      cfg.bind_address = *v;
      return Status::ok();
    }
  }
  return bad(e, "unknown key" + did_you_mean(e.key, concrete_config_keys()) + ". Known keys: " +
                    known_keys() + ". Fix the spelling or remove it (see docs/configuration.md)");
}

}  // namespace chorus::core::config_detail
