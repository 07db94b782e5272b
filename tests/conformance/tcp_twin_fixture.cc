// Test fixture: the tcp transport under a second name, "tcptwin"
// (libchorus-transport-tcptwin.so). auto refuses the same transport as both
// of its sub-transports, so this is how a test gives auto two different
// sub-transports that both declare CHORUS_TP_CAP_CONNECT_POLL (shm does
// not yet): transport.auto.local = "tcptwin" with tcp as the fabric. The
// table is tcp's own, copied with the other name, so every op is tcp's; the
// tcp plugin file is the one this fixture was built against
// (CHORUS_TCP_PLUGIN_FILE). Not installed and not in the plugin folder.
//
// fini is left out: it would reset the logger of the tcp module, which the
// fabric sub-transport of the same process shares with this one.
#include <chorus/transport.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

extern "C" __attribute__((visibility("default")))
chorus_transport_plugin_v1_t chorus_transport_plugin_v1;

namespace {

chorus_transport_plugin_v1_t twin_of_tcp() {
  chorus_transport_plugin_v1_t table{};
  // Never closed: the copied ops point into it for the life of the process.
  void* tcp = ::dlopen(CHORUS_TCP_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
  const auto* inner = tcp ? static_cast<const chorus_transport_plugin_v1_t*>(
                                ::dlsym(tcp, "chorus_transport_plugin_v1"))
                          : nullptr;
  if (inner == nullptr) {
    // The loader then rejects this plugin for its empty table; say why.
    std::fprintf(stderr, "tcptwin fixture: cannot use %s: %s\n", CHORUS_TCP_PLUGIN_FILE,
                 ::dlerror());
    return table;
  }
  std::memcpy(&table, inner, std::min(sizeof table, inner->struct_size));
  table.struct_size = std::min(sizeof table, inner->struct_size);
  table.name = "tcptwin";
  table.fini = nullptr;
  return table;
}

}  // namespace

chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = twin_of_tcp();
