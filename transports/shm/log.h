// Log: the transport's line into the host's logger.
#pragma once

#include <chorus/types.h>

#include <string_view>

namespace chorus::shm {

/// Installs the host table given to init(); NULL (or a table too short to
/// hold `log`) silences logging.
void set_log_host(const chorus_host_v1_t* host);

/// Emits "shm: <message>" at `level` through the host. Thread-safe (the
/// host's logger is), never throws.
void log(int level, std::string_view message) noexcept;

}  // namespace chorus::shm
