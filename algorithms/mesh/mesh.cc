// The built-in mesh algorithm, written only against the algorithm ABI.
//
// Every pair of ranks is connected (CHORUS_ALGO_PEERS_ALL), so data goes
// straight to the rank that needs it, in the style of JACCL's mesh:
//  - all_reduce up to `one_shot_max` bytes: every rank sends its whole input
//    to every peer and reduces all of it itself (one message latency);
//  - larger all_reduce: reduce-scatter then all-gather, rank r owning chunk r;
//  - reduce_scatter, all_gather and broadcast are those halves alone;
//  - barrier: a dissemination barrier of one-byte tokens.
// Every reduction applies the contributions in rank order 0..size-1, so every
// rank ends with bitwise-identical results, run after run.
//
// One executor runs every collective except the barrier over the exchanges
// of mesh_schedule.h. Each channel is a lane carrying its own slice of every
// range over its own endpoints and its own staging cells, so lanes never
// touch each other's memory. A transfer is cut into pieces; contributions
// land in staging cells (one per peer for a piece in flight, several pieces
// in flight per lane) and are reduced as soon as a piece has arrived from
// every peer, which frees its cells for a later piece and lets the reduced
// piece go out to the gather phase at once.
#include <chorus/algorithm.h>

#include "algorithms/mesh/mesh_schedule.h"
#include "algorithms/mesh/mesh_settings.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace chorus::mesh {
namespace {

constexpr size_t kMaxCompletions = 64;

int fail(const chorus_algo_env_v1_t* env, int status, const std::string& message) {
  return env->fail(env->core, status, message.c_str());
}

int load_settings(const chorus_algo_env_v1_t* env, Settings& settings) {
  std::string error;
  if (!parse_settings(env->config, env->config_count, settings, error))
    return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "mesh: " + error);
  return CHORUS_OK;
}

/// Registers caller memory for posts (a no-op for transports without
/// registration). The core deregisters at the end of the call.
int register_buffer(const chorus_algo_env_v1_t* env, const void* buf, size_t bytes,
                    chorus_tp_mr_t** mr) {
  *mr = nullptr;
  if (bytes == 0) return CHORUS_OK;
  return env->mem_register(env->core, buf, bytes, mr);
}

/// One collective call as the executor sees it.
struct Call {
  Kind kind = Kind::kAllGather;
  int root = 0;
  size_t count = 0;
  size_t esize = 1;
  /// Contributions are read from here (reduce_send ranges, own contribution).
  const std::byte* src = nullptr;
  chorus_tp_mr_t* src_mr = nullptr;
  /// Results and gathered data live here.
  std::byte* dst = nullptr;
  chorus_tp_mr_t* dst_mr = nullptr;
  chorus_reduce_fn_t kernel = nullptr;
  /// all_gather with a separate input: the own block is sent from `in`
  /// (starting at element `own_offset` of dst) and copied into dst only
  /// after the first posts, so the copy overlaps the peers' reads.
  const std::byte* own_in = nullptr;
  chorus_tp_mr_t* own_in_mr = nullptr;
  size_t own_offset = 0;
  /// Gather-part sends read from here instead of `dst` when set: the input
  /// of gather (off the root), scatter (on the root) and all_to_all(v).
  const std::byte* gather_src = nullptr;
  chorus_tp_mr_t* gather_src_mr = nullptr;
  /// all_to_all(v): per-peer element counts and offsets (one entry per rank).
  const size_t* send_counts = nullptr;
  const size_t* send_offsets = nullptr;
  const size_t* recv_counts = nullptr;
  const size_t* recv_offsets = nullptr;
};

class Executor {
 public:
  Executor(const chorus_algo_env_v1_t* env, const Call& call) : env_(env), call_(call) {}
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// After a failure, receives into the temporary cells may still be posted
  /// until the core closes the endpoints, which happens only after this call
  /// returns; a transport that writes asynchronously (verbs DMA) could land
  /// one in freed memory. The communicator is broken by then, so the buffer
  /// is deliberately left allocated rather than risk that.
  ~Executor() {
    if (!temp_) return;
    for (const Lane& lane : lanes_)
      for (const Stream& s : lane.streams)
        if (s.recv_posted > s.recv_done) {
          static_cast<void>(temp_.release());
          return;
        }
  }

