/*
 * hooks.c: the four hook entry points and what they share: limits, hook
 * files, the context, one sandboxed run (load, call, report), the
 * determinism check. The sandbox itself is hook_sandbox.c, the context
 * tables and result conversion hook_result.c (hook_run.h).
 *
 * Input:  a HookEnv (which Lua files, which limits) and a HookCtx (the
 *         topology, pools, ranks and groups a hook sees), both plain C.
 * Output: plain C results (node/GPU per rank, layers per pp stage, an
 *         expert -> ep rank map, a score), or diagnostics E06xx.
 * Invariants:
 *  - every call runs in its own fresh lua_State, created with a counting
 *    allocator (the memory cap) and a count hook (instruction budget and
 *    wall-clock deadline); nothing a hook does survives the call;
 *  - the hook sees only a whitelisted environment: no io, os, debug,
 *    package/require, dofile, loadfile, print; `load` compiles text only;
 *    the string metatable is hidden behind a read-only proxy;
 *  - no string the hook makes is longer than HOOK_STRING_MAX, and the
 *    count hook runs more often once long strings exist, so that string
 *    operations between two checks stay bounded (docs/hooks.md, "Long
 *    strings");
 *  - once a limit is hit or the sandbox refused something, the run is
 *    "killed": every later instruction raises again and the sandbox's pcall
 *    rethrows, so a hook cannot catch its way past a limit;
 *  - no Lua API call that can raise runs outside lua_pcall: setup, the call
 *    and the conversion of the result all run inside one protected C
 *    function, and the conversion reads the result with raw accesses only,
 *    so no user metamethod runs while the compiler reads it;
 *  - a result is converted and then validated in C; it is never trusted.
 */
#include "hook_run.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[HOOK__COUNT] = {
    "placement", "layer_partition", "expert_placement", "objective", "filter"};

const char *hook_kind_name(HookKind k) {
  RP_ASSERT((unsigned)k < HOOK__COUNT);
  return kind_names[k];
}

/* ======================================================================
 * Limits and the files of one compilation
 * ====================================================================== */

/* The one table of hook tunables: name, default, accepted range. */
enum { SET_INSTRUCTIONS, SET_MEMORY, SET_TIMEOUT, SET_TWICE, SET_TOTAL, SET__COUNT };
static const struct {
  const char *env;
  int64_t def, lo, hi;
  const char *expect;
} settings[SET__COUNT] = {
    {"RANKPLAN_HOOK_INSTRUCTIONS", 100000000, 1000, INT64_C(1000000000000),
     "an instruction count from 1000 to 1000000000000"},
    {"RANKPLAN_HOOK_MEMORY", INT64_C(64) << 20, INT64_C(1) << 20, INT64_C(1) << 40,
     "bytes from 1MiB to 1TiB, such as 67108864 or 64MiB"},
    {"RANKPLAN_HOOK_TIMEOUT_MS", 5000, 1, 3600000,
     "milliseconds from 1 to 3600000"},
    {"RANKPLAN_HOOK_TWICE", 0, 0, 1, "0 or 1"},
    /* All hook calls of one command together: a search scores every row
     * of its ranking with the objective hook, so without this a slow hook
     * times the row count is unbounded. A minute: twelve calls that use
     * their whole 5 s deadline, far more than a working hook needs
     * (docs/hooks.md, "Limits"). */
    {"RANKPLAN_HOOK_TOTAL_MS", 60000, 1, 86400000,
     "milliseconds from 1 to 86400000"},
};

/* Nanoseconds of hook calls run by this process (one command). */
static int64_t total_spent_ns;


void hook_limits_default(HookLimits *lim) {
  lim->instructions = settings[SET_INSTRUCTIONS].def;
  lim->memory = settings[SET_MEMORY].def;
  lim->timeout_ms = settings[SET_TIMEOUT].def;
  lim->twice = settings[SET_TWICE].def != 0;
  lim->total_ms = settings[SET_TOTAL].def;
}

/* Parses a decimal integer with an optional binary suffix (memory only). */
static bool parse_setting(const char *s, bool bytes, int64_t *out) {
  if (!s || !*s) return false;
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0 || s[0] == '-' || s[0] == '+' || s[0] == ' ') return false;
  int64_t mul = 1;
  if (*end) {
    if (!bytes) return false;
    if (strcmp(end, "KiB") == 0) mul = INT64_C(1) << 10;
    else if (strcmp(end, "MiB") == 0) mul = INT64_C(1) << 20;
    else if (strcmp(end, "GiB") == 0) mul = INT64_C(1) << 30;
    else return false;
  }
  return ck_mul((int64_t)v, mul, out);
}

