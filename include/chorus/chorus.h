/**
 * @file chorus/chorus.h
 * @brief Chorus host API (C). Every call returns a chorus_status_t; on failure
 *        chorus_last_error() gives the message for the calling thread. No
 *        exception ever crosses this boundary.
 *
 * Threading: calls on one communicator may come from any thread; they are
 * executed one at a time, in the order they were issued (blocking and
 * non-blocking alike). The issue order must be the same on every rank, so a
 * host that issues from several threads must order those threads itself.
 * chorus_comm_abort() may be called from any thread at any time. Different
 * communicators (a parent and the children of chorus_comm_split) progress
 * independently and may be used concurrently.
 */
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include <chorus/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

typedef struct chorus_comm chorus_comm_t; /**< Opaque communicator. */

/**
 * Host-supplied all-gather for bootstrapping without Chorus's side channel:
 * every rank passes `size` bytes at `in`; on return `out` holds size * nranks
 * bytes, rank r's contribution at out + r * size (MPI_Allgather semantics).
 * Returns 0 on success. Called from the thread that called chorus_comm_init.
 */
typedef int (*chorus_allgather_fn_t)(void* ctx, const void* in, void* out, size_t size);
/** Host-supplied barrier; 0 on success. */
typedef int (*chorus_barrier_fn_t)(void* ctx);

/**
 * Options for chorus_comm_init. Zero-initialise, set `struct_size`, then fill
 * what you want to pin; everything left unset (-1 / NULL) comes from the
 * config file, then the environment. Frozen: append only.
 */
typedef struct chorus_options {
  size_t struct_size;
  /** This process's rank, or -1. */
  int rank;
  /** Number of ranks, or -1 (0 is treated as unset too). */
  int size;
  /** Coordinator "host:port" where rank 0 listens, or NULL. */
  const char* coordinator;
  /** TOML config path, or NULL (then CHORUS_CONFIG, then the embedded default). */
  const char* config_path;
  /**
   * Extra settings as "key=value" strings with TOML values, e.g.
   * "transport.name=\"tcp\"" or "timeout.collective=30". They override the
   * file and the environment.
   */
  const char* const* settings;
  size_t settings_count;
  /**
   * Optional host-owned bootstrap: when `allgather` is set, Chorus exchanges
   * its connection data through it instead of its own TCP side channel (no
   * coordinator needed; rank and size must be known). `barrier` may be NULL
   * (then an all-gather serves). `bootstrap_ctx` is passed to both.
   */
  chorus_allgather_fn_t allgather;
  chorus_barrier_fn_t barrier;
  void* bootstrap_ctx;
} chorus_options_t;

/** Fill `opts` with "nothing pinned". */
void chorus_options_init(chorus_options_t* opts);

/**
 * Where the configuration `opts` (NULL: none) would take `key` from, without
 * making a job: the same file, environment and API sources chorus_comm_init
 * reads. On success `origin` holds where the key's value comes from
 * ("chorus.toml:3", "environment variable CHORUS_TRANSPORT", "API setting
 * 'transport.name=\"tcp\"'", "launcher variable SLURM_PROCID") and `value`
 * that value as its source wrote it (TOML text, or the variable's text); both
 * are "" when no source sets the key and its built-in default applies
 * (docs/configuration.md). Either buffer may be NULL with length 0; a value
 * that does not fit is INVALID_ARGUMENT. A configuration chorus_comm_init
 * would reject is rejected here with the same status and message.
 */
int chorus_config_get(const chorus_options_t* opts, const char* key, char* value, size_t value_len,
                      char* origin, size_t origin_len);

/**
 * Create a communicator: read the configuration, load the transport and
 * algorithm plugins, bootstrap with the other ranks and connect endpoints.
 * Blocks until every rank has joined or `timeout.init` passes.
 * @param[in]  opts  options, or NULL for "everything from config/environment"
 * @param[out] comm_out  the communicator, set only on success
 */
int chorus_comm_init(const chorus_options_t* opts, chorus_comm_t** comm_out);

/**
 * Whether the transport chorus_comm_init would use with `opts` can be used on
 * this machine: its plugin is found, loads and initialises (for
 * transport.name = "auto", both sub-transports'), and its optional describe
 * op finds something to use (a device, a provider). Reads the configuration
 * as chorus_comm_init does but joins no job: rank, size and coordinator are
 * not needed. Blocks while the plugin loads; loaded plugins are released
 * again unless a communicator holds them.
 * @param[in] opts  options, or NULL for "everything from config/environment"
 * @returns CHORUS_OK; CHORUS_ERR_UNAVAILABLE (plugin missing, not loadable,
 *          or nothing usable here) or CHORUS_ERR_INVALID_ARGUMENT (the
 *          configuration is rejected), with the reason in chorus_last_error().
 */
