// Dispatch: runs one collective or point-to-point call on the calling thread
// (the stream's executor, request_queue.cc): argument checks, the algorithm
// choice, per-call registration, the deadline, the call signature and the
// algorithm plugin's entry point; and the per-endpoint count of outstanding
// posts that peer-loss reports name.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/communicator_internal.h"
#include "core/log.h"
#include "core/reduce.h"

#include <algorithm>

namespace chorus::core {

namespace {

/// The call description a v2 plugin sees (and that selection weighs).
chorus_algo_call_v2_t make_call(int collective, uint64_t bytes, int dtype, int op, int root,
                                size_t count, const void* in, void* out) {
  chorus_algo_call_v2_t c{};
  c.struct_size = sizeof(c);
  c.collective = collective;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  c.count = count;
  c.bytes = bytes;
  c.in = in;
  c.out = out;
  return c;
}

}  // namespace

template <class Call>
Status Communicator::run(const chorus_algo_call_v2_t& call_desc, const char* what, CallSig sig,
                         Call&& call) {
  const int collective = call_desc.collective;
  const uint64_t bytes = call_desc.bytes;
  if (auto st = usable(what); !st.is_ok()) return st;
  // The same call as the last one of its collective takes the same plugin
  // (choice_memo.h); with CHORUS_LOG=info every choice goes through
  // choose_plugin, which logs the first of each size class.
  ChoiceMemo::Choice choice;
  if (const auto* memo = choice_memo_.find(call_desc); memo && !log_enabled(CHORUS_LOG_INFO)) {
    choice = *memo;
  } else {
    choice.plugin = choose_plugin(call_desc);
    choice.index = algorithm_index(choice.plugin);
    if (!choice.plugin || choice.index == algorithms_.size())
      return {CHORUS_ERR_INTERNAL, std::string("no algorithm chosen for ") + what};
    choice.supported = plugin_supports(choice.index, call_desc);
    choice.counter = algo_counter(collective, choice.plugin);
    choice_memo_.remember(call_desc, choice);
  }
  const Plugin* chosen = choice.plugin;
  const size_t index = choice.index;
  // A pinned v2 plugin that refuses this (dtype, op): nothing is posted, so
  // every rank (which pinned the same plugin) refuses it alike.
  if (!choice.supported)
    return {CHORUS_ERR_NOT_SUPPORTED,
            who() + ": " + what + ": algorithm '" + chosen->name() + "' does not support " +
                (call_desc.dtype >= 0 ? std::string(chorus_dtype_name(call_desc.dtype)) : "") +
                (call_desc.op >= 0 ? std::string(" ") + chorus_op_name(call_desc.op) : "") +
                "; pin another algorithm for " + chorus_collective_name(collective) +
                " or use \"auto\""};
  const char* algo_name =
      chosen->algorithm_v2() ? chosen->algorithm_v2()->name : chosen->algorithm()->name;
  call_deadline_ = Deadline::after(seconds_ms(cfg_.timeout_collective_s));
  call_what_ = what;
  call_error_ = Status::ok();
  call_algo_ = algo_name;
  undeclared_peer_ = -1;
  post_lost_peer_ = -1;
  std::fill(pending_sends_.begin(), pending_sends_.end(), 0);
  std::fill(pending_recvs_.begin(), pending_recvs_.end(), 0);
  struct Running {
    explicit Running(Communicator* c) : self(c), log_scope(&c->id_) { t_running = c; }
    ~Running() {
      t_running = nullptr;
      self->call_sig_active_ = false;
      self->call_imm_ = 0;
    }
    Communicator* self;
    LogCommScope log_scope;
  } running(this);
  if (auto st = mismatch_pending(); !st.is_ok()) return st;
  // A mesh's non-neighbours are connected by the first call that may post
  // to them, before anything is posted (core/data_connect.cc).
  if (deferred_pending_ && chosen->algorithm_peers() != CHORUS_ALGO_PEERS_RING) {
    if (auto st = connect_deferred_data(); !st.is_ok()) {
      mark_broken(st);
      log(CHORUS_LOG_DEBUG, st.message());
      return st;
    }
  }
  sig.call = collective;
  sig.seq = collective_seq_++;
  std::strncpy(sig.algo, algo_name, sizeof(sig.algo) - 1);
  // The root of a broadcast depends on no other rank: it learns of a
  // disagreement only if every rank sends it its signature.
  begin_signature(sig, collective == CHORUS_COLL_BROADCAST);

  if (choice.counter) choice.counter->fetch_add(1, std::memory_order_relaxed);
  if (log_enabled(CHORUS_LOG_DEBUG))
    log(CHORUS_LOG_DEBUG, std::string(what) + ": " + std::to_string(bytes) +
                              " bytes via algorithm '" + algo_name + "'");
  int rc = CHORUS_OK;
  if (chosen->algorithm_v2()) {
    rc = drive_task(index, call_desc);
  } else {
    chorus_algo_env_v1_t env{};
    fill_env_v1(index, env);
    rc = call(chosen->algorithm(), &env);
  }
  if (rc == CHORUS_OK && call_sig_active_) {
    finish_signatures();
    rc = await_signatures();
  }
  release_call_registrations();
  if (rc == CHORUS_OK) {
    free_task();
    settle_p2p();  // what the engine's completions during the call left
    return Status::ok();
  }
  Status st = call_error_.is_ok()
                  ? Status(rc, "rank " + std::to_string(rank_) + ": " + what + ": algorithm '" +
                                   algo_name + "' failed with " + chorus_status_name(rc))
                  : call_error_;
  st = settle_failure(std::move(st));
  if (st.code() != CHORUS_ERR_INVALID_ARGUMENT) mark_broken(st);
  // After mark_broken closed the endpoints: nothing lands in the task's
  // own buffers once it is freed.
  free_task();
  log(CHORUS_LOG_DEBUG, st.message());
  return st;
}

void Communicator::fill_env_v1(size_t index, chorus_algo_env_v1_t& env) {
  fill_env_common(env);
  env.minor = CHORUS_ALGORITHM_ABI_MINOR;
  env.config = algorithm_kv_[index].empty() ? nullptr : algorithm_kv_[index].data();
  env.config_count = algorithm_kv_[index].size();
  env.progress = &Communicator::env_progress;
}

Status Communicator::all_reduce(const void* in, void* out, size_t count, int dtype, int op,
                                int32_t fused_calls, uint32_t fused_counts) {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op;
  // A fused all_reduce (core/api_group.cc): how many grouped calls it runs
  // and fused_digest() of their counts, compared with the peers' (CallSig).
  if (fused_calls >= 0) sig.root = fused_calls, sig.peer = int32_t(fused_counts);
  return run(make_call(CHORUS_COLL_ALL_REDUCE, bytes, dtype, op, -1, count, in, out), "all_reduce",
             sig, [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_reduce(env, in, out, count, dtype, op);
             });
}

Status Communicator::all_gather(const void* in, void* out, size_t count, int dtype) {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, size_t(size_), dtype, "output"); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype;
  return run(make_call(CHORUS_COLL_ALL_GATHER, bytes, dtype, -1, -1, count, in, out), "all_gather",
             sig, [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_gather(env, in, out, count, dtype);
             });
}

