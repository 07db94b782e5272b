/**
 * @file chorus/algorithm_sdk.hpp
 * @brief Helpers for writing an algorithm ABI v2 plugin in C++ (header-only,
 * part of Chorus::plugin_sdk).
 *
 * What every algorithm repeats, written once:
 *  - WrId: packing (send or receive, peer, index) into the 56 wr_id bits a
 *    task owns, and reading them back from a completion;
 *  - Poster: an ordered list of posts that posts as much as the transport
 *    takes, keeps the rest after CHORUS_ERR_AGAIN and posts it on the next
 *    pump(), and counts what is outstanding;
 *  - pipelines over staging slots: try_post (one post, AGAIN told apart),
 *    in_place_post_bytes (how large a post of unstaged data may be),
 *    LaneWrId (lane and sequence in a wr_id), Flow (posted / done / window
 *    of one direction of a lane), SlotPool (a lane's share of the staging
 *    slots), PostedQueue (what a lane awaits, in completion order) and
 *    ScratchPool (scratch memory recycled between a communicator's tasks);
 *  - TaskPool: a finished task's memory kept for the next task;
 *  - CHORUS_ALGORITHM_EXPORT_V2(Algo): the C table, from a C++ class with
 *    comm_init, supports, preference and a Task type (see docs/plugins.md,
 *    "Algorithm ABI v2", for a whole plugin).
 *
 * The core routes completions to the task that posted them; a task sees
 * only its own.
 */
#ifndef CHORUS_ALGORITHM_SDK_HPP_
#define CHORUS_ALGORITHM_SDK_HPP_

#include <chorus/algorithm.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus::sdk {

/** wr_id layout inside CHORUS_ALGO_WR_ID_MASK: bit 55 send, 20 bits of peer, 35 of index. */
struct WrId {
  static constexpr uint64_t kSend = 1ull << 55;
  static constexpr int kPeerBits = 20;
  static constexpr uint64_t kPeerMask = (1ull << kPeerBits) - 1;
  static constexpr uint64_t kIndexMask = (1ull << 35) - 1;

  static uint64_t pack(bool send, int peer, uint64_t index) {
    return (send ? kSend : 0) | ((index & kIndexMask) << kPeerBits) | (uint64_t(peer) & kPeerMask);
  }
  static bool is_send(uint64_t wr_id) { return (wr_id & kSend) != 0; }
  static int peer(uint64_t wr_id) { return int(wr_id & kPeerMask); }
  static uint64_t index(uint64_t wr_id) { return (wr_id >> kPeerBits) & kIndexMask; }
};

/** Records `message` as the task's failure and returns `status`. */
inline int fail(const chorus_algo_env_v2_t* env, int status, const std::string& message) {
  return env->fail(env->core, status, message.c_str());
}

/**
 * Posts in the order they were added. pump() posts until the transport says
 * CHORUS_ERR_AGAIN (the rest waits for the next pump) or everything is
 * posted; completed() counts completions; done() is true once every post
 * completed. Posts to one peer on one channel keep their order, which is
 * what makes a receiver's posts match the sender's.
 */
class Poster {
 public:
  explicit Poster(const chorus_algo_env_v2_t* env) : env_(env) {}

  void send(int peer, int channel, const void* buf, size_t len, chorus_tp_mr_t* mr,
            uint64_t index) {
    posts_.push_back({true, peer, channel, const_cast<void*>(buf), len, mr, index});
  }
  void recv(int peer, int channel, void* buf, size_t len, chorus_tp_mr_t* mr, uint64_t index) {
    posts_.push_back({false, peer, channel, buf, len, mr, index});
  }

