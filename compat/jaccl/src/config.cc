#include <jaccl/jaccl.h>

#include "device_file.h"
#include "environment.h"

#include <charconv>
#include <cstring>
#include <stdexcept>

namespace jaccl {

Config::Config() : rank_(0), size_(0), prefer_ring_(false) {}

Config& Config::set_rank(int rank) {
  rank_ = rank;
  return *this;
}

Config& Config::set_rank(const char* rank_str) {
  if (!rank_str) throw std::invalid_argument("[jaccl] rank: NULL string");
  const char* end = rank_str + std::strlen(rank_str);
  int rank = -1;
  auto [ptr, ec] = std::from_chars(rank_str, end, rank);
  if (ec != std::errc() || ptr != end || ptr == rank_str || rank < 0)
    throw std::invalid_argument(std::string("[jaccl] rank '") + rank_str +
                                "' is not a non-negative integer");
  return set_rank(rank);
}

Config& Config::set_coordinator(std::string coordinator) {
  coordinator_ = std::move(coordinator);
  return *this;
}

Config& Config::set_coordinator(const char* coordinator) {
  return set_coordinator(std::string(coordinator ? coordinator : ""));
}

Config& Config::set_devices(std::vector<std::vector<std::vector<std::string>>> devices) {
  const size_t n = devices.size();
  for (size_t r = 0; r < n; ++r)
    if (devices[r].size() != n)
      throw std::invalid_argument(
          "[jaccl] the device matrix must be square (one entry per rank "
          "in every row) but it has " +
          std::to_string(n) + " rows and row " + std::to_string(r) + " has " +
          std::to_string(devices[r].size()) + " entries");
  devices_ = std::move(devices);
  size_ = int(n);
  return *this;
}

Config& Config::set_devices_from_file(const char* dev_file) {
  return set_devices(detail::read_device_file(dev_file));
}

Config& Config::prefer_ring(bool prefer) {
  prefer_ring_ = prefer;
  return *this;
}

Config& Config::set_all_gather(AllGatherFn agf) {
  all_gather_fn_ = std::move(agf);
  return *this;
}

Config& Config::set_all_gather_factory(std::function<AllGatherFn(int, int)> factory) {
  all_gather_factory_ = std::move(factory);
  return *this;
}

bool Config::is_valid_mesh() const {
  if (size_ < 2) return false;
  for (int i = 0; i < size_; ++i)
    for (int j = 0; j < size_; ++j)
      if ((i == j) != devices_[i][j].empty()) return false;
  return true;
}

bool Config::is_valid_ring() const {
  if (size_ < 2) return false;
  // Every rank reaches both neighbours over the same number of wires; links
  // to other ranks may exist (a mesh is also a ring) and are not used.
  const size_t wires = devices_[0][1].size();
  if (wires == 0) return false;
  for (int r = 0; r < size_; ++r) {
    const int left = (r + size_ - 1) % size_;
    const int right = (r + 1) % size_;
    if (devices_[r][left].size() != wires || devices_[r][right].size() != wires) return false;
  }
  return true;
}

bool Config::is_valid() const {
  return rank_ >= 0 && rank_ < size_ && (is_valid_mesh() || is_valid_ring());
}

Config Config::from_env() {
  const detail::JacclEnvironment env = detail::read_environment();
  Config cfg;
  if (env.rank) {
    try {
      cfg.set_rank(env.rank.value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) + " (from " + env.rank.name + ")");
    }
  }
  if (env.coordinator) cfg.set_coordinator(env.coordinator.value);
  if (env.devices) cfg.set_devices_from_file(env.devices.value);
  cfg.prefer_ring(bool(env.ring));
  return cfg;
}

}  // namespace jaccl
