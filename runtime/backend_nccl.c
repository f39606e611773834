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
 * hangs a rank. No call waits on the device without a deadline: copies
 * are polled too, the barrier allocates nothing, and once a communicator
 * has failed mem_free leaves device memory to the process's exit (cudaFree
 * would wait for a kernel still waiting for the dead peer). Data copied in
 * with from_host is on the device before the call returns, so the next
 * operation on the NCCL stream reads it.
 */
#include <nccl.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* Non-blocking communicators (ncclConfig_t.blocking), ncclCommFinalize and
 * ncclGetLastError came with NCCL 2.14 (nccl.h). */
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl backend needs NCCL 2.14 or newer"
#endif

typedef struct {
  const Plan *plan;
  int rank;
  double timeout;
  RtStore *store;
  char keyspace[16]; /* RtBackendCtx.keyspace */
  /* Every NCCL operation and copy_ref run on `stream`; from_host and
   * to_host on `xstream`, so that the next layer group's copy into the
   * pool overlaps a posted p2p group. Both are non-blocking streams: no
   * implicit ordering with the legacy default stream or with each other,
   * which is why from_host and to_host wait for their own copy. */
  cudaStream_t stream, xstream;
  /* Timing events: around a posted p2p group, and around copy_ref. */
  cudaEvent_t ev0, ev1;
  void *scratch; /* RT_NCCL_SCRATCH device bytes: the barrier's all-reduce */
  /* A communicator of this process failed or passed its deadline, so a
   * kernel may still be waiting for a peer: cudaFree synchronizes the
   * device and would wait for it forever (mem_free leaks instead). */
  bool broken;
} NcclState;

#define RT_NCCL_SCRATCH 64

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

static void set_broken(RtComm *c) {
  c->broken = true;
  c->ns->broken = true;
}

/* NCCL's own message of the last failure on this communicator (for
 * example "Duplicate GPU detected : rank 0 and rank 1 ..."), trimmed. */
static void last_error(const RtComm *c, char *buf, size_t n) {
  buf[0] = 0;
  const char *m = c->comm ? ncclGetLastError(c->comm) : NULL;
  if (!m || !*m) return;
  snprintf(buf, n, " (%s", m);
  size_t l = strlen(buf);
  while (l > 2 && (buf[l - 1] == '\n' || buf[l - 1] == ' ')) buf[--l] = 0;
  if (l + 1 < n) {
    buf[l] = ')';
    buf[l + 1] = 0;
  }
}

static RtResult nccl_fail(RtComm *c, ncclResult_t e, const char *what) {
  set_broken(c);
  const PlanGroup *g = &c->ns->plan->groups[c->group];
  char last[256];
  last_error(c, last, sizeof last);
  return rt_err(e == ncclRemoteError || e == ncclSystemError ? RT_ERR_CLOSED
                                                              : RT_ERR_SYS,
                "group `%d` (%s): %s: %s%s", g->id, plan_kind_name(g->kind), what,
                ncclGetErrorString(e), last);
}

static RtResult late(RtComm *c, const char *what) {
  set_broken(c);
  const PlanGroup *g = &c->ns->plan->groups[c->group];
  return rt_err(RT_ERR_TIMEOUT, "group `%d` (%s): %s did not finish within "
                "%.1f s", g->id, plan_kind_name(g->kind), what, c->ns->timeout);
}

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* Between two polls of a wait that began at t0: nothing for the first
 * RT_NCCL_SPIN_S (a small all-reduce completes in microseconds, and a sleep
 * would round every latency the preflight measures up to the sleep), then
 * 100 us sleeps. */
#define RT_NCCL_SPIN_S 2e-3
static void poll_pause(double t0) {
  if (rt_now() - t0 >= RT_NCCL_SPIN_S) pause_us(100);
}

/* Waits until the communicator has no operation in flight (ncclSuccess) or
 * fails; a deadline miss is a timeout. */
static RtResult wait_comm(RtComm *c, double deadline, const char *what) {
  double t0 = rt_now();
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t e = ncclCommGetAsyncError(c->comm, &st);
    if (e != ncclSuccess) return nccl_fail(c, e, what);
    if (st == ncclSuccess) return RT_OK;
    if (st != ncclInProgress) return nccl_fail(c, st, what);
    if (rt_now() > deadline) return late(c, what);
    poll_pause(t0);
  }
}

