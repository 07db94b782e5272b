#include "ofi_memory.h"

#include "ofi.h"
#include "ofi_context.h"
#include "ofi_error.h"

namespace chorus::ofi {

fid_mr* register_region(Context& ctx, void* addr, std::size_t length) {
  fid_mr* mr = nullptr;
  // Without FI_MR_PROV_KEY the application picks the key, unique per domain.
  const std::uint64_t key = ctx.mr_policy().provider_key ? 0 : ctx.next_mr_key();
  int rc = fi_mr_reg(ctx.domain(), addr, length, FI_SEND | FI_RECV, 0, key, 0, &mr, nullptr);
  if (rc != 0) {
    throw Error(CHORUS_ERR_SYSTEM, ctx.provider() + ": fi_mr_reg of " + std::to_string(length) +
                                       " bytes: " + fi_error_text("fi_mr_reg", rc));
  }
  if (ctx.mr_policy().bind_endpoint) {
    // FI_MR_ENDPOINT: the region belongs to the endpoint and is enabled after binding.
    rc = fi_mr_bind(mr, &ctx.fi_ep()->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      fi_close(&mr->fid);
      throw Error(CHORUS_ERR_SYSTEM,
                  ctx.provider() + ": " + fi_error_text("fi_mr_bind/enable", rc));
    }
  }
  return mr;
}

MemoryRegion::MemoryRegion(Context& ctx, void* addr, std::size_t length)
    : addr_(static_cast<std::byte*>(addr)), length_(length) {
  if (length_ > 0) mr_ = register_region(ctx, addr, length);
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) fi_close(&mr_->fid);
}

bool MemoryRegion::covers(const void* buf, std::size_t length) const {
  if (length == 0) return true;
  const auto* p = static_cast<const std::byte*>(buf);
  return p >= addr_ && length <= length_ && static_cast<std::size_t>(p - addr_) <= length_ - length;
}

}  // namespace chorus::ofi