  /** CHORUS_OK, or the failure of a post (already recorded through env->fail). */
  int pump() {
    while (next_ < posts_.size()) {
      const Post& p = posts_[next_];
      chorus_tp_endpoint_t* ep = env_->endpoint(env_->core, p.peer, p.channel);
      if (!ep)
        return fail(env_, CHORUS_ERR_INTERNAL,
                    "no endpoint to rank " + std::to_string(p.peer) + " on channel " +
                        std::to_string(p.channel));
      const uint64_t wr = WrId::pack(p.send, p.peer, p.index);
      const int rc = p.send ? env_->tp->post_send(ep, p.buf, p.len, p.mr, wr)
                            : env_->tp->post_recv(ep, p.buf, p.len, p.mr, wr);
      if (rc == CHORUS_ERR_AGAIN) return CHORUS_OK;
      if (rc != CHORUS_OK)
        return fail(env_, rc,
                    std::string("posting a ") + (p.send ? "send to" : "receive from") + " rank " +
                        std::to_string(p.peer) + " failed: " + env_->tp->last_error());
      ++next_;
    }
    return CHORUS_OK;
  }
  void completed(size_t n) { done_ += n; }
  bool done() const { return done_ >= posts_.size(); }
  size_t outstanding() const { return next_ - done_; }
  size_t size() const { return posts_.size(); }

 private:
  struct Post {
    bool send;
    int peer;
    int channel;
    void* buf;
    size_t len;
    chorus_tp_mr_t* mr;
    uint64_t index;
  };
  const chorus_algo_env_v2_t* env_;
  std::vector<Post> posts_;
  size_t next_ = 0, done_ = 0;
};

/**
 * `Algo::kPeers` (chorus_algo_peers_t) when the class declares it, else
 * CHORUS_ALGO_PEERS_ALL: the `peers` field of the exported table.
 */
template <class Algo, class = void>
struct DeclaredPeers {
  static constexpr uint32_t value = CHORUS_ALGO_PEERS_ALL;
};
template <class Algo>
struct DeclaredPeers<Algo, decltype(void(Algo::kPeers))> {
  static constexpr uint32_t value = static_cast<uint32_t>(Algo::kPeers);
};
/** The same as a function (C++17: no requires-expression). */
template <class Algo>
constexpr uint32_t declared_peers() {
  return DeclaredPeers<Algo>::value;
}

/**
 * The memory of one finished task, kept in the algorithm's per-communicator
 * state for the next task, so that a loop of small calls allocates no task.
 * Entry uses it when `Algo` has a member `mutable TaskPool task_pool;`.
 * One block is kept; tasks that run at the same time take fresh memory.
 * Lock-free: post and task_free may run on any thread. Only the memory is
 * reused: every task is constructed and destroyed as before (its constructor
 * must not throw).
 */
class TaskPool {
 public:
  TaskPool() = default;
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  ~TaskPool() { ::operator delete(slot_.load(std::memory_order_acquire)); }

  /** `bytes` of memory (the same size on every call from one Entry), or NULL. */
  void* take(size_t bytes) {
    if (void* p = slot_.exchange(nullptr, std::memory_order_acquire)) return p;
    return ::operator new(bytes, std::nothrow);
  }
  /** Keeps `p` (from take()) for the next task, or frees it when one is kept. */
  void give_back(void* p) {
    void* empty = nullptr;
    if (!slot_.compare_exchange_strong(empty, p, std::memory_order_acq_rel)) ::operator delete(p);
  }

 private:
  std::atomic<void*> slot_{nullptr};
};

namespace detail {
template <class A, class = void>
struct HasTaskPool : std::false_type {};
template <class A>
struct HasTaskPool<A, std::void_t<decltype(std::declval<const A&>().task_pool.take(size_t(1)))>>
    : std::true_type {};

/** A pooled task and the pool its memory goes back to. */
template <class Task>
struct TaskBlock {
  TaskPool* pool;
  alignas(Task) unsigned char task[sizeof(Task)];
};
}  // namespace detail

