// Request: one operation issued on a communicator, shared between its
// stream and the host's handle (core/request_queue.cc implements it).
#pragma once

#include "core/status.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace chorus::core {

class Communicator;

/// One operation issued on a communicator: queued, then run in issue order by
/// whichever thread executes the communicator's stream (the caller of a
/// blocking call when nothing is ahead of it, else the progress thread).
/// Shared between the queue and the host's handle, so either may drop it
/// first. Thread-safe.
class Request : public std::enable_shared_from_this<Request> {
 public:
  enum class State { kQueued, kRunning, kDone };
  /// A body that returns this status code has handed its request to the
  /// tagged point-to-point engine, which finishes it later.
  static constexpr int kDeferred = 1;

  /// `order`: the collective's place in the issue order of its lane family
  /// (Communicator::lane_for_call); kNoOrder for anything else.
  static constexpr uint64_t kNoOrder = UINT64_MAX;

  Request(uint64_t seq, std::string what, std::function<Status(Communicator&)> body,
          uint64_t order = kNoOrder)
      : seq_(seq), order_(order), what_(std::move(what)), body_(std::move(body)) {}

  /// Makes a finished request new again for another call, keeping its
  /// allocation. Only for a request whose one reference the caller holds
  /// (no other thread can reach it), so nothing else reads it meanwhile.
  void reuse(uint64_t seq, const char* what, std::function<Status(Communicator&)> body,
             uint64_t order);

  /// Blocks until done or `timeout_ms` passes (< 0: no limit). True when done.
  bool wait_for(int timeout_ms);
  /// Never blocks.
  bool done() const;
  State state() const;
  /// The final status; only meaningful once done().
  Status status() const;
  uint64_t seq() const { return seq_; }
  uint64_t order() const { return order_; }
  const std::string& what() const { return what_; }
  /// A completed tagged receive: what it got (source, tag, elements). False
  /// for any other request or before it completed successfully.
  bool p2p_status(int& source, int& tag, size_t& count) const;

  // Grouped calls (core/api_group.cc). A call issued inside
  // chorus_group_start/end gets a stand-in request at once; at group_end
  // the call (alone, or fused with others) runs as another request, the
  // leader, and the stand-in follows it: it completes with the leader's
  // status, p2p status included, when the leader does.

  /// A stand-in for a call of a group that has not ended yet.
  static std::shared_ptr<Request> make_grouped(const char* what);
  /// True for a stand-in from make_grouped.
  bool grouped() const { return grouped_; }
  /// Makes `follower` complete with this request's outcome (at once when
  /// this one is done already). Any thread.
  void lead(std::shared_ptr<Request> follower);
  /// Records the leader of a stand-in and the communicator that runs it.
  void set_leader(Communicator* comm, std::shared_ptr<Request> leader);
  /// A stand-in's leader and its communicator; false while the group has
  /// not ended. The communicator may only be used while the leader is not done.
  bool leader(Communicator*& comm, std::shared_ptr<Request>& leader) const;
  /// Completes a stand-in whose call never ran (its communicator was
  /// finalized before group_end).
  void finish_unrun(Status st) { finish(std::move(st)); }
  /// Completes `follower` with this (done) request's status and p2p status.
  void pass_outcome(Request& follower) const;

 private:
  friend class Communicator;
  void set_running();
  void finish(Status st);
  /// finish() of a tagged receive, recording what it got.
  void finish_recv(Status st, int source, int tag, size_t count);

  // Fixed while anyone but the creator can reach the request (reuse()).
  uint64_t seq_;
  uint64_t order_;
  std::string what_;
  std::function<Status(Communicator&)> body_;  // cleared once run, releasing captures
  mutable std::mutex mu_;
  std::condition_variable cv_;
  /// Written under mu_ only; read without it where a stale kQueued or
  /// kRunning is harmless (the caller then takes mu_). Once kDone (a
  /// release store after status_), status_ never changes again.
  std::atomic<State> state_{State::kQueued};
  Status status_;
  bool has_p2p_ = false;
  int p2p_source_ = -1, p2p_tag_ = -1;
  size_t p2p_count_ = 0;
  // Grouped calls: set under mu_ (lead, set_leader); followers_ is handed
  // over and cleared by finish().
  bool grouped_ = false;
  std::vector<std::shared_ptr<Request>> followers_;
  Communicator* leader_comm_ = nullptr;
  std::shared_ptr<Request> leader_;
};

}  // namespace chorus::core
