// The built-in ring algorithm, written only against the algorithm ABI.
//
// Every collective is a schedule (ring_schedule.h) run by one executor. Each
// channel to the right/left neighbour is a "lane" that carries its own slice
// of every chunk, so lanes never touch each other's memory or slots and run
// concurrently over separate endpoints. Within a lane, chunks are cut into
// pieces of one staging slot; a piece is forwarded as soon as the piece it
// depends on has landed, so steps overlap (a pipeline, as in JACCL's ring).
#include <chorus/algorithm.h>

#include "algorithms/ring/ring_schedule.h"
#include "algorithms/ring/ring_settings.h"

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chorus::ring {
namespace {

const chorus_host_v1_t* g_host = nullptr;

constexpr uint64_t kSendBit = 1ull << 63;
constexpr int kLaneShift = 48;
constexpr size_t kMaxCompletions = 64;

int fail(const chorus_algo_env_v1_t* env, int status, const std::string& message) {
  return env->fail(env->core, status, message.c_str());
}

/// A buffer chunks live in, with its registration.
struct Place {
  std::byte* base = nullptr;
  chorus_tp_mr_t* mr = nullptr;
};

struct Plan {
  int steps = 0;
  /// Step u in the forward (false) or reverse (true) ring.
  std::function<Step(int, bool)> step;
  std::function<Range(int)> chunk;
  /// all_gather with a separate input: chunk `own_chunk` is sent from
  /// `own_in` and copied into the work buffer only after the first posts,
  /// so the copy overlaps the neighbour's read of it.
  int own_chunk = -1;
  const std::byte* own_in = nullptr;
  chorus_tp_mr_t* own_in_mr = nullptr;
  /// Chunks spread over several buffers: where chunk c lives (the offsets
  /// of `chunk` are then relative to that base). Empty: the work buffer.
  std::function<Place(int)> place;
  /// Run every lane forward, whatever algorithm.ring.bidirectional says:
  /// for schedules whose chunk numbering does not survive mirroring.
  bool forward_only = false;
};

int load_settings(const chorus_algo_env_v1_t* env, Settings& settings) {
  std::string error;
  if (!parse_settings(env->config, env->config_count, settings, error))
    return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "ring: " + error);
  return CHORUS_OK;
}

class Executor {
 public:
  Executor(const chorus_algo_env_v1_t* env, const Settings& settings, std::byte* work,
           chorus_tp_mr_t* work_mr, size_t esize, chorus_reduce_fn_t kernel, Plan plan)
      : env_(env),
        work_(work),
        work_mr_(work_mr),
        esize_(esize),
        kernel_(kernel),
        plan_(std::move(plan)) {
    piece_ = env->staging_slot_size / esize;
    // Lanes: one per channel, or a forward and a reverse one per channel when
    // running both ways (pointless with two ranks: both neighbours are one
    // peer, and the two directions would share its endpoints' receive order).
    bool both_ways = settings.bidirectional && env->size > 2 && !plan_.forward_only;
    int wanted = both_ways ? 2 * env->channels : env->channels;
    int lanes = std::max(1, std::min<int>(wanted, int(env->staging_slots)));
    n_lanes_ = size_t(lanes);
    size_t slots_per_lane = env->staging_slots / size_t(lanes);
    int right = mod(env->rank + 1, env->size);
    int left = mod(env->rank - 1, env->size);
    uint32_t send_cap = env->caps->max_outstanding_sends ? env->caps->max_outstanding_sends : 1;
    uint32_t recv_cap = env->caps->max_outstanding_recvs ? env->caps->max_outstanding_recvs : 1;
    for (int l = 0; l < lanes; ++l) {
      Lane lane;
      lane.id = l;
      lane.reverse = both_ways && l % 2 == 1;
      int channel = both_ways ? l / 2 : l;
      lane.to = lane.reverse ? left : right;
      lane.from = lane.reverse ? right : left;
      lane.ep_send = env->endpoint(env->core, lane.to, channel);
      lane.ep_recv = env->endpoint(env->core, lane.from, channel);
      for (size_t s = 0; s < slots_per_lane; ++s)
        lane.free_slots.push_back(size_t(l) * slots_per_lane + s);
      lane.send_window = std::min<size_t>(2 * slots_per_lane, send_cap);
      lane.recv_window = std::min<size_t>(2 * slots_per_lane, recv_cap);
      lane.recv_start.assign(size_t(plan_.steps) + 1, 0);
      for (int u = 0; u < plan_.steps; ++u) {
        Step st = plan_.step(u, lane.reverse);
        size_t n = st.recv_chunk >= 0 ? piece_count(sub(lane, st.recv_chunk).count, piece_) : 0;
        lane.recv_start[size_t(u) + 1] = lane.recv_start[size_t(u)] + n;
        if (st.send_chunk >= 0)
          lane.send_total += piece_count(sub(lane, st.send_chunk).count, piece_);
      }
      lane.recv_total = lane.recv_start.back();
      lanes_.push_back(std::move(lane));
    }
  }

  int run() {
    for (auto& lane : lanes_) {
      if ((lane.send_total && !lane.ep_send) || (lane.recv_total && !lane.ep_recv))
        return fail(env_, CHORUS_ERR_INTERNAL,
                    "ring: lane " + std::to_string(lane.id) + " has no endpoint to its neighbour");
    }
    chorus_tp_completion_t comps[kMaxCompletions];
    bool own_copied = plan_.own_in == nullptr;
    for (;;) {
      bool done = true;
      bool outstanding = false;
      for (auto& lane : lanes_) {
        if (int rc = pump(lane); rc != CHORUS_OK) return rc;
        done = done && lane.send_done == lane.send_total && lane.recv_done == lane.recv_total;
        outstanding =
            outstanding || lane.send_posted > lane.send_done || lane.recv_posted > lane.recv_done;
      }
      if (!own_copied) {
        Range own = plan_.chunk(plan_.own_chunk);
        std::memcpy(work_ + own.offset * esize_, plan_.own_in, own.count * esize_);
        own_copied = true;
      }
      if (done) return CHORUS_OK;
      if (!outstanding)
        return fail(env_, CHORUS_ERR_INTERNAL, "ring: schedule stalled with nothing in flight");
      int n = env_->progress(env_->core, comps, kMaxCompletions);
      if (n < 0) return n;
      for (int i = 0; i < n; ++i)
        if (int rc = complete(comps[i]); rc != CHORUS_OK) return rc;
    }
  }

 private:
  struct PostedRecv {
    int step;
    size_t piece;
    long slot;  // -1: received in place
  };
  struct Lane {
    int id = 0;
    bool reverse = false;  // sends left and receives from the right
    int to = 0, from = 0;  // the neighbours it sends to and receives from
    chorus_tp_endpoint_t* ep_send = nullptr;
    chorus_tp_endpoint_t* ep_recv = nullptr;
    std::vector<size_t> free_slots;
    std::vector<size_t> recv_start;  // recv sequence index of (step u, piece 0)
    size_t send_window = 1, recv_window = 1;
    size_t send_total = 0, send_posted = 0, send_done = 0;
    size_t recv_total = 0, recv_posted = 0, recv_done = 0;
    int send_step = 0, recv_step = 0;
    size_t send_piece = 0, recv_piece = 0;
    std::deque<PostedRecv> posted;
  };

  Place place(int c) const { return plan_.place ? plan_.place(c) : Place{work_, work_mr_}; }

  /// This lane's slice of chunk `c`.
  Range sub(const Lane& lane, int c) const {
    Range whole = plan_.chunk(c);
    Range part = split(whole.count, int(n_lanes_), lane.id);
    return {whole.offset + part.offset, part.count};
  }
  Range piece_range(const Lane& lane, int c, size_t k) const {
    Range s = sub(lane, c);
    size_t off = k * piece_;
    return {s.offset + off, std::min(piece_, s.count - off)};
  }

  /// Advances a (step, piece) cursor past steps with nothing to move in `dir`.
  void settle(int& step, size_t& piece, bool send, const Lane& lane) const {
    while (step < plan_.steps) {
      Step st = plan_.step(step, lane.reverse);
      int c = send ? st.send_chunk : st.recv_chunk;
      if (c >= 0 && piece < piece_count(sub(lane, c).count, piece_)) return;
      ++step;
      piece = 0;
    }
  }

  int pump(Lane& lane) {
    const auto* tp = env_->tp;
    // Receives first, so the peer's sends find a buffer waiting.
    for (;;) {
      settle(lane.recv_step, lane.recv_piece, false, lane);
      if (lane.recv_step >= plan_.steps || lane.recv_posted - lane.recv_done >= lane.recv_window)
        break;
      Step st = plan_.step(lane.recv_step, lane.reverse);
      Range r = piece_range(lane, st.recv_chunk, lane.recv_piece);
      Place at = place(st.recv_chunk);
      void* buf = at.base + r.offset * esize_;
      chorus_tp_mr_t* mr = at.mr;
      long slot = -1;
      if (st.reduce) {
        if (lane.free_slots.empty()) break;
        slot = long(lane.free_slots.back());
        buf = env_->staging[slot];
        mr = env_->staging_mr[slot];
      }
      uint64_t wr = (uint64_t(lane.id) << kLaneShift) | lane.recv_posted;
      int rc = tp->post_recv(lane.ep_recv, buf, r.count * esize_, mr, wr);
      if (rc == CHORUS_ERR_AGAIN) break;
      if (rc != CHORUS_OK)
        return fail(env_, rc,
                    "ring: post_recv from rank " + std::to_string(lane.from) +
                        " failed: " + tp->last_error());
      if (slot >= 0) lane.free_slots.pop_back();
      lane.posted.push_back({lane.recv_step, lane.recv_piece, slot});
      ++lane.recv_posted;
      ++lane.recv_piece;
    }
    for (;;) {
      settle(lane.send_step, lane.send_piece, true, lane);
      if (lane.send_step >= plan_.steps || lane.send_posted - lane.send_done >= lane.send_window)
        break;
      Step st = plan_.step(lane.send_step, lane.reverse);
      if (st.send_after >= 0 &&
          lane.recv_done <= lane.recv_start[size_t(st.send_after)] + lane.send_piece)
        break;  // the data this piece forwards has not landed yet
      Range r = piece_range(lane, st.send_chunk, lane.send_piece);
      Place at = place(st.send_chunk);
      const std::byte* src = at.base + r.offset * esize_;
      chorus_tp_mr_t* mr = at.mr;
      if (plan_.own_in && st.send_chunk == plan_.own_chunk) {
        src = plan_.own_in + (r.offset - plan_.chunk(st.send_chunk).offset) * esize_;
        mr = plan_.own_in_mr;
      }
      uint64_t wr = kSendBit | (uint64_t(lane.id) << kLaneShift) | lane.send_posted;
      int rc = tp->post_send(lane.ep_send, src, r.count * esize_, mr, wr);
      if (rc == CHORUS_ERR_AGAIN) break;
      if (rc != CHORUS_OK)
        return fail(
            env_, rc,
            "ring: post_send to rank " + std::to_string(lane.to) + " failed: " + tp->last_error());
      ++lane.send_posted;
      ++lane.send_piece;
    }
    return CHORUS_OK;
  }

  int complete(const chorus_tp_completion_t& c) {
    size_t l = size_t((c.wr_id & ~kSendBit) >> kLaneShift);
    if (l >= lanes_.size())
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "ring: completion for unknown lane " + std::to_string(l));
    Lane& lane = lanes_[l];
    if (c.wr_id & kSendBit) {
      ++lane.send_done;
      return CHORUS_OK;
    }
    if (lane.posted.empty())
      return fail(env_, CHORUS_ERR_INTERNAL, "ring: receive completion with none posted");
    PostedRecv p = lane.posted.front();
    lane.posted.pop_front();
    Step st = plan_.step(p.step, lane.reverse);
    Range r = piece_range(lane, st.recv_chunk, p.piece);
    if (c.byte_len != r.count * esize_)
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "ring: received " + std::to_string(c.byte_len) + " bytes where " +
                      std::to_string(r.count * esize_) +
                      " were expected; do all ranks pass the same count and dtype?");
    if (p.slot >= 0) {
      kernel_(env_->staging[p.slot], place(st.recv_chunk).base + r.offset * esize_, r.count);
      lane.free_slots.push_back(size_t(p.slot));
    }
    ++lane.recv_done;
    return CHORUS_OK;
  }

  const chorus_algo_env_v1_t* env_;
  std::byte* work_;
  chorus_tp_mr_t* work_mr_;
  size_t esize_;
  chorus_reduce_fn_t kernel_;
  Plan plan_;
  size_t piece_ = 1;
  size_t n_lanes_ = 1;
  std::vector<Lane> lanes_;
};

