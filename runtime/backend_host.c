/*
 * backend_host.c: the host backend. Ranks are processes on one or several
 * machines; every pair of ranks that shares a plan group gets one TCP
 * connection, made when the first group they share is created (the higher
 * rank connects, the lower accepts; addresses come from the store).
 *
 * Input: the plan's groups, the store. Output: communicators whose
 * collectives run over those connections.
 * Invariants: each pair connection carries the pair's messages in the
 * order both sides issue them, so collectives on overlapping groups stay
 * matched as long as every rank runs its groups in plan order; every wait
 * has a deadline (ctx->timeout) and a dead peer shows as RT_ERR_CLOSED.
 *
 * Algorithms: ring all-reduce (reduce-scatter then all-gather), ring
 * all-gather, pairwise all-to-all, barrier as a one-byte ring all-gather.
 * Same-host pairs use the loopback TCP path too; a shared-memory path is
 * not written yet.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend.h"

#define HOST_MAGIC 0x524b5255u /* "RKRU" */

typedef struct {
  const RtPlan *plan;
  int rank;
  double timeout;
  RtStore *store;
  int lfd;
  int *fd; /* per global rank, -1 until connected */
} HostState;

struct RtComm {
  HostState *hs;
  int group;
  int n, me;
  int *fds; /* per member index; -1 for this rank */
};

static RtResult host_init(const RtBackendCtx *ctx, void **state) {
  HostState *hs = rp_calloc(1, sizeof *hs);
  hs->plan = ctx->plan;
  hs->rank = ctx->rank;
  hs->timeout = ctx->timeout;
  hs->store = ctx->store;
  hs->fd = rp_malloc(sizeof(int) * (size_t)ctx->plan->world_size);
  for (int i = 0; i < ctx->plan->world_size; i++) hs->fd[i] = -1;
  int port = 0;
  RtResult r = rt_listen(ctx->bind_host, &port, 256, &hs->lfd);
  if (r != RT_OK) {
    free(hs->fd);
    free(hs);
    return r;
  }
  char key[64], val[128];
  snprintf(key, sizeof key, "host/addr/%d", ctx->rank);
  int vl = snprintf(val, sizeof val, "%s:%d", ctx->bind_host, port);
  r = rt_store_set(ctx->store, key, val, (size_t)vl);
  if (r != RT_OK) {
    close(hs->lfd);
    free(hs->fd);
    free(hs);
    return r;
  }
  *state = hs;
  return RT_OK;
}

static RtResult host_finalize(void *state) {
  HostState *hs = state;
  if (!hs) return RT_OK;
  for (int i = 0; i < hs->plan->world_size; i++)
    if (hs->fd[i] >= 0) close(hs->fd[i]);
  close(hs->lfd);
  free(hs->fd);
  free(hs);
  return RT_OK;
}

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t get32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | p[3];
}

/* Connects to lower rank `peer` and introduces this rank. */
static RtResult host_dial(HostState *hs, int peer, double deadline) {
  char key[64], *addr = NULL, *host = NULL;
  snprintf(key, sizeof key, "host/addr/%d", peer);
  RtResult r = rt_store_wait(hs->store, key, deadline - rt_now(), &addr, NULL);
  if (r == RT_ERR_TIMEOUT)
    return rt_err(r, "rank %d never published its address (waited %.1f s)",
                  peer, hs->timeout);
  RTCHECK(r);
  int port, fd = -1;
  r = rt_parse_hostport(addr, &host, &port);
  free(addr);
  RTCHECK(r);
  r = rt_connect(host, port, deadline, &fd);
  free(host);
  if (r != RT_OK)
    return rt_err(r, "cannot reach rank %d: %s", peer, rt_errmsg());
  unsigned char hello[8];
  put32(hello, HOST_MAGIC);
  put32(hello + 4, (uint32_t)hs->rank);
  r = rt_write_all(fd, hello, 8, deadline);
  if (r != RT_OK) {
    close(fd);
    return rt_err(r, "cannot greet rank %d: %s", peer, rt_errmsg());
  }
  hs->fd[peer] = fd;
  return RT_OK;
}

/* Accepts connections until rank `want` (higher than ours) has arrived.
 * Connections from other valid higher ranks are kept for later groups;
 * anything else (bad magic, unknown or duplicate rank) is closed. */
