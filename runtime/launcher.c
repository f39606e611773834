/*
 * launcher.c: the runtime's plan reader, the per-node launcher and the
 * per-rank worker.
 *
 * Input: a plan file (architecture.md, "Plan file"), the node number, the
 * rendezvous address. Output: one worker process per local rank, run to
 * completion or stopped together; a report (report.c).
 * Invariants: shared fate. When any rank of any node fails, every launcher
 * learns it through the store's `fail` key (created once: the first
 * failure wins) within one poll interval, sends SIGTERM to its ranks, and
 * SIGKILL after the grace period; no launcher exits while one of its ranks
 * is alive. A rank that exits with RT_WORKER_PEER (it lost a peer or a
 * deadline passed) is a consequence, not a cause: its launcher waits
 * RT_SECONDARY_WAIT seconds for a cause to be published before naming it;
 * a rank whose own check failed publishes itself as the cause before its
 * connections close, so its peers' consequences cannot come first.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "kv.h"
#include "launcher.h"
#include "procio.h"
#include "procs.h"
#include "plan.h"
#include "report.h"
#include "store.h"

#define RT_POLL_S 0.02        /* supervision tick */
#define RT_STORE_POLL_S 0.1   /* how often a launcher reads `fail` */
#define RT_SECONDARY_WAIT 1.0 /* see the opening comment */

extern char **environ;

/* ---------------------------------------------------------------------------
 * Plan reader: the shared loader (compiler/plan_load.c) checks the plan. */

RtResult rt_plan_open(const char *path, Plan **out) {
  *out = NULL;
  char *err = NULL;
  if (access(path, R_OK) != 0) /* allocates nothing, unlike fopen */
    return rt_err(RT_ERR_SYS, "cannot read plan `%s`: %s", path,
                  strerror(errno));
  Plan *pl = plan_load(path, NULL, &err);
  if (!pl) {
    RtResult r = rt_err(RT_ERR_INVALID, "bad plan: %s", err ? err : path);
    free(err);
    return r;
  }
  *out = pl;
  return RT_OK;
}

/* ---------------------------------------------------------------------------
 * Worker. */

