/**
 * @file chorus/algorithm.h
 * @brief The algorithm plugin ABI: major version 1, and version 2 below it.
 *
 * An algorithm plugin exports exactly one symbol, `chorus_algorithm_plugin_v1`,
 * of type chorus_algorithm_plugin_v1_t. The built-in ring algorithm uses this
 * same ABI. Algorithms never see the network directly: the core hands each
 * call an environment (chorus_algo_env_v1_t) with the connected endpoints,
 * the transport's ops, registered staging buffers, the reduction kernels and
 * a `progress` call that enforces the deadline and abort.
 *
 * Frozen: append only, bump CHORUS_ALGORITHM_ABI_MINOR.
 */
#ifndef CHORUS_ALGORITHM_H_
#define CHORUS_ALGORITHM_H_

#include <chorus/transport.h>
#include <chorus/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_ALGORITHM_ABI_MAJOR 1
#define CHORUS_ALGORITHM_ABI_MINOR 1
/** Name of the symbol every v1 algorithm plugin exports. */
#define CHORUS_ALGORITHM_SYMBOL_V1 "chorus_algorithm_plugin_v1"

/**
 * Which peers an algorithm posts to (the `peers` field of both table
 * versions). A ring needs its two neighbours, a mesh everyone.
 */
typedef enum chorus_algo_peers {
  CHORUS_ALGO_PEERS_RING = 1, /**< rank-1 and rank+1 (mod size) */
  CHORUS_ALGO_PEERS_ALL = 2,  /**< every other rank */
} chorus_algo_peers_t;

/** Guarantees an algorithm declares (chorus_algorithm_plugin_v1_t::flags). */
enum {
  /** Every rank ends with bitwise-identical reduction results. */
  CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS = 1u << 0,
  /** The same inputs, size and rank count give bitwise-identical results on every run. */
  CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS = 1u << 1,
};

/**
 * What the core hands an algorithm for one collective call. Valid only for
 * the duration of that call. Frozen: append only, bump minor.
 */
typedef struct chorus_algo_env_v1 {
  size_t struct_size;
  uint32_t minor;
  int rank;
  int size;
  /** Endpoints per peer; see `endpoint`. */
  int channels;

  /** The transport's ops and context. Post only on endpoints from `endpoint`. */
  const chorus_transport_plugin_v1_t* tp;
  chorus_tp_context_t* tp_ctx;
  const chorus_tp_caps_t* caps;

  /**
   * Registered staging buffers: `staging_slots` slots of `staging_slot_size`
   * bytes each, the same slot count and size on every rank.
   */
  size_t staging_slots;
  size_t staging_slot_size;
  void* const* staging;
  chorus_tp_mr_t* const* staging_mr;

  /** Settings under `algorithm.<name>.*` for this plugin. */
  const chorus_kv_t* config;
  size_t config_count;

  /** Opaque core state; pass it back to the callbacks below. */
  void* core;

  /**
   * Endpoint to `peer` on `channel`, or NULL if not connected: self, or a
   * peer no algorithm of this communicator declared (`peers`: a RING-only
   * communicator has endpoints to rank-1 and rank+1 only).
   */
  chorus_tp_endpoint_t* (*endpoint)(void* core, int peer, int channel);
  /** Kernel for (dtype, op), or NULL for an unsupported pair (checked before the call). */
  chorus_reduce_fn_t (*reduce_kernel)(int dtype, int op);
  /**
   * Register user memory for this call (a no-op returning a NULL `mr` when the
   * transport needs none). The core deregisters at the end of the call.
   * Registration never writes to `addr`, so a send buffer registers as it is
   * (`const` since 0.1: the same calling convention as the earlier `void*`).
   */
  int (*mem_register)(void* core, const void* addr, size_t length, chorus_tp_mr_t** mr_out);
  /**
   * Blocks until at least one completion is ready and writes up to `max` of
   * them. Returns the count, or a negative status when a completion failed,
   * the call's deadline passed, or the communicator was aborted; the core has
   * then already recorded the error text. Uses the transport's `wait`, so an
   * idle rank sleeps instead of spinning.
   */
  int (*progress)(void* core, chorus_tp_completion_t* out, size_t max);
  /** Record an error for the host's last-error text and return `status`. */
  int (*fail)(void* core, int status, const char* message);
  /** Log a line; the core adds the rank prefix and filters by level. */
  void (*log)(void* core, int level, const char* message);
} chorus_algo_env_v1_t;