/**
 * The C table's entry points for a C++ algorithm class `Algo`, which has:
 *   static constexpr const char* kName; static constexpr uint32_t kFlags, kCollectives;
 *   optionally static constexpr uint32_t kPeers (CHORUS_ALGO_PEERS_RING when it
 *     posts only to rank-1 and rank+1; absent: CHORUS_ALGO_PEERS_ALL);
 *   static int comm_init(const chorus_algo_comm_v2_t*, Algo** out);   // new Algo, or fail
 *   bool supports(int collective, int dtype, int op) const;
 *   int preference(const chorus_algo_call_v2_t&) const;
 *   struct Task { Task(const Algo&, const chorus_algo_env_v2_t*, const chorus_algo_call_v2_t&);
 *                 int start(); int progress(const chorus_tp_completion_t*, size_t); };
 * start and progress return CHORUS_ALGO_TASK_DONE, _PENDING or a failure.
 */
template <class Algo>
struct Entry {
  static int init(const chorus_host_v1_t*) { return CHORUS_OK; }
  static int comm_init(const chorus_algo_comm_v2_t* comm, void** state) {
    Algo* a = nullptr;
    const int rc = Algo::comm_init(comm, &a);
    *state = a;
    return rc;
  }
  static void comm_fini(void* state) { delete static_cast<Algo*>(state); }
  static int supports(void* state, int collective, int dtype, int op) {
    return static_cast<const Algo*>(state)->supports(collective, dtype, op) ? 1 : 0;
  }
  static int preference(void* state, const chorus_algo_call_v2_t* call) {
    return static_cast<const Algo*>(state)->preference(*call);
  }
  using Task = typename Algo::Task;
  using Block = detail::TaskBlock<Task>;
  /** Tasks live in pooled blocks (TaskPool) when Algo has a task_pool and
   * the task needs no more than operator new's alignment. */
  static constexpr bool kPooled =
      detail::HasTaskPool<Algo>::value && alignof(Block) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__;

  static int post(void* state, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t* call,
                  chorus_algo_task_v2_t** out) {
    const Algo& algo = *static_cast<const Algo*>(state);
    Task* t = nullptr;
    if constexpr (kPooled) {
      if (void* mem = algo.task_pool.take(sizeof(Block))) {
        auto* block = static_cast<Block*>(mem);
        block->pool = &algo.task_pool;
        t = new (block->task) Task(algo, env, *call);
      }
    } else {
      t = new (std::nothrow) Task(algo, env, *call);
    }
    *out = reinterpret_cast<chorus_algo_task_v2_t*>(t);
    if (!t) return fail(env, CHORUS_ERR_SYSTEM, std::string(Algo::kName) + ": out of memory");
    return t->start();
  }
  static int progress(chorus_algo_task_v2_t* task, const chorus_tp_completion_t* c, size_t n) {
    return reinterpret_cast<typename Algo::Task*>(task)->progress(c, n);
  }
  static void task_free(chorus_algo_task_v2_t* task) {
    if constexpr (kPooled) {
      if (!task) return;
      auto* block =
          reinterpret_cast<Block*>(reinterpret_cast<unsigned char*>(task) - offsetof(Block, task));
      reinterpret_cast<Task*>(task)->~Task();
      block->pool->give_back(block);
    } else {
      delete reinterpret_cast<Task*>(task);
    }
  }
};

// ---------------------------------------------------------------------------
// Pipelines over staging slots. The pieces a pipelined schedule needs
// whatever its shape (the built-in ring is written on them): a "lane" is one
// stream of posts an algorithm keeps apart from the others (a ring direction
// on one channel, a mesh peer on one channel, ...). Each lane has its own
// slots, its own wr_ids and its own counts, so lanes never touch each other's
// memory and run concurrently; nothing below is shared between tasks.
// ---------------------------------------------------------------------------

/**
 * Posts one send or receive on `ep`, without blocking.
 * @param[in] who  prefix of the failure text (the algorithm's name), or NULL.
 * @returns CHORUS_OK; CHORUS_ERR_AGAIN when the transport's queue is full
 *          (nothing is recorded: post it again later, the core calls
 *          progress with n = 0 after a refusal); or the transport's failure,
 *          recorded through env->fail with `peer` named.
 */
