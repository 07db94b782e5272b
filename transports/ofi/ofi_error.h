// fi_error_text: libfabric's error codes as text for the last-error message.
#pragma once

#include <string>

namespace chorus::ofi {

/// "fi_xxx failed: <fi_strerror> (<code>)" for a negative libfabric return.
std::string fi_error_text(const char* call, long rc);

}  // namespace chorus::ofi
