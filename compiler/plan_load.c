/*
 * plan_load.c: reads a plan file back into a Plan (plan.h), for `rankplan
 * explain` and the runtime.
 *
 * Input: plan JSON bytes (docs/plan.md). Output: a Plan whose invariants
 * plan.h lists, or an error message naming the place ("plan.json:
 * ranks[12].node: expected an integer, got a string").
 *
 * Nothing in a plan is trusted: a truncated or hand-edited file must fail
 * here, with the JSON path of the first problem, rather than start a rank
 * on the wrong GPU. The checks are, in order: JSON syntax; the format
 * version; every key's type and range; the spec digest when the caller
 * names the spec; and the consistency between ranks, groups, pools and
 * nodes (each rank in exactly one group of each kind, membership agreeing
 * with coordinates, devices within their node, no GPU used twice).
 *
 * Depends on Jansson and util.c only: the runtime links it without libyaml
 * or Lua.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* ---- names ------------------------------------------------------------- */

static const char *const kind_names[GK__COUNT] = {
    [GK_TP] = "tp",         [GK_CP] = "cp",         [GK_DP] = "dp",
    [GK_PP] = "pp",         [GK_TP_CP] = "tp-cp",   [GK_DP_CP] = "dp-cp",
    [GK_TP_PP] = "tp-pp",   [GK_TP_DP_CP] = "tp-dp-cp",
    [GK_EP] = "ep",         [GK_ETP] = "etp",       [GK_EDP] = "edp",
    [GK_TP_EP] = "tp-ep",   [GK_DCP] = "dcp",       [GK_EMBEDDING] = "embedding",
    [GK_INSTANCE] = "instance", [GK_WORLD] = "world",
};
static const char *const coord_names[CO__COUNT] = {"tp", "cp", "dp", "pp", "ep", "etp", "edp", "dcp"};
static const char *const shard_names[SH__COUNT] = {"layers", "q_heads", "kv_heads", "experts", "vocab"};
static const char *const mem_names[MEM__COUNT] = {"weights", "kv_cache", "activations",
                                                  "workspace", "reserved", "capacity"};

const char *plan_kind_name(GroupKind k) { return (unsigned)k < GK__COUNT ? kind_names[k] : "?"; }
const char *plan_coord_name(CoordKind c) { return (unsigned)c < CO__COUNT ? coord_names[c] : "?"; }
const char *plan_shard_name(ShardKind s) { return (unsigned)s < SH__COUNT ? shard_names[s] : "?"; }
const char *plan_mem_name(MemKind m) { return (unsigned)m < MEM__COUNT ? mem_names[m] : "?"; }

bool plan_kind_parse(const char *s, GroupKind *out) {
  for (int k = 0; k < GK__COUNT; k++)
    if (strcmp(s, kind_names[k]) == 0) {
      *out = (GroupKind)k;
      return true;
    }
  return false;
}

bool plan_kind_fixes(GroupKind k, CoordKind c) {
  bool dense_c = c == CO_TP || c == CO_CP || c == CO_DP || c == CO_PP;
  bool expert_c = c == CO_ETP || c == CO_EP || c == CO_EDP || c == CO_PP;
  switch (k) {
  case GK_TP: return dense_c && c != CO_TP;
  case GK_CP: return dense_c && c != CO_CP;
  case GK_DP: return dense_c && c != CO_DP;
  case GK_PP: return dense_c && c != CO_PP;
  case GK_TP_CP: return dense_c && c != CO_TP && c != CO_CP;
  case GK_DP_CP: return dense_c && c != CO_DP && c != CO_CP;
  case GK_TP_PP: return dense_c && c != CO_TP && c != CO_PP;
  case GK_TP_DP_CP: return c == CO_PP;
  case GK_EP: return expert_c && c != CO_EP;
  case GK_ETP: return expert_c && c != CO_ETP;
  case GK_EDP: return expert_c && c != CO_EDP;
  case GK_TP_EP: return expert_c && c != CO_ETP && c != CO_EP;
  case GK_DCP: return c == CO_CP || c == CO_DP || c == CO_PP;
  case GK_EMBEDDING: return c == CO_TP || c == CO_CP || c == CO_DP;
  case GK_INSTANCE:
  case GK_WORLD:
  case GK__COUNT: return false;
  }
  return false;
}

/* ---- error reporting ----------------------------------------------------- */

typedef struct {
  const char *name;
  char *err;
} Ld;

static bool fail(Ld *ld, const char *fmt, ...) RP_PRINTF(2, 3);
static bool fail(Ld *ld, const char *fmt, ...) {
  if (ld->err) return false; /* keep the first problem */
  va_list ap;
  va_start(ap, fmt);
  char *m = rp_vsprintf(fmt, ap);
  va_end(ap);
  ld->err = rp_sprintf("%s: %s", ld->name, m);
  free(m);
  return false;
}

static const char *jtype(const json_t *v) {
  if (json_is_object(v)) return "an object";
  if (json_is_array(v)) return "an array";
  if (json_is_string(v)) return "a string";
  if (json_is_integer(v)) return "an integer";
  if (json_is_real(v)) return "a number with a fraction";
  if (json_is_boolean(v)) return "a boolean";
  if (json_is_null(v)) return "null";
  return "nothing";
}

