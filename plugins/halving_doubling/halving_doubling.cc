// Recursive halving-doubling (Rabenseifner) all_reduce and recursive-doubling
// all_gather, written as a third-party algorithm plugin: it includes only
// <chorus/algorithm.h> and sees the network only through the environment the
// core hands each call.
//
// Every collective is a sequence of pairwise transfers (hd_schedule.h). One
// transfer at a time runs to completion: its sends read, and its receives
// write, disjoint runs of the work buffer, and the next transfer may read what
// this one received. Within a transfer the data is cut into pieces of one
// staging slot, striped over the channels (piece k on channel k % channels;
// both ends post in piece order, so each endpoint's messages match), with a
// window of pieces in flight each way. Pieces that must be reduced land in
// staging slots and are reduced into the work buffer as they arrive; pieces
// that are only copied land in the work buffer directly.
//
// Each block of the result is reduced by exactly one rank, in a fixed order,
// then copied, so results are bitwise identical on every rank and every run.
#include <chorus/algorithm.h>

#include "hd_schedule.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace chorus::hd {
namespace {

constexpr uint64_t kSendBit = 1ull << 63;
constexpr int kTagShift = 40;
constexpr uint64_t kTagMask = (1ull << 23) - 1;
constexpr uint64_t kPieceMask = (1ull << kTagShift) - 1;
constexpr size_t kMaxCompletions = 64;
/// Posts in flight per direction; never more than the transport allows.
constexpr size_t kWindow = 64;

int fail(const chorus_algo_env_v1_t* env, int status, const std::string& message) {
  return env->fail(env->core, status, message.c_str());
}

/// This algorithm has no settings: anything under algorithm.halving_doubling.*
/// is a mistake, reported with where it came from.
int check_settings(const chorus_algo_env_v1_t* env) {
  if (env->config_count == 0) return CHORUS_OK;
  const chorus_kv_t& kv = env->config[0];
  return fail(env, CHORUS_ERR_INVALID_ARGUMENT,
              std::string("halving_doubling: unknown setting '") + (kv.key ? kv.key : "") +
                  "' (from " + (kv.origin ? kv.origin : "?") +
                  "); this algorithm has no settings, remove it");
}

class Executor {
 public:
  Executor(const chorus_algo_env_v1_t* env, std::byte* work, chorus_tp_mr_t* work_mr, size_t esize,
           chorus_reduce_fn_t kernel)
      : env_(env), work_(work), work_mr_(work_mr), esize_(esize), kernel_(kernel) {
    piece_ = std::max<size_t>(1, env->staging_slot_size / esize);
    lanes_ = std::max(1, env->channels);
    uint32_t sends = env->caps->max_outstanding_sends ? env->caps->max_outstanding_sends : 1;
    uint32_t recvs = env->caps->max_outstanding_recvs ? env->caps->max_outstanding_recvs : 1;
    // The window counts posts over all lanes, so no lane can exceed its cap.
    send_window_ = std::min<size_t>(kWindow, sends);
    recv_window_ = std::min<size_t>(kWindow, recvs);
    size_t max_msg = env->caps->max_message_size ? size_t(env->caps->max_message_size) : piece_;
    piece_ = std::max<size_t>(1, std::min(piece_, max_msg / esize));
  }