int register_work(const chorus_algo_env_v1_t* env, const void* buf, size_t bytes,
                  chorus_tp_mr_t** mr) {
  *mr = nullptr;
  if (bytes == 0) return CHORUS_OK;
  return env->mem_register(env->core, buf, bytes, mr);
}

int ring_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype, int op) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  if (in != out) std::memmove(out, in, count * esize);
  if (env->size == 1) return CHORUS_OK;
  chorus_reduce_fn_t kernel = env->reduce_kernel(dtype, op);
  if (!kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "ring: no kernel for dtype/op");
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, out, count * esize, &mr); rc != CHORUS_OK) return rc;
  int rank = env->rank, size = env->size;
  Plan plan{all_reduce_steps(size),
            [=](int u, bool rev) { return directed_step(all_reduce_step, rank, size, u, rev); },
            [=](int c) { return split(count, size, c); }};
  return Executor(env, settings, static_cast<std::byte*>(out), mr, esize, kernel, std::move(plan))
      .run();
}

int ring_all_gather(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  auto* base = static_cast<std::byte*>(out);
  const size_t total = size_t(env->size) * count * esize;
  std::byte* mine = base + size_t(env->rank) * count * esize;
  // An input inside the output (other than in place) could be overwritten
  // by a receive before it is sent: copy it first, as for one rank.
  const auto at = reinterpret_cast<std::uintptr_t>(in);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const bool overlaps = at + count * esize > lo && at < lo + total;
  if (in != mine && (overlaps || env->size == 1)) std::memmove(mine, in, count * esize);
  if (env->size == 1) return CHORUS_OK;
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, out, total, &mr); rc != CHORUS_OK) return rc;
  int rank = env->rank, size = env->size;
  Plan plan{all_gather_steps(size),
            [=](int u, bool rev) { return directed_step(all_gather_step, rank, size, u, rev); },
            [=](int c) {
              return Range{size_t(c) * count, count};
            }};
  if (!overlaps) {
    plan.own_chunk = rank;
    plan.own_in = static_cast<const std::byte*>(in);
    if (int rc = register_work(env, in, count * esize, &plan.own_in_mr); rc != CHORUS_OK) return rc;
  }
  return Executor(env, settings, base, mr, esize, nullptr, std::move(plan)).run();
}

