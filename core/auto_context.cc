// The composite's context: context_open (its settings, loading and opening
// both sub-transports, the fallback when the default local one is missing or
// refused, the combined caps, the choice of wait mechanism), context_close,
// get_caps, and memory registration in every sub-context that needs it.
#include "core/auto_internal.h"

#include <chorus/transport_names.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

namespace chorus::core::auto_detail {
namespace {

bool valid_name(const std::string& s) {
  return !s.empty() && s.size() <= kMaxName && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

}  // namespace

int auto_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (!info || !ctx_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "context_open: NULL argument");
  std::string names[2] = {"shm", "tcp"};
  bool local_explicit = false;  // transport.auto.local set: its failure is an error
  std::string host_id, plugin_path;
  struct Kv {
    std::string key, value, origin;
  };
  std::map<std::string, std::vector<Kv>> sub_settings;
  for (size_t i = 0; i < info->config_count; ++i) {
    const chorus_kv_t& kv = info->config[i];
    std::string key = kv.key ? kv.key : "";
    std::string value = kv.value ? kv.value : "";
    std::string origin = kv.origin && *kv.origin ? kv.origin : "?";
    auto bad = [&](const std::string& why) {
      return fail(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport 'auto': key '" + key + "' (set by " + origin + "): " + why);
    };
    if (key == "local" || key == "fabric") {
      if (!valid_name(value) || value == kAutoTransportName)
        return bad("'" + value + "' is not a transport name (e.g. shm, tcp, verbs, ofi)");
      names[key == "local" ? kLocal : kFabric] = value;
      local_explicit = local_explicit || key == "local";
    } else if (key == "host_id") {
      if (value.empty() || value.size() > kAutoMaxHostId)
        return bad("a host id is 1 to " + std::to_string(kAutoMaxHostId) + " characters");
      host_id = value;
    } else if (key == "plugin_path") {
      plugin_path = value;
    } else if (auto dot = key.find('.');
               dot != std::string::npos && dot > 0 && dot + 1 < key.size()) {
      sub_settings[key.substr(0, dot)].push_back({key.substr(dot + 1), value, origin});
    } else {
      return bad(
          "unknown key; known: local, fabric, host_id (and <sub-transport>.<key>, handed on "
          "to that sub-transport)");
    }
  }
  if (names[kLocal] == names[kFabric])
    return fail(CHORUS_ERR_INVALID_ARGUMENT,
                "transport 'auto': local and fabric are both '" + names[kLocal] +
                    "'; to use one transport for every peer, set transport.name = \"" +
                    names[kLocal] + "\" instead");
  for (const auto& [sub, list] : sub_settings)
    if (sub != names[kLocal] && sub != names[kFabric])
      return fail(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport 'auto': setting '" + sub + "." + list.front().key + "' (set by " +
                      list.front().origin + ") is for transport '" + sub + "', which is neither " +
                      "the local ('" + names[kLocal] + "') nor the fabric ('" + names[kFabric] +
                      "') sub-transport");

  auto ctx = std::make_unique<AutoContext>();
  ctx->rank = info->rank;
  ctx->data_channels = data_channels_of(*info);
  ctx->host_id = host_id.empty() ? auto_host_identity() : host_id;
  if (ctx->host_id.size() > kAutoMaxHostId) ctx->host_id.resize(kAutoMaxHostId);

  std::vector<std::string> extra;
  {
    std::stringstream ss(plugin_path);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) extra.push_back(item);
  }
  auto search = plugin_search_path(extra);
  for (int slot : {kLocal, kFabric}) ctx->subs[slot].name = names[slot];
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    auto loaded = load_plugin(PluginKind::kTransport, sub.name, search);
    if (!loaded.is_ok() && slot == kLocal && !local_explicit) {
      ctx->warn_local_fallback("is not available (" + loaded.status().message() + ")");
      continue;
    }
    if (!loaded.is_ok()) {
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(CHORUS_ERR_UNAVAILABLE,
                  "transport 'auto' needs its " + std::string(kRole[slot]) + " sub-transport '" +
                      names[slot] + "' (transport.auto." + kRole[slot] + "): " +
                      loaded.status().message() + "\nBuild or install libchorus-transport-" +
                      names[slot] + ".so, choose another with transport.auto." + kRole[slot] +
                      ", or pin a single transport with transport.name");
    }
    sub.plugin = *loaded;
    sub.tp = sub.plugin->transport();
    std::vector<chorus_kv_t> kv;
    if (auto it = sub_settings.find(sub.name); it != sub_settings.end())
      for (const Kv& s : it->second)
        kv.push_back({s.key.c_str(), s.value.c_str(), s.origin.c_str()});
    chorus_tp_context_info_t sub_info{};
    std::memcpy(&sub_info, info, std::min(info->struct_size, sizeof sub_info));
    sub_info.struct_size = std::min(info->struct_size, sizeof sub_info);
    sub_info.config = kv.empty() ? nullptr : kv.data();
    sub_info.config_count = kv.size();
    int rc = sub.tp->context_open(&sub_info, &sub.ctx);
    // A bad setting stays an error; only a refusal (resources, permissions)
    // of the default local sub-transport falls back.
    if (rc != CHORUS_OK && rc != CHORUS_ERR_INVALID_ARGUMENT && slot == kLocal && !local_explicit) {
      sub.ctx = nullptr;
      ctx->warn_local_fallback("could not open a context (" + std::string(sub.tp->last_error()) +
                               ")");
      continue;
    }
    if (rc != CHORUS_OK) {
      sub.ctx = nullptr;
      std::string why = sub.tp->last_error();
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(rc, "transport 'auto': the " + std::string(kRole[slot]) + " sub-transport '" +
                          names[slot] + "' could not open a context: " + why);
    }
    sub.caps.struct_size = sizeof sub.caps;
    if (int crc = sub.tp->get_caps(sub.ctx, &sub.caps); crc != CHORUS_OK) {
      std::string why = sub.tp->last_error();
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(crc, "transport 'auto': get_caps of '" + names[slot] + "' failed: " + why);
    }
  }

