/* Plugins built against an OLDER minor of the v1 ABIs, which must keep
 * loading and working with this Chorus (tests/plugin_abi/abi_evolution_test.cc).
 *
 * Default build: a complete, minimal in-process loopback transport built
 * against transport ABI 1.0. It declares its own copy of the 1.0 table
 * (everything up to and including `interrupt`, no `describe`), sets
 * struct_size to that table's size and minor to 0. Endpoints of contexts in
 * one process connect through their blobs (pointer + pid); a send is copied
 * straight into the peer's oldest posted receive, or parked until one is
 * posted. One lock guards every context, so ranks may run on threads.
 *
 * FIXTURE_WAIT_FD: the same loopback built against minor 4, with a wait
 * object (an eventfd rung with every completion and interrupt, cleared by a
 * poll that finds the queue empty), named "fd-loopback". It is what lets
 * tests run auto with two sub-transports that both have one. Its table ends
 * before minor 5's post_send_imm, whose slot holds a poison entry.
 *
 * FIXTURE_OLD_MINOR_ALGORITHM: an algorithm plugin whose table is a
 * hypothetical shorter minor 0 that ends right after `init`.
 *
 * Both export, right after their short table, a tail of "poison" entries in
 * the slots the newer layout gives to later ops. A core that read an op
 * beyond struct_size would find them non-NULL and call them; each call bumps
 * chorus_fixture_poison_calls, which the test reads. */
#include <chorus/algorithm.h>
#include <chorus/transport.h>

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef FIXTURE_WAIT_FD
#include <sys/eventfd.h>
#endif

#define EXPORT __attribute__((visibility("default")))

/* Calls of ops that lie beyond struct_size: must stay 0. */
EXPORT int chorus_fixture_poison_calls = 0;

#ifndef FIXTURE_OLD_MINOR_ALGORITHM

/* ---- transport ABI 1.0, as transport.h declared it before `describe` ---- */

