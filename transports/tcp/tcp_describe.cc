// describe_host (tcp_describe.h): the host inventory of the `describe` op.
#include "tcp_describe.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <fstream>

namespace chorus::tcp {

namespace {

std::string sysctl_text(const char* path) {
  std::ifstream in(path);
  std::string v;
  std::getline(in, v);
  return v.empty() ? "?" : v;
}

}  // namespace

std::string describe_host() {
  std::string out = "TCP over epoll; interfaces:";
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    bool any = false;
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = i->ifa_addr->sa_family;
      if (family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                    sizeof text);
      } else if (family == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, text,
                    sizeof text);
      } else {
        continue;
      }
      out += any ? ", " : " ";
      out += i->ifa_name;
      out += ' ';
      out += text;
      any = true;
    }
    ::freeifaddrs(list);
    if (!any) out += " none up";
  } else {
    out += " (getifaddrs failed)";
  }
  out += "; net.core.wmem_max=" + sysctl_text("/proc/sys/net/core/wmem_max");
  out += " rmem_max=" + sysctl_text("/proc/sys/net/core/rmem_max");
  return out;
}

}  // namespace chorus::tcp
