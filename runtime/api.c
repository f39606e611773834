/*
 * api.c: librankrun (include/rankrun.h), the worker API over the runtime's
 * own store client, backends and KV executor: a worker's communicators
 * are made by the same backend code as rankrun's ranks', and its KV moves
 * through rt_kv_move, the executor of rankrun's own KV check.
 *
 * Input: the environment rankrun gives a --per rank process (procs.h).
 * Output: handles for the worker; results as RANKRUN_* codes (the
 * RtResult values) with the message of rt_errmsg().
 * Invariants: the worker's store keys live under "u/" (rankrun's
 * command-phase keyspace, so that nothing reads the preflight's addresses)
 * and its own keys under "u/user/", out of reach of rankrun's.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "launcher.h"
#include "rankrun.h"

_Static_assert(RANKRUN_OK == (int)RT_OK && RANKRUN_ERR_CHECK == (int)RT_ERR_CHECK &&
                   RANKRUN_ERR_UNSUPPORTED == (int)RT_ERR_UNSUPPORTED &&
                   RANKRUN_ERR_NOTFOUND == (int)RT_ERR_NOTFOUND,
               "rankrun.h's codes are the RtResult values");
_Static_assert(RANKRUN_INT64 == (int)RT_I64 && RANKRUN_FLOAT32 == (int)RT_F32 &&
                   RANKRUN_SUM == (int)RT_SUM && RANKRUN_MAX == (int)RT_MAX,
               "rankrun.h's types and ops are the backend's");
_Static_assert(RANKRUN_KV_SEND == (int)RT_KV_SEND && RANKRUN_KV_RECV == (int)RT_KV_RECV,
               "rankrun.h's KV roles are kv.h's");

struct rankrun_comm {
  rankrun *rr;
  RtComm *c;
  int group; /* index in plan->groups */
};

struct rankrun {
  Plan *plan;
  const RtBackend *be;
  void *state;
  RtStore st;
  int rank;
  const PlanRank *me;
  int ng;
  rankrun_comm *comms; /* per group of this rank, plan order */
  int world;           /* index of the world group's in comms, or -1 */
  bool failed;         /* init failed: communicators are aborted */
  char host[64];
};

int rankrun_api_version(void) { return RANKRUN_API_VERSION; }
const char *rankrun_errmsg(void) { return rt_errmsg(); }

static RtResult env_need(const char *name, const char **out) {
  *out = getenv(name);
  if (!*out || !**out)
    return rt_err(RT_ERR_INVALID, "%s is not set: librankrun runs in a process "
                  "that `rankrun PLAN --node N --per rank -- CMD` started", name);
  return RT_OK;
}

static RtResult env_number(const char *name, double lo, double hi, double *out) {
  const char *s;
  RTCHECK(env_need(name, &s));
  char *end = NULL;
  double v = strtod(s, &end);
  if (!end || *end || !(v >= lo && v <= hi))
    return rt_err(RT_ERR_INVALID, "%s=`%s`: expected a number from %g to %g",
                  name, s, lo, hi);
  *out = v;
  return RT_OK;
}

/* The plan, the rank and the backend from the environment. */
static RtResult join_env(rankrun *rr, const char **job, double *timeout, long *owner) {
  const char *path, *backend;
  double rank = 0, pid = 0;
  RTCHECK(env_need("RANKPLAN_PLAN", &path));
  RTCHECK(env_need("RANKPLAN_BACKEND", &backend));
  RTCHECK(env_need("RANKPLAN_JOB", job));
  RTCHECK(env_number("RANKPLAN_RANK", 0, 1 << 30, &rank));
  RTCHECK(env_number("RANKPLAN_TIMEOUT", 0.1, 86400, timeout));
  RTCHECK(env_number("RANKPLAN_LAUNCHER_PID", 1, 1 << 30, &pid));
  *owner = (long)pid;
  RTCHECK(rt_plan_open(path, &rr->plan));
  rr->rank = (int)rank;
  rr->me = plan_find_rank(rr->plan, rr->rank);
  if (!rr->me || rank != (double)rr->rank)
    return rt_err(RT_ERR_INVALID, "RANKPLAN_RANK=%g is not a rank of `%s`", rank, path);
  rr->be = rt_backend_find(backend);
  if (!rr->be)
    return rt_err(RT_ERR_UNSUPPORTED, "RANKPLAN_BACKEND=`%s`: this library has "
                  "the backends %s", backend, rt_backend_names());
  return RT_OK;
}

