/*
 * kv.h: KV pools (kvpool.c) and the KV-reshard executor (kvxfer.c).
 *
 * A rank allocates what its ledger in the plan says (KV pool and a weights
 * placeholder, both scaled by --host-memory-scale on the host backend).
 * Requests are prefilled on prefill ranks, which fill their KV shard with a
 * deterministic pattern, and moved to decode ranks exactly as the plan's
 * kv_reshard says; decode ranks verify every byte they own.
 */
#ifndef RANKRUN_KV_H
#define RANKRUN_KV_H

#include "backend.h"
#include "plan.h"

typedef struct {
  void *weights, *kv;
  int64_t planned_weights, planned_kv; /* the plan's ledger, bytes */
  int64_t weights_bytes, kv_bytes;     /* allocated */
} RtKvPool;

/* Allocates rank R's KV pool (kv.blocks * kv.block_tokens *
 * kv.bytes_per_token) and a weights placeholder (memory.weights), each
 * scaled by `scale` and rounded down to 4 KiB (at least 4 KiB), through the
 * backend's mem_alloc; host memory is touched so that it really exists.
 * Fails with the planned and the asked bytes when memory is not there. */
RtResult rt_kvpool_alloc(const RtBackend *be, void *state, const PlanRank *R,
                         double scale, RtKvPool *out);
void rt_kvpool_free(const RtBackend *be, void *state, RtKvPool *p);

/* MemAvailable of this machine in bytes (/proc/meminfo), or -1. */
int64_t rt_host_mem_available(void);

/* Bytes the ranks of `node` ask for at `scale` (weights + KV). */
int64_t rt_node_planned_bytes(const Plan *pl, int node_index, double scale);

/* What one node of the host backend needs and has (bytes; a free figure of
 * -1 is unknown and not compared). */
typedef struct {
  int node;
  int64_t ledger;     /* rt_node_planned_bytes, 0 without --requests */
  double scale;       /* --host-memory-scale */
  int64_t rings;      /* rt_host_node_rings (0 with RANKRUN_HOST_SHM=0) */
  int64_t ring_bytes; /* rt_host_ring_bytes */
  int64_t shm_free;   /* free bytes of /dev/shm (statvfs) */
  int64_t mem_free;   /* MemAvailable */
} RtNodeFit;

/* RT_OK when the node's rings fit /dev/shm's free space and its ledger and
 * rings together fit MemAvailable (rings are memory too); otherwise
 * RT_ERR_INVALID with a message naming the node and every figure. */
RtResult rt_node_fit_check(const RtNodeFit *f);
/* Free bytes of the file system at path (statvfs), or -1. */
int64_t rt_fs_free(const char *path);

/* The longest request rankrun runs, tokens: the bound of --input-tokens
 * (docs/runtime.md). 2^24 is over 100 times the longest context of the
 * catalog's models (163,840 tokens), and keeps token indices and cell
 * counts far inside int64 arithmetic. */
#define RT_KV_MAX_TOKENS (1 << 24)

/* The plan's kv_reshard as rankrun runs it: every pair's transfers move
 * cells of one size (bytes_per_token over layers x heads; a transfer that
 * disagrees with its pair's first is refused, naming it, since cells of
 * mixed sizes have no meaning), and token ranges lie in [0,
 * RT_KV_MAX_TOKENS]. *ranges_T gets the end of the last token range (the
 * request length the ranges were computed for), -1 when there are none.
 * Errors name kv_reshard[i].transfers[j]. */
RtResult rt_kv_plan_check(const Plan *pl, int64_t *ranges_T);

typedef struct {
  int requests;
  int64_t input_tokens;
  /* tests only: flip one byte of (request, layer, kv head, token, byte) on
   * the sending side; request < 0: none */
  int64_t corrupt[5];
} RtKvOpts;