/// Scratch memory for reduce_scatter, kept per thread and grown on demand.
/// Freshly mapped pages cost a fault each on first touch, which on a
/// virtualised host is tens of microseconds per 4 KiB page: allocating the
/// scratch per call made 64 MiB reduce_scatters ten times slower than the
/// transfer itself. A thread runs one collective at a time, so one buffer per
/// thread is never shared by two calls.
std::byte* scratch_buffer(size_t bytes) {
  thread_local std::unique_ptr<std::byte[]> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset();
    buffer.reset(new std::byte[bytes]);
    capacity = bytes;
  }
  return buffer.get();
}

int ring_reduce_scatter(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                        int dtype, int op) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  size_t block = count * esize;
  if (env->size == 1) {
    if (in != out) std::memmove(out, in, block);
    return CHORUS_OK;
  }
  chorus_reduce_fn_t kernel = env->reduce_kernel(dtype, op);
  if (!kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "ring: no kernel for dtype/op");
  // Partial sums travel around the ring and accumulate in a scratch copy of
  // the input: the caller's input stays untouched.
  size_t total = size_t(env->size) * block;
  std::byte* scratch = scratch_buffer(total);
  std::memcpy(scratch, in, total);
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, scratch, total, &mr); rc != CHORUS_OK) return rc;
  int rank = env->rank, size = env->size;
  Plan plan{reduce_scatter_steps(size),
            [=](int u, bool rev) { return directed_step(reduce_scatter_step, rank, size, u, rev); },
            [=](int c) {
              return Range{size_t(c) * count, count};
            }};
  int rc = Executor(env, settings, scratch, mr, esize, kernel, std::move(plan)).run();
  if (rc == CHORUS_OK) std::memcpy(out, scratch + size_t(rank) * block, block);
  return rc;
}

