// Communicator: owns the transport context, the endpoints to every peer, the
// staging buffers and the algorithm choice, and runs collectives through the
// algorithm ABI with a deadline and an abort check.
#pragma once

#include <chorus/algorithm.h>
#include <chorus/transport.h>

#include "core/bootstrap.h"
#include "core/call_checks.h"
#include "core/call_signature.h"
#include "core/choice_memo.h"
#include "core/config.h"
#include "core/data_peers.h"
#include "core/deadline.h"
#include "core/notice_relay.h"
#include "core/plugin_loader.h"
#include "core/request.h"
#include "core/side_channel.h"
#include "core/status.h"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chorus::core {

class Communicator;
struct LaneFamily;    // core/lane_family.h
class P2pEngine;      // core/p2p_engine.h
struct PeerCounters;  // core/communicator_internal.h
struct P2pOp;

/// The argument checks (CallChecks) need only the communicator's shape.
class Communicator : public CallChecks {
  friend class LaneDriver;  // core/lane_driver.h: runs lanes' queued collectives on its fibers
 public:
  /// Bootstraps with the other ranks and connects every endpoint. Blocks until
  /// done or timeout.init expires.
  /// `host_channel` (optional) replaces Chorus's own bootstrap.
  static Result<std::unique_ptr<Communicator>> create(
      Config config, std::unique_ptr<SideChannel> host_channel = nullptr);
  /// Pending requests are aborted (queued ones complete with ABORTED without
  /// running, the running one is interrupted); the progress thread is joined,
  /// so nothing touches host memory after this returns.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Same on every member rank: "w<n>" for the n-th world communicator of the
  /// process, "<parent>.s<k>c<color>" for a child of the parent's k-th split.
  const std::string& id() const { return id_; }
  const Config& config() const { return cfg_; }
  const std::string& transport_name() const { return transport_->name(); }

  /// The plugin chosen for `call` (pinned, or `auto`'s pick by every
  /// candidate's preference for the whole call), or nullptr.
  const Plugin* choose_plugin(const chorus_algo_call_v2_t& call) const;
  /// The call chorus_comm_algorithm asks about: float32, sum where it reduces.
  static chorus_algo_call_v2_t query_call(int collective, uint64_t bytes);

  // Collectives, executed at once on the calling thread. Only the thread
  // executing this communicator's stream may call them: the host API goes
  // through execute()/submit(). fused_*: a fused group's shape (api_group.cc).
  Status all_reduce(const void* in, void* out, size_t count, int dtype, int op,
                    int32_t fused_calls = -1, uint32_t fused_counts = 0);
  Status all_gather(const void* in, void* out, size_t count, int dtype);
  Status reduce_scatter(const void* in, void* out, size_t count, int dtype, int op);
  Status broadcast(void* buf, size_t count, int dtype, int root);
  Status barrier();
  Status send(const void* buf, size_t count, int dtype, int peer);
  Status recv(void* buf, size_t count, int dtype, int peer);
  /// Tagged point-to-point (core/p2p_engine.h): hands the running request to
  /// the engine and returns Request::kDeferred; the engine finishes it.
  /// `peer` and `tag` may be -1 on a receive (any source, any tag).
  Status start_tagged(bool is_send, void* buf, size_t count, int dtype, int peer, int tag,
                      bool ordered = false);
  /// Argument checks of the tagged calls.
  Status check_tagged(bool is_send, const void* buf, size_t count, int dtype, int peer,
                      int tag) const;
  Status reduce(const void* in, void* out, size_t count, int dtype, int op, int root);
  Status gather(const void* in, void* out, size_t count, int dtype, int root);
  Status scatter(const void* in, void* out, size_t count, int dtype, int root);
  Status all_to_all(const void* in, void* out, size_t count, int dtype);
  Status all_to_allv(const void* in, const size_t* send_counts, const size_t* send_offsets,
                     void* out, const size_t* recv_counts, const size_t* recv_offsets, int dtype);

