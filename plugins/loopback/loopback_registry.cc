// The loopback transport's process-wide state: the one lock and the
// registry that turns an address blob's id into an open endpoint.
#include "loopback.h"

#include <unordered_map>

namespace chorus::loopback {
namespace {

// Function-local statics: constructed on first use, so a context opened from
// another library's static initialiser still finds them.
std::unordered_map<std::uint64_t, chorus_tp_endpoint*>& registry() {
  static std::unordered_map<std::uint64_t, chorus_tp_endpoint*> endpoints;
  return endpoints;
}

}  // namespace

std::mutex& fabric_mutex() {
  static std::mutex m;
  return m;
}

std::uint64_t next_endpoint_id() {
  // Ids are never reused, so a blob of a closed endpoint can never reach a
  // newer one that happens to live at the same address.
  static std::uint64_t next = 1;
  return next++;
}

void register_endpoint(chorus_tp_endpoint* ep) { registry()[ep->id()] = ep; }

void unregister_endpoint(std::uint64_t id) { registry().erase(id); }

chorus_tp_endpoint* find_endpoint(std::uint64_t id) {
  const auto it = registry().find(id);
  return it == registry().end() ? nullptr : it->second;
}

std::size_t& open_contexts() {
  static std::size_t count = 0;
  return count;
}

}  // namespace chorus::loopback
