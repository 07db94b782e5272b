// chorus-info: which transport and algorithm plugins this installation finds,
// what each implements, whether it loads and whether it is usable here, the
// effective configuration with each value's source, as text or JSON. Its exit
// status is the verdict on what it was asked about (see usage()).
//
// Structure: gather() builds one Report (plain data); print_text() and
// to_json() render it. A new plugin state or flag is a field of PluginReport
// filled in gather_plugin() and shown by both renderers.
#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/config.h"
#include "core/config_keys.h"
#include "core/plugin_loader.h"
#include "core/transport_probe.h"

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace chorus::core;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: chorus-info [--json] [--config] [NAME...]\n"
      "       chorus-info --clean\n"
      "Lists the Chorus plugins found along CHORUS_PLUGIN_PATH, the config's plugin_path\n"
      "and <libdir>/chorus: for each whether it loads (with its ABI version, or why not)\n"
      "and whether it is usable here, what an algorithm implements (collectives, peers,\n"
      "flags) and a transport's optional ops and inventory; then whether the configured\n"
      "transport is usable here.\n"
      "  --config  print the effective configuration instead: every key, its value and\n"
      "            where the value came from (file:line, environment variable, API\n"
      "            setting, launcher variable, default)\n"
      "  --json    print everything (plugins, configuration, verdicts) as one JSON object\n"
      "Each NAME (a transport, \"auto\", or an algorithm) is checked too: a transport must\n"
      "load and find something usable here, an algorithm must load.\n"
      "A file named like a plugin that is truncated, corrupt, foreign or not a file is\n"
      "listed as BROKEN with the defect; it is never loaded.\n"
      "Exit status: 0 when everything checked is fine; 1 when the configuration is not\n"
      "usable, a plugin found is BROKEN or failed to load, the configured transport is not\n"
      "usable here, or a NAME fails (with --config: only the configuration counts); 2 for\n"
      "a usage error.\n"
      "--clean removes shared-memory segments that shm transports of older Chorus versions\n"
      "left in /dev/shm (chorus-shm-<pid namespace>-<pid>-*) whose owner process no longer\n"
      "exists, in this pid namespace only; a live process's segments are never touched.\n"
      "It exits 0 unless a stale segment could not be removed.\n");
}

/// chorus-info --clean: see usage(). The shm transport sweeps the same way
/// when it opens a context (transports/shm/shm_segment.cc).
int clean_shm() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) {
    std::printf("FAILED: cannot read this process's pid namespace: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  const std::string prefix = "chorus-shm-";
  char ns[32];
  std::snprintf(ns, sizeof ns, "%llx-", static_cast<unsigned long long>(st.st_ino));
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    std::printf("nothing to clean: /dev/shm: %s\n", std::strerror(errno));
    return kExitOk;
  }
  int removed = 0, live = 0, failed = 0;
  while (const dirent* e = ::readdir(dir)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(prefix)) continue;
    name.remove_prefix(prefix.size());
    if (!name.starts_with(ns)) continue;  // another pid namespace: its pids mean nothing here
    name.remove_prefix(std::strlen(ns));
    int pid = 0;
    const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec != std::errc() || pid <= 0 || ptr == name.data() + name.size() || *ptr != '-') continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) {
      ++live;
      continue;
    }
    const std::string path = std::string("/") + e->d_name;
    if (::shm_unlink(path.c_str()) == 0 || errno == ENOENT) {
      ++removed;
      std::printf("  removed /dev/shm%s (pid %d no longer exists)\n", path.c_str(), pid);
    } else {
      ++failed;
      std::printf("  FAILED to remove /dev/shm%s: %s\n", path.c_str(), std::strerror(errno));
    }
  }
  ::closedir(dir);
  std::printf("shm cleanup: removed %d stale segment(s), kept %d of live processes%s\n", removed,
              live, failed ? ", could not remove some (see above)" : "");
  return failed ? kExitFailed : kExitOk;
}

// ---- the report ------------------------------------------------------------

