// The loopback transport's private header: its context and endpoint classes
// and the process-wide state that joins them. Ranks are threads (or just
// contexts) of one process; a message is one memcpy from the posted send
// buffer into the matching posted receive.
//
// Locking, the one rule to keep in mind when reading the .cc files: every
// piece of mutable state below (the registry, every endpoint's queues, every
// context's completion queue) is guarded by the single fabric_mutex(). A
// post on one rank's thread completes work on another rank's context, so
// per-context locks would need an ordering between contexts; one lock
// avoids that at the cost of throughput, which a loopback transport for
// tests and examples does not need.
#pragma once

#include <chorus/transport.h>
#include <chorus/provider/completion_queue.hpp>
#include <chorus/provider/error.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace chorus::loopback {

using provider::CompletionQueue;
using provider::Error;
using provider::set_last_error;

/// Posts allowed per endpoint and direction before a post says AGAIN.
inline constexpr std::uint32_t kMaxOutstanding = 1024;

/// The address blob endpoint_open writes. Nothing in it is a pointer: `id`
/// is looked up in the registry, so a stale or forged blob cannot make the
/// transport touch freed memory. `pid` keeps a blob from another process
/// (or from the parent of a forked child) from matching a local id.
struct Address {
  char magic[4];  // "CHLB"
  std::int32_t pid;
  std::uint64_t id;
  std::int32_t rank;       // the endpoint's own rank
  std::int32_t peer_rank;  // the rank it wants to reach
  std::int32_t channel;
  std::int32_t reserved;
};

/// The lock of the whole transport (see the file comment).
std::mutex& fabric_mutex();

// The registry: every open endpoint of the process by its id. Called with
// fabric_mutex() held.
std::uint64_t next_endpoint_id();
void register_endpoint(chorus_tp_endpoint* ep);
void unregister_endpoint(std::uint64_t id);
/// NULL when no open endpoint has that id (closed, or never existed).
chorus_tp_endpoint* find_endpoint(std::uint64_t id);
/// Open contexts in the process, for describe().
std::size_t& open_contexts();

}  // namespace chorus::loopback

/// One end of a channel. Created and owned by its context; every member is
/// guarded by fabric_mutex().
struct chorus_tp_endpoint {
 public:
  chorus_tp_endpoint(chorus_tp_context& ctx, int peer_rank, int channel, std::uint64_t id)
      : ctx_(ctx), peer_rank_(peer_rank), channel_(channel), id_(id) {}

  chorus_tp_endpoint_t* handle() { return this; }
  chorus_tp_context& context() { return ctx_; }
  std::uint64_t id() const { return id_; }
  int peer_rank() const { return peer_rank_; }
  int channel() const { return channel_; }

  // The ABI ops (each takes the lock).
  void connect(const void* address, std::size_t length, int timeout_ms);
  int post_send(const void* buf, std::size_t length, std::uint64_t wr_id);
  int post_recv(void* buf, std::size_t length, std::uint64_t wr_id);

  // Called with the lock held.
  /// A completion of this endpoint was reaped: one more post fits.
  void reaped(std::uint32_t opcode);
  /// The peer is gone: every queued post fails with PEER_LOST, later posts
  /// are refused, and the link is cut.
  void fail_all(const std::string& why);
  /// This endpoint is closing: the peer's posts fail and the link is cut.
  void unlink();
  /// "rank 1 (channel 0)", or "(notice channel)" for the core's control endpoint.
  std::string describe_peer() const;

 private:
  struct Post {
    void* buf;  // const for sends: written only for receives
    std::size_t length;
    std::uint64_t wr_id;
  };
  /// Copies `send` (posted on `from`) into `recv` (posted on `to`) and
  /// completes both.
  static void deliver(chorus_tp_endpoint& from, const Post& send, chorus_tp_endpoint& to,
                      const Post& recv);
  int check_postable(const char* op, std::uint32_t outstanding) const;

  chorus_tp_context& ctx_;
  const int peer_rank_;
  const int channel_;
  const std::uint64_t id_;
  chorus_tp_endpoint* peer_ = nullptr;  // the endpoint this one connected to
  chorus_tp_endpoint* back_ = nullptr;  // the endpoint that connected to this one
  bool lost_ = false;
  std::string lost_why_;
  // Posts not matched yet. Invariant: while both ends are linked, at most one
  // of (our sends_, the peer's recvs_) is non-empty, because each new post
  // first consumes the oldest entry of the other queue.
  std::deque<Post> sends_;
  std::deque<Post> recvs_;
  // Posted and not yet reaped (S2 counts these, not just the queued ones).
  std::uint32_t sends_out_ = 0;
  std::uint32_t recvs_out_ = 0;
};

/// A rank's context: its endpoints and its completion queue. The ABI ops run
/// on the one thread that drives this rank; other ranks' threads reach in
/// (under the lock) only to push completions and to wake wait().
struct chorus_tp_context {
 public:
  explicit chorus_tp_context(const chorus_tp_context_info_t& info);
  ~chorus_tp_context();
  chorus_tp_context(const chorus_tp_context&) = delete;
  chorus_tp_context& operator=(const chorus_tp_context&) = delete;

  chorus_tp_caps_t caps() const;
  chorus_tp_endpoint* open_endpoint(int peer_rank, int channel, void* address_out,
                                    std::size_t* address_len);
  void close_endpoint(chorus_tp_endpoint* ep);
  int poll(chorus_tp_completion_t* out, std::size_t max);
  int read_error(chorus_tp_error_t* out);
  int wait(int timeout_ms);
  int interrupt();

  int rank() const { return rank_; }
  int data_channels() const { return data_channels_; }
  /// With the lock held: queue a completion and wake a waiting thread.
  chorus::loopback::CompletionQueue& queue() { return cq_; }
  void wake() { wakeup_.notify_all(); }

 private:
  void close_endpoint_locked(chorus_tp_endpoint* ep);

  int rank_;
  int size_;
  int data_channels_ = 0;  // 0: unknown, every channel is a data channel
  std::vector<std::unique_ptr<chorus_tp_endpoint>> endpoints_;
  chorus::loopback::CompletionQueue cq_;
  std::condition_variable wakeup_;  // waited on with fabric_mutex()
  bool interrupted_ = false;
};