  int run() {
    if (int rc = setup(); rc != CHORUS_OK) return rc;
    chorus_tp_completion_t comps[kMaxCompletions];
    bool own_copied = call_.own_in == nullptr;
    for (;;) {
      bool done = true;
      bool outstanding = false;
      for (auto& lane : lanes_) {
        for (auto& s : lane.streams) {
          if (!s.ep) continue;
          if (int rc = pump(lane, s); rc != CHORUS_OK) return rc;
          done = done && s.send_done == s.send_total() && s.recv_done == s.recv_total();
          outstanding = outstanding || s.send_posted > s.send_done || s.recv_posted > s.recv_done;
        }
        done = done && lane.reduced == lane.pieces;
      }
      if (!own_copied) {
        // Every first receive and send is posted: copy the own block while
        // the peers fetch theirs (with CMA or RDMA they read `in` directly).
        std::memcpy(call_.dst + call_.own_offset * call_.esize, call_.own_in,
                    call_.count * call_.esize);
        own_copied = true;
      }
      if (done) return CHORUS_OK;
      if (!outstanding)
        return fail(env_, CHORUS_ERR_INTERNAL, "mesh: schedule stalled with nothing in flight");
      int n = env_->progress(env_->core, comps, kMaxCompletions);
      if (n < 0) return n;
      for (int i = 0; i < n; ++i)
        if (int rc = complete(comps[i]); rc != CHORUS_OK) return rc;
      for (auto& lane : lanes_)
        if (int rc = try_reduce(lane); rc != CHORUS_OK) return rc;
    }
  }

 private:
  /// The traffic of one endpoint (one lane to one peer). Sends go out as
  /// [reduce pieces][gather pieces]; receives are expected in the same shape.
  struct Stream {
    int peer = -1;
    chorus_tp_endpoint_t* ep = nullptr;
    Range reduce_send, reduce_recv, gather_send, gather_recv;  // lane slices
    size_t reduce_send_n = 0, gather_send_n = 0;
    size_t reduce_recv_n = 0, gather_recv_n = 0;
    size_t send_posted = 0, send_done = 0;
    size_t recv_posted = 0, recv_done = 0;

    size_t send_total() const { return reduce_send_n + gather_send_n; }
    size_t recv_total() const { return reduce_recv_n + gather_recv_n; }
  };
  struct Lane {
    int id = 0;
    Range own;     // this lane's slice of the own contribution (in src)
    Range result;  // this lane's slice of the reduction result (in dst)
    size_t pieces = 0;
    size_t reduced = 0;           // leading pieces reduced
    std::vector<int> landed;      // per group: contributions landed for its piece
    std::vector<Stream> streams;  // indexed by peer rank; the own entry stays idle
  };

  int setup() {
    const int size = env_->size;
    const int rank = env_->rank;
    const size_t esize = call_.esize;
    reducing_ = reduces(call_.kind);
    uint64_t max_msg = env_->caps->max_message_size ? env_->caps->max_message_size : UINT64_MAX;
    int lanes = std::max(1, std::min(env_->channels, kMaxLanes));
    if (size - 1 > kMaxPeerRank)
      return fail(env_, CHORUS_ERR_NOT_SUPPORTED,
                  "mesh: more ranks than work-request ids can name");
    if (reducing_) {
      layout_ = cell_layout(env_->staging_slots, env_->staging_slot_size, lanes, size - 1, max_msg);
      lanes = layout_.lanes;
      piece_bytes_ = layout_.piece_bytes;
      if (layout_.temporary) {
        // Staging too small for size-1 cells per piece in flight: one buffer
        // of this call, registered like caller memory.
        size_t bytes = layout_.cells() * layout_.piece_bytes;
        temp_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
        if (int rc = register_buffer(env_, temp_.get(), bytes, &temp_mr_); rc != CHORUS_OK)
          return rc;
      }
    } else {
      piece_bytes_ = direct_piece_bytes(env_->staging_slot_size, max_msg, esize);
    }
    piece_ = piece_bytes_ / esize;
    if (piece_ == 0)
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "mesh: transport messages are smaller than one element");

    // An in-place all_reduce reads and writes the same buffer: the own
    // contribution must be saved before rank 0's is stored over it, results
    // must not overwrite data still being sent, and gathered chunks must not
    // land where a send of this call may still read.
    bool in_place = reducing_ && static_cast<const void*>(call_.dst) == call_.src;
    save_own_ = in_place && rank != 0;
    gate_reduce_on_sends_ = in_place && call_.kind == Kind::kAllReduceOneShot;
    gate_gather_on_sends_ = in_place;

