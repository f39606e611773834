/*
 * backend_nccl.c: the NCCL backend (compiled only when meson finds CUDA and
 * NCCL). One NCCL communicator per plan group.
 *
 * Input: the plan's groups, the store (to pass each group's ncclUniqueId
 * from its first member to the others). Output: communicators whose
 * collectives run on the CUDA device the launcher bound with
 * CUDA_VISIBLE_DEVICES (the process sees it as device 0).
 * Invariants: every communicator is non-blocking (ncclConfig_t.blocking =
 * 0); init and every operation are polled with ncclCommGetAsyncError and
 * cudaStreamQuery against the deadline, and a communicator that fails or
 * passes its deadline is torn down with ncclCommAbort, so a dead peer never
 * hangs a rank.
 */
#include <nccl.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

typedef struct {
  const RtPlan *plan;
  int rank;
  double timeout;
  RtStore *store;
  cudaStream_t stream;
  /* Timing events: around a posted p2p group, and around copy_ref. */
  cudaEvent_t ev0, ev1;
} NcclState;

struct RtComm {
  NcclState *ns;
  int group;
  int n, me;
  ncclComm_t comm;
  bool broken;
  bool posted; /* a p2p group is in flight (p2p_post, p2p_wait) */
};

static RtResult cuda_err(cudaError_t e, const char *what) {
  return rt_err(RT_ERR_SYS, "%s: %s", what, cudaGetErrorString(e));
}

static RtResult nccl_fail(RtComm *c, ncclResult_t e, const char *what) {
  c->broken = true;
  const RtGroup *g = &c->ns->plan->groups[c->group];
  return rt_err(e == ncclRemoteError || e == ncclSystemError ? RT_ERR_CLOSED
                                                              : RT_ERR_SYS,
                "group `%s` (%s): %s: %s", g->id, g->kind, what,
                ncclGetErrorString(e));
}

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* Waits until the communicator has no operation in flight (ncclSuccess) or
 * fails; a deadline miss is a timeout. */
static RtResult wait_comm(RtComm *c, double deadline, const char *what) {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t e = ncclCommGetAsyncError(c->comm, &st);
    if (e != ncclSuccess) return nccl_fail(c, e, what);
    if (st == ncclSuccess) return RT_OK;
    if (st != ncclInProgress) return nccl_fail(c, st, what);
    if (rt_now() > deadline) {
      c->broken = true;
      const RtGroup *g = &c->ns->plan->groups[c->group];
      return rt_err(RT_ERR_TIMEOUT, "group `%s` (%s): %s did not finish "
                    "within %.1f s", g->id, g->kind, what, c->ns->timeout);
    }
    pause_us(200);
  }
}

/* Waits for the stream (the enqueued operation) while watching the
 * communicator for asynchronous errors. */
static RtResult wait_stream(RtComm *c, const char *what) {
  double deadline = rt_now() + c->ns->timeout;
  RTCHECK(wait_comm(c, deadline, what));
  for (;;) {
    cudaError_t q = cudaStreamQuery(c->ns->stream);
    if (q == cudaSuccess) return RT_OK;
    if (q != cudaErrorNotReady) return cuda_err(q, what);
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(c->comm, &st);
    if (st != ncclSuccess && st != ncclInProgress)
      return nccl_fail(c, st, what);
    if (rt_now() > deadline) {
      c->broken = true;
      const RtGroup *g = &c->ns->plan->groups[c->group];
      return rt_err(RT_ERR_TIMEOUT, "group `%s` (%s): %s did not finish "
                    "within %.1f s", g->id, g->kind, what, c->ns->timeout);
    }
    pause_us(50);
  }
}

