// The exported ops table: the C boundary of the shared-memory transport,
// built by the provider toolkit's TransportPlugin (NULL checks, exception
// guards, last-error) from the context and endpoint classes.
#include "shm.h"
#include "shm_context.h"
#include "shm_endpoint.h"
#include "shm_futex.h"

#include <chorus/provider/plugin.hpp>

#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <string>

namespace {

using chorus::shm::Context;
using chorus::shm::Endpoint;

struct ShmPlugin {
  static constexpr const char* kName = "shm";
  static Context* context(chorus_tp_context_t* ctx) { return Context::from(ctx); }
  static Endpoint* endpoint(chorus_tp_endpoint_t* ep) { return Endpoint::from(ep); }

  static chorus_tp_context_t* open_context(const chorus_tp_context_info_t& info) {
    return (new Context(info))->handle();
  }
  /// Never waits: the peer's segment exists from its endpoint_open on.
  static void connect(Endpoint* ep, const void* address, size_t length, int timeout_ms) {
    ep->connect(address, length, timeout_ms);
  }

  static int describe(std::string& out) {
    // Segments are memfds (shm_segment.h): /dev/shm holds none of them.
    out = "shared memory (one memfd per context, opened through /proc/<pid>/fd)";
    out += "; large messages: process_vm_readv";
    std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
    int scope = 0;
    if (yama >> scope && scope > 0 && ::geteuid() != 0) {
      out += " likely refused (kernel.yama.ptrace_scope = " + std::to_string(scope) +
             "), so copied through the ring";
    } else {
      out += " (checked per peer at connect)";
    }
    out += chorus::shm::futex_waitv_available() ? "; futex_waitv" : "; no futex_waitv (1 ms naps)";
    return CHORUS_OK;
  }
};

}  // namespace

CHORUS_PROVIDER_EXPORT_TRANSPORT(ShmPlugin);