/* Fetches obj[key] with the expected type; path is the object's JSON path
 * ("ranks[12]"; "" for the top level). */
static json_t *field(Ld *ld, json_t *obj, const char *path, const char *key, json_type t) {
  json_t *v = json_object_get(obj, key);
  const char *dot = *path ? "." : "";
  if (!v) {
    fail(ld, "%s%s%s: missing", path, dot, key);
    return NULL;
  }
  if (json_typeof(v) != t && !(t == JSON_TRUE && json_is_boolean(v))) {
    const char *want = t == JSON_OBJECT ? "an object" : t == JSON_ARRAY ? "an array"
                     : t == JSON_STRING ? "a string" : t == JSON_INTEGER ? "an integer" : "?";
    fail(ld, "%s%s%s: expected %s, got %s", path, dot, key, want, jtype(v));
    return NULL;
  }
  return v;
}

static bool get_int(Ld *ld, json_t *obj, const char *path, const char *key, int64_t lo,
                    int64_t hi, int64_t *out) {
  json_t *v = field(ld, obj, path, key, JSON_INTEGER);
  if (!v) return false;
  int64_t x = (int64_t)json_integer_value(v);
  if (x < lo || x > hi)
    return fail(ld, "%s%s%s: expected %lld..%lld, got %lld", path, *path ? "." : "", key,
                (long long)lo, (long long)hi, (long long)x);
  *out = x;
  return true;
}

static bool get_str(Ld *ld, json_t *obj, const char *path, const char *key, const char **out) {
  json_t *v = field(ld, obj, path, key, JSON_STRING);
  if (!v) return false;
  *out = json_string_value(v);
  return true;
}

/* [start, end) with 0 <= start <= end. */
static bool get_range(Ld *ld, json_t *obj, const char *path, const char *key, int64_t out[2]) {
  json_t *v = field(ld, obj, path, key, JSON_ARRAY);
  if (!v) return false;
  const char *dot = *path ? "." : "";
  if (json_array_size(v) != 2)
    return fail(ld, "%s%s%s: expected [start, end], got %zu entries", path, dot, key,
                json_array_size(v));
  for (size_t i = 0; i < 2; i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_integer(e))
      return fail(ld, "%s%s%s[%zu]: expected an integer, got %s", path, dot, key, i, jtype(e));
    out[i] = (int64_t)json_integer_value(e);
  }
  if (out[0] < 0 || out[1] < out[0])
    return fail(ld, "%s%s%s: expected 0 <= start <= end, got [%lld, %lld]", path, dot, key,
                (long long)out[0], (long long)out[1]);
  return true;
}

/* ---- sections -------------------------------------------------------------- */

static int find_pool(const Plan *p, const char *name) {
  for (size_t i = 0; i < p->npools; i++)
    if (strcmp(p->pools[i].name, name) == 0) return (int)i;
  return -1;
}

static int find_node(const Plan *p, int64_t node) {
  for (size_t i = 0; i < p->nnodes; i++)
    if (p->nodes[i].node == node) return (int)i;
  return -1;
}

static bool load_nodes(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "nodes", JSON_ARRAY);
  if (!a) return false;
  p->nnodes = json_array_size(a);
  p->nodes = rp_calloc(p->nnodes ? p->nnodes : 1, sizeof *p->nodes);
  size_t total = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    json_t *n = json_array_get(a, i);
    char path[48];
    snprintf(path, sizeof path, "nodes[%zu]", i);
    if (!json_is_object(n)) return fail(ld, "%s: expected an object, got %s", path, jtype(n));
    int64_t id, gpus;
    if (!get_int(ld, n, path, "node", 0, INT32_MAX, &id)) return false;
    if (!p->partial && id != (int64_t)i)
      return fail(ld, "%s.node: expected %zu (nodes are listed in order), got %lld", path, i,
                  (long long)id);
    if (!get_int(ld, n, path, "gpus", 1, INT32_MAX, &gpus)) return false;
    json_t *r = field(ld, n, path, "ranks", JSON_ARRAY);
    if (!r) return false;
    p->nodes[i].node = (int32_t)id;
    p->nodes[i].gpus = (int32_t)gpus;
    p->nodes[i].nranks = (int32_t)json_array_size(r);
    total += json_array_size(r);
  }
  p->node_ranks = rp_malloc((total ? total : 1) * sizeof *p->node_ranks);
  size_t at = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    json_t *r = json_object_get(json_array_get(a, i), "ranks");
    p->nodes[i].first_rank = (int32_t)at;
    for (size_t j = 0; j < json_array_size(r); j++) {
      json_t *e = json_array_get(r, j);
      if (!json_is_integer(e) || json_integer_value(e) < 0 ||
          json_integer_value(e) >= p->world_size)
        return fail(ld, "nodes[%zu].ranks[%zu]: expected a rank 0..%lld, got %s", i, j,
                    (long long)(p->world_size - 1), json_is_integer(e) ? "one out of range" : jtype(e));
      p->node_ranks[at++] = (int32_t)json_integer_value(e);
    }
  }
  return true;
}