static int worker_exit(RtResult r) {
  switch (r) {
  case RT_OK: return RT_WORKER_OK;
  case RT_ERR_CHECK:
  case RT_ERR_EXISTS:
  case RT_ERR_INVALID:
  case RT_ERR_UNSUPPORTED: return RT_WORKER_CHECK;
  default: return RT_WORKER_PEER;
  }
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The memory probe of --probe: copies of `bytes` bytes within this rank's
 * memory (device to device on nccl), RT_PROBE_COPY_ITERS timed after one
 * untimed copy that faults the pages in; *gbs is 2 x bytes over the median
 * copy time (a copy reads and writes every byte, so this is the memory
 * traffic, comparable with a datasheet's bandwidth). */
static RtResult probe_copy(const RtBackend *be, void *state, int64_t bytes,
                           double *gbs) {
  *gbs = 0;
  if (!be->copy_ref)
    return rt_err(RT_ERR_UNSUPPORTED, "backend %s cannot time a memory copy",
                  be->name);
  void *src = be->mem_alloc(state, (size_t)bytes);
  void *dst = be->mem_alloc(state, (size_t)bytes);
  RtResult r = RT_OK;
  if (!src || !dst) {
    r = rt_err(RT_ERR_SYS, "cannot allocate 2 x %lld bytes for the memory "
               "probe; lower --probe-copy-bytes", (long long)bytes);
    goto done;
  }
  /* Write the source for real (untouched host pages would all read the
   * one zero page), a chunk at a time. */
  size_t chunk = 1u << 20;
  unsigned char *h = rp_malloc(chunk);
  for (size_t i = 0; i < chunk; i++) h[i] = (unsigned char)(i * 131u + 7u);
  for (int64_t off = 0; off < bytes && r == RT_OK; off += (int64_t)chunk) {
    size_t n = bytes - off < (int64_t)chunk ? (size_t)(bytes - off) : chunk;
    r = be->from_host(state, (unsigned char *)src + off, h, n);
  }
  free(h);
  double secs[RT_PROBE_COPY_ITERS], s = 0;
  if (r == RT_OK) r = be->copy_ref(state, dst, src, (size_t)bytes, &s);
  for (int i = 0; i < RT_PROBE_COPY_ITERS && r == RT_OK; i++)
    r = be->copy_ref(state, dst, src, (size_t)bytes, &secs[i]);
  if (r == RT_OK) {
    for (int i = 1; i < RT_PROBE_COPY_ITERS; i++)
      for (int j = i; j > 0 && secs[j] < secs[j - 1]; j--) {
        double t = secs[j];
        secs[j] = secs[j - 1];
        secs[j - 1] = t;
      }
    double med = secs[RT_PROBE_COPY_ITERS / 2];
    *gbs = med > 0 ? 2.0 * (double)bytes / med / 1e9 : 0;
  }
done:
  if (src) be->mem_free(state, src);
  if (dst) be->mem_free(state, dst);
  return r;
}

/* The KV part of a worker (issue 9): allocate the ledger's memory, run the
 * requests through kv_reshard, post memory and transfer figures as
 * `mem/RANK` and `kv/RANK`. */
static RtResult worker_kv(const RtLaunchOpts *o, const Plan *plan,
                          const RtBackend *be, void *state, RtStore *st,
                          int rank, RtComm **comms, const int *groups, int ng) {
  const Plan *pl = plan;
  int wi = -1;
  for (int i = 0; i < ng; i++)
    if (plan->groups[groups[i]].kind == GK_WORLD) wi = i;
  if (wi < 0)
    return rt_err(RT_ERR_INVALID, "the plan has no world group for rank %d",
                  rank);
  RtKvPool pool;
  double scale = be->host_memory ? o->mem_scale : 1.0;
  RTCHECK(rt_kvpool_alloc(be, state, &pl->ranks[rank], scale, &pool));
  char key[64], *val = rp_sprintf("%lld %lld %lld %lld",
                                  (long long)pool.planned_weights,
                                  (long long)pool.planned_kv,
                                  (long long)pool.weights_bytes,
                                  (long long)pool.kv_bytes);
  snprintf(key, sizeof key, "mem/%d", rank);
  RtResult r = rt_store_set(st, key, val, strlen(val));
  free(val);
  RtKvOpts ko = {o->requests, o->input_tokens, {0, 0, 0, 0, 0}};
  memcpy(ko.corrupt, o->corrupt, sizeof ko.corrupt);
  RtKvStats ks;
  memset(&ks, 0, sizeof ks);
  if (r == RT_OK)
    r = rt_kv_run(be, state, pl, rank, comms[wi], groups[wi], &pool, &ko, &ks);
  if (r == RT_OK) {
    StrBuf sb;
    sb_init(&sb);
    rt_kv_stats_encode(&ks, &sb);
    snprintf(key, sizeof key, "kv/%d", rank);
    r = rt_store_set(st, key, sb.buf, sb.len);
    sb_free(&sb);
  }
  rt_kv_stats_free(&ks);
  rt_kvpool_free(be, state, &pool);
  return r;
}

/* A failed rank's message goes to the store as `err/RANK`, which the
 * launcher puts in the report when this rank is the first failure. A
 * failure of the rank's own (not a lost peer) is the deployment's cause:
 * also published as `fail` here, before the rank's connections close, so
 * that no peer's "connection closed" can be published first, however
 * slowly this rank's launcher reaps it. */
static void worker_publish_fail(RtStore *st, long rank, int node, RtResult r) {
  char key[64], *msg = rp_strdup(rt_errmsg());
  snprintf(key, sizeof key, "err/%ld", rank);
  rt_store_set(st, key, msg, strlen(msg));
  if (worker_exit(r) != RT_WORKER_PEER) {
    char *f = rp_sprintf("%ld %d %d 0 %s", rank, node, worker_exit(r), msg);
    rt_store_create(st, "fail", f, strlen(f));
    free(f);
  }
  free(msg);
}

/* This worker's rank, from RANK: one of the plan's ranks on this node, or
 * -1 after saying what is wrong. */
static long worker_rank(const RtLaunchOpts *o, const Plan *plan) {
  const char *rs = getenv("RANK");
  char *end = NULL;
  long rank = rs ? strtol(rs, &end, 10) : -1;
  if (rs && end && !*end && rank >= 0 && rank < plan->world_size && rt_rank_node(plan, rank) == o->node)
    return rank;
  fprintf(stderr, "rankrun: worker: bad RANK `%s` for node %d\n", rs ? rs : "", o->node);
  return -1;
}

/* The preflight result of each group this rank leads (its index 0), in
 * the store as pf/GROUP. */
static RtResult publish_preflight(const RtBackend *be, RtStore *st, RtComm **comms, const int *groups,
                                  int ng, const RtPreflight *pf) {
  char key[64], val[256];
  for (int i = 0; i < ng; i++) {
    if (be->comm_index(comms[i]) != 0) continue;
    snprintf(key, sizeof key, "pf/%d", groups[i]);
    snprintf(val, sizeof val, "%d %lld %d %.9f %.6f %.6f %.9f", pf[i].ok ? 1 : 0,
             (long long)pf[i].bytes, pf[i].iters, pf[i].seconds,
             pf[i].algbw_gbs, pf[i].busbw_gbs, pf[i].latency_s);
    RTCHECK(rt_store_set(st, key, val, strlen(val)));
  }
  return RT_OK;
}

/* Soak: rounds of small all-reduces on every group for about `soak`
 * seconds, a fixed number of rounds so that every member runs the same
 * collectives. */
static RtResult worker_soak(const RtBackend *be, void *state, RtComm **comms, int ng, long rank,
                            double soak) {
  int rounds = (int)(soak / 0.01) + 1;
  int64_t buf[256];
  void *dev = be->mem_alloc(state, sizeof buf);
  if (!dev) return rt_err(RT_ERR_SYS, "cannot allocate the soak buffer");
  for (int k = 0; k < 256; k++) buf[k] = rank;
  RtResult r = be->from_host(state, dev, buf, sizeof buf);
  for (int round = 0; round < rounds && r == RT_OK; round++) {
    for (int i = 0; i < ng && r == RT_OK; i++)
      r = be->all_reduce(comms[i], dev, dev, 256, RT_I64, RT_MAX);
    sleep_s(0.01);
  }
  be->mem_free(state, dev);
  return r;
}

/* The memory-copy probe of this rank, in the store as copy/RANK. */
static RtResult publish_copy(const RtBackend *be, void *state, RtStore *st, long rank, int64_t bytes) {
  double gbs = 0;
  RTCHECK(probe_copy(be, state, bytes, &gbs));
  char key[64], val[96];
  snprintf(key, sizeof key, "copy/%ld", rank);
  snprintf(val, sizeof val, "%lld %.6f", (long long)bytes, gbs);
  return rt_store_set(st, key, val, strlen(val));
}

int rt_worker_main(const RtLaunchOpts *o, const Plan *plan) {
  signal(SIGPIPE, SIG_IGN);
  if (o->test_ignore_sigterm) signal(SIGTERM, SIG_IGN);
  long rank = worker_rank(o, plan);
  if (rank < 0) return RP_EXIT_USAGE;
  const RtBackend *be = o->be;
  const PlanRank *me = plan_find_rank(plan, rank);
  RtStore st = {-1, o->timeout};
  RtResult r = RT_OK;
  void *state = NULL;
  int ng = 0;
  int *groups = rp_malloc(sizeof(int) * ((size_t)plan->ngroups + 1));
  for (int i = 0; i < plan->ngroups; i++)
    if (rt_group_index(&plan->groups[i], (int)rank) >= 0) groups[ng++] = i;
  RtComm **comms = rp_calloc((size_t)ng + 1, sizeof *comms);
  RtPreflight *pf = rp_calloc((size_t)ng + 1, sizeof *pf);
  char key[64], val[256], host[64], *job = NULL;
  bool failed_comm = false;

  RTCHECKGOTO(rt_store_connect(&st, o->rdzv_host, o->rdzv_port, o->timeout,
                               o->timeout), r, fail);
  snprintf(key, sizeof key, "rank/%ld", rank);
  snprintf(val, sizeof val, "%d %d", o->node, (int)getpid());
  r = rt_store_create(&st, key, val, strlen(val));
  if (r == RT_ERR_EXISTS)
    r = rt_err(r, "duplicate rank %ld: another process already joined as "
               "rank %ld", rank, rank);
  if (r != RT_OK) goto fail;
  RTCHECKGOTO(rt_local_addr(st.fd, host, sizeof host), r, fail);
  RTCHECKGOTO(rt_store_wait(&st, "job", o->timeout, &job, NULL), r, fail);
  RtBackendCtx ctx = {plan, (int)rank, me->local_rank, me->device, &st, host,
                      o->timeout, job, "", 0};
  RTCHECKGOTO(be->init(&ctx, &state), r, fail);
  for (int i = 0; i < ng; i++)
    RTCHECKGOTO(be->group_create(state, groups[i], &comms[i]), r, fail);
  RTCHECKGOTO(rt_preflight(be, state, plan, (int)rank, comms, groups, ng,
                           o->preflight_bytes, pf), r, fail);
  RTCHECKGOTO(publish_preflight(be, &st, comms, groups, ng, pf), r, fail);
  if (!o->quiet)
    fprintf(stderr, "rankrun: rank %ld: preflight ok (%d groups)\n", rank, ng);
  if (o->probe_copy_bytes > 0) RTCHECKGOTO(publish_copy(be, state, &st, rank, o->probe_copy_bytes), r, fail);
  if (o->requests > 0) RTCHECKGOTO(worker_kv(o, plan, be, state, &st, (int)rank,
                                             comms, groups, ng), r, fail);
  if (o->soak > 0) RTCHECKGOTO(worker_soak(be, state, comms, ng, rank, o->soak), r, fail);
  for (int i = 0; i < ng; i++) be->comm_destroy(comms[i], false);
  be->finalize(state);
  rt_store_close(&st);
  free(groups);
  free(comms);
  free(pf);
  free(job);
  return RT_WORKER_OK;
fail:
  fprintf(stderr, "rankrun: rank %ld: %s\n", rank, rt_errmsg());
  if (st.fd >= 0) worker_publish_fail(&st, rank, o->node, r);
  failed_comm = true;
  for (int i = 0; i < ng; i++)
    if (comms[i]) be->comm_destroy(comms[i], failed_comm);
  if (state) be->finalize(state);
  rt_store_close(&st);
  free(groups);
  free(comms);
  free(pf);
  free(job);
  return worker_exit(r);
}

/* ---------------------------------------------------------------------------
 * Launcher. */

static volatile sig_atomic_t got_signal;

static void on_signal(int s) { got_signal = s; }

typedef struct {
  const RtLaunchOpts *o;
  const Plan *plan;
  RtStore st;
  bool store_ok;
  RtReport rep;
  /* the first failure known (from the store or local) */
  bool have_fail, fail_published, fail_is_cause;
  double secondary_t;
  /* shutdown */
  bool stopping;
  double stop_t;
  bool killed;
  int joined; /* launchers known to have joined (node 0 waits for them) */
  char *job;  /* deployment id from node 0 (names shared memory) */
  char *ujob; /* the user phase's (its own shared-memory names) */
  /* what supervise watches: the ranks, then the user processes */
  RtRankStatus *cur;
  int ncur;
  bool user;           /* the user phase: process groups, output, readiness */
  RtProcSpec *specs;   /* user processes (procs.h) */
  RtProcIo *io;
  pid_t *ready_pid;    /* a --ready-cmd running per process, else 0 */
  double *started;     /* each process's start */
  double next_ready;   /* next readiness probe */
  bool all_ready;
  char **ready_arg;    /* --ready-port/--ready-cmd expanded per process */
  char ***envs;        /* each process's environment */
  int fail_proc;       /* the process that failed first here, else -1 */
  char addr[64];       /* this node's address (seen by the store) */
} Launch;

static void set_fail(Launch *L, int rank, int node, int code, int sig,
                     const char *reason) {
  L->rep.failed = true;
  L->rep.fail_rank = rank;
  L->rep.fail_node = node;
  L->rep.fail_exit = code;
  L->rep.fail_signal = sig;
  free(L->rep.fail_reason);
  /* Reasons come from the store too (`fail`, `err/R`): kept escaped, as
   * they are printed and reported. */
  L->rep.fail_reason = rt_escape_dup(reason);
  L->have_fail = true;
}

/* Publishes this node's failure as the deployment's first one unless
 * another was published already; either way, reads back the winner. */
static void publish_fail(Launch *L) {
  if (L->fail_published || !L->store_ok) return;
  char *v = rp_sprintf("%d %d %d %d %s", L->rep.fail_rank, L->rep.fail_node,
                       L->rep.fail_exit, L->rep.fail_signal,
                       L->rep.fail_reason ? L->rep.fail_reason : "");
  RtResult r = rt_store_create(&L->st, "fail", v, strlen(v));
  free(v);
  L->fail_published = true;
  if (r != RT_OK && r != RT_ERR_EXISTS) L->store_ok = false;
}

/* Reads the store's `fail` key; true when it holds a failure. */
static bool read_fail(Launch *L) {
  if (!L->store_ok) return false;
  char *v = NULL;
  RtResult r = rt_store_get(&L->st, "fail", &v, NULL);
  if (r == RT_ERR_NOTFOUND) return false;
  if (r != RT_OK) {
    L->store_ok = false;
    if (!L->have_fail)
      set_fail(L, -1, 0, -1, 0, "lost the rendezvous store on node 0");
    L->fail_published = true;
    return true;
  }
  int rank, node, code, sig, off = 0;
  if (sscanf(v, "%d %d %d %d %n", &rank, &node, &code, &sig, &off) >= 4) {
    set_fail(L, rank, node, code, sig, v + off);
    L->fail_published = true;
    L->fail_is_cause = true;
  }
  free(v);
  return true;
}

/* User processes run in their own process groups, so that what they
 * start is signalled with them. */
static void signal_all(Launch *L, int sig) {
  for (int i = 0; i < L->ncur; i++)
    if (!L->cur[i].exited && L->cur[i].pid > 0)
      kill(L->user ? -L->cur[i].pid : L->cur[i].pid, sig);
}

/* Stops every process: the signal the launcher got (forwarded), else
 * SIGTERM; SIGKILL follows after the grace period. */
static void start_stop(Launch *L) {
  if (L->stopping) return;
  L->stopping = true;
  L->stop_t = rt_now();
  signal_all(L, got_signal ? (int)got_signal : SIGTERM);
}

static bool all_exited(const Launch *L) {
  for (int i = 0; i < L->ncur; i++)
    if (!L->cur[i].exited) return false;
  return true;
}

static void ready_reaped(Launch *L, pid_t pid, int status);

static void user_failed(Launch *L, int i, bool cause);

/* Reaps children; a failure before shutdown becomes this node's failure,
 * causes (signals, exit codes other than RT_WORKER_PEER) first. */
static void reap(Launch *L) {
  int cause = -1, conseq = -1;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    ready_reaped(L, pid, status);
    for (int i = 0; i < L->ncur; i++) {
      RtRankStatus *s = &L->cur[i];
      if (s->pid != pid) continue;
      s->exited = true;
      s->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      s->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      bool bad = s->signal || s->exit_code != 0;
      if (bad && !L->stopping) {
        if (s->signal || (!L->user && s->exit_code != RT_WORKER_PEER)) {
          if (cause < 0) cause = i;
        } else if (conseq < 0) {
          conseq = i;
        }
      }
    }
  }
  int pick = cause >= 0 ? cause : conseq;
  if (pick < 0 || L->have_fail) return;
  if (L->user) {
    user_failed(L, pick, cause >= 0);
    return;
  }
  RtRankStatus *s = &L->cur[pick];
  const char *why = s->signal ? "rank was killed by a signal"
                    : cause >= 0 ? "rank exited with an error"
                                 : "rank lost a peer or a deadline passed";
  char key[32], *msg = NULL;
  snprintf(key, sizeof key, "err/%d", s->rank);
  if (!s->signal && L->store_ok &&
      rt_store_get(&L->st, key, &msg, NULL) == RT_OK && *msg)
    why = msg;
  set_fail(L, s->rank, L->o->node, s->signal ? -1 : s->exit_code, s->signal,
           why);
  free(msg);
  L->fail_is_cause = cause >= 0;
  if (L->fail_is_cause)
    publish_fail(L);
  else
    L->secondary_t = rt_now();
}

static char *dup_env(const char *k, const char *v) {
  return rp_sprintf("%s=%s", k, v);
}

static bool env_skip(const char *e) {
  static const char *const names[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=",
                                      "CUDA_VISIBLE_DEVICES=", "RANKRUN_DEVICE="};
  for (size_t i = 0; i < RP_ARRAY_LEN(names); i++)
    if (strncmp(e, names[i], strlen(names[i])) == 0) return true;
  return false;
}

/* Builds the worker's environment: the launcher's, minus the variables it
 * sets itself. Other RANKRUN_* settings (RANKRUN_HOST_SHM,
 * RANKRUN_KV_GROUPED) pass through: the workers read them. */
static char **worker_env(const Launch *L, const PlanRank *rk) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = rp_calloc(n + 8, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!env_skip(environ[i])) env[k++] = rp_strdup(environ[i]);
  char num[32];
  snprintf(num, sizeof num, "%d", rk->rank);
  env[k++] = dup_env("RANK", num);
  snprintf(num, sizeof num, "%d", rk->local_rank);
  env[k++] = dup_env("LOCAL_RANK", num);
  snprintf(num, sizeof num, "%d", (int)L->plan->world_size);
  env[k++] = dup_env("WORLD_SIZE", num);
  snprintf(num, sizeof num, "%d", rk->device);
  env[k++] = dup_env("RANKRUN_DEVICE", num);
  if (L->o->be->visible_devices_env)
    env[k++] = dup_env(L->o->be->visible_devices_env, num);
  env[k] = NULL;
  return env;
}

