// chorus-info: which transport and algorithm plugins this installation finds,
// their ABI versions and paths, and why any of them failed to load. Its exit
// status is the verdict on what it was asked about (see usage()).
#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/config.h"
#include "core/plugin_loader.h"
#include "core/transport_probe.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace chorus::core;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: chorus-info [NAME...]\n"
      "       chorus-info --clean\n"
      "Lists the Chorus plugins found along CHORUS_PLUGIN_PATH, the config's plugin_path\n"
      "and <libdir>/chorus, with their ABI version or the reason they did not load, and\n"
      "whether the configured transport is usable here.\n"
      "Each NAME (a transport, \"auto\", or an algorithm) is checked too: a transport must\n"
      "load and find something usable here, an algorithm must load.\n"
      "A file named like a plugin that is truncated, corrupt, foreign or not a file is\n"
      "listed as BROKEN with the defect; it is never loaded.\n"
      "Exit status: 0 when everything checked is fine; 1 when the configuration is not\n"
      "usable, a plugin found is BROKEN or failed to load, the configured transport is not\n"
      "usable here, or a NAME fails; 2 for a usage error.\n"
      "--clean removes shared-memory segments that shm transports of older Chorus versions\n"
      "left in /dev/shm (chorus-shm-<pid namespace>-<pid>-*) whose owner process no longer\n"
      "exists, in this pid namespace only; a live process's segments are never touched.\n"
      "It exits 0 unless a stale segment could not be removed.\n");
}

/// chorus-info --clean: see usage(). The shm transport sweeps the same way
/// when it opens a context (transports/shm/segment.cc).
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

/// The verdict on one NAME: a transport (or "auto") must pass the probe, an
/// algorithm must load. OK, or why not.
Status check_name(const Config& cfg, const std::vector<PluginListing>& found,
                  const std::string& name) {
  if (name == kAutoTransportName) return probe_transport(cfg, name);
  bool listed = false;
  for (const auto& item : found) {
    if (item.name != name) continue;
    listed = true;
    if (item.kind == PluginKind::kTransport) return probe_transport(cfg, name);
    if (!item.loaded) return {CHORUS_ERR_UNAVAILABLE, "algorithm '" + name + "': " + item.error};
  }
  if (listed) return Status::ok();
  return {CHORUS_ERR_UNAVAILABLE, "no transport or algorithm plugin named '" + name +
                                      "' on the search path (" +
                                      plugin_file_name(PluginKind::kTransport, name) + ", " +
                                      plugin_file_name(PluginKind::kAlgorithm, name) + ")"};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  if (argc == 2 && !std::strcmp(argv[1], "--clean")) return clean_shm();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      usage(stdout);
      return kExitOk;
    }
    if (argv[i][0] == '-') {
      std::fprintf(stderr, "chorus-info: unknown option %s\n", argv[i]);
      usage(stderr);
      return kExitUsage;
    }
    names.emplace_back(argv[i]);
  }
  int exit_code = kExitOk;
  std::vector<std::string> extra;
  ConfigInputs in;
  in.env = environment_map();
  auto cfg = load_config(in);
  if (cfg.is_ok()) {
    extra = cfg->plugin_path;
  } else {
    std::printf("FAILED: configuration not usable: %s\n\n", cfg.status().message().c_str());
    exit_code = kExitFailed;
  }

  std::printf("Chorus %d.%d.%d\n", CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR,
              CHORUS_VERSION_PATCH);
  std::printf("ABIs understood: transport v%d (minor %d), algorithm v%d (minor %d)\n",
              CHORUS_TRANSPORT_ABI_MAJOR, CHORUS_TRANSPORT_ABI_MINOR, CHORUS_ALGORITHM_ABI_MAJOR,
              CHORUS_ALGORITHM_ABI_MINOR);
  auto path = plugin_search_path(extra);
  std::printf("Plugin search path:\n");
  for (const auto& p : path) std::printf("  %s\n", p.c_str());
  auto found = list_plugins(path);
  for (PluginKind kind : {PluginKind::kTransport, PluginKind::kAlgorithm}) {
    std::printf("%s plugins:\n", kind == PluginKind::kTransport ? "Transport" : "Algorithm");
    int n = 0;
    for (const auto& item : found) {
      if (item.kind != kind) continue;
      ++n;
      if (item.loaded) {
        std::printf("  %-12s ok      ABI v%s  %s\n", item.name.c_str(), item.abi_version.c_str(),
                    item.path.c_str());
        if (!item.inventory.empty()) std::printf("      %s\n", item.inventory.c_str());
      } else if (item.broken) {
        // Damaged or foreign: the file was checked and never dlopened.
        exit_code = kExitFailed;
        std::printf("  %-12s BROKEN  %s\n      reason: %s\n", item.name.c_str(), item.path.c_str(),
                    item.error.c_str());
      } else {
        // A plugin file that does not load is a broken installation.
        exit_code = kExitFailed;
        std::printf("  %-12s FAILED  %s\n      reason: %s\n", item.name.c_str(), item.path.c_str(),
                    item.error.c_str());
      }
    }
    if (n == 0) std::printf("  (none found)\n");
  }
  // The composite "auto" transport lives in the core: usable when both of
  // its sub-transports load (docs/configuration.md, transport.auto.*).
  {
    const auto [local, fabric] = auto_transport_names(cfg.is_ok() ? *cfg : Config{});
    auto loads = [&](const std::string& name) {
      for (const auto& item : found)
        if (item.kind == PluginKind::kTransport && item.name == name && item.loaded) return true;
      return false;
    };
    const bool ok = loads(local) && loads(fabric);
    std::printf(
        "Built-in transport:\n  %-12s %s  %s within a host (transport.auto.local), %s across hosts "
        "(transport.auto.fabric)%s\n",
        "auto", ok ? "ok    " : "FAILED", local.c_str(), fabric.c_str(),
        ok ? "" : "; one of them is not loadable above");
  }
  if (!cfg.is_ok()) return exit_code;

  const Status configured = probe_transport(*cfg, cfg->transport);
  std::printf("Default transport: %s (config: %s): %s\n", cfg->transport.c_str(),
              cfg->source.c_str(),
              configured.is_ok() ? "usable" : ("NOT usable: " + configured.message()).c_str());
  if (!configured.is_ok()) exit_code = kExitFailed;

  if (!names.empty()) std::printf("Checked:\n");
  for (const auto& name : names) {
    const Status st = check_name(*cfg, found, name);
    if (st.is_ok()) {
      std::printf("  %-12s ok\n", name.c_str());
    } else {
      std::printf("  %-12s FAILED  %s\n", name.c_str(), st.message().c_str());
      exit_code = kExitFailed;
    }
  }
  return exit_code;
}