/**
 * The ops table. Collective entries are optional (NULL = not implemented);
 * the core refuses at init a configuration that pins an algorithm to a
 * collective it lacks. Buffers: `in` may equal `out` for all_reduce; see
 * docs/architecture.md for the aliasing rules of the others. Counts are in
 * elements; for all_gather, reduce_scatter, gather, scatter and all_to_all,
 * `count` is the per-rank block.
 *
 * Frozen: append only, bump CHORUS_ALGORITHM_ABI_MINOR.
 */
typedef struct chorus_algorithm_plugin_v1 {
  size_t struct_size;
  uint32_t minor;
  const char* name;
  /**
   * chorus_algo_peers_t: the peers this algorithm posts to. The core opens
   * data endpoints only toward the union of what the algorithms that may run
   * on a communicator declare (see chorus_algorithm_plugin_v2_t::peers).
   */
  uint32_t peers;
  /** CHORUS_ALGO_DETERMINISTIC_* bits. */
  uint32_t flags;

  /** Mandatory. Called once after dlopen; non-zero refuses the plugin. */
  int (*init)(const chorus_host_v1_t* host);
  /** Optional. Called once before dlclose. */
  void (*fini)(void);
  /**
   * Optional. How much this algorithm wants `collective` at `size` ranks and
   * `bytes` bytes (higher wins; negative: never choose automatically).
   */
  int (*preference)(int collective, int size, uint64_t bytes);

  int (*all_reduce)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype, int op);
  int (*all_gather)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype);
  int (*reduce_scatter)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                        int dtype, int op);
  int (*broadcast)(const chorus_algo_env_v1_t* env, void* buf, size_t count, int dtype, int root);
  int (*barrier)(const chorus_algo_env_v1_t* env);

  /* Minor 1. A table of minor 0 ends above (struct_size says so): the core
   * treats these as NULL for it. */

  /**
   * out = op over ranks of in, on `root` only. `out` is NULL on the other
   * ranks when the host passed NULL; `in` may equal `out` on the root.
   */
  int (*reduce)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int op, int root);
  /**
   * Rank r's `count` elements land at out + r*count on `root` (`out` holds
   * size*count there and may be NULL elsewhere). On the root `in` may equal
   * out + root*count; otherwise it does not overlap `out`.
   */
  int (*gather)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count, int dtype,
                int root);
  /**
   * Block r (`count` elements at in + r*count on `root`) lands in `out` on rank
   * r. `in` may be NULL off the root; on the root `out` may equal
   * in + root*count, otherwise it does not overlap `in`.
   */
  int (*scatter)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                 int dtype, int root);
  /**
   * Block p of `in` (count elements at in + p*count) lands at out + r*count on
   * rank p, for every p including this rank r. `in` and `out` do not overlap.
   */
  int (*all_to_all)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype);
  /**
   * all_to_all with per-peer counts and offsets, in elements: send_counts[p]
   * elements at in + send_offsets[p] go to rank p, which receives them at
   * out + recv_offsets[r] (recv_counts[r] elements there). The core has
   * checked that the local arrays are consistent (send_counts[rank] ==
   * recv_counts[rank], received blocks disjoint, in and out disjoint); that
   * send_counts[p] here equals recv_counts[rank] on rank p only the data can
   * show.
   */
  int (*all_to_allv)(const chorus_algo_env_v1_t* env, const void* in, const size_t* send_counts,
                     const size_t* send_offsets, void* out, const size_t* recv_counts,
                     const size_t* recv_offsets, int dtype);
} chorus_algorithm_plugin_v1_t;