static char **worker_argv(const Launch *L) {
  char **a = rp_calloc(40, sizeof *a);
  int k = 0;
  a[k++] = rp_strdup("rankrun");
  a[k++] = rp_strdup("--worker");
  a[k++] = rp_strdup(L->o->plan_path);
  a[k++] = rp_strdup("--node");
  a[k++] = rp_sprintf("%d", L->o->node);
  a[k++] = rp_strdup("--rendezvous");
  a[k++] = rp_sprintf("%s:%d", L->o->rdzv_host, L->o->rdzv_port);
  a[k++] = rp_strdup("--backend");
  a[k++] = rp_strdup(L->o->backend);
  a[k++] = rp_strdup("--timeout");
  a[k++] = rp_sprintf("%g", L->o->timeout);
  a[k++] = rp_strdup("--soak");
  a[k++] = rp_sprintf("%g", L->o->soak);
  a[k++] = rp_strdup("--preflight-bytes");
  a[k++] = rp_sprintf("%lld", (long long)L->o->preflight_bytes);
  if (L->o->requests > 0) {
    a[k++] = rp_strdup("--requests");
    a[k++] = rp_sprintf("%d", L->o->requests);
    a[k++] = rp_strdup("--input-tokens");
    a[k++] = rp_sprintf("%lld", (long long)L->o->input_tokens);
    a[k++] = rp_strdup("--host-memory-scale");
    a[k++] = rp_sprintf("%.17g", L->o->mem_scale);
  }
  if (L->o->probe_copy_bytes > 0) {
    a[k++] = rp_strdup("--probe-copy-bytes");
    a[k++] = rp_sprintf("%lld", (long long)L->o->probe_copy_bytes);
  }
  if (L->o->corrupt[0] >= 0) {
    a[k++] = rp_strdup("--test-corrupt");
    a[k++] = rp_sprintf("%lld:%lld:%lld:%lld:%lld", (long long)L->o->corrupt[0],
                        (long long)L->o->corrupt[1], (long long)L->o->corrupt[2],
                        (long long)L->o->corrupt[3], (long long)L->o->corrupt[4]);
  }
  if (L->o->quiet) a[k++] = rp_strdup("--quiet");
  if (L->o->test_ignore_sigterm) a[k++] = rp_strdup("--test-ignore-sigterm");
  a[k] = NULL;
  return a;
}

