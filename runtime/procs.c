/*
 * procs.c: the user processes of a node, their identity, environment and
 * argument templates (procs.h; docs/runtime.md, "Running a command").
 *
 * Input: the plan (whole, not split by node), a node and a mode. Output:
 * process specs and, per process, its environment and expanded arguments.
 * Invariants: torchrun's names are scoped to the process's instance, so
 * that a framework that initialises one world from them initialises one
 * per instance: RANK is the rank's index among its instance's ranks (in
 * global rank order), WORLD_SIZE the instance's size, LOCAL_RANK and
 * LOCAL_WORLD_SIZE count the instance's ranks on this node, GROUP_RANK is
 * this node's index among the instance's nodes. Per instance, the process
 * holds the instance's ranks on its node and counts as one of the
 * instance's per-node processes; per node, the world is the plan's nodes.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procs.h"

static const char *const per_names[] = {"rank", "instance", "node"};

const char *rt_per_name(RtPer p) { return per_names[p]; }

bool rt_per_parse(const char *s, RtPer *out) {
  for (size_t i = 0; i < RP_ARRAY_LEN(per_names); i++)
    if (strcmp(s, per_names[i]) == 0) {
      *out = (RtPer)i;
      return true;
    }
  return false;
}

static bool same_instance(const PlanRank *a, const PlanRank *b) {
  return a->pool == b->pool && a->instance == b->instance;
}

/* Ranks of r's instance (in global order): its index among them, how
 * many there are, the index and count of those on r's node, its first
 * rank's node, and this node's index among the instance's nodes. */
typedef struct {
  int index, size, local_index, local_size, leader_node, node_index, nnodes;
} InstPos;

static void inst_pos(const Plan *pl, const PlanRank *r, InstPos *o) {
  memset(o, 0, sizeof *o);
  o->leader_node = -1;
  const PlanPool *P = &pl->pools[r->pool];
  bool *seen = rp_calloc(pl->nnodes + 1, sizeof *seen);
  for (int64_t g = P->first_rank; g < P->first_rank + P->nranks; g++) {
    const PlanRank *q = plan_find_rank(pl, g);
    if (!q || !same_instance(q, r)) continue;
    if (o->leader_node < 0) o->leader_node = q->node;
    if (q->rank < r->rank) o->index++;
    if (q->node == r->node && q->local_rank < r->local_rank) o->local_index++;
    o->local_size += q->node == r->node;
    o->size++;
    if (q->node >= 0 && (size_t)q->node < pl->nnodes) seen[q->node] = true;
  }
  for (int n = 0; n < r->node; n++) o->node_index += seen[n];
  for (size_t n = 0; n < pl->nnodes; n++) o->nnodes += seen[n];
  free(seen);
}

/* The node's ranks, by local rank. */
static int node_ranks(const Plan *pl, int node, const PlanRank ***out) {
  const PlanNode *N = &pl->nodes[node];
  const PlanRank **v = rp_calloc((size_t)N->nranks + 1, sizeof *v);
  int n = 0;
  for (int i = 0; i < N->nranks; i++) {
    const PlanRank *R = plan_find_rank(pl, pl->node_ranks[N->first_rank + i]);
    if (!R) continue;
    int j = n++;
    for (; j > 0 && v[j - 1]->local_rank > R->local_rank; j--) v[j] = v[j - 1];
    v[j] = R;
  }
  *out = v;
  return n;
}

static void add_rank(RtProcSpec *p, const PlanRank *R) {
  p->ranks = rp_realloc(p->ranks, sizeof(int) * (size_t)(p->nranks + 1));
  p->ranks[p->nranks++] = R->rank;
  char *d = p->devices ? rp_sprintf("%s,%d", p->devices, R->device)
                       : rp_sprintf("%d", R->device);
  free(p->devices);
  p->devices = d;
}

