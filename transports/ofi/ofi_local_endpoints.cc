#include "ofi_local_endpoints.h"

#include <set>
#include <vector>

namespace chorus::ofi::local_endpoints {

namespace {
std::set<std::vector<std::byte>>& names() {
  static std::set<std::vector<std::byte>> set;
  return set;
}
}  // namespace

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

void add(std::span<const std::byte> name) { names().emplace(name.begin(), name.end()); }

void remove(std::span<const std::byte> name) {
  names().erase(std::vector<std::byte>(name.begin(), name.end()));
}

bool open(std::span<const std::byte> name) {
  return names().count(std::vector<std::byte>(name.begin(), name.end())) > 0;
}

}  // namespace chorus::ofi::local_endpoints
