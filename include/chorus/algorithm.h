/**
 * @file chorus/algorithm.h
 * @brief The algorithm plugin ABI, major version 1.
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

/** Which peers an algorithm needs connected (chorus_algorithm_plugin_v1_t::peers). */
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

  /** Endpoint to `peer` on `channel`, or NULL if not connected (self, or not requested). */
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
  /** chorus_algo_peers_t: the connections this algorithm needs. */
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

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_ALGORITHM_H_ */