  // Conservative combination: every limit is the smaller one (a zero limit
  // means "not stated" and does not count), registration is needed if either
  // needs it, optional features only if both have them.
  auto min_known = [](uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); };
  // Without a local sub-transport the fabric's caps are the composite's.
  const chorus_tp_caps_t& b = ctx->subs[kFabric].caps;
  const chorus_tp_caps_t& a = ctx->has_local() ? ctx->subs[kLocal].caps : b;
  ctx->caps.struct_size = sizeof ctx->caps;
  ctx->caps.max_message_size = min_known(a.max_message_size, b.max_message_size);
  ctx->caps.max_outstanding_sends =
      uint32_t(min_known(a.max_outstanding_sends, b.max_outstanding_sends));
  ctx->caps.max_outstanding_recvs =
      uint32_t(min_known(a.max_outstanding_recvs, b.max_outstanding_recvs));
  // Immediates, like the other caps, only when both sub-transports have them
  // (auto_post_send_imm forwards per endpoint; the core asks per peer,
  // auto_transport_peer_imm).
  // Polled connects (P10) likewise: auto_endpoint_connect forwards one to
  // the sub-endpoint it chooses, and auto_poll passes the sub-contexts'
  // connect requests on, so the cap holds when every sub-transport in use
  // has it (the fabric alone when there is no local one).
  ctx->caps.flags = ((a.flags | b.flags) & CHORUS_TP_CAP_NEEDS_REGISTRATION) |
                    (a.flags & b.flags & ~uint32_t(CHORUS_TP_CAP_NEEDS_REGISTRATION));
  uint64_t address = auto_blob_overhead() +
                     (ctx->has_local() ? (a.max_address_size ? a.max_address_size : 1024) : 0) +
                     (b.max_address_size ? b.max_address_size : 1024);
  ctx->caps.max_address_size = uint32_t(address);
  log_host(CHORUS_LOG_DEBUG, "auto: rank " + std::to_string(info->rank) + " opened " +
                                 (ctx->has_local() ? names[kLocal] + " (local) and " : "") +
                                 names[kFabric] + " (fabric); host identity " + ctx->host_id);
  // Both sub-contexts have a wait object: wait() sleeps on both with one
  // epoll and never starts the helper thread. Failing that, the thread.
  const int sub_fds[2] = {ctx->subs[kLocal].wait_fd(), ctx->subs[kFabric].wait_fd()};
  if (sub_fds[0] >= 0 && sub_fds[1] >= 0 && !ctx->fds.open(sub_fds))
    log_host(CHORUS_LOG_WARN, "auto: rank " + std::to_string(info->rank) +
                                  ": no epoll over the wait objects (" + t_error +
                                  "); waits use a helper thread");
  *ctx_out = reinterpret_cast<chorus_tp_context_t*>(ctx.release());
  return CHORUS_OK;
}

