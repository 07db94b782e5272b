#include "core/config.h"

#include "core/config_keys.h"
#include "core/suggest.h"

#include <toml++/toml.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>

extern char** environ;

namespace chorus::core {
namespace {

constexpr const char* kCollectiveNames[CHORUS_COLL_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast",  "barrier",
    "reduce",     "gather",     "scatter",        "all_to_all", "all_to_allv"};

/// One key as it came from one source. Exactly one of `node` (file, API) and
/// `raw` (environment text) carries the value.
struct Entry {
  std::string key;
  std::string origin;
  const toml::node* node = nullptr;
  std::string raw;
  bool from_env = false;
};

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
    if (rest == "signatures") {
      if (e.from_env) {
        if (e.raw != "true" && e.raw != "false" && e.raw != "1" && e.raw != "0")
          return bad(e, "expected true or false, got '" + e.raw + "'");
        cfg.check_signatures = e.raw == "true" || e.raw == "1";
        return Status::ok();
      }
      if (auto b = e.node->value<bool>(); b && e.node->type() == toml::node_type::boolean) {
        cfg.check_signatures = *b;
        return Status::ok();
      }
      return bad(e, "expected a boolean, got " + type_name(e));
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

/// Maps one CHORUS_* variable to its config key; "" for variables that are not
/// settings but are allowed (CHORUS_CONFIG, tool-private prefixes).
Result<std::string> env_key(const std::string& var) {
  static const std::map<std::string, std::string> fixed = {
      {"CHORUS_LOG", "log.level"},
      {"CHORUS_LOG_LEVEL", "log.level"},
      {"CHORUS_TRANSPORT", "transport.name"},
      {"CHORUS_TRANSPORT_NAME", "transport.name"},
      {"CHORUS_PLUGIN_PATH", "plugin_path"},
      {"CHORUS_RANK", "bootstrap.rank"},
      {"CHORUS_WORLD_SIZE", "bootstrap.world_size"},
      {"CHORUS_COORDINATOR", "bootstrap.coordinator"},
      {"CHORUS_JOB_TOKEN", "bootstrap.job_token"},
      {"CHORUS_BIND_ADDRESS", "network.bind_address"},
      {"CHORUS_TIMEOUT_INIT", "timeout.init"},
      {"CHORUS_TIMEOUT_CONNECT", "timeout.connect"},
      {"CHORUS_TIMEOUT_COLLECTIVE", "timeout.collective"},
      {"CHORUS_CHECK_SIGNATURES", "check.signatures"},
      {"CHORUS_ALGORITHM_CHANNELS", "algorithm.channels"},
      {"CHORUS_ALGORITHM_DETERMINISTIC", "algorithm.deterministic"},
      {"CHORUS_ALGORITHM_SWITCH_BYTES", "algorithm.switch_bytes"},
      {"CHORUS_ALGORITHM_STAGING_SLOTS", "algorithm.staging_slots"},
      {"CHORUS_ALGORITHM_STAGING_SLOT_SIZE", "algorithm.staging_slot_size"},
  };
  if (auto it = fixed.find(var); it != fixed.end()) return it->second;
  if (var == "CHORUS_CONFIG") return std::string();
  for (const char* p : {"CHORUS_CONFORMANCE_", "CHORUS_TEST_", "CHORUS_BENCH_", "CHORUS_RUN_"})
    if (var.rfind(p, 0) == 0) return std::string();
  for (const char* p : {"CHORUS_TRANSPORT_", "CHORUS_ALGORITHM_"}) {
    std::string prefix = p;
    if (var.rfind(prefix, 0) != 0) continue;
    std::string rest = lower(var.substr(prefix.size()));
    std::string head = prefix == "CHORUS_TRANSPORT_" ? "transport." : "algorithm.";
    if (head == "algorithm." && collective_from_name(rest) >= 0) return head + rest;
    auto us = rest.find('_');
    if (us != std::string::npos && us > 0 && us + 1 < rest.size())
      return head + rest.substr(0, us) + "." + rest.substr(us + 1);
  }
  std::vector<std::string> names;
  for (const auto& [name, key] : fixed) names.push_back(name);
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
    names.push_back("CHORUS_ALGORITHM_" + upper(kCollectiveNames[c]));
  return Status(CHORUS_ERR_INVALID_ARGUMENT,
                "environment variable " + var + " is not a Chorus setting" +
                    did_you_mean(var, names) +
                    "; unset it or fix the spelling (see "
                    "docs/configuration.md for the CHORUS_* variables)");
}

}  // namespace

const char* log_level_name(int level) {
  static const char* names[] = {"error", "warn", "info", "debug", "trace"};
  return level >= 0 && level <= 4 ? names[level] : "?";
}

int log_level_from_name(const std::string& name) {
  for (int i = 0; i <= 4; ++i)
    if (name == log_level_name(i)) return i;
  if (name == "warning") return CHORUS_LOG_WARN;
  return -1;
}

const char* collective_name(int collective) {
  return collective >= 0 && collective < CHORUS_COLL_COUNT ? kCollectiveNames[collective] : nullptr;
}

int collective_from_name(const std::string& name) {
  for (int i = 0; i < CHORUS_COLL_COUNT; ++i)
    if (name == kCollectiveNames[i]) return i;
  return -1;
}

Result<uint64_t> parse_size(const std::string& text) {
  uint64_t value = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, value);
  if (ec != std::errc() || p == b)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "'" + text + "' is not a size (e.g. 4096, 64K, 1M)");
  uint64_t mult = 1;
  std::string suffix = upper(std::string(p, e));
  if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    mult = 1ull << 30;
  else if (!suffix.empty() && suffix != "B")
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  "'" + text + "' has an unknown unit '" + suffix + "' (use K, M or G)");
  if (value > (~0ull) / mult)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "'" + text + "' is too large");
  return value * mult;
}

