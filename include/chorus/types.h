/**
 * @file chorus/types.h
 * @brief Status codes, data types and reduction ops shared by the host API and
 *        both plugin ABIs. Plain C; safe to include from any plugin.
 *
 * Frozen: append only. Values never change meaning once released.
 */
#ifndef CHORUS_TYPES_H_
#define CHORUS_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Status codes. Zero is success; negative codes are grouped by what the
 * caller has to do about them.
 */
typedef enum chorus_status {
  CHORUS_OK = 0,
  /** The caller passed something wrong (bad pointer, count, dtype, op, key). Fix the call. */
  CHORUS_ERR_INVALID_ARGUMENT = -1,
  /** A plugin, library or device is missing. Install it or pick another transport. */
  CHORUS_ERR_UNAVAILABLE = -2,
  /** A deadline expired. The message names what was still outstanding. */
  CHORUS_ERR_TIMEOUT = -3,
  /** A peer rank failed or closed. The communicator must be rebuilt. */
  CHORUS_ERR_PEER_LOST = -4,
  /** The operating system or the NIC refused something; details in the error text. */
  CHORUS_ERR_SYSTEM = -5,
  /** A bug in Chorus or in a plugin. Please report it with the error text. */
  CHORUS_ERR_INTERNAL = -6,
  /** The communicator was aborted by chorus_comm_abort(). */
  CHORUS_ERR_ABORTED = -7,
  /** Transport poll(): the oldest completion failed; read it with read_error(). */
  CHORUS_ERR_PENDING = -8,
  /** Transport post: the queue is full right now; progress completions and retry. */
  CHORUS_ERR_AGAIN = -9,
  /** The request is valid but this component does not implement it. */
  CHORUS_ERR_NOT_SUPPORTED = -10,
  /**
   * The ranks made different calls (collective, count, dtype, op, root, the
   * algorithm chosen, or send/recv sizes); the message names both ranks and
   * both calls. The program has a bug: make every rank issue the same calls
   * in the same order. The communicator cannot be used any more; finalize it
   * (and create a new one if the program can continue).
   */
  CHORUS_ERR_MISMATCH = -11,
} chorus_status_t;

/** Element types, in JACCL's order so its Dtype values map one to one. */
typedef enum chorus_dtype {
  CHORUS_BOOL = 0,
  CHORUS_INT8 = 1,
  CHORUS_INT16 = 2,
  CHORUS_INT32 = 3,
  CHORUS_INT64 = 4,
  CHORUS_UINT8 = 5,
  CHORUS_UINT16 = 6,
  CHORUS_UINT32 = 7,
  CHORUS_UINT64 = 8,
  CHORUS_FLOAT16 = 9,
  CHORUS_BFLOAT16 = 10,
  CHORUS_FLOAT32 = 11,
  CHORUS_FLOAT64 = 12,
  CHORUS_COMPLEX64 = 13,
  CHORUS_DTYPE_COUNT = 14
} chorus_dtype_t;

/**
 * Reduction operators. complex64 supports SUM and PROD only; for bool SUM and
 * MAX are logical or, PROD and MIN logical and.
 */
typedef enum chorus_op {
  CHORUS_SUM = 0,
  CHORUS_PROD = 1,
  CHORUS_MAX = 2,
  CHORUS_MIN = 3,
  CHORUS_OP_COUNT = 4
} chorus_op_t;

/** Collectives, used for algorithm selection and capability queries. */
typedef enum chorus_collective {
  CHORUS_COLL_ALL_REDUCE = 0,
  CHORUS_COLL_ALL_GATHER = 1,
  CHORUS_COLL_REDUCE_SCATTER = 2,
  CHORUS_COLL_BROADCAST = 3,
  CHORUS_COLL_BARRIER = 4,
  /* Added with algorithm ABI minor 1 (plugins of minor 0 lack them). */
  CHORUS_COLL_REDUCE = 5,
  CHORUS_COLL_GATHER = 6,
  CHORUS_COLL_SCATTER = 7,
  CHORUS_COLL_ALL_TO_ALL = 8,
  CHORUS_COLL_ALL_TO_ALLV = 9,
  /** Number of collectives; grows when one is appended (never use it in an ABI struct). */
  CHORUS_COLL_COUNT = 10
} chorus_collective_t;

/** Log levels, as used by CHORUS_LOG and the host logger callback. */
typedef enum chorus_log_level {
  CHORUS_LOG_ERROR = 0,
  CHORUS_LOG_WARN = 1,
  CHORUS_LOG_INFO = 2,
  CHORUS_LOG_DEBUG = 3,
  CHORUS_LOG_TRACE = 4
} chorus_log_level_t;

/**
 * Element-wise reduction kernel: inout[i] = op(inout[i], src[i]) for i < count.
 * Never blocks; safe to call from any thread; src and inout must not overlap
 * unless they are equal.
 */
typedef void (*chorus_reduce_fn_t)(const void* src, void* inout, size_t count);

/**
 * One configuration entry handed to a plugin: the key below the plugin's own
 * table (e.g. "sockets" for `transport.tcp.sockets`), its value rendered as
 * text (strings unquoted, booleans as true/false), and where it came from
 * ("chorus.toml:12", "env CHORUS_TRANSPORT_TCP_SOCKETS", "api") so the plugin
 * can name the origin in an error.
 */
typedef struct chorus_kv {
  const char* key;
  const char* value;
  const char* origin;
} chorus_kv_t;

/**
 * Services the core lends to a plugin, so plugins never link against the
 * core. Frozen: append only, bump minor.
 */
typedef struct chorus_host_v1 {
  size_t struct_size;
  uint32_t minor;
  void* ctx;
  /** Emit a log line at `level`; the core filters and adds the rank prefix. Thread-safe. */
  void (*log)(void* ctx, int level, const char* message);
} chorus_host_v1_t;

/** Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
static inline size_t chorus_dtype_size(int dtype) {
  switch (dtype) {
    case CHORUS_BOOL:
    case CHORUS_INT8:
    case CHORUS_UINT8:
      return 1;
    case CHORUS_INT16:
    case CHORUS_UINT16:
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16:
      return 2;
    case CHORUS_INT32:
    case CHORUS_UINT32:
    case CHORUS_FLOAT32:
      return 4;
    case CHORUS_INT64:
    case CHORUS_UINT64:
    case CHORUS_FLOAT64:
    case CHORUS_COMPLEX64:
      return 8;
    default:
      return 0;
  }
}

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_TYPES_H_ */