int chorus_transport_probe(const chorus_options_t* opts);

/**
 * Destroy a communicator. Never hangs; safe on a failed or aborted one. NULL is
 * ignored. Requests still pending are aborted: queued ones complete with
 * CHORUS_ERR_ABORTED without running, a running one is interrupted as by
 * chorus_comm_abort() (its peers then fail too). Their handles stay valid
 * until chorus_request_free(). Once this returns, Chorus no longer touches any
 * request buffer. Children from chorus_comm_split() are independent and must
 * be finalized on their own.
 */
int chorus_comm_finalize(chorus_comm_t* comm);

/**
 * Abort: make the current and every later call on `comm` return
 * CHORUS_ERR_ABORTED promptly. Any thread, any time; the communicator must
 * still be finalized.
 */
int chorus_comm_abort(chorus_comm_t* comm);

int chorus_comm_rank(const chorus_comm_t* comm, int* rank_out);
int chorus_comm_size(const chorus_comm_t* comm, int* size_out);

/**
 * Name of the algorithm `comm` would use for `collective` at `bytes`
 * (total payload per rank), or NULL if none. Valid while `comm` lives.
 */
const char* chorus_comm_algorithm(const chorus_comm_t* comm, int collective, uint64_t bytes);

/** Name of the transport `comm` uses. Valid while `comm` lives. */
const char* chorus_comm_transport(const chorus_comm_t* comm);

/**
 * out[i] = op over ranks of in[i]. `in` may equal `out`; any other overlap is
 * CHORUS_ERR_INVALID_ARGUMENT, as is a buffer beyond PTRDIFF_MAX bytes (for
 * every collective; docs/architecture.md, "Buffers and aliasing").
 */
int chorus_all_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                      int op);
/**
 * out = concatenation over ranks of each rank's `count` elements. `out` holds
 * size*count; `in` may be `out` + rank*count (in place), else disjoint.
 */
int chorus_all_gather(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype);
/**
 * `in` holds size*count elements; rank r receives block r of the reduction in
 * `out`, which must not overlap `in`.
 */
int chorus_reduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                          int op);
/** `buf` on `root` is copied into `buf` on every rank. */
int chorus_broadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root);
/** Returns once every rank has entered the barrier. */
int chorus_barrier(chorus_comm_t* comm);
/**
 * Reduction to one rank: out[i] = op over ranks of in[i], on `root` only.
 * @param[in]  in   `count` elements on every rank
 * @param[out] out  `count` elements, significant only on `root` (may be NULL
 *                  on the other ranks); `in` may equal `out` on the root (in
 *                  place); otherwise the two must not overlap.
 */
int chorus_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype, int op,
                  int root);
/**
 * Gather to one rank: rank r's `count` elements land at out + r*count on `root`.
 * @param[in]  in   `count` elements on every rank
 * @param[out] out  size*count elements on `root` (may be NULL elsewhere). On
 *                  the root `in` may equal out + root*count (in place);
 *                  otherwise `in` must not overlap `out`.
 */
int chorus_gather(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                  int root);
/**
 * Scatter from one rank: block r of the root's `in` (count elements at
 * in + r*count) lands in `out` on rank r.
 * @param[in]  in   size*count elements on `root` (may be NULL elsewhere)
 * @param[out] out  `count` elements on every rank. On the root `out` may equal
 *                  in + root*count (in place); otherwise it must not overlap `in`.
 */
int chorus_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                   int root);
/**
 * Personalised exchange: block p of `in` (count elements at in + p*count)
 * goes to rank p, where it lands at out + r*count (r = this rank). `in` and
 * `out` hold size*count elements each. `in` may equal `out` (in place, at the
 * cost of one copy of the input); otherwise they must not overlap.
 */
int chorus_all_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype);
/**
 * all_to_all with per-rank counts and offsets, all in elements: the
 * send_counts[p] elements at in + send_offsets[p] go to rank p, which stores
 * them at out + recv_offsets[r]. Each array has one entry per rank. Rules:
 * send_counts[p] on this rank must equal recv_counts[r] on rank p (a mismatch
 * is only seen when the data arrives, and fails the call);
 * send_counts[rank] == recv_counts[rank]; received blocks must not overlap each
 * other; `in` and `out` must not overlap (no in-place form). Send blocks may
 * overlap (they are only read).
 */
int chorus_all_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                       const size_t* send_offsets, void* out, const size_t* recv_counts,
                       const size_t* recv_offsets, int dtype);
