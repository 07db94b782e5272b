// Whether a transport can be used on this machine, without joining a job:
// the answer behind chorus_transport_probe, jaccl::is_available and
// chorus-info's verdicts.
#pragma once

#include "core/config.h"
#include "core/plugin_loader.h"
#include "core/status.h"

#include <string>

namespace chorus::core {

/// A transport's inventory from its optional describe op (ABI minor 1).
struct TransportInventory {
  /// The plugin has the op and it answered.
  bool described = false;
  /// False only when describe returned UNAVAILABLE (nothing usable here).
  bool usable = true;
  /// Its text: the inventory, or why nothing is usable.
  std::string text;
};

/// Calls `plugin`'s describe op when its table has one. Blocks for as long
/// as the op does (it needs no context; libfabric and verbs query devices).
TransportInventory describe_transport(const Plugin& plugin);

/// Whether transport `name` ("auto": its fabric, and its local sub-transport
/// when transport.auto.local names one) loads from
/// `cfg`'s plugin path and, where it has a describe op, finds something
/// usable here. OK, or UNAVAILABLE naming the transport and the reason.
/// Opens no context and no connection; the plugins stay loaded only while
/// another holder (a communicator) keeps them.
Status probe_transport(const Config& cfg, const std::string& name);

}  // namespace chorus::core