  /// Blocking: runs `body` after every operation issued before it, then
  /// returns its status. Runs on the calling thread when nothing is queued or
  /// running, else waits for the progress thread. Any thread.
  /// `p2p`: a point-to-point call for the tagged engine; it does not wait
  /// behind queued operations but is handed to the engine at once (inbox_).
  /// `order`: a collective's place in its lane family's issue order
  /// (lane_for_call); Request::kNoOrder for anything else.
  Status execute(const char* what, std::function<Status(Communicator&)> body, bool p2p = false,
                 uint64_t order = Request::kNoOrder);
  /// execute(), returning the request (a tagged receive's status is on it).
  std::shared_ptr<Request> execute_request(const char* what,
                                           std::function<Status(Communicator&)> body,
                                           bool p2p = false, uint64_t order = Request::kNoOrder);
  /// Non-blocking: queues `body` behind everything issued before it; the
  /// progress thread (started on first use) runs it. Any thread.
  std::shared_ptr<Request> submit(const char* what, std::function<Status(Communicator&)> body,
                                  bool p2p = false, uint64_t order = Request::kNoOrder);
  /// A thread about to block until `req` is done runs it itself when it is
  /// next in issue order and nothing runs (saving two thread hand-overs).
  /// Returns whether it ran `req`. Any thread. With `timeout_ms` >= 0 only a
  /// point-to-point request is driven, and only until the limit.
  bool run_if_next(const std::shared_ptr<Request>& req, int timeout_ms = -1);
  /// Runs `req` on the calling thread as the stream's one running operation
  /// (`lock` holds q_mu_ and nothing runs; it is released on return),
  /// counting it in `counter`, then lets the worker go on.
  void run_here(Request& req, std::unique_lock<std::mutex>& lock, std::atomic<uint64_t>& counter);
  /// Removes `req` if it has not started. Because the other ranks still expect
  /// it, every operation issued after it then fails with ABORTED. Returns
  /// NOT_SUPPORTED when it already started or finished.
  Status cancel(const std::shared_ptr<Request>& req);
  /// Adds `ns` to the time host threads spent blocked waiting for requests.
  void add_request_wait(uint64_t ns) { request_wait_ns_->fetch_add(ns, std::memory_order_relaxed); }
  /// The wait.request_ns counter itself, shared so that a request's handle can
  /// add the time a wait took even when the communicator is gone by then.
  std::shared_ptr<std::atomic<uint64_t>> request_wait_counter() const { return request_wait_ns_; }

  /// Collective over this communicator (run it through execute()): ranks with
  /// the same `color` >= 0 form a child ordered by (key, rank here); a negative
  /// color yields a null child. The child has its own transport context and
  /// endpoints, wired up through this communicator's collectives.
  Result<std::unique_ptr<Communicator>> split(int color, int key);

  /// Snapshot of the counters as (name, value) pairs; any thread.
  std::vector<std::pair<std::string, uint64_t>> counters() const;
  /// Counts one failed operation in `errors`; any thread. Operations that run
  /// are counted where they finish; the API calls this for a call refused
  /// before it ran (a bad argument).
  void count_failed() { errors_.fetch_add(1, std::memory_order_relaxed); }

  /// Any thread, any time: the running and every later call fail with ABORTED.
  void abort();

  /// The communicator that runs the next collective issued: this one, or
  /// one of its lanes (collectives.lanes; call i runs on lane i mod lanes,
  /// core/communicator_lanes.cc), and the call's place `order` in the
  /// family's issue order. Any thread.
  Communicator& lane_for_call(uint64_t& order);