static void free_strv(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

/* Collects preflight results of every group from the store. */
static void collect_preflight(Launch *L, double deadline) {
  for (int i = 0; i < L->plan->ngroups; i++) {
    RtGroupResult *g = &L->rep.groups[i];
    char key[32], *v = NULL;
    snprintf(key, sizeof key, "pf/%d", i);
    double left = deadline - rt_now();
    if (!L->store_ok ||
        rt_store_wait(&L->st, key, left > 0 ? left : 0, &v, NULL) != RT_OK)
      continue;
    int ok = 0;
    long long bytes = 0;
    if (sscanf(v, "%d %lld %d %lf %lf %lf %lf", &ok, &bytes, &g->iters,
               &g->seconds, &g->algbw_gbs, &g->busbw_gbs, &g->latency_s) == 7) {
      g->have = true;
      g->ok = ok == 1;
      g->bytes = bytes;
    }
    free(v);
  }
}

/* Collects every rank's memory copy figure of --probe (`copy/RANK`). */
bool rt_copy_record_decode(const char *text, int64_t bytes, double *gbs) {
  long long b = 0;
  double g = 0;
  int n = 0;
  *gbs = 0;
  if (sscanf(text, "%lld %lf%n", &b, &g, &n) != 2 || text[n] != 0 ||
      b != bytes || !(g > 0 && g < 1e9))
    return false;
  *gbs = g;
  return true;
}

/* A rank that gives none, or a malformed one, fails the run: the
 * calibration would otherwise rest on fewer ranks than it says. */
static void collect_copy(Launch *L, double deadline) {
  L->rep.copy_bytes = L->o->probe_copy_bytes;
  L->rep.copy_gbs = rp_calloc((size_t)L->plan->world_size + 1, sizeof(double));
  for (int r = 0; r < L->plan->world_size && !L->have_fail; r++) {
    char key[32], *v = NULL;
    snprintf(key, sizeof key, "copy/%d", r);
    double left = deadline - rt_now();
    if (!L->store_ok ||
        rt_store_wait(&L->st, key, left > 0 ? left : 0, &v, NULL) != RT_OK)
      set_fail(L, r, rt_rank_node(L->plan, r), -1, 0,
               "rank sent no memory copy figure");
    else if (!rt_copy_record_decode(v, L->o->probe_copy_bytes,
                                    &L->rep.copy_gbs[r]))
      set_fail(L, r, rt_rank_node(L->plan, r), -1, 0,
               "rank sent a malformed memory copy figure");
    free(v);
  }
}

/* The memory figures (mem/RANK) of the local ranks that published them. */
static void collect_mem(Launch *L) {
  char key[32];
  for (int i = 0; i < L->rep.nlocal; i++) {
    RtRankStatus *s = &L->rep.local[i];
    snprintf(key, sizeof key, "mem/%d", s->rank);
    char *v = NULL;
    long long a, b, c, d;
    if (rt_store_get(&L->st, key, &v, NULL) == RT_OK &&
        sscanf(v, "%lld %lld %lld %lld", &a, &b, &c, &d) == 4) {
      s->have_mem = true;
      s->planned_weights = a;
      s->planned_kv = b;
      s->alloc_weights = c;
      s->alloc_kv = d;
    }
    free(v);
  }
}

/* One rank's KV transfer figures added to the job's. */
static void kv_add(RtKvReport *k, const RtKvStats *ks) {
  if (ks->grouped) k->grouped = true;
  if (ks->cpu_run_secs >= 0 && ks->cpu_wait_secs >= 0 && k->cpu_run_secs >= 0) {
    k->cpu_run_secs += ks->cpu_run_secs;
    k->cpu_wait_secs += ks->cpu_wait_secs;
  } else {
    k->cpu_run_secs = k->cpu_wait_secs = -1; /* not known for every rank */
  }
  k->bytes += ks->bytes_recv;
  k->bytes_same_node += ks->bytes_same_node;
  k->bytes_cross_node += ks->bytes_cross_node;
  k->secs_same_node += ks->secs_same_node;
  k->secs_cross_node += ks->secs_cross_node;
  k->cells_verified += ks->cells_verified;
  for (int i = 0; i < ks->nreq; i++) {
    k->req_bytes[i] += ks->req_bytes[i];
    if (ks->req_secs[i] > k->req_secs[i]) k->req_secs[i] = ks->req_secs[i];
    /* Per link class, like the totals: sent bytes over the senders'
     * summed send time. */
    for (int c = 0; c < 2; c++) {
      k->req_link_bytes[c][i] += ks->req_link_bytes[c][i];
      k->req_link_secs[c][i] += ks->req_link_secs[c][i];
    }
  }
}

/* Collects memory figures of the local ranks and KV figures of every rank
 * from the store. */
static void collect_kv(Launch *L, double deadline) {
  RtKvReport *k = &L->rep.kv;
  k->have = true;
  k->requests = L->o->requests;
  k->input_tokens = L->o->input_tokens;
  k->mem_scale = L->o->be->host_memory ? L->o->mem_scale : 1.0;
  k->req_bytes = rp_calloc((size_t)k->requests + 1, sizeof *k->req_bytes);
  k->req_secs = rp_calloc((size_t)k->requests + 1, sizeof *k->req_secs);
  for (int c = 0; c < 2; c++) {
    k->req_link_bytes[c] = rp_calloc((size_t)k->requests + 1, sizeof(int64_t));
    k->req_link_secs[c] = rp_calloc((size_t)k->requests + 1, sizeof(double));
  }
  k->reference = L->o->be->copy_ref_kind;
  /* The memcpy reference: every sender's memcpy of the messages it sent,
   * summed like the send times (bytes over summed seconds). */
  double memcpy_secs = 0;
  char key[32], *v;
  collect_mem(L);
  for (int r = 0; r < L->plan->world_size; r++) {
    snprintf(key, sizeof key, "kv/%d", r);
    v = NULL;
    double left = deadline - rt_now();
    if (rt_store_wait(&L->st, key, left > 0 ? left : 0, &v, NULL) != RT_OK) {
      set_fail(L, r, rt_rank_node(L->plan, r), -1, 0,
               "rank sent no KV transfer figures");
      free(v);
      return;
    }
    /* The store is reachable by anyone who can reach its address: a record
     * that does not parse, or holds counts no run can give, is refused
     * rather than summed (signed sums could overflow). */
    RtKvStats ks;
    if (!rt_kv_stats_decode(v, k->requests, &ks)) {
      set_fail(L, r, rt_rank_node(L->plan, r), -1, 0,
               "rank sent malformed KV transfer figures");
      free(v);
      return;
    }
    kv_add(k, &ks);
    memcpy_secs += ks.memcpy_secs;
    rt_kv_stats_free(&ks);
    free(v);
  }
  k->memcpy_gbs = memcpy_secs > 0 ? (double)(k->bytes_same_node +
                                             k->bytes_cross_node) /
                                         memcpy_secs / 1e9
                                   : 0;
}

/* The command's processes of a dry run: who, and torchrun's names (ports
 * and MASTER_* are chosen when they start). */
static void dry_run_cmd(const Launch *L, StrBuf *sb) {
  if (!L->o->cmd) return;
  RtProcSpec *ps;
  int n = rt_procs_of_node(L->plan, L->o->node, (RtPer)L->o->per, &ps);
  for (int i = 0; i < n; i++) {
    sb_printf(sb, "would run process %s: RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d "
              "LOCAL_WORLD_SIZE=%d GROUP_RANK=%d CUDA_VISIBLE_DEVICES=%s:",
              ps[i].label, ps[i].rank, ps[i].world_size, ps[i].local_rank,
              ps[i].local_world_size, ps[i].group_rank, ps[i].devices);
    for (int a = 0; L->o->cmd[a]; a++) {
      char *e = rt_escape_dup(L->o->cmd[a]);
      sb_printf(sb, " %s", e);
      free(e);
    }
    sb_putc(sb, '\n');
  }
  rt_procs_free(ps, n);
}

/* Built whole, then printed: an internal error half-way prints nothing. */
static void print_dry_run(const Launch *L) {
  StrBuf sb;
  sb_init(&sb);
  sb_printf(&sb, "rankrun: dry run of node %d of %d (world size %d, backend %s, "
                 "rendezvous %s:%d)\n", L->o->node, (int)L->plan->nnodes,
         (int)L->plan->world_size, L->o->backend, L->o->rdzv_host, L->o->rdzv_port);
  if (L->o->node == 0)
    sb_printf(&sb, "would start the rendezvous store on %s:%d\n", L->o->rdzv_host,
           L->o->rdzv_port);
  for (int i = 0; i < L->rep.nlocal; i++) {
    const PlanRank *rk = plan_find_rank(L->plan, L->rep.local[i].rank);
    sb_printf(&sb, "would start rank %d: RANK=%d LOCAL_RANK=%d WORLD_SIZE=%d",
           rk->rank, rk->rank, rk->local_rank, (int)L->plan->world_size);
    if (L->o->be->visible_devices_env)
      sb_printf(&sb, " %s=%d", L->o->be->visible_devices_env, rk->device);
    char *pool = rt_escape_dup(L->plan->pools[rk->pool].name);
    sb_printf(&sb, " device=%d pool=%s groups=", rk->device, pool);
    free(pool);
    int k = 0;
    for (int g = 0; g < L->plan->ngroups; g++) {
      if (rt_group_index(&L->plan->groups[g], rk->rank) < 0) continue;
      sb_printf(&sb, "%s%s:%d", k++ ? "," : "",
                plan_kind_name(L->plan->groups[g].kind), L->plan->groups[g].id);
    }
    sb_printf(&sb, "\n");
  }
  dry_run_cmd(L, &sb);
  fputs(sb.buf ? sb.buf : "", stdout);
  sb_free(&sb);
}

static void user_free(Launch *L);

static int finish(Launch *L, RtStoreServer *srv, double t0) {
  L->rep.exit_code = L->have_fail ? RP_EXIT_RUNTIME : RP_EXIT_OK;
  /* Tell node 0 this launcher is done, so it can stop the store; node 0
   * waits for every launcher (bounded) before stopping it. */
  if (L->store_ok) {
    int64_t done = 0;
    if (rt_store_add(&L->st, "nodes/done", 1, &done) != RT_OK)
      L->store_ok = false;
    if (srv) {
      double deadline = rt_now() + (L->have_fail ? L->o->grace + 2.0 : L->o->timeout);
      while (L->store_ok && done < L->joined && rt_now() < deadline) {
        sleep_s(RT_STORE_POLL_S);
        if (rt_store_add(&L->st, "nodes/done", 0, &done) != RT_OK) break;
      }
    }
  }
  rt_store_close(&L->st);
  if (srv) rt_store_server_stop(srv);
  /* Shared-memory rings of ranks that died before unlinking them: every
   * ring named after this launcher. */
  RtShmOwner me;
  if (rt_shm_owner_of((long)getpid(), &me)) rt_shm_remove_rings(&me, NULL);
  L->rep.elapsed_s = rt_now() - t0;
  L->rep.job = L->job;
  L->rep.user_job = L->user ? L->ujob : NULL;
  char *text = rt_report_text(&L->rep);
  fputs(text, stdout);
  fflush(stdout);
  free(text);
  if (L->o->report_path) {
    if (rt_report_write(&L->rep, L->o->report_path) != RT_OK) {
      fprintf(stderr, "rankrun: %s\n", rt_errmsg());
      if (L->rep.exit_code == 0) L->rep.exit_code = RP_EXIT_RUNTIME;
    }
  }
  int code = L->rep.exit_code;
  free(L->rep.local);
  free(L->rep.groups);
  free(L->rep.fail_reason);
  free(L->rep.calib.path);
  free(L->rep.copy_gbs);
  for (int i = 0; i < L->rep.calib.n; i++) free(L->rep.calib.c[i].from);
  free(L->rep.kv.req_bytes);
  free(L->rep.kv.req_secs);
  for (int c = 0; c < 2; c++) {
    free(L->rep.kv.req_link_bytes[c]);
    free(L->rep.kv.req_link_secs[c]);
  }
  free(L->job);
  free(L->ujob);
  user_free(L);
  return code;
}

/* On the host backend: this node's ledger (with --requests) and its
 * shared-memory rings against /dev/shm's free space and MemAvailable. */
static RtResult node_fits(const Launch *L) {
  const RtLaunchOpts *o = L->o;
  if (!o->be->host_memory) return RT_OK;
  RtNodeFit f = {o->node, 0, o->mem_scale, 0, 0, rt_fs_free("/dev/shm"),
                 rt_host_mem_available()};
  if (o->requests > 0)
    f.ledger = rt_node_planned_bytes(L->plan, o->node, o->mem_scale);
  if (o->be->shm_segments)
    f.rings = o->be->shm_segments(L->plan, o->node, &f.ring_bytes);
  return rt_node_fit_check(&f);
}

/* Rings left in /dev/shm by launchers that were killed (SIGKILL gives
 * them no chance to clean up): removed before this one starts ranks. */
static void remove_stale_rings(const RtLaunchOpts *o) {
  int64_t bytes = 0;
  int n = rt_shm_remove_rings(NULL, &bytes);
  if (n > 0 && !o->quiet) {
    char b[32];
    fprintf(stderr, "rankrun: removed %d stale shared-memory ring(s) of "
            "launchers that are gone (%s)\n", n, rp_fmt_bytes(bytes, b, sizeof b));
  }
}

static int by_local_rank(const void *a, const void *b) {
  const RtRankStatus *x = a, *y = b;
  return (x->local_rank > y->local_rank) - (x->local_rank < y->local_rank);
}

/* The report's groups (id, kind, size, whether they span nodes) and this
 * node's ranks, by local rank. */
static void launch_init(Launch *L, const RtLaunchOpts *o, const Plan *plan) {
  memset(L, 0, sizeof *L);
  L->fail_proc = -1;
  L->o = o;
  L->plan = plan;
  L->st.fd = -1;
  L->rep.plan_path = o->plan_path;
  L->rep.backend = o->backend;
  L->rep.node = o->node;
  L->rep.nnodes = (int)plan->nnodes;
  L->rep.world_size = (int)plan->world_size;
  L->rep.fail_rank = -1;
  L->rep.ngroups = (int)plan->ngroups;
  L->rep.groups = rp_calloc((size_t)plan->ngroups + 1, sizeof *L->rep.groups);
  for (int i = 0; i < plan->ngroups; i++) {
    const PlanGroup *G = &plan->groups[i];
    L->rep.groups[i].id = G->id;
    L->rep.groups[i].kind = G->kind;
    L->rep.groups[i].nranks = G->n;
    for (int k = 1; k < G->n; k++)
      if (rt_rank_node(plan, G->ranks[k]) != rt_rank_node(plan, G->ranks[0]))
        L->rep.groups[i].cross_node = true;
  }
}

static void local_ranks(Launch *L) {
  const Plan *plan = L->plan;
  L->rep.local = rp_calloc((size_t)plan->world_size, sizeof *L->rep.local);
  for (int64_t i = 0; i < plan->nranks; i++) {
    const PlanRank *R = &plan->ranks[i];
    if (rt_rank_node(plan, R->rank) == L->o->node)
      L->rep.local[L->rep.nlocal++] = (RtRankStatus){
          .rank = R->rank, .local_rank = R->local_rank, .device = R->device,
          .exit_code = -1, .ready = -1};
  }
  qsort(L->rep.local, (size_t)L->rep.nlocal, sizeof *L->rep.local, by_local_rank);
  L->cur = L->rep.local;
  L->ncur = L->rep.nlocal;
}

/* Records a failure of this node before any rank started, with its
 * reason printed, and publishes it. */
static void fail_early(Launch *L, int node, const char *why) {
  fprintf(stderr, "rankrun: %s\n", why);
  set_fail(L, -1, node, -1, 0, why);
}

/* Connects to the store (node 0 starts it first, binding the port in
 * *oo) and claims `node/N`. False when the launch cannot go on. */
static bool join_store(Launch *L, RtLaunchOpts *oo, RtStoreServer **srv) {
  const RtLaunchOpts *o = L->o;
  if (o->node == 0) {
    if (rt_store_server_start(o->rdzv_host, o->rdzv_port, o->timeout, srv) != RT_OK) {
      fprintf(stderr, "rankrun: cannot start the rendezvous store: %s\n", rt_errmsg());
      set_fail(L, -1, o->node, -1, 0, rt_errmsg());
      return false;
    }
    oo->rdzv_port = rt_store_server_port(*srv);
  }
  L->o = oo;
  if (rt_store_connect(&L->st, oo->rdzv_host, oo->rdzv_port, o->timeout,
                       o->timeout) != RT_OK) {
    fprintf(stderr, "rankrun: node %d: %s\n", o->node, rt_errmsg());
    set_fail(L, -1, 0, -1, 0, rt_errmsg());
    return false;
  }
  L->store_ok = true;
  char key[64], val[64];
  snprintf(key, sizeof key, "node/%d", o->node);
  snprintf(val, sizeof val, "%d", (int)getpid());
  RtResult r = rt_store_create(&L->st, key, val, strlen(val));
  if (r == RT_OK) return true;
  char *why = r == RT_ERR_EXISTS
                  ? rp_sprintf("duplicate node %d: another launcher already "
                               "joined as node %d", o->node, o->node)
                  : rp_strdup(rt_errmsg());
  fail_early(L, o->node, why);
  free(why);
  /* A duplicate must not stop the deployment it tried to join. */
  L->store_ok = false;
  return false;
}

/* The user phase's deployment id, another than the preflight's: its
 * processes make shared-memory rings of their own. */
static unsigned long long mix_job(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 33) ^ 0x5bd1e995ull;
}

