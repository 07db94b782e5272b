// The non-template halves of the ops-table helpers: get_caps's struct_size
// handling and describe's text copy.
#include <chorus/provider/plugin.hpp>

#include <algorithm>
#include <cstring>

namespace chorus::provider {

int copy_caps(const chorus_tp_caps_t& caps, chorus_tp_caps_t* caps_out) {
  std::size_t size = caps_out->struct_size == 0 ? sizeof caps : caps_out->struct_size;
  size = std::min(size, sizeof caps);
  if (size < sizeof caps.struct_size) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: struct_size too small");
  }
  std::memcpy(caps_out, &caps, size);
  caps_out->struct_size = size;
  return CHORUS_OK;
}

void copy_text(std::string_view text, char* buf, std::size_t len) {
  const std::size_t n = std::min(text.size(), len - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

}  // namespace chorus::provider
