/*
 * hook_result.c: the context a hook sees, built as Lua tables, and each
 * hook kind's result read back with raw accesses (no user metamethod runs)
 * and checked in C (hook_run.h). A result is never trusted.
 */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hook_run.h"

/* ---- the context as Lua tables ---- */

static void set_int(lua_State *L, const char *k, int64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}
static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void push_ranks(lua_State *L, const int64_t *v, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)v[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/* ctx.topology, set in the table on top of the stack. */
static void push_topology(lua_State *L, const HookCtx *c) {
  lua_createtable(L, 0, 6);
  set_int(L, "nodes", c->nodes);
  set_int(L, "gpus_per_node", c->gpus_per_node);
  set_int(L, "domain", c->domain);
  if (c->nodes_per_rack > 0) {
    set_int(L, "nodes_per_rack", c->nodes_per_rack);
    set_int(L, "racks", (c->nodes + c->nodes_per_rack - 1) / c->nodes_per_rack);
  }
  lua_pushboolean(L, c->allow_tp_across_domain);
  lua_setfield(L, -2, "allow_tp_across_domain");
  lua_setfield(L, -2, "topology");
}

/* ctx.model, set in the table on top of the stack. */
static void push_model(lua_State *L, const HookCtx *c) {
  lua_createtable(L, 0, 14);
  set_str(L, "name", c->model_name);
  set_int(L, "layers", c->layers);
  set_int(L, "hidden_size", c->hidden_size);
  set_int(L, "vocab_size", c->vocab_size);
  set_int(L, "heads", c->heads);
  set_int(L, "kv_heads", c->kv_heads);
  set_int(L, "head_dim", c->head_dim);
  set_int(L, "intermediate_size", c->intermediate_size);
  set_int(L, "experts", c->experts);
  set_int(L, "top_k", c->top_k);
  set_int(L, "shared_experts", c->shared_experts);
  set_int(L, "expert_intermediate_size", c->expert_intermediate_size);
  set_int(L, "dense_layers", c->dense_layers);
  lua_setfield(L, -2, "model");
}

/* The pools, one table each, pushed as a list. */
static void push_pools(lua_State *L, const HookCtx *c) {
  lua_createtable(L, (int)c->npools, 0);
  for (size_t i = 0; i < c->npools; i++) {
    const HookPool *p = &c->pools[i];
    lua_createtable(L, 0, 14);
    set_int(L, "index", (int64_t)i);
    set_str(L, "name", p->name);
    set_str(L, "role", role_name(p->role));
    set_int(L, "replicas", p->replicas);
    set_int(L, "tp", p->tp);
    set_int(L, "pp", p->pp);
    set_int(L, "cp", p->cp);
    set_int(L, "dp", p->dp);
    set_int(L, "ep", p->ep);
    set_int(L, "etp", p->etp);
    set_int(L, "dcp", p->dcp);
    set_int(L, "first_rank", p->first_rank);
    set_int(L, "size", p->size);
    set_int(L, "ranks", p->replicas * p->size);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/* ctx.ranks, set in the context table under the pools list on top. */
static void push_rank_list(lua_State *L, const HookCtx *c) {
  lua_createtable(L, (int)c->nranks, 0);
  for (size_t i = 0; i < c->nranks; i++) {
    const HookRank *rk = &c->ranks[i];
    lua_createtable(L, 0, 9);
    set_int(L, "rank", (int64_t)i);
    set_str(L, "pool", c->pools[rk->pool].name);
    set_int(L, "pool_index", rk->pool);
    set_int(L, "instance", rk->instance);
    set_int(L, "local", rk->local);
    set_int(L, "tp", rk->tp);
    set_int(L, "cp", rk->cp);
    set_int(L, "dp", rk->dp);
    set_int(L, "pp", rk->pp);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, -3, "ranks");
}

/* ctx.groups, set in the context table under the pools list on top. */
static void push_groups(lua_State *L, const HookCtx *c) {
  lua_createtable(L, (int)c->ngroups, 0);
  for (size_t i = 0; i < c->ngroups; i++) {
    const HookGroup *g = &c->groups[i];
    lua_createtable(L, 0, 5);
    set_str(L, "kind", g->kind);
    set_str(L, "pool", c->pools[g->pool].name);
    set_int(L, "pool_index", g->pool);
    set_int(L, "instance", g->instance);
    push_ranks(L, g->ranks, g->n);
    lua_setfield(L, -2, "ranks");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, -3, "groups");
}

/* ctx.default, the placement without the hook, for the placement hook. */
static void push_default(lua_State *L, const Run *r) {
  const HookCtx *c = r->ctx;
  if (r->kind == HOOK_PLACEMENT && c->default_node && c->default_gpu) {
    lua_createtable(L, (int)c->nranks, 0);
    for (size_t i = 0; i < c->nranks; i++) {
      lua_createtable(L, 0, 3);
      set_int(L, "rank", (int64_t)i);
      set_int(L, "node", c->default_node[i]);
      set_int(L, "gpu", c->default_gpu[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "default");
  }
}

/* ctx.candidate, the candidate an objective or filter hook scores. */
static void push_candidate(lua_State *L, const Run *r) {
  if (r->kind == HOOK_OBJECTIVE || r->kind == HOOK_FILTER) {
    lua_createtable(L, 0, (int)r->ncand + 1);
    for (size_t i = 0; i < r->ncand; i++) {
      lua_pushnumber(L, r->cand[i].value);
      lua_setfield(L, -2, r->cand[i].key);
    }
    if (r->cand_role) {
      lua_pushstring(L, r->cand_role);
      lua_setfield(L, -2, "role");
    }
    lua_setfield(L, -2, "candidate");
  }
}

void hk_push_ctx(lua_State *L, const Run *r) {
  const HookCtx *c = r->ctx;
  lua_createtable(L, 0, 12);
  set_str(L, "hook", hook_kind_name(r->kind));
  set_int(L, "world_size", (int64_t)c->nranks);
  push_topology(L, c);
  push_model(L, c);
  push_pools(L, c);
  int pools = lua_gettop(L);
  lua_pushvalue(L, pools);
  lua_setfield(L, -3, "pools");
  push_rank_list(L, c);
  push_groups(L, c);
  if (r->kind == HOOK_LAYER_PARTITION || r->kind == HOOK_EXPERT_PLACEMENT) {
    lua_rawgeti(L, pools, (lua_Integer)r->pool + 1);
    lua_setfield(L, -3, "pool");
  }
  lua_pop(L, 1); /* pools */
  push_default(L, r);
  push_candidate(L, r);
}

/* ---- converting and checking results ---- */

/* Caps repeated reports of one kind of problem. */
#define HOOK_MAX_REPORTS 5

SrcLoc hk_result_loc(const Run *r) {
  int line = r->ret_line ? r->ret_line : r->fn_line;
  SrcLoc loc = {r->path, line, 1};
  /* The caret goes under the line's first non-blank character. */
  int cur = 1;
  for (size_t i = 0; line > 0 && i < r->len; i++) {
    if (cur == line) {
      int col = 1;
      while (i < r->len && (r->text[i] == ' ' || r->text[i] == '\t')) i++, col++;
      loc.col = col;
      break;
    }
    if (r->text[i] == '\n') cur++;
  }
  return loc;
}

void hk_fmt_number(char *buf, size_t n, double v) {
  if (isnan(v)) snprintf(buf, n, "nan");
  else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
  else snprintf(buf, n, "%.17g", v);
}

/* Describes the value at idx for a message: 3, 2.5, nan, "text", a table. */
static void describe(lua_State *L, int idx, char *buf, size_t n) {
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
    else hk_fmt_number(buf, n, lua_tonumber(L, idx));
    break;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    snprintf(buf, n, "\"%.*s\"%s", len > 24 ? 24 : (int)len, s, len > 24 ? "..." : "");
    for (char *p = buf; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    break;
  }
  case LUA_TBOOLEAN: snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
  case LUA_TNIL: snprintf(buf, n, "nil"); break;
  default: snprintf(buf, n, "a %s", luaL_typename(L, idx)); break;
  }
}

/* Reads the integer at idx into *out; reports E0609 for anything else
 * (strings, NaN, 2.5, nil). subject names the value ("placement[3].gpu"). */
static bool want_int(Run *r, lua_State *L, int idx, const char *subject, int64_t *out) {
  int isnum = 0;
  lua_Integer v = 0;
  if (lua_type(L, idx) == LUA_TNUMBER) v = lua_tointegerx(L, idx, &isnum);
  if (isnum) {
    *out = (int64_t)v;
    return true;
  }
  char buf[64];
  describe(L, idx, buf, sizeof buf);
  Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r), "`%s` is %s, expected an integer",
                    subject, buf);
  if (lua_type(L, idx) == LUA_TNUMBER)
    diag_help(g, "round with math.floor or use integer division `//`");
  return false;
}

static bool want_table(Run *r, lua_State *L, int idx, const char *subject, const char *shape) {
  if (lua_type(L, idx) == LUA_TTABLE) return true;
  char buf[64];
  describe(L, idx, buf, sizeof buf);
  Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r), "`%s` is %s, expected a table", subject, buf);
  diag_help(g, "the %s hook returns %s (docs/hooks.md)", hook_kind_name(r->kind), shape);
  return false;
}

