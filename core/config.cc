#include "core/config.h"
#include "core/config_internal.h"

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

using namespace config_detail;

namespace {

constexpr const char* kCollectiveNames[CHORUS_COLL_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast",  "barrier",
    "reduce",     "gather",     "scatter",        "all_to_all", "all_to_allv"};

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
      {"CHORUS_POINT_TO_POINT_TAGGED", "point_to_point.tagged"},
      {"CHORUS_COLLECTIVES_LANES", "collectives.lanes"},
      {"CHORUS_COLLECTIVES_DRIVER", "collectives.driver"},
      {"CHORUS_COLLECTIVES_FUSION_BYTES", "collectives.fusion_bytes"},
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
