// Provider: choosing a libfabric provider (fi_getinfo) for a context,
// explaining why one does not fit, and listing the usable ones.
#pragma once

#include "ofi_config.h"

#include <rdma/fabric.h>

#include <memory>
#include <string>

namespace chorus::ofi {

/// The libfabric API version this plugin was built against and asks for.
inline constexpr std::uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

struct FiInfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

/// Sets the config's FI_* pass-through variables, then the transport's
/// defaults for the configured provider that neither the environment nor the
/// config set (verbs;ofi_rxm: FI_OFI_RXM_USE_SRX=1 and FI_UNIVERSE_SIZE =
/// max(`job_size`, 64); see docs/ofi.md, "verbs;ofi_rxm"). Thread-safe
/// against other contexts of this plugin, not against foreign getenv callers;
/// logs what it did. Call before fi_getinfo.
void apply_fi_env(const Config& cfg, int job_size);

/// True for providers layered over (or being) the verbs provider.
bool is_verbs_provider(const std::string& name);

/// The fi_info a context is built from: an RDM endpoint with tagged
/// messages, send-after-send ordering and the mode/mr_mode bits this plugin
/// handles, from the configured provider (and domain), bound to `bind_address`
/// for providers whose addresses are IP sockaddrs. Throws Error: UNAVAILABLE
/// when the provider is missing or lacks something (the message says what and
/// lists the providers that would work), INVALID_ARGUMENT for a bad
/// node/interface.
FiInfoPtr select_provider(const Config& cfg, const std::string& bind_address);

/// "libfabric 1.17.0; providers: tcp;ofi_rxm 117.0 (domains eth0, lo), shm ...":
/// every provider that offers what select_provider asks for. False (with the
/// reason in `out`) when there is none.
bool describe_providers(std::string& out);

/// "tcp;ofi_rxm 117.0" for an fi_info.
std::string provider_label(const fi_info& info);

/// True when the provider's addresses are IP socket addresses (tcp, verbs
/// over rdma_cm, ...), so a bind address means something to it.
bool uses_ip_addresses(const fi_info& info);

}  // namespace chorus::ofi
