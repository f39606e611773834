/*
 * launcher.h: the runtime's view of a plan, the launcher (one per node) and
 * the worker (one process per rank).
 *
 * Process model: `rankrun PLAN --node N` is the launcher of node N. Node 0's
 * launcher also runs the rendezvous store. Each launcher forks one child per
 * local rank, and the child re-executes the same binary (/proc/self/exe) in
 * the hidden worker mode `rankrun --worker PLAN`, with RANK, LOCAL_RANK,
 * WORLD_SIZE, RANKRUN_STORE, RANKRUN_BACKEND (and CUDA_VISIBLE_DEVICES for
 * nccl) in its environment. Exec rather than running the worker in the
 * forked child: the launcher has a store thread, and after fork only
 * async-signal-safe calls are allowed until exec.
 */
#ifndef RANKRUN_LAUNCHER_H
#define RANKRUN_LAUNCHER_H

#include "rt.h"

/* The parts of a plan the runtime reads (architecture.md, "Plan file"). */
typedef struct {
  char *id;   /* the plan's group id, as text */
  char *kind; /* tp, dp, pp, ..., world */
  int nranks;
  int *ranks; /* global ranks, in the plan's order */
} RtGroup;

typedef struct {
  int rank, node, local_rank, device;
  char *pool; /* pool name */
} RtRank;

struct Plan;

typedef struct {
  struct Plan *full; /* the shared loader's plan, for KV work (kv.h) */
  int world_size;
  int nnodes;
  RtRank *ranks;   /* indexed by global rank */
  int ngroups;
  RtGroup *groups; /* in the plan's order */
} RtPlan;

/* Loads a plan through the shared loader (compiler/plan.h: plan_load),
 * which checks it, and keeps what the runtime needs. Node numbers become
 * positions in the plan's nodes[]; a rank absent from a --split-by-node
 * plan has node -1. Errors: RT_ERR_SYS when unreadable, RT_ERR_INVALID
 * with the loader's message otherwise. */
RtResult rt_plan_load(const char *path, RtPlan *p);
void rt_plan_free(RtPlan *p);
/* Index of rank r inside group g, or -1. */
int rt_group_index(const RtGroup *g, int r);

typedef struct {
  const char *plan_path;
  int node;
  char *rdzv_host;  /* rendezvous store address */
  int rdzv_port;
  const char *backend;
  double timeout;   /* join and operation timeout, seconds */
  double grace;     /* SIGTERM then SIGKILL after this many seconds */
  double soak;      /* after preflight, keep running collectives this long */
  int64_t preflight_bytes;
  bool dry_run;
  const char *report_path; /* JSON; text goes to report_path + ".txt" */
  const char *probe_path;  /* --probe FILE: node 0 writes a calibration */
  int64_t probe_copy_bytes; /* --probe-copy-bytes N: each rank times copies
                               of N bytes within its memory (device memory
                               on nccl); 0 with --probe: the backend's
                               default (RT_PROBE_COPY_*); workers get the
                               value to use, 0 = no copy probe */
  bool quiet;
  int requests;          /* --requests K: KV transfers (kv.h); 0: none */
  int64_t input_tokens;  /* --input-tokens T */
  double mem_scale;      /* --host-memory-scale F */
  int64_t corrupt[5];    /* --test-corrupt R:L:H:P:B; corrupt[0] < 0: off */
  bool test_ignore_sigterm; /* tests only: workers ignore SIGTERM, so that
                               the SIGKILL after the grace period is seen */
} RtLaunchOpts;

/* Default bytes of the --probe memory copy: above the last-level cache of
 * the device, so that the copy measures memory, not cache (an H100's L2 is
 * 50 MB, NVIDIA H100 Tensor Core GPU Architecture whitepaper; the H200
 * uses the same GH100 die; the host figure is above the 32 MiB L3 of the
 * build machine, `lscpu`). */
#define RT_PROBE_COPY_DEVICE (INT64_C(256) << 20)
#define RT_PROBE_COPY_HOST (INT64_C(64) << 20)
/* Timed copies of the probe (after one untimed copy); the median counts. */
#define RT_PROBE_COPY_ITERS 5

/* The `copy/RANK` store record of --probe ("BYTES GBS"), untrusted: true
 * only for exactly two numbers, BYTES equal to `bytes` and 0 < GBS < 1e9,
 * which lands in *gbs (0 otherwise). */
bool rt_copy_record_decode(const char *text, int64_t bytes, double *gbs);

/* Runs the launcher of one node to completion. Returns the process exit
 * code: 0, 3 (runtime failure), or 2 (the plan does not fit the options). */
int rt_launch(const RtLaunchOpts *o, const RtPlan *plan);

/* Runs one rank (the hidden worker mode). Returns the exit code: 0, 1 (a
 * preflight check gave a wrong result), 3 (peer, store or timeout failure),
 * 70 (internal). */
int rt_worker_main(const RtLaunchOpts *o, const RtPlan *plan);

/* Worker exit codes the launcher interprets. */
enum {
  RT_WORKER_OK = 0,
  RT_WORKER_CHECK = 1, /* this rank saw a wrong collective result */
  RT_WORKER_PEER = 3   /* a peer, the store or a deadline failed: usually a
                          consequence of another rank's failure */
};

#endif
