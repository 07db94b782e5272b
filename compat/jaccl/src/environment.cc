#include "environment.h"

#include <cstdlib>
#include <initializer_list>

namespace jaccl::detail {
namespace {

EnvValue first_set(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* value = std::getenv(name)) return {value, name};
  return {};
}

}  // namespace

JacclEnvironment read_environment() {
  JacclEnvironment env;
  env.rank = first_set({"JACCL_RANK", "MLX_RANK"});
  env.coordinator = first_set({"JACCL_COORDINATOR", "MLX_JACCL_COORDINATOR"});
  env.devices = first_set({"JACCL_IBV_DEVICES", "MLX_IBV_DEVICES"});
  env.ring = first_set({"JACCL_RING", "MLX_JACCL_RING"});
  return env;
}

}  // namespace jaccl::detail