typedef struct chorus_transport_plugin_v1_0 {
  size_t struct_size;
  uint32_t minor;
  const char* name;
  int (*init)(const chorus_host_v1_t* host);
  void (*fini)(void);
  const char* (*last_error)(void);
  int (*context_open)(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out);
  int (*context_close)(chorus_tp_context_t* ctx);
  int (*get_caps)(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out);
  int (*endpoint_open)(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                       size_t* address_len, chorus_tp_endpoint_t** ep_out);
  int (*endpoint_connect)(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                          int timeout_ms);
  int (*endpoint_close)(chorus_tp_endpoint_t* ep);
  int (*mem_register)(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                      chorus_tp_mr_t** mr_out);
  int (*mem_deregister)(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr);
  int (*post_send)(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
  int (*post_recv)(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id);
  int (*poll)(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max);
  int (*read_error)(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out);
  int (*wait)(chorus_tp_context_t* ctx, int timeout_ms);
  int (*interrupt)(chorus_tp_context_t* ctx);
} chorus_transport_plugin_v1_0_t;

/* Minor 1 only appended: the 1.0 table is a prefix of today's. */
_Static_assert(sizeof(chorus_transport_plugin_v1_0_t) ==
                   offsetof(chorus_transport_plugin_v1_t, describe),
               "transport ABI 1.0 must be a prefix of 1.x");

#define LB_MAGIC 0x504f4f4cu /* "LOOP" */
#define LB_MAX_OUTSTANDING 4096

static __thread char t_error[256] = "";
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int lb_fail(int status, const char* what) {
  snprintf(t_error, sizeof t_error, "old-minor: %s", what);
  return status;
}

struct lb_entry {
  int failed;
  chorus_tp_completion_t ok;
  chorus_tp_error_t err;
  struct lb_entry* next;
};

/* A posted receive, or a send still waiting for one. */
struct lb_post {
  void* buf;
  size_t length;
  uint64_t wr_id;
  struct chorus_tp_endpoint* from; /* sends: the sending endpoint */
  struct lb_post* next;
};

struct chorus_tp_context {
  int rank;
  int size;
  pthread_cond_t cond;
  int interrupted;
  struct lb_entry *head, *tail;
  struct chorus_tp_endpoint* endpoints;
  int efd; /* FIXTURE_WAIT_FD only */
};

/* Rings the context's wait object; callers hold g_lock. */
static void lb_ring(struct chorus_tp_context* ctx) {
#ifdef FIXTURE_WAIT_FD
  uint64_t one = 1;
  if (write(ctx->efd, &one, sizeof one) < 0) { /* EAGAIN: already readable */
  }
#else
  (void)ctx;
#endif
}

struct chorus_tp_endpoint {
  struct chorus_tp_context* ctx;
  int peer;
  int channel;
  struct chorus_tp_endpoint* remote; /* set by connect; NULL once either side closed */
  int lost;
  struct lb_post *recvs, *recvs_tail;       /* posted receives, oldest first */
  struct lb_post *incoming, *incoming_tail; /* the peer's sends waiting for a receive */
  struct chorus_tp_endpoint* next;          /* in ctx->endpoints */
  struct chorus_tp_endpoint* next_live;     /* in g_live */
};

/* Every open endpoint of the process: connect resolves blobs against it. */
static struct chorus_tp_endpoint* g_live = NULL;

struct lb_blob {
  uint32_t magic;
  int32_t pid;
  int32_t rank;
  int32_t peer;
  int32_t channel;
  int32_t reserved;
  uint64_t endpoint;
};

static void lb_push(struct chorus_tp_context* ctx, struct lb_entry* e) {
  e->next = NULL;
  if (ctx->tail)
    ctx->tail->next = e;
  else
    ctx->head = e;
  ctx->tail = e;
  pthread_cond_broadcast(&ctx->cond);
  lb_ring(ctx);
}

static void lb_complete(struct chorus_tp_endpoint* ep, uint32_t opcode, uint64_t wr_id,
                        uint64_t len) {
  struct lb_entry* e = calloc(1, sizeof *e);
  if (!e) abort();
  e->ok.wr_id = wr_id;
  e->ok.opcode = opcode;
  e->ok.byte_len = len;
  e->ok.endpoint = ep;
  lb_push(ep->ctx, e);
}

static void lb_error(struct chorus_tp_endpoint* ep, uint32_t opcode, uint64_t wr_id, int status,
                     const char* message) {
  struct lb_entry* e = calloc(1, sizeof *e);
  if (!e) abort();
  e->failed = 1;
  e->err.wr_id = wr_id;
  e->err.opcode = opcode;
  e->err.status = status;
  e->err.peer_rank = ep->peer;
  e->err.endpoint = ep;
  snprintf(e->err.message, sizeof e->err.message, "%s", message);
  lb_push(ep->ctx, e);
}

/* Delivers `send` (from the peer) into `recv` (posted on `ep`); frees both. */
static void lb_match(struct chorus_tp_endpoint* ep, struct lb_post* recv, struct lb_post* send) {
  if (send->length > recv->length) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "message of %zu bytes arrived for a receive of %zu bytes; it was discarded",
             send->length, recv->length);
    lb_error(ep, CHORUS_TP_RECV, recv->wr_id, CHORUS_ERR_INVALID_ARGUMENT, msg);
  } else {
    if (send->length) memcpy(recv->buf, send->buf, send->length);
    lb_complete(ep, CHORUS_TP_RECV, recv->wr_id, send->length);
  }
  lb_complete(send->from, CHORUS_TP_SEND, send->wr_id, send->length);
  free(recv);
  free(send);
}

static void lb_append(struct lb_post** head, struct lb_post** tail, struct lb_post* p) {
  p->next = NULL;
  if (*tail)
    (*tail)->next = p;
  else
    *head = p;
  *tail = p;
}

static struct lb_post* lb_pop(struct lb_post** head, struct lb_post** tail) {
  struct lb_post* p = *head;
  if (p) {
    *head = p->next;
    if (!*head) *tail = NULL;
  }
  return p;
}

static int lb_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}

static const char* lb_last_error(void) { return t_error; }