int ring_broadcast(const chorus_algo_env_v1_t* env, void* buf, size_t count, int dtype, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0 || env->size == 1) return CHORUS_OK;
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, buf, count * esize, &mr); rc != CHORUS_OK) return rc;
  int rank = env->rank, size = env->size;
  Plan plan{broadcast_steps(size),
            [=](int, bool rev) {
              return rev ? mirror_chunks(
                               broadcast_step(mirror(rank, size), size, mirror(root, size)), size)
                         : broadcast_step(rank, size, root);
            },
            [=](int) {
              return Range{0, count};
            }};
  return Executor(env, settings, static_cast<std::byte*>(buf), mr, esize, nullptr, std::move(plan))
      .run();
}

int ring_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int op, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t bytes = count * esize;
  const int rank = env->rank, size = env->size;
  if (size == 1) {
    if (in != out) std::memmove(out, in, bytes);
    return CHORUS_OK;
  }
  chorus_reduce_fn_t kernel = env->reduce_kernel(dtype, op);
  if (!kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "ring: no kernel for dtype/op");
  // The partial result accumulates in the work buffer: the root's output,
  // a scratch copy of the input on the ranks in between (the caller's input
  // stays untouched), and the input itself where the chain starts (only sent).
  std::byte* work;
  if (rank == root) {
    if (in != out) std::memcpy(out, in, bytes);
    work = static_cast<std::byte*>(out);
  } else if (mod(rank - root - 1, size) == 0 && !(settings.bidirectional && size > 2)) {
    // (With lanes in both directions this rank is inside the reverse chain.)
    work = static_cast<std::byte*>(const_cast<void*>(in));
  } else {
    work = scratch_buffer(bytes);
    std::memcpy(work, in, bytes);
  }
  chorus_tp_mr_t* mr = nullptr;
  if (int rc = register_work(env, work, bytes, &mr); rc != CHORUS_OK) return rc;
  Plan plan{reduce_steps(size),
            [=](int, bool rev) {
              return rev ? mirror_chunks(reduce_step(mirror(rank, size), size, mirror(root, size)),
                                         size)
                         : reduce_step(rank, size, root);
            },
            [=](int) {
              return Range{0, count};
            }};
  return Executor(env, settings, work, mr, esize, kernel, std::move(plan)).run();
}

