// What a communicator and its lanes (collectives.lanes) share: the first
// failure of the family, the count of collectives running across the lanes,
// and, with collectives.driver = "shared", the one thread that drives them
// (core/lane_driver.h). communicator_lanes.cc owns the rules.
#pragma once

#include "core/request.h"
#include "core/status.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace chorus::core {

class Communicator;
class LaneDriver;

struct LaneFamily {
  LaneFamily();
  ~LaneFamily();
  std::mutex mu;
  std::vector<Communicator*> members;  // [lane]; emptied when the family is taken apart
  bool failed = false;
  Status status;                       // the first failure
  int lane = -1;                       // the lane it happened on
  uint64_t order = Request::kNoOrder;  // the failed call's place in the issue order
  // Collectives running on this rank across the lanes, now and at most.
  std::atomic<uint64_t> running{0}, running_max{0};
  // Null with collectives.driver = "threads": each lane's own executor runs
  // its collectives. Set before any call is issued, reset after the last.
  std::unique_ptr<LaneDriver> driver;
};

}  // namespace chorus::core