static const char placement_shape[] = "a list of {rank = R, node = N, gpu = G}, one per rank";
static const char partition_shape[] = "a list of layer counts, one per pp stage";
static const char expert_shape[] = "a list, one per expert, of lists of ep ranks";

/* Entry i of the placement, the table on top of the stack, into v (rank,
 * node, gpu); false after reporting a missing or non-integer field. */
static bool read_placement_entry(Run *r, lua_State *L, size_t i, int64_t v[3]) {
  char subj[64];
  snprintf(subj, sizeof subj, "placement[%zu]", i);
  if (!want_table(r, L, -1, subj, placement_shape)) return false;
  static const char *const f[3] = {"rank", "node", "gpu"};
  bool ok = true;
  for (int k = 0; k < 3; k++) {
    lua_pushstring(L, f[k]);
    lua_rawget(L, -2);
    snprintf(subj, sizeof subj, "placement[%zu].%s", i, f[k]);
    if (!want_int(r, L, -1, subj, &v[k])) ok = false;
    lua_pop(L, 1);
  }
  return ok;
}

/* Entry i's rank, node and gpu exist and the rank is not placed yet
 * (where[rank]: the entry that placed it, 0 for none). */
static bool check_placement_entry(Run *r, size_t i, const int64_t v[3], const size_t *where) {
  const HookCtx *c = r->ctx;
  Diag *g;
  if (v[0] < 0 || (uint64_t)v[0] >= c->nranks) {
    g = diag_at(r->d, DIAG_E0610, hk_result_loc(r), "`placement[%zu].rank` = %lld, but ranks are 0-%zu", i,
                (long long)v[0], c->nranks - 1);
    diag_help(g, "ranks are global and 0-based; ctx.world_size is %zu", c->nranks);
  } else if (where[v[0]]) {
    g = diag_at(r->d, DIAG_E0611, hk_result_loc(r),
                "rank %lld is placed twice, by `placement[%zu]` and `placement[%zu]`", (long long)v[0],
                where[v[0]], i);
    diag_help(g, "place every rank exactly once");
  } else if (v[1] < 0 || v[1] >= c->nodes) {
    g = diag_at(r->d, DIAG_E0610, hk_result_loc(r),
                "`placement[%zu].node` = %lld, but the cluster has %lld nodes (0-%lld)", i, (long long)v[1],
                (long long)c->nodes, (long long)c->nodes - 1);
    diag_help(g, "nodes are numbered from 0 to hardware.nodes - 1");
  } else if (v[2] < 0 || v[2] >= c->gpus_per_node) {
    g = diag_at(r->d, DIAG_E0610, hk_result_loc(r),
                "`placement[%zu].gpu` = %lld, but nodes have %lld GPUs (0-%lld)", i, (long long)v[2],
                (long long)c->gpus_per_node, (long long)c->gpus_per_node - 1);
    diag_help(g, "GPUs are numbered from 0 to hardware.gpus_per_node - 1 on each node");
  } else {
    return true;
  }
  return false;
}