int ring_gather(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t block = count * esize;
  const int rank = env->rank, size = env->size;
  auto* src = static_cast<std::byte*>(const_cast<void*>(in));  // only ever sent
  if (rank == root) {
    std::byte* own = static_cast<std::byte*>(out) + size_t(root) * block;
    if (src != own) std::memcpy(own, src, block);  // the core refused other overlaps
  }
  if (size == 1) return CHORUS_OK;
  Plan plan;
  plan.steps = gather_steps(size);
  plan.step = [=](int u, bool) { return gather_step(rank, size, root, u); };
  plan.forward_only = true;
  if (rank == root) {
    plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
    chorus_tp_mr_t* mr = nullptr;
    if (int rc = register_work(env, out, size_t(size) * block, &mr); rc != CHORUS_OK) return rc;
    return Executor(env, settings, static_cast<std::byte*>(out), mr, esize, nullptr,
                    std::move(plan))
        .run();
  }
  // Off the root: the own block is sent from the input; the blocks passing
  // through sit in scratch by chain position (0 .. position-1).
  const int position = mod(rank - root - 1, size);
  std::byte* scratch = position > 0 ? scratch_buffer(size_t(position) * block) : nullptr;
  Place own{src, nullptr}, passing{scratch, nullptr};
  if (int rc = register_work(env, src, block, &own.mr); rc != CHORUS_OK) return rc;
  if (int rc = register_work(env, scratch, size_t(position) * block, &passing.mr); rc != CHORUS_OK)
    return rc;
  plan.chunk = [=](int c) {
    return c == rank ? Range{0, count} : Range{size_t(gather_slot(c, size, root)) * count, count};
  };
  plan.place = [=](int c) { return c == rank ? own : passing; };
  return Executor(env, settings, nullptr, nullptr, esize, nullptr, std::move(plan)).run();
}

