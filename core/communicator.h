// Communicator: owns the transport context, the endpoints to every peer, the
// staging buffers and the algorithm choice, and runs collectives through the
// algorithm ABI with a deadline and an abort check.
#pragma once

#include <chorus/algorithm.h>
#include <chorus/transport.h>

#include "core/bootstrap.h"
#include "core/config.h"
#include "core/deadline.h"
#include "core/plugin_loader.h"
#include "core/side_channel.h"
#include "core/status.h"

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace chorus::core {

class Communicator {
 public:
  /// Bootstraps with the other ranks and connects every endpoint. Blocks until
  /// done or timeout.init expires.
  /// `host_channel` (optional) replaces Chorus's own bootstrap.
  static Result<std::unique_ptr<Communicator>> create(Config config,
                                                      std::unique_ptr<SideChannel> host_channel = nullptr);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Config& config() const { return cfg_; }
  const std::string& transport_name() const { return transport_->name(); }

  /// Algorithm chosen for `collective` at `bytes` per rank, or nullptr.
  const chorus_algorithm_plugin_v1_t* choose(int collective, uint64_t bytes) const;

  Status all_reduce(const void* in, void* out, size_t count, int dtype, int op);
  Status all_gather(const void* in, void* out, size_t count, int dtype);
  Status reduce_scatter(const void* in, void* out, size_t count, int dtype, int op);
  Status broadcast(void* buf, size_t count, int dtype, int root);
  Status barrier();
  Status send(const void* buf, size_t count, int dtype, int peer);
  Status recv(void* buf, size_t count, int dtype, int peer);

  /// Any thread, any time: the running and every later call fail with ABORTED.
  void abort();

 private:
  Communicator() = default;
  Status init(Config config, std::unique_ptr<SideChannel> host_channel);
  Status connect_endpoints(Deadline deadline);
  Status setup_staging();
  Status select_algorithms();

  /// Checks state shared by every call; returns a failing status to pass on.
  Status usable(const char* what) const;
  /// Runs one collective through `algo`; `call` invokes the plugin's op.
  template <class Call>
  Status run(int collective, const char* what, uint64_t bytes, Call&& call);
  /// Point-to-point transfer used by send and recv.
  Status p2p(bool is_send, void* buf, size_t count, int dtype, int peer);
  /// After a failure mid-call: close every endpoint so nothing can still
  /// write into caller memory, and refuse later calls.
  void mark_broken(const Status& why);
  void release_call_registrations();
  Status call_timeout_status() const;

  /// Which peers still owe completions in the running call, for timeout messages.
  std::string outstanding_peers() const;
  void note_posted(chorus_tp_endpoint_t* ep, bool send);
  void note_completed(const chorus_tp_completion_t& c);

  // The transport table handed to algorithms: the plugin's own ops, except
  // that posts and polls also keep per-peer outstanding counts.
  static int proxy_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                             chorus_tp_mr_t* mr, uint64_t wr_id);
  static int proxy_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length,
                             chorus_tp_mr_t* mr, uint64_t wr_id);
  static int proxy_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max);

  // Callbacks of chorus_algo_env_v1_t; `core` is the Communicator.
  static chorus_tp_endpoint_t* env_endpoint(void* core, int peer, int channel);
  static int env_mem_register(void* core, void* addr, size_t length, chorus_tp_mr_t** mr_out);
  static int env_progress(void* core, chorus_tp_completion_t* out, size_t max);
  static int env_fail(void* core, int status, const char* message);
  static void env_log(void* core, int level, const char* message);

  Config cfg_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<SideChannel> bootstrap_;
  std::shared_ptr<Plugin> transport_;
  const chorus_transport_plugin_v1_t* tp_ = nullptr;
  chorus_tp_context_t* ctx_ = nullptr;
  chorus_tp_caps_t caps_{};
  std::vector<chorus_tp_endpoint_t*> endpoints_;  // [peer * channels + channel]
  std::unordered_map<const chorus_tp_endpoint_t*, int> endpoint_peer_;
  chorus_transport_plugin_v1_t proxy_{};
  std::vector<int> pending_sends_;  // per peer, in the running call
  std::vector<int> pending_recvs_;

  std::vector<std::shared_ptr<Plugin>> algorithms_;  // every algorithm that may be chosen
  std::array<std::vector<const Plugin*>, CHORUS_COLL_COUNT> candidates_;
  std::vector<chorus_kv_t> no_settings_;
  std::vector<std::vector<chorus_kv_t>> algorithm_kv_;  // parallel to algorithms_

  std::vector<void*> staging_;
  std::vector<chorus_tp_mr_t*> staging_mr_;
  void* staging_block_ = nullptr;

  // State of the call in progress (one at a time per communicator).
  Deadline call_deadline_ = Deadline::never();
  std::string call_what_;
  std::vector<chorus_tp_mr_t*> call_mrs_;
  Status call_error_;

  std::atomic<bool> aborted_{false};
  bool broken_ = false;
  Status broken_status_;
};

}  // namespace chorus::core