static RtResult nccl_init(const RtBackendCtx *ctx, void **state) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1)
    return rt_err(RT_ERR_UNSUPPORTED, "no CUDA device is visible to rank %d "
                  "(CUDA_VISIBLE_DEVICES=%s)", ctx->rank,
                  getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
  e = cudaSetDevice(0);
  if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
  NcclState *ns = rp_calloc(1, sizeof *ns);
  ns->plan = ctx->plan;
  ns->rank = ctx->rank;
  ns->timeout = ctx->timeout;
  ns->store = ctx->store;
  e = cudaStreamCreateWithFlags(&ns->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(ns);
    return cuda_err(e, "cudaStreamCreate");
  }
  e = cudaEventCreate(&ns->ev0);
  if (e == cudaSuccess) {
    e = cudaEventCreate(&ns->ev1);
    if (e != cudaSuccess) cudaEventDestroy(ns->ev0);
  }
  if (e != cudaSuccess) {
    cudaStreamDestroy(ns->stream);
    free(ns);
    return cuda_err(e, "cudaEventCreate");
  }
  *state = ns;
  return RT_OK;
}

static RtResult nccl_finalize(void *state) {
  NcclState *ns = state;
  if (!ns) return RT_OK;
  cudaEventDestroy(ns->ev0);
  cudaEventDestroy(ns->ev1);
  cudaStreamDestroy(ns->stream);
  free(ns);
  return RT_OK;
}

static RtResult nccl_group_create(void *state, int group, RtComm **out) {
  NcclState *ns = state;
  const RtGroup *g = &ns->plan->groups[group];
  int me = rt_group_index(g, ns->rank);
  if (me < 0)
    return rt_err(RT_ERR_INVALID, "rank %d is not in group `%s`", ns->rank,
                  g->id);
  ncclUniqueId id;
  char key[64];
  snprintf(key, sizeof key, "nccl/id/%d", group);
  if (me == 0) {
    ncclResult_t e = ncclGetUniqueId(&id);
    if (e != ncclSuccess)
      return rt_err(RT_ERR_SYS, "ncclGetUniqueId: %s", ncclGetErrorString(e));
    RTCHECK(rt_store_set(ns->store, key, &id, sizeof id));
  } else {
    char *v = NULL;
    size_t vl = 0;
    RTCHECK(rt_store_wait(ns->store, key, ns->timeout, &v, &vl));
    if (vl != sizeof id) {
      free(v);
      return rt_err(RT_ERR_PROTO, "nccl id of group `%s` has %zu bytes, "
                    "expected %zu", g->id, vl, sizeof id);
    }
    memcpy(&id, v, sizeof id);
    free(v);
  }
  RtComm *c = rp_calloc(1, sizeof *c);
  c->ns = ns;
  c->group = group;
  c->n = g->nranks;
  c->me = me;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t e = ncclCommInitRankConfig(&c->comm, g->nranks, id, me, &cfg);
  RtResult r = RT_OK;
  if (e != ncclSuccess && e != ncclInProgress)
    r = nccl_fail(c, e, "ncclCommInitRankConfig");
  else
    r = wait_comm(c, rt_now() + ns->timeout, "communicator init");
  if (r != RT_OK) {
    if (c->comm) ncclCommAbort(c->comm);
    free(c);
    return r;
  }
  *out = c;
  return RT_OK;
}

static RtResult nccl_comm_destroy(RtComm *c, bool abort) {
  if (!c) return RT_OK;
  if (abort || c->broken) {
    ncclCommAbort(c->comm);
  } else {
    ncclResult_t e = ncclCommFinalize(c->comm);
    if (e == ncclSuccess || e == ncclInProgress) {
      if (wait_comm(c, rt_now() + c->ns->timeout, "finalize") != RT_OK) {
        ncclCommAbort(c->comm);
        free(c);
        return RT_ERR_TIMEOUT;
      }
    }
    ncclCommDestroy(c->comm);
  }
  free(c);
  return RT_OK;
}

static int nccl_comm_size(const RtComm *c) { return c->n; }
static int nccl_comm_index(const RtComm *c) { return c->me; }