/* Connects to the store and claims the rank once. */
static RtResult join_store(rankrun *rr, double timeout) {
  const char *addr;
  char *host = NULL, key[64], val[32];
  int port = 0;
  RTCHECK(env_need("RANKPLAN_STORE", &addr));
  RTCHECK(rt_parse_hostport(addr, &host, &port));
  RtResult r = rt_store_connect(&rr->st, host, port, timeout, timeout);
  free(host);
  RTCHECK(r);
  snprintf(key, sizeof key, "u/rank/%d", rr->rank);
  snprintf(val, sizeof val, "%d", rr->me->node);
  r = rt_store_create(&rr->st, key, val, strlen(val));
  if (r == RT_ERR_EXISTS)
    return rt_err(r, "duplicate rank %d: another process already joined as "
                  "rank %d", rr->rank, rr->rank);
  RTCHECK(r);
  return rt_local_addr(rr->st.fd, rr->host, sizeof rr->host);
}

/* The backend, and a communicator per group of the rank in plan order. */
static RtResult join_groups(rankrun *rr, const char *job, double timeout, long owner) {
  const Plan *pl = rr->plan;
  RtBackendCtx ctx = {pl, rr->rank, rr->me->local_rank, rr->me->device, &rr->st,
                      rr->host, timeout, job, "u/", owner};
  RTCHECK(rr->be->init(&ctx, &rr->state));
  rr->comms = rp_calloc((size_t)pl->ngroups + 1, sizeof *rr->comms);
  for (int g = 0; g < pl->ngroups; g++) {
    if (rt_group_index(&pl->groups[g], rr->rank) < 0) continue;
    rankrun_comm *c = &rr->comms[rr->ng];
    c->rr = rr;
    c->group = g;
    RTCHECK(rr->be->group_create(rr->state, g, &c->c));
    if (pl->groups[g].kind == GK_WORLD) rr->world = rr->ng;
    rr->ng++;
  }
  return RT_OK;
}

int rankrun_init(rankrun **out) {
  *out = NULL;
  struct sigaction old;
  /* A peer that died must be a closed connection, not a SIGPIPE. */
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  rankrun *rr = rp_calloc(1, sizeof *rr);
  rr->st.fd = -1;
  rr->world = -1;
  const char *job = NULL;
  double timeout = 30;
  long owner = 0;
  RtResult r = join_env(rr, &job, &timeout, &owner);
  if (r == RT_OK) r = join_store(rr, timeout);
  if (r == RT_OK) r = join_groups(rr, job, timeout, owner);
  if (r != RT_OK) {
    char *msg = rp_strdup(rt_errmsg());
    rr->failed = true;
    rankrun_finalize(rr);
    rt_err(r, "%s", msg);
    free(msg);
    return (int)r;
  }
  *out = rr;
  return RANKRUN_OK;
}

void rankrun_finalize(rankrun *rr) {
  if (!rr) return;
  /* After a failed init peers may be gone: torn down without waiting. */
  for (int i = 0; i < rr->ng; i++)
    if (rr->comms[i].c) rr->be->comm_destroy(rr->comms[i].c, rr->failed);
  if (rr->state) rr->be->finalize(rr->state);
  rt_store_close(&rr->st);
  free(rr->comms);
  if (rr->plan) plan_free(rr->plan);
  free(rr);
}

/* ---- identity and groups ---- */

int rankrun_rank(const rankrun *rr) { return rr->rank; }
int rankrun_world_size(const rankrun *rr) { return (int)rr->plan->world_size; }
int rankrun_node(const rankrun *rr) { return rr->me->node; }
int rankrun_device(const rankrun *rr) { return rr->me->device; }
const char *rankrun_pool(const rankrun *rr) { return rr->plan->pools[rr->me->pool].name; }
const char *rankrun_role(const rankrun *rr) { return rr->plan->pools[rr->me->pool].role; }
int rankrun_instance(const rankrun *rr) { return rr->me->instance; }
const char *rankrun_backend(const rankrun *rr) { return rr->be->name; }

int rankrun_coord(const rankrun *rr, const char *name) {
  for (int k = 0; name && k < CO__COUNT; k++)
    if (strcmp(name, plan_coord_name((CoordKind)k)) == 0) return rr->me->coords[k];
  return -1;
}

static const PlanGroup *group_at(const rankrun *rr, int i) {
  return i >= 0 && i < rr->ng ? &rr->plan->groups[rr->comms[i].group] : NULL;
}

int rankrun_ngroups(const rankrun *rr) { return rr->ng; }

const char *rankrun_group_kind(const rankrun *rr, int i) {
  const PlanGroup *g = group_at(rr, i);
  return g ? plan_kind_name(g->kind) : NULL;
}

int rankrun_group_id(const rankrun *rr, int i) {
  const PlanGroup *g = group_at(rr, i);
  return g ? g->id : -1;
}

int rankrun_group_size(const rankrun *rr, int i) {
  const PlanGroup *g = group_at(rr, i);
  return g ? g->n : -1;
}