/** Blocking send of `count` elements to `peer`; matched in order by chorus_recv on `peer`. */
int chorus_send(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer);
/** Blocking receive of exactly `count` elements from `peer`. */
int chorus_recv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer);

/* ------------------------------------------------------------------------- */
/* Non-blocking operations                                                   */
/* ------------------------------------------------------------------------- */

/**
 * Handle of a non-blocking operation. Created by the chorus_i* calls, released
 * by chorus_request_free().
 *
 * Ordering: every operation on a communicator, blocking or not, runs in issue
 * order on that communicator, one at a time, as in MPI and NCCL; the issue
 * order must match across ranks. Non-blocking operations are progressed by a
 * per-communicator progress thread, started on the first non-blocking call, so
 * they advance without the host calling chorus_test(). A blocking call
 * returns after every earlier operation and itself have completed.
 *
 * Buffers: the caller must not touch (or free) the buffers of a request until
 * it is complete (chorus_test() reports done, or chorus_wait() returns
 * something other than CHORUS_ERR_AGAIN).
 *
 * Deadlines: each operation gets `timeout.collective` from the moment it
 * starts running; waiting in the queue does not count.
 */
typedef struct chorus_request chorus_request_t;

/** Non-blocking chorus_all_reduce(); `*req_out` is set only on success. */
int chorus_iall_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                       int op, chorus_request_t** req_out);
/** Non-blocking chorus_all_gather(). */
int chorus_iall_gather(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                       chorus_request_t** req_out);
/** Non-blocking chorus_reduce_scatter(). */
int chorus_ireduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                           int op, chorus_request_t** req_out);
/** Non-blocking chorus_broadcast(). */
int chorus_ibroadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root,
                      chorus_request_t** req_out);
/** Non-blocking chorus_reduce(). */
int chorus_ireduce(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype, int op,
                   int root, chorus_request_t** req_out);
/** Non-blocking chorus_gather(). */
int chorus_igather(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                   int root, chorus_request_t** req_out);
/** Non-blocking chorus_scatter(). */
int chorus_iscatter(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                    int root, chorus_request_t** req_out);
/** Non-blocking chorus_all_to_all(). */
int chorus_iall_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                       chorus_request_t** req_out);
/**
 * Non-blocking chorus_all_to_allv(). The four arrays are copied at issue time;
 * the data buffers must stay untouched until the request completes.
 */
int chorus_iall_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                        const size_t* send_offsets, void* out, const size_t* recv_counts,
                        const size_t* recv_offsets, int dtype, chorus_request_t** req_out);
/** Non-blocking chorus_barrier(). */
int chorus_ibarrier(chorus_comm_t* comm, chorus_request_t** req_out);
/**
 * Non-blocking chorus_send() / chorus_recv(). With point_to_point.tagged =
 * true (the default) they are the tagged engine's ordered messages: they
 * match in order per pair of ranks (never a tagged call's message), the
 * sizes must be equal (else CHORUS_ERR_MISMATCH on every rank), and they
 * progress alongside everything else, so any posting order works, e.g. both
 * ranks isend first and irecv second at any size. With it false they run in
 * issue order with everything else, one at a time, and a send does not
 * complete before the peer has posted the matching receive: order pairs so
 * that one side receives first.
 */
int chorus_isend(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer,
                 chorus_request_t** req_out);
int chorus_irecv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer,
                 chorus_request_t** req_out);

/* ------------------------------------------------------------------------- */
/* Tagged point-to-point (MPI-like matching)                                 */
/* ------------------------------------------------------------------------- */

/** Receive from any rank (`source` of the tagged receives). */
#define CHORUS_ANY_SOURCE (-1)
/** Receive any tag (`tag` of the tagged receives). */
#define CHORUS_ANY_TAG (-1)
/** Largest tag; tags are 0..CHORUS_TAG_MAX. */
#define CHORUS_TAG_MAX 0x7fffffff

/** What a tagged receive got: the sender, its tag and the element count. */
typedef struct chorus_p2p_status {
  int source;
  int tag;
  size_t count;
} chorus_p2p_status_t;

