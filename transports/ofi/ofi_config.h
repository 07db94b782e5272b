// Config: the `transport.ofi.*` keys, parsed and validated.
#pragma once

#include <chorus/types.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace chorus::ofi {

/// How a peer's death is noticed (docs/ofi.md, "Peer loss").
enum class Liveness {
  kAuto,    // pidfd for peers on this host, a watch socket for the others
  kPid,     // pidfd only (peers on other hosts are not watched)
  kSocket,  // a watch socket for every peer
  kOff,     // only what the provider reports, plus the close message
};

/// Settings of one context. Defaults are the documented ones (docs/ofi.md).
struct Config {
  /// fi_info::fabric_attr::prov_name to ask for, e.g. "tcp;ofi_rxm" or "shm".
  std::string provider = "tcp;ofi_rxm";
  /// fi_info::domain_attr::name to ask for; empty takes the provider's first.
  std::string domain;
  /// Source address handed to fi_getinfo (FI_SOURCE) for providers with IP
  /// addresses; empty uses the context's bind_address.
  std::string node;
  /// A network interface whose address is used as `node`.
  std::string interface;
  /// FI_* variables to set before libfabric initialises, with their origin.
  std::vector<std::pair<std::string, std::string>> fi_env;
  std::vector<std::string> fi_env_origin;
  /// Register buffers with the provider even when its mr_mode does not
  /// require it (then CHORUS_TP_CAP_NEEDS_REGISTRATION is advertised).
  bool always_register = false;
  Liveness liveness = Liveness::kAuto;
  /// Microseconds wait() busy-polls the completion queue before sleeping.
  int spin_us = 0;
  /// For providers without a wait object (shm): the longest sleep between
  /// two progress checks while idle, in microseconds.
  int poll_max_us = 1000;

  static constexpr int kMaxSpinUs = 1'000'000;

  /// Parses the keys below `transport.ofi.`. Throws Error(INVALID_ARGUMENT)
  /// naming the key, its origin and the valid keys or values.
  static Config parse(const chorus_kv_t* entries, std::size_t count);
};

const char* liveness_name(Liveness l);

}  // namespace chorus::ofi
