// Finds, dlopens and validates transport and algorithm plugins.
#pragma once

#include <chorus/algorithm.h>
#include <chorus/transport.h>

#include "core/status.h"

#include <memory>
#include <string>
#include <vector>

namespace chorus::core {

enum class PluginKind { kTransport, kAlgorithm };

/// A loaded, validated, initialised plugin. Calls `fini` and dlcloses when the
/// last reference goes away. Shared between communicators of one process.
class Plugin {
 public:
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  PluginKind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  /// ABI version the plugin was built for, "1.0" (or "2.0").
  std::string abi_version() const;

  const chorus_transport_plugin_v1_t* transport() const { return transport_; }
  /// The v1 table of a v1 algorithm plugin (nullptr for a v2 one).
  const chorus_algorithm_plugin_v1_t* algorithm() const { return algorithm_; }
  /// The v2 table of a v2 algorithm plugin (nullptr for a v1 one).
  const chorus_algorithm_plugin_v2_t* algorithm_v2() const { return algorithm_v2_; }
  /// Either table's CHORUS_ALGO_DETERMINISTIC_* flags.
  uint32_t algorithm_flags() const;
  /// Either table's chorus_algo_peers_t: the peers the algorithm posts to
  /// (a v2 table of minor 0, or one that says 0, is CHORUS_ALGO_PEERS_ALL).
  uint32_t algorithm_peers() const;
  /// True when this algorithm plugin implements `collective` (a v1 table long
  /// enough to hold a non-NULL op for it, or the bit in a v2 table's list).
  bool implements(int collective) const;

  Plugin() = default;

  // Set once by the loader before the plugin is shared; read-only afterwards.
  PluginKind kind_ = PluginKind::kTransport;
  std::string name_;
  std::string path_;
  void* handle_ = nullptr;
  const chorus_transport_plugin_v1_t* transport_ = nullptr;
  const chorus_algorithm_plugin_v1_t* algorithm_ = nullptr;
  const chorus_algorithm_plugin_v2_t* algorithm_v2_ = nullptr;
};

/// File name of a plugin: libchorus-transport-tcp.so.
std::string plugin_file_name(PluginKind kind, const std::string& name);

/// Folders searched, in order: `extra` (CHORUS_PLUGIN_PATH, then the config's
/// plugin_path), then the folder next to libchorus ("<libdir>/chorus", which
/// is also the build tree's lib/chorus).
std::vector<std::string> plugin_search_path(const std::vector<std::string>& extra);

/// Loads the plugin `name` (a bare name searched along `search_path`, or a
/// path containing '/'), validates its table and calls init. Loaded plugins
/// are cached by path. Errors name every path tried and why each failed.
Result<std::shared_ptr<Plugin>> load_plugin(PluginKind kind, const std::string& name,
                                            const std::vector<std::string>& search_path);

/// One plugin found on disk, for chorus-info: loaded or the reason it was not.
struct PluginListing {
  PluginKind kind;
  std::string name;
  std::string path;
  bool loaded = false;
  /// False when a loaded transport's describe op finds nothing usable here.
  bool usable = true;
  /// The file itself is damaged or foreign (core/elf_check.h): never dlopened.
  bool broken = false;
  std::string abi_version;
  std::string error;
  /// A transport's own inventory (devices, providers) from its optional describe op.
  std::string inventory;
};
std::vector<PluginListing> list_plugins(const std::vector<std::string>& search_path);

/// The names of the plugins of `kind` whose files (libchorus-<kind>-<name>.so)
/// are in the folders of `search_path`, sorted, each once. Reads folders
/// only: nothing is opened or loaded.
std::vector<std::string> plugin_names(PluginKind kind, const std::vector<std::string>& search_path);

/// The host callback table handed to every plugin's init.
const chorus_host_v1_t* plugin_host();

}  // namespace chorus::core