static int lb_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (!info || !ctx_out) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "context_open: NULL");
  for (size_t i = 0; i < info->config_count; ++i) {
    char msg[200];
    snprintf(msg, sizeof msg, "unknown configuration key '%s' (from %s); this transport has none",
             info->config[i].key, info->config[i].origin);
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, msg);
  }
  struct chorus_tp_context* ctx = calloc(1, sizeof *ctx);
  if (!ctx) return lb_fail(CHORUS_ERR_SYSTEM, "context_open: out of memory");
  ctx->rank = info->rank;
  ctx->size = info->size;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&ctx->cond, &attr);
  pthread_condattr_destroy(&attr);
  ctx->efd = -1;
#ifdef FIXTURE_WAIT_FD
  ctx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ctx->efd < 0) {
    pthread_cond_destroy(&ctx->cond);
    free(ctx);
    return lb_fail(CHORUS_ERR_SYSTEM, "context_open: eventfd failed");
  }
#endif
  *ctx_out = ctx;
  return CHORUS_OK;
}

static void lb_drop_queue(struct chorus_tp_context* ctx, struct chorus_tp_endpoint* ep) {
  struct lb_entry **link = &ctx->head, *last = NULL;
  while (*link) {
    struct lb_entry* e = *link;
    struct chorus_tp_endpoint* owner = e->failed ? e->err.endpoint : e->ok.endpoint;
    if (!ep || owner == ep) {
      *link = e->next;
      free(e);
    } else {
      last = e;
      link = &e->next;
    }
  }
  ctx->tail = last;
}

/* Caller holds g_lock. Outstanding posts of `ep` vanish; the peer sees a lost
 * connection: its receives fail and its parked sends fail. */
static void lb_close_locked(struct chorus_tp_endpoint* ep) {
  struct chorus_tp_endpoint** link = &g_live;
  while (*link && *link != ep) link = &(*link)->next_live;
  if (*link) *link = ep->next_live;
  link = &ep->ctx->endpoints;
  while (*link && *link != ep) link = &(*link)->next;
  if (*link) *link = ep->next;
  struct lb_post* p;
  while ((p = lb_pop(&ep->recvs, &ep->recvs_tail))) free(p);
  while ((p = lb_pop(&ep->incoming, &ep->incoming_tail))) {
    if (p->from)
      lb_error(p->from, CHORUS_TP_SEND, p->wr_id, CHORUS_ERR_PEER_LOST,
               "connection lost: the peer closed its endpoint");
    free(p);
  }
  struct chorus_tp_endpoint* r = ep->remote;
  if (r) {
    r->remote = NULL;
    r->lost = 1;
    while ((p = lb_pop(&r->recvs, &r->recvs_tail))) {
      lb_error(r, CHORUS_TP_RECV, p->wr_id, CHORUS_ERR_PEER_LOST,
               "connection lost: the peer closed its endpoint");
      free(p);
    }
    /* Our own sends parked at the peer vanish with us. */
    struct lb_post **pl = &r->incoming, *last = NULL;
    while (*pl) {
      if ((*pl)->from == ep) {
        struct lb_post* gone = *pl;
        *pl = gone->next;
        free(gone);
      } else {
        last = *pl;
        pl = &(*pl)->next;
      }
    }
    r->incoming_tail = last;
  }
  lb_drop_queue(ep->ctx, ep);
  free(ep);
}

static int lb_context_close(chorus_tp_context_t* ctx) {
  if (!ctx) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "context_close: NULL");
  pthread_mutex_lock(&g_lock);
  while (ctx->endpoints) lb_close_locked(ctx->endpoints);
  lb_drop_queue(ctx, NULL);
  pthread_mutex_unlock(&g_lock);
  pthread_cond_destroy(&ctx->cond);
  if (ctx->efd >= 0) close(ctx->efd);
  free(ctx);
  return CHORUS_OK;
}

static int lb_get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
  if (!ctx || !caps_out) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: NULL");
  chorus_tp_caps_t caps;
  memset(&caps, 0, sizeof caps);
  caps.struct_size = sizeof caps;
  caps.max_message_size = (uint64_t)1 << 40;
  caps.max_outstanding_sends = LB_MAX_OUTSTANDING;
  caps.max_outstanding_recvs = LB_MAX_OUTSTANDING;
  caps.max_address_size = sizeof(struct lb_blob);
  size_t size = caps_out->struct_size == 0 ? sizeof caps : caps_out->struct_size;
  if (size > sizeof caps) size = sizeof caps;
  memcpy(caps_out, &caps, size);
  caps_out->struct_size = size;
  return CHORUS_OK;
}