static bool convert_placement(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  if (!want_table(r, L, res, "placement", placement_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if (n != c->nranks) {
    Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r),
                      "`placement` has %zu entries, expected one per rank (%zu)", n, c->nranks);
    diag_help(g, "the placement hook returns %s", placement_shape);
    return false;
  }
  bool ok = true;
  int reports = 0;
  size_t *where = rp_calloc(c->nranks ? c->nranks : 1, sizeof *where);
  lua_checkstack(L, 8);
  for (size_t i = 1; i <= n && reports < HOOK_MAX_REPORTS; i++) {
    int64_t v[3];
    lua_rawgeti(L, res, (lua_Integer)i);
    bool eok = read_placement_entry(r, L, i, v);
    lua_pop(L, 1);
    if (!eok || !check_placement_entry(r, i, v, where)) {
      ok = false;
      reports++;
      continue;
    }
    where[v[0]] = i;
    r->node[v[0]] = v[1];
    r->gpu[v[0]] = v[2];
  }
  free(where);
  if (!ok) return false;
  return hook_check_placement(c, r->node, r->gpu, hk_result_loc(r), "placement", r->d);
}

static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* No GPU holds two ranks (E0611): sort (GPU id, rank) pairs and compare
 * neighbours. */
static bool placement_gpus_unique(const HookCtx *c, const int64_t *node, const int64_t *gpu,
                                  SrcLoc where, const char *what, Diags *d) {
  bool ok = true;
  int reports = 0;
  int64_t gpn = c->gpus_per_node;
  size_t n = c->nranks;
  int64_t (*ids)[2] = rp_malloc((n ? n : 1) * sizeof *ids);
  for (size_t r = 0; r < n; r++) {
    ids[r][0] = node[r] * gpn + gpu[r]; /* < nodes * gpn, which the spec bounds */
    ids[r][1] = (int64_t)r;
  }
  qsort(ids, n, sizeof *ids, cmp_pair);
  for (size_t i = 1; i < n && reports < HOOK_MAX_REPORTS; i++) {
    if (ids[i][0] != ids[i - 1][0]) continue;
    int64_t r = ids[i][1];
    Diag *g = diag_at(d, DIAG_E0611, where, "%s: GPU %lld of node %lld holds ranks %lld and %lld",
                      what, (long long)gpu[r], (long long)node[r], (long long)ids[i - 1][1],
                      (long long)r);
    diag_help(g, "every rank needs a GPU of its own");
    ok = false;
    reports++;
  }
  free(ids);
  return ok;
}