bool hook_env_init(HookEnv *env, Diags *d) {
  memset(env, 0, sizeof *env);
  hook_limits_default(&env->lim);
  bool ok = true;
  int64_t *dst[SET__COUNT] = {&env->lim.instructions, &env->lim.memory,
                              &env->lim.timeout_ms, NULL, &env->lim.total_ms};
  for (int i = 0; i < SET__COUNT; i++) {
    const char *s = getenv(settings[i].env);
    if (!s) continue;
    int64_t v;
    if (!parse_setting(s, i == SET_MEMORY, &v) || v < settings[i].lo || v > settings[i].hi) {
      SrcLoc none = {NULL, 0, 0};
      Diag *g = diag_at(d, DIAG_E0615, none, "`%s` is \"%s\", expected %s",
                        settings[i].env, s, settings[i].expect);
      diag_help(g, "unset it to use the default (%lld)", (long long)settings[i].def);
      ok = false;
      continue;
    }
    if (i == SET_TWICE) env->lim.twice = v != 0;
    else *dst[i] = v;
  }
  return ok;
}

void hook_env_set(HookEnv *env, Diags *d, HookKind k, const char *path, SrcLoc loc) {
  RP_ASSERT((unsigned)k < HOOK__COUNT);
  free(env->file[k].text);
  memset(&env->file[k], 0, sizeof env->file[k]);
  env->file[k].path = diags_intern(d, path);
  env->file[k].loc = loc;
  env->file[k].set = true;
}

void hook_env_from_spec(HookEnv *env, Diags *d, const Spec *spec) {
  const SStr *p[HOOK__COUNT] = {
      &spec->deployment.hooks.placement, &spec->deployment.hooks.layer_partition,
      &spec->deployment.hooks.expert_placement, &spec->deployment.hooks.objective,
      &spec->deployment.hooks.filter};
  const char *slash = spec->file ? strrchr(spec->file, '/') : NULL;
  for (int k = 0; k < HOOK__COUNT; k++) {
    if (!p[k]->set || !p[k]->v) continue;
    char *path;
    if (p[k]->v[0] == '/' || !slash) path = rp_strdup(p[k]->v);
    else path = rp_sprintf("%.*s/%s", (int)(slash - spec->file), spec->file, p[k]->v);
    hook_env_set(env, d, (HookKind)k, path, p[k]->loc);
    free(path);
  }
}

void hook_env_free(HookEnv *env) {
  for (int k = 0; k < HOOK__COUNT; k++) free(env->file[k].text);
  memset(env, 0, sizeof *env);
}

/* Hook files are small programs; a cap keeps a stray path from reading a
 * disk image into memory. */
#define HOOK_FILE_MAX (4u << 20)

/* Reads hook k's file once; reports E0601 once. */
static bool env_load(HookEnv *env, HookKind k, Diags *d) {
  if (env->file[k].loaded) return true;
  if (env->file[k].failed) return false;
  char *text;
  size_t len;
  /* Only files named as Lua source are read: diagnostics quote the lines
   * of a hook file, and a spec that names another file (a key, a password
   * file) must not get its text printed into a CI log. */
  const char *path = env->file[k].path;
  size_t plen = strlen(path);
  int e = plen > 4 && strcmp(path + plen - 4, ".lua") == 0
              ? rp_read_file(path, HOOK_FILE_MAX, &text, &len) : EINVAL;
  if (e) {
    Diag *g = diag_at(d, DIAG_E0601, env->file[k].loc, "cannot read %s hook `%s`: %s",
                      kind_names[k], path,
                      e == EFBIG ? "file is over 4 MiB"
                      : e == EINVAL ? "hook files are Lua source files whose names end in `.lua`"
                      : rp_strerror(e));
    diag_help(g, "hook paths are relative to the directory of the spec file");
    env->file[k].failed = true;
    return false;
  }
  env->file[k].text = text;
  env->file[k].len = len;
  env->file[k].loaded = true;
  diags_add_source(d, env->file[k].path, text, len);
  return true;
}

bool hook_session_open(HookSession *hs, const Spec *spec, Diags *d) {
  memset(hs, 0, sizeof *hs);
  hook_env_init(&hs->env, d);
  hook_env_from_spec(&hs->env, d, spec);
  return !diags_failed(d) && hook_ctx_build(&hs->ctx, spec, d);
}

void hook_session_close(HookSession *hs) {
  hook_ctx_free(&hs->ctx); /* safe after a failed or skipped build */
  hook_env_free(&hs->env);
}

/* ======================================================================
 * The context: ranks and groups from pools
 * ====================================================================== */

enum { DIM_TP, DIM_CP, DIM_DP, DIM_PP, DIM__COUNT };
static const char *const dim_names[DIM__COUNT] = {"tp", "cp", "dp", "pp"};

static int64_t pool_dim(const HookPool *p, int dim) {
  switch (dim) {
  case DIM_TP: return p->tp;
  case DIM_CP: return p->cp;
  case DIM_DP: return p->dp;
  default: return p->pp;
  }
}

/* Dimension order, innermost first, from an order string; ep and etp add no
 * coordinate and names the front end rejects are skipped; missing
 * dimensions are appended in the default order. */
