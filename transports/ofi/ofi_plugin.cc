// The exported ops table: the C boundary of the libfabric transport, built by
// the provider toolkit's TransportPlugin (NULL checks, exception guards,
// last-error) from the context and endpoint classes.
#include "ofi.h"
#include "ofi_context.h"
#include "ofi_endpoint.h"
#include "ofi_memory.h"
#include "ofi_provider.h"

#include <chorus/provider/plugin.hpp>

namespace {

struct OfiPlugin {
  static constexpr const char* kName = "ofi";
  static chorus_tp_context_t* open_context(const chorus_tp_context_info_t& info) {
    return new chorus_tp_context(info);
  }
  static chorus_tp_mr_t* register_memory(chorus_tp_context_t* ctx, void* addr, size_t length,
                                         int mem_kind) {
    return static_cast<chorus_tp_mr_t*>(ctx->register_memory(addr, length, mem_kind));
  }
  static void deregister_memory(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
    ctx->deregister_memory(mr);
  }
  static int describe(std::string& text) {
    return chorus::ofi::describe_providers(text) ? CHORUS_OK : CHORUS_ERR_UNAVAILABLE;
  }
};

}  // namespace

CHORUS_PROVIDER_EXPORT_TRANSPORT(OfiPlugin);
