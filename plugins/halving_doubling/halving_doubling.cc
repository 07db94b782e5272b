// Recursive halving-doubling (Rabenseifner) all_reduce and recursive-doubling
// all_gather, written as a third-party algorithm plugin on the algorithm ABI
// v2 and its SDK (<chorus/algorithm_sdk.hpp>): it sees the network only
// through the environment the core hands each task.
//
// This file owns the plugin's face to the core: the settings check at
// comm_init, what it declares (collectives, flags, preference) and the task
// that walks one collective's plan. The plan is pure arithmetic
// (hd_schedule.h); one transfer of it is run by hd_exchange.h.
//
// A collective is a sequence of pairwise transfers, one at a time: a
// transfer's sends read, and its receives write, disjoint runs of the work
// buffer, and the next transfer may read what this one received, so the next
// one starts only when every post of this one has completed. Each block of
// the result is reduced by exactly one rank, in a fixed order, then copied,
// so results are bitwise identical on every rank and every run.
//
// A task keeps all of its state in itself and the plugin keeps none outside
// its per-communicator object (which holds nothing mutable), so several tasks
// may run at once.
#include <chorus/algorithm_sdk.hpp>

#include "hd_exchange.h"
#include "hd_schedule.h"

#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace chorus::hd {
namespace {

struct HalvingDoubling {
  static constexpr const char* kName = "halving_doubling";
  static constexpr uint32_t kPeers = CHORUS_ALGO_PEERS_ALL;
  static constexpr uint32_t kFlags =
      CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
  static constexpr uint32_t kCollectives =
      (1u << CHORUS_COLL_ALL_REDUCE) | (1u << CHORUS_COLL_ALL_GATHER);

  /// This algorithm has no settings: anything under algorithm.halving_doubling.*
  /// is a mistake, and fails the communicator's init naming the key.
  static int comm_init(const chorus_algo_comm_v2_t* comm, HalvingDoubling** out) {
    if (comm->config_count > 0) {
      const chorus_kv_t& kv = comm->config[0];
      const std::string message =
          std::string("halving_doubling: unknown setting '") + (kv.key ? kv.key : "") + "' (from " +
          (kv.origin ? kv.origin : "?") + "); this algorithm has no settings, remove it";
      return comm->fail(comm->core, CHORUS_ERR_INVALID_ARGUMENT, message.c_str());
    }
    *out = new (std::nothrow) HalvingDoubling;
    if (!*out) return comm->fail(comm->core, CHORUS_ERR_SYSTEM, "halving_doubling: out of memory");
    return CHORUS_OK;
  }

  /// Every dtype and op the core has a kernel for.
  bool supports(int collective, int, int) const {
    return collective == CHORUS_COLL_ALL_REDUCE || collective == CHORUS_COLL_ALL_GATHER;
  }

  /// Never chosen by `auto`; pin it with algorithm.all_reduce / all_gather =
  /// "halving_doubling". On the shared 2-core development VM (4 ranks, tcp on
  /// loopback) it was often fastest from 64 KiB to 512 KiB and mesh mostly
  /// below and above, but the runs were too noisy to make that a preference
  /// (docs/plugins.md has the numbers).
  int preference(const chorus_algo_call_v2_t&) const { return -1; }

  /// One all_reduce or all_gather: the plan's transfers, one after another.
  class Task {
   public:
    Task(const HalvingDoubling&, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t& call)
        : env_(env), call_(call) {}

    int start() {
      const size_t esize = chorus_dtype_size(call_.dtype);
      if (call_.count == 0) return CHORUS_ALGO_TASK_DONE;
      const int rank = env_->rank, size = env_->size;
      auto* base = static_cast<std::byte*>(call_.out);
      size_t work_bytes = call_.count * esize;
      chorus_reduce_fn_t kernel = nullptr;
      if (call_.collective == CHORUS_COLL_ALL_REDUCE) {
        if (call_.in != call_.out) std::memmove(base, call_.in, work_bytes);
        if (size == 1) return CHORUS_ALGO_TASK_DONE;
        kernel = env_->reduce_kernel(call_.dtype, call_.op);
        if (!kernel)
          return sdk::fail(env_, CHORUS_ERR_INVALID_ARGUMENT,
                           "halving_doubling: no kernel for dtype/op");
        plan_ = all_reduce_plan(rank, size, call_.count);
      } else if (call_.collective == CHORUS_COLL_ALL_GATHER) {
        std::byte* mine = base + size_t(rank) * work_bytes;
        if (call_.in != mine) std::memmove(mine, call_.in, work_bytes);
        if (size == 1) return CHORUS_ALGO_TASK_DONE;
        work_bytes *= size_t(size);
        plan_ = all_gather_plan(rank, size, call_.count);
      } else {
        return sdk::fail(env_, CHORUS_ERR_INTERNAL,
                         "halving_doubling: asked for collective " +
                             std::to_string(call_.collective) +
                             ", which it does not declare (a bug in the core)");
      }
      chorus_tp_mr_t* mr = nullptr;
      if (int rc = env_->mem_register(env_->core, base, work_bytes, &mr); rc != CHORUS_OK)
        return rc;
      exchange_.emplace(env_, base, mr, esize, kernel);
      step_ = 0;
      if (plan_.empty()) return CHORUS_ALGO_TASK_DONE;
      if (int rc = exchange_->begin(plan_[0], 0); rc != CHORUS_OK) return rc;
      return advance();
    }

    int progress(const chorus_tp_completion_t* c, size_t n) {
      for (size_t i = 0; i < n; ++i)
        if (int rc = exchange_->complete(c[i]); rc != CHORUS_OK) return rc;
      return advance();
    }

   private:
    /// Posts what the current transfer allows; moves on to the next transfer
    /// each time one is complete.
    int advance() {
      for (;;) {
        if (int rc = exchange_->pump(); rc != CHORUS_OK) return rc;
        if (!exchange_->done()) return CHORUS_ALGO_TASK_PENDING;
        if (++step_ == plan_.size()) return CHORUS_ALGO_TASK_DONE;
        if (int rc = exchange_->begin(plan_[step_], uint32_t(step_)); rc != CHORUS_OK) return rc;
      }
    }

    const chorus_algo_env_v2_t* env_;
    chorus_algo_call_v2_t call_;
    std::vector<Transfer> plan_;
    size_t step_ = 0;
    std::optional<Exchange> exchange_;
  };
};

}  // namespace
}  // namespace chorus::hd

CHORUS_ALGORITHM_EXPORT_V2(chorus::hd::HalvingDoubling);
