// The exported ops table: the C boundary of the TCP transport, built by the
// provider toolkit's TransportPlugin (NULL checks, exception guards,
// last-error) from the context and endpoint classes.
#include "tcp_context.h"
#include "tcp_describe.h"
#include "tcp_endpoint.h"

#include <chorus/provider/plugin.hpp>

namespace {

struct TcpPlugin {
  static constexpr const char* kName = "tcp";
  static chorus_tp_context_t* open_context(const chorus_tp_context_info_t& info) {
    return new chorus_tp_context(info);
  }
  static int describe(std::string& text) {
    text = chorus::tcp::describe_host();
    return CHORUS_OK;
  }
};

}  // namespace

CHORUS_PROVIDER_EXPORT_TRANSPORT(TcpPlugin);