/* Waits for the stream (the enqueued operation) while watching the
 * communicator for asynchronous errors (a peer that died across the
 * network shows as ncclRemoteError or ncclSystemError; one that died on
 * this node leaves the kernel waiting, which the deadline catches). */
static RtResult wait_stream(RtComm *c, const char *what) {
  double t0 = rt_now(), deadline = t0 + c->ns->timeout;
  RTCHECK(wait_comm(c, deadline, what));
  for (;;) {
    cudaError_t q = cudaStreamQuery(c->ns->stream);
    if (q == cudaSuccess) return RT_OK;
    if (q != cudaErrorNotReady) {
      set_broken(c);
      return cuda_err(q, what);
    }
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(c->comm, &st);
    if (st != ncclSuccess && st != ncclInProgress)
      return nccl_fail(c, st, what);
    if (rt_now() > deadline) return late(c, what);
    poll_pause(t0);
  }
}

/* Waits for a local copy on stream s (no peer involved), within the
 * deadline all the same. */
static RtResult wait_local(NcclState *ns, cudaStream_t s, const char *what) {
  double t0 = rt_now(), deadline = t0 + ns->timeout;
  for (;;) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return RT_OK;
    if (q != cudaErrorNotReady) return cuda_err(q, what);
    if (rt_now() > deadline)
      return rt_err(RT_ERR_TIMEOUT, "%s did not finish within %.1f s", what,
                    ns->timeout);
    poll_pause(t0);
  }
}

static RtResult nccl_finalize(void *state) {
  NcclState *ns = state;
  if (!ns) return RT_OK;
  if (ns->scratch && !ns->broken) cudaFree(ns->scratch);
  if (ns->ev0) cudaEventDestroy(ns->ev0);
  if (ns->ev1) cudaEventDestroy(ns->ev1);
  if (ns->stream) cudaStreamDestroy(ns->stream);
  if (ns->xstream) cudaStreamDestroy(ns->xstream);
  free(ns);
  return RT_OK;
}

static RtResult nccl_init(const RtBackendCtx *ctx, void **state) {
  /* The launcher sets CUDA_VISIBLE_DEVICES to the plan's device, which the
   * process then sees as device 0; a worker started without it uses the
   * plan's device number. Either way the device is set before any other
   * CUDA or NCCL call, as ncclCommInitRank requires (nccl.h). */
  int n = 0, dev = getenv("CUDA_VISIBLE_DEVICES") ? 0 : ctx->device;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= dev)
    return rt_err(RT_ERR_UNSUPPORTED, "no CUDA device is visible to rank %d "
                  "(CUDA_VISIBLE_DEVICES=%s)", ctx->rank,
                  getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
  e = cudaSetDevice(dev);
  if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
  NcclState *ns = rp_calloc(1, sizeof *ns);
  ns->plan = ctx->plan;
  ns->rank = ctx->rank;
  ns->timeout = ctx->timeout;
  ns->store = ctx->store;
  snprintf(ns->keyspace, sizeof ns->keyspace, "%s", ctx->keyspace ? ctx->keyspace : "");
  const char *what = "cudaStreamCreate";
  e = cudaStreamCreateWithFlags(&ns->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&ns->xstream, cudaStreamNonBlocking);
  if (e == cudaSuccess) {
    what = "cudaEventCreate";
    e = cudaEventCreate(&ns->ev0);
  }
  if (e == cudaSuccess) e = cudaEventCreate(&ns->ev1);
  if (e == cudaSuccess) {
    what = "cudaMalloc of the barrier's buffer";
    e = cudaMalloc(&ns->scratch, RT_NCCL_SCRATCH);
  }
  /* Stream-ordered before every NCCL operation. */
  if (e == cudaSuccess)
    e = cudaMemsetAsync(ns->scratch, 0, RT_NCCL_SCRATCH, ns->stream);
  if (e != cudaSuccess) {
    RtResult r = cuda_err(e, what);
    nccl_finalize(ns);
    return r;
  }
  *state = ns;
  return RT_OK;
}