/**
 * Tagged point-to-point, matched like MPI's: a message matches the oldest
 * posted receive whose `source` (a rank or CHORUS_ANY_SOURCE) and `tag` (or
 * CHORUS_ANY_TAG) accept it; messages from one sender that one receive could
 * take are matched in the order they were sent. Unlike chorus_send/recv they
 * do not wait for their turn behind other operations: once issued, a tagged
 * send or receive progresses alongside everything else on the communicator
 * (collectives included), so sends and receives may be posted in any order
 * on either side, e.g. both ranks isend first and irecv second, at any size.
 *
 * Sizes: a receive takes a message of up to `count` elements of `dtype`
 * (chorus_p2p_status_t.count says how many came). A message of another dtype
 * or larger than the buffer fails the receive with CHORUS_ERR_MISMATCH naming
 * both sides, and nothing is written; above the eager size (docs/embedding.md,
 * "Tagged point-to-point") the send fails with it too, smaller sends have
 * completed by then. Messages up to the eager size are copied out at once;
 * larger ones go straight from the sender's buffer into the receiver's after
 * the receive is matched (rendezvous), never through unbounded buffering.
 *
 * A send completes when its buffer may be reused; a receive when the data is
 * in place. Each operation has `timeout.collective` from the moment it is
 * issued. Tagged traffic is separate from chorus_send/recv's ordered stream:
 * a tagged receive never takes an untagged message. Requires
 * `point_to_point.tagged = true` (the default) on every rank.
 */
int chorus_send_tagged(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer,
                       int tag);
/** Blocking tagged receive; `status` may be NULL. */
int chorus_recv_tagged(chorus_comm_t* comm, void* buf, size_t count, int dtype, int source, int tag,
                       chorus_p2p_status_t* status);
/** Non-blocking chorus_send_tagged(). */
int chorus_isend_tagged(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer,
                        int tag, chorus_request_t** req_out);
/** Non-blocking chorus_recv_tagged(); chorus_request_p2p_status() reads what it got. */
int chorus_irecv_tagged(chorus_comm_t* comm, void* buf, size_t count, int dtype, int source,
                        int tag, chorus_request_t** req_out);
/**
 * What a completed, successful tagged receive got. CHORUS_ERR_AGAIN while
 * it is pending; CHORUS_ERR_INVALID_ARGUMENT for a request of another kind.
 */
int chorus_request_p2p_status(chorus_request_t* req, chorus_p2p_status_t* status_out);

/**
 * Never blocks. When the request is still pending: `*done_out` = 0 and
 * CHORUS_OK. When it is complete: `*done_out` = 1 and the operation's own
 * status (with chorus_last_error() set on failure); may be asked again.
 */
int chorus_test(chorus_request_t* req, int* done_out);

/**
 * Blocks until the request completes or `timeout_ms` passes (< 0: no limit
 * besides the operation's own deadline). Returns the operation's status once
 * complete, or CHORUS_ERR_AGAIN if it is still pending when `timeout_ms`
 * passes (the request stays valid; wait again, test, or free it). Any thread.
 */
int chorus_wait(chorus_request_t* req, int timeout_ms);

/**
 * Releases the handle. A pending request is not cancelled: it still runs in
 * order, its result is discarded, and its buffers must stay valid until it
 * completes (a later request completing, or chorus_comm_finalize returning,
 * proves that). NULL is ignored.
 */
int chorus_request_free(chorus_request_t* req);

/**
 * Cancels a request that has not started running: it completes at once with
 * CHORUS_ERR_ABORTED and never touches its buffers. Because the other ranks
 * still expect that operation, every operation issued on this communicator
 * after it fails with CHORUS_ERR_ABORTED too (the ones issued before it run
 * normally): cancellation is meant for teardown, before chorus_comm_finalize.
 * A request that has started (or finished) cannot be cancelled: returns
 * CHORUS_ERR_NOT_SUPPORTED and changes nothing; wait for it, or
 * chorus_comm_abort() the communicator.
 */
int chorus_cancel(chorus_request_t* req);
/* ------------------------------------------------------------------------- */
/* Grouped calls                                                             */
/* ------------------------------------------------------------------------- */

/**
 * Opens a group on the calling thread (as NCCL's ncclGroupStart). Until the
 * matching chorus_group_end(), the non-blocking calls this thread issues, on
 * any communicator, are checked and queued but not started: each returns its
 * request at once. Groups nest; only the outermost chorus_group_end() acts.
 *
 * Inside a group, a blocking collective or point-to-point call fails with
 * CHORUS_ERR_INVALID_ARGUMENT (it could not complete before the group ends),
 * as do chorus_wait() and chorus_test() on a request of the open group.
 * A grouped request cannot be cancelled (chorus_cancel() returns
 * CHORUS_ERR_NOT_SUPPORTED).
 *
 * @returns CHORUS_OK. Never blocks.
 * @note Per thread: calls issued by other threads are not part of the group.
 */
int chorus_group_start(void);

