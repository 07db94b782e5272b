#include "error.h"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <system_error>
#include <utility>

namespace chorus::ofi {

namespace {
thread_local std::string t_last_error;
}  // namespace

int set_last_error(int status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

const char* last_error_text() { return t_last_error.empty() ? "no error" : t_last_error.c_str(); }

std::string errno_text(int err) { return std::error_code(err, std::system_category()).message(); }

std::string fi_error_text(const char* call, long rc) {
  const int code = static_cast<int>(std::labs(rc));
  return std::string(call) + " failed: " + fi_strerror(code) + " (" + std::to_string(-code) + ")";
}

}  // namespace chorus::ofi
