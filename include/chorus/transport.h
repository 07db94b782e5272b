/**
 * @file chorus/transport.h
 * @brief The completion-queue transport ABI, major version 1.
 *
 * A transport plugin is a shared object that exports exactly one symbol,
 * `chorus_transport_plugin_v1`, of type chorus_transport_plugin_v1_t. The core
 * loads it with dlopen, checks `struct_size` and `minor`, calls `init`, and
 * then drives it through the ops below.
 *
 * Semantics (verbs RC queue pairs; see docs/transport-abi.md):
 *  - An endpoint is a reliable, ordered channel to one peer. Per endpoint,
 *    messages arrive in send order and each consumes the oldest receive the
 *    peer posted on its endpoint. A receive shorter than the message
 *    completes with an error; nothing is truncated silently.
 *  - A send with no receive posted yet waits (backpressure); it never fails
 *    for that reason and is never dropped.
 *  - Completions of one endpoint and one direction come out in post order.
 *  - A failed or closed peer produces error completions for everything
 *    outstanding on its endpoints, and error returns for new posts.
 *
 * Threading: one thread at a time per context calls the ops of that context
 * and its endpoints (the communicator serialises). `wait` may be interrupted
 * by `interrupt` from any thread.
 *
 * Frozen: append only, bump CHORUS_TRANSPORT_ABI_MINOR.
 */
#ifndef CHORUS_TRANSPORT_H_
#define CHORUS_TRANSPORT_H_

#include <chorus/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_TRANSPORT_ABI_MAJOR 1
#define CHORUS_TRANSPORT_ABI_MINOR 5
/** Name of the symbol every v1 transport plugin exports. */
#define CHORUS_TRANSPORT_SYMBOL_V1 "chorus_transport_plugin_v1"

typedef struct chorus_tp_context chorus_tp_context_t;   /**< Opaque, owned by the plugin. */
typedef struct chorus_tp_endpoint chorus_tp_endpoint_t; /**< Opaque, owned by the plugin. */
typedef struct chorus_tp_mr chorus_tp_mr_t;             /**< Opaque, owned by the plugin. */

/** Completion opcodes. */
typedef enum chorus_tp_opcode {
  CHORUS_TP_SEND = 1,
  CHORUS_TP_RECV = 2,
  /**
   * (CHORUS_TP_CAP_CONNECT_POLL) The peer started connecting this endpoint
   * with a polled endpoint_connect and this side has not called
   * endpoint_connect on it yet: call it (timeout 0) until it returns OK.
   * status OK, wr_id 0, byte_len 0, on that endpoint. Reported at most once
   * per endpoint, and never to a caller that uses only blocking connects.
   */
  CHORUS_TP_OP_CONNECT_REQUEST = 3,
} chorus_tp_opcode_t;

/** Memory kinds for registration. Device kinds arrive as new values. */
typedef enum chorus_mem_kind {
  CHORUS_MEM_HOST = 0,
  CHORUS_MEM_CUDA = 1,
} chorus_mem_kind_t;

