// UniqueFd: sole owner of one file descriptor. chorusrun uses the provider
// toolkit's (header-only, no link dependency): every pipe end has exactly one
// owner and none leaks into a later rank's fork.
#pragma once

#include <chorus/provider/unique_fd.hpp>

namespace chorus::run {

using UniqueFd = chorus::provider::UniqueFd;

}  // namespace chorus::run