static int lb_endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                            size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (!ctx || !address_out || !address_len || !ep_out)
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_open: NULL");
  if (peer_rank < 0 || peer_rank >= ctx->size || peer_rank == ctx->rank)
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_open: peer rank out of range");
  if (*address_len < sizeof(struct lb_blob))
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_open: address buffer too small");
  struct chorus_tp_endpoint* ep = calloc(1, sizeof *ep);
  if (!ep) return lb_fail(CHORUS_ERR_SYSTEM, "endpoint_open: out of memory");
  ep->ctx = ctx;
  ep->peer = peer_rank;
  ep->channel = channel;
  struct lb_blob blob = {LB_MAGIC, (int32_t)getpid(),      ctx->rank, peer_rank, channel,
                         0,        (uint64_t)(uintptr_t)ep};
  memcpy(address_out, &blob, sizeof blob);
  *address_len = sizeof blob;
  pthread_mutex_lock(&g_lock);
  ep->next = ctx->endpoints;
  ctx->endpoints = ep;
  ep->next_live = g_live;
  g_live = ep;
  pthread_mutex_unlock(&g_lock);
  *ep_out = ep;
  return CHORUS_OK;
}

static int lb_endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                               int timeout_ms) {
  (void)timeout_ms;
  struct lb_blob blob;
  if (!ep || !peer_address || length != sizeof blob)
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: not a loopback address");
  memcpy(&blob, peer_address, sizeof blob);
  if (blob.magic != LB_MAGIC || blob.pid != (int32_t)getpid())
    return lb_fail(CHORUS_ERR_INVALID_ARGUMENT,
                   "endpoint_connect: not a loopback address of this process");
  int rc = CHORUS_OK;
  pthread_mutex_lock(&g_lock);
  struct chorus_tp_endpoint* r = g_live;
  while (r && (uint64_t)(uintptr_t)r != blob.endpoint) r = r->next_live;
  if (!r || r->ctx->rank != ep->peer || r->peer != ep->ctx->rank || r->channel != ep->channel)
    rc = lb_fail(CHORUS_ERR_INVALID_ARGUMENT,
                 "endpoint_connect: the blob names no matching endpoint");
  else
    ep->remote = r;
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int lb_endpoint_close(chorus_tp_endpoint_t* ep) {
  if (!ep) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_close: NULL");
  pthread_mutex_lock(&g_lock);
  lb_close_locked(ep);
  pthread_mutex_unlock(&g_lock);
  return CHORUS_OK;
}

static int lb_mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int kind,
                           chorus_tp_mr_t** mr_out) {
  (void)ctx;
  (void)addr;
  (void)length;
  if (kind != CHORUS_MEM_HOST) return lb_fail(CHORUS_ERR_NOT_SUPPORTED, "host memory only");
  *mr_out = NULL;
  return CHORUS_OK;
}

static int lb_mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
  (void)ctx;
  (void)mr;
  return CHORUS_OK;
}