static void spec_rank(const Plan *pl, int node, const PlanRank *R, RtProcSpec *p) {
  InstPos ip;
  inst_pos(pl, R, &ip);
  p->pool = R->pool;
  p->instance = R->instance;
  p->rank = ip.index;
  p->world_size = ip.size;
  p->local_rank = ip.local_index;
  p->local_world_size = ip.local_size;
  p->group_rank = ip.node_index;
  p->leader_node = ip.leader_node;
  p->label = rp_sprintf("%d/%d", node, R->rank);
}

static void spec_instance(const Plan *pl, int node, const PlanRank *R, RtProcSpec *p) {
  InstPos ip;
  inst_pos(pl, R, &ip);
  p->pool = R->pool;
  p->instance = R->instance;
  p->rank = p->group_rank = ip.node_index;
  p->world_size = ip.nnodes;
  p->local_rank = 0;
  p->local_world_size = 1;
  p->leader_node = ip.leader_node;
  char *pool = rt_escape_dup(pl->pools[R->pool].name);
  p->label = rp_sprintf("%d/%s.%d", node, pool, R->instance);
  free(pool);
}

int rt_procs_of_node(const Plan *pl, int node, RtPer per, RtProcSpec **out) {
  const PlanRank **rs;
  int nr = node_ranks(pl, node, &rs), n = 0;
  RtProcSpec *v = rp_calloc((size_t)nr + 1, sizeof *v);
  for (int i = 0; i < nr; i++) {
    const PlanRank *R = rs[i];
    RtProcSpec *p = NULL;
    if (per == RT_PER_RANK) {
      p = &v[n++];
      spec_rank(pl, node, R, p);
    } else if (per == RT_PER_NODE) {
      p = &v[0];
      if (n == 0) {
        n = 1;
        p->pool = p->instance = -1;
        p->rank = p->group_rank = node;
        p->world_size = (int)pl->nnodes;
        p->local_world_size = 1;
        p->leader_node = 0;
        p->label = rp_sprintf("%d", node);
      }
    } else {
      for (int k = 0; k < n && !p; k++)
        if (v[k].pool == R->pool && v[k].instance == R->instance) p = &v[k];
      if (!p) spec_instance(pl, node, R, p = &v[n++]);
    }
    add_rank(p, R);
  }
  free(rs);
  *out = v;
  return n;
}

void rt_procs_free(RtProcSpec *p, int n) {
  for (int i = 0; p && i < n; i++) {
    free(p[i].label);
    free(p[i].ranks);
    free(p[i].devices);
    free(p[i].master_addr);
  }
  free(p);
}

char *rt_proc_master_key(const RtProcSpec *p) {
  if (p->pool < 0) return rp_strdup("u/master/plan");
  return rp_sprintf("u/master/%d/%d", p->pool, p->instance);
}

/* ---------------------------------------------------------------------------
 * Environment. */

typedef struct {
  char **v;
  size_t n, cap;
} Env;

/* Sets NAME=VALUE, replacing an earlier NAME. */
static void env_set(Env *e, const char *name, const char *value) {
  size_t nl = strlen(name);
  char *kv = rp_sprintf("%s=%s", name, value);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp(e->v[i], name, nl) == 0 && e->v[i][nl] == '=') {
      free(e->v[i]);
      e->v[i] = kv;
      return;
    }
  if (e->n + 2 > e->cap) {
    e->cap = e->cap ? 2 * e->cap : 64;
    e->v = rp_realloc(e->v, e->cap * sizeof *e->v);
  }
  e->v[e->n++] = kv;
  e->v[e->n] = NULL;
}

static void env_int(Env *e, const char *name, long long v) {
  char num[32];
  snprintf(num, sizeof num, "%lld", v);
  env_set(e, name, num);
}

/* The names rankrun sets: a launcher's own value of one never leaks into
 * a process that should not have it (a per-node process has no
 * RANKPLAN_POOL). */
static bool ours(const char *kv) {
  static const char *const names[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=",
                                      "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
                                      "MASTER_ADDR=", "MASTER_PORT=",
                                      "CUDA_VISIBLE_DEVICES=", "RANKPLAN_"};
  for (size_t i = 0; i < RP_ARRAY_LEN(names); i++)
    if (strncmp(kv, names[i], strlen(names[i])) == 0) return true;
  return false;
}