struct PluginReport {
  PluginKind kind = PluginKind::kTransport;
  std::string name;
  std::string path;
  /// dlopen, table validation and init succeeded.
  bool loads = false;
  /// The file failed the checks before dlopen (truncated, corrupt, foreign,
  /// not a regular file): never loaded; `detail` says why.
  bool broken = false;
  /// Loads and, for a transport with a describe op, finds something usable
  /// on this host. An algorithm needs nothing of the host: usable = loads.
  bool usable = false;
  /// "1.3": the ABI major.minor the plugin was built against.
  std::string abi;
  /// Why it does not load, or a transport's inventory / why it is unusable.
  std::string detail;
  /// Algorithm: the collectives its table implements; its peers and flags.
  std::vector<std::string> collectives;
  std::string peers;
  std::vector<std::string> flags;
  /// Transport: the optional ops its table provides.
  std::vector<std::string> optional_ops;
};

struct Verdict {
  std::string name;
  bool ok = false;
  std::string reason;
};

struct Report {
  bool config_ok = false;
  std::string config_error;
  std::string config_source;
  std::vector<EffectiveSetting> settings;
  std::vector<std::string> search_path;
  std::vector<PluginReport> plugins;
  /// The composite "auto" transport built into the core.
  std::string auto_local, auto_fabric;
  bool auto_loads = false, auto_usable = false;
  /// The local sub-transport is the default one and missing or unusable:
  /// auto still works, with every peer over the fabric.
  bool auto_local_falls_back = false;
  std::string default_transport;
  Verdict configured;  // the configured transport
  std::vector<Verdict> checked;
};

const char* kind_word(PluginKind kind) {
  return kind == PluginKind::kTransport ? "transport" : "algorithm";
}

/// The collectives an algorithm's table implements, in the table's order.
/// A collective appended to the ABI is one more row here.
/// What chorus-info says of an algorithm plugin, v1 or v2: every collective
/// it implements (Plugin::implements reads a v1 table only as far as its
/// struct_size), its peers, flags and selection ops.
void describe_algorithm(const chorus::core::Plugin& p, PluginReport& r) {
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
    if (p.implements(c)) r.collectives.emplace_back(chorus_collective_name(c));
  const uint32_t flags = p.algorithm_flags();
  if (flags & CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS)
    r.flags.emplace_back("deterministic_across_ranks");
  if (flags & CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS)
    r.flags.emplace_back("deterministic_across_runs");
  const uint32_t peers = p.algorithm_peers();  // v1 or v2 (minor 1); ALL when undeclared
  r.peers = peers == CHORUS_ALGO_PEERS_RING  ? "ring"
            : peers == CHORUS_ALGO_PEERS_ALL ? "all"
                                             : "unknown (" + std::to_string(peers) + ")";
  if (const auto* v2 = p.algorithm_v2()) {
    if (v2->preference) r.flags.emplace_back("auto_preference");
    if (v2->supports) r.flags.emplace_back("declares_dtypes_and_ops");
    return;
  }
  const auto& a = *p.algorithm();
  if (a.preference) r.flags.emplace_back("auto_preference");
}

void describe_transport_ops(const chorus_transport_plugin_v1_t& t, PluginReport& r) {
  using Table = chorus_transport_plugin_v1_t;
  auto has = [&](std::size_t offset, const void* fn) {
    return t.struct_size >= offset + sizeof(void*) && fn != nullptr;
  };
  if (has(offsetof(Table, fini), reinterpret_cast<const void*>(t.fini)))
    r.optional_ops.emplace_back("fini");
  if (has(offsetof(Table, interrupt), reinterpret_cast<const void*>(t.interrupt)))
    r.optional_ops.emplace_back("interrupt");
  if (has(offsetof(Table, describe), reinterpret_cast<const void*>(t.describe)))
    r.optional_ops.emplace_back("describe");
}

PluginReport gather_plugin(const PluginListing& item) {
  PluginReport r;
  r.kind = item.kind;
  r.name = item.name;
  r.path = item.path;
  r.loads = item.loaded;
  r.broken = item.broken;
  if (!item.loaded) {
    r.detail = item.error;
    return r;
  }
  r.abi = item.abi_version;
  r.usable = item.usable;
  r.detail = item.inventory;
  // The listing marks an unusable inventory; the USABLE column says it here.
  if (constexpr std::string_view kMark = "unusable here: "; r.detail.starts_with(kMark))
    r.detail.erase(0, kMark.size());
  // The listing loaded it; this load is the loader's cached instance.
  auto plugin = load_plugin(item.kind, item.path, {});
  if (plugin.is_ok()) {
    if ((*plugin)->kind() == PluginKind::kAlgorithm) describe_algorithm(**plugin, r);
    if (const auto* t = (*plugin)->transport()) describe_transport_ops(*t, r);
  }
  return r;
}

