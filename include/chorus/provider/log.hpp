// chorus::provider logging: a plugin's line into the host's logger.
// Part of the provider toolkit.
#pragma once

#include <chorus/types.h>

#include <string_view>

namespace chorus::provider {

/// Installs the host table given to init() and the name every line starts
/// with (a string literal: it is kept, not copied). NULL (or a table too
/// short to hold `log`) silences logging. Called from init/fini only.
void set_log_host(const chorus_host_v1_t* host, const char* name);

/// Emits "<name>: <message>" at `level` through the host. Thread-safe (the
/// host's logger is), never throws: a line that cannot be built is dropped.
void log(int level, std::string_view message) noexcept;

}  // namespace chorus::provider