/* ---------------------------------------------------------------------------
 * Algorithm ABI v2 (docs/plugins.md §v2). A v2 plugin exports
 * `chorus_algorithm_plugin_v2` instead of the v1 symbol; the core loads both
 * (a v1 table runs through the core's v1 path unchanged).
 *
 * What v2 adds over v1:
 *  - per-communicator state: `comm_init` sees the communicator (rank, size,
 *    channels, the host and transport of every peer, the settings) and
 *    validates the settings there, so a bad key fails init, not the first
 *    call; `comm_fini` releases the state;
 *  - selection that sees the whole call (collective, dtype, op, count, root)
 *    and the communicator, and a declaration of the collectives the plugin
 *    implements and the (dtype, op) pairs it supports;
 *  - a collective is a task: `post` starts it and returns; the core calls
 *    `progress` with that task's completions (never blocking inside the
 *    plugin) until the task reports it is done. No thread-locals, no blocking
 *    callback: the core decides which thread drives the task.
 *
 * Work-request ids: the top 8 bits of every wr_id a task posts are reserved
 * for the core (to route completions once several tasks run at once). A task
 * posts with those bits clear and sees them clear in the completions it is
 * handed.
 *
 * Frozen once released: append only, bump CHORUS_ALGORITHM_ABI_V2_MINOR.
 * ------------------------------------------------------------------------- */

#define CHORUS_ALGORITHM_ABI_V2_MINOR 1
/** Name of the symbol every v2 algorithm plugin exports. */
#define CHORUS_ALGORITHM_SYMBOL_V2 "chorus_algorithm_plugin_v2"
/** wr_id bits a v2 task may use: the low 56. */
#define CHORUS_ALGO_WR_ID_MASK ((uint64_t)0x00ffffffffffffffull)

/** `progress` and `post` return values besides a negative chorus status. */
enum {
  CHORUS_ALGO_TASK_DONE = 0,    /**< the task finished; its results are in place */
  CHORUS_ALGO_TASK_PENDING = 1, /**< more completions are needed */
};

/** One peer as comm_init sees it. */
typedef struct chorus_algo_peer_v2 {
  /** Name of the transport that serves this peer ("shm", "tcp", ...); NULL for self. */
  const char* transport;
  /** That transport's caps; NULL for self. */
  const chorus_tp_caps_t* caps;
  /** Index of the peer's host (0 .. host_count-1); ranks on one host share it. */
  int host;
} chorus_algo_peer_v2_t;

/** The communicator, for comm_init. Valid during comm_init only. */
typedef struct chorus_algo_comm_v2 {
  size_t struct_size;
  uint32_t minor;
  int rank;
  int size;
  int channels;
  /** Number of distinct hosts among the ranks. */
  int host_count;
  /** [size]: every rank, this one included. */
  const chorus_algo_peer_v2_t* peers;
  /** Settings under `algorithm.<name>.*` for this plugin: comm_init checks them. */
  const chorus_kv_t* config;
  size_t config_count;
  /** Opaque core state for the two callbacks below. */
  void* core;
  /** Records the error text of a failing comm_init; returns `status`. */
  int (*fail)(void* core, int status, const char* message);
  void (*log)(void* core, int level, const char* message);
} chorus_algo_comm_v2_t;

/**
 * One collective call. The buffers follow the v1 ops' rules (the comments on
 * chorus_algorithm_plugin_v1_t). `count` is per rank where v1 says so.
 */
typedef struct chorus_algo_call_v2 {
  size_t struct_size;
  int collective; /**< CHORUS_COLL_* */
  int dtype;      /**< chorus_dtype_t; -1 for barrier */
  int op;         /**< chorus_op_t; -1 where the collective does not reduce */
  int root;       /**< -1 where the collective has no root */
  size_t count;
  /** Bytes per rank as the core's size classes count them (`auto`). */
  uint64_t bytes;
  const void* in;
  void* out; /**< broadcast: the buffer (in == out) */
  /** all_to_allv only (arrays of `size` entries); NULL otherwise. */
  const size_t* send_counts;
  const size_t* send_offsets;
  const size_t* recv_counts;
  const size_t* recv_offsets;
} chorus_algo_call_v2_t;

/**
 * What a task may use, for the task's lifetime (from post until done). The
 * same fields as chorus_algo_env_v1_t minus the blocking `progress`.
 */
