// The exported ops table: the C boundary of the verbs transport, built by the
// provider toolkit's TransportPlugin (NULL checks, exception guards,
// last-error) from the context and endpoint classes. Memory registration and
// connecting go through the context, which owns the protection domain.
#include "verbs.h"
#include "verbs_context.h"
#include "verbs_device.h"
#include "verbs_endpoint.h"
#include "verbs_memory_region.h"

#include <chorus/provider/plugin.hpp>

#include <string>

namespace {

struct VerbsPlugin {
  static constexpr const char* kName = "verbs";
  static chorus_tp_context_t* open_context(const chorus_tp_context_info_t& info) {
    return new chorus_tp_context(info);
  }
  static int connect(chorus_tp_endpoint_t* ep, const void* address, size_t length, int timeout_ms) {
    return ep->context().connect(*ep, address, length, timeout_ms);
  }
  static chorus_tp_mr_t* register_memory(chorus_tp_context_t* ctx, void* addr, size_t length,
                                         int mem_kind) {
    if (mem_kind != CHORUS_MEM_HOST) {
      throw chorus::verbs::Error(CHORUS_ERR_NOT_SUPPORTED,
                                 "the verbs transport registers host memory only (kind " +
                                     std::to_string(mem_kind) +
                                     "; CUDA memory needs peer-memory support, not built)");
    }
    return ctx->register_memory(addr, length);
  }
  static void deregister_memory(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
    ctx->deregister_memory(mr);
  }
  static int describe(std::string& text) {
    bool usable = false;
    text = chorus::verbs::describe_devices(usable);
    return usable ? CHORUS_OK : chorus::verbs::set_last_error(CHORUS_ERR_UNAVAILABLE, text);
  }
};

}  // namespace

CHORUS_PROVIDER_EXPORT_TRANSPORT(VerbsPlugin);
