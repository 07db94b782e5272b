// chorus-info: which transport and algorithm plugins this installation finds,
// their ABI versions and paths, and why any of them failed to load.
#include <chorus/chorus.h>

#include "core/config.h"
#include "core/plugin_loader.h"

#include <cstdio>

int main(int argc, char** argv) {
  (void)argv;
  if (argc > 1) {
    std::printf(
        "usage: chorus-info\n"
        "Lists the Chorus plugins found along CHORUS_PLUGIN_PATH, the config's plugin_path\n"
        "and <libdir>/chorus, with their ABI version or the reason they did not load.\n");
    return argc == 2 ? 0 : 2;
  }
  using namespace chorus::core;
  std::vector<std::string> extra;
  ConfigInputs in;
  in.env = environment_map();
  auto cfg = load_config(in);
  if (cfg.is_ok())
    extra = cfg->plugin_path;
  else
    std::printf("warning: configuration not usable: %s\n\n", cfg.status().message().c_str());

  std::printf("Chorus %d.%d.%d\n", CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR,
              CHORUS_VERSION_PATCH);
  std::printf("ABIs understood: transport v%d (minor %d), algorithm v%d (minor %d)\n",
              CHORUS_TRANSPORT_ABI_MAJOR, CHORUS_TRANSPORT_ABI_MINOR, CHORUS_ALGORITHM_ABI_MAJOR,
              CHORUS_ALGORITHM_ABI_MINOR);
  auto path = plugin_search_path(extra);
  std::printf("Plugin search path:\n");
  for (const auto& p : path) std::printf("  %s\n", p.c_str());
  auto found = list_plugins(path);
  int failed = 0;
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
      } else {
        ++failed;
        std::printf("  %-12s FAILED  %s\n      reason: %s\n", item.name.c_str(), item.path.c_str(),
                    item.error.c_str());
      }
    }
    if (n == 0) std::printf("  (none found)\n");
  }
  // The composite "auto" transport lives in the core: usable when both of
  // its sub-transports load (docs/configuration.md, transport.auto.*).
  {
    std::string local = "shm", fabric = "tcp";
    if (cfg.is_ok()) {
      if (auto it = cfg->transport_settings.find("auto"); it != cfg->transport_settings.end())
        for (const auto& s : it->second) {
          if (s.key == "local") local = s.value;
          if (s.key == "fabric") fabric = s.value;
        }
    }
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
  if (cfg.is_ok())
    std::printf("Default transport: %s (config: %s)\n", cfg->transport.c_str(),
                cfg->source.c_str());
  return 0;
}