/**
 * Closes the calling thread's innermost group; closing the outermost one
 * issues its calls, per communicator in issue order. Consecutive
 * chorus_iall_reduce() calls on one communicator with the same dtype and op
 * whose sizes add up to at most `collectives.fusion_bytes` run as one
 * all_reduce over a staging buffer (packed before, unpacked after); every
 * other call runs as if issued here. Each request completes when the call
 * (or the fused call) that carries it does, with its status: a fused call
 * that fails fails every call it carried.
 *
 * Every rank must group the same calls in the same order with the same
 * `collectives.fusion_bytes`; otherwise the calls fail with
 * CHORUS_ERR_MISMATCH on every rank (with `check.signatures` on).
 *
 * @returns CHORUS_OK; CHORUS_ERR_INVALID_ARGUMENT when no group is open on
 *          this thread; CHORUS_ERR_ABORTED when a grouped call's communicator
 *          was finalized before the group ended (its requests fail alike).
 *          Never blocks.
 */
int chorus_group_end(void);

/* ------------------------------------------------------------------------- */
/* Sub-communicators                                                          */
/* ------------------------------------------------------------------------- */

/** Colour of a rank that wants no communicator from chorus_comm_split(). */
#define CHORUS_UNDEFINED (-1)

/**
 * Collective over `parent` (issued in order like any other operation): the
 * ranks passing the same `color` >= 0 form a new communicator, ranked by
 * (`key`, rank in `parent`). A negative color (CHORUS_UNDEFINED) takes part
 * but gets `*child_out` = NULL. The child has its own transport context and
 * connections (set up through `parent`), its own progress thread and its own
 * counters; it may be used concurrently with `parent`, from other threads,
 * and outlives it if finalized later.
 */
int chorus_comm_split(chorus_comm_t* parent, int color, int key, chorus_comm_t** child_out);

/**
 * Identifier of `comm`, the same on every member rank: "w0" for the first
 * world communicator of the process, "w0.s0c1" for the color-1 child of its
 * first split. Log lines carry it. Valid while `comm` lives.
 */
const char* chorus_comm_id(const chorus_comm_t* comm);

/* ------------------------------------------------------------------------- */
/* Counters                                                                  */
/* ------------------------------------------------------------------------- */

/** One counter: a dotted name and its value. Frozen. */
typedef struct chorus_counter {
  char name[64];
  uint64_t value;
} chorus_counter_t;

/**
 * Snapshot of `comm`'s counters (each value exact, the set not atomic).
 * Writes up to `max` entries to `out` (`out` may be NULL when `max` is 0) and
 * sets `*count_out` to the number of counters available, so a first call with
 * max = 0 sizes the array. Names (more may be added; never rely on order):
 *  - bytes_sent, messages_sent, bytes_received, messages_received (totals)
 *  - peer.<r>.bytes_sent / .messages_sent / .bytes_received / .messages_received
 *  - ops.<collective>.<algorithm> (e.g. ops.all_reduce.ring), ops.send, ops.recv
 *  - ops.inline / ops.queued: operations run on the caller's thread / queued
 *    for the progress thread; ops.run_by_waiter: queued ones that the thread
 *    waiting for them without a limit ran itself, the worker not having
 *    started them; requests.issued, requests.cancelled
 *  - wait.transport_ns: time blocked in the transport's wait;
 *    wait.request_ns: time host threads spent blocked in chorus_wait() and in
 *    blocking calls waiting for earlier requests
 *  - retries (posts refused with a full queue and retried), errors (failed calls)
 *  - endpoints.data, endpoints.data_peers, endpoints.notice,
 *    endpoints.point_to_point: the endpoints this rank opened at init;
 *    endpoints.p2p_connected: tagged point-to-point pairs connected so far
 *    (over tcp they connect on first use)
 * Any thread, any time while `comm` lives.
 */
int chorus_comm_counters(const chorus_comm_t* comm, chorus_counter_t* out, size_t max,
                         size_t* count_out);

/** Message of the last failed call on this thread ("" if none). Valid until the next call. */
const char* chorus_last_error(void);
/** Short name of a status code, e.g. "CHORUS_ERR_TIMEOUT". */
const char* chorus_status_name(int status);
/** Name of a dtype ("float32"), or NULL. */
const char* chorus_dtype_name(int dtype);
/** Parse a dtype name; returns CHORUS_ERR_INVALID_ARGUMENT for an unknown one. */
int chorus_dtype_from_name(const char* name, int* dtype_out);
/** Name of an op ("sum"), or NULL. */
const char* chorus_op_name(int op);
int chorus_op_from_name(const char* name, int* op_out);
/** Name of a collective ("all_reduce"), or NULL. */
const char* chorus_collective_name(int collective);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_H_ */
