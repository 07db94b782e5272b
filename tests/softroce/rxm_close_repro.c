/*
 * rxm_close_repro.c — a libfabric-only reproducer for a use-after-free in
 * ofi_rxm's endpoint close (seen with Debian 12's libfabric 1.17 over
 * verbs;ofi_rxm on rdma_rxe). See docs/ofi.md, "verbs;ofi_rxm".
 *
 * Two RDM endpoints A and B in one process. A sends B two messages. B reads
 * its completion queue for the first only, so the second arrives at B's
 * verbs queue pair (RC: the NIC acknowledges it without B's help) and its
 * receive completion stays in rxm's internal MSG completion queue. Then B's
 * RDM endpoint is closed. ofi_rxm's rxm_close_conn() closes the connection's
 * MSG endpoint first and flushes the MSG completion queue afterwards; the
 * flush handles the pending receive and reposts its buffer to the MSG
 * endpoint it just closed (rxm_post_recv -> fi_recv on freed memory), which
 * crashes or corrupts the heap. With FI_OFI_RXM_USE_SRX=1 receive buffers
 * belong to a shared receive context that is still open, and the close is
 * clean.
 *
 * Build: cc -O1 -g -o rxm_close_repro rxm_close_repro.c -lfabric
 * Run (in the soft-RoCE guest):
 *   FI_UNIVERSE_SIZE=64 ./rxm_close_repro                 # crashes (SIGSEGV)
 *   FI_OFI_RXM_USE_SRX=1 FI_OFI_RXM_MSG_TX_SIZE=64 ./rxm_close_repro   # "closed cleanly"
 * (FI_UNIVERSE_SIZE / FI_OFI_RXM_MSG_TX_SIZE only make fi_enable fit rxe's
 * 32767-entry completion queues; they do not change the outcome.)
 * Optional argument: the provider (default "verbs;ofi_rxm").
 * Exit status: 0 when B's endpoint closed, 1 on a setup error.
 */
#define _POSIX_C_SOURCE 200809L
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    int rc_ = (int)(call);                                                              \
    if (rc_ != 0) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fi_strerror(-rc_)); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

struct side {
  struct fid_av* av;
  struct fid_cq* cq;
  struct fid_ep* ep;
  struct fid_mr* mr;
  char buf[256];
  char name[256];
  size_t name_len;
  fi_addr_t peer;
  struct fi_context2 ctx[4];
};

static struct fid_fabric* fabric;
static struct fid_domain* domain;

static void open_side(struct fi_info* info, struct side* s, uint64_t key) {
  struct fi_av_attr av_attr = {.type = info->domain_attr->av_type};
  struct fi_cq_attr cq_attr = {.size = 1024, .format = FI_CQ_FORMAT_DATA};
  CHECK(fi_av_open(domain, &av_attr, &s->av, NULL));
  CHECK(fi_cq_open(domain, &cq_attr, &s->cq, NULL));
  CHECK(fi_endpoint(domain, info, &s->ep, NULL));
  CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_enable(s->ep));
  s->name_len = sizeof s->name;
  CHECK(fi_getname(&s->ep->fid, s->name, &s->name_len));
  CHECK(fi_mr_reg(domain, s->buf, sizeof s->buf, FI_SEND | FI_RECV, 0, key, 0, &s->mr, NULL));
}

static void connect_sides(struct side* a, struct side* b) {
  if (fi_av_insert(a->av, b->name, 1, &a->peer, 0, NULL) != 1 ||
      fi_av_insert(b->av, a->name, 1, &b->peer, 0, NULL) != 1) {
    fprintf(stderr, "fi_av_insert failed\n");
    exit(1);
  }
}

/* Reads one completion from each listed CQ that has one; returns how many. */
static int reap(struct side** sides, int n) {
  int got = 0;
  for (int i = 0; i < n; ++i) {
    struct fi_cq_data_entry e;
    ssize_t rc = fi_cq_read(sides[i]->cq, &e, 1);
    if (rc == 1) {
      ++got;
    } else if (rc == -FI_EAVAIL) {
      struct fi_cq_err_entry err = {0};
      fi_cq_readerr(sides[i]->cq, &err, 0);
      fprintf(stderr, "completion error: %s\n", fi_strerror(err.err));
      exit(1);
    } else if (rc != -FI_EAGAIN) {
      fprintf(stderr, "fi_cq_read: %s\n", fi_strerror((int)-rc));
      exit(1);
    }
  }
  return got;
}

static void wait_for(struct side** sides, int n, int completions) {
  const time_t until = time(NULL) + 20;
  while (completions > 0) {
    completions -= reap(sides, n);
    if (time(NULL) > until) {
      fprintf(stderr, "timed out waiting for completions\n");
      exit(1);
    }
  }
}

/* Sends 64 bytes from s to its peer; while the provider says -FI_EAGAIN
 * (rxm sets up its connection), progresses the listed sides. Completions
 * reaped meanwhile are added to *reaped. */
static void post_send(struct side* s, int slot, struct side** progress, int n, int* reaped) {
  for (;;) {
    ssize_t rc = fi_send(s->ep, s->buf, 64, fi_mr_desc(s->mr), s->peer, &s->ctx[slot]);
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) CHECK(rc);
    *reaped += reap(progress, n);
  }
}

int main(int argc, char** argv) {
  const char* prov = argc > 1 ? argv[1] : "verbs;ofi_rxm";
  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(prov);
  CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
  printf("libfabric %u.%u, provider %s, domain %s, FI_OFI_RXM_USE_SRX=%s\n", FI_MAJOR(fi_version()),
         FI_MINOR(fi_version()), info->fabric_attr->prov_name, info->domain_attr->name,
         getenv("FI_OFI_RXM_USE_SRX") ? getenv("FI_OFI_RXM_USE_SRX") : "unset");
  CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
  CHECK(fi_domain(fabric, info, &domain, NULL));

  struct side a = {0}, b = {0};
  open_side(info, &a, 1);
  open_side(info, &b, 2);
  connect_sides(&a, &b);

  /* Message 1: both sides progress, which also sets up rxm's connection. */
  CHECK(fi_recv(b.ep, b.buf, sizeof b.buf, fi_mr_desc(b.mr), b.peer, &b.ctx[0]));
  struct side* both[] = {&a, &b};
  int reaped = 0;
  post_send(&a, 0, both, 2, &reaped);
  wait_for(both, 2, 2 - reaped);
  printf("message 1 delivered\n");

  /* Message 2: only A progresses. Its send completes once B's NIC has
   * acknowledged it; B's receive completion stays in rxm's MSG CQ. */
  struct side* only_a[] = {&a};
  reaped = 0;
  post_send(&a, 1, only_a, 1, &reaped);
  wait_for(only_a, 1, 1 - reaped);
  const struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  printf("message 2 sent; closing B's endpoint without reading its queue\n");
  fflush(stdout);

  CHECK(fi_close(&b.ep->fid));
  printf("B's endpoint closed cleanly\n");
  fflush(stdout);

  CHECK(fi_close(&a.ep->fid));
  CHECK(fi_close(&a.mr->fid));
  CHECK(fi_close(&b.mr->fid));
  CHECK(fi_close(&a.cq->fid));
  CHECK(fi_close(&b.cq->fid));
  CHECK(fi_close(&a.av->fid));
  CHECK(fi_close(&b.av->fid));
  CHECK(fi_close(&domain->fid));
  CHECK(fi_close(&fabric->fid));
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return 0;
}