 private:
  Communicator();  // communicator.cc (P2pEngine is incomplete here)
  Status init(Config config, std::unique_ptr<SideChannel> host_channel);
  /// Child side of split(): transport context, algorithms and endpoint
  /// blobs; the parent then exchanges `blob_out` and calls connect_from().
  Status init_child(const Config& cfg, int rank, int size, std::string id,
                    std::vector<std::byte>& blob_out);
  /// The transport plugin cfg_ names, or the composite for "auto".
  Result<std::shared_ptr<Plugin>> load_transport() const;
  Status open_context();
  Status connect_endpoints(Deadline deadline);
  /// Opens one endpoint per (data peer, channel) (data_peers_) and serialises
  /// the fingerprint and the address blobs into `mine`.
  Status open_endpoints(std::vector<std::byte>& mine);
  /// Cuts rank `owner`'s address table (open_endpoints' `mine`) down to the
  /// part this rank uses: the fingerprint, owner's data addresses for this
  /// rank (none when the pair has no data endpoints), owner's notice address
  /// for this rank and owner's host identity, in that order. A table of
  /// another shape keeps only its fingerprint, one without a fingerprint
  /// becomes empty (connect_from reports either).
  void keep_own_entries(int owner, std::vector<std::byte>& table) const;
  /// How many data addresses keep_own_entries left in rank p's table.
  size_t kept_data_entries(int p) const {
    return data_peers_.links(rank_, p) ? size_t(cfg_.channels) : 0;
  }
  /// How many notice addresses it left there (1 or 0, notice_links).
  size_t kept_notice_entries(int p) const { return notice_links(data_peers_, size_, rank_, p); }
  /// Connects every endpoint from the gathered tables (all[r] from rank r,
  /// cut by keep_own_entries), except the data endpoints defers_data keeps.
  Status connect_from(const std::vector<std::vector<std::byte>>& all, Deadline deadline);
  // Data endpoints connected on first use (core/data_connect.cc).
  bool defers_data(int peer) const;
  Status connect_deferred_data();
  /// The end of connect_deferred_data: every notice endpoint left for first
  /// use connects with the data endpoints (polled), and the call waits for them.
  Status connect_notices_with_data();
  // Notice endpoints connected on first use (core/notice_connect.cc).
  /// The pair's notice endpoint is opened at init but connected (polled)
  /// when a call first needs it: a peer whose data endpoints are deferred
  /// too, over a transport with CHORUS_TP_CAP_CONNECT_POLL.
  bool defers_notice(int peer) const;
  /// Not connected yet (idle or connecting): signatures to it wait in its queue.
  bool notice_pending(int peer) const {
    return !notice_idle_.empty() && notice_idle_[size_t(peer)].ep != nullptr;
  }
  /// Whether a broadcast exchanges its signature with `peer` (see begin_signature).
  bool broadcast_talks_to(int peer) const;
  /// Starts the pair's polled connect; `linked`: this rank's own calls need
  /// the pair (not only the peer's connect request), which both sides of a
  /// pair decide alike.
  void begin_notice_connect(int peer, bool linked);
  /// Polls the connecting notice endpoints (each at most every
  /// kNoticeConnectGap) and flushes the queues of those up.
  void poll_notice_connects();
  /// Polls one; once up, arms its standing receives and flushes its queue.
  void poll_notice_connect(int peer);
  /// Posts the signature notices queued for peer while its slots allow.
  void flush_notice_queue(int peer);
  /// Posts one signature notice to a connected peer (a free slot assumed).
  void post_signature(int peer, const CallSig& sig, bool ask);
  /// endpoint_connect's timeout for a blocking connect by `deadline`: on a
  /// transport with CHORUS_TP_CAP_CONNECT_POLL, 0 would mean a polled
  /// connect, so an expired deadline still asks for 1 ms (and fails).
  int blocking_connect_ms(Deadline deadline) const {
    const int ms = deadline.remaining_ms();
    return ms == 0 && (caps_.flags & CHORUS_TP_CAP_CONNECT_POLL) ? 1 : ms;
  }
  /// The tagged engine's pairs connect on first use (a transport with
  /// CHORUS_TP_CAP_CONNECT_POLL), not at init.
  bool p2p_lazy() const { return (caps_.flags & CHORUS_TP_CAP_CONNECT_POLL) != 0; }
  int known_lost_rank();                      // from the notices so far, or -1; sets lost_via_
  Status deferred_connect_failed(Status st);  // names a lost rank when one is known
  std::string fingerprint() const;
  /// Runs one queued request on the calling thread (the stream's executor).
  void run_request(Request& req);
  void worker_main();
  /// The executor's loop while tagged operations are registered
  /// (core/p2p_stream.cc, which explains the rules): true once `until` is
  /// done (nullptr: nothing is left); false when `limit` passes, or at once
  /// when something is queued while it drives `until`.
  bool drive(const std::shared_ptr<Request>& until, Deadline limit = Deadline::never());
  /// drive(req, limit) as the stream's executor (`lock` holds q_mu_,
  /// nothing runs; released on return), then release_stream.
  void drive_here(const std::shared_ptr<Request>& req, std::unique_lock<std::mutex>& lock,
                  Deadline limit = Deadline::never());
  /// Marks the stream free (`lock` holds q_mu_; released on return). When `done` is
  /// false the caller stopped driving its request to let queued operations run: the
  /// worker is started if it was not. wake_for_queued: request_queue.cc.
  void release_stream(std::unique_lock<std::mutex>& lock, bool done);
  void wake_for_queued(const Request& req, std::unique_lock<std::mutex>& lock);
  void wake_driver_if_next();  // q_mu_ held
  /// One pass of the engine: polls the transport (blocking up to `wait_ms`
  /// when nothing is ready), routes completions, posts, checks deadlines.
  void p2p_step(int wait_ms);
  /// Opens the engine's endpoints (after the notice endpoints) and appends
  /// their addresses to `mine`.
  Status open_p2p_endpoints(std::vector<std::byte>& mine, std::vector<std::byte>& addr);
  /// Connects them from rank p's table at `pos`; arms the engine once all are.
  Status connect_p2p(int p, const std::vector<std::byte>& table, size_t& pos, Deadline deadline);
  void make_p2p_engine();
  /// Interrupts the executor's wait in p2p_step (something was queued).
  void wake_executor();
  /// Hands inbox_'s point-to-point requests to the engine, in issue order
  /// (from the executor's loop and from a running call's polls).
  void drain_inbox();
  /// What the engine's completions left to do outside it (a mismatch to
  /// spread, a failure that breaks the communicator); no engine call on the stack.
  void settle_p2p();
  // Lanes (core/communicator_lanes.cc, which documents each).
  Status open_lanes();  // lanes 1 .. collectives.lanes - 1; collective
  void close_lanes();   // first thing in the destructor
  /// The call of `order` failed: every lane stops the calls issued after it.
  void family_fail(const Status& why, uint64_t order);
  Status family_status(const char* what) const;
  void family_running(bool start);
  void add_lane_counters(std::vector<std::pair<std::string, uint64_t>>& out) const;
  /// A new communicator over `members` (parent ranks, in the new order; empty:
  /// this rank takes part in the exchanges but joins none) with `cfg`, wired
  /// up through this communicator's collectives. Collective.
  Result<std::unique_ptr<Communicator>> spawn(const Config& cfg, const std::vector<int>& members,
                                              const std::string& id);