inline int try_post(const chorus_algo_env_v2_t* env, bool send, chorus_tp_endpoint_t* ep, int peer,
                    const void* buf, size_t len, chorus_tp_mr_t* mr, uint64_t wr_id,
                    const char* who = nullptr) {
  const int rc = send ? env->tp->post_send(ep, buf, len, mr, wr_id)
                      : env->tp->post_recv(ep, const_cast<void*>(buf), len, mr, wr_id);
  if (rc == CHORUS_OK || rc == CHORUS_ERR_AGAIN) return rc;
  const char* detail = env->tp->last_error ? env->tp->last_error() : nullptr;
  return fail(env, rc,
              std::string(who ? who : "") + (who ? ": " : "") + "posting a " +
                  (send ? "send to" : "receive from") + " rank " + std::to_string(peer) +
                  " failed: " + (detail && *detail ? detail : "no detail"));
}

/** Largest post in_place_post_bytes() gives a transport with CHORUS_TP_CAP_LARGE_POSTS. */
inline constexpr size_t kLargePostBytes = size_t(16) << 20;

/**
 * Bytes per post for a transfer that needs no staging: the receive lands in
 * place and nothing is reduced on the way. That is a staging slot, or, when
 * the transport pipelines large messages itself (CHORUS_TP_CAP_LARGE_POSTS),
 * up to kLargePostBytes, so a large block moves in a few posts rather than
 * one per slot. Never above the transport's max_message_size. Every rank
 * gets the same value (the caps and the slot size are the same on every
 * rank), so sender and receiver cut a transfer at the same places. Use it
 * only where forwarding does not wait on pieces (a chain such as broadcast
 * would lose its pipelining).
 */
inline size_t in_place_post_bytes(const chorus_algo_env_v2_t* env) {
  size_t bytes = env->staging_slot_size;
  if (!env->caps) return bytes;
  if ((env->caps->flags & CHORUS_TP_CAP_LARGE_POSTS) && bytes < kLargePostBytes)
    bytes = kLargePostBytes;
  if (env->caps->max_message_size && env->caps->max_message_size < bytes)
    bytes = size_t(env->caps->max_message_size);
  return bytes;
}

/**
 * wr_id layout for lane pipelines, inside CHORUS_ALGO_WR_ID_MASK: bit 55
 * send, bits 43..54 the lane (up to kMaxLanes), bits 0..42 a per-lane
 * sequence number (2^43 posts per lane and task before it wraps). Completions
 * of one endpoint and direction come in post order, so (lane, direction) is
 * enough to find what a completion is for; the sequence number is there to
 * check that and to read a trace.
 */
struct LaneWrId {
  static constexpr uint64_t kSend = 1ull << 55;
  static constexpr int kSeqBits = 43;
  static constexpr uint64_t kSeqMask = (1ull << kSeqBits) - 1;
  static constexpr uint32_t kMaxLanes = 1u << 12;

  static constexpr uint64_t pack(bool send, uint32_t lane, uint64_t seq) {
    return (send ? kSend : 0) | (uint64_t(lane & (kMaxLanes - 1)) << kSeqBits) | (seq & kSeqMask);
  }
  static constexpr bool is_send(uint64_t wr_id) { return (wr_id & kSend) != 0; }
  static constexpr uint32_t lane(uint64_t wr_id) {
    return uint32_t((wr_id >> kSeqBits) & (kMaxLanes - 1));
  }
  static constexpr uint64_t seq(uint64_t wr_id) { return wr_id & kSeqMask; }
};

/**
 * Progress of one direction (sends or receives) of one lane: `total` posts
 * to make, `posted` so far, `done` completed, at most `window` outstanding.
 */
struct Flow {
  size_t total = 0;
  size_t posted = 0;
  size_t done = 0;
  size_t window = 1;

  /** Another post fits: some remain and the window has room. */
  bool open() const { return posted < total && posted - done < window; }
  size_t outstanding() const { return posted - done; }
  bool finished() const { return done == total; }