static bool load_pools(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "pools", JSON_ARRAY);
  if (!a) return false;
  p->npools = json_array_size(a);
  p->pools = rp_calloc(p->npools ? p->npools : 1, sizeof *p->pools);
  int64_t next = 0;
  for (size_t i = 0; i < p->npools; i++) {
    json_t *o = json_array_get(a, i);
    PlanPool *P = &p->pools[i];
    char path[48];
    snprintf(path, sizeof path, "pools[%zu]", i);
    if (!json_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *name, *role;
    if (!get_str(ld, o, path, "name", &name) || !get_str(ld, o, path, "role", &role)) return false;
    P->name = rp_strdup(name);
    P->role = rp_strdup(role);
    if (find_pool(p, name) != (int)i) return fail(ld, "%s.name: pool `%s` is listed twice", path, name);
    if (strcmp(role, "prefill") && strcmp(role, "decode") && strcmp(role, "both"))
      return fail(ld, "%s.role: expected prefill, decode or both, got `%s`", path, role);
    if (!get_int(ld, o, path, "replicas", 1, INT32_MAX, &P->replicas)) return false;
    for (int c = 0; c < CO__COUNT; c++)
      if (!get_int(ld, o, path, coord_names[c], 1, INT32_MAX, &P->size[c])) return false;
    if (!get_int(ld, o, path, "instance_size", 1, INT32_MAX, &P->instance_size)) return false;
    CkState st = {true};
    int64_t want = ckm(&st, ckm(&st, P->size[CO_TP], P->size[CO_CP]),
                       ckm(&st, P->size[CO_DP], P->size[CO_PP]));
    if (!st.ok || want != P->instance_size)
      return fail(ld, "%s.instance_size: expected tp * cp * dp * pp = %lld, got %lld", path,
                  (long long)want, (long long)P->instance_size);
    int64_t r[2];
    if (!get_range(ld, o, path, "ranks", r)) return false;
    P->first_rank = r[0];
    P->nranks = r[1] - r[0];
    if (r[0] != next || ckm(&st, P->replicas, P->instance_size) != P->nranks || !st.ok)
      return fail(ld, "%s.ranks: expected [%lld, %lld] (replicas * instance_size after the "
                      "previous pool), got [%lld, %lld]",
                  path, (long long)next, (long long)(next + P->replicas * P->instance_size),
                  (long long)r[0], (long long)r[1]);
    next = r[1];
    json_t *lp = field(ld, o, path, "layer_partition", JSON_ARRAY);
    if (!lp) return false;
    if ((int64_t)json_array_size(lp) != P->size[CO_PP])
      return fail(ld, "%s.layer_partition: expected %lld entries (pp), got %zu", path,
                  (long long)P->size[CO_PP], json_array_size(lp));
    P->layer_partition = rp_calloc((size_t)P->size[CO_PP], sizeof(int64_t));
    for (size_t j = 0; j < json_array_size(lp); j++) {
      json_t *e = json_array_get(lp, j);
      if (!json_is_integer(e) || json_integer_value(e) < 1)
        return fail(ld, "%s.layer_partition[%zu]: expected an integer >= 1, got %s", path, j,
                    json_is_integer(e) ? "one below 1" : jtype(e));
      P->layer_partition[j] = (int64_t)json_integer_value(e);
    }
  }
  if (next != p->world_size)
    return fail(ld, "pools: the pools hold %lld ranks, expected world_size %lld", (long long)next,
                (long long)p->world_size);
  return true;
}

