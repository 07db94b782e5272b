// MemoryRegion: a buffer registered with the provider, following its
// mr_mode bits (docs/ofi.md, "Memory registration").
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace chorus::ofi {

class Context;
class Endpoint;

/// What the provider's mr_mode asks of registrations in this context.
struct MrPolicy {
  bool required = false;   // FI_MR_LOCAL, or transport.ofi.registration = always
  bool per_endpoint = false;  // FI_MR_ENDPOINT: bind every region to each fi endpoint
  bool provider_key = false;  // FI_MR_PROV_KEY: the provider picks the key
};

/// One registration. With FI_MR_ENDPOINT the provider needs a region per fi
/// endpoint; they are made on first use by a post on that endpoint.
class MemoryRegion {
 public:
  MemoryRegion(Context& ctx, void* addr, std::size_t length);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  bool covers(const void* buf, std::size_t length) const;
  /// The descriptor to pass with a post on `ep`; registers for `ep` first
  /// when the domain wants per-endpoint regions. Throws Error.
  void* desc(Endpoint& ep);
  /// Closes the regions bound to `ep` (it is being closed).
  void forget(const Endpoint& ep);

 private:
  Context& ctx_;
  std::byte* addr_;
  std::size_t length_;
  fid_mr* mr_ = nullptr;  // domain-wide region (no FI_MR_ENDPOINT)
  std::vector<std::pair<const Endpoint*, fid_mr*>> per_ep_;
};

/// Registers [addr, addr+length) for send and receive. Throws Error.
fid_mr* register_region(Context& ctx, void* addr, std::size_t length, fid_ep* bind_to);

}  // namespace chorus::ofi

/// The ABI's opaque registration handle is the MemoryRegion itself.
struct chorus_tp_mr final : chorus::ofi::MemoryRegion {
  using MemoryRegion::MemoryRegion;
};