  /// Log with rank and communicator id.
  void log(int level, const std::string& message) const;
  /// "rank r", or "rank r of comm <id>" for a child communicator.
  std::string who() const;
  Status setup_staging();
  /// Loads the algorithms, fills candidates_ and sets data_peers_.
  Status select_algorithms();
  /// data_peers_ and data_peers_why_ from candidates_ and the config.
  void select_data_peers();
  /// "algorithm 'x' posted to rank p, but ...": a post to a peer without
  /// data endpoints, with the declaration behind it and the fix.
  std::string undeclared_peer_text(int peer) const;
  /// algorithm.<plugin>.<key> naming a plugin that is neither loaded nor
  /// installed on `search` is INVALID_ARGUMENT (a typo such as
  /// CHORUS_ALGORITHM_ALL_REDUS).
  Status check_algorithm_settings(const std::vector<std::string>& search) const;

  /// Checks state shared by every call; returns a failing status to pass on.
  Status usable(const char* what) const;
  /// Runs one collective through the algorithm chosen for `call_desc`: a v2
  /// plugin's task (drive_task), or a v1 op that `call` invokes. `sig` holds
  /// the call's count, dtype, op and root for the signature check.
  template <class Call>
  Status run(const chorus_algo_call_v2_t& call_desc, const char* what, CallSig sig, Call&& call);
  /// The v1 environment for algorithms_[index].
  void fill_env_v1(size_t index, chorus_algo_env_v1_t& env);
  /// The fields v1 and v2 environments share (communicator_internal.h).
  template <class Env>
  void fill_env_common(Env& env);

  // Algorithm ABI v2 (core/algorithm_tasks.cc).
  /// Position of `p` in algorithms_ (algorithms_.size() when absent).
  size_t algorithm_index(const Plugin* p) const;
  /// False when algorithms_[index] is v2 and refuses the call's (dtype, op).
  bool plugin_supports(size_t index, const chorus_algo_call_v2_t& call) const;
  /// A candidate's preference for `call` at `probe` bytes (v1 or v2).
  int preference_of(const Plugin* p, const chorus_algo_call_v2_t& call, uint64_t probe) const;
  /// comm_init of every v2 algorithm once the endpoints are connected; a
  /// failure (a bad setting) fails the communicator's init.
  Status init_algorithms();
  /// comm_fini of every v2 algorithm whose comm_init succeeded.
  void fini_algorithms();
  /// Runs one v2 task to its end on the calling thread: post, then progress
  /// with its completions until done, a failure, the deadline or an abort.
  int drive_task(size_t index, const chorus_algo_call_v2_t& call);
  /// task_free of the v2 task the last call ran, if any.
  void free_task();
  /// This rank's host identity for the address table (auto's, so that ranks
  /// count hosts as auto does).
  std::string host_identity() const;
  /// A call that starts after a mismatch became known fails with it.
  Status mismatch_pending();
  /// Tells every peer of the known mismatch, once per communicator.
  void spread_mismatch();
  /// Point-to-point transfer used by send and recv.
  Status p2p(bool is_send, void* buf, size_t count, int dtype, int peer);
  /// After a failure mid-call: close every endpoint so nothing can still
  /// write into caller memory, and refuse later calls.
  void mark_broken(const Status& why);
  void release_call_registrations();
  Status call_timeout_status() const;

