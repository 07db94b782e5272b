#include "core/plugin_loader.h"

#include <chorus/chorus.h>

#include "core/elf_check.h"
#include "core/log.h"
#include "core/suggest.h"
#include "core/transport_probe.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace chorus::core {
namespace {

constexpr int kNewestMajorProbed = 9;

const char* kind_word(PluginKind kind) {
  return kind == PluginKind::kTransport ? "transport" : "algorithm";
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

void host_log(void*, int level, const char* message) {
  if (!log_enabled(level)) return;
  const std::string* comm = log_thread_comm();
  std::string text = message ? message : "";
  log_line(level, log_rank(), comm ? "comm " + *comm + ": " + text : text);
}

/// Looks `symbol` up in the plugin file itself: a symbol that dlsym finds in
/// one of the plugin's dependencies does not count.
void* own_symbol(void* handle, const std::string& plugin_real_path, const std::string& symbol) {
  void* sym = ::dlsym(handle, symbol.c_str());
  if (!sym) return nullptr;
  Dl_info info{};
  if (!::dladdr(sym, &info) || !info.dli_fname) return nullptr;
  return real_path(info.dli_fname) == plugin_real_path ? sym : nullptr;
}

template <class Table>
bool op_present(const Table* t, size_t offset, const void* op) {
  return t->struct_size >= offset + sizeof(void*) && op != nullptr;
}

/// The refusal of a table `need` bytes long at least, or OK.
Status check_table_size(size_t have, size_t need, const std::string& what, const char* header) {
  if (have >= need) return Status::ok();
  return {CHORUS_ERR_UNAVAILABLE, "table too short: struct_size is " + std::to_string(have) +
                                      " bytes but " + what + " " + std::to_string(need) +
                                      "; rebuild the plugin against include/chorus/" + header};
}

/// The refusal naming the mandatory ops found NULL, or OK when none is.
Status check_missing(const std::vector<std::string>& missing) {
  if (missing.empty()) return Status::ok();
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  return {CHORUS_ERR_UNAVAILABLE, "mandatory op(s) missing (NULL): " + list};
}

#define CHORUS_MANDATORY(Table, t, op, missing)                                  \
  if (!op_present(t, offsetof(Table, op), reinterpret_cast<const void*>(t->op))) \
  missing.push_back(#op)

Status validate_transport(const chorus_transport_plugin_v1_t* t) {
  if (auto st = check_table_size(t->struct_size,
                                 offsetof(chorus_transport_plugin_v1_t, wait) + sizeof(void*),
                                 "the mandatory ops of transport ABI v1 need", "transport.h");
      !st.is_ok())
    return st;
  std::vector<std::string> missing;
  using T = chorus_transport_plugin_v1_t;
  CHORUS_MANDATORY(T, t, init, missing);
  CHORUS_MANDATORY(T, t, last_error, missing);
  CHORUS_MANDATORY(T, t, context_open, missing);
  CHORUS_MANDATORY(T, t, context_close, missing);
  CHORUS_MANDATORY(T, t, get_caps, missing);
  CHORUS_MANDATORY(T, t, endpoint_open, missing);
  CHORUS_MANDATORY(T, t, endpoint_connect, missing);
  CHORUS_MANDATORY(T, t, endpoint_close, missing);
  CHORUS_MANDATORY(T, t, mem_register, missing);
  CHORUS_MANDATORY(T, t, mem_deregister, missing);
  CHORUS_MANDATORY(T, t, post_send, missing);
  CHORUS_MANDATORY(T, t, post_recv, missing);
  CHORUS_MANDATORY(T, t, poll, missing);
  CHORUS_MANDATORY(T, t, read_error, missing);
  CHORUS_MANDATORY(T, t, wait, missing);
  if (auto st = check_missing(missing); !st.is_ok()) return st;
  if (!t->name) return {CHORUS_ERR_UNAVAILABLE, "the table's name is NULL"};
  return Status::ok();
}

Status validate_algorithm(const chorus_algorithm_plugin_v1_t* t) {
  using T = chorus_algorithm_plugin_v1_t;
  if (auto st = check_table_size(t->struct_size, offsetof(T, init) + sizeof(void*),
                                 "algorithm ABI v1 needs at least", "algorithm.h");
      !st.is_ok())
    return st;
  std::vector<std::string> missing;
  CHORUS_MANDATORY(T, t, init, missing);
  if (auto st = check_missing(missing); !st.is_ok()) return st;
  if (!t->name) return {CHORUS_ERR_UNAVAILABLE, "the table's name is NULL"};
  if (t->peers != CHORUS_ALGO_PEERS_RING && t->peers != CHORUS_ALGO_PEERS_ALL)
    return {CHORUS_ERR_UNAVAILABLE,
            "peers is " + std::to_string(t->peers) + ", expected CHORUS_ALGO_PEERS_RING or _ALL"};
  return Status::ok();
}

Status validate_algorithm_v2(const chorus_algorithm_plugin_v2_t* t) {
  using T = chorus_algorithm_plugin_v2_t;
  if (auto st = check_table_size(t->struct_size, offsetof(T, task_free) + sizeof(void*),
                                 "algorithm ABI v2 needs at least", "algorithm.h");
      !st.is_ok())
    return st;
  std::vector<std::string> missing;
  CHORUS_MANDATORY(T, t, init, missing);
  CHORUS_MANDATORY(T, t, comm_init, missing);
  CHORUS_MANDATORY(T, t, post, missing);
  CHORUS_MANDATORY(T, t, progress, missing);
  CHORUS_MANDATORY(T, t, task_free, missing);
  if (auto st = check_missing(missing); !st.is_ok()) return st;
  if (!t->name) return {CHORUS_ERR_UNAVAILABLE, "the table's name is NULL"};
  // `peers` (minor 1): 0 reads as ALL, like a minor-0 table without it.
  if (t->struct_size >= offsetof(T, peers) + sizeof(t->peers) && t->peers != 0 &&
      t->peers != CHORUS_ALGO_PEERS_RING && t->peers != CHORUS_ALGO_PEERS_ALL)
    return {CHORUS_ERR_UNAVAILABLE,
            "peers is " + std::to_string(t->peers) +
                ": expected CHORUS_ALGO_PEERS_RING (1), CHORUS_ALGO_PEERS_ALL (2) or 0 (= ALL); "
                "fix the table's peers field (kPeers in an SDK class)"};
  // Bits of collectives this Chorus does not know are ignored (a newer header).
  if ((t->collectives & ((1u << CHORUS_COLL_COUNT) - 1)) == 0)
    return {CHORUS_ERR_UNAVAILABLE,
            "collectives is " + std::to_string(t->collectives) +
                ": it names no collective this Chorus knows; set a bit (1u << CHORUS_COLL_x) "
                "for each collective the plugin implements"};
  return Status::ok();
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::weak_ptr<Plugin>>& cache() {
  static std::map<std::string, std::weak_ptr<Plugin>> c;
  return c;
}

/// The <name> of a file named libchorus-<kind>-<name>.so (`file` without
/// its folder), or "" when the file is not named like a plugin of `kind`.
std::string name_in_file_name(PluginKind kind, const std::string& file) {
  const std::string prefix = std::string("libchorus-") + kind_word(kind) + "-";
  if (file.size() <= prefix.size() + 3 || file.rfind(prefix, 0) != 0 ||
      file.compare(file.size() - 3, 3, ".so") != 0)
    return "";
  return file.substr(prefix.size(), file.size() - prefix.size() - 3);
}

/// The file name is how a plugin is pinned and listed, the table's name how
/// it is selected and logged: when they differ, pinning finds the file but
/// selection never finds the name. A file whose name does not follow
/// libchorus-<kind>-<name>.so (loaded by an explicit path) makes no claim.
Status check_table_name(PluginKind kind, const std::string& path, const char* table_name) {
  const std::string file_name = name_in_file_name(kind, path.substr(path.rfind('/') + 1));
  if (file_name.empty() || file_name == table_name) return Status::ok();
  return {CHORUS_ERR_UNAVAILABLE, "the file is named for " + std::string(kind_word(kind)) + " '" +
                                      file_name + "' but its table names itself '" + table_name +
                                      "'; rename the file to " +
                                      plugin_file_name(kind, table_name) +
                                      " or rebuild the plugin with the name '" + file_name + "'"};
}

/// dlopens and validates one file. On failure nothing stays loaded.
Result<std::shared_ptr<Plugin>> open_file(PluginKind kind, const std::string& path,
                                          std::shared_ptr<Plugin> shell) {
  std::string rp = real_path(path);
  // dlopen trusts the file's headers: a truncated copy is mapped past its end
  // and the first touch of such a page kills the process with SIGBUS.
  if (auto st = check_elf_file(path); !st.is_ok())
    return Status(st.code(), "broken file, not loaded: " + st.message() +
                                 " (reinstall or rebuild the plugin, or remove the file from the "
                                 "plugin path)");
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    return Status(CHORUS_ERR_UNAVAILABLE, std::string("dlopen failed: ") + (err ? err : "?"));
  }
  auto fail = [&](Status st) -> Result<std::shared_ptr<Plugin>> {
    ::dlclose(handle);
    return st;
  };
  const std::string base = std::string("chorus_") + kind_word(kind) + "_plugin_v";
  // Algorithm plugins come in two majors; a file exporting both is read as v2.
  const int newest_supported = kind == PluginKind::kAlgorithm ? 2 : 1;
  int major_found = 0;
  void* sym = nullptr;
  for (int major = newest_supported; major >= 1 && !sym; --major) {
    sym = own_symbol(handle, rp, base + std::to_string(major));
    if (sym) major_found = major;
  }
  if (!sym) {
    for (int major = kNewestMajorProbed; major > newest_supported; --major) {
      if (own_symbol(handle, rp, base + std::to_string(major)))
        return fail({CHORUS_ERR_UNAVAILABLE,
                     "built for " + std::string(kind_word(kind)) + " ABI v" +
                         std::to_string(major) + " (exports " + base + std::to_string(major) +
                         ") but this Chorus supports " +
                         (newest_supported == 1 ? std::string("v1 only") : "v1 and v2") +
                         "; rebuild the plugin against this Chorus's headers or upgrade Chorus"});
    }
    return fail({CHORUS_ERR_UNAVAILABLE,
                 "exports no " + base + (newest_supported == 1 ? "1" : "1 or " + base + "2") +
                     " symbol of its own: not a Chorus " + kind_word(kind) +
                     " plugin (check that the symbol is exported with C linkage and default "
                     "visibility)"});
  }
  shell->handle_ = handle;
  shell->path_ = path;
  const chorus_host_v1_t* host = plugin_host();
  if (kind == PluginKind::kTransport) {
    auto* t = static_cast<const chorus_transport_plugin_v1_t*>(sym);
    if (auto st = validate_transport(t); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    if (auto st = check_table_name(kind, path, t->name); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    int rc = t->init(host);
    if (rc != CHORUS_OK) {
      std::string why = t->last_error ? t->last_error() : "";
      shell->handle_ = nullptr;
      return fail({CHORUS_ERR_UNAVAILABLE, "init failed with " +
                                               std::string(chorus_status_name(rc)) +
                                               (why.empty() ? "" : ": " + why)});
    }
    shell->transport_ = t;
    shell->name_ = t->name;
  } else if (major_found == 2) {
    auto* a = static_cast<const chorus_algorithm_plugin_v2_t*>(sym);
    if (auto st = validate_algorithm_v2(a); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    if (auto st = check_table_name(kind, path, a->name); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    if (int rc = a->init(host); rc != CHORUS_OK) {
      shell->handle_ = nullptr;
      return fail({CHORUS_ERR_UNAVAILABLE, "init failed with " +
                                               std::string(chorus_status_name(rc)) +
                                               " (the plugin's log lines above may say why)"});
    }
    shell->algorithm_v2_ = a;
    shell->name_ = a->name;
  } else {
    auto* a = static_cast<const chorus_algorithm_plugin_v1_t*>(sym);
    if (auto st = validate_algorithm(a); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    if (auto st = check_table_name(kind, path, a->name); !st.is_ok()) {
      shell->handle_ = nullptr;
      return fail(st);
    }
    int rc = a->init(host);
    if (rc != CHORUS_OK) {
      shell->handle_ = nullptr;
      return fail({CHORUS_ERR_UNAVAILABLE, "init failed with " +
                                               std::string(chorus_status_name(rc)) +
                                               " (the plugin's log lines above may say why)"});
    }
    shell->algorithm_ = a;
    shell->name_ = a->name;
  }
  return shell;
}

}  // namespace

Plugin::~Plugin() {
  if (!handle_) return;
  // fini is optional: call it only when the plugin's table reaches it.
  if (transport_ &&
      transport_->struct_size >= offsetof(chorus_transport_plugin_v1_t, fini) + sizeof(void*) &&
      transport_->fini)
    transport_->fini();
  if (algorithm_ &&
      algorithm_->struct_size >= offsetof(chorus_algorithm_plugin_v1_t, fini) + sizeof(void*) &&
      algorithm_->fini)
    algorithm_->fini();
  if (algorithm_v2_ && algorithm_v2_->fini) algorithm_v2_->fini();
  ::dlclose(handle_);
}

std::string Plugin::abi_version() const {
  if (algorithm_v2_) return "2." + std::to_string(algorithm_v2_->minor);
  uint32_t minor = transport_ ? transport_->minor : algorithm_ ? algorithm_->minor : 0;
  return "1." + std::to_string(minor);
}

uint32_t Plugin::algorithm_flags() const {
  return algorithm_v2_ ? algorithm_v2_->flags : algorithm_ ? algorithm_->flags : 0;
}

uint32_t Plugin::algorithm_peers() const {
  if (algorithm_) return algorithm_->peers;
  if (!algorithm_v2_) return CHORUS_ALGO_PEERS_ALL;
  using T = chorus_algorithm_plugin_v2_t;
  if (algorithm_v2_->struct_size < offsetof(T, peers) + sizeof(algorithm_v2_->peers) ||
      algorithm_v2_->peers == 0)
    return CHORUS_ALGO_PEERS_ALL;
  return algorithm_v2_->peers;
}

bool Plugin::implements(int collective) const {
  if (collective < 0 || collective >= CHORUS_COLL_COUNT) return false;
  if (algorithm_v2_) return (algorithm_v2_->collectives >> collective) & 1u;
  if (!algorithm_) return false;
  // The op's slot is read only when the table is long enough to hold it: a
  // plugin built against an older minor ends before the newer entries.
  using T = chorus_algorithm_plugin_v1_t;
  static constexpr size_t kOffset[CHORUS_COLL_COUNT] = {
      offsetof(T, all_reduce), offsetof(T, all_gather), offsetof(T, reduce_scatter),
      offsetof(T, broadcast),  offsetof(T, barrier),    offsetof(T, reduce),
      offsetof(T, gather),     offsetof(T, scatter),    offsetof(T, all_to_all),
      offsetof(T, all_to_allv)};
  const size_t off = kOffset[collective];
  if (algorithm_->struct_size < off + sizeof(void*)) return false;
  void* op = nullptr;
  std::memcpy(&op, reinterpret_cast<const char*>(algorithm_) + off, sizeof(op));
  return op != nullptr;
}

std::string plugin_file_name(PluginKind kind, const std::string& name) {
  return std::string("libchorus-") + kind_word(kind) + "-" + name + ".so";
}

std::vector<std::string> plugin_search_path(const std::vector<std::string>& extra) {
  std::vector<std::string> path = extra;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_search_path), &info) && info.dli_fname) {
    std::string self = real_path(info.dli_fname);
    std::string dir = self.substr(0, self.rfind('/'));
    // libchorus.so lives in <libdir>; a statically linked tool in <prefix>/bin.
    for (const std::string& candidate :
         {dir + "/chorus", dir + "/../lib/chorus", dir + "/../" CHORUS_INSTALL_LIBDIR "/chorus"}) {
      std::string rp = real_path(candidate);
      bool seen = false;
      for (const auto& p : path) seen = seen || real_path(p) == rp;
      if (!seen && ::access(rp.c_str(), F_OK) == 0) path.push_back(rp);
    }
  }
  return path;
}

Result<std::shared_ptr<Plugin>> load_plugin(PluginKind kind, const std::string& name,
                                            const std::vector<std::string>& search_path) {
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else {
    for (const auto& dir : search_path)
      candidates.push_back(dir + "/" + plugin_file_name(kind, name));
  }
  std::string tried;
  std::lock_guard<std::mutex> lock(cache_mutex());
  for (const auto& path : candidates) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      tried += "\n  " + path + ": " + (errno == ENOENT ? "no such file" : std::strerror(errno));
      continue;
    }
    std::string key = real_path(path);
    if (auto it = cache().find(key); it != cache().end()) {
      if (auto existing = it->second.lock()) return existing;
    }
    std::shared_ptr<Plugin> shell(new Plugin());
    shell->kind_ = kind;
    auto loaded = open_file(kind, path, shell);
    if (loaded.is_ok()) {
      cache()[key] = *loaded;
      CHORUS_LOGF(CHORUS_LOG_DEBUG, log_rank(),
                  "loaded " << kind_word(kind) << " plugin '" << name << "' from " << path);
      return loaded;
    }
    // A file that exists but fails is the answer: say why, do not fall back silently.
    return Status(CHORUS_ERR_UNAVAILABLE, std::string(kind_word(kind)) + " '" + name +
                                              "' not loadable: " + path + ": " +
                                              loaded.status().message());
  }
  // Name what is installed, and the near one if the name looks misspelt.
  std::vector<std::string> installed =
      names_in_folders(search_path, std::string("libchorus-") + kind_word(kind) + "-", ".so");
  if (kind == PluginKind::kTransport) installed.insert(installed.begin(), "auto");
  return Status(CHORUS_ERR_UNAVAILABLE,
                std::string(kind_word(kind)) + " '" + name + "' not found (" +
                    plugin_file_name(kind, name) + ")" + did_you_mean(name, installed) +
                    "; installed " + kind_word(kind) + "s: " + join_names(installed) +
                    "; searched:" + tried +
                    "\nSet CHORUS_PLUGIN_PATH or plugin_path to the folder holding it, or check "
                    "the name (chorus-info lists the plugins found)");
}

std::vector<std::string> plugin_names(PluginKind kind,
                                      const std::vector<std::string>& search_path) {
  std::set<std::string> names;
  for (const auto& dir : search_path) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* ent = ::readdir(d))
      if (std::string name = name_in_file_name(kind, ent->d_name); !name.empty())
        names.insert(name);
    ::closedir(d);
  }
  return {names.begin(), names.end()};
}