static RtResult nccl_group_create(void *state, int group, RtComm **out) {
  NcclState *ns = state;
  const PlanGroup *g = &ns->plan->groups[group];
  int me = rt_group_index(g, ns->rank);
  if (me < 0)
    return rt_err(RT_ERR_INVALID, "rank %d is not in group `%d`", ns->rank,
                  g->id);
  ncclUniqueId id;
  char key[64];
  snprintf(key, sizeof key, "%snccl/id/%d", ns->keyspace, group);
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
      return rt_err(RT_ERR_PROTO, "nccl id of group `%d` has %zu bytes, "
                    "expected %zu", g->id, vl, sizeof id);
    }
    memcpy(&id, v, sizeof id);
    free(v);
  }
  RtComm *c = rp_calloc(1, sizeof *c);
  c->ns = ns;
  c->group = group;
  c->n = g->n;
  c->me = me;
  /* Non-blocking: the call returns ncclInProgress at once and init goes on
   * in the background, polled below against the deadline. Init is
   * collective over the group; every rank creates its communicators one
   * at a time in the plan's group order (backend.h), so the lowest group
   * not yet created always has all its members in it. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t e = ncclCommInitRankConfig(&c->comm, g->n, id, me, &cfg);
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

/* Finalize (flushes this rank's operations and waits for the peers' side
 * of the teardown), then destroy; ncclCommAbort instead after a failure,
 * which does not wait for peers and stops kernels still waiting for them
 * (NCCL API, ncclCommFinalize / ncclCommAbort). */
static RtResult nccl_comm_destroy(RtComm *c, bool abort) {
  if (!c) return RT_OK;
  RtResult r = RT_OK;
  if (abort || c->broken) {
    ncclCommAbort(c->comm);
  } else {
    ncclResult_t e = ncclCommFinalize(c->comm);
    if (e == ncclSuccess || e == ncclInProgress)
      r = wait_comm(c, rt_now() + c->ns->timeout, "finalize");
    else
      r = nccl_fail(c, e, "ncclCommFinalize");
    if (r == RT_OK)
      ncclCommDestroy(c->comm);
    else
      ncclCommAbort(c->comm);
  }
  free(c);
  return r;
}

static int nccl_comm_size(const RtComm *c) { return c->n; }
static int nccl_comm_index(const RtComm *c) { return c->me; }

/* A communicator that failed is good for comm_destroy only (backend.h). */
static RtResult usable(RtComm *c, const char *what) {
  if (!c->broken) return RT_OK;
  const PlanGroup *g = &c->ns->plan->groups[c->group];
  return rt_err(RT_ERR_SYS, "group `%d` (%s): %s on a communicator that "
                "failed before", g->id, plan_kind_name(g->kind), what);
}

static RtResult enqueued(RtComm *c, ncclResult_t e, const char *what) {
  if (e != ncclSuccess && e != ncclInProgress) return nccl_fail(c, e, what);
  return wait_stream(c, what);
}

static RtResult nccl_send(RtComm *c, const void *buf, size_t bytes, int peer) {
  RTCHECK(usable(c, "send"));
  return enqueued(c, ncclSend(buf, bytes, ncclUint8, peer, c->comm,
                              c->ns->stream), "send");
}

static RtResult nccl_recv(RtComm *c, void *buf, size_t bytes, int peer) {
  RTCHECK(usable(c, "recv"));
  return enqueued(c, ncclRecv(buf, bytes, ncclUint8, peer, c->comm,
                              c->ns->stream), "recv");
}

static RtResult nccl_all_reduce(RtComm *c, const void *send, void *recv,
                                size_t count, RtDtype t, RtRedOp op) {
  RTCHECK(usable(c, "all-reduce"));
  return enqueued(c, ncclAllReduce(send, recv, count,
                                   t == RT_I64 ? ncclInt64 : ncclFloat32,
                                   op == RT_SUM ? ncclSum : ncclMax, c->comm,
                                   c->ns->stream), "all-reduce");
}