/* Every launcher must run the same plan with the same options as node 0:
 * ranks of different nodes that disagree on sizes would exchange
 * garbage. The settings that change the KV schedule (RANKRUN_KV_GROUPED,
 * RANKRUN_KV_CHUNK) count as options: ranks that cut a bucket
 * differently could wait for each other until the deadline. Node 0 also
 * draws the deployment id. False when the launch cannot go on. */
static bool agree_config(Launch *L) {
  const RtLaunchOpts *o = L->o;
  const char *kg = getenv("RANKRUN_KV_GROUPED"), *kc = getenv("RANKRUN_KV_CHUNK");
  char *cfg = rp_sprintf("plan %s world %d backend %s preflight %lld soak %g "
                         "requests %d tokens %lld scale %.17g kv-grouped %s "
                         "kv-chunk %s exec %s per %s preflight %d",
                         L->plan->spec_sha256, (int)L->plan->world_size, o->backend,
                         (long long)o->preflight_bytes, o->soak, o->requests,
                         (long long)o->input_tokens, o->mem_scale,
                         kg ? kg : "-", kc ? kc : "-", o->cmd ? "yes" : "no",
                         rt_per_name((RtPer)o->per), o->no_preflight ? 0 : 1);
  char *theirs = NULL;
  RtResult r;
  if (o->node == 0) {
    /* A deployment id that no other run on this machine shares. */
    unsigned long long rnd = 0;
    FILE *u = fopen("/dev/urandom", "rb");
    if (!u || fread(&rnd, sizeof rnd, 1, u) != 1)
      rnd = (unsigned long long)getpid() ^ (unsigned long long)(rt_now() * 1e9);
    if (u) fclose(u);
    L->job = rp_sprintf("%016llx", rnd);
    L->ujob = rp_sprintf("%016llx", mix_job(rnd));
    r = rt_store_set(&L->st, "job", L->job, strlen(L->job));
    if (r == RT_OK) r = rt_store_set(&L->st, "u/job", L->ujob, strlen(L->ujob));
    if (r == RT_OK) r = rt_store_set(&L->st, "config", cfg, strlen(cfg));
  } else {
    r = rt_store_wait(&L->st, "config", o->timeout, &theirs, NULL);
    if (r == RT_OK) r = rt_store_get(&L->st, "job", &L->job, NULL);
    if (r == RT_OK) r = rt_store_get(&L->st, "u/job", &L->ujob, NULL);
  }
  if (r == RT_OK && theirs && strcmp(theirs, cfg) != 0) {
    char *why = rp_sprintf("node %d's plan or options differ from node 0's: "
                           "expected `%s`, got `%s`", o->node, theirs, cfg);
    set_fail(L, -1, o->node, -1, 0, why);
    fprintf(stderr, "rankrun: %s\n", L->rep.fail_reason);
    free(why);
    publish_fail(L);
  } else if (r != RT_OK) {
    set_fail(L, -1, 0, -1, 0, rt_errmsg());
  }
  free(cfg);
  free(theirs);
  return !L->have_fail;
}