    send_window_ = std::max<size_t>(1, env_->caps->max_outstanding_sends);
    recv_window_ = std::max<size_t>(1, env_->caps->max_outstanding_recvs);

    Reduction red = reduction(call_.kind, rank, size, call_.count, call_.root);
    lanes_.resize(size_t(lanes));
    for (int l = 0; l < lanes; ++l) {
      Lane& lane = lanes_[size_t(l)];
      lane.id = l;
      if (reducing_) {
        lane.own = lane_slice(red.own, lanes, l);
        lane.result = lane_slice(red.result, lanes, l);
        lane.pieces = piece_count(lane.result.count, piece_);
        lane.landed.assign(layout_.groups, 0);
      }
      lane.streams.resize(size_t(size));
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        Stream& s = lane.streams[size_t(p)];
        Exchange x = call_.kind == Kind::kAllToAll
                         ? all_to_all_exchange(call_.send_offsets[p], call_.send_counts[p],
                                               call_.recv_offsets[p], call_.recv_counts[p])
                         : exchange(call_.kind, rank, size, p, call_.count, call_.root);
        s.peer = p;
        s.reduce_send = lane_slice(x.reduce_send, lanes, l);
        s.reduce_recv = lane_slice(x.reduce_recv, lanes, l);
        s.gather_send = lane_slice(x.gather_send, lanes, l);
        s.gather_recv = lane_slice(x.gather_recv, lanes, l);
        s.reduce_send_n = piece_count(s.reduce_send.count, piece_);
        s.reduce_recv_n = piece_count(s.reduce_recv.count, piece_);
        s.gather_send_n = piece_count(s.gather_send.count, piece_);
        s.gather_recv_n = piece_count(s.gather_recv.count, piece_);
        if (s.send_total() == 0 && s.recv_total() == 0) continue;  // ep stays NULL: idle
        s.ep = env_->endpoint(env_->core, p, l);
        if (!s.ep)
          return fail(env_, CHORUS_ERR_INTERNAL,
                      "mesh: no endpoint to rank " + std::to_string(p) + " on channel " +
                          std::to_string(l) + "; the mesh needs every pair of ranks connected");
      }
    }
    if (save_own_) {
      // One piece of the own contribution at a time, at most a lane's
      // result: an 8-byte call must not allocate (let alone clear) a whole
      // staging slot.
      size_t largest = 0;
      for (const Lane& lane : lanes_) largest = std::max(largest, lane.result.count * esize);
      own_copy_ = std::make_unique_for_overwrite<std::byte[]>(std::min(piece_bytes_, largest));
    }
    return CHORUS_OK;
  }

  std::byte* cell(const Lane& lane, size_t group, int peer, chorus_tp_mr_t** mr) {
    CellPlace at =
        cell_place(layout_, cell_index(layout_, lane.id, group, peer_index(env_->rank, peer)));
    if (layout_.temporary) {
      *mr = temp_mr_;
      return temp_.get() + at.offset;
    }
    *mr = env_->staging_mr[at.slot];
    return static_cast<std::byte*>(env_->staging[at.slot]) + at.offset;
  }

  /// Posts what the windows, the free cells and the data dependencies allow
  /// on one endpoint. Receives first, so the peer's sends find a buffer.
  int pump(Lane& lane, Stream& s) {
    const auto* tp = env_->tp;
    const size_t es = call_.esize;
    while (s.recv_posted < s.recv_total() && s.recv_posted - s.recv_done < recv_window_) {
      size_t idx = s.recv_posted;
      std::byte* buf;
      chorus_tp_mr_t* mr;
      Range r;
      if (idx < s.reduce_recv_n) {
        if (idx >= lane.reduced + layout_.groups) break;  // its cells still hold an older piece
        r = piece_of(s.reduce_recv, piece_, idx);
        buf = cell(lane, idx % layout_.groups, s.peer, &mr);
      } else {
        if (gate_gather_on_sends_ && s.send_done < s.reduce_send_n) break;
        r = piece_of(s.gather_recv, piece_, idx - s.reduce_recv_n);
        buf = call_.dst + r.offset * es;
        mr = call_.dst_mr;
      }
      uint64_t wr = pack({false, lane.id, s.peer, uint32_t(idx)});
      int rc = tp->post_recv(s.ep, buf, r.count * es, mr, wr);
      if (rc == CHORUS_ERR_AGAIN) break;
      if (rc != CHORUS_OK)
        return fail(
            env_, rc,
            "mesh: post_recv from rank " + std::to_string(s.peer) + " failed: " + tp->last_error());
      ++s.recv_posted;
    }
    while (s.send_posted < s.send_total() && s.send_posted - s.send_done < send_window_) {
      size_t idx = s.send_posted;
      const std::byte* buf;
      chorus_tp_mr_t* mr;
      Range r;
      if (idx < s.reduce_send_n) {
        r = piece_of(s.reduce_send, piece_, idx);
        buf = call_.src + r.offset * es;
        mr = call_.src_mr;
      } else {
        size_t k = idx - s.reduce_send_n;
        if (reducing_ && k >= lane.reduced) break;  // this piece is not reduced yet
        r = piece_of(s.gather_send, piece_, k);
        buf = (call_.gather_src ? call_.gather_src : call_.dst) + r.offset * es;
        mr = call_.gather_src ? call_.gather_src_mr : call_.dst_mr;
        if (call_.own_in && r.offset >= call_.own_offset &&
            r.offset < call_.own_offset + call_.count) {
          buf = call_.own_in + (r.offset - call_.own_offset) * es;
          mr = call_.own_in_mr;
        }
      }
      uint64_t wr = pack({true, lane.id, s.peer, uint32_t(idx)});
      int rc = tp->post_send(s.ep, buf, r.count * es, mr, wr);
      if (rc == CHORUS_ERR_AGAIN) break;
      if (rc != CHORUS_OK)
        return fail(
            env_, rc,
            "mesh: post_send to rank " + std::to_string(s.peer) + " failed: " + tp->last_error());
      ++s.send_posted;
    }
    return CHORUS_OK;
  }

  int complete(const chorus_tp_completion_t& c) {
    WrId w = unpack(c.wr_id);
    if (w.lane >= int(lanes_.size()) || w.peer >= env_->size || w.peer == env_->rank ||
        !lanes_[size_t(w.lane)].streams[size_t(w.peer)].ep)
      return fail(
          env_, CHORUS_ERR_INTERNAL,
          "mesh: completion for an unknown endpoint (wr_id " + std::to_string(c.wr_id) + ")");
    Lane& lane = lanes_[size_t(w.lane)];
    Stream& s = lane.streams[size_t(w.peer)];
    size_t& done = w.send ? s.send_done : s.recv_done;
    if (w.seq != uint32_t(done) || done >= (w.send ? s.send_posted : s.recv_posted))
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "mesh: completions from rank " + std::to_string(w.peer) + " out of post order");
    size_t idx = done++;
    if (w.send) return CHORUS_OK;
    Range r = idx < s.reduce_recv_n ? piece_of(s.reduce_recv, piece_, idx)
                                    : piece_of(s.gather_recv, piece_, idx - s.reduce_recv_n);
    // INTERNAL, not INVALID_ARGUMENT: traffic has flowed, so the core must
    // mark the communicator broken (as the ring does for the same case).
    if (c.byte_len != r.count * call_.esize)
      return fail(env_, CHORUS_ERR_INTERNAL,
                  "mesh: received " + std::to_string(c.byte_len) + " bytes from rank " +
                      std::to_string(w.peer) + " where " + std::to_string(r.count * call_.esize) +
                      " were expected; do all ranks pass the same count and dtype, and the same "
                      "algorithm.mesh settings (for all_to_allv: send_counts[" +
                      std::to_string(env_->rank) + "] on rank " + std::to_string(w.peer) +
                      " must equal recv_counts[" + std::to_string(w.peer) + "] here)?");
    if (idx < s.reduce_recv_n) ++lane.landed[idx % layout_.groups];
    return CHORUS_OK;
  }

  /// Reduces, in piece order, every piece whose contributions have all
  /// landed (and, in place, whose memory no send still reads).
  int try_reduce(Lane& lane) {
    const int size = env_->size;
    const int rank = env_->rank;
    const size_t es = call_.esize;
    while (lane.reduced < lane.pieces) {
      size_t k = lane.reduced;
      size_t group = k % layout_.groups;
      if (lane.landed[group] != size - 1) return CHORUS_OK;
      if (gate_reduce_on_sends_)
        for (const Stream& s : lane.streams)
          if (s.ep && s.send_done <= k) return CHORUS_OK;
      Range res = piece_of(lane.result, piece_, k);
      Range own = piece_of(lane.own, piece_, k);
      std::byte* out = call_.dst + res.offset * es;
      const std::byte* mine = call_.src + own.offset * es;
      size_t bytes = res.count * es;
      if (save_own_) {
        std::memcpy(own_copy_.get(), mine, bytes);
        mine = own_copy_.get();
      }
      auto contribution = [&](int j) -> const std::byte* {
        if (j == rank) return mine;
        chorus_tp_mr_t* unused;
        return cell(lane, group, j, &unused);
      };
      reduce_in_rank_order(
          size,
          [&](int j) {
            const std::byte* c = contribution(j);
            if (c != out) std::memcpy(out, c, bytes);
          },
          [&](int j) { call_.kernel(contribution(j), out, res.count); });
      lane.landed[group] = 0;
      ++lane.reduced;
    }
    return CHORUS_OK;
  }

  const chorus_algo_env_v1_t* env_;
  Call call_;
  bool reducing_ = false;
  bool save_own_ = false;
  bool gate_reduce_on_sends_ = false;
  bool gate_gather_on_sends_ = false;
  CellLayout layout_;
  size_t piece_bytes_ = 0;
  size_t piece_ = 1;  // elements per piece
  size_t send_window_ = 1, recv_window_ = 1;
  std::vector<Lane> lanes_;
  std::unique_ptr<std::byte[]> temp_;
  chorus_tp_mr_t* temp_mr_ = nullptr;
  std::unique_ptr<std::byte[]> own_copy_;
};

