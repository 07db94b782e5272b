// The Work of one torch call and what completes it: Issue (the request a
// call issued, the tensors it keeps alive and the copies that follow it),
// ChorusWork (the c10d::Work and its Future), and TaskPool (the threads that
// complete futures and wait for tagged point-to-point requests). Definitions
// in chorus_work.cc.
#pragma once

#include <chorus/chorus.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus_torch {

/// What one torch call hands to the completion thread: the one Chorus request
/// it issued, tensors to keep alive until it finishes, and the steps that run
/// after it succeeded (copies into the caller's tensors).
struct Issue {
  chorus_request_t* req = nullptr;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> post;
  /// A tagged send or receive: completes out of issue order.
  bool tagged = false;
  /// A tagged receive: the element count of its tensor, which the message
  /// must fill (a shorter one is an error: c10d cannot report a count).
  int64_t recv_count = -1;
};

/// Runs future completions (and with them the callbacks attached through
/// Future::then) off the completion thread, and the waits for tagged
/// point-to-point requests. Both may block for as long as another operation
/// takes (PowerSGD's hook waits inside its callbacks; a receive waits for its
/// sender), so when every pool thread is busy a new one is started instead of
/// queueing behind it: the pool grows to the number of tagged operations in
/// flight plus the nesting depth of blocking callbacks, and its threads are
/// reused after that.
class TaskPool {
 public:
  ~TaskPool();

  void post(std::function<void()> fn);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

/// The Work of one torch call. Completed by the group's completion thread:
/// isCompleted/isSuccess/wait report it, and getFuture() completes with the
/// output tensors (a list, or a list of lists for the gather-like ops, as
/// gloo's) or with the error.
class ChorusWork : public c10d::Work {
 public:
  /// `source` of a Work that is not a receive.
  static constexpr int kNotRecv = -2;

  /// `source`: the peer of a receive, CHORUS_ANY_SOURCE for recvAnysource
  /// (the sender is read from the request once it completes), else kNotRecv.
  ChorusWork(c10d::OpType type, const char* name, Issue is, c10::IValue value,
             int source = kNotRecv);

  ~ChorusWork() override;

  bool wait(std::chrono::milliseconds timeout) override;

  int sourceRank() const override;

  std::vector<at::Tensor> result() override;

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Completion thread: waits for the request, runs the post steps, and
  /// returns the error if any (nullptr on success).
  std::exception_ptr run();

  /// Pool thread: completes the Work, then its future (whose callbacks run
  /// here), so a completed future implies isCompleted(). (gloo does it the
  /// other way round, which lets isCompleted() lag behind the future.)
  void complete(std::exception_ptr eptr);

 private:
  /// A completed tagged receive: records its sender, and refuses a message
  /// shorter than the tensor (its tail would keep stale values unnoticed).
  std::exception_ptr received();

  const char* name_;
  Issue is_;
  c10::IValue value_;
  // Written by the thread that completes the Work, before it is marked
  // complete; read by the caller after wait().
  std::atomic<int> source_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace chorus_torch
