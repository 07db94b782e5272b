// The exported ops table of the loopback transport. The toolkit's
// TransportPlugin turns the context and endpoint classes into the C ABI:
// NULL checks, no exception across the boundary, last-error per thread.
#include "loopback.h"

#include <chorus/provider/plugin.hpp>

#include <string>

namespace {

struct LoopbackPlugin {
  static constexpr const char* kName = "loopback";
  static chorus_tp_context_t* open_context(const chorus_tp_context_info_t& info) {
    return new chorus_tp_context(info);
  }
  static int describe(std::string& text) {
    std::lock_guard<std::mutex> lock(chorus::loopback::fabric_mutex());
    text = "in-process loopback (ranks are threads of one process, messages are memcpy); " +
           std::to_string(chorus::loopback::open_contexts()) + " contexts open";
    return CHORUS_OK;
  }
};

}  // namespace

// Defines the one exported symbol, chorus_transport_plugin_v1.
CHORUS_PROVIDER_EXPORT_TRANSPORT(LoopbackPlugin);