int mesh_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype, int op) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  if (env->size == 1) {
    if (in != out) std::memmove(out, in, count * esize);
    return CHORUS_OK;
  }
  Call call;
  call.kernel = env->reduce_kernel(dtype, op);
  if (!call.kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  size_t bytes = count * esize;
  call.kind = bytes <= settings.one_shot_max ? Kind::kAllReduceOneShot : Kind::kAllReduce;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(in);
  call.dst = static_cast<std::byte*>(out);
  if (int rc = register_buffer(env, in, bytes, &call.src_mr); rc != CHORUS_OK) return rc;
  // One shot only reads `in` on the wire; the two-phase form also sends and
  // receives finished chunks in `out`.
  if (call.kind == Kind::kAllReduce) {
    call.dst_mr = call.src_mr;
    if (in != out)
      if (int rc = register_buffer(env, out, bytes, &call.dst_mr); rc != CHORUS_OK) return rc;
  }
  return Executor(env, call).run();
}

int mesh_reduce_scatter(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                        int dtype, int op) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  if (env->size == 1) {
    std::memmove(out, in, count * esize);
    return CHORUS_OK;
  }
  Call call;
  call.kernel = env->reduce_kernel(dtype, op);
  if (!call.kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  call.kind = Kind::kReduceScatter;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(in);
  call.dst = static_cast<std::byte*>(out);  // written by the reduction only, never by the transport
  if (int rc = register_buffer(env, in, size_t(env->size) * count * esize, &call.src_mr);
      rc != CHORUS_OK)
    return rc;
  return Executor(env, call).run();
}