static RtResult host_accept(HostState *hs, int want, double deadline) {
  while (hs->fd[want] < 0) {
    struct pollfd p = {.fd = hs->lfd, .events = POLLIN, .revents = 0};
    double left = deadline - rt_now();
    int rc = left <= 0 ? 0 : poll(&p, 1, (int)(left * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0)
      return rt_err(RT_ERR_TIMEOUT, "rank %d did not connect within %.1f s",
                    want, hs->timeout);
    int fd = accept4(hs->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    unsigned char hello[8];
    double hd = rt_now() + 2.0 < deadline ? rt_now() + 2.0 : deadline;
    if (rt_read_all(fd, hello, 8, hd) != RT_OK || get32(hello) != HOST_MAGIC) {
      close(fd);
      continue;
    }
    uint32_t from = get32(hello + 4);
    if (from >= (uint32_t)hs->plan->world_size || (int)from <= hs->rank ||
        hs->fd[from] >= 0) {
      close(fd);
      continue;
    }
    hs->fd[from] = fd;
  }
  return RT_OK;
}

static RtResult host_group_create(void *state, int group, RtComm **out) {
  HostState *hs = state;
  const RtGroup *g = &hs->plan->groups[group];
  int me = rt_group_index(g, hs->rank);
  if (me < 0)
    return rt_err(RT_ERR_INVALID, "rank %d is not in group `%s`", hs->rank,
                  g->id);
  double deadline = rt_now() + hs->timeout;
  /* Dial lower ranks first: connects complete in the peer's backlog, so no
   * rank ever waits on another rank's accept order. */
  for (int i = 0; i < g->nranks; i++) {
    int peer = g->ranks[i];
    if (peer < hs->rank && hs->fd[peer] < 0)
      RTCHECK(host_dial(hs, peer, deadline));
  }
  for (int i = 0; i < g->nranks; i++) {
    int peer = g->ranks[i];
    if (peer > hs->rank && hs->fd[peer] < 0)
      RTCHECK(host_accept(hs, peer, deadline));
  }
  RtComm *c = rp_calloc(1, sizeof *c);
  c->hs = hs;
  c->group = group;
  c->n = g->nranks;
  c->me = me;
  c->fds = rp_malloc(sizeof(int) * (size_t)g->nranks);
  for (int i = 0; i < g->nranks; i++)
    c->fds[i] = i == me ? -1 : hs->fd[g->ranks[i]];
  *out = c;
  return RT_OK;
}

static RtResult host_comm_destroy(RtComm *c, bool abort) {
  (void)abort; /* the pair connections belong to the state */
  if (!c) return RT_OK;
  free(c->fds);
  free(c);
  return RT_OK;
}

static int host_comm_size(const RtComm *c) { return c->n; }
static int host_comm_index(const RtComm *c) { return c->me; }

static double deadline_of(const RtComm *c) { return rt_now() + c->hs->timeout; }

static RtResult peer_err(const RtComm *c, int idx, RtResult r) {
  const RtGroup *g = &c->hs->plan->groups[c->group];
  return rt_err(r, "group `%s` (%s): rank %d: %s", g->id, g->kind,
                g->ranks[idx], rt_errmsg());
}

static RtResult host_send(RtComm *c, const void *buf, size_t bytes, int peer) {
  if (peer < 0 || peer >= c->n || peer == c->me)
    return rt_err(RT_ERR_INVALID, "bad peer index %d in a group of %d", peer,
                  c->n);
  RtResult r = rt_write_all(c->fds[peer], buf, bytes, deadline_of(c));
  return r == RT_OK ? r : peer_err(c, peer, r);
}

static RtResult host_recv(RtComm *c, void *buf, size_t bytes, int peer) {
  if (peer < 0 || peer >= c->n || peer == c->me)
    return rt_err(RT_ERR_INVALID, "bad peer index %d in a group of %d", peer,
                  c->n);
  RtResult r = rt_read_all(c->fds[peer], buf, bytes, deadline_of(c));
  return r == RT_OK ? r : peer_err(c, peer, r);
}

/* Exchange with ring neighbours: send to me+1, receive from me-1. */
static RtResult ring_step(RtComm *c, const void *s, size_t sn, void *r,
                          size_t rn) {
  int right = (c->me + 1) % c->n, left = (c->me + c->n - 1) % c->n;
  RtResult res = rt_sendrecv(c->fds[right], s, sn, c->fds[left], r, rn,
                             deadline_of(c));
  return res == RT_OK ? res : peer_err(c, left, res);
}

static size_t dtype_size(RtDtype t) { return t == RT_I64 ? 8 : 4; }

static void reduce(void *dst, const void *src, size_t count, RtDtype t,
                   RtRedOp op) {
  if (t == RT_I64) {
    int64_t *d = dst;
    const int64_t *s = src;
    for (size_t i = 0; i < count; i++) {
      if (op == RT_SUM)
        d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)s[i]);
      else if (s[i] > d[i])
        d[i] = s[i];
    }
  } else {
    float *d = dst;
    const float *s = src;
    for (size_t i = 0; i < count; i++) {
      if (op == RT_SUM)
        d[i] += s[i];
      else if (s[i] > d[i])
        d[i] = s[i];
    }
  }
}