/* tp groups inside one scale-up domain (and one node when the domain is
 * not larger than a node): E0613, or W0601 once when the spec allows it. */
static bool placement_tp_in_domain(const HookCtx *c, const int64_t *node, const int64_t *gpu,
                                   SrcLoc where, const char *what, Diags *d) {
  bool ok = true;
  int reports = 0;
  int64_t gpn = c->gpus_per_node;
  int64_t dom = c->domain > 0 ? c->domain : gpn;
  bool warned = false;
  for (size_t i = 0; i < c->ngroups && reports < HOOK_MAX_REPORTS; i++) {
    const HookGroup *g = &c->groups[i];
    if (strcmp(g->kind, "tp") != 0 || g->n < 2) continue;
    int64_t r0 = g->ranks[0];
    int64_t d0 = (node[r0] * gpn + gpu[r0]) / dom;
    for (size_t k = 1; k < g->n; k++) {
      int64_t rk = g->ranks[k];
      int64_t dk = (node[rk] * gpn + gpu[rk]) / dom;
      if (dk == d0 && (dom > gpn || node[rk] == node[r0])) continue;
      if (c->allow_tp_across_domain) {
        if (!warned) {
          Diag *w = diag_at(d, DIAG_W0601, where,
                            "%s: tp group of pool `%s` instance %lld spans ranks %lld (node %lld GPU %lld) and %lld (node %lld GPU %lld) in different scale-up domains",
                            what, c->pools[g->pool].name, (long long)g->instance, (long long)r0,
                            (long long)node[r0], (long long)gpu[r0], (long long)rk,
                            (long long)node[rk], (long long)gpu[rk]);
          diag_note(w, "allowed by deployment.allow_tp_across_domain; tp collectives then cross the scale-out network");
          warned = true;
        }
        break;
      }
      Diag *e = diag_at(d, DIAG_E0613, where,
                        "%s: tp group of pool `%s` instance %lld spans ranks %lld (node %lld GPU %lld) and %lld (node %lld GPU %lld), expected one scale-up domain of %lld GPUs",
                        what, c->pools[g->pool].name, (long long)g->instance, (long long)r0,
                        (long long)node[r0], (long long)gpu[r0], (long long)rk,
                        (long long)node[rk], (long long)gpu[rk], (long long)dom);
      diag_help(e, "put the ranks of each tp group on GPUs of one domain, or set deployment.allow_tp_across_domain: true");
      ok = false;
      reports++;
      break;
    }
  }
  return ok;
}