int mesh_all_gather(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  auto* base = static_cast<std::byte*>(out);
  const size_t total = size_t(env->size) * count * esize;
  std::byte* mine = base + size_t(env->rank) * count * esize;
  const auto* src = static_cast<const std::byte*>(in);
  // An input inside the output (other than in place) could be overwritten
  // by a receive before it is sent: copy it first, as for one rank.
  const auto at = reinterpret_cast<std::uintptr_t>(src);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const bool overlaps = at + count * esize > lo && at < lo + total;
  if (in != mine && (overlaps || env->size == 1)) std::memmove(mine, in, count * esize);
  if (env->size == 1) return CHORUS_OK;
  Call call;
  call.kind = Kind::kAllGather;
  call.count = count;
  call.esize = esize;
  call.dst = base;
  if (int rc = register_buffer(env, out, total, &call.dst_mr); rc != CHORUS_OK) return rc;
  if (!overlaps) {
    call.own_in = src;
    call.own_offset = size_t(env->rank) * count;
    if (int rc = register_buffer(env, in, count * esize, &call.own_in_mr); rc != CHORUS_OK)
      return rc;
  }
  return Executor(env, call).run();
}

int mesh_broadcast(const chorus_algo_env_v1_t* env, void* buf, size_t count, int dtype, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0 || env->size == 1) return CHORUS_OK;
  Call call;
  call.kind = Kind::kBroadcast;
  call.root = root;
  call.count = count;
  call.esize = esize;
  call.dst = static_cast<std::byte*>(buf);
  if (int rc = register_buffer(env, buf, count * esize, &call.dst_mr); rc != CHORUS_OK) return rc;
  return Executor(env, call).run();
}

