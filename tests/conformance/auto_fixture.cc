// Test fixture: the core's composite transport (transport.name = "auto",
// core/auto_transport.cc) exported as an ordinary plugin, so that the
// conformance suite, which only dlopens plugins, can run against it. Not
// installed and not in the plugin folder: the core never loads it.
//
// With CHORUS_CONFORMANCE_AUTO_DISTINCT_HOSTS=1 every context gets the host
// identity "conformance-rank-<rank>", so contexts of different ranks count as
// different hosts and every pair connects through the fabric sub-transport.
#include "core/auto_transport.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" __attribute__((visibility("default")))
chorus_transport_plugin_v1_t chorus_transport_plugin_v1;

namespace {

int open_with_distinct_host(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  const auto* inner = chorus::core::auto_transport_table();
  if (info == nullptr) return inner->context_open(info, ctx_out);
  std::vector<chorus_kv_t> kv(info->config, info->config + info->config_count);
  const std::string host = "conformance-rank-" + std::to_string(info->rank);
  kv.push_back({"host_id", host.c_str(), "CHORUS_CONFORMANCE_AUTO_DISTINCT_HOSTS"});
  chorus_tp_context_info_t copy = *info;
  copy.config = kv.data();
  copy.config_count = kv.size();
  return inner->context_open(&copy, ctx_out);
}

}  // namespace

chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = [] {
  chorus_transport_plugin_v1_t table;
  std::memcpy(&table, chorus::core::auto_transport_table(), sizeof table);
  const char* distinct = std::getenv("CHORUS_CONFORMANCE_AUTO_DISTINCT_HOSTS");
  if (distinct != nullptr && std::strcmp(distinct, "1") == 0)
    table.context_open = open_with_distinct_host;
  return table;
}();
