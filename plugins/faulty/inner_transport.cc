#include "inner_transport.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace chorus::faulty {
namespace {

std::mutex g_mutex;
// Keyed by real path; guarded by g_mutex.
std::map<std::string, std::unique_ptr<InnerTransport>>& loaded() {
  static std::map<std::string, std::unique_ptr<InnerTransport>> m;
  return m;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> split_path(const char* s) {
  std::vector<std::string> out;
  if (!s) return out;
  std::string all = s;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// The folder this plugin was loaded from (where an installed tcp sits too).
std::string own_folder() {
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void*>(&own_folder), &info) || !info.dli_fname) return {};
  std::string self = real_path(info.dli_fname);
  auto slash = self.rfind('/');
  return slash == std::string::npos ? std::string() : self.substr(0, slash);
}

/// The core's default plugin folder, "chorus" next to libchorus.so, when the
/// host process has libchorus.so loaded (it has when the core loaded us).
std::string core_plugin_folder() {
  std::string found;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        auto slash = name.rfind('/');
        std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
        if (base.rfind("libchorus.so", 0) != 0) return 0;
        std::string dir = real_path(name);
        *static_cast<std::string*>(data) = dir.substr(0, dir.rfind('/')) + "/chorus";
        return 1;
      },
      &found);
  return found;
}

/// Table checks of the core's loader: the symbol is the file's own, the table
/// covers the minor-0 mandatory ops and none is NULL.
std::string validate(void* handle, const std::string& rp, const chorus_transport_plugin_v1_t*& t) {
  void* sym = ::dlsym(handle, CHORUS_TRANSPORT_SYMBOL_V1);
  Dl_info info{};
  if (!sym || !::dladdr(sym, &info) || !info.dli_fname || real_path(info.dli_fname) != rp)
    return "exports no " CHORUS_TRANSPORT_SYMBOL_V1 " symbol of its own: not a Chorus transport";
  t = static_cast<const chorus_transport_plugin_v1_t*>(sym);
  constexpr size_t need = offsetof(chorus_transport_plugin_v1_t, wait) + sizeof(void*);
  if (t->struct_size < need)
    return "table too short: struct_size is " + std::to_string(t->struct_size) + " bytes, need " +
           std::to_string(need);
  const void* ops[] = {reinterpret_cast<const void*>(t->init),
                       reinterpret_cast<const void*>(t->last_error),
                       reinterpret_cast<const void*>(t->context_open),
                       reinterpret_cast<const void*>(t->context_close),
                       reinterpret_cast<const void*>(t->get_caps),
                       reinterpret_cast<const void*>(t->endpoint_open),
                       reinterpret_cast<const void*>(t->endpoint_connect),
                       reinterpret_cast<const void*>(t->endpoint_close),
                       reinterpret_cast<const void*>(t->mem_register),
                       reinterpret_cast<const void*>(t->mem_deregister),
                       reinterpret_cast<const void*>(t->post_send),
                       reinterpret_cast<const void*>(t->post_recv),
                       reinterpret_cast<const void*>(t->poll),
                       reinterpret_cast<const void*>(t->read_error),
                       reinterpret_cast<const void*>(t->wait)};
  for (const void* op : ops)
    if (!op) return "a mandatory op is NULL";
  if (!t->name) return "the table's name is NULL";
  if (std::string(t->name) == "faulty") return "the faulty transport cannot wrap itself";
  return {};
}

}  // namespace

int load_inner_transport(const std::string& name, const std::vector<std::string>& extra_dirs,
                         const chorus_host_v1_t* host, const InnerTransport*& out,
                         std::string& error) {
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else {
    std::vector<std::string> dirs = extra_dirs;
    for (const auto& d : split_path(std::getenv("CHORUS_PLUGIN_PATH"))) dirs.push_back(d);
    dirs.push_back(own_folder());
    dirs.push_back(core_plugin_folder());
    std::vector<std::string> seen;
    for (const auto& d : dirs) {
      if (d.empty() || std::find(seen.begin(), seen.end(), real_path(d)) != seen.end()) continue;
      seen.push_back(real_path(d));
      candidates.push_back(d + "/libchorus-transport-" + name + ".so");
    }
  }
  std::lock_guard lock(g_mutex);
  std::string tried;
  for (const auto& path : candidates) {
    if (!is_file(path)) {
      tried += "\n  " + path + ": no such file";
      continue;
    }
    std::string rp = real_path(path);
    if (auto it = loaded().find(rp); it != loaded().end()) {
      out = it->second.get();
      return CHORUS_OK;
    }
    // A file that exists but fails is the answer: no silent fallback.
    auto refuse = [&](const std::string& why) {
      error = "faulty: inner transport '" + name + "' not loadable: " + path + ": " + why;
      return CHORUS_ERR_UNAVAILABLE;
    };
    ::dlerror();
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      return refuse(std::string("dlopen failed: ") + (why ? why : "?"));
    }
    const chorus_transport_plugin_v1_t* t = nullptr;
    if (std::string why = validate(handle, rp, t); !why.empty()) {
      ::dlclose(handle);
      return refuse(why);
    }
    if (int rc = t->init(host); rc != CHORUS_OK) {
      std::string why = "init failed with status " + std::to_string(rc) + ": " + t->last_error();
      ::dlclose(handle);
      return refuse(why);
    }
    auto inner = std::make_unique<InnerTransport>();
    inner->path = path;
    inner->handle = handle;
    inner->ops = t;
    out = inner.get();
    loaded()[rp] = std::move(inner);
    return CHORUS_OK;
  }
  error = "faulty: inner transport '" + name + "' not found (libchorus-transport-" + name +
          ".so); searched:" + (tried.empty() ? std::string(" nothing") : tried) +
          "\nSet transport.faulty.inner_path or CHORUS_PLUGIN_PATH to the folder holding it";
  return CHORUS_ERR_UNAVAILABLE;
}

void unload_inner_transports() {
  std::lock_guard lock(g_mutex);
  for (auto& [path, inner] : loaded()) {
    if (inner->ops->fini) inner->ops->fini();
    ::dlclose(inner->handle);
  }
  loaded().clear();
}

}  // namespace chorus::faulty
