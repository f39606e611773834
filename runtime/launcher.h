/*
 * launcher.h: the launcher (one per node) and the worker (one process per
 * rank); the plan is the loader's (rtplan.h).
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

#include "backend.h"
#include "rt.h"
#include "rtplan.h"

typedef struct {
  const char *plan_path;
  int node;
  char *rdzv_host;  /* rendezvous store address */
  int rdzv_port;
  const char *backend;     /* its name, as given */
  const RtBackend *be;     /* that backend (rt_backend_find) */
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
  /* `-- CMD ARGS...` (procs.h): the user processes after the preflight */
  char **cmd;            /* NULL-terminated; NULL: no command */
  int per;               /* RtPer: --per rank|instance|node */
  bool no_preflight;     /* --no-preflight */
  bool preflight_only;   /* --preflight-only */
  char **env;            /* --env K=V, NULL-terminated */
  int nenv;
  const char *log_dir;   /* --log-dir DIR */
  const char *ready_port; /* --ready-port PORT (a template) */
  const char *ready_cmd;  /* --ready-cmd CMD (a template, run by /bin/sh) */
  double ready_timeout;   /* --ready-timeout S */
} RtLaunchOpts;

/* Timed copies of the probe (after one untimed copy); the median counts. */
#define RT_PROBE_COPY_ITERS 5

/* The `copy/RANK` store record of --probe ("BYTES GBS"), untrusted: true
 * only for exactly two numbers, BYTES equal to `bytes` and 0 < GBS < 1e9,
 * which lands in *gbs (0 otherwise). */
bool rt_copy_record_decode(const char *text, int64_t bytes, double *gbs);

/* Loads a plan through the shared loader (compiler/plan.h: plan_load),
 * which checks it. Errors: RT_ERR_SYS when unreadable, RT_ERR_INVALID with
 * the loader's message otherwise. Free *out with plan_free. */
RtResult rt_plan_open(const char *path, Plan **out);

/* Runs the launcher of one node to completion. Returns the process exit
 * code: 0, 3 (runtime failure), or 2 (the plan does not fit the options). */
int rt_launch(const RtLaunchOpts *o, const Plan *plan);

/* Runs one rank (the hidden worker mode). Returns the exit code: 0, 1 (a
 * preflight check gave a wrong result), 3 (peer, store or timeout failure),
 * 70 (internal). */
int rt_worker_main(const RtLaunchOpts *o, const Plan *plan);

/* Worker exit codes the launcher interprets. */
enum {
  RT_WORKER_OK = 0,
  RT_WORKER_CHECK = 1, /* this rank saw a wrong collective result */
  RT_WORKER_PEER = 3   /* a peer, the store or a deadline failed: usually a
                          consequence of another rank's failure */
};

#endif
