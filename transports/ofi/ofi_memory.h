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
  bool required = false;       // FI_MR_LOCAL, or transport.ofi.registration = always
  bool bind_endpoint = false;  // FI_MR_ENDPOINT: bind each region to the fi endpoint
  bool provider_key = false;   // FI_MR_PROV_KEY: the provider picks the key
};

/// One registration of a caller's buffer (mem_register).
class MemoryRegion {
 public:
  /// Throws Error.
  MemoryRegion(Context& ctx, void* addr, std::size_t length);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  bool covers(const void* buf, std::size_t length) const;
  /// The descriptor to pass with a post inside the region.
  void* desc() const { return mr_ != nullptr ? fi_mr_desc(mr_) : nullptr; }

 private:
  std::byte* addr_;
  std::size_t length_;
  fid_mr* mr_ = nullptr;
};

/// Registers [addr, addr+length) for send and receive, following the
/// context's MrPolicy (key choice, FI_MR_ENDPOINT binding). Throws Error.
fid_mr* register_region(Context& ctx, void* addr, std::size_t length);

}  // namespace chorus::ofi

/// The ABI's opaque registration handle is the MemoryRegion itself.
struct chorus_tp_mr final : chorus::ofi::MemoryRegion {
  using MemoryRegion::MemoryRegion;
};