static void parse_order(const char *order, int out[DIM__COUNT]) {
  int n = 0;
  bool seen[DIM__COUNT] = {false, false, false, false};
  const char *s = order ? order : SPEC_ORDER_DEFAULT;
  while (*s) {
    size_t len = strcspn(s, "-");
    for (int i = 0; i < DIM__COUNT; i++)
      if (len == 2 && strncmp(s, dim_names[i], 2) == 0 && !seen[i]) {
        seen[i] = true;
        out[n++] = i;
      }
    s += len;
    if (*s == '-') s++;
  }
  for (int i = 0; i < DIM__COUNT; i++)
    if (!seen[i]) out[n++] = i;
}

void hook_ctx_free(HookCtx *ctx) {
  for (size_t i = 0; i < ctx->ngroups; i++) free(ctx->groups[i].ranks);
  free(ctx->groups);
  free(ctx->ranks);
  free(ctx->pools);
  ctx->groups = NULL;
  ctx->ranks = NULL;
  ctx->pools = NULL;
  ctx->ngroups = ctx->nranks = ctx->npools = 0;
}

/* Hook contexts are built for every rank of the cluster; beyond this the
 * Lua tables alone would not fit any sensible memory. */
#define HOOK_MAX_RANKS (INT64_C(1) << 24)

bool hook_ctx_layout(HookCtx *ctx, const char *order, Diags *d) {
  int ord[DIM__COUNT];
  parse_order(order, ord);
  SrcLoc none = {NULL, 0, 0};
  int64_t total = 0;
  for (size_t p = 0; p < ctx->npools; p++) {
    HookPool *pl = &ctx->pools[p];
    CkState st = {true};
    pl->size = ckm(&st, ckm(&st, pl->tp, pl->cp), ckm(&st, pl->dp, pl->pp));
    int64_t n = ckm(&st, pl->replicas, pl->size);
    pl->first_rank = total;
    total = cka(&st, total, n);
    if (!st.ok || pl->size <= 0 || pl->replicas <= 0 || total > HOOK_MAX_RANKS) {
      diag_at(d, DIAG_E0618, none,
              "pool `%s` makes the hook context too large, expected at most %lld ranks",
              pl->name ? pl->name : "?", (long long)HOOK_MAX_RANKS);
      return false;
    }
  }
  ctx->nranks = (size_t)total;
  ctx->ranks = rp_calloc(ctx->nranks ? ctx->nranks : 1, sizeof *ctx->ranks);
  RP_VEC(HookGroup) groups = {0};
  for (size_t p = 0; p < ctx->npools; p++) {
    const HookPool *pl = &ctx->pools[p];
    int64_t stride[DIM__COUNT], s = 1;
    for (int i = 0; i < DIM__COUNT; i++) {
      stride[ord[i]] = s;
      s *= pool_dim(pl, ord[i]);
    }
    for (int64_t inst = 0; inst < pl->replicas; inst++) {
      int64_t base = pl->first_rank + inst * pl->size;
      for (int64_t l = 0; l < pl->size; l++) {
        HookRank *r = &ctx->ranks[base + l];
        r->pool = (int64_t)p;
        r->instance = inst;
        r->local = l;
        r->tp = (l / stride[DIM_TP]) % pl->tp;
        r->cp = (l / stride[DIM_CP]) % pl->cp;
        r->dp = (l / stride[DIM_DP]) % pl->dp;
        r->pp = (l / stride[DIM_PP]) % pl->pp;
      }
      /* One group per dimension per combination of the other coordinates:
       * its members are the ranks whose coordinate along dim is 0, each
       * followed by its stride multiples. Listed in ascending rank order. */
      for (int dim = 0; dim < DIM__COUNT; dim++) {
        int64_t sz = pool_dim(pl, dim);
        for (int64_t l = 0; l < pl->size; l++) {
          if ((l / stride[dim]) % sz != 0) continue;
          HookGroup g = {dim_names[dim], (int64_t)p, inst, (size_t)sz,
                         rp_malloc((size_t)sz * sizeof(int64_t))};
          for (int64_t k = 0; k < sz; k++) g.ranks[k] = base + l + k * stride[dim];
          rp_vec_push(&groups, g);
        }
      }
      HookGroup g = {"instance", (int64_t)p, inst, (size_t)pl->size,
                     rp_malloc((size_t)pl->size * sizeof(int64_t))};
      for (int64_t k = 0; k < pl->size; k++) g.ranks[k] = base + k;
      rp_vec_push(&groups, g);
    }
  }
  ctx->groups = groups.items;
  ctx->ngroups = groups.len;
  return true;
}