bool hook_check_placement(const HookCtx *c, const int64_t *node, const int64_t *gpu,
                          SrcLoc where, const char *what, Diags *d) {
  bool ok = true;
  int reports = 0;
  int64_t gpn = c->gpus_per_node;
  for (size_t r = 0; r < c->nranks && reports < HOOK_MAX_REPORTS; r++) {
    if (node[r] < 0 || node[r] >= c->nodes) {
      Diag *g = diag_at(d, DIAG_E0610, where, "%s: rank %zu is on node %lld, but the cluster has %lld nodes (0-%lld)",
                        what, r, (long long)node[r], (long long)c->nodes, (long long)c->nodes - 1);
      diag_help(g, "nodes are numbered from 0 to hardware.nodes - 1");
      ok = false;
      reports++;
    } else if (gpu[r] < 0 || gpu[r] >= gpn) {
      Diag *g = diag_at(d, DIAG_E0610, where, "%s: rank %zu is on GPU %lld, but nodes have %lld GPUs (0-%lld)",
                        what, r, (long long)gpu[r], (long long)gpn, (long long)gpn - 1);
      diag_help(g, "GPUs are numbered from 0 to hardware.gpus_per_node - 1 on each node");
      ok = false;
      reports++;
    }
  }
  if (!ok) return false;
  return placement_gpus_unique(c, node, gpu, where, what, d) &&
         placement_tp_in_domain(c, node, gpu, where, what, d);
}

static bool convert_partition(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  const HookPool *p = &c->pools[r->pool];
  if (!want_table(r, L, res, "layer_partition", partition_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if ((int64_t)n != p->pp) {
    Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r),
                      "`layer_partition` has %zu entries, expected one per pp stage of pool `%s` (%lld)",
                      n, p->name, (long long)p->pp);
    diag_help(g, "the layer_partition hook returns %s", partition_shape);
    return false;
  }
  bool ok = true;
  int64_t sum = 0;
  for (size_t i = 1; i <= n; i++) {
    char subj[48];
    snprintf(subj, sizeof subj, "layer_partition[%zu]", i);
    lua_rawgeti(L, res, (lua_Integer)i);
    int64_t v;
    bool iok = want_int(r, L, -1, subj, &v);
    lua_pop(L, 1);
    if (!iok) {
      ok = false;
      continue;
    }
    if (v < 1 || v > c->layers) {
      Diag *g = diag_at(r->d, DIAG_E0610, hk_result_loc(r),
                        "`layer_partition[%zu]` = %lld, expected 1 to %lld layers", i,
                        (long long)v, (long long)c->layers);
      diag_help(g, "every pp stage holds at least one layer");
      ok = false;
      continue;
    }
    r->layers[i - 1] = v;
    if (!ck_add(sum, v, &sum)) ok = false;
  }
  if (ok && sum != c->layers) {
    StrBuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < n; i++) sb_printf(&sb, "%s%lld", i ? " + " : "", (long long)r->layers[i]);
    Diag *g = diag_at(r->d, DIAG_E0616, hk_result_loc(r),
                      "layer partition %s = %lld, expected the model's %lld layers", sb.buf,
                      (long long)sum, (long long)c->layers);
    diag_help(g, "the %lld stages of pool `%s` must hold every layer exactly once",
              (long long)p->pp, p->name);
    sb_free(&sb);
    ok = false;
  }
  return ok;
}