  // Peer-loss notices (docs/reliability.md §4.3; core/peer_notices.cc): an
  // endpoint beyond the data channels (channel index cfg_.channels) to each
  // ring neighbour and data peer (notice_links), receives always posted.
  Status malformed_table(int peer) const;
  /// Posts the standing notice receives; the end of connect_from().
  Status arm_notices();
  void arm_notice_peer(int p);  // posts p's; on a refusal closes its notice endpoint
  /// Takes notice completions out of out[0..n); returns how many are left.
  int filter_notices(chorus_tp_completion_t* out, int n);
  /// One notice received from `peer` (`sized`: of the expected length).
  void handle_notice(int peer, const NoticeWire& w, bool sized);
  /// Buffers in notice_block_: receive slot k of `peer`, signature send
  /// slot k to `peer`, the slot of notices sent to every notice peer, and
  /// the relay slot of (origin, relay_index(kind)).
  void* notice_slot(int peer, int k) const;
  void* sig_send_slot(int peer, int k) const;
  void* broadcast_slot() const;
  void* relay_slot(int origin, int kind_index) const;
  void relay_notice(int from, const NoticeWire& w);  // to the ring neighbours, once
  void flood_lost(int peer);  // a notice peer ended without a word: tell the others
  /// After the transport reported `peer` lost: waits up to the notice grace
  /// for `peer`'s notice and returns the rank to blame (the reported one,
  /// or `peer` itself when it left without one) in lost_rank_.
  void resolve_lost(int peer);
  /// resolve_lost(peer), then the "(rank X is lost ...)" text for the message.
  std::string lost_suffix(int peer);
  /// The same text once resolve_lost(peer) ran.
  std::string resolved_lost_suffix(int peer) const;
  /// An error on a notice endpoint: records that the peer's notice
  /// connection ended (no notice will follow); false for data endpoints.
  bool note_notice_error(const chorus_tp_error_t& e);
  /// Polls without blocking, feeding notice traffic through filter_notices and
  /// note_notice_error, until nothing is ready. False when the poll failed.
  bool drain_notices();
  /// drain_notices and waits, until done() holds, `limit` passes or an abort.
  void pump_notices(const Deadline& limit, const std::function<bool()>& done);
  /// A post to `peer` failed with PEER_LOST: remembered for env_fail.
  void note_post_lost(int peer);
  /// Tells every other rank that this one lost lost_rank_; bounded.
  void send_notices();
  /// Orderly finalize: tells every peer this rank is leaving and waits,
  /// bounded, until every peer has said the same (or its notice connection
  /// ended), so that no rank closes a connection a peer still expects.
  void say_goodbye();
  /// The PEER_LOST message for a notice that arrived in the running call.
  std::string notice_message() const;

  // Call signatures (docs/reliability.md §4.5). Each call's signature goes
  // to a peer on the notice endpoint just before the call's first post to
  // or from that peer; before returning OK the call needs the signatures of
  // the peers it talked to, and every signature is compared on arrival.
  /// Starts the running call's signature; `talk_all`: send it to every peer
  /// whether or not the algorithm posts to it (broadcast: the root's part
  /// depends on nobody, so only this tells it the others disagree).
  void begin_signature(const CallSig& sig, bool talk_all);
  /// Sends the running call's signature to `peer` once per call. False when
  /// the notice endpoint refused it (the data post then reports the peer).
  void send_signature(int peer, bool ask = false);
  /// A receive from `peer` whose immediate is not the running call's digest
  /// (call_imm_): the peer sent it from another call. Asks the peer for its
  /// signature, to name both calls; the call fails with MISMATCH either way.
  void signature_from_data(int peer, uint32_t imm);
  /// After the algorithm returned OK, with the digest in the data: pairs the
  /// data crossed one way only still exchange signatures on the notice
  /// endpoint (the peer that only sent learns nothing from the data); a call
  /// that posted nothing exchanges them with every peer.
  void finish_signatures();
  /// Replies to the signature requests (kNoticeSignatureAsk) received.
  void answer_signature_requests();
  /// Data with another digest arrived and the sender's signature did not
  /// follow within the grace (or `now`: the call is failing anyway): records
  /// the mismatch with the sender's call unknown, so the call fails MISMATCH.
  void settle_suspect(bool now);
  /// A signature arrived from `peer`: queues and matches it.
  void on_signature(int peer, const CallSig& theirs);
  /// Records the first mismatch, tells every other rank, and makes the
  /// running call (or the next one) fail with MISMATCH.
  void note_mismatch(const CallSig& mine, const CallSig& theirs, int reported_by);
  /// Before a call returns OK: waits until every signature this call owes
  /// is matched. Returns the call's failure otherwise.
  int await_signatures();
  /// A peer whose connection closed while this call still owes matching its
  /// signature, or -1.
  int owed_peer_gone() const;
  /// A failing call: the status to report, MISMATCH when a mismatch is known
  /// or turns up within the notice grace.
  Status settle_failure(Status st);
  /// The TIMEOUT status of the running call: tells the peers, waits the
  /// notice grace for theirs, and names who was silent.
  Status timeout_status(const std::string& head);
  /// A known mismatch fails the running call (not an earlier call a rank
  /// is still finishing when another rank's notice arrives).
  bool mismatch_blocks_call() const;
  /// True once every signature the running call needs has been matched.
  bool signatures_matched() const;
  /// "mismatched calls: rank 0 called ... but rank 2 called ..." with advice.
  std::string mismatch_message() const;
  /// Sends one kind of notice to every other rank, bounded by the grace.
  void broadcast_notice(uint32_t kind, const CallSig* a, const CallSig* b);