static int lb_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                        chorus_tp_mr_t* mr, uint64_t wr_id) {
  (void)mr;
  if (!ep) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "post_send: NULL");
  struct lb_post* send = calloc(1, sizeof *send);
  if (!send) return lb_fail(CHORUS_ERR_SYSTEM, "post_send: out of memory");
  send->buf = (void*)buf;
  send->length = length;
  send->wr_id = wr_id;
  send->from = ep;
  int rc = CHORUS_OK;
  pthread_mutex_lock(&g_lock);
  struct chorus_tp_endpoint* r = ep->remote;
  if (!r) {
    free(send);
    rc = lb_fail(CHORUS_ERR_PEER_LOST, ep->lost ? "post_send: the peer closed its endpoint"
                                                : "post_send: endpoint not connected");
  } else if (r->recvs) {
    lb_match(r, lb_pop(&r->recvs, &r->recvs_tail), send);
  } else {
    lb_append(&r->incoming, &r->incoming_tail, send);
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int lb_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                        uint64_t wr_id) {
  (void)mr;
  if (!ep) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "post_recv: NULL");
  struct lb_post* recv = calloc(1, sizeof *recv);
  if (!recv) return lb_fail(CHORUS_ERR_SYSTEM, "post_recv: out of memory");
  recv->buf = buf;
  recv->length = length;
  recv->wr_id = wr_id;
  int rc = CHORUS_OK;
  pthread_mutex_lock(&g_lock);
  if (ep->incoming) {
    lb_match(ep, recv, lb_pop(&ep->incoming, &ep->incoming_tail));
  } else if (ep->lost) {
    free(recv);
    rc = lb_fail(CHORUS_ERR_PEER_LOST, "post_recv: the peer closed its endpoint");
  } else {
    lb_append(&ep->recvs, &ep->recvs_tail, recv);
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int lb_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  if (!ctx) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "poll: NULL");
  int n = 0;
  pthread_mutex_lock(&g_lock);
  while ((size_t)n < max && ctx->head && !ctx->head->failed) {
    struct lb_entry* e = ctx->head;
    out[n++] = e->ok;
    ctx->head = e->next;
    if (!ctx->head) ctx->tail = NULL;
    free(e);
  }
  if (n == 0 && ctx->head) n = CHORUS_ERR_PENDING;
#ifdef FIXTURE_WAIT_FD
  if (n == 0 && !ctx->head) { /* drained: the wait object goes quiet */
    uint64_t value;
    if (read(ctx->efd, &value, sizeof value) < 0) { /* EAGAIN: it was */
    }
  }
#endif
  pthread_mutex_unlock(&g_lock);
  return n;
}

static int lb_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  if (!ctx || !err_out) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: NULL");
  int rc = CHORUS_OK;
  pthread_mutex_lock(&g_lock);
  struct lb_entry **link = &ctx->head, *prev = NULL;
  while (*link && !(*link)->failed) {
    prev = *link;
    link = &(*link)->next;
  }
  if (*link) {
    struct lb_entry* e = *link;
    *err_out = e->err;
    *link = e->next;
    if (ctx->tail == e) ctx->tail = prev;
    free(e);
  } else {
    rc = lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: no failed completion pending");
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int lb_wait(chorus_tp_context_t* ctx, int timeout_ms) {
  if (!ctx) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "wait: NULL");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  if (timeout_ms < 0) timeout_ms = 1 << 30;
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec += 1;
    until.tv_nsec -= 1000000000L;
  }
  int rc = CHORUS_OK;
  pthread_mutex_lock(&g_lock);
  while (!ctx->head && !ctx->interrupted) {
    if (pthread_cond_timedwait(&ctx->cond, &g_lock, &until) == ETIMEDOUT) break;
  }
  if (!ctx->head && !ctx->interrupted) rc = lb_fail(CHORUS_ERR_TIMEOUT, "wait: timed out");
  ctx->interrupted = 0;
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int lb_interrupt(chorus_tp_context_t* ctx) {
  if (!ctx) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "interrupt: NULL");
  pthread_mutex_lock(&g_lock);
  ctx->interrupted = 1;
  pthread_cond_broadcast(&ctx->cond);
  lb_ring(ctx);
  pthread_mutex_unlock(&g_lock);
  return CHORUS_OK;
}

#ifdef FIXTURE_WAIT_FD
static int lb_wait_fd(chorus_tp_context_t* ctx, int* fd_out) {
  if (!ctx || !fd_out) return lb_fail(CHORUS_ERR_INVALID_ARGUMENT, "wait_fd: NULL");
  *fd_out = ctx->efd;
  return CHORUS_OK;
}

/* In the slot of minor 5's post_send_imm, beyond this table's struct_size. */
static int poison_post_send_imm(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                                chorus_tp_mr_t* mr, uint64_t wr_id, uint32_t imm) {
  (void)ep, (void)buf, (void)length, (void)mr, (void)wr_id, (void)imm;
  ++chorus_fixture_poison_calls;
  return CHORUS_OK;
}