typedef RP_VEC(int64_t) RankVec;

/* The ep ranks of expert e, the table on top of the stack, appended to
 * *ranks and counted in load; false after reporting what is wrong. */
static bool read_expert_ranks(Run *r, lua_State *L, int64_t e, const HookPool *p, RankVec *ranks,
                              int64_t *load) {
  int64_t ep = p->ep;
  char subj[64];
  snprintf(subj, sizeof subj, "expert_placement[%lld]", (long long)e + 1);
  if (!want_table(r, L, -1, subj, expert_shape)) return false;
  size_t k = (size_t)lua_rawlen(L, -1);
  if (k == 0 || (int64_t)k > ep) {
    Diag *g = diag_at(r->d, DIAG_E0610, hk_result_loc(r), "`%s` (expert %lld) lists %zu ranks, expected 1 to %lld",
                      subj, (long long)e, k, (long long)ep);
    diag_help(g, "every expert needs at least one replica, at most one per ep rank");
    return false;
  }
  size_t start = ranks->len;
  for (size_t j = 1; j <= k; j++) {
    char s2[96];
    snprintf(s2, sizeof s2, "%s[%zu]", subj, j);
    lua_rawgeti(L, -1, (lua_Integer)j);
    int64_t v;
    bool iok = want_int(r, L, -1, s2, &v);
    lua_pop(L, 1);
    if (!iok) return false;
    if (v < 0 || v >= ep) {
      Diag *g = diag_at(r->d, DIAG_E0610, hk_result_loc(r), "`%s` = %lld, but pool `%s` has ep ranks 0-%lld", s2,
                        (long long)v, p->name, (long long)ep - 1);
      diag_help(g, "expert placements name ranks of the expert-parallel group, 0-based");
      return false;
    }
    for (size_t q = start; q < ranks->len; q++) {
      if (ranks->items[q] != v) continue;
      Diag *g = diag_at(r->d, DIAG_E0611, hk_result_loc(r), "expert %lld is on ep rank %lld twice (`%s`)",
                        (long long)e, (long long)v, s2);
      diag_help(g, "a rank holds at most one replica of an expert");
      return false;
    }
    rp_vec_push(ranks, v);
    load[v]++;
  }
  return true;
}

/* Every ep rank of pool p holds the same number of the map's replicas
 * (E0612 otherwise); sets m->slots_per_rank. */
static bool check_expert_balance(Run *r, const HookPool *p, HookExpertMap *m, const int64_t *load) {
  int64_t ep = p->ep, total = m->offsets[m->experts];
  if (total % ep != 0) {
    Diag *g = diag_at(r->d, DIAG_E0612, hk_result_loc(r),
                      "%lld expert replicas do not spread evenly over %lld ep ranks of pool `%s`",
                      (long long)total, (long long)ep, p->name);
    diag_help(g, "every ep rank holds the same number of physical experts: use a multiple of %lld replicas (such as %lld or %lld)",
              (long long)ep, (long long)(total / ep * ep), (long long)((total / ep + 1) * ep));
    return false;
  }
  m->slots_per_rank = total / ep;
  for (int64_t k = 0; k < ep; k++) {
    if (load[k] == m->slots_per_rank) continue;
    Diag *g = diag_at(r->d, DIAG_E0612, hk_result_loc(r),
                      "ep rank %lld of pool `%s` holds %lld experts, expected %lld (%lld replicas over %lld ranks)",
                      (long long)k, p->name, (long long)load[k],
                      (long long)m->slots_per_rank, (long long)total, (long long)ep);
    diag_help(g, "every ep rank holds the same number of physical experts");
    return false;
  }
  return true;
}