Report gather(const std::vector<std::string>& names, bool plugins_too) {
  Report rep;
  ConfigInputs in;
  in.env = environment_map();
  auto cfg = load_config(in);
  rep.config_ok = cfg.is_ok();
  std::vector<std::string> extra;
  if (cfg.is_ok()) {
    extra = cfg->plugin_path;
    rep.config_source = cfg->source;
    rep.settings = effective_settings(*cfg);
    rep.default_transport = cfg->transport;
  } else {
    rep.config_error = cfg.status().message();
  }
  rep.search_path = plugin_search_path(extra);
  if (!plugins_too) return rep;

  const auto found = list_plugins(rep.search_path);
  for (const auto& item : found) rep.plugins.push_back(gather_plugin(item));

  // "auto" needs its fabric. It needs its local sub-transport too when
  // transport.auto.local names one; the default local one (shm) that is
  // missing or unusable only sends every peer over the fabric, as a
  // communicator does (docs/configuration.md, transport.auto.*).
  const Config& auto_cfg = cfg.is_ok() ? *cfg : Config{};
  const auto [local, fabric] = auto_transport_names(auto_cfg);
  rep.auto_local = local;
  rep.auto_fabric = fabric;
  auto find = [&](const std::string& name) -> const PluginReport* {
    for (const auto& p : rep.plugins)
      if (p.kind == PluginKind::kTransport && p.name == name && p.loads) return &p;
    return nullptr;
  };
  const PluginReport* l = find(local);
  const PluginReport* f = find(fabric);
  const bool local_ok = l && l->usable;
  const bool local_needed = auto_local_is_explicit(auto_cfg);
  rep.auto_loads = f && (l || !local_needed);
  rep.auto_usable = rep.auto_loads && f->usable && (local_ok || !local_needed);
  rep.auto_local_falls_back = rep.auto_usable && !local_ok;

  if (!cfg.is_ok()) return rep;
  const Status configured = probe_transport(*cfg, cfg->transport);
  rep.configured = {cfg->transport, configured.is_ok(), configured.message()};
  for (const auto& name : names) {
    Status st;
    if (name == kAutoTransportName) {
      st = probe_transport(*cfg, name);
    } else {
      bool listed = false;
      for (const auto& p : rep.plugins) {
        if (p.name != name) continue;
        listed = true;
        if (p.kind == PluginKind::kTransport)
          st = probe_transport(*cfg, name);
        else if (!p.loads)
          st = {CHORUS_ERR_UNAVAILABLE, "algorithm '" + name + "': " + p.detail};
      }
      if (!listed)
        st = {CHORUS_ERR_UNAVAILABLE, "no transport or algorithm plugin named '" + name +
                                          "' on the search path (" +
                                          plugin_file_name(PluginKind::kTransport, name) + ", " +
                                          plugin_file_name(PluginKind::kAlgorithm, name) + ")"};
    }
    rep.checked.push_back({name, st.is_ok(), st.message()});
  }
  return rep;
}

/// The verdict (see usage()).
int exit_code(const Report& rep, bool config_only) {
  if (!rep.config_ok) return kExitFailed;
  if (config_only) return kExitOk;
  for (const auto& p : rep.plugins)
    if (!p.loads) return kExitFailed;  // a plugin file that does not load: broken installation
  if (!rep.configured.ok) return kExitFailed;
  for (const auto& v : rep.checked)
    if (!v.ok) return kExitFailed;
  return kExitOk;
}

// ---- text ------------------------------------------------------------------

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

