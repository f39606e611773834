/*
 * report.h: what a launcher writes when it finishes, as JSON (format
 * `rankrun.report/1`, keys only ever added) and as text. docs/runtime.md
 * describes every field.
 */
#ifndef RANKRUN_REPORT_H
#define RANKRUN_REPORT_H

#include "rt.h"
#include "rtplan.h"

typedef struct {
  int rank, local_rank, device;
  int pid;
  bool exited;   /* reaped */
  int exit_code; /* when it exited normally, else -1 */
  int signal;    /* the signal that ended it, else 0 */
  bool have_mem; /* memory figures came back (--requests) */
  int64_t planned_weights, planned_kv, alloc_weights, alloc_kv;
  /* a user process (`rankrun ... -- CMD`): rank is its first rank */
  const char *label; /* "N/RANK", "N/POOL.INSTANCE", "N"; NULL: a rank */
  char *tail;        /* its last lines of output, escaped; NULL: none */
  int ready;         /* -1 not asked, 0 not (yet), 1 ready */
  double ready_s;    /* seconds from its start to ready */
} RtRankStatus;

/* KV transfers of the whole deployment (--requests): bytes and cells from
 * the decode ranks, link-class time from the prefill ranks' send calls
 * (the transfer without the fill), per-request time from the decode ranks
 * (fill and transfer, end to end). */
typedef struct {
  bool have;
  int requests;
  int64_t input_tokens;
  double mem_scale;
  int64_t bytes, bytes_same_node, bytes_cross_node, cells_verified;
  double secs_same_node, secs_cross_node; /* summed send time (senders) */
  double memcpy_gbs; /* sent bytes over the senders' summed time in a plain
                        memcpy of the same messages (kv.h) */
  int64_t *req_bytes;                     /* per request */
  double *req_secs;                       /* per request, slowest rank */
  /* per request and link class ([0] same node, [1] cross node): bytes
   * sent and the senders' summed send time */
  int64_t *req_link_bytes[2];
  double *req_link_secs[2];
  /* what memcpy_gbs measured: "memcpy" (host) or "device-to-device copy"
   * (nccl) */
  const char *reference;
  bool grouped; /* some rank took the grouped path (kv.h) */
  /* every rank's time on a core and waiting for one during the KV phase,
   * summed (kv.h); -1 when some rank could not tell */
  double cpu_run_secs, cpu_wait_secs;
} RtKvReport;

typedef struct {
  int32_t id;     /* the plan's group id */
  GroupKind kind;
  int nranks;
  bool have;    /* a result came back */
  bool ok;      /* the all-reduce of rank ids was right */
  int64_t bytes;
  int iters;
  double seconds, algbw_gbs, busbw_gbs;
  double latency_s; /* one 8-byte all-reduce */
  bool cross_node;  /* members on more than one node */
} RtGroupResult;

/* What --probe wrote to the calibration file: each constant with its
 * value and, in words, the measurement it came from. */
#define RT_CALIB_MAX 5
typedef struct {
  bool have;                 /* a calibration file was written */
  char *path;
  int n;
  struct {
    const char *name;        /* a cost-model constant (compiler/cost.h) */
    double value;
    char *from;              /* e.g. "median bus bandwidth ... / nominal ..." */
  } c[RT_CALIB_MAX];
} RtCalibration;

typedef struct {
  const char *plan_path;
  const char *backend;
  const char *job; /* deployment id from node 0, NULL before it is known */
  int node, nnodes, world_size;
  int exit_code; /* what the launcher exits with */
  double elapsed_s;
  /* The first failure of the deployment (any node), when there was one. */
  bool failed;
  int fail_rank; /* -1 when no rank is to blame (a node never joined) */
  int fail_node;
  int fail_exit;   /* exit code, or -1 */
  int fail_signal; /* signal number, or 0 */
  char *fail_reason;
  int nlocal;
  RtRankStatus *local; /* this node's ranks */
  int ngroups;
  RtGroupResult *groups; /* every group of the plan */
  RtKvReport kv;
  /* --probe: each rank's memory copy bandwidth (2 x bytes over the median
   * copy time, GB/s; 0 when the rank gave none), copy_gbs[rank] */
  int64_t copy_bytes; /* 0: no copy probe */
  double *copy_gbs;   /* world_size entries */
  RtCalibration calib; /* --probe */
  /* `-- CMD`: the user processes of this node, in the mode per */
  const char *per;     /* "rank", "instance", "node"; NULL: no command */
  int nprocs;
  RtRankStatus *procs;
  const char *fail_tail; /* the first failure's last lines, when it is a
                            process of this node */
  const char *user_job;  /* the user phase's deployment id (its processes'
                            RANKPLAN_JOB, naming their shared memory) */
} RtReport;

/* Renders the report; the caller frees the string. */
char *rt_report_json(const RtReport *r);
char *rt_report_text(const RtReport *r);
/* Writes a calibration file (format rankplan.calibration/1, read by
 * `rankplan search --calibration`) from the preflight and records what it
 * wrote in r->calib. Groups whose members are all on one node measure the
 * scale-up link, groups spanning nodes the scale-out link. Per link class:
 *  - scale_up_latency_s / scale_out_latency_s: the median over groups of
 *    the per-hop latency (a ring all-reduce of n ranks takes 2 (n-1) hops);
 *  - scale_up_efficiency / scale_out_efficiency: the median over groups of
 *    the measured bus bandwidth divided by the plan's nominal bandwidth of
 *    that class (plan `hardware`), clamped into the constant's range of
 *    compiler/cost.h; not written when the plan has no nominal figure;
 *  - hbm_efficiency: the median over ranks of the memory copy bandwidth
 *    (copy_gbs) over the plan's hardware.hbm_bandwidth, clamped likewise.
 * Only what was measured is written. */
RtResult rt_write_calibration(RtReport *r, const Plan *plan, const char *path);

/* Writes JSON to path and text to path + ".txt", both atomically. */
RtResult rt_report_write(const RtReport *r, const char *path);

#endif