int rankrun_group_member(const rankrun *rr, int i, int m) {
  const PlanGroup *g = group_at(rr, i);
  return g && m >= 0 && m < g->n ? g->ranks[m] : -1;
}

rankrun_comm *rankrun_comm_at(rankrun *rr, int i) {
  return i >= 0 && i < rr->ng ? &rr->comms[i] : NULL;
}

rankrun_comm *rankrun_comm_of_kind(rankrun *rr, const char *kind) {
  GroupKind k;
  if (!kind || !plan_kind_parse(kind, &k)) return NULL;
  for (int i = 0; i < rr->ng; i++)
    if (rr->plan->groups[rr->comms[i].group].kind == k) return &rr->comms[i];
  return NULL;
}

int rankrun_comm_size(const rankrun_comm *c) { return c->rr->be->comm_size(c->c); }
int rankrun_comm_index(const rankrun_comm *c) { return c->rr->be->comm_index(c->c); }

void *rankrun_comm_native(rankrun_comm *c) {
  return c->rr->be->comm_native ? c->rr->be->comm_native(c->c) : NULL;
}

/* ---- communication and memory ---- */

int rankrun_all_reduce(rankrun_comm *c, const void *send, void *recv,
                       size_t count, int dtype, int op) {
  if ((dtype != RANKRUN_INT64 && dtype != RANKRUN_FLOAT32) ||
      (op != RANKRUN_SUM && op != RANKRUN_MAX))
    return (int)rt_err(RT_ERR_INVALID, "all_reduce: unknown type %d or op %d", dtype, op);
  return (int)c->rr->be->all_reduce(c->c, send, recv, count, (RtDtype)dtype, (RtRedOp)op);
}

int rankrun_all_gather(rankrun_comm *c, const void *send, void *recv, size_t bytes) {
  return (int)c->rr->be->all_gather(c->c, send, recv, bytes);
}

int rankrun_barrier(rankrun_comm *c) { return (int)c->rr->be->barrier(c->c); }

static RtResult peer_ok(const rankrun_comm *c, int peer) {
  int n = c->rr->be->comm_size(c->c);
  if (peer < 0 || peer >= n || peer == c->rr->be->comm_index(c->c))
    return rt_err(RT_ERR_INVALID, "peer %d: expected another member, 0 to %d", peer, n - 1);
  return RT_OK;
}

int rankrun_send(rankrun_comm *c, const void *buf, size_t bytes, int peer) {
  RtResult r = peer_ok(c, peer);
  return (int)(r != RT_OK ? r : c->rr->be->send(c->c, buf, bytes, peer));
}

int rankrun_recv(rankrun_comm *c, void *buf, size_t bytes, int peer) {
  RtResult r = peer_ok(c, peer);
  return (int)(r != RT_OK ? r : c->rr->be->recv(c->c, buf, bytes, peer));
}

void *rankrun_mem_alloc(rankrun *rr, size_t bytes) {
  return rr->be->mem_alloc(rr->state, bytes ? bytes : 1);
}

void rankrun_mem_free(rankrun *rr, void *p) {
  if (p) rr->be->mem_free(rr->state, p);
}

int rankrun_to_host(rankrun *rr, void *host, const void *mem, size_t bytes) {
  return (int)rr->be->to_host(rr->state, host, mem, bytes);
}

int rankrun_from_host(rankrun *rr, void *mem, const void *host, size_t bytes) {
  return (int)rr->be->from_host(rr->state, mem, host, bytes);
}

/* ---- the store ---- */

static RtResult user_key(const char *key, char *out, size_t n) {
  if (!key || !*key || strlen(key) + 7 >= n || strlen(key) + 7 > RT_STORE_MAX_KEY)
    return rt_err(RT_ERR_INVALID, "store key: expected 1 to %d bytes",
                  RT_STORE_MAX_KEY - 7);
  snprintf(out, n, "u/user/%s", key);
  return RT_OK;
}

int rankrun_store_set(rankrun *rr, const char *key, const void *val, size_t n) {
  char k[RT_STORE_MAX_KEY + 1];
  RtResult r = user_key(key, k, sizeof k);
  return (int)(r != RT_OK ? r : rt_store_set(&rr->st, k, val, n));
}

/* Copies a value the store gave into the caller's buffer. */
static RtResult give_value(char *v, size_t vl, void *buf, size_t cap, size_t *n) {
  if (n) *n = vl;
  RtResult r = vl > cap ? rt_err(RT_ERR_INVALID, "the value has %zu bytes, the "
                                 "buffer %zu", vl, cap)
                        : RT_OK;
  if (r == RT_OK && vl) memcpy(buf, v, vl);
  free(v);
  return r;
}