  /// Which peers still owe completions in the running call, for timeout messages.
  std::string outstanding_peers() const;
  void note_posted(int peer, bool send);
  void note_completed(const chorus_tp_completion_t& c);

  // The transport table handed to algorithms: the plugin's own ops, except
  // that posts and polls also keep per-peer outstanding counts.
  static int proxy_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                             chorus_tp_mr_t* mr, uint64_t wr_id);
  static int proxy_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                             uint64_t wr_id);
  static int proxy_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max);
  /// A post on a NULL endpoint: fails the call naming the undeclared peer
  /// the algorithm asked for (undeclared_peer_text) and returns the status.
  int null_endpoint_post(bool send);
  /// The bookkeeping after a post to `peer` (-1: not a data endpoint):
  /// outstanding counts, retries, or the peer a PEER_LOST refusal names.
  /// Returns `rc`.
  int after_post(int peer, bool send, int rc);
  /// After the call's first data post to `ep`'s peer: its signature follows
  /// (after, so that on the peer it mostly arrives with the data and costs
  /// no wakeup of its own).
  void signature_after_post(int peer, bool send);
  /// The rank a data endpoint reaches, or -1 for any other endpoint.
  int peer_of(const chorus_tp_endpoint_t* ep) const {
    auto it = endpoint_peer_.find(ep);
    return it == endpoint_peer_.end() ? -1 : it->second;
  }
  static int proxy_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out);
  /// The transport's poll without the notice traffic: completions on notice
  /// endpoints are consumed, their errors dropped; a data error is kept in
  /// pending_error_ and reported as CHORUS_ERR_PENDING until read.
  int poll_data(chorus_tp_completion_t* out, size_t max);

  // Callbacks of chorus_algo_env_v1_t; `core` is the Communicator.
  static chorus_tp_endpoint_t* env_endpoint(void* core, int peer, int channel);
  static int env_mem_register(void* core, const void* addr, size_t length, chorus_tp_mr_t** mr_out);
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
  std::vector<chorus_tp_endpoint_t*> endpoints_;  // [peer * channels + channel]; NULL: no link
  DataPeers data_peers_;        // which peers have data endpoints (select_algorithms)
  std::string data_peers_why_;  // the algorithms whose declarations made data_peers_
  int undeclared_peer_ = -1;    // the running call asked for an endpoint data_peers_ lacks
  std::string call_algo_;       // the running call's algorithm, for undeclared_peer_text
  uint64_t opened_[3] = {};     // endpoints opened at init: data, notice, point-to-point
  std::vector<std::vector<std::byte>> deferred_;  // [peer * channels + channel]: peer's blob
  bool deferred_pending_ = false;                 // some data endpoint waits for first use
  std::atomic<uint64_t> data_connected_{0};       // data endpoints connected so far
  std::atomic<uint64_t> p2p_connected_{0};        // tagged point-to-point pairs connected so far
  struct IdleNotice {                    // a notice endpoint opened at init, connected on first use
    chorus_tp_endpoint_t* ep = nullptr;  // out of notice_eps_ until connected; nullptr then
    std::vector<std::byte> blob;         // the peer's notice address
    bool lazy = false;                   // deferred at init (defers_notice), connected or not
    bool connecting = false;
    struct Queued {
      CallSig sig;
      bool ask;
    };
    std::vector<Queued> queue;  // signatures waiting for the connection (or a free slot)
  };
  std::vector<IdleNotice> notice_idle_;        // [peer]; empty: every notice endpoint from init
  std::vector<char> notice_linked_;            // [peer]: a call here used the pair (defers_notice)
  int notice_connecting_ = 0;                  // notice endpoints in a polled connect
  int notice_queued_ = 0;                      // signatures waiting in IdleNotice queues
  std::atomic<uint64_t> notice_connected_{0};  // notice endpoints connected so far
  std::chrono::steady_clock::time_point notice_connect_polled_{};  // last poll of them all
  static constexpr auto kNoticeConnectGap = std::chrono::microseconds(200);
  std::unordered_map<const chorus_tp_endpoint_t*, int> endpoint_peer_;
  chorus_transport_plugin_v1_t proxy_{};
  std::vector<chorus_tp_endpoint_t*> notice_eps_;  // [peer]; nullptr for self
  std::unordered_map<const chorus_tp_endpoint_t*, int> notice_peer_;
  void* notice_block_ = nullptr;  // [peer] receive buffers, then the send buffer
  chorus_tp_mr_t* notice_mr_ = nullptr;
  std::vector<int> notice_lost_;       // [rank]: the rank it reported lost, or -1
  std::vector<char> notice_closed_;    // [peer]: its notice receive failed (connection ended)
  std::vector<char> notice_finished_;  // [peer]: how many "finalized" notices it sent
  NoticeRelay relay_;                  // relayed notices: duplicates, sends in flight
  int notice_first_from_ = -1;         // the rank whose peer-lost notice arrived first
  int notice_sends_done_ = 0;          // own notices completed or failed, in send_notices
  int lost_rank_ = -1;                 // whom this communicator's failure blames
  int lost_via_ = -1;                  // the peer that reported lost_rank_, -1: seen here
  int post_lost_peer_ = -1;            // the peer a post failed for with PEER_LOST, this call
  chorus_tp_error_t pending_error_{};  // read by poll_data, not yet reported
  bool has_pending_error_ = false;
  // Call signatures: streams_[peer][0] is this rank's sends to the peer,
  // [1] its receives from the peer (SigStream).
  bool check_signatures_ = true;
  uint64_t collective_seq_ = 0;
  std::vector<uint64_t> p2p_send_seq_, p2p_recv_seq_;  // [peer]
  CallSig call_sig_{};
  bool call_sig_active_ = false;
  std::vector<char> talked_;       // [peer]: the running call sent its signature
  std::vector<uint64_t> owed_[2];  // [dir][peer]: stream position the call needs matched
  std::vector<std::array<SigStream, 2>> streams_;
  std::vector<int> sig_sends_out_;       // [peer]: signature sends not yet completed
  std::vector<uint32_t> sig_send_next_;  // [peer]: next send slot
  // The signature in the data (transport immediates): a collective's data
  // messages carry signature_digest() of its signature, and a pair the data
  // crosses both ways needs no notice (docs/reliability.md §4.5).
  std::vector<char> imm_peer_;    // [peer]: its data endpoints carry immediates
  bool imm_any_ = false;          // some peer's do
  bool sig_in_data_ = false;      // the running call checks its digest in the data
  uint32_t call_imm_ = 0;         // the immediate of the running call's sends
  std::vector<uint8_t> touched_;  // [peer]: 1 posted a send, 2 a receive (sig_in_data_)
  int suspect_from_ = -1;         // a peer whose data carried another digest, this call
  Deadline suspect_until_ = Deadline::never();  // then: how long to wait for its signature
  std::vector<int> asked_;                      // peers that asked for this rank's signature
  bool answering_ = false;                      // in answer_signature_requests
  /// Per (collective, algorithm): the peers its last call crossed data with
  /// one way only. The next such call sends them its signature at its start
  /// rather than at its end, overlapping the exchange with the data. Both
  /// sides of a pair saw the same last call, so they predict alike.
  struct OneWay {
    int32_t call;
    char algo[sizeof(CallSig::algo)];
    std::vector<uint8_t> peers;  // [peer]: 1 one way
  };
  std::vector<OneWay> oneway_;
  OneWay* find_oneway();  // the running collective's entry, or nullptr
  bool mismatch_known_ = false;
  std::string mismatch_text_;         // "rank 0 called ... but rank 2 called ..."
  int mismatch_via_ = -1;             // the rank that reported it, -1: seen here
  std::vector<char> notice_timeout_;  // [rank]: it timed out and is leaving
  int timeout_first_from_ = -1;
  bool timeout_sent_ = false;            // this rank told the others it timed out
  bool awaiting_signatures_ = false;     // env_progress returns once they are matched
  CallSig mismatch_a_{}, mismatch_b_{};  // the first mismatch, for the notice
  bool mismatch_sent_ = false;
  std::vector<int> pending_sends_;  // per peer, in the running call
  std::vector<int> pending_recvs_;
  // transport.name = "auto": peers served by each sub-transport, set once
  // the endpoints are connected.
  std::vector<std::pair<std::string, uint64_t>> auto_peer_counts_;

  std::vector<std::shared_ptr<Plugin>> algorithms_;  // every algorithm that may be chosen
  std::array<std::vector<const Plugin*>, CHORUS_COLL_COUNT> candidates_;
  /// Per collective, the size classes whose `auto` choice was logged.
  mutable std::array<std::atomic<uint64_t>, CHORUS_COLL_COUNT> choice_logged_{};
  ChoiceMemo choice_memo_;  // run()'s last choice per collective; the stream holder's only
  std::vector<chorus_kv_t> no_settings_;
  std::vector<std::vector<chorus_kv_t>> algorithm_kv_;  // parallel to algorithms_
  std::vector<void*> algo_state_;  // parallel to algorithms_: a v2 plugin's comm_init state
  std::vector<char> algo_inited_;  // parallel to algorithms_: its comm_init succeeded
  std::vector<int> peer_host_;     // [rank]: index of its host, in order of first rank
  int host_count_ = 1;
  // The v2 task of the running call and its environment (one at a time).
  chorus_algo_env_v2_t task_env_{};
  chorus_algo_task_v2_t* task_ = nullptr;
  const chorus_algorithm_plugin_v2_t* task_algo_ = nullptr;

  std::vector<void*> staging_;
  std::vector<chorus_tp_mr_t*> staging_mr_;
  void* staging_block_ = nullptr;

  // State of the call in progress (one at a time per communicator).
  Deadline call_deadline_ = Deadline::never();
  std::string call_what_;
  std::vector<chorus_tp_mr_t*> call_mrs_;
  Status call_error_;

  // Tagged point-to-point; null when point_to_point.tagged is false.
  std::unique_ptr<P2pEngine> p2p_;
  std::shared_ptr<Request> current_;      // the request the executor runs
  std::atomic<bool> p2p_active_{false};   // the engine has registered operations
  std::atomic<bool> p2p_waiting_{false};  // the executor sleeps in the transport's wait
  bool p2p_mismatch_ = false;             // settle_p2p: spread the known mismatch
  Status p2p_break_;                      // settle_p2p: break the communicator with it

  std::atomic<bool> aborted_{false}, finalizing_{false};
  bool broken_ = false;
  Status broken_status_;
  std::string id_;
  uint64_t splits_ = 0;  // splits done so far, part of each child's id

  // Lanes: [k - 1] is lane k; empty with collectives.lanes = 1.
  std::vector<std::unique_ptr<Communicator>> lanes_;
  std::atomic<uint64_t> lane_next_{0};  // collectives issued (lane_for_call)
  std::shared_ptr<LaneFamily> family_;  // null with one lane
  // Order of the family's failed call (kNoOrder: none): calls issued later
  // stop, earlier ones run (family_fail).
  std::atomic<uint64_t> family_after_{Request::kNoOrder};
  uint64_t running_order_ = Request::kNoOrder;  // order of the call running here
  /// True when the running call was issued after the family's failure.
  bool family_stopped() const;
  int lane_ = 0;  // this communicator's lane

  // The stream: operations run one at a time in issue order; `busy_` while one runs.
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  // Point-to-point requests issued and not yet handed to the engine; they
  // do not wait for their turn in queue_ (drain_inbox).
  std::deque<std::shared_ptr<Request>> inbox_;
  std::atomic<bool> inbox_nonempty_{false};
  bool busy_ = false;
  // The request the worker runs (null when idle or for an inline call): once
  // it is done its waiter may finalize before the worker clears busy_, and
  // that is not a pending request.
  std::shared_ptr<Request> running_;
  // The worker drives tagged operations only (drive(nullptr)): it is busy,
  // but nothing is pending once the engine is idle.
  bool worker_driving_ = false;
  bool stopping_ = false;
  uint64_t next_seq_ = 0;
  // A finished blocking call's request, run again by the next blocking call
  // when no one else holds it (execute_request); guarded by q_mu_.
  std::shared_ptr<Request> spare_request_;
  // Operations with a sequence number above this fail (set by cancel()).
  std::atomic<uint64_t> cut_after_{UINT64_MAX};
  std::string cut_what_;
  std::thread worker_;

  // Counters (see counters()).
  std::unique_ptr<PeerCounters[]> peer_counters_;
  std::vector<std::pair<std::string, std::unique_ptr<std::atomic<uint64_t>>>>
      algo_ops_;  // "all_reduce.ring"
  std::atomic<uint64_t> send_ops_{0}, recv_ops_{0}, requests_issued_{0}, requests_cancelled_{0};
  std::atomic<uint64_t> errors_{0}, retries_{0}, transport_wait_ns_{0};
  std::shared_ptr<std::atomic<uint64_t>> request_wait_ns_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::atomic<uint64_t> inline_ops_{0}, queued_ops_{0}, waiter_ops_{0};
  std::atomic<uint64_t>* algo_counter(int collective, const Plugin* chosen);
};

}  // namespace chorus::core
