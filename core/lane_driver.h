// The shared lane driver (collectives.driver = "shared"): one thread per
// lane family runs the collectives of every lane, each on a fiber of its
// own. A fiber runs its lane's request exactly as a lane's executor thread
// would (run_request: the deadline, signatures, checks and failure rules are
// unchanged); where that code would sleep in the transport's wait it gives
// the thread back to the driver instead, which resumes the next fiber. The
// driver sleeps in a transport only after a round in which no fiber moved,
// so the calls in flight share one thread's wake-ups instead of each lane's
// thread waking on its own. Only the driver's thread touches the fibers;
// wake() and stop() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus::core {

class Communicator;
struct LaneFiber;

class LaneDriver {
 public:
  /// `lanes`: the family's members, lane 0 first; they outlive the driver
  /// (close_lanes stops it before any lane goes). Starts the thread.
  explicit LaneDriver(std::vector<Communicator*> lanes);
  /// stop() if it was not called.
  ~LaneDriver();
  LaneDriver(const LaneDriver&) = delete;
  LaneDriver& operator=(const LaneDriver&) = delete;

  /// Something may be queued for the driver: wakes it if it sleeps. Any
  /// thread; never blocks for long (takes the driver's mutex briefly).
  void wake();
  /// Aborts the calls it runs (as finalizing a lane with a call running
  /// does), lets them finish, and joins the thread. Queued calls stay in
  /// their lanes' queues, for the lanes' destructors to fail.
  void stop();

  /// On a fiber: true (the caller is a lane's call run by the driver).
  static bool on_fiber();
  /// From a fiber at a point where it would wait in the transport: hands
  /// the thread back to the driver and returns when resumed. Holds no lock.
  static void yield_idle();
  /// From a fiber that moved (took completions): noted for the round.
  static void note_moved();

 private:
  void main();
  // Takes the next queued collective of lane k if the lane's stream is free.
  bool take(size_t k);
  void finish(size_t k);
  void sleep_idle();
  // A lane's transport: interrupt its wait; sleep in it up to `ms`.
  static void interrupt(Communicator& c);
  static void wait_in(Communicator& c, int ms);
  // The body of every fiber (never returns).
  static void fiber_main();

  std::vector<Communicator*> lanes_;
  std::vector<std::unique_ptr<LaneFiber>> fibers_;  // [lane]
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool kicked_ = false;  // wake() since the driver last looked at the queues
  // The lane whose transport the driver sleeps in (-1: none), so that
  // wake() can interrupt it.
  int sleeping_in_ = -1;
  std::thread thread_;
};

}  // namespace chorus::core