int rankrun_store_get(rankrun *rr, const char *key, void *buf, size_t cap, size_t *n) {
  char k[RT_STORE_MAX_KEY + 1], *v = NULL;
  size_t vl = 0;
  RtResult r = user_key(key, k, sizeof k);
  if (r == RT_OK) r = rt_store_get(&rr->st, k, &v, &vl);
  return (int)(r != RT_OK ? r : give_value(v, vl, buf, cap, n));
}

int rankrun_store_wait(rankrun *rr, const char *key, double timeout_s, void *buf,
                       size_t cap, size_t *n) {
  char k[RT_STORE_MAX_KEY + 1], *v = NULL;
  size_t vl = 0;
  RtResult r = user_key(key, k, sizeof k);
  if (r == RT_OK && !(timeout_s >= 0 && timeout_s <= 86400))
    r = rt_err(RT_ERR_INVALID, "store wait: timeout %g s: expected 0 to 86400", timeout_s);
  if (r == RT_OK) r = rt_store_wait(&rr->st, k, timeout_s, &v, &vl);
  return (int)(r != RT_OK ? r : give_value(v, vl, buf, cap, n));
}

int rankrun_store_add(rankrun *rr, const char *key, int64_t delta, int64_t *out) {
  char k[RT_STORE_MAX_KEY + 1];
  RtResult r = user_key(key, k, sizeof k);
  return (int)(r != RT_OK ? r : rt_store_add(&rr->st, k, delta, out));
}

/* ---- KV ---- */

int rankrun_kv_role(rankrun *rr, int64_t request, int *role) {
  RtKvRole kr = RT_KV_NONE;
  RtResult r = request < 0 ? rt_err(RT_ERR_INVALID, "request %lld: expected 0 or more",
                                    (long long)request)
                           : rt_kv_role(rr->plan, rr->rank, request, &kr);
  *role = (int)kr;
  return (int)r;
}

int rankrun_kv_layout_of(rankrun *rr, int64_t request, int64_t tokens,
                         rankrun_kv_layout *out) {
  memset(out, 0, sizeof *out);
  if (request < 0 || tokens < 1 || tokens > RT_KV_MAX_TOKENS)
    return (int)rt_err(RT_ERR_INVALID, "request %lld of %lld tokens: expected a "
                       "request >= 0 and 1 to %d tokens", (long long)request,
                       (long long)tokens, RT_KV_MAX_TOKENS);
  const PlanRank *R = rr->me;
  out->layer_begin = R->shard[SH_LAYERS][0];
  out->layer_end = R->shard[SH_LAYERS][1];
  out->head_begin = R->shard[SH_KV_HEADS][0];
  out->head_end = R->shard[SH_KV_HEADS][1];
  out->tokens = tokens;
  RtResult r = rt_kv_region_bytes(rr->plan, rr->rank, request, tokens, &out->bytes);
  int64_t cells = (out->layer_end - out->layer_begin) * (out->head_end - out->head_begin) * tokens;
  out->cell_bytes = cells > 0 ? out->bytes / cells : 0;
  return (int)r;
}

static int kv_move(rankrun *rr, int64_t request, int64_t tokens, void *buf,
                   size_t bytes, RtKvRole want) {
  RtKvRole role = RT_KV_NONE;
  RtResult r = request < 0 ? rt_err(RT_ERR_INVALID, "request %lld: expected 0 "
                                    "or more", (long long)request)
                           : rt_kv_role(rr->plan, rr->rank, request, &role);
  if (r == RT_OK && role != want)
    r = rt_err(RT_ERR_INVALID, "rank %d %s request %lld", rr->rank,
               role == RT_KV_NONE ? "neither sends nor receives"
               : role == RT_KV_SEND ? "sends, not receives" : "receives, not sends",
               (long long)request);
  if (r == RT_OK && rr->world < 0)
    r = rt_err(RT_ERR_INVALID, "the plan has no world group for rank %d", rr->rank);
  if (r != RT_OK) return (int)r;
  RtKvMove m = {rr->be, rr->state, rr->plan, rr->rank, rr->comms[rr->world].c,
                rr->comms[rr->world].group, request, tokens, buf, bytes};
  RtKvStats st;
  memset(&st, 0, sizeof st);
  rt_kv_stats_alloc(&st, 1);
  r = rt_kv_move(&m, &st);
  rt_kv_stats_free(&st);
  return (int)r;
}

int rankrun_kv_send(rankrun *rr, int64_t request, int64_t tokens, const void *buf,
                    size_t bytes) {
  /* The executor only reads a sender's region. */
  return kv_move(rr, request, tokens, (void *)(uintptr_t)buf, bytes, RT_KV_SEND);
}

int rankrun_kv_recv(rankrun *rr, int64_t request, int64_t tokens, void *buf,
                    size_t bytes) {
  return kv_move(rr, request, tokens, buf, bytes, RT_KV_RECV);
}