int auto_context_close(chorus_tp_context_t* c) {
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "context_close: NULL context");
  std::unique_ptr<AutoContext> ctx(from(c));
  int first = CHORUS_OK;
  // A sub-context closes its own endpoints and registrations.
  for (Sub& sub : ctx->subs) {
    if (!sub.ctx) continue;
    int rc = sub.tp->context_close(sub.ctx);
    if (rc != CHORUS_OK && first == CHORUS_OK) first = sub.pass_on(rc, "context_close");
    sub.ctx = nullptr;
  }
  return first;
}

int auto_get_caps(chorus_tp_context_t* c, chorus_tp_caps_t* caps_out) {
  if (!c || !caps_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: NULL argument");
  size_t room = caps_out->struct_size == 0
                    ? sizeof(chorus_tp_caps_t)
                    : std::min(caps_out->struct_size, sizeof(chorus_tp_caps_t));
  chorus_tp_caps_t caps = from(c)->caps;
  caps.struct_size = room;
  std::memcpy(caps_out, &caps, room);
  return CHORUS_OK;
}

int auto_mem_register(chorus_tp_context_t* c, void* addr, size_t length, int mem_kind,
                      chorus_tp_mr_t** mr_out) {
  if (!c || !mr_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_register: NULL argument");
  AutoContext* ctx = from(c);
  for (const Sub& sub : ctx->subs)
    if (mem_kind != CHORUS_MEM_HOST && !(sub.caps.flags & CHORUS_TP_CAP_MEM_CUDA))
      return fail(CHORUS_ERR_NOT_SUPPORTED,
                  "mem_register: memory kind " + std::to_string(mem_kind) +
                      " is not supported by sub-transport '" + sub.name + "'");
  auto mr = std::make_unique<AutoMr>();
  bool any = false;
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    if (!sub.ctx || !(sub.caps.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION)) continue;
    int rc = sub.tp->mem_register(sub.ctx, addr, length, mem_kind, &mr->sub[slot]);
    if (rc != CHORUS_OK) {
      int saved = sub.pass_on(rc, "mem_register");
      std::string why = t_error;
      for (int s = 0; s < slot; ++s)
        if (mr->sub[s]) ctx->subs[s].tp->mem_deregister(ctx->subs[s].ctx, mr->sub[s]);
      return fail(saved, why);
    }
    any = true;
  }
  if (!any) {
    *mr_out = nullptr;
    return CHORUS_OK;
  }
  ctx->mrs.insert(mr.get());
  *mr_out = reinterpret_cast<chorus_tp_mr_t*>(mr.release());
  return CHORUS_OK;
}

int auto_mem_deregister(chorus_tp_context_t* c, chorus_tp_mr_t* m) {
  if (!m) return CHORUS_OK;
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_deregister: NULL context");
  AutoContext* ctx = from(c);
  AutoMr* mr = from(m);
  if (!ctx->mrs.erase(mr))
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_deregister: not a registration of this context");
  std::unique_ptr<AutoMr> owned(mr);
  int first = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) {
    if (!mr->sub[slot]) continue;
    int rc = ctx->subs[slot].tp->mem_deregister(ctx->subs[slot].ctx, mr->sub[slot]);
    if (rc != CHORUS_OK && first == CHORUS_OK)
      first = ctx->subs[slot].pass_on(rc, "mem_deregister");
  }
  return first;
}

}  // namespace chorus::core::auto_detail