/// Scratch for the partial results of a two-phase reduce off the root, kept
/// per thread and grown on demand (fresh pages cost a fault each; a thread
/// runs one collective at a time).
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

/// Reduce to a root. Up to one_shot_max bytes every other rank sends its
/// whole input to the root, which reduces all of it in rank order (one
/// message latency); above, a reduce-scatter over `size` chunks (rank r
/// reducing chunk r, as in all_reduce) whose chunks then go to the root
/// alone, so no link carries more than the all_reduce's first half.
int mesh_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int op, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t bytes = count * esize;
  if (env->size == 1) {
    if (in != out) std::memmove(out, in, bytes);
    return CHORUS_OK;
  }
  Call call;
  call.kernel = env->reduce_kernel(dtype, op);
  if (!call.kernel) return fail(env, CHORUS_ERR_INVALID_ARGUMENT, "mesh: no kernel for dtype/op");
  call.kind = bytes <= settings.one_shot_max ? Kind::kReduceOneShot : Kind::kReduce;
  call.root = root;
  call.count = count;
  call.esize = esize;
  call.src = static_cast<const std::byte*>(in);
  if (int rc = register_buffer(env, in, bytes, &call.src_mr); rc != CHORUS_OK) return rc;
  const bool is_root = env->rank == root;
  if (call.kind == Kind::kReduceOneShot) {
    // Only the root reduces, on the CPU: its output is never on the wire.
    call.dst = is_root ? static_cast<std::byte*>(out) : nullptr;
  } else {
    // Off the root the reduced chunk waits in scratch until it goes out.
    call.dst = is_root ? static_cast<std::byte*>(out) : scratch_buffer(bytes);
    call.dst_mr = call.src_mr;
    if (static_cast<const void*>(call.dst) != in)
      if (int rc = register_buffer(env, call.dst, bytes, &call.dst_mr); rc != CHORUS_OK) return rc;
  }
  return Executor(env, call).run();
}

int mesh_gather(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t block = count * esize;
  const bool is_root = env->rank == root;
  if (is_root) {
    std::byte* own = static_cast<std::byte*>(out) + size_t(root) * block;
    if (in != own) std::memcpy(own, in, block);  // the core refused other overlaps
  }
  if (env->size == 1) return CHORUS_OK;
  Call call;
  call.kind = Kind::kGather;
  call.root = root;
  call.count = count;
  call.esize = esize;
  if (is_root) {
    call.dst = static_cast<std::byte*>(out);
    if (int rc = register_buffer(env, out, size_t(env->size) * block, &call.dst_mr);
        rc != CHORUS_OK)
      return rc;
  } else {
    call.gather_src = static_cast<const std::byte*>(in);
    if (int rc = register_buffer(env, in, block, &call.gather_src_mr); rc != CHORUS_OK) return rc;
  }
  return Executor(env, call).run();
}

int mesh_scatter(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                 int dtype, int root) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  size_t esize = chorus_dtype_size(dtype);
  if (count == 0) return CHORUS_OK;
  const size_t block = count * esize;
  const bool is_root = env->rank == root;
  if (is_root) {
    const auto* own = static_cast<const std::byte*>(in) + size_t(root) * block;
    if (out != own) std::memcpy(out, own, block);  // the core refused other overlaps
  }
  if (env->size == 1) return CHORUS_OK;
  Call call;
  call.kind = Kind::kScatter;
  call.root = root;
  call.count = count;
  call.esize = esize;
  if (is_root) {
    call.gather_src = static_cast<const std::byte*>(in);
    if (int rc = register_buffer(env, in, size_t(env->size) * block, &call.gather_src_mr);
        rc != CHORUS_OK)
      return rc;
  } else {
    call.dst = static_cast<std::byte*>(out);
    if (int rc = register_buffer(env, out, block, &call.dst_mr); rc != CHORUS_OK) return rc;
  }
  return Executor(env, call).run();
}