  /**
   * A window of `wanted` posts, cut to what the transport takes per
   * endpoint (`cap` from chorus_tp_caps_t::max_outstanding_*; 0 counts as 1).
   */
  static size_t window_for(size_t wanted, uint32_t cap) {
    const size_t c = cap ? cap : 1;
    return wanted < c ? (wanted ? wanted : 1) : c;
  }
};

/**
 * A lane's share of the task's registered staging slots (env->staging*), as
 * a free list: acquire() takes a slot, release() gives it back, most
 * recently released first (its cache lines are warm). Construction
 * allocates; acquire and release never do. One owner at a time: not
 * thread-safe, and it need not be (a lane belongs to one task).
 */
class SlotPool {
 public:
  SlotPool() = default;
  /** Slots [first, first + count) of env's staging slots. */
  SlotPool(const chorus_algo_env_v2_t* env, size_t first, size_t count) : env_(env) {
    free_.reserve(count);
    for (size_t s = 0; s < count; ++s) free_.push_back(first + s);
    capacity_ = count;
  }
  /**
   * Share `part` of `parts` equal shares of env's slots (a remainder stays
   * unused). Slot counts are the same on every rank, so every rank cuts the
   * same shares.
   */
  static SlotPool share(const chorus_algo_env_v2_t* env, size_t parts, size_t part) {
    const size_t each = parts ? env->staging_slots / parts : 0;
    return SlotPool(env, part * each, each);
  }

  bool empty() const { return free_.empty(); }
  size_t available() const { return free_.size(); }
  size_t capacity() const { return capacity_; }
  /** A free slot's index. Precondition: !empty(). */
  size_t acquire() {
    const size_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(size_t slot) { free_.push_back(slot); }
  void* data(size_t slot) const { return env_->staging[slot]; }
  chorus_tp_mr_t* mr(size_t slot) const { return env_->staging_mr[slot]; }
  size_t slot_size() const { return env_ ? env_->staging_slot_size : 0; }

 private:
  const chorus_algo_env_v2_t* env_ = nullptr;
  std::vector<size_t> free_;
  size_t capacity_ = 0;
};

/**
 * What one direction of one lane posted and has not seen complete, oldest
 * first, in a ring of fixed capacity (the lane's window). Completions of one
 * endpoint and direction arrive in post order, so front() is the entry the
 * next completion is for. Allocates only in the constructor.
 */
template <class T>
class PostedQueue {
 public:
  explicit PostedQueue(size_t capacity = 0) : items_(capacity) {}
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == items_.size(); }
  size_t size() const { return count_; }
  /** Precondition: !full(). */
  void push(const T& item) {
    items_[(head_ + count_) % items_.size()] = item;
    ++count_;
  }
  /** Precondition: !empty(). */
  const T& front() const { return items_[head_]; }
  /** Removes and returns the oldest entry. Precondition: !empty(). */
  T pop() {
    T item = items_[head_];
    head_ = (head_ + 1) % items_.size();
    --count_;
    return item;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0, count_ = 0;
};

/**
 * Scratch memory for tasks, recycled within one communicator: keep one pool
 * in the state comm_init returns. A task takes a Lease and holds it until it
 * is freed; the buffer then goes back to the pool for the next task. Reuse
 * is the point: every page of a fresh allocation faults on first touch (tens
 * of microseconds per 4 KiB page on a virtualised host), which made a fresh
 * 64 MiB scratch per call cost several times the transfer.
 *
 * Thread-safe: tasks of one communicator may take and return leases from
 * several threads. Idle buffers are kept up to kKeepIdle (the smallest go
 * first), and a request larger than every idle buffer drops the idle ones,
 * so a communicator holds about its largest concurrent need. The contents of
 * a leased buffer are undefined.
 */
class ScratchPool {
 public:
  static constexpr size_t kKeepIdle = 4;

