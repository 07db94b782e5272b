// The composite transport's ops table (auto_init, auto_last_error and the
// ops of the other auto_*.cc files), this thread's error text, the host's
// logger, and the public helpers of auto_transport.h that work on settings
// and connected peers: the Plugin object, the sub-transport names and
// settings, the per-peer summary. auto_internal.h lists the other files.
#include "core/auto_transport.h"
#include "core/auto_internal.h"

#include <chorus/chorus.h>

#include <algorithm>
#include <set>

namespace chorus::core {

using namespace auto_detail;

namespace auto_detail {

thread_local std::string t_error;

namespace {
const chorus_host_v1_t* g_host = nullptr;
}  // namespace

int fail(int rc, std::string message) {
  t_error = std::move(message);
  return rc;
}

void log_host(int level, const std::string& message) {
  if (g_host && g_host->struct_size >= offsetof(chorus_host_v1_t, log) + sizeof(void*) &&
      g_host->log)
    g_host->log(g_host->ctx, level, message.c_str());
}

}  // namespace auto_detail

namespace {

int auto_init(const chorus_host_v1_t* host) {
  g_host = host;
  return CHORUS_OK;
}

const char* auto_last_error() { return t_error.c_str(); }

const chorus_transport_plugin_v1_t kTable = {
    sizeof(chorus_transport_plugin_v1_t),
    CHORUS_TRANSPORT_ABI_MINOR,
    kAutoTransportName,
    auto_init,
    nullptr,
    auto_last_error,
    auto_context_open,
    auto_context_close,
    auto_get_caps,
    auto_endpoint_open,
    auto_endpoint_connect,
    auto_endpoint_close,
    auto_mem_register,
    auto_mem_deregister,
    auto_post_send,
    auto_post_recv,
    auto_poll,
    auto_read_error,
    auto_wait,
    auto_interrupt,
    nullptr,
    auto_wait_fd,
    auto_post_send_imm,
};

}  // namespace

const chorus_transport_plugin_v1_t* auto_transport_table() { return &kTable; }

std::shared_ptr<Plugin> auto_transport_plugin() {
  static const std::shared_ptr<Plugin> plugin = [] {
    auto p = std::make_shared<Plugin>();
    p->kind_ = PluginKind::kTransport;
    p->name_ = kAutoTransportName;
    p->path_ = "(built into libchorus)";
    p->transport_ = &kTable;
    kTable.init(plugin_host());
    return p;
  }();
  return plugin;
}

std::pair<std::string, std::string> auto_transport_names(const Config& cfg) {
  std::pair<std::string, std::string> names{"shm", "tcp"};
  if (auto it = cfg.transport_settings.find(kAutoTransportName); it != cfg.transport_settings.end())
    for (const Setting& s : it->second) {
      if (s.key == "local") names.first = s.value;
      if (s.key == "fabric") names.second = s.value;
    }
  return names;
}

bool auto_local_is_explicit(const Config& cfg) {
  auto it = cfg.transport_settings.find(kAutoTransportName);
  return it != cfg.transport_settings.end() &&
         std::any_of(it->second.begin(), it->second.end(),
                     [](const Setting& s) { return s.key == "local"; });
}

std::vector<Setting> auto_transport_settings(const Config& cfg) {
  std::vector<Setting> out;
  if (auto it = cfg.transport_settings.find(kAutoTransportName); it != cfg.transport_settings.end())
    out = it->second;
  auto [local, fabric] = auto_transport_names(cfg);
  for (const std::string& sub : {local, fabric})
    if (auto it = cfg.transport_settings.find(sub); it != cfg.transport_settings.end())
      for (const Setting& s : it->second) out.push_back({sub + "." + s.key, s.value, s.origin});
  std::string path;
  for (const auto& p : cfg.plugin_path) path += (path.empty() ? "" : ":") + p;
  if (!path.empty()) out.push_back({"plugin_path", path, "plugin_path"});
  return out;
}

std::vector<std::pair<std::string, std::vector<int>>> auto_transport_peers(chorus_tp_context_t* c) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  if (!c) return out;
  AutoContext* ctx = from(c);
  std::set<int> peers[2];
  for (const auto& ep : ctx->endpoints)
    if (ep->chosen >= 0) peers[ep->chosen].insert(ep->peer);
  for (const auto& [peer, slot] : ctx->planned) peers[slot].insert(peer);
  for (int slot : {kLocal, kFabric})
    out.emplace_back(ctx->subs[slot].name,
                     std::vector<int>(peers[slot].begin(), peers[slot].end()));
  return out;
}

void auto_transport_plan(chorus_tp_endpoint_t* e, std::span<const std::byte> address) {
  if (!e) return;
  AutoEndpoint* ep = from(e);
  if (ep->chosen >= 0) return;
  auto blob = auto_blob_decode(address);
  if (!blob.is_ok()) return;
  AutoContext* ctx = ep->owner;
  const int slot = auto_choose_slot(*ctx, *blob, ep->sub[kLocal] != nullptr);
  ctx->planned[ep->peer] = slot;
  // The other half can never carry this pair: closing it now keeps a
  // sub-context that serves no peer out of auto_poll and auto_wait (on one
  // host, tcp: otherwise every wait would sleep on both, through the helper
  // thread). The connect's own choice finds the same slot (the closed half
  // reads as "no local half" when it was the local one).
  int ignored = CHORUS_OK;
  ctx->close_sub_endpoint(*ep, 1 - slot, ignored);
}

std::vector<char> auto_transport_peer_imm(chorus_tp_context_t* c, int size) {
  std::vector<char> out(size_t(std::max(size, 0)), 0);
  if (!c) return out;
  AutoContext* ctx = from(c);
  for (const auto& ep : ctx->endpoints)
    if (ep->chosen >= 0 && ep->peer >= 0 && ep->peer < size)
      out[size_t(ep->peer)] = ctx->subs[ep->chosen].has_imm() ? 1 : 0;
  return out;
}

std::string auto_transport_summary(
    const std::vector<std::pair<std::string, std::vector<int>>>& peers) {
  std::string s;
  for (const auto& [name, ranks] : peers) {
    if (ranks.empty()) continue;
    s += (s.empty() ? "" : "; ") + name + " to rank" + (ranks.size() > 1 ? "s " : " ") +
         auto_rank_list(ranks);
  }
  return s.empty() ? "no peers" : s;
}

std::string auto_rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]) + ".." + std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) s += (k > i ? "," : "") + std::to_string(ranks[k]);
    }
    i = j + 1;
  }
  return s;
}

}  // namespace chorus::core
