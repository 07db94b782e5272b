#include "ofi_error.h"

#include <rdma/fi_errno.h>

#include <cstdlib>

namespace chorus::ofi {

std::string fi_error_text(const char* call, long rc) {
  const int code = static_cast<int>(std::labs(rc));
  return std::string(call) + " failed: " + fi_strerror(code) + " (" + std::to_string(-code) + ")";
}

}  // namespace chorus::ofi