int ring_scatter(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                 int dtype, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t block = count * esize;
  const int rank = env->rank, size = env->size;
  auto* dst = static_cast<std::byte*>(out);
  if (rank == root) {
    const auto* own = static_cast<const std::byte*>(in) + size_t(root) * block;
    if (dst != own) std::memcpy(dst, own, block);  // the core refused other overlaps
  }
  if (size == 1) return CHORUS_OK;
  Plan plan;
  plan.steps = scatter_steps(size);
  plan.step = [=](int u, bool) { return scatter_step(rank, size, root, u); };
  plan.forward_only = true;
  if (rank == root) {
    plan.chunk = [=](int c) { return Range{size_t(c) * count, count}; };
    auto* src = static_cast<std::byte*>(const_cast<void*>(in));  // only ever sent
    chorus_tp_mr_t* mr = nullptr;
    if (int rc = register_work(env, src, size_t(size) * block, &mr); rc != CHORUS_OK) return rc;
    return Executor(env, settings, src, mr, esize, nullptr, std::move(plan)).run();
  }
  // Off the root: the own block lands in the output; the blocks for ranks
  // further down the chain pass through scratch.
  const int beyond = size - 1 - mod(rank - root, size);
  std::byte* scratch = beyond > 0 ? scratch_buffer(size_t(beyond) * block) : nullptr;
  Place own{dst, nullptr}, passing{scratch, nullptr};
  if (int rc = register_work(env, dst, block, &own.mr); rc != CHORUS_OK) return rc;
  if (int rc = register_work(env, scratch, size_t(beyond) * block, &passing.mr); rc != CHORUS_OK)
    return rc;
  plan.chunk = [=](int c) {
    return c == rank ? Range{0, count}
                     : Range{size_t(scatter_slot(c, rank, size, root) - 1) * count, count};
  };
  plan.place = [=](int c) { return c == rank ? own : passing; };
  return Executor(env, settings, nullptr, nullptr, esize, nullptr, std::move(plan)).run();
}