bool hook_ctx_build(HookCtx *ctx, const Spec *s, Diags *d) {
  memset(ctx, 0, sizeof *ctx);
  const HardwareSpec *hw = &s->hardware;
  const ModelSpec *m = &s->model;
  ctx->nodes = hw->nodes.v;
  ctx->gpus_per_node = hw->gpus_per_node.v;
  ctx->domain = hw->scale_up.domain.set ? hw->scale_up.domain.v : hw->gpus_per_node.v;
  ctx->nodes_per_rack = hw->nodes_per_rack.set ? hw->nodes_per_rack.v : 0;
  ctx->allow_tp_across_domain = s->deployment.allow_tp_across_domain.v;
  ctx->model_name = m->name.set ? m->name.v : m->preset.v;
  ctx->layers = m->layers.v;
  ctx->hidden_size = m->hidden_size.v;
  ctx->vocab_size = m->vocab_size.v;
  ctx->heads = m->attention.heads.v;
  ctx->kv_heads = m->attention.kv_heads.v;
  ctx->head_dim = m->attention.head_dim.v;
  ctx->intermediate_size = m->ffn.intermediate_size.v;
  if (m->moe.present) {
    ctx->experts = m->moe.experts.v;
    ctx->top_k = m->moe.top_k.v;
    ctx->shared_experts = m->moe.shared_experts.v;
    ctx->expert_intermediate_size = m->moe.expert_intermediate_size.v;
    ctx->dense_layers = m->moe.dense_layers.v;
  }
  ctx->npools = s->deployment.npools;
  ctx->pools = rp_calloc(ctx->npools ? ctx->npools : 1, sizeof *ctx->pools);
  for (size_t i = 0; i < ctx->npools; i++) {
    const PoolSpec *ps = &s->deployment.pools[i];
    HookPool *p = &ctx->pools[i];
    p->name = ps->name.v;
    p->role = (PoolRole)ps->role.v;
    p->replicas = ps->replicas.set ? ps->replicas.v : 1;
    p->tp = ps->tp.set ? ps->tp.v : 1;
    p->pp = ps->pp.set ? ps->pp.v : 1;
    p->cp = ps->cp.set ? ps->cp.v : 1;
    p->dp = ps->dp.set ? ps->dp.v : 1;
    p->ep = s->model.moe.present && ps->ep.set ? ps->ep.v : 1; /* W0204: none on a dense model */
    p->etp = ps->etp.set ? ps->etp.v : 1;
    p->dcp = ps->dcp.set ? ps->dcp.v : 1;
  }
  if (!hook_ctx_layout(ctx, s->deployment.order.set ? s->deployment.order.v : NULL, d)) {
    hook_ctx_free(ctx);
    return false;
  }
  return true;
}


/* Feeds the hook file to Lua a line at a time, so that r->load_line is
 * the line the lexer is on: a string the lexer makes ends on the line last
 * fed (the character it reads past the string's end is on the same line,
 * the newline at the latest). Lines end at '\n'. */
static const char *read_line(lua_State *L, void *ud, size_t *size) {
  (void)L;
  Run *r = ud;
  if (r->load_pos >= r->len) {
    *size = 0;
    return NULL;
  }
  const char *p = r->text + r->load_pos;
  const char *nl = memchr(p, '\n', r->len - r->load_pos);
  *size = nl ? (size_t)(nl - p) + 1 : r->len - r->load_pos;
  r->load_pos += *size;
  r->load_line++;
  return p;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The run's deadline: its own timeout, or what is left of the command's
 * total when that comes first (then a deadline kill is E0621). A total
 * already spent kills the run before its first instruction. */
static void set_deadline(Run *r) {
  int64_t call = r->lim->timeout_ms * 1000000;
  int64_t left = r->lim->total_ms * 1000000 - total_spent_ns;
  r->total_bound = left < call;
  int64_t at = now_ns() + (r->total_bound ? (left > 0 ? left : 0) : call);
  r->deadline.tv_sec = (time_t)(at / 1000000000);
  r->deadline.tv_nsec = (long)(at % 1000000000);
}

/* The protected body of a run: sandbox, load, call, convert. */
static int run_main(lua_State *L) {
  Run *r = run_of(L);
  r->phase = PH_SETUP;
  /* What Lua allocates for a string beyond its length (the object header
   * and the terminating zero) is not in its public headers: measured on a
   * string long enough to be made on its own. */
  static const char probe[256];
  lua_pushlstring(L, probe, sizeof probe);
  RP_ASSERT(r->last_str > sizeof probe && r->last_str < 2 * sizeof probe);
  r->str_overhead = r->last_str - sizeof probe;
  lua_pop(L, 1);
  hk_build_env(L);
  int E = lua_gettop(L);
  hk_push_ctx(L, r);
  int C = lua_gettop(L);
  /* From here on the hook's own allocations count. */
  r->limit = r->used + r->lim->memory;
  r->capped = true;
  set_deadline(r);
  r->step = hk_step_for(r->longest); /* the context's strings count too */
  lua_sethook(L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, r->step);
  r->hooked = true;

  r->phase = PH_LOAD;
  if (lua_load(L, read_line, r, r->chunkname, "t") != LUA_OK) return lua_error(L);
  lua_pushvalue(L, E);
  lua_setupvalue(L, -2, 1);
  r->phase = PH_CHUNK;
  lua_call(L, 0, 1);
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_pushstring(L, kind_names[r->kind]);
    lua_rawget(L, -2);
    lua_remove(L, -2);
  }
  if (lua_type(L, -1) != LUA_TFUNCTION) {
    r->got_type = lua_typename(L, lua_type(L, -1));
    return 0;
  }
  lua_Debug ar;
  lua_pushvalue(L, -1);
  if (lua_getinfo(L, ">S", &ar) && ar.linedefined > 0) r->fn_line = ar.linedefined;
  lua_pushvalue(L, -1);
  r->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, C);
  r->phase = PH_CALL;
  lua_call(L, 1, 1);
  r->phase = PH_CONVERT;
  r->hooked = false;
  lua_sethook(L, NULL, 0, 0); /* raw reads only from here: no user code runs */
  int res = lua_gettop(L);
  r->result_ok = hk_convert(r, L, res);
  return 0;
}