  int run(const Transfer& t) {
    ++tag_;
    std::vector<Range> sends = pieces(t.send);
    std::vector<Range> recvs = pieces(t.recv);
    if (sends.empty() && recvs.empty()) return CHORUS_OK;
    std::vector<chorus_tp_endpoint_t*> eps(size_t(lanes_), nullptr);
    for (int l = 0; l < lanes_; ++l) {
      eps[size_t(l)] = env_->endpoint(env_->core, t.peer, l);
      if (!eps[size_t(l)])
        return fail(env_, CHORUS_ERR_INTERNAL,
                    "halving_doubling: no endpoint to rank " + std::to_string(t.peer) +
                        " on channel " + std::to_string(l));
    }
    std::vector<size_t> free_slots;
    if (t.reduce)
      for (size_t s = env_->staging_slots; s-- > 0;) free_slots.push_back(s);
    std::vector<size_t> slot_of(t.reduce ? recvs.size() : 0);
    size_t send_posted = 0, send_done = 0, recv_posted = 0, recv_done = 0;
    const uint64_t tag = (tag_ & kTagMask) << kTagShift;
    chorus_tp_completion_t comps[kMaxCompletions];
    const auto* tp = env_->tp;
    for (;;) {
      // Receives first, so the peer's sends find a buffer waiting.
      while (recv_posted < recvs.size() && recv_posted - recv_done < recv_window_) {
        if (t.reduce && free_slots.empty()) break;
        const Range& r = recvs[recv_posted];
        void* buf = work_ + r.offset * esize_;
        chorus_tp_mr_t* mr = work_mr_;
        if (t.reduce) {
          buf = env_->staging[free_slots.back()];
          mr = env_->staging_mr[free_slots.back()];
        }
        chorus_tp_endpoint_t* ep = eps[recv_posted % size_t(lanes_)];
        int rc = tp->post_recv(ep, buf, r.count * esize_, mr, tag | recv_posted);
        if (rc == CHORUS_ERR_AGAIN) break;
        if (rc != CHORUS_OK)
          return fail(env_, rc,
                      "halving_doubling: post_recv from rank " + std::to_string(t.peer) +
                          " failed: " + tp->last_error());
        if (t.reduce) {
          slot_of[recv_posted] = free_slots.back();
          free_slots.pop_back();
        }
        ++recv_posted;
      }
      while (send_posted < sends.size() && send_posted - send_done < send_window_) {
        const Range& r = sends[send_posted];
        chorus_tp_endpoint_t* ep = eps[send_posted % size_t(lanes_)];
        int rc = tp->post_send(ep, work_ + r.offset * esize_, r.count * esize_, work_mr_,
                               kSendBit | tag | send_posted);
        if (rc == CHORUS_ERR_AGAIN) break;
        if (rc != CHORUS_OK)
          return fail(env_, rc,
                      "halving_doubling: post_send to rank " + std::to_string(t.peer) +
                          " failed: " + tp->last_error());
        ++send_posted;
      }
      if (send_done == sends.size() && recv_done == recvs.size()) return CHORUS_OK;
      if (send_posted == send_done && recv_posted == recv_done)
        return fail(env_, CHORUS_ERR_INTERNAL,
                    "halving_doubling: exchange with rank " + std::to_string(t.peer) +
                        " stalled with nothing in flight");
      int n = env_->progress(env_->core, comps, kMaxCompletions);
      if (n < 0) return n;
      for (int i = 0; i < n; ++i) {
        const chorus_tp_completion_t& c = comps[i];
        if ((c.wr_id & ~kSendBit & ~kPieceMask) != tag)
          return fail(env_, CHORUS_ERR_INTERNAL,
                      "halving_doubling: completion of an earlier exchange arrived late");
        size_t k = size_t(c.wr_id & kPieceMask);
        if (c.wr_id & kSendBit) {
          ++send_done;
          continue;
        }
        if (k >= recvs.size())
          return fail(env_, CHORUS_ERR_INTERNAL, "halving_doubling: unknown receive completion");
        const Range& r = recvs[k];
        if (c.byte_len != r.count * esize_)
          return fail(env_, CHORUS_ERR_INTERNAL,
                      "halving_doubling: received " + std::to_string(c.byte_len) +
                          " bytes from rank " + std::to_string(t.peer) + " where " +
                          std::to_string(r.count * esize_) +
                          " were expected; do all ranks pass the same count and dtype?");
        if (t.reduce) {
          kernel_(env_->staging[slot_of[k]], work_ + r.offset * esize_, r.count);
          free_slots.push_back(slot_of[k]);
        }
        ++recv_done;
      }
    }
  }