static void env_identity(Env *e, const RtProcEnvCtx *c, const RtProcSpec *p) {
  const Plan *pl = c->plan;
  const PlanRank *R = plan_find_rank(pl, p->ranks[0]);
  if (p->pool >= 0) {
    env_set(e, "RANKPLAN_POOL", pl->pools[p->pool].name);
    env_set(e, "RANKPLAN_ROLE", pl->pools[p->pool].role);
    env_int(e, "RANKPLAN_INSTANCE", p->instance);
  }
  if (c->per == RT_PER_RANK) {
    env_int(e, "RANKPLAN_RANK", R->rank);
    env_int(e, "RANKPLAN_DEVICE", R->device);
    for (int k = 0; k < CO__COUNT; k++) {
      char name[48];
      snprintf(name, sizeof name, "RANKPLAN_%s", plan_coord_name((CoordKind)k));
      for (char *s = name; *s; s++) *s = (char)toupper((unsigned char)*s);
      env_int(e, name, R->coords[k]);
    }
  }
  StrBuf sb;
  sb_init(&sb);
  for (int i = 0; i < p->nranks; i++) sb_printf(&sb, "%s%d", i ? "," : "", p->ranks[i]);
  env_set(e, "RANKPLAN_RANKS", sb.buf);
  sb_free(&sb);
}

char **rt_proc_env(const RtProcEnvCtx *c, const RtProcSpec *p,
                   char *const *base) {
  Env e = {NULL, 0, 0};
  for (size_t i = 0; base && base[i]; i++) {
    if (ours(base[i]) || !strchr(base[i], '=')) continue;
    char *name = rp_strdup(base[i]);
    *strchr(name, '=') = 0;
    env_set(&e, name, strchr(base[i], '=') + 1);
    free(name);
  }
  env_int(&e, "RANK", p->rank);
  env_int(&e, "WORLD_SIZE", p->world_size);
  env_int(&e, "LOCAL_RANK", p->local_rank);
  env_int(&e, "LOCAL_WORLD_SIZE", p->local_world_size);
  env_int(&e, "GROUP_RANK", p->group_rank);
  env_set(&e, "MASTER_ADDR", p->master_addr ? p->master_addr : "");
  env_int(&e, "MASTER_PORT", p->master_port);
  env_set(&e, "CUDA_VISIBLE_DEVICES", p->devices ? p->devices : "");
  env_set(&e, "RANKPLAN_PLAN", c->plan_path);
  env_int(&e, "RANKPLAN_NODE", c->node);
  env_set(&e, "RANKPLAN_PER", rt_per_name(c->per));
  env_int(&e, "RANKPLAN_WORLD_SIZE", c->plan->world_size);
  env_set(&e, "RANKPLAN_LEADER_ADDR", p->master_addr ? p->master_addr : "");
  env_int(&e, "RANKPLAN_PORT", p->port);
  env_set(&e, "RANKPLAN_STORE", c->store);
  env_set(&e, "RANKPLAN_BACKEND", c->backend);
  env_set(&e, "RANKPLAN_JOB", c->job);
  env_int(&e, "RANKPLAN_LAUNCHER_PID", c->launcher_pid);
  char t[32];
  snprintf(t, sizeof t, "%g", c->timeout);
  env_set(&e, "RANKPLAN_TIMEOUT", t);
  env_identity(&e, c, p);
  for (int i = 0; i < c->nextra; i++) {
    char *name = rp_strdup(c->extra[i]);
    char *eq = strchr(name, '=');
    if (eq) {
      *eq = 0;
      env_set(&e, name, eq + 1);
    }
    free(name);
  }
  if (!e.v) e.v = rp_calloc(1, sizeof *e.v);
  return e.v;
}