/// all_to_all(v): every block goes straight to its rank, all peers at once.
int mesh_exchange(const chorus_algo_env_v1_t* env, const std::byte* in, const size_t* sc,
                  const size_t* so, std::byte* out, const size_t* rc, const size_t* ro,
                  size_t esize) {
  const int rank = env->rank, size = env->size;
  std::memcpy(out + ro[rank] * esize, in + so[rank] * esize, sc[rank] * esize);
  if (size == 1) return CHORUS_OK;
  size_t in_end = 0, out_end = 0;
  for (int p = 0; p < size; ++p) {
    if (sc[p]) in_end = std::max(in_end, so[p] + sc[p]);
    if (rc[p]) out_end = std::max(out_end, ro[p] + rc[p]);
  }
  Call call;
  call.kind = Kind::kAllToAll;
  call.esize = esize;
  call.gather_src = in;
  call.dst = out;
  call.send_counts = sc;
  call.send_offsets = so;
  call.recv_counts = rc;
  call.recv_offsets = ro;
  if (int r = register_buffer(env, in, in_end * esize, &call.gather_src_mr); r != CHORUS_OK)
    return r;
  if (int r = register_buffer(env, out, out_end * esize, &call.dst_mr); r != CHORUS_OK) return r;
  return Executor(env, call).run();
}

int mesh_all_to_all(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
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
  return mesh_exchange(env, src, counts.data(), offsets.data(), static_cast<std::byte*>(out),
                       counts.data(), offsets.data(), esize);
}

int mesh_all_to_allv(const chorus_algo_env_v1_t* env, const void* in, const size_t* send_counts,
                     const size_t* send_offsets, void* out, const size_t* recv_counts,
                     const size_t* recv_offsets, int dtype) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  return mesh_exchange(env, static_cast<const std::byte*>(in), send_counts, send_offsets,
                       static_cast<std::byte*>(out), recv_counts, recv_offsets,
                       chorus_dtype_size(dtype));
}

/// Dissemination barrier (mesh_schedule.h): all receives are posted up front
/// (each round hears from distinct peers, one token per endpoint per
/// barrier); round k's tokens go out once every earlier round's have landed.
/// Returns only when its own sends have completed too, so no completion of
/// this call is left for the next one.
int mesh_barrier(const chorus_algo_env_v1_t* env) {
  Settings settings;
  if (int rc = load_settings(env, settings); rc != CHORUS_OK) return rc;
  const int size = env->size;
  const int rank = env->rank;
  if (size == 1) return CHORUS_OK;
  const int radix = settings.barrier_radix ? settings.barrier_radix : default_barrier_radix(size);
  const int rounds = barrier_rounds(size, radix);

  struct Post {
    bool send;
    int peer;
    int round;
  };
  std::vector<Post> posts;  // in posting order: every receive, then sends by round
  std::vector<int> recv_left(size_t(rounds), 0);
  for (int k = 0; k < rounds; ++k)
    for (int j = 1; j < radix; ++j)
      if (int d = barrier_distance(size, radix, k, j); d > 0) {
        posts.push_back({false, mod(rank - d, size), k});
        ++recv_left[size_t(k)];
      }
  for (int k = 0; k < rounds; ++k)
    for (int j = 1; j < radix; ++j)
      if (int d = barrier_distance(size, radix, k, j); d > 0)
        posts.push_back({true, mod(rank + d, size), k});

  auto* tokens = static_cast<std::byte*>(env->staging[0]);
  auto* token = static_cast<std::byte*>(env->staging[1]);
  token[0] = std::byte{1};
  size_t next = 0, outstanding = 0, recv_index = 0;
  int rounds_done = 0;  // leading rounds whose tokens have all landed
  chorus_tp_completion_t comps[kMaxCompletions];
  for (;;) {
    while (rounds_done < rounds && recv_left[size_t(rounds_done)] == 0) ++rounds_done;
    while (next < posts.size()) {
      const Post& p = posts[next];
      if (p.send && p.round > rounds_done) break;
      chorus_tp_endpoint_t* ep = env->endpoint(env->core, p.peer, 0);
      if (!ep)
        return fail(env, CHORUS_ERR_INTERNAL,
                    "mesh barrier: no endpoint to rank " + std::to_string(p.peer));
      uint64_t wr = pack({p.send, 0, p.peer, uint32_t(p.round)});
      int rc;
      if (p.send) {
        rc = env->tp->post_send(ep, token, 1, env->staging_mr[1], wr);
      } else {
        size_t at = recv_index % env->staging_slot_size;
        rc = env->tp->post_recv(ep, tokens + at, 1, env->staging_mr[0], wr);
      }
      if (rc == CHORUS_ERR_AGAIN) break;
      if (rc != CHORUS_OK)
        return fail(env, rc,
                    std::string("mesh barrier: post to rank ") + std::to_string(p.peer) +
                        " failed: " + env->tp->last_error());
      if (!p.send) ++recv_index;
      ++next;
      ++outstanding;
    }
    if (next == posts.size() && outstanding == 0) return CHORUS_OK;
    if (outstanding == 0)
      return fail(env, CHORUS_ERR_INTERNAL, "mesh barrier: stalled with nothing in flight");
    int n = env->progress(env->core, comps, kMaxCompletions);
    if (n < 0) return n;
    for (int i = 0; i < n; ++i) {
      WrId w = unpack(comps[i].wr_id);
      if (w.seq >= uint32_t(rounds))
        return fail(env, CHORUS_ERR_INTERNAL, "mesh barrier: completion for an unknown round");
      --outstanding;
      if (!w.send) --recv_left[w.seq];
    }
  }
}