std::vector<PluginListing> list_plugins(const std::vector<std::string>& search_path) {
  std::vector<PluginListing> out;
  std::map<std::string, bool> seen;
  for (const auto& dir : search_path) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (dirent* ent = ::readdir(d)) names.emplace_back(ent->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& file : names) {
      for (PluginKind kind : {PluginKind::kTransport, PluginKind::kAlgorithm}) {
        const std::string name = name_in_file_name(kind, file);
        if (name.empty()) continue;
        std::string path = dir + "/" + file;
        if (seen[real_path(path)]) continue;
        seen[real_path(path)] = true;
        PluginListing item{kind, name, path, false, true, false, {}, {}, {}};
        // A broken file is reported as such and never reaches dlopen.
        if (auto st = check_elf_file(path); !st.is_ok()) {
          item.broken = true;
          item.error = st.message();
          out.push_back(std::move(item));
          continue;
        }
        auto loaded = load_plugin(kind, path, {});
        if (loaded.is_ok()) {
          item.loaded = true;
          item.abi_version = (*loaded)->abi_version();
          const TransportInventory inv = describe_transport(**loaded);
          item.usable = inv.usable;
          if (inv.described) item.inventory = (inv.usable ? "" : "unusable here: ") + inv.text;
        } else {
          std::string msg = loaded.status().message();
          auto colon = msg.find(path + ": ");
          item.error = colon == std::string::npos ? msg : msg.substr(colon + path.size() + 2);
        }
        out.push_back(std::move(item));
      }
    }
  }
  return out;
}

const chorus_host_v1_t* plugin_host() {
  static const chorus_host_v1_t host = {sizeof(chorus_host_v1_t), 0, nullptr, &host_log};
  return &host;
}

}  // namespace chorus::core