typedef struct chorus_algo_env_v2 {
  size_t struct_size;
  uint32_t minor;
  int rank;
  int size;
  int channels;
  const chorus_transport_plugin_v1_t* tp;
  chorus_tp_context_t* tp_ctx;
  const chorus_tp_caps_t* caps;
  /** Registered staging slots reserved for this task (same on every rank). */
  size_t staging_slots;
  size_t staging_slot_size;
  void* const* staging;
  chorus_tp_mr_t* const* staging_mr;
  void* core;
  chorus_tp_endpoint_t* (*endpoint)(void* core, int peer, int channel);
  chorus_reduce_fn_t (*reduce_kernel)(int dtype, int op);
  int (*mem_register)(void* core, const void* addr, size_t length, chorus_tp_mr_t** mr_out);
  int (*fail)(void* core, int status, const char* message);
  void (*log)(void* core, int level, const char* message);
} chorus_algo_env_v2_t;

/** A plugin-owned task; opaque to the core. */
typedef struct chorus_algo_task_v2 chorus_algo_task_v2_t;

typedef struct chorus_algorithm_plugin_v2 {
  size_t struct_size;
  uint32_t minor;
  const char* name;
  /** CHORUS_ALGO_DETERMINISTIC_* bits. */
  uint32_t flags;
  /** Bit (1u << CHORUS_COLL_x) for each collective the plugin implements. */
  uint32_t collectives;

  /** Mandatory. Called once after dlopen; non-zero refuses the plugin. */
  int (*init)(const chorus_host_v1_t* host);
  /** Optional. Called once before dlclose. */
  void (*fini)(void);

  /**
   * Mandatory. Once per communicator, after its endpoints are connected:
   * checks the settings (an unknown key or a bad value: return
   * CHORUS_ERR_INVALID_ARGUMENT through comm->fail, naming the key) and
   * returns the plugin's state in *state (may be NULL). A failure fails the
   * communicator's init.
   */
  int (*comm_init)(const chorus_algo_comm_v2_t* comm, void** state);
  /** Optional. Releases what comm_init made; after every task of it ended. */
  void (*comm_fini)(void* state);

  /**
   * Optional (NULL: every dtype and op the core has a kernel for). Non-zero
   * when the plugin can run `collective` with `dtype` and `op` (-1 where the
   * collective has none). A pinned plugin asked for a pair it refuses fails
   * the call with CHORUS_ERR_NOT_SUPPORTED; `auto` passes it over.
   */
  int (*supports)(void* state, int collective, int dtype, int op);
  /**
   * Optional (NULL: 0). How much this plugin wants `call` (higher wins;
   * negative: never choose automatically). Must give the same answer on
   * every rank for the same call.
   */
  int (*preference)(void* state, const chorus_algo_call_v2_t* call);

  /**
   * Mandatory. Starts `call`: allocates the task, posts what it can and
   * returns CHORUS_ALGO_TASK_PENDING with *task set, CHORUS_ALGO_TASK_DONE
   * when nothing remains (then *task may be NULL), or a negative status.
   * `env` stays valid until the task is freed.
   */
  int (*post)(void* state, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t* call,
              chorus_algo_task_v2_t** task);
  /**
   * Mandatory. Hands the task completions of its own posts (n may be 0: the
   * core pokes a task that got CHORUS_ERR_AGAIN so it can retry). Never
   * blocks. Returns CHORUS_ALGO_TASK_DONE, CHORUS_ALGO_TASK_PENDING, or a
   * negative status (after env->fail).
   */
  int (*progress)(chorus_algo_task_v2_t* task, const chorus_tp_completion_t* completions, size_t n);
  /** Mandatory. Frees a task, done or not (after a failure, with posts outstanding). */
  void (*task_free)(chorus_algo_task_v2_t* task);

  /* Minor 1. A table of minor 0 ends above (struct_size says so). */

  /**
   * chorus_algo_peers_t: the peers this plugin posts to. The core opens data
   * endpoints only toward the union of what the algorithms that may run on a
   * communicator declare: with every one of them at CHORUS_ALGO_PEERS_RING, a
   * rank has data endpoints to rank-1 and rank+1 (mod size) and nowhere
   * else, and `endpoint` returns NULL for any other peer (a post on it fails
   * the call, naming the peer and this declaration). 0, or a table of
   * minor 0, means CHORUS_ALGO_PEERS_ALL. Any other value refuses the plugin.
   */
  uint32_t peers;
} chorus_algorithm_plugin_v2_t;

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_ALGORITHM_H_ */
