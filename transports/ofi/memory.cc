#include "memory.h"

#include "context.h"
#include "endpoint.h"
#include "error.h"

#include <algorithm>

namespace chorus::ofi {

fid_mr* register_region(Context& ctx, void* addr, std::size_t length, fid_ep* bind_to) {
  fid_mr* mr = nullptr;
  // Without FI_MR_PROV_KEY the application picks the key, unique per domain.
  const std::uint64_t key = ctx.mr_policy().provider_key ? 0 : ctx.next_mr_key();
  int rc = fi_mr_reg(ctx.domain(), addr, length, FI_SEND | FI_RECV, 0, key, 0, &mr, nullptr);
  if (rc != 0) {
    throw Error(CHORUS_ERR_SYSTEM, ctx.provider() + ": " +
                                       fi_error_text(("fi_mr_reg of " + std::to_string(length) +
                                                      " bytes")
                                                         .c_str(),
                                                     rc));
  }
  if (bind_to != nullptr) {
    // FI_MR_ENDPOINT: the region belongs to one endpoint and is enabled after binding.
    rc = fi_mr_bind(mr, &bind_to->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      fi_close(&mr->fid);
      throw Error(CHORUS_ERR_SYSTEM, ctx.provider() + ": " + fi_error_text("fi_mr_bind/enable", rc));
    }
  }
  return mr;
}

MemoryRegion::MemoryRegion(Context& ctx, void* addr, std::size_t length)
    : ctx_(ctx), addr_(static_cast<std::byte*>(addr)), length_(length) {
  if (length_ > 0 && !ctx_.mr_policy().per_endpoint) {
    mr_ = register_region(ctx_, addr, length, nullptr);
  }
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) fi_close(&mr_->fid);
  for (auto& [ep, mr] : per_ep_) fi_close(&mr->fid);
}

bool MemoryRegion::covers(const void* buf, std::size_t length) const {
  if (length == 0) return true;
  const auto* p = static_cast<const std::byte*>(buf);
  return p >= addr_ && length <= length_ && p - addr_ <= static_cast<std::ptrdiff_t>(length_ - length);
}

void* MemoryRegion::desc(Endpoint& ep) {
  if (length_ == 0) return nullptr;
  if (!ctx_.mr_policy().per_endpoint) return fi_mr_desc(mr_);
  for (auto& [owner, mr] : per_ep_) {
    if (owner == &ep) return fi_mr_desc(mr);
  }
  fid_mr* mr = register_region(ctx_, addr_, length_, ep.fi());
  per_ep_.emplace_back(&ep, mr);
  return fi_mr_desc(mr);
}

void MemoryRegion::forget(const Endpoint& ep) {
  for (auto it = per_ep_.begin(); it != per_ep_.end();) {
    if (it->first == &ep) {
      fi_close(&it->second->fid);
      it = per_ep_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace chorus::ofi