/* Strips "path:line: " from a message that already has a position. */
static const char *strip_pos(const Run *r, const char *msg) {
  size_t pl = strlen(r->path);
  if (strncmp(msg, r->path, pl) == 0 && msg[pl] == ':') {
    const char *p = msg + pl + 1;
    while (*p >= '0' && *p <= '9') p++;
    if (p > msg + pl + 1 && p[0] == ':' && p[1] == ' ') return p + 2;
  }
  return msg;
}

static int line_of_msg(const Run *r, const char *msg) {
  size_t pl = strlen(r->path);
  if (msg && strncmp(msg, r->path, pl) == 0 && msg[pl] == ':') return atoi(msg + pl + 1);
  return 0;
}

/* Adds the traceback's frames as notes, skipping C frames. */
static void add_traceback(const Run *r, Diag *g) {
  if (!r->traceback) return;
  const char *p = strstr(r->traceback, "\nstack traceback:\n");
  if (!p) return;
  p += strlen("\nstack traceback:\n");
  StrBuf sb;
  sb_init(&sb);
  int n = 0;
  while (*p && n < 8) {
    while (*p == '\t' || *p == ' ') p++;
    size_t len = strcspn(p, "\n");
    if (strncmp(p, "[C]:", 4) != 0 && strncmp(p, "(...tail calls...)", 18) != 0) {
      sb_printf(&sb, "%sat %.*s", n ? "\n" : "", (int)len, p);
      n++;
    }
    p += len;
    if (*p) p++;
  }
  if (n) diag_note(g, "%s", sb.buf);
  sb_free(&sb);
}

static SrcLoc line_loc(const Run *r, int line) {
  Run tmp = *r;
  tmp.ret_line = line;
  tmp.fn_line = line;
  return line > 0 ? hk_result_loc(&tmp) : (SrcLoc){r->path, 0, 0};
}

/* A run the sandbox stopped (a limit, a denied call), or that ran out
 * of memory, as its diagnostic; false when neither happened. */
static bool report_kill(Run *r, int status, int line) {
  const char *hk = kind_names[r->kind];
  Diag *g;
  if (r->kill == KILL_STRING) {
    /* a memory error, which runs no message handler: the line is the one
     * the allocator found on the stack (report_failure) */
    g = diag_at(r->d, DIAG_E0620, line_loc(r, line),
                "%s hook built a string of %lld bytes, longer than the sandbox's limit of %lld bytes",
                hk, (long long)r->str_asked, (long long)HOOK_STRING_MAX);
    if (r->phase == PH_LOAD)
      diag_note(g, "a string literal or name in the hook file, made when the file is compiled; it ends on this line");
    diag_help(g, "keep long text as a table of shorter strings; each string a hook makes is capped at %lld bytes (docs/hooks.md, \"Long strings\")",
              (long long)HOOK_STRING_MAX);
    return true;
  }
  if (r->kill == KILL_MEMORY || status == LUA_ERRMEM) {
    g = diag_at(r->d, DIAG_E0607, line_loc(r, line),
                "%s hook went over its memory cap of %lld bytes", hk, (long long)r->lim->memory);
    diag_help(g, "build smaller tables or strings, or raise RANKPLAN_HOOK_MEMORY");
    if (line) diag_note(g, "last line run in the hook: %d", line);
    return true;
  }
  if (r->kill == KILL_BUDGET) {
    g = diag_at(r->d, DIAG_E0606, line_loc(r, line),
                "%s hook ran out of its instruction budget of %lld instructions", hk,
                (long long)r->lim->instructions);
    diag_help(g, "look for a loop that never ends, or raise RANKPLAN_HOOK_INSTRUCTIONS");
    return true;
  }
  if (r->kill == KILL_DEADLINE && r->total_bound) {
    g = diag_at(r->d, DIAG_E0621, line_loc(r, line),
                "%s hook ran past what is left of the %lld ms that all hook calls of "
                "this command may take together", hk, (long long)r->lim->total_ms);
    diag_help(g, "make the hook faster, score fewer rows (search --top), or raise "
                 "RANKPLAN_HOOK_TOTAL_MS (docs/hooks.md, \"Limits\")");
    return true;
  }
  if (r->kill == KILL_DEADLINE) {
    g = diag_at(r->d, DIAG_E0608, line_loc(r, line),
                "%s hook ran past its deadline of %lld ms", hk, (long long)r->lim->timeout_ms);
    diag_help(g, "look for a loop that never ends, or raise RANKPLAN_HOOK_TIMEOUT_MS");
    return true;
  }
  if (r->kill == KILL_COSTLY) {
    g = diag_at(r->d, DIAG_E0619, line_loc(r, line),
                "%s hook: %s of its instruction budget of %lld", hk, r->costly,
                (long long)r->lim->instructions);
    diag_help(g, "work on fewer elements or shorter strings (for a pattern: anchor it with `^`, use fewer `*`, `+`, `-` or `?`), or raise RANKPLAN_HOOK_INSTRUCTIONS (docs/hooks.md, \"Library calls\")");
    add_traceback(r, g);
    return true;
  }
  if (r->kill == KILL_DENIED) {
    g = diag_at(r->d, DIAG_E0605, line_loc(r, line), "%s hook used %s, which the sandbox does not offer",
                hk, r->denied);
    diag_help(g, "hooks compute from their context table only: no files, processes, modules or debug access (docs/hooks.md)");
    add_traceback(r, g);
    return true;
  }
  return false;
}