static bool load_rank(Ld *ld, Plan *p, json_t *o, size_t i, PlanRank *R) {
  char path[48];
  snprintf(path, sizeof path, "ranks[%zu]", i);
  if (!json_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
  int64_t v;
  if (!get_int(ld, o, path, "rank", 0, p->world_size - 1, &v)) return false;
  R->rank = (int32_t)v;
  if (!get_int(ld, o, path, "node", 0, INT32_MAX, &v)) return false;
  int ni = find_node(p, v);
  if (ni < 0) return fail(ld, "%s.node: node %lld is not in nodes[]", path, (long long)v);
  R->node = (int32_t)v;
  if (!get_int(ld, o, path, "device", 0, p->nodes[ni].gpus - 1, &v)) return false;
  R->device = (int32_t)v;
  if (!get_int(ld, o, path, "local_rank", 0, p->nodes[ni].gpus - 1, &v)) return false;
  R->local_rank = (int32_t)v;
  const char *pool;
  if (!get_str(ld, o, path, "pool", &pool)) return false;
  int pi = find_pool(p, pool);
  if (pi < 0) return fail(ld, "%s.pool: pool `%s` is not in pools[]", path, pool);
  R->pool = pi;
  const PlanPool *P = &p->pools[pi];
  if (R->rank < P->first_rank || R->rank >= P->first_rank + P->nranks)
    return fail(ld, "%s.pool: rank %d is outside pool `%s`'s ranks [%lld, %lld)", path, R->rank,
                pool, (long long)P->first_rank, (long long)(P->first_rank + P->nranks));
  if (!get_int(ld, o, path, "instance", 0, P->replicas - 1, &v)) return false;
  R->instance = (int32_t)v;
  if ((R->rank - P->first_rank) / P->instance_size != R->instance)
    return fail(ld, "%s.instance: rank %d belongs to instance %lld of pool `%s`, got %d", path,
                R->rank, (long long)((R->rank - P->first_rank) / P->instance_size), pool,
                R->instance);
  char sub[64];
  json_t *c = field(ld, o, path, "coords", JSON_OBJECT);
  if (!c) return false;
  snprintf(sub, sizeof sub, "%s.coords", path);
  for (int k = 0; k < CO__COUNT; k++) {
    if (!get_int(ld, c, sub, coord_names[k], 0, P->size[k] - 1, &v)) return false;
    R->coords[k] = (int32_t)v;
  }
  json_t *g = field(ld, o, path, "groups", JSON_OBJECT);
  if (!g) return false;
  snprintf(sub, sizeof sub, "%s.groups", path);
  for (int k = 0; k < GK__COUNT; k++) R->groups[k] = -1;
  const char *key;
  json_t *val;
  json_object_foreach(g, key, val) {
    GroupKind k;
    if (!plan_kind_parse(key, &k)) return fail(ld, "%s.%s: unknown group kind", sub, key);
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > INT32_MAX)
      return fail(ld, "%s.%s: expected a group id, got %s", sub, key,
                  json_is_integer(val) ? "one out of range" : jtype(val));
    R->groups[k] = (int32_t)json_integer_value(val);
  }
  for (int k = 0; k < GK__COUNT; k++)
    if (k != GK_EMBEDDING && R->groups[k] < 0)
      return fail(ld, "%s.groups.%s: missing (every rank is in one group of each kind)", sub,
                  kind_names[k]);
  json_t *s = field(ld, o, path, "shard", JSON_OBJECT);
  if (!s) return false;
  snprintf(sub, sizeof sub, "%s.shard", path);
  for (int k = 0; k < SH__COUNT; k++)
    if (!get_range(ld, s, sub, shard_names[k], R->shard[k])) return false;
  json_t *m = field(ld, o, path, "memory", JSON_OBJECT);
  if (!m) return false;
  snprintf(sub, sizeof sub, "%s.memory", path);
  for (int k = 0; k < MEM__COUNT; k++)
    if (!get_int(ld, m, sub, mem_names[k], 0, INT64_MAX, &R->memory[k])) return false;
  json_t *kv = field(ld, o, path, "kv", JSON_OBJECT);
  if (!kv) return false;
  snprintf(sub, sizeof sub, "%s.kv", path);
  return get_int(ld, kv, sub, "bytes_per_token", 0, INT64_MAX, &R->kv_bytes_per_token) &&
         get_int(ld, kv, sub, "block_tokens", 1, INT64_MAX, &R->kv_block_tokens) &&
         get_int(ld, kv, sub, "blocks", 0, INT64_MAX, &R->kv_blocks);
}

static bool load_ranks(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "ranks", JSON_ARRAY);
  if (!a) return false;
  p->nranks = (int64_t)json_array_size(a);
  if (!p->partial && p->nranks != p->world_size)
    return fail(ld, "ranks: expected world_size = %lld entries, got %lld",
                (long long)p->world_size, (long long)p->nranks);
  p->ranks = rp_calloc((size_t)(p->nranks ? p->nranks : 1), sizeof *p->ranks);
  for (int64_t i = 0; i < p->nranks; i++) {
    if (!load_rank(ld, p, json_array_get(a, (size_t)i), (size_t)i, &p->ranks[i])) return false;
    if (!p->partial && p->ranks[i].rank != i)
      return fail(ld, "ranks[%lld].rank: expected %lld (ranks are listed in order), got %d",
                  (long long)i, (long long)i, p->ranks[i].rank);
    if (p->partial && i > 0 && p->ranks[i].rank <= p->ranks[i - 1].rank)
      return fail(ld, "ranks[%lld].rank: expected ranks in ascending order, got %d after %d",
                  (long long)i, p->ranks[i].rank, p->ranks[i - 1].rank);
  }
  return true;
}