static RtResult enqueued(RtComm *c, ncclResult_t e, const char *what) {
  if (e != ncclSuccess && e != ncclInProgress) return nccl_fail(c, e, what);
  return wait_stream(c, what);
}

static RtResult nccl_send(RtComm *c, const void *buf, size_t bytes, int peer) {
  return enqueued(c, ncclSend(buf, bytes, ncclUint8, peer, c->comm,
                              c->ns->stream), "send");
}

static RtResult nccl_recv(RtComm *c, void *buf, size_t bytes, int peer) {
  return enqueued(c, ncclRecv(buf, bytes, ncclUint8, peer, c->comm,
                              c->ns->stream), "recv");
}

static RtResult nccl_all_reduce(RtComm *c, const void *send, void *recv,
                                size_t count, RtDtype t, RtRedOp op) {
  return enqueued(c, ncclAllReduce(send, recv, count,
                                   t == RT_I64 ? ncclInt64 : ncclFloat32,
                                   op == RT_SUM ? ncclSum : ncclMax, c->comm,
                                   c->ns->stream), "all-reduce");
}

static RtResult nccl_all_gather(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  return enqueued(c, ncclAllGather(send, recv, bytes, ncclUint8, c->comm,
                                   c->ns->stream), "all-gather");
}

static RtResult nccl_all_to_all(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  const char *sb = send;
  char *rb = recv;
  ncclResult_t e = ncclGroupStart();
  for (int p = 0; p < c->n && e == ncclSuccess; p++) {
    e = ncclSend(sb + (size_t)p * bytes, bytes, ncclUint8, p, c->comm,
                 c->ns->stream);
    if (e == ncclSuccess || e == ncclInProgress)
      e = ncclRecv(rb + (size_t)p * bytes, bytes, ncclUint8, p, c->comm,
                   c->ns->stream);
    if (e == ncclInProgress) e = ncclSuccess;
  }
  ncclResult_t e2 = ncclGroupEnd();
  if (e != ncclSuccess) return nccl_fail(c, e, "all-to-all");
  return enqueued(c, e2, "all-to-all");
}

static RtResult nccl_barrier(RtComm *c) {
  /* An all-reduce of one element in a scratch buffer. */
  void *p = NULL;
  cudaError_t ce = cudaMallocAsync(&p, sizeof(float), c->ns->stream);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaMallocAsync");
  cudaMemsetAsync(p, 0, sizeof(float), c->ns->stream);
  RtResult r = nccl_all_reduce(c, p, p, 1, RT_F32, RT_SUM);
  cudaFreeAsync(p, c->ns->stream);
  cudaStreamSynchronize(c->ns->stream);
  return r;
}

/* Posts every operation inside one ncclGroupStart/ncclGroupEnd, so that
 * NCCL runs the sends and receives with all peers together. The
 * communicator is non-blocking: ncclGroupEnd may return ncclInProgress
 * before the operations are on the stream, so the communicator is polled
 * (ncclCommGetAsyncError) until it says ncclSuccess, and only then is the
 * closing event recorded behind them. */
static RtResult nccl_p2p_post(RtComm *c, const RtP2p *ops, int n) {
  if (c->posted)
    return rt_err(RT_ERR_INVALID, "a p2p group is already in flight");
  NcclState *ns = c->ns;
  cudaError_t ce = cudaEventRecord(ns->ev0, ns->stream);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaEventRecord");
  ncclResult_t e = ncclGroupStart();
  if (e != ncclSuccess) return nccl_fail(c, e, "ncclGroupStart");
  for (int i = 0; i < n && e == ncclSuccess; i++) {
    if (ops[i].send)
      e = ncclSend(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, c->comm,
                   ns->stream);
    else
      e = ncclRecv(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, c->comm,
                   ns->stream);
    if (e == ncclInProgress) e = ncclSuccess;
  }
  /* ncclGroupEnd is called even after a failed enqueue: a group must be
   * closed on this thread before any other NCCL call. */
  ncclResult_t e2 = ncclGroupEnd();
  if (e != ncclSuccess) return nccl_fail(c, e, "grouped send/recv");
  if (e2 != ncclSuccess && e2 != ncclInProgress)
    return nccl_fail(c, e2, "grouped send/recv");
  RTCHECK(wait_comm(c, rt_now() + ns->timeout, "grouped send/recv"));
  ce = cudaEventRecord(ns->ev1, ns->stream);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaEventRecord");
  c->posted = true;
  return RT_OK;
}