void rt_strv_free(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

/* ---------------------------------------------------------------------------
 * Argument templates. */

static const char *const tmpl_names[] = {
    "rank", "world_size", "local_rank", "local_world_size", "group_rank",
    "instance_rank", "global_rank", "node", "nnodes", "port", "master_addr",
    "master_port", "devices", "pool", "role", "instance"};
enum { T_POOL = 13 }; /* from here on, names a per-node process lacks */

/* Index of name[0..n) among the template names (then the coordinates,
 * "tp" ... "dcp"), or -1. */
static int tmpl_find(const char *name, size_t n) {
  for (size_t i = 0; i < RP_ARRAY_LEN(tmpl_names); i++)
    if (strlen(tmpl_names[i]) == n && strncmp(name, tmpl_names[i], n) == 0)
      return (int)i;
  for (int k = 0; k < CO__COUNT; k++) {
    const char *c = plan_coord_name((CoordKind)k);
    if (strlen(c) == n && strncmp(name, c, n) == 0)
      return (int)RP_ARRAY_LEN(tmpl_names) + k;
  }
  return -1;
}

static void tmpl_value(StrBuf *sb, int t, const Plan *pl, const RtProcSpec *p,
                       int node) {
  const PlanRank *R = plan_find_rank(pl, p->ranks[0]);
  const long long iv[] = {p->rank, p->world_size, p->local_rank,
                          p->local_world_size, p->group_rank, p->rank,
                          R->rank, node, (long long)pl->nnodes, p->port};
  if (t < (int)RP_ARRAY_LEN(iv)) sb_printf(sb, "%lld", iv[t]);
  else if (t == 10) sb_puts(sb, p->master_addr ? p->master_addr : "");
  else if (t == 11) sb_printf(sb, "%d", p->master_port);
  else if (t == 12) sb_puts(sb, p->devices ? p->devices : "");
  else if (t == T_POOL) sb_puts(sb, pl->pools[p->pool].name);
  else if (t == T_POOL + 1) sb_puts(sb, pl->pools[p->pool].role);
  else if (t == T_POOL + 2) sb_printf(sb, "%d", p->instance);
  else sb_printf(sb, "%d", R->coords[t - (int)RP_ARRAY_LEN(tmpl_names)]);
}

char *rt_template_expand(const char *s, const Plan *pl, const RtProcSpec *p,
                         int node, char **bad) {
  StrBuf sb;
  sb_init(&sb);
  *bad = NULL;
  for (const char *c = s; *c; c++) {
    if ((c[0] == '{' && c[1] == '{') || (c[0] == '}' && c[1] == '}')) {
      sb_putc(&sb, *c++);
      continue;
    }
    if (*c != '{') {
      sb_putc(&sb, *c);
      continue;
    }
    const char *end = strchr(c + 1, '}');
    int t = end ? tmpl_find(c + 1, (size_t)(end - c - 1)) : -1;
    if (t < 0) {
      *bad = end ? rp_sprintf("unknown template `%.*s` in `%s`", (int)(end - c + 1), c, s)
                 : rp_sprintf("unclosed `{` in `%s` (write `{{` for a brace)", s);
    } else if (p && p->pool < 0 && t >= T_POOL) {
      *bad = rp_sprintf("template `%.*s` in `%s` has no value in a per-node "
                        "process (it holds several pools' ranks)",
                        (int)(end - c + 1), c, s);
    }
    if (*bad) {
      sb_free(&sb);
      return NULL;
    }
    if (p) tmpl_value(&sb, t, pl, p, node);
    c = end;
  }
  return sb_take(&sb);
}

bool rt_command_found(const char *cmd) {
  if (strchr(cmd, '/')) return access(cmd, X_OK) == 0;
  const char *path = getenv("PATH");
  char *dirs = rp_strdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  bool found = false;
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d && !found;
       d = strtok_r(NULL, ":", &save)) {
    char *f = rp_sprintf("%s/%s", *d ? d : ".", cmd);
    found = access(f, X_OK) == 0;
    free(f);
  }
  free(dirs);
  return found;
}