Status Communicator::reduce_scatter(const void* in, void* out, size_t count, int dtype, int op) {
  if (auto st = check_buffer(in, count, size_t(size_), dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op;
  return run(make_call(CHORUS_COLL_REDUCE_SCATTER, bytes, dtype, op, -1, count, in, out),
             "reduce_scatter", sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->reduce_scatter(env, in, out, count, dtype, op);
             });
}

Status Communicator::broadcast(void* buf, size_t count, int dtype, int root) {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (root < 0 || root >= size_)
    return {CHORUS_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(size_) +
                                             " ranks"};
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(make_call(CHORUS_COLL_BROADCAST, bytes, dtype, -1, root, count, buf, buf), "broadcast",
             sig, [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->broadcast(env, buf, count, dtype, root);
             });
}

Status Communicator::barrier() {
  return run(make_call(CHORUS_COLL_BARRIER, 0, -1, -1, -1, 0, nullptr, nullptr), "barrier",
             CallSig{},
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->barrier(env);
             });
}

// Rooted collectives and all_to_all(v): the same run() as the others. The
// size handed to the algorithm choice must be the same on every rank, or
// ranks could pick different algorithms: all_to_allv's sizes differ per rank,
// so it is chosen by rank count alone (bytes 0).

Status Communicator::reduce(const void* in, void* out, size_t count, int dtype, int op, int root) {
  if (auto st = check_reduce(in, out, count, dtype, op, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op, sig.root = root;
  return run(make_call(CHORUS_COLL_REDUCE, bytes, dtype, op, root, count, in, out), "reduce", sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->reduce(env, in, out, count, dtype, op, root);
             });
}

Status Communicator::gather(const void* in, void* out, size_t count, int dtype, int root) {
  if (auto st = check_gather(in, out, count, dtype, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(make_call(CHORUS_COLL_GATHER, bytes, dtype, -1, root, count, in, out), "gather", sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->gather(env, in, out, count, dtype, root);
             });
}

Status Communicator::scatter(const void* in, void* out, size_t count, int dtype, int root) {
  if (auto st = check_scatter(in, out, count, dtype, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(make_call(CHORUS_COLL_SCATTER, bytes, dtype, -1, root, count, in, out), "scatter", sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->scatter(env, in, out, count, dtype, root);
             });
}

Status Communicator::all_to_all(const void* in, void* out, size_t count, int dtype) {
  if (auto st = check_all_to_all(in, out, count, dtype); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype) * uint64_t(size_);
  CallSig sig;
  sig.count = count, sig.dtype = dtype;
  return run(make_call(CHORUS_COLL_ALL_TO_ALL, bytes, dtype, -1, -1, count, in, out), "all_to_all",
             sig, [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_to_all(env, in, out, count, dtype);
             });
}

Status Communicator::all_to_allv(const void* in, const size_t* send_counts,
                                 const size_t* send_offsets, void* out, const size_t* recv_counts,
                                 const size_t* recv_offsets, int dtype) {
  if (auto st =
          check_all_to_allv(in, send_counts, send_offsets, out, recv_counts, recv_offsets, dtype);
      !st.is_ok())
    return st;
  // The per-peer counts differ between ranks by design: the signature
  // carries the dtype only (count 0).
  CallSig sig;
  sig.dtype = dtype;
  chorus_algo_call_v2_t c = make_call(CHORUS_COLL_ALL_TO_ALLV, 0, dtype, -1, -1, 0, in, out);
  c.send_counts = send_counts;
  c.send_offsets = send_offsets;
  c.recv_counts = recv_counts;
  c.recv_offsets = recv_offsets;
  return run(c, "all_to_allv", sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_to_allv(env, in, send_counts, send_offsets, out, recv_counts,
                                     recv_offsets, dtype);
             });
}

// With the tagged engine (point_to_point.tagged, the default), send and recv
// are its ordered operations: they progress alongside everything else, so
// no posting order deadlocks; without it they run in the stream (p2p).
Status Communicator::send(const void* buf, size_t count, int dtype, int peer) {
  if (p2p_ && current_)
    return start_tagged(true, const_cast<void*>(buf), count, dtype, peer, -1, true);
  return p2p(true, const_cast<void*>(buf), count, dtype, peer);
}

Status Communicator::recv(void* buf, size_t count, int dtype, int peer) {
  if (p2p_ && current_) return start_tagged(false, buf, count, dtype, peer, -1, true);
  return p2p(false, buf, count, dtype, peer);
}

Status Communicator::p2p(bool is_send, void* buf, size_t count, int dtype, int peer) {
  const char* what = is_send ? "send" : "recv";
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (peer < 0 || peer >= size_ || peer == rank_)
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": peer " + std::to_string(peer) +
                                             " is not another rank (rank " + std::to_string(rank_) +
                                             " of " + std::to_string(size_) + ")"};
  if (auto st = usable(what); !st.is_ok()) return st;
  // Only outside a request with the tagged engine on (the stream path is
  // otherwise taken with point_to_point.tagged = false, which connects every
  // peer) can the peer lack data endpoints.
  if (!data_peers_.links(rank_, peer))
    return {CHORUS_ERR_INVALID_ARGUMENT,
            who() + ": " + what + (is_send ? " to rank " : " from rank ") + std::to_string(peer) +
                ": no data endpoint to rank " + std::to_string(peer) + " (" + data_peers_why_ +
                "); use the tagged calls, or set point_to_point.tagged = false to connect every "
                "peer"};
  call_deadline_ = Deadline::after(seconds_ms(cfg_.timeout_collective_s));
  call_what_ = std::string(what) + (is_send ? " to rank " : " from rank ") + std::to_string(peer);
  call_error_ = Status::ok();
  call_algo_.clear();
  undeclared_peer_ = -1;
  post_lost_peer_ = -1;
  std::fill(pending_sends_.begin(), pending_sends_.end(), 0);
  std::fill(pending_recvs_.begin(), pending_recvs_.end(), 0);
  t_running = this;
  struct Reset {
    Communicator* self;
    ~Reset() {
      t_running = nullptr;
      self->call_sig_active_ = false;
      self->call_imm_ = 0;
    }
  } reset{this};
  LogCommScope log_scope(&id_);
  if (auto st = mismatch_pending(); !st.is_ok()) return st;
  {
    CallSig sig;
    sig.call = is_send ? CallSig::kSigSend : CallSig::kSigRecv;
    sig.count = uint64_t(count) * chorus_dtype_size(dtype);
    sig.peer = peer;
    sig.seq = (is_send ? p2p_send_seq_ : p2p_recv_seq_)[size_t(peer)]++;
    begin_signature(sig, false);
  }

  (is_send ? send_ops_ : recv_ops_).fetch_add(1, std::memory_order_relaxed);
  size_t bytes = count * chorus_dtype_size(dtype);
  chorus_tp_endpoint_t* ep = endpoints_[size_t(peer) * size_t(cfg_.channels)];
  chorus_tp_mr_t* mr = nullptr;
  if (bytes > 0 && (caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION)) {
    if (int rc = env_mem_register(this, buf, bytes, &mr); rc != CHORUS_OK) return call_error_;
  }
  const size_t max_msg = size_t(std::min<uint64_t>(caps_.max_message_size, 1ull << 30));
  const size_t chunks = bytes == 0 ? 1 : (bytes + max_msg - 1) / max_msg;
  const size_t window =
      std::max<uint32_t>(1, is_send ? caps_.max_outstanding_sends : caps_.max_outstanding_recvs);
  size_t posted = 0, done = 0;
  auto* base = static_cast<std::byte*>(buf);
  chorus_tp_completion_t comps[16];
  int rc = CHORUS_OK;
  while (done < chunks && rc == CHORUS_OK) {
    while (posted < chunks && posted - done < window) {
      size_t off = posted * max_msg;
      size_t len = std::min(max_msg, bytes - off);
      int prc = is_send ? proxy_post_send(ep, base + off, len, mr, posted)
                        : proxy_post_recv(ep, base + off, len, mr, posted);
      if (prc == CHORUS_ERR_AGAIN) {
        retries_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (prc != CHORUS_OK) {
        rc = env_fail(this, prc,
                      (std::string("posting to rank ") + std::to_string(peer) +
                       " failed: " + tp_->last_error())
                          .c_str());
        break;
      }
      ++posted;
    }
    if (rc != CHORUS_OK) break;
    int n = env_progress(this, comps, 16);
    if (n < 0) {
      rc = n;
      break;
    }
    for (int i = 0; i < n && rc == CHORUS_OK; ++i) {
      size_t idx = size_t(comps[i].wr_id);
      size_t expect = std::min(max_msg, bytes - idx * max_msg);
      if (!is_send && comps[i].byte_len != expect)
        rc = env_fail(this, CHORUS_ERR_INVALID_ARGUMENT,
                      ("received " + std::to_string(comps[i].byte_len) + " bytes from rank " +
                       std::to_string(peer) + " where " + std::to_string(expect) +
                       " were expected: send and recv counts and dtypes must match")
                          .c_str());
      ++done;
    }
  }
  // A receive needs the sender's signature; a send returns without the
  // receiver's (sends stay eager: see docs/reliability.md §4.5).
  if (rc == CHORUS_OK && call_sig_active_ && !is_send) rc = await_signatures();
  release_call_registrations();
  if (rc == CHORUS_OK) return Status::ok();
  call_error_ = settle_failure(
      call_error_.is_ok() ? Status(rc, who() + ": " + call_what_ + ": " + chorus_status_name(rc))
                          : call_error_);
  if (call_error_.code() != CHORUS_ERR_INVALID_ARGUMENT) mark_broken(call_error_);
  return call_error_;
}

void Communicator::note_posted(int peer, bool send) {
  if (peer < 0) return;
  ++(send ? pending_sends_ : pending_recvs_)[size_t(peer)];
}

void Communicator::note_completed(const chorus_tp_completion_t& c) {
  auto it = endpoint_peer_.find(c.endpoint);
  if (it == endpoint_peer_.end()) return;
  PeerCounters& pc = peer_counters_[size_t(it->second)];
  if (c.opcode == CHORUS_TP_SEND) {
    pc.bytes_sent.fetch_add(c.byte_len, std::memory_order_relaxed);
    pc.msgs_sent.fetch_add(1, std::memory_order_relaxed);
  } else {
    pc.bytes_recv.fetch_add(c.byte_len, std::memory_order_relaxed);
    pc.msgs_recv.fetch_add(1, std::memory_order_relaxed);
    // The data's digest is the sender's call: it must be the running one.
    if (call_sig_active_ && imm_peer_[size_t(it->second)] && c.imm_data != call_imm_)
      signature_from_data(it->second, c.imm_data);
  }
  auto& counts = c.opcode == CHORUS_TP_SEND ? pending_sends_ : pending_recvs_;
  if (counts[size_t(it->second)] > 0) --counts[size_t(it->second)];
}

}  // namespace chorus::core