int mesh_init(const chorus_host_v1_t*) { return CHORUS_OK; }

/// The mesh is the latency algorithm: one message latency for small
/// all_reduce (one shot) and for the barrier, where the ring pays 2(size-1).
/// On few ranks its concurrent streams also carry mid-size and, for
/// reduce_scatter, large messages faster than the ring.
///
/// Up to this many ranks the mesh's thresholds below were measured
/// (bench/tune.sh, docs/tuning.md); above it every rank would keep n-1
/// streams busy per piece, which was not measured, so the older, ring-leaning
/// thresholds apply there.
constexpr int kMeasuredRanks = 8;

int mesh_preference(int collective, int size, uint64_t bytes) {
  if (collective == CHORUS_COLL_BARRIER) return 150;
  constexpr int kMesh = 150, kRing = 10;  // ring answers 50 (small) or 100
  // Rooted collectives and all_to_all(v) go straight to the ranks that need
  // the data: the ring has to forward every block through the ranks in
  // between (all_to_all: size/2 times the traffic per link), and the chain of
  // its rooted schedules pays size - 1 latencies. The mesh is never worse in
  // traffic per link, so it is always the automatic choice for them.
  if (collective >= CHORUS_COLL_REDUCE) return kMesh;
  const bool measured = size <= kMeasuredRanks;
  switch (collective) {
    case CHORUS_COLL_REDUCE_SCATTER:
      // Same (n-1)/n traffic as the ring, but to all peers at once and each
      // partial sum reduced once: 1.2-3x the ring from 1 MiB to 64 MiB at 4
      // ranks over tcp and shm (up to 16 MiB per rank), so the mesh up to
      // 64 MiB per rank; the ring stays the bandwidth pick beyond, which is
      // also what algorithm.switch_bytes selects from its threshold up.
      return bytes <= (measured ? (64u << 20) : (1u << 20)) ? kMesh : kRing;
    case CHORUS_COLL_ALL_GATHER:
      // The mesh's concurrent streams win up to about 1 MiB per rank; above,
      // tcp results split between the two.
      return bytes <= (1u << 20) ? kMesh : kRing;
    default:
      // all_reduce: one shot up to one_shot_max, then reduce-scatter +
      // all-gather over the mesh, which beat the ring at 4 MiB (1.4-2.5x)
      // and tied it from 256 KiB; the ring wins again at 64 MiB.
      return bytes <= (measured ? (4u << 20) : (64u << 10)) ? kMesh : kRing;
  }
}

}  // namespace
}  // namespace chorus::mesh

extern "C" __attribute__((visibility("default")))
const chorus_algorithm_plugin_v1_t chorus_algorithm_plugin_v1 = {
    sizeof(chorus_algorithm_plugin_v1_t),
    CHORUS_ALGORITHM_ABI_MINOR,
    "mesh",
    CHORUS_ALGO_PEERS_ALL,
    CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS,
    chorus::mesh::mesh_init,
    nullptr,
    chorus::mesh::mesh_preference,
    chorus::mesh::mesh_all_reduce,
    chorus::mesh::mesh_all_gather,
    chorus::mesh::mesh_reduce_scatter,
    chorus::mesh::mesh_broadcast,
    chorus::mesh::mesh_barrier,
    chorus::mesh::mesh_reduce,
    chorus::mesh::mesh_gather,
    chorus::mesh::mesh_scatter,
    chorus::mesh::mesh_all_to_all,
    chorus::mesh::mesh_all_to_allv,
};