/** Capability flags in chorus_tp_caps_t::flags. */
enum {
  /** Buffers must be registered before a post; otherwise `mr` may be NULL. */
  CHORUS_TP_CAP_NEEDS_REGISTRATION = 1u << 0,
  /** Optional one-sided write is available (reserved for a later minor). */
  CHORUS_TP_CAP_RMA_WRITE = 1u << 1,
  /** Registration of CHORUS_MEM_CUDA memory is supported. */
  CHORUS_TP_CAP_MEM_CUDA = 1u << 2,
  /**
   * Endpoints reach only endpoints of the same process (ranks are threads),
   * so a job whose ranks are separate processes cannot use this transport.
   * A blob from another process fails endpoint_connect. Declaring it needs
   * no newer minor: an older core ignores the bit.
   */
  CHORUS_TP_CAP_PROCESS_LOCAL = 1u << 3,
  /**
   * (minor 5) `post_send_imm` is available: a send carries a 32-bit value
   * that the matching receive's completion reports in `imm_data`. A
   * transport that declares it writes `imm_data` = 0 in the completion of a
   * receive whose message was sent by plain `post_send`.
   */
  CHORUS_TP_CAP_IMM_DATA = 1u << 4,
  /**
   * A hint about cost, not an op: one large post costs less than the same
   * bytes cut into staging-slot-sized posts, because the transport pipelines
   * a message of any size itself (shm: one process_vm_readv straight into the
   * receive buffer, or ring fragments when cross-memory attach is refused).
   * Algorithms then send data that needs no staging (receives in place, no
   * reduction) in posts larger than a staging slot. It must be declared the
   * same way on every rank, whatever the rank's settings, since sender and
   * receiver cut a transfer at the same places. Declaring it needs no newer
   * minor: an older core or algorithm ignores the bit.
   */
  CHORUS_TP_CAP_LARGE_POSTS = 1u << 5,
  /**
   * endpoint_connect with timeout_ms == 0 is a polled connect: it never
   * blocks. It starts the pair's connection if that has not started and
   * returns CHORUS_OK once the endpoint is usable, CHORUS_ERR_AGAIN while it
   * is still connecting (call again; `wait`/`wait_fd` wake when it may have
   * finished), or an error (PEER_LOST, UNAVAILABLE, ...) when it cannot
   * connect. Either side may call it first; the peer then sees a
   * CHORUS_TP_OP_CONNECT_REQUEST completion on its endpoint. Closing an
   * endpoint mid-connect is allowed and leaves nothing behind. Connects
   * with timeout_ms != 0 keep their blocking meaning. Declaring it needs no
   * newer minor: a core that does not know the bit never calls
   * endpoint_connect with 0 expecting this, and never sees the new opcode
   * (docs/transport-abi.md, P10).
   */
  CHORUS_TP_CAP_CONNECT_POLL = 1u << 6,
};

/** Capabilities and limits of an open context. Frozen: append only. */
typedef struct chorus_tp_caps {
  size_t struct_size;
  /** Largest single message in bytes. */
  uint64_t max_message_size;
  /** Sends that may be outstanding per endpoint before post_send says AGAIN. */
  uint32_t max_outstanding_sends;
  /** Receives that may be outstanding per endpoint before post_recv says AGAIN. */
  uint32_t max_outstanding_recvs;
  /** CHORUS_TP_CAP_* bits. */
  uint32_t flags;
  /** Upper bound on the address blob endpoint_open produces. */
  uint32_t max_address_size;
} chorus_tp_caps_t;

/** Who this context serves: filled by the core, read by the plugin. Frozen: append only. */
typedef struct chorus_tp_context_info {
  size_t struct_size;
  int rank;
  int size;
  /** Interface/host address data endpoints should listen on (e.g. "127.0.0.1"). */
  const char* bind_address;
  /** Per-transport configuration from `transport.<name>.*`. */
  const chorus_kv_t* config;
  size_t config_count;
  /* Minor 2. A plugin reads these only when struct_size covers them. */
  /**
   * Secret of this job (binary, `job_key_len` bytes, not NUL-terminated),
   * derived by the core from the job token and a per-job nonce. A transport
   * that accepts connections uses it to admit only ranks of this job (see
   * docs/reliability.md). Valid during context_open only: copy it. NULL/0
   * when the caller has none.
   */
  const unsigned char* job_key;
  size_t job_key_len;
  /* Minor 3. A plugin reads this only when struct_size covers it. */
  /**
   * Number of data channels per peer. Endpoints with a channel index
   * >= `data_channels` are the core's control endpoints (the peer-loss notice
   * endpoint, docs/reliability.md), not channels the user configured: name
   * them as such in messages ("rank 2 (notice channel)", not "channel 1").
   * They carry data like any other endpoint. 0, or a struct_size that does
   * not cover this field (an older core), means unknown: treat every channel
   * as a data channel.
   */
  int data_channels;
} chorus_tp_context_info_t;

