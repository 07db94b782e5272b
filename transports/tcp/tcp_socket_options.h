// Socket options shared by the listener, the connector and data sockets.
#pragma once

#include "tcp_config.h"

namespace chorus::tcp {

/// SO_SNDBUF/SO_RCVBUF from the config. A size above the kernel's
/// net.core.{w,r}mem_max is not set at all (Linux would clamp it and switch
/// off autotuning, which is worse than leaving autotuning on); logged once.
void apply_buffer_sizes(int fd, const Config& cfg);

/// Makes a connected data socket ready for the progress engine:
/// O_NONBLOCK, O_CLOEXEC, TCP_NODELAY as configured. Throws Error(SYSTEM).
void prepare_data_socket(int fd, const Config& cfg);

}  // namespace chorus::tcp