static RtResult nccl_p2p_wait(RtComm *c, double *secs) {
  *secs = 0;
  if (!c->posted) return RT_OK;
  c->posted = false;
  RTCHECK(wait_stream(c, "grouped send/recv"));
  float ms = 0;
  cudaError_t ce = cudaEventElapsedTime(&ms, c->ns->ev0, c->ns->ev1);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaEventElapsedTime");
  *secs = (double)ms / 1e3;
  return RT_OK;
}

/* A device-to-device copy on the backend's stream, timed by events; the
 * reference the KV benchmark divides the transfer bandwidth by. */
static RtResult nccl_copy_ref(void *state, void *dst, const void *src,
                              size_t bytes, double *secs) {
  NcclState *ns = state;
  *secs = 0;
  cudaError_t ce = cudaEventRecord(ns->ev0, ns->stream);
  if (ce == cudaSuccess)
    ce = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ns->stream);
  if (ce == cudaSuccess) ce = cudaEventRecord(ns->ev1, ns->stream);
  if (ce == cudaSuccess) ce = cudaEventSynchronize(ns->ev1);
  float ms = 0;
  if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, ns->ev0, ns->ev1);
  if (ce != cudaSuccess) return cuda_err(ce, "device-to-device copy");
  *secs = (double)ms / 1e3;
  return RT_OK;
}

static void *nccl_mem_alloc(void *state, size_t bytes) {
  (void)state;
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
  return p;
}

static RtResult nccl_mem_info(void *state, int64_t *free_bytes,
                              int64_t *total_bytes) {
  (void)state;
  size_t f = 0, t = 0;
  cudaError_t e = cudaMemGetInfo(&f, &t);
  if (e != cudaSuccess) return cuda_err(e, "cudaMemGetInfo");
  *free_bytes = (int64_t)f;
  *total_bytes = (int64_t)t;
  return RT_OK;
}

static void nccl_mem_free(void *state, void *p) {
  (void)state;
  cudaFree(p);
}

static RtResult nccl_to_host(void *state, void *host, const void *mem,
                             size_t bytes) {
  (void)state;
  cudaError_t e = cudaMemcpy(host, mem, bytes, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? RT_OK : cuda_err(e, "cudaMemcpy to host");
}

static RtResult nccl_from_host(void *state, void *mem, const void *host,
                               size_t bytes) {
  (void)state;
  cudaError_t e = cudaMemcpy(mem, host, bytes, cudaMemcpyHostToDevice);
  return e == cudaSuccess ? RT_OK : cuda_err(e, "cudaMemcpy to device");
}

const RtBackend rt_backend_nccl = {
    .version = RT_BACKEND_VERSION,
    .name = "nccl",
    .init = nccl_init,
    .finalize = nccl_finalize,
    .group_create = nccl_group_create,
    .comm_destroy = nccl_comm_destroy,
    .comm_size = nccl_comm_size,
    .comm_index = nccl_comm_index,
    .send = nccl_send,
    .recv = nccl_recv,
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .barrier = nccl_barrier,
    .mem_alloc = nccl_mem_alloc,
    .mem_free = nccl_mem_free,
    .to_host = nccl_to_host,
    .from_host = nccl_from_host,
    .p2p_post = nccl_p2p_post,
    .p2p_wait = nccl_p2p_wait,
    .copy_ref = nccl_copy_ref,
    .mem_info = nccl_mem_info,
};