static RtResult host_all_reduce(RtComm *c, const void *send, void *recv,
                                size_t count, RtDtype t, RtRedOp op) {
  size_t es = dtype_size(t);
  if (send != recv) memmove(recv, send, count * es);
  int n = c->n;
  if (n == 1 || count == 0) return RT_OK;
  /* Segment k covers [off[k], off[k+1]) elements. */
  size_t *off = rp_malloc(sizeof(size_t) * (size_t)(n + 1));
  for (int k = 0; k <= n; k++) off[k] = count * (size_t)k / (size_t)n;
  size_t maxseg = 0;
  for (int k = 0; k < n; k++)
    if (off[k + 1] - off[k] > maxseg) maxseg = off[k + 1] - off[k];
  char *tmp = rp_malloc(maxseg * es + 1);
  char *rb = recv;
  RtResult r = RT_OK;
  for (int s = 0; s < n - 1 && r == RT_OK; s++) {
    int ss = ((c->me - s) % n + n) % n, rs = ((c->me - s - 1) % n + n) % n;
    r = ring_step(c, rb + off[ss] * es, (off[ss + 1] - off[ss]) * es, tmp,
                  (off[rs + 1] - off[rs]) * es);
    if (r == RT_OK) reduce(rb + off[rs] * es, tmp, off[rs + 1] - off[rs], t, op);
  }
  for (int s = 0; s < n - 1 && r == RT_OK; s++) {
    int ss = ((c->me - s + 1) % n + n) % n, rs = ((c->me - s) % n + n) % n;
    r = ring_step(c, rb + off[ss] * es, (off[ss + 1] - off[ss]) * es,
                  rb + off[rs] * es, (off[rs + 1] - off[rs]) * es);
  }
  free(tmp);
  free(off);
  return r;
}

static RtResult host_all_gather(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  char *rb = recv;
  memmove(rb + (size_t)c->me * bytes, send, bytes);
  int n = c->n;
  for (int s = 0; s < n - 1; s++) {
    int sb = ((c->me - s) % n + n) % n, rbk = ((c->me - s - 1) % n + n) % n;
    RTCHECK(ring_step(c, rb + (size_t)sb * bytes, bytes,
                      rb + (size_t)rbk * bytes, bytes));
  }
  return RT_OK;
}

static RtResult host_all_to_all(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  const char *sb = send;
  char *rb = recv;
  int n = c->n;
  memmove(rb + (size_t)c->me * bytes, sb + (size_t)c->me * bytes, bytes);
  for (int s = 1; s < n; s++) {
    int to = (c->me + s) % n, from = (c->me - s + n) % n;
    RtResult r = rt_sendrecv(c->fds[to], sb + (size_t)to * bytes, bytes,
                             c->fds[from], rb + (size_t)from * bytes, bytes,
                             deadline_of(c));
    if (r != RT_OK) return peer_err(c, from, r);
  }
  return RT_OK;
}

static RtResult host_barrier(RtComm *c) {
  char one = 1, *all = rp_malloc((size_t)c->n);
  RtResult r = host_all_gather(c, &one, all, 1);
  free(all);
  return r;
}

static void *host_mem_alloc(void *state, size_t bytes) {
  (void)state;
  return malloc(bytes ? bytes : 1);
}
static void host_mem_free(void *state, void *p) {
  (void)state;
  free(p);
}
static RtResult host_to_host(void *state, void *host, const void *mem,
                             size_t bytes) {
  (void)state;
  memmove(host, mem, bytes);
  return RT_OK;
}
static RtResult host_from_host(void *state, void *mem, const void *host,
                               size_t bytes) {
  (void)state;
  memmove(mem, host, bytes);
  return RT_OK;
}

const RtBackend rt_backend_host = {
    .version = RT_BACKEND_VERSION,
    .name = "host",
    .init = host_init,
    .finalize = host_finalize,
    .group_create = host_group_create,
    .comm_destroy = host_comm_destroy,
    .comm_size = host_comm_size,
    .comm_index = host_comm_index,
    .send = host_send,
    .recv = host_recv,
    .all_reduce = host_all_reduce,
    .all_gather = host_all_gather,
    .all_to_all = host_all_to_all,
    .barrier = host_barrier,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .to_host = host_to_host,
    .from_host = host_from_host,
};
