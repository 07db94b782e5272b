#include "tcp_socket_options.h"

#include "tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>

namespace chorus::tcp {

namespace {

std::uint64_t read_sysctl(const char* path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  if (!(in >> v)) return 0;  // unknown: treat as "no limit we know of"
  return v;
}

void set_buffer(int fd, int option, std::uint64_t bytes, const char* sysctl, const char* name) {
  if (bytes == 0) return;
  static const std::uint64_t wmem_max = read_sysctl("/proc/sys/net/core/wmem_max");
  static const std::uint64_t rmem_max = read_sysctl("/proc/sys/net/core/rmem_max");
  const std::uint64_t limit = option == SO_SNDBUF ? wmem_max : rmem_max;
  if (limit != 0 && bytes > limit) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log(CHORUS_LOG_INFO, std::string("transport.tcp.") + name + " = " + std::to_string(bytes) +
                               " exceeds " + sysctl + " = " + std::to_string(limit) +
                               "; leaving the kernel's buffer autotuning on instead");
    }
    return;
  }
  const int value = static_cast<int>(bytes);
  if (::setsockopt(fd, SOL_SOCKET, option, &value, sizeof value) != 0) {
    log(CHORUS_LOG_WARN, std::string("setsockopt(") + name + ") failed: " + errno_text(errno));
  }
}

}  // namespace

void apply_buffer_sizes(int fd, const Config& cfg) {
  set_buffer(fd, SO_SNDBUF, cfg.sndbuf, "net.core.wmem_max", "sndbuf");
  set_buffer(fd, SO_RCVBUF, cfg.rcvbuf, "net.core.rmem_max", "rcvbuf");
}

void prepare_data_socket(int fd, const Config& cfg) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "cannot make a data socket non-blocking: " + errno_text(errno));
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const int nodelay = cfg.nodelay ? 1 : 0;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "cannot set TCP_NODELAY: " + errno_text(errno));
  }
}

}  // namespace chorus::tcp
