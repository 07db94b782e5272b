#include "tools/chorusrun/output_stream.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace chorus::run {

void OutputStream::write(std::string_view text) {
  while (!broken_ && !text.empty()) {
    const ssize_t n = ::write(fd_, text.data(), text.size());
    if (n >= 0) {
      text.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // The descriptor was handed to us in non-blocking mode (it is shared
      // with whoever started chorusrun): wait for room instead of spinning.
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      broken_ = true;
    }
  }
}

}  // namespace chorus::run