static bool load_groups(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "groups", JSON_ARRAY);
  if (!a) return false;
  p->ngroups = (int64_t)json_array_size(a);
  p->groups = rp_calloc((size_t)(p->ngroups ? p->ngroups : 1), sizeof *p->groups);
  for (int64_t i = 0; i < p->ngroups; i++) {
    json_t *o = json_array_get(a, (size_t)i);
    PlanGroup *G = &p->groups[i];
    char path[48];
    snprintf(path, sizeof path, "groups[%lld]", (long long)i);
    if (!json_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    int64_t v;
    if (!get_int(ld, o, path, "id", 0, INT32_MAX, &v)) return false;
    G->id = (int32_t)v;
    if (!p->partial && G->id != i)
      return fail(ld, "%s.id: expected %lld (groups are listed by id), got %d", path, (long long)i, G->id);
    if (p->partial && i > 0 && G->id <= p->groups[i - 1].id)
      return fail(ld, "%s.id: expected ids in ascending order, got %d after %d", path, G->id,
                  p->groups[i - 1].id);
    const char *kind;
    if (!get_str(ld, o, path, "kind", &kind)) return false;
    if (!plan_kind_parse(kind, &G->kind)) return fail(ld, "%s.kind: unknown group kind `%s`", path, kind);
    json_t *pool = json_object_get(o, "pool"), *inst = json_object_get(o, "instance");
    if (G->kind == GK_WORLD) {
      if (!json_is_null(pool) || !json_is_null(inst))
        return fail(ld, "%s: the world group has pool and instance null", path);
      G->pool = G->instance = -1;
    } else {
      const char *pn;
      if (!get_str(ld, o, path, "pool", &pn)) return false;
      G->pool = find_pool(p, pn);
      if (G->pool < 0) return fail(ld, "%s.pool: pool `%s` is not in pools[]", path, pn);
      if (!get_int(ld, o, path, "instance", 0, p->pools[G->pool].replicas - 1, &v)) return false;
      G->instance = (int32_t)v;
    }
    if (json_object_get(o, "span") && !json_object_get(o, "ranks")) {
      /* [start, end): every rank of the run, in order (the world group) */
      int64_t sp[2];
      if (!get_range(ld, o, path, "span", sp)) return false;
      if (sp[1] <= sp[0] || sp[1] > p->world_size)
        return fail(ld, "%s.span: expected a non-empty range within [0, %lld), got [%lld, %lld]", path,
                    (long long)p->world_size, (long long)sp[0], (long long)sp[1]);
      G->n = (int32_t)(sp[1] - sp[0]);
      G->ranks = rp_malloc((size_t)G->n * sizeof *G->ranks);
      for (int32_t j = 0; j < G->n; j++) G->ranks[j] = (int32_t)(sp[0] + j);
      continue;
    }
    json_t *r = field(ld, o, path, "ranks", JSON_ARRAY);
    if (!r) return false;
    G->n = (int32_t)json_array_size(r);
    if (G->n < 1) return fail(ld, "%s.ranks: expected at least one rank, got none", path);
    G->ranks = rp_malloc((size_t)G->n * sizeof *G->ranks);
    for (int32_t j = 0; j < G->n; j++) {
      json_t *e = json_array_get(r, (size_t)j);
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= p->world_size)
        return fail(ld, "%s.ranks[%d]: expected a rank 0..%lld, got %s", path, j,
                    (long long)(p->world_size - 1), json_is_integer(e) ? "one out of range" : jtype(e));
      G->ranks[j] = (int32_t)json_integer_value(e);
    }
  }
  return true;
}

static bool load_reshard(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "kv_reshard", JSON_ARRAY);
  if (!a) return false;
  p->nreshard = json_array_size(a);
  p->reshard = rp_calloc(p->nreshard ? p->nreshard : 1, sizeof *p->reshard);
  for (size_t i = 0; i < p->nreshard; i++) {
    json_t *o = json_array_get(a, i);
    PlanReshard *R = &p->reshard[i];
    char path[48];
    snprintf(path, sizeof path, "kv_reshard[%zu]", i);
    if (!json_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *pre, *dec;
    if (!get_str(ld, o, path, "prefill", &pre) || !get_str(ld, o, path, "decode", &dec)) return false;
    R->prefill = rp_strdup(pre);
    R->decode = rp_strdup(dec);
    json_t *t = field(ld, o, path, "transfers", JSON_ARRAY);
    if (!t) return false;
    R->ntransfers = json_array_size(t);
    R->transfers = rp_calloc(R->ntransfers ? R->ntransfers : 1, sizeof *R->transfers);
    for (size_t j = 0; j < R->ntransfers; j++) {
      json_t *x = json_array_get(t, j);
      PlanTransfer *X = &R->transfers[j];
      char xp[128];
      snprintf(xp, sizeof xp, "%s.transfers[%zu]", path, j);
      if (!json_is_object(x)) return fail(ld, "%s: expected an object, got %s", xp, jtype(x));
      if (!get_int(ld, x, xp, "src", 0, INT32_MAX, &X->src) ||
          !get_int(ld, x, xp, "dst", 0, INT32_MAX, &X->dst) ||
          !get_range(ld, x, xp, "layers", X->layers) ||
          !get_range(ld, x, xp, "kv_heads", X->kv_heads) ||
          !get_int(ld, x, xp, "bytes_per_token", 0, INT64_MAX, &X->bytes_per_token))
        return false;
      json_t *tok = json_object_get(x, "tokens");
      X->stride = 1;
      X->offset = 0;
      if (json_is_string(tok) && strcmp(json_string_value(tok), "all") == 0) {
        X->tokens = PT_ALL;
      } else if (json_is_object(tok) &&
                 (json_object_get(tok, "stride") || json_object_get(tok, "ranges"))) {
        char tp[160];
        snprintf(tp, sizeof tp, "%s.tokens", xp);
        X->tokens = json_object_get(tok, "ranges") ? PT_RANGES : PT_STRIDE;
        if (json_object_get(tok, "stride")) {
          if (!get_int(ld, tok, tp, "stride", 1, INT64_MAX, &X->stride) ||
              !get_int(ld, tok, tp, "offset", 0, INT64_MAX, &X->offset))
            return false;
          if (X->offset >= X->stride)
            return fail(ld, "%s.offset: expected below stride %lld, got %lld", tp,
                        (long long)X->stride, (long long)X->offset);
        }
        if (X->tokens == PT_RANGES) {
          json_t *rs = field(ld, tok, tp, "ranges", JSON_ARRAY);
          if (!rs) return false;
          X->nranges = json_array_size(rs);
          X->ranges = rp_calloc(X->nranges ? X->nranges : 1, sizeof *X->ranges);
          for (size_t k = 0; k < X->nranges; k++) {
            json_t *holder = json_pack("{s:O}", "r", json_array_get(rs, k));
            char rp[224];
            snprintf(rp, sizeof rp, "%s.ranges[%zu]", tp, k);
            bool ok = get_range(ld, holder, rp, "r", X->ranges[k]);
            json_decref(holder);
            if (!ok) return false;
          }
        }
      } else {
        return fail(ld, "%s.tokens: expected \"all\", {\"ranges\": ...} or {\"stride\", "
                        "\"offset\"}, got %s",
                    xp, tok ? jtype(tok) : "nothing");
      }
    }
  }
  return true;
}