/* A hook that did not compile or raised an error, as its diagnostic. */
static void report_error(Run *r, int line) {
  const char *hk = kind_names[r->kind];
  Diag *g;
  if (r->phase == PH_LOAD) {
    const char *msg = r->errmsg ? r->errmsg : "?";
    int l = line_of_msg(r, msg);
    g = diag_at(r->d, DIAG_E0602, line_loc(r, l), "%s hook `%s` does not compile: %s", hk,
                r->path, strip_pos(r, msg));
    diag_help(g, "hook files are Lua 5.4 source text; precompiled chunks are refused");
    return;
  }
  const char *msg = r->errmsg ? r->errmsg : "unknown error";
  if (strstr(msg, "stack overflow")) {
    g = diag_at(r->d, DIAG_E0617, line_loc(r, line), "%s hook recursed too deep: %s", hk,
                strip_pos(r, msg));
    diag_help(g, "turn the recursion into a loop, or bound its depth");
    add_traceback(r, g);
    return;
  }
  if (r->err_type != LUA_TSTRING && r->err_type != LUA_TNUMBER) {
    g = diag_at(r->d, DIAG_E0604, line_loc(r, line),
                "%s hook raised an error with a %s value instead of a message", hk,
                r->err_type == LUA_TNIL ? "nil" : r->err_type == LUA_TTABLE ? "table"
                : r->err_type == LUA_TBOOLEAN ? "boolean" : r->err_type == LUA_TFUNCTION ? "function"
                : "non-string");
    diag_help(g, "raise errors with a string: error(\"what went wrong\")");
  } else {
    g = diag_at(r->d, DIAG_E0604, line_loc(r, line), "%s hook failed: %s", hk, strip_pos(r, msg));
  }
  add_traceback(r, g);
}

/* Turns a failed run into one diagnostic. */
static void report_failure(Run *r, int status) {
  int line = r->err_line ? r->err_line : r->last_line;
  if (r->kill == KILL_STRING && r->str_line) line = r->str_line;
  if (!report_kill(r, status, line)) report_error(r, line);
}

/* Runs hook r->kind once. Returns true when it ran and its result passed
 * conversion and every check (outputs in r). */
