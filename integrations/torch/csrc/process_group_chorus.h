// ProcessGroupChorus: the c10d ProcessGroup backed by a Chorus communicator
// (PyTorch 1.13, CPU tensors). Every torch call issues one Chorus
// non-blocking request and returns at once. Collectives run in issue order
// on the communicator's progress thread, which is also the order torch
// issues them on every rank; a per-group completion thread waits for them in
// that same order, finishes each Work (copies into non-contiguous or list
// outputs) and hands the completion of its Future to a TaskPool. send, recv
// and recvAnysource are Chorus's tagged point-to-point, which completes in
// whatever order the peers allow: each of those is waited for on a pool
// thread instead. Construction, completion and the Python module are in
// process_group_chorus.cc, the collectives in process_group_collectives.cc,
// point-to-point in process_group_p2p.cc.
#pragma once

#include "chorus_work.h"

#include <chorus/chorus.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus_torch {

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);

  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  chorus_comm_t* comm() const { return comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override;

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override;

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) override;

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override;

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override;

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override;

  // Point-to-point uses the library's tagged calls with the c10d tag: sends
  // and receives match on (source, tag) like MPI's, in any posting order on
  // either side, and progress alongside the collectives.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  /// c10d tags are ints; the library takes 0..CHORUS_TAG_MAX (INT_MAX).
  static void check_tag(int tag, const char* op);

  /// A tagged receive from `src` (a rank or CHORUS_ANY_SOURCE).
  c10::intrusive_ptr<c10d::Work> issue_recv(std::vector<at::Tensor>& tensors, int src, int tag,
                                            c10d::OpType type, const char* name);

  /// Per-peer element counts of an alltoall_base tensor: equal blocks of dim 0
  /// without split sizes, else split sizes (rows of dim 0) times the row size.
  std::vector<int64_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                    const char* what) const;

  /// all_reduce of the contiguous `t` in place (the bitwise ops as an
  /// all-gather and a fold in rank order, since Chorus has no bitwise ops).
  void issue_allreduce(Issue& is, const at::Tensor& t, const c10d::ReduceOp& reduce_op,
                       const char* name);

  /// One contiguous 1-D copy of `ts` (same dtype as `like`), in list order.
  static at::Tensor flatten(const std::vector<at::Tensor>& ts, const at::Tensor& like);

  /// all_to_all of the contiguous `in` into the contiguous `out` (disjoint),
  /// with per-peer element counts laid out back to back in rank order: the
  /// library's all_to_all when every count is the same, else all_to_allv.
  void issue_alltoall(Issue& is, const at::Tensor& in, const std::vector<int64_t>& in_counts,
                      const at::Tensor& out, const std::vector<int64_t>& out_counts,
                      const char* name);

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, Issue is,
                                         c10::IValue value, int source = ChorusWork::kNotRecv);

  /// The completion thread: collectives finish in issue order, so waiting
  /// for them in that order costs nothing.
  void complete_loop();

  chorus_comm_t* comm_ = nullptr;
  std::mutex issue_mu_;  // one torch call's requests are issued together
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<ChorusWork>> queue_;
  bool stop_ = false;
  std::unique_ptr<TaskPool> pool_ = std::make_unique<TaskPool>();
  std::thread completer_;
};

}  // namespace chorus_torch