static bool load_estimates(Ld *ld, Plan *p, json_t *root) {
  json_t *e = json_object_get(root, "estimates");
  if (!e) return fail(ld, "estimates: missing");
  if (json_is_null(e)) return true;
  if (!json_is_object(e)) return fail(ld, "estimates: expected an object or null, got %s", jtype(e));
  static const char *const keys[4] = {"ttft_ms", "tpot_ms", "throughput_tok_s",
                                      "goodput_tok_s_per_gpu"};
  double *dst[4] = {&p->ttft_ms, &p->tpot_ms, &p->throughput_tok_s, &p->goodput_tok_s_per_gpu};
  for (int i = 0; i < 4; i++) {
    json_t *v = json_object_get(e, keys[i]);
    if (!json_is_number(v))
      return fail(ld, "estimates.%s: expected a number, got %s", keys[i], v ? jtype(v) : "nothing");
    *dst[i] = json_number_value(v);
  }
  p->has_estimates = true;
  return true;
}

static bool load_diags(Ld *ld, Plan *p, json_t *root) {
  json_t *a = field(ld, root, "", "diagnostics", JSON_ARRAY);
  if (!a) return false;
  p->ndiags = json_array_size(a);
  p->diags = rp_calloc(p->ndiags ? p->ndiags : 1, sizeof *p->diags);
  for (size_t i = 0; i < p->ndiags; i++) {
    json_t *o = json_array_get(a, i);
    char path[48];
    snprintf(path, sizeof path, "diagnostics[%zu]", i);
    if (!json_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *c, *s, *m;
    if (!get_str(ld, o, path, "code", &c) || !get_str(ld, o, path, "severity", &s) ||
        !get_str(ld, o, path, "message", &m))
      return false;
    p->diags[i].code = rp_strdup(c);
    p->diags[i].severity = rp_strdup(s);
    p->diags[i].message = rp_strdup(m);
  }
  return true;
}

/* ---- consistency ----------------------------------------------------------- */

static int cmp_group_id(const void *key, const void *elem) {
  int32_t k = *(const int32_t *)key, id = ((const PlanGroup *)elem)->id;
  return (k > id) - (k < id);
}
static int cmp_rank(const void *key, const void *elem) {
  int32_t k = *(const int32_t *)key, r = ((const PlanRank *)elem)->rank;
  return (k > r) - (k < r);
}

const PlanRank *plan_find_rank(const Plan *p, int64_t r) {
  if (r < 0 || r > INT32_MAX) return NULL;
  if (!p->partial) return r < p->nranks ? &p->ranks[r] : NULL;
  int32_t k = (int32_t)r;
  return bsearch(&k, p->ranks, (size_t)p->nranks, sizeof *p->ranks, cmp_rank);
}

static const PlanGroup *find_group(const Plan *p, int32_t id) {
  if (id < 0) return NULL;
  if (!p->partial) return id < p->ngroups ? &p->groups[id] : NULL;
  return bsearch(&id, p->groups, (size_t)p->ngroups, sizeof *p->groups, cmp_group_id);
}

const PlanGroup *plan_rank_group(const Plan *p, const PlanRank *r, GroupKind k) {
  return find_group(p, r->groups[k]);
}

static bool check_consistency(Ld *ld, Plan *p) {
  /* Each rank's groups exist, have the right kind and list the rank. */
  uint32_t *seen = rp_calloc((size_t)(p->nranks ? p->nranks : 1), sizeof *seen);
  bool ok = true;
  for (int64_t gi = 0; gi < p->ngroups && ok; gi++) {
    const PlanGroup *G = &p->groups[gi];
    const PlanRank *first = NULL;
    for (int32_t j = 0; j < G->n; j++) {
      const PlanRank *R = plan_find_rank(p, G->ranks[j]);
      if (!R) continue; /* a rank of another node in a split plan */
      if (R->groups[G->kind] != G->id) {
        ok = fail(ld, "groups[%lld].ranks[%d]: rank %d is listed in %s group %d but its "
                      "groups.%s is %d",
                  (long long)gi, j, R->rank, kind_names[G->kind], G->id, kind_names[G->kind],
                  R->groups[G->kind]);
        break;
      }
      size_t ri = (size_t)(R - p->ranks);
      if (seen[ri] & (1u << G->kind)) {
        ok = fail(ld, "groups[%lld].ranks[%d]: rank %d is listed twice", (long long)gi, j, R->rank);
        break;
      }
      seen[ri] |= 1u << G->kind;
      if (G->kind != GK_WORLD && (R->pool != G->pool || R->instance != G->instance)) {
        ok = fail(ld, "groups[%lld].ranks[%d]: rank %d is in pool `%s` instance %d, the group in "
                      "pool `%s` instance %d",
                  (long long)gi, j, R->rank, p->pools[R->pool].name, R->instance,
                  p->pools[G->pool].name, G->instance);
        break;
      }
      if (!first) {
        first = R;
        continue;
      }
      for (int c = 0; c < CO__COUNT; c++) {
        if (plan_kind_fixes(G->kind, (CoordKind)c) && R->coords[c] != first->coords[c]) {
          ok = fail(ld, "groups[%lld]: members of a %s group share coords.%s, but rank %d has %d "
                        "and rank %d has %d",
                    (long long)gi, kind_names[G->kind], coord_names[c], first->rank,
                    first->coords[c], R->rank, R->coords[c]);
          break;
        }
      }
      if (!ok) break;
    }
    if (!ok) break;
    /* Group sizes follow from the pool's sizes for the kinds that span
     * whole dimensions. */
    if (G->kind == GK_TP && G->n != p->pools[G->pool].size[CO_TP])
      ok = fail(ld, "groups[%lld].ranks: a tp group of pool `%s` has tp = %lld ranks, got %d",
                (long long)gi, p->pools[G->pool].name, (long long)p->pools[G->pool].size[CO_TP], G->n);
    if (G->kind == GK_WORLD && G->n != p->world_size)
      ok = fail(ld, "groups[%lld].ranks: the world group has world_size = %lld ranks, got %d",
                (long long)gi, (long long)p->world_size, G->n);
  }
  for (int64_t i = 0; i < p->nranks && ok; i++) {
    const PlanRank *R = &p->ranks[i];
    for (int k = 0; k < GK__COUNT; k++) {
      if (R->groups[k] < 0) continue;
      const PlanGroup *G = find_group(p, R->groups[k]);
      if (!G) {
        ok = fail(ld, "ranks[%lld].groups.%s: group %d is not in groups[]", (long long)i,
                  kind_names[k], R->groups[k]);
        break;
      }
      if (G->kind != (GroupKind)k) {
        ok = fail(ld, "ranks[%lld].groups.%s: group %d is a %s group", (long long)i, kind_names[k],
                  R->groups[k], kind_names[G->kind]);
        break;
      }
      if (!(seen[i] & (1u << k))) {
        ok = fail(ld, "ranks[%lld].groups.%s: group %d does not list rank %d", (long long)i,
                  kind_names[k], R->groups[k], R->rank);
        break;
      }
    }
    /* Embedding holds exactly the first and last pp stage. */
    if (ok) {
      int64_t pp = p->pools[R->pool].size[CO_PP];
      bool want = R->coords[CO_PP] == 0 || R->coords[CO_PP] == pp - 1;
      if (want != (R->groups[GK_EMBEDDING] >= 0))
        ok = fail(ld, "ranks[%lld].groups.embedding: expected %s (pp stage %d of %lld)",
                  (long long)i, want ? "a group" : "none", R->coords[CO_PP], (long long)pp);
    }
  }
  free(seen);
  if (!ok) return false;
  /* Every rank the file holds is listed under its node. */
  int64_t listed = 0;
  for (size_t n = 0; n < p->nnodes; n++) listed += p->nodes[n].nranks;
  if (listed != p->nranks)
    return fail(ld, "nodes: the nodes list %lld ranks, expected the %lld of ranks[]", (long long)listed,
                (long long)p->nranks);
  /* Devices: within the node (checked on load) and no GPU used twice. */
  for (size_t n = 0; n < p->nnodes; n++) {
    const PlanNode *N = &p->nodes[n];
    int32_t *owner = rp_malloc((size_t)N->gpus * sizeof *owner);
    for (int32_t g = 0; g < N->gpus; g++) owner[g] = -1;
    for (int32_t j = 0; j < N->nranks && ok; j++) {
      int32_t r = p->node_ranks[N->first_rank + j];
      const PlanRank *R = plan_find_rank(p, r);
      if (!R) {
        ok = fail(ld, "nodes[%zu].ranks[%d]: rank %d is not in ranks[]", n, j, r);
        break;
      }
      if (R->node != N->node) {
        ok = fail(ld, "nodes[%zu].ranks[%d]: rank %d is listed on node %d but ranks[].node is %d",
                  n, j, r, N->node, R->node);
        break;
      }
      if (owner[R->device] >= 0) {
        ok = fail(ld, "ranks[%d].device: node %d device %d is used by rank %d too", r, R->node,
                  R->device, owner[R->device]);
        break;
      }
      owner[R->device] = r;
    }
    free(owner);
    if (!ok) return false;
  }
  return true;
}

/* ---- entry points ------------------------------------------------------------- */

Plan *plan_load_mem(const char *name, const char *text, size_t len, const char *spec_path,
                    char **err) {
  Ld ld = {name, NULL};
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  *err = NULL;
  if (!root) {
    fail(&ld, "line %d column %d: not a valid plan (JSON: %s)%s", je.line, je.column, je.text,
         len == 0 ? "; the file is empty" : "");
    *err = ld.err;
    return NULL;
  }
  Plan *p = rp_calloc(1, sizeof *p);
  p->path = rp_strdup(name);
  bool ok = false;
  const char *fmt, *comp, *sha;
  if (!json_is_object(root)) {
    fail(&ld, "expected a JSON object at the top, got %s", jtype(root));
    goto done;
  }
  if (!get_str(&ld, root, "", "format", &fmt)) goto done;
  if (strcmp(fmt, PLAN_FORMAT) != 0) {
    fail(&ld, "format: expected \"%s\", got \"%s\" (a plan from another rankplan version; "
              "compile the spec again)",
         PLAN_FORMAT, fmt);
    goto done;
  }
  if (!get_str(&ld, root, "", "compiler", &comp) || !get_str(&ld, root, "", "spec_sha256", &sha))
    goto done;
  p->compiler = rp_strdup(comp);
  if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64) {
    fail(&ld, "spec_sha256: expected 64 lowercase hex digits, got \"%s\"", sha);
    goto done;
  }
  memcpy(p->spec_sha256, sha, 65);
  json_t *node = json_object_get(root, "node");
  if (node) {
    if (!json_is_integer(node) || json_integer_value(node) < 0) {
      fail(&ld, "node: expected a node number, got %s", jtype(node));
      goto done;
    }
    p->partial = true;
    p->partial_node = (int32_t)json_integer_value(node);
  }
  if (!get_int(&ld, root, "", "world_size", 1, INT32_MAX, &p->world_size)) goto done;
  if (!load_nodes(&ld, p, root) || !load_pools(&ld, p, root) || !load_ranks(&ld, p, root) ||
      !load_groups(&ld, p, root) || !load_reshard(&ld, p, root) ||
      !load_estimates(&ld, p, root) || !load_diags(&ld, p, root))
    goto done;
  if (spec_path) {
    char *spec;
    size_t slen;
    int e = rp_read_file(spec_path, (size_t)1 << 30, &spec, &slen);
    if (e) {
      fail(&ld, "cannot read the spec `%s`: %s", spec_path, strerror(e));
      goto done;
    }
    char hex[65];
    rp_sha256_hex(spec, slen, hex);
    free(spec);
    if (strcmp(hex, p->spec_sha256) != 0) {
      fail(&ld, "spec_sha256: the plan was compiled from another spec: expected %s (the digest "
                "of `%s`), got %s; compile the spec again",
           hex, spec_path, p->spec_sha256);
      goto done;
    }
  }
  ok = check_consistency(&ld, p);
done:
  json_decref(root);
  if (!ok) {
    plan_free(p);
    *err = ld.err ? ld.err : rp_sprintf("%s: invalid plan", name);
    return NULL;
  }
  return p;
}