 private:
  /// Cuts runs into pieces of at most one staging slot, skipping empty runs.
  std::vector<Range> pieces(const std::vector<Range>& runs) const {
    std::vector<Range> out;
    for (const Range& r : runs)
      for (size_t off = 0; off < r.count; off += piece_)
        out.push_back({r.offset + off, std::min(piece_, r.count - off)});
    return out;
  }

  const chorus_algo_env_v1_t* env_;
  std::byte* work_;
  chorus_tp_mr_t* work_mr_;
  size_t esize_;
  chorus_reduce_fn_t kernel_;
  size_t piece_ = 1;
  int lanes_ = 1;
  size_t send_window_ = 1, recv_window_ = 1;
  uint64_t tag_ = 0;
};

int register_work(const chorus_algo_env_v1_t* env, void* buf, size_t bytes, chorus_tp_mr_t** mr) {
  *mr = nullptr;
  if (bytes == 0) return CHORUS_OK;
  return env->mem_register(env->core, buf, bytes, mr);
}

int hd_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                  int dtype, int op) {
  if (int rc = check_settings(env); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  if (in != out) std::memmove(out, in, count * esize);
  if (env->size == 1) return CHORUS_OK;
  chorus_reduce_fn_t kernel = env->reduce_kernel(dtype, op);
  if (!kernel)
    return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "halving_doubling: no kernel for dtype/op");
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, out, count * esize, &mr); rc != CHORUS_OK) return rc;
  Executor x(env, static_cast<std::byte*>(out), mr, esize, kernel);
  for (const Transfer& t : all_reduce_plan(env->rank, env->size, count))
    if (int rc = x.run(t); rc != CHORUS_OK) return rc;
  return CHORUS_OK;
}

int hd_all_gather(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                  int dtype) {
  if (int rc = check_settings(env); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  auto* base = static_cast<std::byte*>(out);
  const int rank = env->rank, size = env->size;
  std::byte* mine = base + size_t(rank) * count * esize;
  if (in != mine) std::memmove(mine, in, count * esize);
  if (size == 1) return CHORUS_OK;
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, out, size_t(size) * count * esize, &mr); rc != CHORUS_OK)
    return rc;
  Executor x(env, base, mr, esize, nullptr);
  for (const Transfer& t : all_gather_plan(rank, size, count))
    if (int rc = x.run(t); rc != CHORUS_OK) return rc;
  return CHORUS_OK;
}

int hd_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}

/// Never chosen by `auto`; pin it with algorithm.all_reduce / all_gather =
/// "halving_doubling". On the shared 2-core development VM (4 ranks, tcp on
/// loopback) it was often fastest from 64 KiB to 512 KiB and mesh mostly
/// below and above, but the runs were too noisy to make that a preference
/// (docs/plugins.md has the numbers).
int hd_preference(int collective, int size, uint64_t bytes) {
  (void)collective;
  (void)size;
  (void)bytes;
  return -1;
}

}  // namespace
}  // namespace chorus::hd

extern "C" __attribute__((visibility("default")))
const chorus_algorithm_plugin_v1_t chorus_algorithm_plugin_v1 = {
    sizeof(chorus_algorithm_plugin_v1_t),
    CHORUS_ALGORITHM_ABI_MINOR,
    "halving_doubling",
    CHORUS_ALGO_PEERS_ALL,
    CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS,
    chorus::hd::hd_init,
    nullptr,
    chorus::hd::hd_preference,
    chorus::hd::hd_all_reduce,
    chorus::hd::hd_all_gather,
    nullptr,  // reduce_scatter
    nullptr,  // broadcast
    nullptr,  // barrier
    nullptr,  // reduce (algorithm ABI minor 1 on)
    nullptr,  // gather
    nullptr,  // scatter
    nullptr,  // all_to_all
    nullptr,  // all_to_allv
};