  /** A buffer on loan; returns to its pool when destroyed or reset. Move-only. */
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        reset();
        pool_ = o.pool_;
        buf_ = std::move(o.buf_);
        capacity_ = o.capacity_;
        o.pool_ = nullptr;
        o.capacity_ = 0;
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }

    /** The memory (at least the size asked for); nullptr for an empty lease. */
    std::byte* data() const { return buf_.get(); }
    size_t capacity() const { return capacity_; }
    void reset() {
      if (pool_ && buf_) pool_->give_back(std::move(buf_), capacity_);
      buf_.reset();
      pool_ = nullptr;
      capacity_ = 0;
    }

   private:
    friend class ScratchPool;
    ScratchPool* pool_ = nullptr;
    std::unique_ptr<std::byte[]> buf_;
    size_t capacity_ = 0;
  };

  ScratchPool() = default;
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  /**
   * A buffer of at least `bytes` bytes: the smallest idle one that fits,
   * else a new one. `bytes` 0 gives an empty lease. On allocation failure
   * `ok` is false and the lease is empty.
   */
  Lease take(size_t bytes, bool& ok) {
    ok = true;
    Lease lease;
    if (bytes == 0) return lease;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_t best = idle_.size();
      for (size_t i = 0; i < idle_.size(); ++i)
        if (idle_[i].capacity >= bytes &&
            (best == idle_.size() || idle_[i].capacity < idle_[best].capacity))
          best = i;
      if (best < idle_.size()) {
        lease.pool_ = this;
        lease.buf_ = std::move(idle_[best].buf);
        lease.capacity_ = idle_[best].capacity;
        idle_.erase(idle_.begin() + std::ptrdiff_t(best));
        return lease;
      }
      idle_.clear();  // every idle buffer is too small: let them go
    }
    lease.buf_.reset(new (std::nothrow) std::byte[bytes]);
    if (!lease.buf_) {
      ok = false;
      return lease;
    }
    lease.pool_ = this;
    lease.capacity_ = bytes;
    return lease;
  }

  /** Idle buffers held now (for tests). */
  size_t idle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_.size();
  }

 private:
  struct Idle {
    std::unique_ptr<std::byte[]> buf;
    size_t capacity;
  };
  void give_back(std::unique_ptr<std::byte[]> buf, size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back({std::move(buf), capacity});
    if (idle_.size() > kKeepIdle) {
      size_t smallest = 0;
      for (size_t i = 1; i < idle_.size(); ++i)
        if (idle_[i].capacity < idle_[smallest].capacity) smallest = i;
      idle_.erase(idle_.begin() + std::ptrdiff_t(smallest));
    }
  }

  mutable std::mutex mutex_;
  std::vector<Idle> idle_;
};

}  // namespace chorus::sdk

/** Defines the exported `chorus_algorithm_plugin_v2` table for `Algo`. */
#define CHORUS_ALGORITHM_EXPORT_V2(Algo)                            \
  extern "C" __attribute__((visibility("default")))                 \
  const chorus_algorithm_plugin_v2_t chorus_algorithm_plugin_v2 = { \
      sizeof(chorus_algorithm_plugin_v2_t),                         \
      CHORUS_ALGORITHM_ABI_V2_MINOR,                                \
      Algo::kName,                                                  \
      Algo::kFlags,                                                 \
      Algo::kCollectives,                                           \
      &chorus::sdk::Entry<Algo>::init,                              \
      nullptr,                                                      \
      &chorus::sdk::Entry<Algo>::comm_init,                         \
      &chorus::sdk::Entry<Algo>::comm_fini,                         \
      &chorus::sdk::Entry<Algo>::supports,                          \
      &chorus::sdk::Entry<Algo>::preference,                        \
      &chorus::sdk::Entry<Algo>::post,                              \
      &chorus::sdk::Entry<Algo>::progress,                          \
      &chorus::sdk::Entry<Algo>::task_free,                         \
      chorus::sdk::declared_peers<Algo>(),                          \
  }

#endif /* CHORUS_ALGORITHM_SDK_HPP_ */