void print_config(const Report& rep) {
  if (!rep.config_ok) {
    std::printf("FAILED: configuration not usable: %s\n", rep.config_error.c_str());
    return;
  }
  std::printf("Configuration (file: %s):\n", rep.config_source.c_str());
  std::size_t width = 0;
  for (const auto& s : rep.settings) width = std::max(width, s.key.size());
  for (const auto& s : rep.settings)
    std::printf("  %-*s = %-22s  # %s\n", int(width), s.key.c_str(),
                s.value.empty() ? "(unset)" : s.value.c_str(),
                s.source == "unset" ? "no default" : s.source.c_str());
}

void print_plugins(const Report& rep) {
  for (PluginKind kind : {PluginKind::kTransport, PluginKind::kAlgorithm}) {
    std::printf("%s plugins:\n", kind == PluginKind::kTransport ? "Transport" : "Algorithm");
    std::printf("  %-12s %-6s %-7s %-6s %s\n", "NAME", "LOADS", "USABLE", "ABI", "PATH");
    int n = 0;
    for (const auto& p : rep.plugins) {
      if (p.kind != kind) continue;
      ++n;
      std::printf("  %-12s %-6s %-7s %-6s %s\n", p.name.c_str(),
                  p.loads    ? "yes"
                  : p.broken ? "BROKEN"
                             : "no",
                  p.usable ? "yes" : "no", p.loads ? ("v" + p.abi).c_str() : "-", p.path.c_str());
      if (!p.loads) {
        std::printf("      reason: %s%s\n", p.detail.c_str(),
                    p.broken ? " (checked before dlopen; never loaded)" : "");
        continue;
      }
      if (!p.detail.empty())
        std::printf("      %s%s\n", p.usable ? "" : "unusable here: ", p.detail.c_str());
      if (kind == PluginKind::kAlgorithm)
        std::printf("      collectives: %s; peers: %s; flags: %s\n", joined(p.collectives).c_str(),
                    p.peers.c_str(), joined(p.flags).c_str());
      else
        std::printf("      optional ops: %s\n", joined(p.optional_ops).c_str());
    }
    if (n == 0) std::printf("  (none found)\n");
  }
  const std::string fallback_text = "; " + rep.auto_local + " is missing or not usable here, so " +
                                    "every peer goes over " + rep.auto_fabric +
                                    " (set transport.auto.local to make that an error)";
  std::printf(
      "Built-in transport:\n  %-12s %-6s %-7s %-6s %s within a host "
      "(transport.auto.local), %s across hosts (transport.auto.fabric)%s\n",
      "auto", rep.auto_loads ? "yes" : "no", rep.auto_usable ? "yes" : "no", "-",
      rep.auto_local.c_str(), rep.auto_fabric.c_str(),
      !rep.auto_loads             ? "; one of them does not load (see above)"
      : !rep.auto_usable          ? "; one of them is not usable here (see above)"
      : rep.auto_local_falls_back ? fallback_text.c_str()
                                  : "");
}

void print_text(const Report& rep) {
  if (!rep.config_ok)
    std::printf("FAILED: configuration not usable: %s\n\n", rep.config_error.c_str());
  std::printf("Chorus %d.%d.%d\n", CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR,
              CHORUS_VERSION_PATCH);
  std::printf("ABIs understood: transport v%d (minor %d), algorithm v%d (minor %d)\n",
              CHORUS_TRANSPORT_ABI_MAJOR, CHORUS_TRANSPORT_ABI_MINOR, CHORUS_ALGORITHM_ABI_MAJOR,
              CHORUS_ALGORITHM_ABI_MINOR);
  std::printf("Plugin search path:\n");
  for (const auto& p : rep.search_path) std::printf("  %s\n", p.c_str());
  print_plugins(rep);
  if (!rep.config_ok) return;
  std::printf("Default transport: %s (config: %s): %s\n", rep.configured.name.c_str(),
              rep.config_source.c_str(),
              rep.configured.ok ? "usable" : ("NOT usable: " + rep.configured.reason).c_str());
  if (!rep.checked.empty()) std::printf("Checked:\n");
  for (const auto& v : rep.checked) {
    if (v.ok)
      std::printf("  %-12s ok\n", v.name.c_str());
    else
      std::printf("  %-12s FAILED  %s\n", v.name.c_str(), v.reason.c_str());
  }
}

// ---- JSON ------------------------------------------------------------------

