// Log: the verbs transport's line into the host's logger.
#pragma once

#include <chorus/types.h>

#include <string_view>

namespace chorus::verbs {

/// Installs the host table given to init(); NULL (or a table without `log`)
/// silences logging. Called once before any other thread exists.
void set_log_host(const chorus_host_v1_t* host);

/// Emits "verbs: <message>" at `level` through the host. Thread-safe (the host's
/// logger is), never throws.
void log(int level, std::string_view message) noexcept;

}  // namespace chorus::verbs