/* What one rank saw, posted to the store as `kv/RANK`. */
typedef struct {
  int64_t bytes_recv;
  /* sending side, per link class: bytes and seconds spent in send calls
   * (after the fill: the transfer alone) */
  int64_t bytes_same_node, bytes_cross_node;
  double secs_same_node, secs_cross_node;
  int64_t cells_verified;
  /* sending side: a plain memcpy of every message it sent, between two
   * pre-faulted host buffers, timed just before the send (the benchmark's
   * reference, under the same load as the transfer) */
  int64_t memcpy_bytes;
  double memcpy_secs;
  double memcpy_gbs; /* memcpy_bytes / memcpy_secs, 0 when nothing sent */
  /* per request, on decode ranks: bytes and seconds */
  int nreq;
  int64_t *req_bytes;
  double *req_secs;
  /* per request, on prefill ranks: bytes sent and seconds in send calls
   * per link class ([0] same node, [1] cross node) */
  int64_t *req_link_bytes[2];
  double *req_link_secs[2];
  /* true when the grouped path ran (p2p_post: on nccl always, on host with
   * RANKRUN_KV_GROUPED=1); memcpy_* then hold its copy_ref reference
   * (device to device on nccl) */
  bool grouped;
  /* this rank's CPU during rt_kv_run (Linux /proc/self/schedstat; both
   * -1 where it cannot be read): seconds on a core, and seconds runnable
   * but waiting for one. The second shows when ranks outnumber cores,
   * which stretches every timed section, transfers included. */
  double cpu_run_secs, cpu_wait_secs;
} RtKvStats;

/* Runs every request through the plan's kv_reshard on this rank. A
 * backend with p2p_post whose kv_grouped is set (nccl) takes the grouped path: per layer group and
 * link class, one group of sends and receives with every peer, straight
 * from and into the KV pool; others (host) send one message at a time
 * through a host buffer unless RANKRUN_KV_GROUPED=1. world is
 * this rank's communicator of the plan's world group (index world_group in
 * plan->groups). On a verification failure returns RT_ERR_CHECK with the
 * message naming (request, layer, kv head, token, byte). */
RtResult rt_kv_run(const RtBackend *be, void *state, const Plan *pl,
                   int rank, RtComm *world, int world_group,
                   RtKvPool *pool, const RtKvOpts *o, RtKvStats *st);
void rt_kv_stats_free(RtKvStats *st);

/* A request's KV moved from and into buffers the caller owns (librankrun,
 * docs/runtime.md "Worker API"), by the one executor rt_kv_run uses: the
 * same walk, order and paths, without the fill and the verification.
 * rank's region of request `request` at `tokens` tokens is laid out
 * [layer][kv head][token][cell bytes] over its shard's layers and kv
 * heads (kv_reshard's cell size: a transfer's bytes_per_token over its
 * layers x kv heads); region is backend memory (host memory on host,
 * device memory on nccl) of exactly that many bytes (rt_kv_region_bytes).
 * A sender's region is read, a receiver's written where it owns cells;
 * other bytes are left as they are. Every rank that sends or receives the
 * request calls it (the request's role: rt_kv_role). */
typedef enum { RT_KV_NONE = 0, RT_KV_SEND = 1, RT_KV_RECV = 2 } RtKvRole;
typedef struct {
  const RtBackend *be;
  void *state;
  const Plan *pl;
  int rank;
  RtComm *world;      /* this rank's communicator of the world group */
  int world_group;    /* its index in pl->groups */
  int64_t request, tokens;
  void *region;
  size_t bytes;
} RtKvMove;
/* st: from rt_kv_stats_alloc(st, 1): the request's figures at index 0. */
RtResult rt_kv_move(const RtKvMove *m, RtKvStats *st);
RtResult rt_kv_role(const Plan *pl, int rank, int64_t request, RtKvRole *role);
RtResult rt_kv_region_bytes(const Plan *pl, int rank, int64_t request,
                            int64_t tokens, int64_t *bytes);
/* The per-request arrays of st, zeroed, for n requests (the rest of st
 * is left as it is). */
void rt_kv_stats_alloc(RtKvStats *st, int n);

/* The `kv/RANK` store record: st as one line of text (appended to sb),
 * and back. The decoder takes untrusted text (anyone who can reach the
 * store can write a record): it fills *st (free with rt_kv_stats_free)
 * and returns true only for a record of exactly `requests` requests whose
 * counts are ones a run can give (bytes and cells in [0, 2^53], seconds
 * finite in [0, 1e9], CPU seconds the same or -1 for unknown); anything
 * else leaves *st empty and returns false. */
void rt_kv_stats_encode(const RtKvStats *st, StrBuf *sb);
bool rt_kv_stats_decode(const char *text, int requests, RtKvStats *st);

/* This thread's time on a core and waiting in the run queue so far,
 * seconds (/proc/thread-self/schedstat); false where the kernel does not
 * give it. */
bool rt_sched_times(double *run, double *wait);

/* Policy (docs/runtime.md): request k goes to kv_reshard pair k % npairs,
 * to prefill instance k % replicas and attention-dp rank (k / replicas) %
 * dp of the prefill pool, and likewise on the decode pool. */
void rt_kv_assign(const PlanPool *P, int64_t k, int64_t *inst, int64_t *dp);

#endif