nlohmann::ordered_json config_json(const Report& rep) {
  nlohmann::ordered_json j;
  j["usable"] = rep.config_ok;
  if (!rep.config_ok) {
    j["error"] = rep.config_error;
    return j;
  }
  j["file"] = rep.config_source;
  auto settings = nlohmann::ordered_json::array();
  for (const auto& s : rep.settings) {
    nlohmann::ordered_json e;
    e["key"] = s.key;
    e["value"] =
        s.value.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.value);
    e["source"] = s.source;
    settings.push_back(std::move(e));
  }
  j["settings"] = std::move(settings);
  return j;
}

nlohmann::ordered_json to_json(const Report& rep, bool config_only, int exit_status) {
  nlohmann::ordered_json j;
  j["chorus_version"] = std::to_string(CHORUS_VERSION_MAJOR) + "." +
                        std::to_string(CHORUS_VERSION_MINOR) + "." +
                        std::to_string(CHORUS_VERSION_PATCH);
  j["abi"] = {
      {"transport", {{"major", CHORUS_TRANSPORT_ABI_MAJOR}, {"minor", CHORUS_TRANSPORT_ABI_MINOR}}},
      {"algorithm",
       {{"major", CHORUS_ALGORITHM_ABI_MAJOR}, {"minor", CHORUS_ALGORITHM_ABI_MINOR}}}};
  j["configuration"] = config_json(rep);
  j["plugin_search_path"] = rep.search_path;
  if (!config_only) {
    auto plugins = nlohmann::ordered_json::array();
    for (const auto& p : rep.plugins) {
      nlohmann::ordered_json e;
      e["kind"] = kind_word(p.kind);
      e["name"] = p.name;
      e["path"] = p.path;
      e["loads"] = p.loads;
      e["usable"] = p.usable;
      e["abi"] = p.loads ? nlohmann::ordered_json(p.abi) : nlohmann::ordered_json(nullptr);
      if (!p.loads) {
        e["broken"] = p.broken;
        e["error"] = p.detail;
      } else if (p.kind == PluginKind::kAlgorithm) {
        e["collectives"] = p.collectives;
        e["peers"] = p.peers;
        e["flags"] = p.flags;
      } else {
        e["optional_ops"] = p.optional_ops;
        e["inventory"] = p.detail;
      }
      plugins.push_back(std::move(e));
    }
    j["plugins"] = std::move(plugins);
    j["builtin_transports"] =
        nlohmann::ordered_json::array({{{"name", "auto"},
                                        {"loads", rep.auto_loads},
                                        {"usable", rep.auto_usable},
                                        {"local_falls_back", rep.auto_local_falls_back},
                                        {"local", rep.auto_local},
                                        {"fabric", rep.auto_fabric}}});
    if (rep.config_ok) {
      j["default_transport"] = {{"name", rep.configured.name},
                                {"usable", rep.configured.ok},
                                {"reason", rep.configured.reason}};
      auto checked = nlohmann::ordered_json::array();
      for (const auto& v : rep.checked)
        checked.push_back({{"name", v.name}, {"ok", v.ok}, {"reason", v.reason}});
      j["checked"] = std::move(checked);
    }
  }
  j["exit_status"] = exit_status;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  bool json = false, config_only = false;
  if (argc == 2 && !std::strcmp(argv[1], "--clean")) return clean_shm();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      usage(stdout);
      return kExitOk;
    }
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
      continue;
    }
    if (!std::strcmp(argv[i], "--config")) {
      config_only = true;
      continue;
    }
    if (argv[i][0] == '-') {
      std::fprintf(stderr, "chorus-info: unknown option %s\n", argv[i]);
      usage(stderr);
      return kExitUsage;
    }
    names.emplace_back(argv[i]);
  }
  if (config_only && !names.empty()) {
    std::fprintf(stderr, "chorus-info: --config takes no NAME\n");
    usage(stderr);
    return kExitUsage;
  }
  const Report rep = gather(names, !config_only);
  const int code = exit_code(rep, config_only);
  if (json)
    std::printf("%s\n", to_json(rep, config_only, code).dump(2).c_str());
  else if (config_only)
    print_config(rep);
  else
    print_text(rep);
  return code;
}