/* Every launcher joins before any rank starts. False (the failure
 * published) when a node never joins or a signal comes first. */
static bool wait_nodes(Launch *L, double join_deadline) {
  const RtLaunchOpts *o = L->o;
  for (int n = 0; n < (int)L->plan->nnodes; n++) {
    char key[64], *v = NULL;
    snprintf(key, sizeof key, "node/%d", n);
    /* Short waits, so that a SIGTERM during the join is seen at once. */
    RtResult r;
    do {
      double left = join_deadline - rt_now();
      r = rt_store_wait(&L->st, key, left > 0.25 ? 0.25 : (left > 0 ? left : 0),
                        &v, NULL);
    } while (r == RT_ERR_TIMEOUT && rt_now() < join_deadline && !got_signal);
    free(v);
    if (r == RT_OK) L->joined++;
    if (got_signal && r != RT_OK) {
      char *why = rp_sprintf("launcher of node %d received signal %d while "
                             "waiting for node %d to join", o->node,
                             (int)got_signal, n);
      set_fail(L, -1, o->node, -1, (int)got_signal, why);
      free(why);
      publish_fail(L);
      return false;
    }
    if (r != RT_OK) {
      char *why = rp_sprintf("node %d never joined the rendezvous within "
                             "%.1f s", n, o->timeout);
      fail_early(L, n, why);
      free(why);
      publish_fail(L);
      return false;
    }
    if (got_signal) break;
  }
  return true;
}

/* Forks and executes one worker per local rank. Everything exec needs is
 * built before fork. */
static void start_ranks(Launch *L) {
  char **argv = worker_argv(L);
  for (int i = 0; i < L->rep.nlocal && !got_signal; i++) {
    char **env = worker_env(L, plan_find_rank(L->plan, L->rep.local[i].rank));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(RT_WORKER_PEER);
      signal(SIGPIPE, SIG_DFL);
      execve("/proc/self/exe", argv, env);
      _exit(127);
    }
    free_strv(env);
    if (pid < 0) {
      set_fail(L, L->rep.local[i].rank, L->o->node, -1, 0, "fork failed");
      publish_fail(L);
      break;
    }
    L->rep.local[i].pid = pid;
    if (!L->o->quiet)
      fprintf(stderr, "rankrun: node %d: started rank %d pid %d\n", L->o->node,
              L->rep.local[i].rank, (int)pid);
  }
  free_strv(argv);
  for (int i = 0; i < L->rep.nlocal; i++)
    if (L->rep.local[i].pid == 0) L->rep.local[i].exited = true;
  if (L->have_fail || got_signal) start_stop(L);
}

static void ready_tick(Launch *L);

/* Supervises the local ranks until every one has exited (shared fate:
 * the opening comment). */
static void supervise(Launch *L) {
  const RtLaunchOpts *o = L->o;
  double next_store = 0;
  for (;;) {
    reap(L);
    double now = rt_now();
    if (got_signal && !L->stopping) {
      char *why = rp_sprintf("launcher of node %d received signal %d",
                             o->node, (int)got_signal);
      if (!L->have_fail) {
        set_fail(L, -1, o->node, -1, (int)got_signal, why);
        L->fail_is_cause = true;
        publish_fail(L);
      }
      free(why);
      start_stop(L);
    }
    if (L->have_fail && !L->stopping) start_stop(L);
    if (L->have_fail && !L->fail_published &&
        now - L->secondary_t > RT_SECONDARY_WAIT)
      publish_fail(L);
    if (now >= next_store && L->store_ok && !L->fail_is_cause) {
      next_store = now + RT_STORE_POLL_S;
      if (read_fail(L)) start_stop(L);
    }
    if (L->stopping && !L->killed && now - L->stop_t > o->grace) {
      signal_all(L, SIGKILL);
      L->killed = true;
    }
    if (all_exited(L) && (!L->have_fail || L->fail_published || !L->store_ok))
      break;
    if (L->user) {
      rt_io_pump(L->io, L->ncur, RT_POLL_S);
      ready_tick(L);
    } else {
      sleep_s(RT_POLL_S);
    }
  }
}