static bool run_once(Run *r) {
  lua_State *L = lua_newstate(hk_alloc, r);
  if (!L) {
    r->kill = KILL_MEMORY;
    report_failure(r, LUA_ERRMEM);
    return false;
  }
  *(Run **)lua_getextraspace(L) = r;
  r->L = L;
  lua_atpanic(L, hk_panic);
  if (r->perturb) {
    /* The second run of a determinism check: tables kept alive here shift
     * the addresses every later object gets, so a result that depends on
     * addresses (tostring of a table) differs. */
    lua_createtable(L, 64, 0);
    for (int i = 1; i <= 64; i++) {
      lua_createtable(L, 0, i % 7);
      lua_rawseti(L, -2, i);
    }
    luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_pushcfunction(L, hk_msgh);
  lua_pushcfunction(L, run_main);
  int64_t t0 = now_ns();
  int st = lua_pcall(L, 0, 0, 1);
  total_spent_ns += now_ns() - t0;
  bool ok = false;
  if (st != LUA_OK || r->kill) {
    report_failure(r, st);
  } else if (r->got_type) {
    Diag *g = diag_at(r->d, DIAG_E0603, (SrcLoc){r->path, 0, 0},
                      "%s hook `%s` returns a %s, expected a function or a table with a `%s` function",
                      kind_names[r->kind], r->path, r->got_type, kind_names[r->kind]);
    diag_help(g, "end the file with `return function(ctx) ... end`");
  } else {
    ok = r->result_ok;
  }
  /* Anything Lua would still run while closing is cut short. */
  r->kill = r->kill ? r->kill : KILL_DENIED;
  lua_close(L);
  return ok;
}

static void run_init(Run *r, HookEnv *env, HookKind k, const HookCtx *ctx, Diags *d) {
  memset(r, 0, sizeof *r);
  r->kind = k;
  r->lim = &env->lim;
  r->path = env->file[k].path;
  r->text = env->file[k].text;
  r->len = env->file[k].len;
  r->chunkname = rp_sprintf("@%s", r->path);
  r->ctx = ctx;
  r->d = d;
  r->fn_ref = LUA_NOREF;
  r->step = HOOK_STEP;
}

static void run_free(Run *r) {
  free(r->why);
  r->why = NULL;
  free(r->chunkname);
  free(r->errmsg);
  free(r->traceback);
  r->chunkname = r->errmsg = r->traceback = NULL;
}

static Diag *nondeterministic(Run *r, const char *fmt, ...) RP_PRINTF(2, 3);
static Diag *nondeterministic(Run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = rp_vsprintf(fmt, ap);
  va_end(ap);
  Diag *g = diag_at(r->d, DIAG_E0614, hk_result_loc(r), "%s hook gave different results on two runs: %s",
                    kind_names[r->kind], m);
  diag_help(g, "remove the source of chance: tostring() of tables or functions, math.random after reseeding, pairs() over table keys");
  free(m);
  return g;
}

/* What differs between the four hooks around a run: the run's inputs and
 * output buffers, and how the two results of a determinism check compare. */
typedef struct {
  /* Gives r its inputs and outputs from arg; second: the perturbed run of
   * RANKPLAN_HOOK_TWICE, whose outputs setup allocates. */
  void (*setup)(Run *r, const void *arg, bool second);
  /* Compares the two runs' results; false after reporting E0614. */
  bool (*same)(Run *a, Run *b);
  /* Frees the outputs setup allocated for the second run. */
  void (*release)(Run *b);
} RunKind;

/* Runs hook k once into a, and with RANKPLAN_HOOK_TWICE again in a
 * perturbed fresh state, rejecting results that differ. a is set up even
 * when the file cannot be read, so the caller always run_free()s it. */
static bool run_checked(HookEnv *env, HookKind k, const HookCtx *ctx, Diags *d,
                        const RunKind *rk, const void *arg, Run *a) {
  run_init(a, env, k, ctx, d);
  RP_ASSERT(env->file[k].set);
  if (!env_load(env, k, d)) return false;
  a->text = env->file[k].text;
  a->len = env->file[k].len;
  rk->setup(a, arg, false);
  bool ok = run_once(a);
  if (ok && env->lim.twice) {
    Run b;
    run_init(&b, env, k, ctx, d);
    b.perturb = true;
    rk->setup(&b, arg, true);
    ok = run_once(&b) && rk->same(a, &b);
    if (rk->release) rk->release(&b);
    run_free(&b);
  }
  return ok;
}

/* ---- placement ---- */

typedef struct {
  int64_t *node, *gpu;
} PlaceArg;

static void place_setup(Run *r, const void *arg, bool second) {
  const PlaceArg *p = arg;
  size_t n = r->ctx->nranks ? r->ctx->nranks : 1;
  r->node = second ? rp_calloc(n, sizeof(int64_t)) : p->node;
  r->gpu = second ? rp_calloc(n, sizeof(int64_t)) : p->gpu;
}

static bool place_same(Run *a, Run *b) {
  for (size_t r = 0; r < a->ctx->nranks; r++)
    if (a->node[r] != b->node[r] || a->gpu[r] != b->gpu[r]) {
      nondeterministic(a, "rank %zu on node %lld GPU %lld, then on node %lld GPU %lld", r,
                       (long long)a->node[r], (long long)a->gpu[r], (long long)b->node[r],
                       (long long)b->gpu[r]);
      return false;
    }
  return true;
}

static void place_release(Run *b) {
  free(b->node);
  free(b->gpu);
}

bool hook_run_placement(HookEnv *env, const HookCtx *ctx, int64_t *node_out,
                        int64_t *gpu_out, Diags *d) {
  static const RunKind rk = {place_setup, place_same, place_release};
  PlaceArg arg = {node_out, gpu_out};
  Run a;
  bool ok = run_checked(env, HOOK_PLACEMENT, ctx, d, &rk, &arg, &a);
  run_free(&a);
  return ok;
}

/* ---- layer_partition ---- */

typedef struct {
  size_t pool;
  int64_t *layers;
} PartArg;

static void part_setup(Run *r, const void *arg, bool second) {
  const PartArg *p = arg;
  r->pool = p->pool;
  r->layers = second ? rp_calloc((size_t)r->ctx->pools[p->pool].pp, sizeof(int64_t)) : p->layers;
}

static bool part_same(Run *a, Run *b) {
  for (size_t s = 0; s < (size_t)a->ctx->pools[a->pool].pp; s++)
    if (a->layers[s] != b->layers[s]) {
      nondeterministic(a, "stage %zu holds %lld layers, then %lld", s, (long long)a->layers[s],
                       (long long)b->layers[s]);
      return false;
    }
  return true;
}

static void part_release(Run *b) { free(b->layers); }

bool hook_run_layer_partition(HookEnv *env, const HookCtx *ctx, size_t pool,
                              int64_t *layers_out, Diags *d) {
  static const RunKind rk = {part_setup, part_same, part_release};
  RP_ASSERT(pool < ctx->npools);
  PartArg arg = {pool, layers_out};
  Run a;
  bool ok = run_checked(env, HOOK_LAYER_PARTITION, ctx, d, &rk, &arg, &a);
  run_free(&a);
  return ok;
}

/* ---- expert_placement ---- */

void hook_expert_map_free(HookExpertMap *m) {
  free(m->offsets);
  free(m->ranks);
  memset(m, 0, sizeof *m);
}

static void experts_setup(Run *r, const void *arg, bool second) {
  (void)second;
  r->pool = *(const size_t *)arg;
}

static bool experts_same(Run *a, Run *b) {
  for (int64_t e = 0; e < a->em.experts; e++) {
    int64_t s = a->em.offsets[e], t = a->em.offsets[e + 1];
    bool same = t - s == b->em.offsets[e + 1] - b->em.offsets[e];
    for (int64_t i = 0; same && i < t - s; i++)
      same = a->em.ranks[s + i] == b->em.ranks[b->em.offsets[e] + i];
    if (!same) {
      nondeterministic(a, "expert %lld is placed differently", (long long)e);
      return false;
    }
  }
  return true;
}

static void experts_release(Run *b) { hook_expert_map_free(&b->em); }

bool hook_run_expert_placement(HookEnv *env, const HookCtx *ctx, size_t pool,
                               HookExpertMap *out, Diags *d) {
  static const RunKind rk = {experts_setup, experts_same, experts_release};
  RP_ASSERT(pool < ctx->npools);
  memset(out, 0, sizeof *out);
  Run a;
  bool ok = run_checked(env, HOOK_EXPERT_PLACEMENT, ctx, d, &rk, &pool, &a);
  if (ok) *out = a.em;
  else hook_expert_map_free(&a.em);
  run_free(&a);
  return ok;
}

/* ---- objective ---- */

typedef struct {
  const HookKV *cand;
  size_t ncand;
} ObjArg;

static void obj_setup(Run *r, const void *arg, bool second) {
  (void)second;
  const ObjArg *o = arg;
  r->cand = o->cand;
  r->ncand = o->ncand;
}

static bool obj_same(Run *a, Run *b) {
  if (memcmp(&a->score, &b->score, sizeof a->score) == 0) return true;
  char x[32], y[32];
  hk_fmt_number(x, sizeof x, a->score);
  hk_fmt_number(y, sizeof y, b->score);
  nondeterministic(a, "score %s, then %s", x, y);
  return false;
}

bool hook_run_objective(HookEnv *env, const HookCtx *ctx, const HookKV *cand,
                        size_t ncand, double *score_out, Diags *d) {
  static const RunKind rk = {obj_setup, obj_same, NULL};
  ObjArg arg = {cand, ncand};
  Run a;
  bool ok = run_checked(env, HOOK_OBJECTIVE, ctx, d, &rk, &arg, &a);
  if (ok) *score_out = a.score;
  run_free(&a);
  return ok;
}


/* ---- filter ---- */

typedef struct {
  const char *role;
  const HookKV *cand;
  size_t ncand;
} FilterArg;

static void filter_setup(Run *r, const void *arg, bool second) {
  (void)second;
  const FilterArg *f = arg;
  r->cand_role = f->role;
  r->cand = f->cand;
  r->ncand = f->ncand;
}

static bool filter_same(Run *a, Run *b) {
  bool same_why = (!a->why && !b->why) || (a->why && b->why && strcmp(a->why, b->why) == 0);
  if (a->keep == b->keep && same_why) return true;
  nondeterministic(a, "%s, then %s", a->keep ? "keep" : a->why ? a->why : "drop",
                   b->keep ? "keep" : b->why ? b->why : "drop");
  return false;
}

bool hook_run_filter(HookEnv *env, const HookCtx *ctx, const char *role, const HookKV *cand,
                     size_t ncand, bool *keep_out, char **why_out, Diags *d) {
  static const RunKind rk = {filter_setup, filter_same, NULL};
  FilterArg arg = {role, cand, ncand};
  Run a;
  bool ok = run_checked(env, HOOK_FILTER, ctx, d, &rk, &arg, &a);
  *why_out = NULL;
  if (ok) {
    *keep_out = a.keep;
    *why_out = a.why;
    a.why = NULL;
  }
  run_free(&a);
  return ok;
}