/** A successful completion. */
typedef struct chorus_tp_completion {
  uint64_t wr_id;
  uint32_t opcode; /**< chorus_tp_opcode_t */
  /**
   * RECV on a transport with CHORUS_TP_CAP_IMM_DATA: the sender's immediate
   * (post_send_imm), 0 for a plain post_send. Otherwise unspecified (before
   * minor 5 this field was `reserved`): read it only when the cap is set.
   */
  uint32_t imm_data;
  uint64_t byte_len; /**< bytes received (RECV) or sent (SEND) */
  chorus_tp_endpoint_t* endpoint;
} chorus_tp_completion_t;

/** A failed completion, read with read_error(). */
typedef struct chorus_tp_error {
  uint64_t wr_id;
  uint32_t opcode; /**< chorus_tp_opcode_t */
  int32_t status;  /**< chorus_status_t, e.g. CHORUS_ERR_PEER_LOST */
  int32_t peer_rank;
  chorus_tp_endpoint_t* endpoint;
  char message[256]; /**< transport-specific detail, NUL-terminated */
} chorus_tp_error_t;

/**
 * The ops table. Mandatory ops are marked; optional ops may be NULL or lie
 * past `struct_size`: check both before calling. Every op returns a
 * chorus_status_t (except where noted) and, on failure, leaves a message that
 * `last_error` returns on the same thread.
 *
 * Frozen: append only, bump CHORUS_TRANSPORT_ABI_MINOR.
 */