Plan *plan_load(const char *path, const char *spec_path, char **err) {
  char *text;
  size_t len;
  int e = rp_read_file(path, SIZE_MAX / 2, &text, &len);
  if (e) {
    *err = rp_sprintf("%s: cannot read the plan: %s", path, strerror(e));
    return NULL;
  }
  Plan *p = plan_load_mem(path, text, len, spec_path, err);
  free(text);
  return p;
}

void plan_free(Plan *p) {
  if (!p) return;
  free(p->path);
  free(p->compiler);
  free(p->nodes);
  free(p->node_ranks);
  for (size_t i = 0; i < p->npools; i++) {
    free(p->pools[i].name);
    free(p->pools[i].role);
    free(p->pools[i].layer_partition);
  }
  free(p->pools);
  free(p->ranks);
  for (int64_t i = 0; i < p->ngroups; i++) free(p->groups[i].ranks);
  free(p->groups);
  for (size_t i = 0; i < p->nreshard; i++) {
    free(p->reshard[i].prefill);
    free(p->reshard[i].decode);
    for (size_t j = 0; j < p->reshard[i].ntransfers; j++) free(p->reshard[i].transfers[j].ranges);
    free(p->reshard[i].transfers);
  }
  free(p->reshard);
  for (size_t i = 0; i < p->ndiags; i++) {
    free(p->diags[i].code);
    free(p->diags[i].severity);
    free(p->diags[i].message);
  }
  free(p->diags);
  free(p);
}