static bool convert_experts(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  const HookPool *p = &c->pools[r->pool];
  int64_t E = c->experts, ep = p->ep;
  if (!want_table(r, L, res, "expert_placement", expert_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if ((int64_t)n != E) {
    Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r),
                      "`expert_placement` has %zu entries, expected one per expert (%lld)", n,
                      (long long)E);
    diag_help(g, "the expert_placement hook returns %s", expert_shape);
    return false;
  }
  HookExpertMap *m = &r->em;
  m->experts = E;
  m->ep = ep;
  m->offsets = rp_calloc((size_t)E + 1, sizeof *m->offsets);
  RankVec ranks = {0};
  int64_t *load = rp_calloc((size_t)ep, sizeof *load);
  bool ok = true;
  int reports = 0;
  lua_checkstack(L, 8);
  for (int64_t e = 0; e < E && reports < HOOK_MAX_REPORTS; e++) {
    lua_rawgeti(L, res, (lua_Integer)e + 1);
    m->offsets[e] = (int64_t)ranks.len;
    if (!read_expert_ranks(r, L, e, p, &ranks, load)) {
      ok = false;
      reports++;
    }
    lua_pop(L, 1);
  }
  m->offsets[E] = (int64_t)ranks.len;
  m->ranks = ranks.items ? ranks.items : rp_calloc(1, sizeof(int64_t));
  if (ok) ok = check_expert_balance(r, p, m, load);
  free(load);
  return ok;
}

static bool convert_objective(Run *r, lua_State *L, int res) {
  if (lua_type(L, res) != LUA_TNUMBER) {
    char buf[64];
    describe(L, res, buf, sizeof buf);
    Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r), "`objective` is %s, expected a number", buf);
    diag_help(g, "the objective hook returns a score; higher is better");
    return false;
  }
  double v = lua_tonumber(L, res);
  if (!isfinite(v)) {
    char buf[32];
    hk_fmt_number(buf, sizeof buf, v);
    Diag *g = diag_at(r->d, DIAG_E0610, hk_result_loc(r), "`objective` is %s, expected a finite number", buf);
    diag_help(g, "guard divisions: a candidate with no throughput can score 0");
    return false;
  }
  r->score = v;
  return true;
}


/* filter: true keeps, false drops, a string drops and says why. */
static bool convert_filter(Run *r, lua_State *L, int res) {
  int t = lua_type(L, res);
  if (t == LUA_TBOOLEAN) {
    r->keep = lua_toboolean(L, res);
    return true;
  }
  size_t n = 0;
  const char *s = t == LUA_TSTRING ? lua_tolstring(L, res, &n) : NULL;
  if (s && n > 0 && n <= HOOK_WHY_MAX && strlen(s) == n) {
    r->keep = false;
    r->why = rp_strdup(s);
    return true;
  }
  char buf[64];
  describe(L, res, buf, sizeof buf);
  Diag *g = diag_at(r->d, DIAG_E0609, hk_result_loc(r), "`filter` is %s, expected true, false or a reason", buf);
  diag_help(g, "return true to keep the candidate, false or a short reason (1 to %d bytes, no NUL) to drop it",
            HOOK_WHY_MAX);
  return false;
}

bool hk_convert(Run *r, lua_State *L, int res) {
  switch (r->kind) {
  case HOOK_FILTER: return convert_filter(r, L, res);
  case HOOK_PLACEMENT: return convert_placement(r, L, res);
  case HOOK_LAYER_PARTITION: return convert_partition(r, L, res);
  case HOOK_EXPERT_PLACEMENT: return convert_experts(r, L, res);
  default: return convert_objective(r, L, res);
  }
}
