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

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
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
template <class Algo>
constexpr uint32_t declared_peers() {
  if constexpr (requires { Algo::kPeers; })
    return static_cast<uint32_t>(Algo::kPeers);
  else
    return CHORUS_ALGO_PEERS_ALL;
}

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
  static int post(void* state, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t* call,
                  chorus_algo_task_v2_t** out) {
    auto* t = new (std::nothrow) typename Algo::Task(*static_cast<const Algo*>(state), env, *call);
    *out = reinterpret_cast<chorus_algo_task_v2_t*>(t);
    if (!t) return fail(env, CHORUS_ERR_SYSTEM, std::string(Algo::kName) + ": out of memory");
    return t->start();
  }
  static int progress(chorus_algo_task_v2_t* task, const chorus_tp_completion_t* c, size_t n) {
    return reinterpret_cast<typename Algo::Task*>(task)->progress(c, n);
  }
  static void task_free(chorus_algo_task_v2_t* task) {
    delete reinterpret_cast<typename Algo::Task*>(task);
  }
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