/* A minor-4 table is today's table cut before post_send_imm. */
EXPORT const chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = {
    offsetof(chorus_transport_plugin_v1_t, post_send_imm),
    4,
    "fd-loopback",
    lb_init,
    NULL,
    lb_last_error,
    lb_context_open,
    lb_context_close,
    lb_get_caps,
    lb_endpoint_open,
    lb_endpoint_connect,
    lb_endpoint_close,
    lb_mem_register,
    lb_mem_deregister,
    lb_post_send,
    lb_post_recv,
    lb_poll,
    lb_read_error,
    lb_wait,
    lb_interrupt,
    NULL,
    lb_wait_fd,
    poison_post_send_imm,
};
#else
static int poison_describe(char* buf, size_t len) {
  ++chorus_fixture_poison_calls;
  if (buf && len) snprintf(buf, len, "POISON: describe called beyond struct_size");
  return CHORUS_OK;
}

/* In the slot of minor 4's wait_fd: a core that took it for this plugin's
 * wait object would sleep on stdin. */
static int poison_wait_fd(chorus_tp_context_t* ctx, int* fd_out) {
  (void)ctx;
  ++chorus_fixture_poison_calls;
  if (fd_out) *fd_out = 0;
  return CHORUS_OK;
}

/* The 1.0 table, followed by what a reader past struct_size would find. */
struct fixture_transport_export {
  chorus_transport_plugin_v1_0_t table;
  int (*beyond_describe)(char* buf, size_t len);
  int (*beyond_wait_fd)(chorus_tp_context_t* ctx, int* fd_out);
};

EXPORT const struct fixture_transport_export chorus_transport_plugin_v1 = {
    {
        sizeof(chorus_transport_plugin_v1_0_t),
        0,
        "old-minor",
        lb_init,
        NULL,
        lb_last_error,
        lb_context_open,
        lb_context_close,
        lb_get_caps,
        lb_endpoint_open,
        lb_endpoint_connect,
        lb_endpoint_close,
        lb_mem_register,
        lb_mem_deregister,
        lb_post_send,
        lb_post_recv,
        lb_poll,
        lb_read_error,
        lb_wait,
        lb_interrupt,
    },
    poison_describe,
    poison_wait_fd,
};
#endif /* FIXTURE_WAIT_FD */

#else /* FIXTURE_OLD_MINOR_ALGORITHM */

/* ---- a hypothetical algorithm ABI minor 0 that ended right after init ---- */

typedef struct chorus_algorithm_plugin_v1_short {
  size_t struct_size;
  uint32_t minor;
  const char* name;
  uint32_t peers;
  uint32_t flags;
  int (*init)(const chorus_host_v1_t* host);
} chorus_algorithm_plugin_v1_short_t;

_Static_assert(sizeof(chorus_algorithm_plugin_v1_short_t) ==
                   offsetof(chorus_algorithm_plugin_v1_t, fini),
               "the short table must be a prefix of today's");

static int short_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}

static void poison_fini(void) { ++chorus_fixture_poison_calls; }
static int poison_preference(int collective, int size, uint64_t bytes) {
  (void)collective;
  (void)size;
  (void)bytes;
  ++chorus_fixture_poison_calls;
  return 1000;
}
static int poison_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out,
                             size_t count, int dtype, int op) {
  (void)env;
  (void)in;
  (void)out;
  (void)count;
  (void)dtype;
  (void)op;
  ++chorus_fixture_poison_calls;
  return CHORUS_ERR_INTERNAL;
}
static int poison_all_gather(const chorus_algo_env_v1_t* env, const void* in, void* out,
                             size_t count, int dtype) {
  (void)env;
  (void)in;
  (void)out;
  (void)count;
  (void)dtype;
  ++chorus_fixture_poison_calls;
  return CHORUS_ERR_INTERNAL;
}

struct fixture_algorithm_export {
  chorus_algorithm_plugin_v1_short_t table;
  void (*beyond_fini)(void);
  int (*beyond_preference)(int, int, uint64_t);
  int (*beyond_all_reduce)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int, int);
  int (*beyond_all_gather)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int);
};

EXPORT const struct fixture_algorithm_export chorus_algorithm_plugin_v1 = {
    {sizeof(chorus_algorithm_plugin_v1_short_t), 0, "old-minor", CHORUS_ALGO_PEERS_RING, 0,
     short_init},
    poison_fini,
    poison_preference,
    poison_all_reduce,
    poison_all_gather,
};

#endif