/// The exchange part of all_to_all(v) over ring neighbours (ring_schedule.h,
/// a2a_step). `sent(o, d)` is the element count rank o sends rank d, known
/// on every rank (for all_to_allv after an all_gather of the send counts).
/// A block whose size disagrees with this rank's recv_counts lands in
/// scratch instead of the output, so the exchange stays matched on every
/// rank, and the call then fails with INVALID_ARGUMENT naming the pair.
int ring_exchange(const chorus_algo_env_v1_t* env, const Settings& settings, const std::byte* in,
                  const size_t* sc, const size_t* so, std::byte* out, const size_t* rc,
                  const size_t* ro, size_t esize, const std::function<size_t(int, int)>& sent) {
  const int rank = env->rank, size = env->size;
  std::memcpy(out + ro[rank] * esize, in + so[rank] * esize, sc[rank] * esize);
  if (size == 1) return CHORUS_OK;
  const int n = a2a_steps(size);
  std::vector<Step> steps(static_cast<size_t>(n));
  // Blocks in transit (and mismatched arrivals): element offset and count in
  // scratch, by step index.
  std::vector<Range> transit(static_cast<size_t>(n));
  size_t scratch_elems = 0;
  int mismatch_from = -1;
  for (int k = 0; k < n; ++k) {
    A2aStep a = a2a_step_at(rank, size, k);
    size_t c = sent(a.origin, a.dest);
    if (a.step.recv_chunk == size + a.origin && c != rc[a.origin]) {
      mismatch_from = a.origin;
      a.step.recv_chunk = 2 * size + k;
    }
    if (a.step.recv_chunk >= 2 * size) {
      transit[size_t(k)] = {scratch_elems, c};
      scratch_elems += c;
    }
    steps[size_t(k)] = a.step;
  }
  size_t in_end = 0, out_end = 0;
  for (int p = 0; p < size; ++p) {
    if (sc[p]) in_end = std::max(in_end, so[p] + sc[p]);
    if (rc[p]) out_end = std::max(out_end, ro[p] + rc[p]);
  }
  std::byte* scratch = scratch_buffer(scratch_elems * esize);
  Place from{const_cast<std::byte*>(in), nullptr}, to{out, nullptr}, passing{scratch, nullptr};
  if (int r = register_work(env, from.base, in_end * esize, &from.mr); r != CHORUS_OK) return r;
  if (int r = register_work(env, to.base, out_end * esize, &to.mr); r != CHORUS_OK) return r;
  if (int r = register_work(env, scratch, scratch_elems * esize, &passing.mr); r != CHORUS_OK)
    return r;
  Plan plan;
  plan.steps = n;
  plan.forward_only = true;
  plan.step = [&](int k, bool) { return steps[size_t(k)]; };
  plan.chunk = [&](int c) {
    if (c < size) return Range{so[c], sc[c]};
    if (c < 2 * size) return Range{ro[c - size], rc[c - size]};
    return transit[size_t(c - 2 * size)];
  };
  plan.place = [&](int c) { return c < size ? from : c < 2 * size ? to : passing; };
  if (int r = Executor(env, settings, nullptr, nullptr, esize, nullptr, std::move(plan)).run();
      r != CHORUS_OK)
    return r;
  if (mismatch_from >= 0)
    return fail(env, CHORUS_ERR_INVALID_ARGUMENT,
                "ring all_to_allv: rank " + std::to_string(mismatch_from) + " sends " +
                    std::to_string(sent(mismatch_from, rank)) + " elements to rank " +
                    std::to_string(rank) + " but its recv_counts[" + std::to_string(mismatch_from) +
                    "] is " + std::to_string(rc[mismatch_from]) +
                    "; send_counts[q] on rank p must equal recv_counts[p] on rank q (the block "
                    "was not stored)");
  return CHORUS_OK;
}

int ring_all_to_all(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t n = size_t(env->size);
  std::vector<size_t> counts(n, count), offsets(n);
  for (size_t p = 0; p < n; ++p) offsets[p] = p * count;
  const auto* src = static_cast<const std::byte*>(in);
  std::vector<std::byte> copy;
  if (in == out) {  // in place: blocks arriving must not land on blocks still to send
    copy.assign(src, src + n * count * esize);
    src = copy.data();
  }
  return ring_exchange(env, settings, src, counts.data(), offsets.data(),
                       static_cast<std::byte*>(out), counts.data(), offsets.data(), esize,
                       [count](int, int) { return count; });
}