static RtResult nccl_all_gather(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  RTCHECK(usable(c, "all-gather"));
  return enqueued(c, ncclAllGather(send, recv, bytes, ncclUint8, c->comm,
                                   c->ns->stream), "all-gather");
}

/* One group of a send and a receive with every member, this rank's own
 * block included: NCCL pairs a send to self with the receive from self of
 * the same group (docs, "Point-to-point communication", all-to-all). */
static RtResult nccl_all_to_all(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  RTCHECK(usable(c, "all-to-all"));
  const char *sb = send;
  char *rb = recv;
  ncclResult_t e = ncclGroupStart();
  if (e != ncclSuccess) return nccl_fail(c, e, "ncclGroupStart");
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

/* An all-reduce of one element of the state's scratch buffer: a member
 * completes it only once every member has contributed. No allocation and
 * no blocking synchronize here: after a timeout the kernel may still wait
 * for a dead peer, and either would wait with it. */
static RtResult nccl_barrier(RtComm *c) {
  RTCHECK(usable(c, "barrier"));
  return enqueued(c, ncclAllReduce(c->ns->scratch, c->ns->scratch, 1,
                                   ncclFloat32, ncclMax, c->comm,
                                   c->ns->stream), "barrier");
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
  if (n < 1 || n > RT_P2P_MAX)
    return rt_err(RT_ERR_INVALID, "a p2p group of %d operations: expected 1 "
                  "to %d", n, RT_P2P_MAX);
  for (int i = 0; i < n; i++)
    if (ops[i].peer < 0 || ops[i].peer >= c->n)
      return rt_err(RT_ERR_INVALID, "p2p operation %d names member %d of a "
                    "%d-member group", i, ops[i].peer, c->n);
  RTCHECK(usable(c, "grouped send/recv"));
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
  if (ce != cudaSuccess) return cuda_err(ce, "device-to-device copy");
  RTCHECK(wait_local(ns, ns->stream, "device-to-device copy"));
  float ms = 0;
  ce = cudaEventElapsedTime(&ms, ns->ev0, ns->ev1);
  if (ce != cudaSuccess) return cuda_err(ce, "cudaEventElapsedTime");
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

/* cudaFree synchronizes the device (CUDA C++ Programming Guide, "Implicit
 * Synchronization"): after a communicator failed, a kernel may still be
 * waiting for a peer that is gone, and the free would wait with it. The
 * memory is left to the process's exit then. */
static void nccl_mem_free(void *state, void *p) {
  NcclState *ns = state;
  if (!p || ns->broken) return;
  cudaFree(p);
}

/* Copies between host and device memory on the copy stream, waited for
 * before returning. A plain cudaMemcpy from pageable memory may return
 * before the data has reached the device ("API synchronization
 * behavior"), and it is ordered with the legacy default stream only, not
 * with the non-blocking stream the NCCL operations run on: an operation
 * posted next could read the old bytes. Callers complete their
 * communication first (every call but p2p_post does), so a copy to the
 * host sees its result. */
static RtResult nccl_to_host(void *state, void *host, const void *mem,
                             size_t bytes) {
  NcclState *ns = state;
  cudaError_t e = cudaMemcpyAsync(host, mem, bytes, cudaMemcpyDeviceToHost,
                                  ns->xstream);
  if (e != cudaSuccess) return cuda_err(e, "copy to host");
  return wait_local(ns, ns->xstream, "copy to host");
}

static RtResult nccl_from_host(void *state, void *mem, const void *host,
                               size_t bytes) {
  NcclState *ns = state;
  cudaError_t e = cudaMemcpyAsync(mem, host, bytes, cudaMemcpyHostToDevice,
                                  ns->xstream);
  if (e != cudaSuccess) return cuda_err(e, "copy to device");
  return wait_local(ns, ns->xstream, "copy to device");
}

static void *nccl_comm_native(RtComm *c) { return (void *)c->comm; }

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
    .host_memory = false,
    .visible_devices_env = "CUDA_VISIBLE_DEVICES",
    .probe_copy_bytes = RT_PROBE_COPY_DEVICE,
    .copy_ref_kind = "device-to-device copy",
    .kv_grouped = true,
    .shm_segments = NULL,
    .comm_native = nccl_comm_native,
};