std::map<std::string, std::string> environment_map() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string s(*e);
    auto eq = s.find('=');
    if (eq != std::string::npos) env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return env;
}

std::string slurm_first_host(const std::string& nodelist) {
  // "node[03-05,9],gpu1" -> "node03"; "a,b" -> "a"; "" -> "".
  size_t end = nodelist.find_first_of(",[");
  std::string host = nodelist.substr(0, end);
  if (end != std::string::npos && nodelist[end] == '[') {
    size_t close = nodelist.find(']', end);
    std::string inside =
        nodelist.substr(end + 1, close == std::string::npos ? std::string::npos : close - end - 1);
    host += inside.substr(0, inside.find_first_of(",-"));
  }
  return host;
}

std::vector<LauncherSetting> launcher_settings(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> const std::string* {
    auto it = env.find(k);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
  };
  std::vector<LauncherSetting> out;
  // Slurm (srun): rank, size, and a coordinator on the first node of the job
  // with a port derived from the job id, so every task computes the same one.
  if (const auto* procid = get("SLURM_PROCID")) {
    out.push_back({"bootstrap.rank", *procid, "SLURM_PROCID"});
    if (const auto* n = get("SLURM_NTASKS"))
      out.push_back({"bootstrap.world_size", *n, "SLURM_NTASKS"});
    const auto* nodes = get("SLURM_STEP_NODELIST");
    if (!nodes) nodes = get("SLURM_JOB_NODELIST");
    if (!nodes) nodes = get("SLURM_NODELIST");
    const auto* job = get("SLURM_JOB_ID");
    if (!job) job = get("SLURM_JOBID");
    if (nodes && job) {
      std::string host = slurm_first_host(*nodes);
      unsigned long id = std::strtoul(job->c_str(), nullptr, 10);
      const auto* step = get("SLURM_STEP_ID");
      unsigned long step_id = step ? std::strtoul(step->c_str(), nullptr, 10) : 0;
      std::string port = std::to_string(20000 + (id * 31 + step_id) % 30000);
      out.push_back({"bootstrap.coordinator", host + ":" + port,
                     "Slurm (first node of SLURM_*NODELIST, port from SLURM_JOB_ID)"});
    }
    return out;
  }
  // Open MPI / PMIx (mpirun): rank and size; the coordinator must be passed
  // (mpirun -x CHORUS_COORDINATOR=host:port) since the launcher's own wire-up
  // address is not ours to use.
  if (const auto* r = get("OMPI_COMM_WORLD_RANK")) {
    out.push_back({"bootstrap.rank", *r, "OMPI_COMM_WORLD_RANK"});
    if (const auto* n = get("OMPI_COMM_WORLD_SIZE"))
      out.push_back({"bootstrap.world_size", *n, "OMPI_COMM_WORLD_SIZE"});
    return out;
  }
  if (const auto* r = get("PMIX_RANK")) {
    out.push_back({"bootstrap.rank", *r, "PMIX_RANK"});
    if (const auto* n = get("PMIX_SIZE")) out.push_back({"bootstrap.world_size", *n, "PMIX_SIZE"});
    return out;
  }
  // torchrun style.
  if (const auto* r = get("RANK")) {
    if (const auto* n = get("WORLD_SIZE")) {
      out.push_back({"bootstrap.rank", *r, "RANK"});
      out.push_back({"bootstrap.world_size", *n, "WORLD_SIZE"});
      const auto* addr = get("MASTER_ADDR");
      const auto* port = get("MASTER_PORT");
      if (addr && port) {
        // torchrun's own store listens on MASTER_PORT; Chorus takes the next port.
        unsigned long p = std::strtoul(port->c_str(), nullptr, 10) + 1;
        std::string host = addr->find(':') != std::string::npos ? "[" + *addr + "]" : *addr;
        out.push_back({"bootstrap.coordinator", host + ":" + std::to_string(p),
                       "MASTER_ADDR and MASTER_PORT+1"});
      }
    }
  }
  return out;
}