int ring_all_to_allv(const chorus_algo_env_v1_t* env, const void* in, const size_t* send_counts,
                     const size_t* send_offsets, void* out, const size_t* recv_counts,
                     const size_t* recv_offsets, int dtype) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  const size_t n = size_t(env->size);
  // Ranks in between forward blocks whose sizes only their senders know:
  // every rank learns every rank's send counts first.
  std::vector<uint64_t> mine(send_counts, send_counts + n), all(n * n);
  if (n > 1)
    if (int rc = ring_all_gather(env, mine.data(), all.data(), n, CHORUS_UINT64); rc != CHORUS_OK)
      return rc;
  return ring_exchange(env, settings, static_cast<const std::byte*>(in), send_counts, send_offsets,
                       static_cast<std::byte*>(out), recv_counts, recv_offsets, esize,
                       [&](int o, int d) { return size_t(all[size_t(o) * n + size_t(d)]); });
}

/// Posts one message and progresses until it (and anything else) completes.
int one_message(const chorus_algo_env_v1_t* env, bool send, int peer, size_t slot) {
  chorus_tp_endpoint_t* ep = env->endpoint(env->core, peer, 0);
  if (!ep)
    return fail(env, CHORUS_ERR_INTERNAL, "ring: no endpoint to rank " + std::to_string(peer));
  void* buf = env->staging[slot];
  int rc = send ? env->tp->post_send(ep, buf, 1, env->staging_mr[slot], kSendBit)
                : env->tp->post_recv(ep, buf, 1, env->staging_mr[slot], 0);
  if (rc != CHORUS_OK)
    return fail(env, rc,
                std::string("ring barrier: post to rank ") + std::to_string(peer) +
                    " failed: " + env->tp->last_error());
  chorus_tp_completion_t c;
  int n = env->progress(env->core, &c, 1);
  return n < 0 ? n : CHORUS_OK;
}

/// Two laps of a one-byte token: after the first, rank 0 knows everyone has
/// arrived; the second lap releases the ranks.
int ring_barrier(const chorus_algo_env_v1_t* env) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  if (env->size == 1) return CHORUS_OK;
  int right = mod(env->rank + 1, env->size);
  int left = mod(env->rank - 1, env->size);
  static_cast<std::byte*>(env->staging[1])[0] = std::byte{1};
  for (int lap = 0; lap < 2; ++lap) {
    if (env->rank == 0) {
      if (int rc = one_message(env, true, right, 1); rc != CHORUS_OK) return rc;
      if (int rc = one_message(env, false, left, 0); rc != CHORUS_OK) return rc;
    } else {
      if (int rc = one_message(env, false, left, 0); rc != CHORUS_OK) return rc;
      if (int rc = one_message(env, true, right, 1); rc != CHORUS_OK) return rc;
    }
  }
  return CHORUS_OK;
}

int ring_init(const chorus_host_v1_t* host) {
  g_host = host;
  return CHORUS_OK;
}

/// Ring is the bandwidth algorithm: it moves 2(n-1)/n of the data per rank
/// but pays 2(n-1) latencies, so it prefers large messages.
int ring_preference(int collective, int size, uint64_t bytes) {
  (void)collective;
  (void)size;
  return bytes >= (64u << 10) ? 100 : 50;
}

}  // namespace
}  // namespace chorus::ring

extern "C" __attribute__((visibility("default")))
const chorus_algorithm_plugin_v1_t chorus_algorithm_plugin_v1 = {
    sizeof(chorus_algorithm_plugin_v1_t),
    CHORUS_ALGORITHM_ABI_MINOR,
    "ring",
    CHORUS_ALGO_PEERS_RING,
    CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS,
    chorus::ring::ring_init,
    nullptr,
    chorus::ring::ring_preference,
    chorus::ring::ring_all_reduce,
    chorus::ring::ring_all_gather,
    chorus::ring::ring_reduce_scatter,
    chorus::ring::ring_broadcast,
    chorus::ring::ring_barrier,
    chorus::ring::ring_reduce,
    chorus::ring::ring_gather,
    chorus::ring::ring_scatter,
    chorus::ring::ring_all_to_all,
    chorus::ring::ring_all_to_allv,
};