typedef struct chorus_transport_plugin_v1 {
  size_t struct_size; /**< sizeof(chorus_transport_plugin_v1_t) the plugin was built with */
  uint32_t minor;     /**< CHORUS_TRANSPORT_ABI_MINOR the plugin was built with */
  const char* name;   /**< short name, e.g. "tcp" */

  /** Mandatory. Called once after dlopen. `host` outlives the plugin. */
  int (*init)(const chorus_host_v1_t* host);
  /** Optional. Called once before dlclose. */
  void (*fini)(void);
  /**
   * Mandatory. Message for the last failed op on the calling thread; never
   * NULL. The string stays valid until the next op on that thread.
   */
  const char* (*last_error)(void);

  /** Mandatory. Open a context (owns the completion queue). Blocks briefly. */
  int (*context_open)(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out);
  /** Mandatory. Close endpoints still open, release everything. Never hangs. */
  int (*context_close)(chorus_tp_context_t* ctx);
  /** Mandatory. Capabilities and limits of `ctx`. */
  int (*get_caps)(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out);

  /**
   * Mandatory. Create an endpoint towards `peer_rank` (channel `channel`) and
   * write its address blob into `address_out`; `*address_len` holds the
   * buffer size on entry and the blob size on return.
   */
  int (*endpoint_open)(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                       size_t* address_len, chorus_tp_endpoint_t** ep_out);
  /**
   * Mandatory. Connect `ep` to the peer's blob. Blocks until connected or
   * `timeout_ms` passes (CHORUS_ERR_TIMEOUT). Both sides call it; the plugin
   * decides who actively connects, and must not need the peer's thread to
   * be inside this call at the same time. On a context with
   * CHORUS_TP_CAP_CONNECT_POLL, timeout_ms == 0 polls instead (see the cap).
   */
  int (*endpoint_connect)(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                          int timeout_ms);
  /** Mandatory. Close an endpoint; outstanding posts complete with errors or vanish. */
  int (*endpoint_close)(chorus_tp_endpoint_t* ep);

  /** Mandatory. Register memory; `*mr_out` may be NULL if registration is not needed. */
  int (*mem_register)(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                      chorus_tp_mr_t** mr_out);
  /** Mandatory. Deregister; NULL is accepted and ignored. */
  int (*mem_deregister)(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr);

  /** Mandatory. Never blocks. CHORUS_ERR_AGAIN when the send queue is full. */
  int (*post_send)(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
  /** Mandatory. Never blocks. CHORUS_ERR_AGAIN when the receive queue is full. */
  int (*post_recv)(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
  /**
   * Mandatory. Never blocks. Returns the number of completions written to
   * `out` (0..max), CHORUS_ERR_PENDING when the oldest entry failed (read it
   * with read_error before polling again), or another negative status.
   */
  int (*poll)(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max);
  /** Mandatory. Pop the oldest failed completion. CHORUS_ERR_INVALID_ARGUMENT if none. */
  int (*read_error)(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out);
  /**
   * Mandatory. Block until a completion may be ready, `interrupt` is called,
   * or `timeout_ms` passes (then CHORUS_ERR_TIMEOUT). Spurious wake-ups are
   * allowed; returning early while idle in a loop (spinning) is not.
   */
  int (*wait)(chorus_tp_context_t* ctx, int timeout_ms);
  /** Optional. Wake a thread blocked in `wait`. Callable from any thread. */
  int (*interrupt)(chorus_tp_context_t* ctx);

  /* --- minor 1 --- */
  /**
   * Optional. Write a short human-readable inventory of what this transport
   * can use on this machine (e.g. "2 devices: mlx5_0 port 1 (RoCE v2, active),
   * ..." or "providers: tcp;ofi_rxm 1.17, shm 1.17") into `buf` (NUL-terminated,
   * truncated to `len`). Needs no context; used by chorus-info. Returns OK, or
   * CHORUS_ERR_UNAVAILABLE with the reason in `buf` when nothing is usable.
   */
  int (*describe)(char* buf, size_t len);

  /* --- minor 4 --- */
  /**
   * Optional. A wait object for `ctx` (like fi_cq_attr.wait_obj =
   * FI_WAIT_FD): a file descriptor the caller may poll()/epoll for
   * readability instead of calling `wait`, e.g. to sleep on several
   * contexts at once. Writes it to `*fd_out` and returns CHORUS_OK, or
   * returns CHORUS_ERR_NOT_SUPPORTED (and leaves `*fd_out` alone) when this
   * context has none; a caller then uses `wait`. Never blocks.
   *
   * Contract:
   *  - The context owns the fd; it stays the same and valid until
   *    context_close. The caller only watches it for readability (POLLIN):
   *    it never reads, writes, closes or changes its flags.
   *  - It becomes readable when `poll` may return something (a completion or
   *    a pending error) and after `interrupt`. Spurious readiness is allowed.
   *  - It is level-style only across a drain: before sleeping on it again
   *    the caller must call `poll` until it returns 0. A transport makes sure
   *    that once `poll` has returned 0 and nothing new happened, the fd is no
   *    longer readable (or becomes readable again only spuriously, not in a
   *    loop); and that everything that can make a completion appear, that
   *    is all progress, happens inside `poll` (or is driven by the kernel or
   *    device behind the fd). A transport that needs timed work while idle
   *    (keep-alives) must not expose one.
   *  - Same threading as `wait`: watched by the thread that drives the
   *    context; `interrupt` may come from any thread.
   */
  int (*wait_fd)(chorus_tp_context_t* ctx, int* fd_out);

  /* --- minor 5 --- */
  /**
   * Optional; present exactly when the context declares
   * CHORUS_TP_CAP_IMM_DATA. post_send with a 32-bit immediate (like verbs'
   * IBV_WR_SEND_WITH_IMM or fi_senddata): the receive that consumes this
   * message reports `imm` in its completion's `imm_data`. Same rules as
   * post_send otherwise. A context without the cap returns
   * CHORUS_ERR_NOT_SUPPORTED. The core uses it to carry a call's signature
   * check inside the data (docs/reliability.md §4.5).
   */
  int (*post_send_imm)(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                       uint64_t wr_id, uint32_t imm);
} chorus_transport_plugin_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_TRANSPORT_H_ */
