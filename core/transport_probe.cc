#include "core/transport_probe.h"

#include "core/auto_transport.h"

#include <cstddef>

namespace chorus::core {
namespace {

Status probe_plugin(const std::string& name, const std::vector<std::string>& search) {
  auto loaded = load_plugin(PluginKind::kTransport, name, search);
  if (!loaded.is_ok()) return loaded.status();
  const TransportInventory inv = describe_transport(**loaded);
  if (!inv.usable)
    return {CHORUS_ERR_UNAVAILABLE, "transport '" + name + "' loads but is not usable here: " +
                                        (inv.text.empty() ? "its describe op says so" : inv.text)};
  return Status::ok();
}

}  // namespace

TransportInventory describe_transport(const Plugin& plugin) {
  TransportInventory inv;
  const chorus_transport_plugin_v1_t* t = plugin.transport();
  if (!t || t->struct_size < offsetof(chorus_transport_plugin_v1_t, describe) + sizeof(void*) ||
      !t->describe)
    return inv;
  char buf[1024] = {0};
  const int rc = t->describe(buf, sizeof(buf));
  buf[sizeof(buf) - 1] = '\0';
  inv.described = true;
  inv.usable = rc == CHORUS_OK;
  inv.text = buf;
  return inv;
}

Status probe_transport(const Config& cfg, const std::string& name) {
  const auto search = plugin_search_path(cfg.plugin_path);
  if (name != kAutoTransportName) return probe_plugin(name, search);
  const auto [local, fabric] = auto_transport_names(cfg);
  if (auto st = probe_plugin(fabric, search); !st.is_ok())
    return st.with_context("transport 'auto' needs its fabric sub-transport '" + fabric +
                           "' (transport.auto.fabric)");
  // The default local sub-transport that is missing or unusable sends every
  // peer over the fabric (with a warning at init); a named one must work.
  if (!auto_local_is_explicit(cfg)) return Status::ok();
  if (auto st = probe_plugin(local, search); !st.is_ok())
    return st.with_context("transport 'auto' needs its local sub-transport '" + local +
                           "' (transport.auto.local)");
  return Status::ok();
}

}  // namespace chorus::core