/* Locally fine: waits for every node to end (keys PREFIX/N), or for a
 * failure. The user phase has no deadline: other nodes' processes run as
 * long as they run. */
static void wait_end(Launch *L, const char *prefix) {
  char key[64];
  snprintf(key, sizeof key, "%s/%d", prefix, L->o->node);
  rt_store_set(&L->st, key, "ok", 2);
  double deadline = L->user ? HUGE_VAL : rt_now() + L->o->timeout;
  for (int n = 0; n < (int)L->plan->nnodes && !L->have_fail;) {
    char *v = NULL;
    snprintf(key, sizeof key, "%s/%d", prefix, n);
    RtResult r = rt_store_get(&L->st, key, &v, NULL);
    free(v);
    if (r == RT_OK) {
      n++;
      continue;
    }
    if (read_fail(L)) break;
    if (r != RT_ERR_NOTFOUND || rt_now() > deadline || got_signal) {
      set_fail(L, -1, n, -1, got_signal, got_signal ? "launcher received a signal"
                                                   : "node did not finish");
      break;
    }
    sleep_s(RT_POLL_S);
  }
}

/* After every node ended: the figures ranks posted, the calibration file
 * (node 0), and every group's preflight result. */
static void collect(Launch *L) {
  const RtLaunchOpts *o = L->o;
  if (!L->have_fail) collect_preflight(L, rt_now() + o->timeout);
  if (!L->have_fail && o->requests > 0) collect_kv(L, rt_now() + o->timeout);
  if (!L->have_fail && o->probe_copy_bytes > 0)
    collect_copy(L, rt_now() + o->timeout);
  if (!L->have_fail && o->probe_path && o->node == 0 &&
      rt_write_calibration(&L->rep, L->plan, o->probe_path) != RT_OK) {
    fprintf(stderr, "rankrun: %s\n", rt_errmsg());
    set_fail(L, -1, o->node, -1, 0, rt_errmsg());
  }
  for (int i = 0; i < L->plan->ngroups && !L->have_fail; i++)
    if (!L->rep.groups[i].have || !L->rep.groups[i].ok)
      set_fail(L, -1, o->node, -1, 0, "a group's preflight result is missing");
}

/* ---------------------------------------------------------------------------
 * The user phase: `rankrun PLAN --node N -- CMD ARGS...` (procs.h for who
 * runs and with what environment, procio.h for their output). Shared fate
 * as for the ranks: the first process to fail is published under `fail`,
 * every launcher stops its processes' groups (SIGTERM, or the signal the
 * launcher got, then SIGKILL after the grace period). */

/* Every process's MASTER_ADDR and MASTER_PORT: the launcher of each
 * instance's leader node (per node: node 0) publishes its address and a
 * free port under the instance's key, created once; every launcher of the
 * instance reads the same value. */
static RtResult user_master(Launch *L, RtProcSpec *p, const char *addr) {
  char *key = rt_proc_master_key(p), *v = NULL, host[64];
  RtResult r = RT_OK;
  if (p->leader_node == L->o->node) {
    int port = 0, fd = -1;
    r = rt_listen(addr, &port, 1, &fd);
    if (fd >= 0) close(fd);
    char *val = rp_sprintf("%s %d", addr, port);
    if (r == RT_OK) r = rt_store_create(&L->st, key, val, strlen(val));
    if (r == RT_ERR_EXISTS) r = RT_OK;
    free(val);
  }
  if (r == RT_OK) r = rt_store_wait(&L->st, key, L->o->timeout, &v, NULL);
  if (r == RT_OK && sscanf(v, "%63s %d", host, &p->master_port) == 2)
    p->master_addr = rp_strdup(host);
  else if (r == RT_OK)
    r = rt_err(RT_ERR_PROTO, "malformed `%s` in the store", key);
  free(key);
  free(v);
  return r;
}

/* {port} of every process: ports bound at once and released together, so
 * that no two processes get the same one. */
static RtResult user_ports(Launch *L, const char *addr) {
  int *fds = rp_calloc((size_t)L->ncur + 1, sizeof *fds);
  RtResult r = RT_OK;
  int n = 0;
  for (; n < L->ncur && r == RT_OK; n++) {
    fds[n] = -1;
    r = rt_listen(addr, &L->specs[n].port, 1, &fds[n]);
  }
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  free(fds);
  return r;
}

/* The command of process p with its templates expanded (checked by
 * main.c before anything started). */
static char **user_argv(const Launch *L, const RtProcSpec *p) {
  size_t n = 0;
  while (L->o->cmd[n]) n++;
  char **a = rp_calloc(n + 1, sizeof *a), *bad = NULL;
  for (size_t i = 0; i < n; i++) {
    a[i] = rt_template_expand(L->o->cmd[i], L->plan, p, L->o->node, &bad);
    if (!a[i]) rp_internal("a template passed main.c's check and failed here");
  }
  return a;
}

static void user_status(Launch *L, int i) {
  const RtProcSpec *p = &L->specs[i];
  const PlanRank *R = plan_find_rank(L->plan, p->ranks[0]);
  L->cur[i] = (RtRankStatus){.rank = R->rank, .local_rank = R->local_rank,
                             .device = R->device, .exit_code = -1,
                             .label = p->label,
                             .ready = L->o->ready_port || L->o->ready_cmd ? 0 : -1};
}

/* Starts process i: its own process group, stdout and stderr into the
 * launcher's pipes, dies with the launcher. */
static bool user_start(Launch *L, int i, const RtProcEnvCtx *ec) {
  RtProcSpec *p = &L->specs[i];
  int child[2] = {-1, -1};
  if (rt_io_open(&L->io[i], p->label, L->o->log_dir, child) != RT_OK) {
    set_fail(L, L->cur[i].rank, L->o->node, -1, 0, rt_errmsg());
    return false;
  }
  char **argv = user_argv(L, p);
  L->envs[i] = rt_proc_env(ec, p, environ);
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(child[0], STDOUT_FILENO);
    dup2(child[1], STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    execvpe(argv[0], argv, L->envs[i]);
    _exit(127);
  }
  close(child[0]);
  close(child[1]);
  rt_strv_free(argv);
  if (pid < 0) {
    set_fail(L, L->cur[i].rank, L->o->node, -1, 0, "fork failed");
    return false;
  }
  setpgid(pid, pid);
  L->cur[i].pid = pid;
  L->started[i] = rt_now();
  if (!L->o->quiet)
    fprintf(stderr, "rankrun: node %d: started process %s pid %d\n", L->o->node,
            p->label, (int)pid);
  return true;
}

/* A process killed by a signal is a cause, published at once; one that
 * exited non-zero may have lost a peer (a worker's connection closed),
 * so, as a rank's consequence, it waits RT_SECONDARY_WAIT for a cause. */
static void user_failed(Launch *L, int i, bool cause) {
  RtRankStatus *s = &L->cur[i];
  char *why = s->signal ? rp_sprintf("process %s was killed by signal %d",
                                     s->label, s->signal)
                        : rp_sprintf("process %s exited with code %d",
                                     s->label, s->exit_code);
  set_fail(L, s->rank, L->o->node, s->signal ? -1 : s->exit_code, s->signal, why);
  free(why);
  L->fail_proc = i;
  L->fail_is_cause = cause;
  if (cause) publish_fail(L);
  else L->secondary_t = rt_now();
}

static void mark_ready(Launch *L, int i) {
  RtRankStatus *s = &L->cur[i];
  s->ready = 1;
  s->ready_s = rt_now() - L->started[i];
  if (!L->o->quiet)
    fprintf(stderr, "rankrun: node %d: process %s ready after %.2f s\n",
            L->o->node, s->label, s->ready_s);
}

static void ready_reaped(Launch *L, pid_t pid, int status) {
  for (int i = 0; L->user && L->ready_pid && i < L->ncur; i++)
    if (L->ready_pid[i] == pid) {
      L->ready_pid[i] = 0;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && L->cur[i].ready == 0)
        mark_ready(L, i);
    }
}

