/*
 * procs.h: the user processes a launcher starts for `rankrun PLAN --node N
 * -- CMD ARGS...` (docs/runtime.md, "Running a command"): which processes
 * a node runs (one per local rank, per instance on the node, or one per
 * node), each one's identity in torchrun's names scoped to its instance,
 * its environment and its argument templates. Pure: no process is started
 * here (launcher.c does that).
 */
#ifndef RANKRUN_PROCS_H
#define RANKRUN_PROCS_H

#include "rt.h"
#include "rtplan.h"

typedef enum { RT_PER_RANK, RT_PER_INSTANCE, RT_PER_NODE } RtPer;

/* "rank", "instance", "node"; rt_per_parse gives false for another. */
const char *rt_per_name(RtPer p);
bool rt_per_parse(const char *s, RtPer *out);

/* One process of a node. */
typedef struct {
  char *label;          /* the console prefix: "N/RANK", "N/POOL.INSTANCE", "N" */
  int nranks;
  int *ranks;           /* the global ranks it holds, by local rank */
  int pool, instance;   /* -1 for a per-node process */
  /* torchrun's names, scoped to the instance (per-node: to the plan) */
  int rank, world_size, local_rank, local_world_size, group_rank;
  int leader_node;      /* node of the instance's (the plan's) first process */
  char *devices;        /* CUDA_VISIBLE_DEVICES: "3", "0,1" */
  /* set by the launcher before the environment is built */
  char *master_addr;
  int master_port;
  int port;             /* {port}: a free port on this node */
} RtProcSpec;

/* The processes of `node` in mode per, in local-rank order of their first
 * rank. Returns how many (0 when the node holds no rank). */
int rt_procs_of_node(const Plan *pl, int node, RtPer per, RtProcSpec **out);
void rt_procs_free(RtProcSpec *p, int n);

/* The store key under which the leader's launcher publishes the address
 * and port of p's instance (per-node: of the plan): "u/master/POOL/INST"
 * or "u/master/plan". The caller frees it. */
char *rt_proc_master_key(const RtProcSpec *p);

/* What the environment says besides the process itself. */
typedef struct {
  const Plan *plan;
  const char *plan_path;  /* absolute */
  int node;
  RtPer per;
  const char *store;      /* HOST:PORT */
  const char *backend;
  const char *job;        /* the user phase's deployment id */
  double timeout;
  long launcher_pid;
  char **extra;           /* --env K=V, applied last */
  int nextra;
} RtProcEnvCtx;

/* The process's environment: `base` (the launcher's) without the names
 * rankrun sets, then those names, then --env's. NULL-terminated, malloc'd
 * strings (free with rt_strv_free). */
char **rt_proc_env(const RtProcEnvCtx *c, const RtProcSpec *p,
                   char *const *base);
void rt_strv_free(char **v);

/* Expands {name} templates in s for process p (names: docs/runtime.md,
 * "Argument templates"; `{{` and `}}` are literal braces). Returns the
 * malloc'd expansion, or NULL with *bad (malloc'd) naming what is wrong:
 * an unknown name or an unclosed brace. p NULL only checks the names. */
char *rt_template_expand(const char *s, const Plan *pl, const RtProcSpec *p,
                         int node, char **bad);

/* Whether CMD names an executable: a path, or a name found in PATH (as
 * execvp would find it). */
bool rt_command_found(const char *cmd);

#endif
