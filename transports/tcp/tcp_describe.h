// describe_host: the inventory the optional `describe` op reports.
#pragma once

#include <string>

namespace chorus::tcp {

/// One line for chorus-info: the interfaces a listener could bind to (up,
/// with an address) and the kernel's socket-buffer limits that bound
/// transport.tcp.sndbuf/rcvbuf. Throws only std::bad_alloc.
std::string describe_host();

}  // namespace chorus::tcp