/* Whether something accepts connections on this node's port. */
static bool port_open(const char *addr, const char *port_s) {
  char *end = NULL;
  long port = strtol(port_s, &end, 10);
  if (!end || *end || port < 1 || port > 65535) return false;
  int fd = -1;
  bool ok = rt_connect(addr, (int)port, rt_now(), &fd) == RT_OK;
  if (fd >= 0) close(fd);
  return ok;
}

/* --ready-cmd: `sh -c CMD` with the process's environment. */
static void ready_spawn(Launch *L, int i) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
    }
    signal(SIGPIPE, SIG_DFL);
    char sh[] = "sh", c[] = "-c";
    execve("/bin/sh", (char *[]){sh, c, L->ready_arg[i], NULL}, L->envs[i]);
    _exit(127);
  }
  L->ready_pid[i] = pid > 0 ? pid : 0;
}

/* One readiness round (every RT_STORE_POLL_S): a process not ready by its
 * deadline is the deployment's failure. */
static void ready_tick(Launch *L) {
  const RtLaunchOpts *o = L->o;
  double now = rt_now();
  if ((!o->ready_port && !o->ready_cmd) || L->stopping || L->all_ready ||
      now < L->next_ready)
    return;
  L->next_ready = now + RT_STORE_POLL_S;
  bool all = true;
  for (int i = 0; i < L->ncur; i++) {
    RtRankStatus *s = &L->cur[i];
    if (s->ready == 1 || s->exited) {
      all = all && s->ready == 1;
      continue;
    }
    all = false;
    if (now - L->started[i] > o->ready_timeout) {
      char *why = rp_sprintf("process %s was not ready within %g s (%s `%s`)",
                             s->label, o->ready_timeout,
                             o->ready_port ? "--ready-port" : "--ready-cmd",
                             L->ready_arg[i]);
      set_fail(L, s->rank, o->node, -1, 0, why);
      free(why);
      L->fail_is_cause = true;
      publish_fail(L);
      start_stop(L);
      return;
    }
    if (o->ready_port && port_open(L->addr, L->ready_arg[i])) mark_ready(L, i);
    else if (o->ready_cmd && !L->ready_pid[i]) ready_spawn(L, i);
  }
  if (all) {
    L->all_ready = true;
    if (!o->quiet)
      fprintf(stderr, "rankrun: node %d: all %d process(es) ready\n", o->node,
              L->ncur);
  }
}

/* The arrays of the user phase, and its readiness arguments. */
static void user_init(Launch *L) {
  const RtLaunchOpts *o = L->o;
  L->user = true;
  L->ncur = rt_procs_of_node(L->plan, o->node, (RtPer)o->per, &L->specs);
  L->cur = L->rep.procs = rp_calloc((size_t)L->ncur + 1, sizeof *L->cur);
  L->rep.nprocs = L->ncur;
  L->rep.per = rt_per_name((RtPer)o->per);
  size_t n = (size_t)L->ncur + 1;
  L->io = rp_calloc(n, sizeof *L->io);
  L->ready_pid = rp_calloc(n, sizeof *L->ready_pid);
  L->started = rp_calloc(n, sizeof *L->started);
  L->ready_arg = rp_calloc(n, sizeof *L->ready_arg);
  L->envs = rp_calloc(n, sizeof *L->envs);
  for (int i = 0; i < L->ncur; i++) {
    user_status(L, i);
    L->io[i].fd[0] = L->io[i].fd[1] = L->io[i].log_fd = -1;
  }
}

/* After the processes ended: whatever is left in their groups, running
 * readiness commands, the rest of their output, and their tails. */
static void user_end(Launch *L) {
  for (int i = 0; i < L->ncur; i++) {
    if (L->cur[i].pid > 0) kill(-L->cur[i].pid, SIGKILL);
    if (L->ready_pid[i] > 0) {
      kill(L->ready_pid[i], SIGKILL);
      waitpid(L->ready_pid[i], NULL, 0);
      L->ready_pid[i] = 0;
    }
  }
  rt_io_drain(L->io, L->ncur, rt_now() + 1.0);
  for (int i = 0; i < L->ncur; i++) L->cur[i].tail = rt_io_tail(&L->io[i]);
  /* Only when the deployment's first failure is still that process (a
   * cause from another node may have won over a local exit code). */
  if (L->fail_proc >= 0 && L->rep.fail_node == L->o->node &&
      L->rep.fail_rank == L->cur[L->fail_proc].rank)
    L->rep.fail_tail = L->cur[L->fail_proc].tail;
}

static void user_phase(Launch *L) {
  const RtLaunchOpts *o = L->o;
  user_init(L);
  RtResult r = rt_local_addr(L->st.fd, L->addr, sizeof L->addr);
  for (int i = 0; i < L->ncur && r == RT_OK; i++)
    r = user_master(L, &L->specs[i], L->addr);
  if (r == RT_OK) r = user_ports(L, L->addr);
  char *bad = NULL;
  for (int i = 0; i < L->ncur && r == RT_OK; i++)
    if (o->ready_port || o->ready_cmd)
      L->ready_arg[i] = rt_template_expand(o->ready_port ? o->ready_port : o->ready_cmd,
                                           L->plan, &L->specs[i], o->node, &bad);
  if (r != RT_OK) {
    fail_early(L, o->node, rt_errmsg());
    publish_fail(L);
    return;
  }
  char *plan_abs = realpath(o->plan_path, NULL);
  char *store = rp_sprintf("%s:%d", o->rdzv_host, o->rdzv_port);
  RtProcEnvCtx ec = {L->plan, plan_abs ? plan_abs : o->plan_path, o->node,
                     (RtPer)o->per, store, o->backend, L->ujob, o->timeout,
                     (long)getpid(), o->env, o->nenv};
  for (int i = 0; i < L->ncur && !got_signal && !L->have_fail; i++)
    if (!user_start(L, i, &ec)) publish_fail(L);
  for (int i = 0; i < L->ncur; i++)
    if (L->cur[i].pid == 0) L->cur[i].exited = true;
  if (L->have_fail || got_signal) start_stop(L);
  supervise(L);
  user_end(L);
  free(plan_abs);
  free(store);
  if (!L->have_fail && L->store_ok) wait_end(L, "u/end");
}

static void user_free(Launch *L) {
  for (int i = 0; i < L->ncur && L->user; i++) {
    rt_io_close(&L->io[i]);
    free(L->cur[i].tail);
    free(L->ready_arg[i]);
    rt_strv_free(L->envs[i]);
  }
  if (!L->user) return;
  free(L->io);
  free(L->ready_pid);
  free(L->started);
  free(L->ready_arg);
  free(L->envs);
  free(L->rep.procs);
  rt_procs_free(L->specs, L->ncur);
}

static void on_signals(void) {
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

int rt_launch(const RtLaunchOpts *o, const Plan *plan) {
  double t0 = rt_now();
  Launch L;
  launch_init(&L, o, plan);
  if (o->node < 0 || o->node >= (int)plan->nnodes) {
    fprintf(stderr, "rankrun: node %d is not in the plan: expected 0 to %d\n",
            o->node, (int)plan->nnodes - 1);
    free(L.rep.groups);
    return RP_EXIT_USAGE;
  }
  local_ranks(&L);
  if (o->no_preflight) L.rep.nlocal = L.ncur = 0; /* no rank starts */
  if (o->dry_run) {
    print_dry_run(&L);
    free(L.rep.local);
    free(L.rep.groups);
    return RP_EXIT_OK;
  }
  remove_stale_rings(o);
  on_signals();
  RtStoreServer *srv = NULL;
  RtLaunchOpts oo = *o; /* the bound port, when 0 was asked for */
  if (!join_store(&L, &oo, &srv) || !agree_config(&L) ||
      !wait_nodes(&L, t0 + o->timeout))
    return finish(&L, srv, t0);
  /* A plan that does not fit this machine fails before any rank starts. */
  if (node_fits(&L) != RT_OK) {
    char *why = rp_strdup(rt_errmsg());
    fail_early(&L, o->node, why);
    free(why);
    publish_fail(&L);
    return finish(&L, srv, t0);
  }
  if (!o->no_preflight) {
    start_ranks(&L);
    supervise(&L);
    if (!L.have_fail && L.store_ok) {
      wait_end(&L, "end");
      collect(&L);
    }
  }
  if (o->cmd && !L.have_fail && L.store_ok) user_phase(&L);
  return finish(&L, srv, t0);
}
