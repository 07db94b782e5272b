/**
 * @file chorus/chorus.h
 * @brief Chorus host API (C). Every call returns a chorus_status_t; on failure
 *        chorus_last_error() gives the message for the calling thread. No
 *        exception ever crosses this boundary.
 *
 * Threading: a communicator is used by one thread at a time, except
 * chorus_comm_abort(), which any thread may call at any time.
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
 * Create a communicator: read the configuration, load the transport and
 * algorithm plugins, bootstrap with the other ranks and connect endpoints.
 * Blocks until every rank has joined or `timeout.init` passes.
 * @param[in]  opts  options, or NULL for "everything from config/environment"
 * @param[out] comm_out  the communicator, set only on success
 */
int chorus_comm_init(const chorus_options_t* opts, chorus_comm_t** comm_out);

/** Destroy a communicator. Never hangs; safe on a failed or aborted one. NULL is ignored. */
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

/** out[i] = op over ranks of in[i]. `in` may equal `out`. */
int chorus_all_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                      int op);
/** out = concatenation over ranks of each rank's `count` elements. `out` holds size*count. */
int chorus_all_gather(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype);
/** `in` holds size*count elements; rank r receives block r of the reduction in `out`. */
int chorus_reduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count, int dtype,
                          int op);
/** `buf` on `root` is copied into `buf` on every rank. */
int chorus_broadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root);
/** Returns once every rank has entered the barrier. */
int chorus_barrier(chorus_comm_t* comm);
/** Blocking send of `count` elements to `peer`; matched in order by chorus_recv on `peer`. */
int chorus_send(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer);
/** Blocking receive of exactly `count` elements from `peer`. */
int chorus_recv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer);

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