namespace {

/// Reads a whole config file. Every way it can fail (missing, unreadable, a
/// directory, a FIFO or device, an I/O error) is the caller's path to fix:
/// INVALID_ARGUMENT naming the path and the cause.
Status read_config_file(const std::string& path, std::string& text) {
  auto refuse = [&](const std::string& why) {
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  "config file '" + path + "' cannot be read: " + why +
                      " (set CHORUS_CONFIG or the API's config_path to a readable TOML file)");
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return refuse(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) return refuse(std::strerror(errno));
  if (S_ISDIR(sb.st_mode)) return refuse("it is a directory");
  if (!S_ISREG(sb.st_mode)) return refuse("it is not a regular file");
  // A config file is a few kilobytes; refuse anything absurd before allocating.
  constexpr off_t kMaxConfigBytes = 16 << 20;
  if (sb.st_size > kMaxConfigBytes) return refuse("it is larger than 16 MiB");
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(std::strerror(errno));
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > size_t(kMaxConfigBytes)) return refuse("it is larger than 16 MiB");
  }
  return Status::ok();
}

}  // namespace

Result<Config> load_config(const ConfigInputs& inputs) {
  Config cfg;
  // Parsed documents stay alive while entries point into them.
  std::vector<std::unique_ptr<toml::table>> docs;
  std::vector<Entry> file_entries, env_entries, api_entries;

  std::string path = inputs.api_config_path;
  if (path.empty()) {
    if (auto it = inputs.env.find("CHORUS_CONFIG"); it != inputs.env.end()) path = it->second;
  }
  if (!path.empty()) {
    std::string text;
    if (auto st = read_config_file(path, text); !st.is_ok()) return st;
    if (auto st = ascii_only(text, path); !st.is_ok()) return st;
    try {
      docs.push_back(std::make_unique<toml::table>(toml::parse(text, path)));
    } catch (const toml::parse_error& err) {
      const auto& where = err.source().begin;
      return Status(CHORUS_ERR_INVALID_ARGUMENT,
                    path + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                        ": TOML syntax error: " + std::string(err.description()) +
                        bare_word_hint(text, where.line));
    }
    flatten(*docs.back(), "", path, file_entries);
    cfg.source = path;
  }

  // Launcher variables (Slurm, Open MPI / PMIx, torchrun) come before
  // Chorus's own, so CHORUS_* and the file override them.
  std::vector<Entry> launcher_entries;
  for (const auto& ls : launcher_settings(inputs.env)) {
    Entry e;
    e.key = ls.key;
    e.raw = ls.value;
    e.from_env = true;
    e.origin = "launcher variable " + ls.origin;
    launcher_entries.push_back(std::move(e));
  }
  for (const auto& [var, value] : inputs.env) {
    if (var.rfind("CHORUS_", 0) != 0) continue;
    auto key = env_key(var);
    if (!key.is_ok()) return key.status();
    if (key->empty()) continue;
    Entry e;
    e.key = *key;
    e.raw = value;
    e.from_env = true;
    e.origin = "environment variable " + var;
    env_entries.push_back(std::move(e));
  }

  for (size_t i = 0; i < inputs.api_settings.size(); ++i) {
    const std::string& s = inputs.api_settings[i];
    if (s.find('=') == std::string::npos)
      return Status(CHORUS_ERR_INVALID_ARGUMENT,
                    "API setting '" + s + "' is not key=value (e.g. timeout.collective=30)");
    if (auto st = ascii_only(s, "API setting '" + s + "'"); !st.is_ok()) return st;
    try {
      docs.push_back(std::make_unique<toml::table>(toml::parse(s)));
    } catch (const toml::parse_error& err) {
      std::string hint = bare_word_hint(s, 1);
      return Status(CHORUS_ERR_INVALID_ARGUMENT,
                    "API setting '" + s + "' is not valid TOML: " + std::string(err.description()) +
                        (hint.empty() ? " (strings need quotes: transport.name=\"tcp\")" : hint));
    }
    std::vector<Entry> flat;
    flatten(*docs.back(), "", "", flat);
    for (auto& e : flat) {
      e.origin = "API setting '" + s + "'";
      api_entries.push_back(std::move(e));
    }
  }

  // plugin_path accumulates (environment, then API, then file); everything
  // else is overridden by the later source.
  std::vector<std::string> env_paths, api_paths, file_paths;
  auto collect_paths = [](const Entry& e, std::vector<std::string>& out) -> Status {
    if (e.from_env) {
      std::stringstream ss(e.raw);
      std::string item;
      while (std::getline(ss, item, ':'))
        if (!item.empty()) out.push_back(item);
      return Status::ok();
    }
    if (auto s = e.node->value<std::string>()) {
      out.push_back(*s);
      return Status::ok();
    }
    if (const auto* arr = e.node->as_array()) {
      for (const auto& item : *arr) {
        auto s = item.value<std::string>();
        if (!s) return bad(e, "every plugin_path entry must be a string");
        out.push_back(*s);
      }
      return Status::ok();
    }
    return bad_value(e, "expected a string or an array of strings, got " + type_name(e));
  };

  std::map<std::string, const Entry*> final_entries;
  for (auto* list : {&launcher_entries, &file_entries, &env_entries, &api_entries}) {
    for (const auto& e : *list) {
      if (e.key == "plugin_path") {
        auto& dest = list == &file_entries  ? file_paths
                     : list == &env_entries ? env_paths
                                            : api_paths;
        if (auto st = collect_paths(e, dest); !st.is_ok()) return st;
        auto& from = cfg.origins["plugin_path"];
        from += (from.empty() ? "" : "; ") + e.origin;
        continue;
      }
      final_entries[e.key] = &e;
    }
  }
  // Validate every source's entries, not only the winners, so a typo in the
  // file is reported even when the environment overrides that key.
  for (auto* list : {&launcher_entries, &file_entries, &env_entries, &api_entries}) {
    for (const auto& e : *list) {
      if (e.key == "plugin_path") continue;
      Config scratch;
      if (auto st = apply(e, scratch); !st.is_ok()) return st;
    }
  }
  for (const auto& [key, e] : final_entries) {
    if (auto st = apply(*e, cfg); !st.is_ok()) return st;
    cfg.origins[key] = e->origin;
    if (e->from_env || !e->node) {
      cfg.values[key] = e->raw;
    } else {
      std::ostringstream text;
      e->node->visit([&](const auto& n) { text << n; });
      cfg.values[key] = text.str();
    }
  }
  if (auto it = cfg.transport_settings.find("auto"); it != cfg.transport_settings.end()) {
    const Setting* local = nullptr;
    const Setting* fabric = nullptr;
    for (const Setting& s : it->second) {
      if (s.key == "local") local = &s;
      if (s.key == "fabric") fabric = &s;
    }
    std::string l = local ? local->value : "shm", f = fabric ? fabric->value : "tcp";
    if (l == f)
      return Status(CHORUS_ERR_INVALID_ARGUMENT,
                    "transport.auto.local and transport.auto.fabric are both '" + l + "' (set by " +
                        (local ? local->origin : "default") + " and " +
                        (fabric ? fabric->origin : "default") +
                        "); to use one transport for every peer, set transport.name = \"" + l +
                        "\"");
  }
  for (auto* v : {&env_paths, &api_paths, &file_paths})
    cfg.plugin_path.insert(cfg.plugin_path.end(), v->begin(), v->end());
  return cfg;
}

}  // namespace chorus::core
