// Finding, dlopening and validating the transport the faulty plugin wraps.
#pragma once

#include <chorus/transport.h>

#include <cstddef>
#include <string>
#include <vector>

namespace chorus::faulty {

/// A loaded, validated and initialised inner transport. Lives until
/// unload_inner_transports() (the faulty plugin's fini).
struct InnerTransport {
  std::string path;
  void* handle = nullptr;
  const chorus_transport_plugin_v1_t* ops = nullptr;

  /// Whether the inner table has the optional `interrupt` op.
  bool has_interrupt() const {
    return ops->struct_size >= offsetof(chorus_transport_plugin_v1_t, interrupt) + sizeof(void*) &&
           ops->interrupt != nullptr;
  }
  /// Whether the inner table has the optional `post_send_imm` op (minor 5).
  bool has_post_send_imm() const {
    return ops->struct_size >=
               offsetof(chorus_transport_plugin_v1_t, post_send_imm) + sizeof(void*) &&
           ops->post_send_imm != nullptr;
  }
};

/// Loads the inner transport `name` (a plugin name, or a path containing '/'),
/// searching `extra_dirs`, then CHORUS_PLUGIN_PATH, then the folder the faulty
/// plugin itself was loaded from, then the core's default plugin folder
/// ("chorus" next to the libchorus.so of this process, if one is loaded). A file is loaded and
/// initialised once and shared by every context. Thread-safe. On failure returns
/// CHORUS_ERR_UNAVAILABLE with every path tried, or why the file found was
/// refused, in `error`.
int load_inner_transport(const std::string& name, const std::vector<std::string>& extra_dirs,
                         const chorus_host_v1_t* host, const InnerTransport*& out,
                         std::string& error);

/// Calls every loaded inner transport's fini and dlcloses it. No context may
/// be open.
void unload_inner_transports();

}  // namespace chorus::faulty
