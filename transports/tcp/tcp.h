// The TCP transport's private names: the provider toolkit's pieces
// (chorus/provider/), used unqualified inside chorus::tcp.
#pragma once

#include <chorus/provider/completion_queue.hpp>
#include <chorus/provider/deadline.hpp>
#include <chorus/provider/error.hpp>
#include <chorus/provider/log.hpp>
#include <chorus/provider/unique_fd.hpp>

namespace chorus::tcp {
using namespace chorus::provider;
}  // namespace chorus::tcp
