// LocalEndpoints: the fi endpoints open in this process, by name.
//
// Two contexts of one process can be peers (tests do this, and so can a host
// that runs two communicators). shm then maps the peer's region straight from
// the peer's endpoint, and a send to it after the peer closed its fi
// endpoint touches freed memory (libfabric 1.17 crashes in the peer's lock).
// An endpoint whose peer lives in this process therefore checks here, under
// the same lock that closing takes, that the peer is still open before it
// hands the provider anything for it.
#pragma once

#include <cstddef>
#include <mutex>
#include <span>

namespace chorus::ofi::local_endpoints {

/// Held across a check and the provider call it guards, and across fi_close.
std::mutex& mutex();
/// Callers hold mutex().
void add(std::span<const std::byte> name);
void remove(std::span<const std::byte> name);
bool open(std::span<const std::byte> name);

}  // namespace chorus::ofi::local_endpoints
