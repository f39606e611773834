/*
 * hooks.c: the Lua 5.4 sandbox and the four hook entry points.
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
#include "hooks.h"

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
    "placement", "layer_partition", "expert_placement", "objective"};

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

int64_t hook_total_spent_ms(void) { return total_spent_ns / 1000000; }
void hook_total_reset(void) { total_spent_ns = 0; }

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
      &spec->deployment.hooks.expert_placement, &spec->deployment.hooks.objective};
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

bool hook_env_has(const HookEnv *env, HookKind k) {
  return (unsigned)k < HOOK__COUNT && env->file[k].set;
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
  const char *s = order ? order : "tp-cp-ep-dp-pp";
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
    p->ep = ps->ep.set ? ps->ep.v : 1;
    p->etp = ps->etp.set ? ps->etp.v : 1;
    p->dcp = ps->dcp.set ? ps->dcp.v : 1;
  }
  if (!hook_ctx_layout(ctx, s->deployment.order.set ? s->deployment.order.v : NULL, d)) {
    hook_ctx_free(ctx);
    return false;
  }
  return true;
}

/* ======================================================================
 * One sandboxed run
 * ====================================================================== */

typedef enum {
  KILL_NONE, KILL_BUDGET, KILL_MEMORY, KILL_DEADLINE, KILL_DENIED, KILL_COSTLY, KILL_STRING
} KillReason;
typedef enum { PH_SETUP, PH_LOAD, PH_CHUNK, PH_CALL, PH_CONVERT } Phase;

/* Instructions between two count-hook calls: small enough that a deadline
 * is noticed within microseconds, large enough to cost nothing. */
#define HOOK_STEP 1000
/* One VM instruction can read or copy its string operands whole (`..`,
 * `<`, `==` of two distinct equal strings, a string turned into a number
 * for arithmetic), so what an instruction costs grows with the longest
 * string in the state. Once strings longer than HOOK_WINDOW_BYTES /
 * HOOK_STEP exist, the count hook runs more often (the step halves, down to
 * every instruction) so that the instructions between two checks touch
 * about HOOK_WINDOW_BYTES string bytes at most: some 12 ms in the worst
 * case measured (`<` of strings of NUL bytes, which strcoll compares
 * byte by byte). With HOOK_STRING_MAX that also bounds one instruction. */
#define HOOK_WINDOW_BYTES (INT64_C(1) << 20)
/* Bytes a killed run may still allocate to build its error message. */
#define HOOK_SLACK (INT64_C(1) << 20)

typedef struct {
  /* what to run */
  HookKind kind;
  const HookLimits *lim;
  const char *path; /* interned */
  const char *text;
  size_t len;
  char *chunkname;  /* "@" path */
  const HookCtx *ctx;
  size_t pool;
  const HookKV *cand;
  size_t ncand;
  Diags *d;
  /* sandbox state */
  lua_State *L;
  int64_t used, limit;
  bool capped;
  bool hooked;  /* the count hook is installed (its step may change) */
  bool in_msgh; /* the sandbox's message handler builds its traceback */
  int64_t steps;
  int step;            /* the count hook's current interval */
  int line_due;        /* instructions until last_line is taken again */
  int64_t longest;     /* the longest string made in this state, bytes */
  size_t str_overhead; /* a string's allocation minus its length */
  size_t last_str;     /* the allocation of the latest new string */
  int64_t str_asked;   /* KILL_STRING: the length refused */
  int str_line;        /* KILL_STRING: the hook line that made it */
  size_t load_pos;     /* compiling the hook file: bytes fed to Lua */
  int load_line;       /* and the line they end on */
  struct timespec deadline;
  bool total_bound; /* the deadline is the command's total (E0621), not the call's */
  KillReason kill;
  char denied[64];
  char costly[256]; /* the library call refused by KILL_COSTLY, described */
  Phase phase;
  int fn_ref;
  int fn_line, ret_line, last_line, err_line;
  int err_type; /* lua type of the error object */
  char *errmsg, *traceback;
  const char *got_type; /* what the chunk returned, for E0603 */
  bool perturb;         /* second run of a determinism check */
  /* results */
  bool result_ok;
  int64_t *node, *gpu, *layers;
  HookExpertMap em;
  double score;
} Run;

static Run *run_of(lua_State *L) { return *(Run **)lua_getextraspace(L); }

static void run_hook(lua_State *L, lua_Debug *ar);

/* The count hook's step for strings of up to `longest` bytes: HOOK_STEP,
 * halved until the step's instructions touch at most HOOK_WINDOW_BYTES. */
static int step_for(int64_t longest) {
  int step = HOOK_STEP;
  while (step > 1 && (int64_t)step * longest > HOOK_WINDOW_BYTES) step /= 2;
  return step;
}

/* The innermost line of the hook file on the stack, or while the file is
 * being compiled the line the lexer has read to; 0 when neither. Reads the
 * call frames only (lua_getinfo with "Sl" allocates nothing), so the
 * allocator may call it. */
static int hook_line(Run *r) {
  lua_Debug ar;
  for (int lv = 0; lua_getstack(r->L, lv, &ar); lv++)
    if (lua_getinfo(r->L, "Sl", &ar) && ar.currentline > 0 && strcmp(ar.source, r->chunkname) == 0)
      return ar.currentline;
  return r->phase == PH_LOAD ? r->load_line : 0;
}

/* A new string object of nsize bytes: refused (KILL_STRING, which no pcall
 * catches) when longer than HOOK_STRING_MAX while the hook's code counts;
 * otherwise remembered, and the count hook's step shortened when it is the
 * longest so far. Strings the sandbox makes before the cap (the context)
 * and the traceback of the message handler are not refused, only counted
 * for the step. */
static bool new_string_ok(Run *r, size_t nsize) {
  r->last_str = nsize;
  int64_t len = (int64_t)nsize - (int64_t)r->str_overhead;
  if (r->capped && !r->in_msgh && len > HOOK_STRING_MAX) {
    if (!r->kill) {
      r->kill = KILL_STRING;
      r->str_asked = len;
      r->str_line = hook_line(r);
    }
    return false;
  }
  if (len > r->longest) {
    r->longest = len;
    int step = step_for(len);
    if (r->hooked && !r->kill && step < r->step) {
      /* at once: the instruction that made this string may be followed by
       * a thousand that compare it. Only the count changes (the
       * instructions counted toward the current step are dropped: fewer
       * than 2000 in all, over the step's ten values). */
      r->step = step;
      lua_sethook(r->L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, step);
    }
  }
  return true;
}

/* The counting allocator: the memory cap. Before the hook's code runs the
 * cap is off (the context counts against nothing); afterwards it allows
 * lim->memory bytes beyond what setup used, plus a small slack once the run
 * is killed so that the error message can still be built. New strings are
 * also held to HOOK_STRING_MAX (new_string_ok). */
static void *run_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  Run *r = ud;
  /* A new object: osize encodes its type. Short and long strings both come
   * as LUA_TSTRING (Lua passes the type without its variant bits). */
  if (!ptr && osize == LUA_TSTRING && nsize > 0 && !new_string_ok(r, nsize)) return NULL;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    free(ptr);
    r->used -= (int64_t)osize;
    return NULL;
  }
  if (r->capped && nsize > osize) {
    int64_t limit = r->limit + (r->kill ? HOOK_SLACK : 0);
    int64_t room = limit - r->used;
    if (room < 0 || nsize - osize > (size_t)room) {
      if (!r->kill) r->kill = KILL_MEMORY;
      return NULL;
    }
  }
  /* The cap was checked above: a failure here is the machine's memory,
   * not the hook's, so an internal error rather than E0607. */
  void *p = realloc(ptr, nsize);
  if (!p) rp_internal("out of memory in the hook sandbox (%zu bytes)", nsize);
  r->used += (int64_t)nsize - (int64_t)osize;
  return p;
}

static int run_panic(lua_State *L) {
  const char *m = lua_tostring(L, -1);
  rp_internal("unprotected error in hook sandbox: %s", m ? m : "?");
}

static bool past(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static const char *kill_text(const Run *r) {
  switch (r->kill) {
  case KILL_BUDGET: return "instruction budget exhausted";
  case KILL_MEMORY: return "memory cap exceeded";
  case KILL_DEADLINE: return "wall-clock deadline passed";
  case KILL_DENIED: return "sandbox refused the operation";
  case KILL_COSTLY: return "library call would exceed the instruction budget";
  case KILL_STRING: return "string longer than the sandbox allows";
  default: return "killed";
  }
}

/* Count hook: instruction budget and deadline; remembers the last line run
 * in the hook file (for errors that carry no position). Return hook: the
 * line of the hook function's return, to point at the value it returned. */
static void run_hook(lua_State *L, lua_Debug *ar) {
  Run *r = run_of(L);
  if (ar->event == LUA_HOOKRET) {
    if (r->phase != PH_CALL || !lua_getinfo(L, "fl", ar)) return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->fn_ref);
    if (lua_rawequal(L, -1, -2) && ar->currentline > 0) r->ret_line = ar->currentline;
    lua_pop(L, 2);
    return;
  }
  r->in_msgh = false; /* Lua code runs: the message handler is done */
  /* the line about every HOOK_STEP instructions, however short the step:
   * at a step of 1 it would cost more than the instructions */
  r->line_due -= r->step;
  if (r->line_due <= 0) {
    r->line_due = HOOK_STEP;
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0 && strcmp(ar->source, r->chunkname) == 0)
      r->last_line = ar->currentline;
  }
  if (!r->kill) {
    r->steps += r->step;
    if (r->steps > r->lim->instructions) r->kill = KILL_BUDGET;
    else if (past(&r->deadline)) r->kill = KILL_DEADLINE;
  }
  if (r->kill) {
    /* From now on every instruction raises, so no handler can go on. */
    lua_sethook(L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
    luaL_error(L, "%s", kill_text(r));
  }
}

/* Message handler: records the position in the hook file and the error
 * object, and appends a traceback. Never calls user metamethods. */
static int run_msgh(lua_State *L) {
  Run *r = run_of(L);
  r->in_msgh = true; /* the run is ending: its traceback may be long */
  lua_Debug ar;
  for (int lv = 0; lua_getstack(L, lv, &ar); lv++) {
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0 && strcmp(ar.source, r->chunkname) == 0) {
      r->err_line = ar.currentline;
      break;
    }
  }
  r->err_type = lua_type(L, 1);
  const char *msg;
  if (r->err_type == LUA_TSTRING || r->err_type == LUA_TNUMBER)
    msg = lua_tostring(L, 1);
  else
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  free(r->errmsg);
  r->errmsg = rp_strdup(msg);
  luaL_traceback(L, L, msg, 1);
  free(r->traceback);
  r->traceback = rp_strdup(lua_tostring(L, -1));
  r->in_msgh = false;
  return 1;
}

/* Raises a sandbox refusal that no pcall can catch. */
static int deny(lua_State *L, const char *what) {
  Run *r = run_of(L);
  if (!r->kill) {
    r->kill = KILL_DENIED;
    snprintf(r->denied, sizeof r->denied, "%s", what);
  }
  lua_sethook(L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
  return luaL_error(L, "%s is not available in the hook sandbox", what);
}

/* _ENV's __index: names the sandbox removed raise instead of reading nil. */
static int sb_env_index(lua_State *L) {
  static const char *const denied[] = {"io", "os", "debug", "package", "require",
                                       "dofile", "loadfile", "loadstring", "print",
                                       "coroutine", "warn"};
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (k)
    for (size_t i = 0; i < RP_ARRAY_LEN(denied); i++)
      if (strcmp(k, denied[i]) == 0) {
        char what[48];
        snprintf(what, sizeof what, "`%s`", k);
        return deny(L, what);
      }
  lua_pushnil(L);
  return 1;
}

static int sb_dump(lua_State *L) { return deny(L, "`string.dump`"); }

static int sb_strmeta(lua_State *L) { return deny(L, "the string metatable"); }

/* pcall/xpcall that rethrow once the run is killed. */
static int sb_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  if (run_of(L)->kill) return lua_error(L);
  lua_pushboolean(L, st == LUA_OK);
  lua_insert(L, 1);
  return lua_gettop(L);
}

/* The message handler xpcall installs: the user's handler (upvalue 1) runs
 * only for an error of the hook's own making. Once the run is killed the
 * error object passes through untouched: a kill is raised inside the count
 * hook, where Lua runs the handler with hooks off, so a user handler called
 * then would escape the budget and the deadline (a looping handler never
 * ends). A handler that errors or loops while it runs normally is counted
 * like any other code, and its kill passes through here too. */
static int sb_msgh(lua_State *L) {
  if (run_of(L)->kill) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int sb_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, sb_msgh, 1);
  lua_replace(L, 2); /* f at 1, the wrapped msgh at 2, args after */
  lua_pushvalue(L, 1);
  lua_copy(L, 2, 1);
  lua_replace(L, 2); /* msgh at 1, f at 2, args after */
  int st = lua_pcall(L, n - 2, LUA_MULTRET, 1);
  if (run_of(L)->kill) return lua_error(L);
  lua_pushboolean(L, st == LUA_OK);
  lua_replace(L, 1);
  return lua_gettop(L);
}

static void charge_load(lua_State *L, size_t len);
static void charge_gc(lua_State *L);

/* load(chunk [, chunkname [, mode [, env]]]): strings only, text only; the
 * default environment is the sandbox's. */
static int sb_load(lua_State *L) {
  size_t len;
  const char *s = lua_tolstring(L, 1, &len);
  if (lua_type(L, 1) != LUA_TSTRING)
    return deny(L, "`load` with a reader function");
  if (len > 0 && s[0] == LUA_SIGNATURE[0]) return deny(L, "loading a precompiled (binary) chunk");
  charge_load(L, len);
  const char *name = luaL_optstring(L, 2, "=(load)");
  int st = luaL_loadbufferx(L, s, len, name, "t");
  if (st != LUA_OK) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  if (!lua_isnone(L, 4)) lua_pushvalue(L, 4);
  else lua_pushvalue(L, lua_upvalueindex(1));
  if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  return 1;
}

/* setmetatable without __gc: a finalizer would run code after the hook.
 * Nor with a metamethod that is a library (C) function: the VM and the
 * library loops call metamethods without counting an instruction, so a
 * C function there, `__index = rawlen` say, lets `table.sort` or
 * `table.concat` walk a table of any claimed length without one counted
 * instruction. Lua functions as metamethods are counted like any code.
 * (A field added to the metatable afterwards is not seen here; the
 * library wrappers charge such loops per element all the same.) */
static int sb_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    int t = lua_rawget(L, 2);
    lua_pop(L, 1);
    if (t != LUA_TNIL) return deny(L, "a `__gc` metamethod");
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1)) {
        const char *k = lua_tostring(L, -2);
        if (k[0] == '_' && k[1] == '_') {
          char what[96];
          snprintf(what, sizeof what, "a library function as the `%.40s` metamethod", k);
          return deny(L, what);
        }
      }
      lua_pop(L, 1);
    }
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* collectgarbage with the options that cannot change the collector. */
static int sb_collectgarbage(lua_State *L) {
  const char *opt = luaL_optstring(L, 1, "collect");
  if (strcmp(opt, "collect") != 0 && strcmp(opt, "count") != 0 && strcmp(opt, "step") != 0 &&
      strcmp(opt, "isrunning") != 0)
    return deny(L, "`collectgarbage` with this option");
  if (strcmp(opt, "collect") == 0 || strcmp(opt, "step") == 0) charge_gc(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* ---- library calls that loop inside C ----
 *
 * The count hook only sees Lua VM instructions, so a library function that
 * loops in C runs unchecked until it returns. Lua's pattern matcher
 * backtracks: `string.find(("a"):rep(48), ".-.-.-.-.-.-.-b")` is one call
 * that runs for minutes. The wrappers below bound such calls before they
 * start: they estimate the call's worst case in "steps" (about one subject
 * byte compared; the VM's instructions and these steps share the one
 * instruction budget), refuse the call (E0619, a kill no pcall catches) when
 * the estimate exceeds what is left of the budget, and otherwise charge it,
 * so that many cheap calls add up. After the call the deadline is checked
 * too. The wrappers replace the entries of the real string table, which is
 * also the string metatable's __index, so `s:find(p)` is bounded as well.
 * Each wrapper then runs the real function on the same stack (its C
 * pointer is the closure's upvalue), so results and error messages are
 * exactly the library's. docs/hooks.md states the rule. */

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pat_names[] = {"string.find", "string.match", "string.gmatch",
                                        "string.gsub"};

/* Where the pattern item starting at p ends, as lstrlib's classEnd finds
 * it: one character, `%x`, or a `[...]` set. A malformed item ends the
 * pattern (the library raises when it reaches it, which only shortens the
 * work). */
static size_t pat_class_end(const char *p, size_t i, size_t len) {
  char c = p[i++];
  if (c == '%') return i < len ? i + 1 : len;
  if (c != '[') return i;
  if (i < len && p[i] == '^') i++;
  do {
    if (i >= len) return len;
    if (p[i++] == '%' && i < len) i++;
  } while (i >= len || p[i] != ']');
  return i + 1;
}

/* The shape of a pattern that decides the matcher's worst case: q items
 * with a `*`, `+`, `-` or `?` suffix (each a choice of how many subject
 * bytes it takes), b items that scan the subject without choice (`%b` and
 * the back-references `%1`-`%9`), and whether a leading `^` anchors it
 * (find, match and gsub; gmatch treats `^` as a character). */
typedef struct {
  int64_t q, b;
  bool anchored;
} PatShape;

static PatShape pat_shape(const char *p, size_t len, bool anchor_ok) {
  PatShape sh = {0, 0, false};
  size_t i = 0;
  if (anchor_ok && len > 0 && p[0] == '^') {
    sh.anchored = true;
    i = 1;
  }
  while (i < len) {
    char c = p[i];
    if (c == '(') {
      i += (i + 1 < len && p[i + 1] == ')') ? 2 : 1;
      continue;
    }
    if (c == ')' || (c == '$' && i + 1 == len)) {
      i++;
      continue;
    }
    if (c == '%' && i + 1 < len) {
      char e = p[i + 1];
      if (e == 'b') {
        sh.b++;
        i = i + 4 < len ? i + 4 : len;
        continue;
      }
      if (e == 'f') {
        i += 2;
        if (i < len) i = pat_class_end(p, i, len);
        continue;
      }
      if (e >= '0' && e <= '9') {
        sh.b++;
        i += 2;
        continue;
      }
    }
    size_t ep = pat_class_end(p, i, len);
    if (ep < len && (p[ep] == '*' || p[ep] == '+' || p[ep] == '-' || p[ep] == '?')) {
      sh.q++;
      ep++;
    }
    i = ep;
  }
  return sh;
}

/* Saturating helpers: an estimate over INT64_MAX is simply "too much". */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return ck_mul(a, b, &r) ? r : INT64_MAX;
}
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return ck_add(a, b, &r) ? r : INT64_MAX;
}

/* The worst-case steps of matching a pattern of length plen and shape sh
 * against n subject bytes, over every start position the call tries
 * (gmatch and gsub try each position at most once over the whole
 * iteration, like find and match do in one call):
 *   starts x C(n + q + 1, q) x (2 plen + b n + 1)
 * A path of the backtracking search is fixed by how many bytes each of the
 * q quantified items took (at most n in all), so the search visits at most
 * sum_k C(n + k, k) = C(n + q + 1, q) nodes; a node walks at most the
 * pattern (and the greedy count of `*`/`+`, charged once per child), plus n
 * bytes for each `%b` or back-reference. */
int64_t hook__pattern_cost(size_t n, const char *pat, size_t plen, bool anchor_ok) {
  PatShape sh = pat_shape(pat, plen, anchor_ok);
  int64_t n64 = n > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)n;
  int64_t starts = sh.anchored ? 1 : n64 + 1;
  int64_t nodes = 1; /* C(n + 1 + k, k), k = 1 .. q; each step is exact */
  for (int64_t k = 1; k <= sh.q && nodes != INT64_MAX; k++) {
    int64_t t = sat_mul(nodes, n64 + 1 + k);
    nodes = t == INT64_MAX ? INT64_MAX : t / k;
  }
  int64_t per = sat_add(sat_add(sat_mul(2, (int64_t)plen), sat_mul(sh.b, n64)), 1);
  return sat_mul(sat_mul(starts, nodes), per);
}

/* Charges `cost` steps to the run's instruction budget, or refuses the call
 * (KILL_COSTLY, which no pcall catches) when fewer are left. what describes
 * the call for the diagnostic. */
static void charge(lua_State *L, int64_t cost, const char *what) {
  Run *r = run_of(L);
  int64_t left = r->lim->instructions - r->steps;
  if (cost <= left) {
    r->steps += cost;
    return;
  }
  if (!r->kill) {
    r->kill = KILL_COSTLY;
    char c[24];
    if (cost == INT64_MAX) snprintf(c, sizeof c, "more than 2^63");
    else snprintf(c, sizeof c, "%lld", (long long)cost);
    snprintf(r->costly, sizeof r->costly, "%s may take %s steps, more than the %lld left", what,
             c, (long long)(left > 0 ? left : 0));
  }
  lua_sethook(L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
  luaL_error(L, "%s", kill_text(r));
}

/* Runs the real library function (upvalue 1) on this call's stack, then
 * checks the deadline: a call the estimate let through still cannot end
 * past it unnoticed. */
static int call_real(lua_State *L) {
  lua_CFunction f = lua_tocfunction(L, lua_upvalueindex(1));
  RP_ASSERT(f != NULL);
  int n = f(L);
  Run *r = run_of(L);
  if (!r->kill && past(&r->deadline)) {
    r->kill = KILL_DEADLINE;
    lua_sethook(L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
    luaL_error(L, "%s", kill_text(r));
  }
  return n;
}

/* Quotes a pattern for a message: at most 40 bytes, control bytes as `?`. */
static void quote_pattern(char *buf, size_t size, const char *p, size_t len) {
  size_t show = len > 40 ? 40 : len;
  snprintf(buf, size, "\"%.*s\"%s", (int)show, p, len > show ? "..." : "");
  for (char *c = buf + 1; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* string.find, string.match, string.gmatch, string.gsub (upvalue 2 says
 * which): estimate, charge, then the real function. */
static int sb_pattern(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  size_t n, plen;
  (void)luaL_checklstring(L, 1, &n);
  const char *pat = luaL_checklstring(L, 2, &plen);
  int64_t cost;
  bool plain = false;
  if (which == PAT_FIND) {
    plain = lua_toboolean(L, 4);
    if (!plain) {
      plain = true; /* the library searches literally when nothing is special */
      for (size_t i = 0; i < plen && plain; i++)
        if (strchr("^$*+?.([%-", pat[i]) && pat[i] != '\0') plain = false;
    }
  }
  if (plain) {
    /* memchr and memcmp at each position: at most (n + 1) x (plen + 1). */
    int64_t n64 = n > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)n;
    int64_t p64 = plen > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)plen;
    cost = sat_mul(n64 + 1, p64 + 1);
  } else {
    cost = hook__pattern_cost(n, pat, plen, which != PAT_GMATCH);
  }
  char q[64], what[160];
  quote_pattern(q, sizeof q, pat, plen);
  snprintf(what, sizeof what, "`%s` with pattern %s on a %zu-byte string", pat_names[which], q, n);
  charge(L, cost, what);
  return call_real(L);
}

/* table.move(a1, f, e, t [, a2]): moves e - f + 1 elements in C, nil ones
 * too, so `table.move({}, 1, math.maxinteger - 1, 2)` allocates nothing and
 * never ends. Each element costs one step. */
static int sb_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  if (e >= f) {
    uint64_t count = (uint64_t)e - (uint64_t)f + 1;
    int64_t cost = count == 0 || count > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)count;
    char what[96];
    snprintf(what, sizeof what, "`table.move` of %llu elements", (unsigned long long)count);
    charge(L, cost, what);
  }
  return call_real(L);
}

/* ---- more library calls that loop inside C ----
 *
 * The same rule for the rest of the exposed library: each wrapper below
 * estimates how many elements or bytes the real function will walk and
 * charges that before it starts. Counts come from the arguments and, where
 * the library would ask the table's length itself, from one `#t` the
 * wrapper takes and then passes on explicitly, so that a `__len` cannot
 * answer small to the estimate and large to the library. */

/* The number of integers in [i, j], saturated; 0 when j < i. */
static int64_t span(lua_Integer i, lua_Integer j) {
  if (j < i) return 0;
  uint64_t c = (uint64_t)j - (uint64_t)i + 1;
  return c == 0 || c > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)c;
}

static int64_t len64(size_t n) { return n > (size_t)INT64_MAX ? INT64_MAX : (int64_t)n; }

/* charge() with a formatted description, built only when it is needed. */
static void charge_fmt(lua_State *L, int64_t cost, const char *fmt, ...) RP_PRINTF(3, 4);
static void charge_fmt(lua_State *L, int64_t cost, const char *fmt, ...) {
  Run *r = run_of(L);
  if (cost <= r->lim->instructions - r->steps) {
    r->steps += cost;
    return;
  }
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  charge(L, cost, what);
}

/* lstrlib's posrelatI and getendpos: the 1-based start and end of a
 * string range, clipped to a string of len bytes. */
static lua_Integer str_start(lua_Integer pos, size_t len) {
  if (pos > 0) return pos;
  if (pos == 0) return 1;
  if (pos < -(lua_Integer)len) return 1;
  return (lua_Integer)len + pos + 1;
}
static lua_Integer str_end(lua_Integer pos, size_t len) {
  if (pos > (lua_Integer)len) return (lua_Integer)len;
  if (pos >= 0) return pos;
  if (pos < -(lua_Integer)len) return 0;
  return (lua_Integer)len + pos + 1;
}

/* Which string or utf8 function a linear wrapper stands for. */
enum { LIN_LOWER, LIN_UPPER, LIN_REVERSE, LIN_SUB, LIN_BYTE, LIN_CHAR, LIN_FORMAT,
       LIN_PACKSIZE, LIN_UTF8_CHAR, LIN_UTF8_CODEPOINT, LIN_UTF8_LEN, LIN_UTF8_OFFSET,
       LIN_TONUMBER };
static const char *const lin_names[] = {
    "string.lower", "string.upper", "string.reverse", "string.sub", "string.byte",
    "string.char", "string.format", "string.packsize", "utf8.char", "utf8.codepoint",
    "utf8.len", "utf8.offset", "tonumber"};

/* String and utf8 functions whose work is linear in what they read or
 * write: one step per byte (or argument, or character), plus one. Ranges
 * are clipped as the library clips them, so `s:sub(i, i)` costs 2 steps
 * however long s is. Malformed arguments cost 1: the library raises. */
static int sb_linear(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  int top = lua_gettop(L);
  size_t len = 0;
  int64_t cost = 1;
  /* only a string: lua_tolstring would turn a number argument into a
   * string in place, and tonumber(0.1) must stay exact */
  if (lua_type(L, 1) == LUA_TSTRING) (void)lua_tolstring(L, 1, &len);
  switch (which) {
  case LIN_LOWER: case LIN_UPPER: case LIN_REVERSE: case LIN_PACKSIZE: case LIN_UTF8_OFFSET:
  case LIN_TONUMBER:
    cost = sat_add(len64(len), 1);
    break;
  case LIN_SUB: case LIN_UTF8_LEN: {
    lua_Integer i = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 1;
    lua_Integer j = lua_isinteger(L, 3) ? lua_tointeger(L, 3) : -1;
    cost = sat_add(span(str_start(i, len), str_end(j, len)), 1);
    break;
  }
  case LIN_BYTE: case LIN_UTF8_CODEPOINT: {
    lua_Integer i = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 1;
    lua_Integer pi = str_start(i, len);
    lua_Integer j = lua_isinteger(L, 3) ? lua_tointeger(L, 3) : pi;
    cost = sat_add(span(pi, str_end(j, len)), 1);
    break;
  }
  case LIN_CHAR: case LIN_UTF8_CHAR:
    cost = top + 1;
    break;
  case LIN_FORMAT:
    /* the format, each argument, and the bytes of string arguments (%s
     * and %q copy them whole) */
    cost = sat_add(len64(len), top);
    for (int a = 2; a <= top; a++)
      if (lua_type(L, a) == LUA_TSTRING) cost = sat_add(cost, len64(lua_rawlen(L, a)));
    break;
  default: break;
  }
  charge_fmt(L, cost, "`%s` over %zu bytes", lin_names[which], len);
  return call_real(L);
}

/* string.rep with a result that fits the memory cap: one step per result
 * byte (a result over the cap fails on its allocation at once). */
static int sb_rep(lua_State *L) {
  size_t l, lsep;
  (void)luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  (void)luaL_optlstring(L, 3, "", &lsep);
  if (n > 0 && l == 0 && lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (n > 0) {
    int64_t out = sat_add(sat_mul(len64(l), n), sat_mul(len64(lsep), n - 1));
    if (out <= run_of(L)->lim->memory)
      charge_fmt(L, out, "`string.rep` of a %lld-byte result", (long long)out);
  }
  return call_real(L);
}

/* string.pack and string.unpack: the format is walked once, before; the
 * strings they build (`c`, `s`, `z` items and the packed result) are
 * charged one step per byte after, when their size is known; they were
 * bounded by the memory cap while being built. */
static int sb_pack(lua_State *L) {
  size_t flen = 0;
  if (lua_type(L, 1) == LUA_TSTRING) (void)lua_tolstring(L, 1, &flen);
  charge_fmt(L, sat_add(len64(flen), 1), "`string.pack` with a %zu-byte format", flen);
  int n = call_real(L);
  int64_t out = 0;
  for (int k = lua_gettop(L) - n + 1; k <= lua_gettop(L); k++)
    if (lua_type(L, k) == LUA_TSTRING) out = sat_add(out, len64(lua_rawlen(L, k)));
  charge_fmt(L, out, "`string.pack` or `string.unpack` of %lld bytes", (long long)out);
  return n;
}

/* utf8.codes: its iterator skips continuation bytes in C from any position
 * the caller passes. The wrapped iterator counts them first, at most one
 * more than the budget has left, and charges what it counted. */
static int sb_utf8_iter(lua_State *L) {
  size_t len;
  const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &len) : NULL;
  if (s && lua_isinteger(L, 2)) {
    Run *r = run_of(L);
    lua_Integer n = lua_tointeger(L, 2);
    int64_t left = r->lim->instructions - r->steps, count = 1;
    for (size_t k = n < 0 ? 0 : (size_t)n; k < len && count <= left; k++) {
      if (((unsigned char)s[k] & 0xC0) != 0x80) continue; /* ends the skip, at once or next */
      count++;
    }
    charge_fmt(L, count, "`utf8.codes` step over a %zu-byte string", len);
  }
  return call_real(L);
}

static int sb_utf8_codes(lua_State *L) {
  int n = call_real(L);
  if (n >= 1 && lua_tocfunction(L, -n) != NULL) {
    lua_pushvalue(L, -n);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, sb_utf8_iter, 2);
    lua_replace(L, -n - 1);
  }
  return n;
}

/* load compiles its text in one call: one step per byte. */
static void charge_load(lua_State *L, size_t len) {
  charge_fmt(L, sat_add(len64(len), 1), "`load` of a %zu-byte chunk", len);
}

/* collectgarbage("collect") and ("step") walk the heap: one step per 8
 * bytes in use (a small table is some 56 bytes, marked and swept in tens
 * of nanoseconds). */
static void charge_gc(lua_State *L) {
  Run *r = run_of(L);
  int64_t cost = (r->used > 0 ? r->used / 8 : 0) + 1;
  charge_fmt(L, cost, "`collectgarbage` over %lld bytes", (long long)r->used);
}

/* The table argument's length as the library takes it (`#t`, with
 * `__len`), taken once. Raises as the library would for a non-table. */
static lua_Integer tab_len(lua_State *L, bool want_table) {
  if (want_table && lua_type(L, 1) != LUA_TTABLE) luaL_checktype(L, 1, LUA_TTABLE);
  return luaL_len(L, 1);
}

/* table.concat(t [, sep [, i [, j]]]) and table.unpack(t [, i [, j]]):
 * one step per element (times 1 + the separator's length for concat)
 * before, and for concat one per byte of the result after; a missing j
 * is filled in with the one `#t` taken here. */
static int sb_span_call(lua_State *L) {
  bool concat = lua_tointeger(L, lua_upvalueindex(2)) == 1;
  int ia = concat ? 3 : 2;
  size_t lsep = 0;
  if (concat) (void)luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, ia, 1);
  lua_Integer j = lua_isnoneornil(L, ia + 1) ? tab_len(L, concat) : luaL_checkinteger(L, ia + 1);
  lua_settop(L, ia + 1);
  lua_pushinteger(L, i);
  lua_replace(L, ia);
  lua_pushinteger(L, j);
  lua_replace(L, ia + 1);
  int64_t n = span(i, j);
  charge_fmt(L, sat_mul(n, sat_add(len64(lsep), 1)), "`table.%s` of %lld elements",
             concat ? "concat" : "unpack", (long long)n);
  int r = call_real(L);
  if (concat && lua_type(L, -1) == LUA_TSTRING) {
    /* the bytes copied, known now; the memory cap bounded them meanwhile */
    int64_t out = len64(lua_rawlen(L, -1));
    charge_fmt(L, out, "`table.concat` of a %lld-byte result", (long long)out);
  }
  return r;
}

/* table.insert and table.remove, as ltablib has them, with `#t` taken once
 * and the shift charged one step per element before it starts. */
static int sb_insert(lua_State *L) {
  lua_Integer e = tab_len(L, true);
  e = (lua_Integer)((lua_Unsigned)e + 1u); /* the first empty element */
  lua_Integer pos;
  switch (lua_gettop(L)) {
  case 2: pos = e; break;
  case 3:
    pos = luaL_checkinteger(L, 2);
    luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
    charge_fmt(L, span(pos + 1, e), "`table.insert` shifting %lld elements",
               (long long)span(pos + 1, e));
    for (lua_Integer i = e; i > pos; i--) {
      lua_geti(L, 1, i - 1);
      lua_seti(L, 1, i);
    }
    break;
  default: return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

static int sb_remove(lua_State *L) {
  lua_Integer size = tab_len(L, true);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size)
    luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  int64_t shift = pos < size ? span(pos, size - 1) : 0; /* size - 1 cannot wrap then */
  charge_fmt(L, sat_add(shift, 1), "`table.remove` shifting %lld elements", (long long)shift);
  lua_geti(L, 1, pos);
  for (; pos < size; pos++) {
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

/* table.sort: about 2 n log2 n comparisons (quicksort's expected count,
 * which ltablib keeps for any input by choosing pivots at random once a
 * partition is unbalanced), each comparing two values; a string
 * comparison reads up to the shorter string, so each comparison is
 * charged 1 + the longest string element. n is the larger of `#t` and
 * the raw length, so a `__len` that answers more the second time can
 * only reach nil elements, which a comparison without a comparator
 * rejects, or Lua code (a comparator or `__index`), which is counted; a C
 * comparator is charged per call. */
static int sb_counted_cmp(lua_State *L) {
  charge_fmt(L, 1, "a `table.sort` comparison");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int sb_sort(lua_State *L) {
  if (lua_iscfunction(L, 2)) {
    /* A C comparator counts no instruction; charged one step a call, it
     * bounds even a sort whose `__len` grew after the estimate. */
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, sb_counted_cmp, 1);
    lua_replace(L, 2);
  }
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_Integer n = luaL_len(L, 1);
    lua_Integer raw = (lua_Integer)lua_rawlen(L, 1);
    if (raw > n) n = raw;
    if (n > 1) {
      int64_t lg = 0;
      for (uint64_t v = (uint64_t)n; v; v >>= 1) lg++;
      int64_t comps = sat_mul(sat_mul(2, n), lg);
      charge_fmt(L, comps, "`table.sort` of %lld elements", (long long)n);
      int64_t longest = 0;
      for (lua_Integer k = 1; k <= raw; k++) {
        if (lua_rawgeti(L, 1, k) == LUA_TSTRING && len64(lua_rawlen(L, -1)) > longest)
          longest = len64(lua_rawlen(L, -1));
        lua_pop(L, 1);
      }
      if (longest > 0)
        charge_fmt(L, sat_mul(comps, longest),
                   "`table.sort` of %lld elements with strings of %lld bytes", (long long)n,
                   (long long)longest);
    }
  }
  return call_real(L);
}

/* Replaces lib[name] by wrapper, with the real function as upvalue 1 and
 * `which` as upvalue 2. lib is on the stack top. */
static void wrap(lua_State *L, const char *name, lua_CFunction wrapper, int which) {
  lua_getfield(L, -1, name);
  RP_ASSERT(lua_tocfunction(L, -1) != NULL);
  lua_pushinteger(L, which);
  lua_pushcclosure(L, wrapper, 2);
  lua_setfield(L, -2, name);
}

/* Deterministic pairs: keys sorted (false < true < numbers < strings);
 * other key types follow in traversal order. Lua's string hashing is
 * seeded per process, so the plain `pairs` order could change between two
 * compilations of the same spec. */
static const char prelude[] =
    "local next, type, sort, rawget, getmetatable = next, type, table.sort, rawget, getmetatable\n"
    "local rank = {boolean = 1, number = 2, string = 3}\n"
    "local function before(a, b)\n"
    "  local ta, tb = type(a), type(b)\n"
    "  if ta ~= tb then return (rank[ta] or 4) < (rank[tb] or 4) end\n"
    "  if ta == 'boolean' then return (not a) and b end\n"
    "  if ta == 'number' or ta == 'string' then return a < b end\n"
    "  return false\n"
    "end\n"
    "return function(t)\n"
    "  local mt = getmetatable(t)\n"
    "  if type(mt) == 'table' and rawget(mt, '__pairs') then return rawget(mt, '__pairs')(t) end\n"
    "  if type(t) ~= 'table' then error(\"bad argument #1 to 'pairs' (table expected, got \" .. type(t) .. ')', 2) end\n"
    "  local keys, n, plain = {}, 0, {}\n"
    "  for k in next, t do\n"
    "    if rank[type(k)] then n = n + 1; keys[n] = k else plain[#plain + 1] = k end\n"
    "  end\n"
    "  sort(keys, before)\n"
    "  for i = 1, #plain do keys[n + i] = plain[i] end\n"
    "  local i = 0\n"
    "  return function()\n"
    "    i = i + 1\n"
    "    local k = keys[i]\n"
    "    if k ~= nil then return k, rawget(t, k) end\n"
    "  end, t, nil\n"
    "end\n";

static void copy_fields(lua_State *L, int from, int to, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    lua_getfield(L, from, names[i]);
    lua_setfield(L, to, names[i]);
  }
}

/* Builds the sandbox environment and leaves it on the stack top. */
static void build_env(lua_State *L) {
  static const struct { const char *name; lua_CFunction fn; } libs[] = {
      {LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string},
      {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
      {LUA_UTF8LIBNAME, luaopen_utf8}};
  for (size_t i = 0; i < RP_ARRAY_LEN(libs); i++) {
    luaL_requiref(L, libs[i].name, libs[i].fn, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  int G = lua_gettop(L);
  lua_newtable(L);
  int E = lua_gettop(L);
  static const char *const base[] = {"assert", "error", "ipairs", "next", "rawequal",
                                     "rawget", "rawlen", "rawset", "select", "tonumber",
                                     "tostring", "type", "getmetatable", "_VERSION"};
  copy_fields(L, G, E, base, RP_ARRAY_LEN(base));
  lua_pushcfunction(L, sb_pcall);
  lua_setfield(L, E, "pcall");
  lua_pushcfunction(L, sb_xpcall);
  lua_setfield(L, E, "xpcall");
  lua_getfield(L, G, "setmetatable");
  lua_pushcclosure(L, sb_setmetatable, 1);
  lua_setfield(L, E, "setmetatable");
  lua_getfield(L, G, "collectgarbage");
  lua_pushcclosure(L, sb_collectgarbage, 1);
  lua_setfield(L, E, "collectgarbage");
  lua_pushvalue(L, E);
  lua_pushcclosure(L, sb_load, 1);
  lua_setfield(L, E, "load");
  lua_pushvalue(L, E);
  lua_setfield(L, E, "_G");

  /* Libraries: the real tables, minus what could leave the sandbox or
   * break determinism. string.dump goes from the real table because the
   * string metatable's __index reaches it. */
  static const char *const libnames[] = {LUA_STRLIBNAME, LUA_TABLIBNAME,
                                         LUA_MATHLIBNAME, LUA_UTF8LIBNAME};
  copy_fields(L, G, E, libnames, RP_ARRAY_LEN(libnames));
  lua_getfield(L, E, LUA_STRLIBNAME);
  lua_pushcfunction(L, sb_dump);
  lua_setfield(L, -2, "dump");
  wrap(L, "find", sb_pattern, PAT_FIND);
  wrap(L, "match", sb_pattern, PAT_MATCH);
  wrap(L, "gmatch", sb_pattern, PAT_GMATCH);
  wrap(L, "gsub", sb_pattern, PAT_GSUB);
  wrap(L, "rep", sb_rep, 0);
  wrap(L, "lower", sb_linear, LIN_LOWER);
  wrap(L, "upper", sb_linear, LIN_UPPER);
  wrap(L, "reverse", sb_linear, LIN_REVERSE);
  wrap(L, "sub", sb_linear, LIN_SUB);
  wrap(L, "byte", sb_linear, LIN_BYTE);
  wrap(L, "char", sb_linear, LIN_CHAR);
  wrap(L, "format", sb_linear, LIN_FORMAT);
  wrap(L, "packsize", sb_linear, LIN_PACKSIZE);
  wrap(L, "pack", sb_pack, 0);
  wrap(L, "unpack", sb_pack, 0);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_TABLIBNAME);
  wrap(L, "move", sb_move, 0);
  wrap(L, "concat", sb_span_call, 1);
  wrap(L, "unpack", sb_span_call, 0);
  wrap(L, "insert", sb_insert, 0);
  wrap(L, "remove", sb_remove, 0);
  wrap(L, "sort", sb_sort, 0);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_UTF8LIBNAME);
  wrap(L, "char", sb_linear, LIN_UTF8_CHAR);
  wrap(L, "codepoint", sb_linear, LIN_UTF8_CODEPOINT);
  wrap(L, "len", sb_linear, LIN_UTF8_LEN);
  wrap(L, "offset", sb_linear, LIN_UTF8_OFFSET);
  wrap(L, "codes", sb_utf8_codes, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, E);
  wrap(L, "tonumber", sb_linear, LIN_TONUMBER);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_MATHLIBNAME);
  lua_getfield(L, -1, "randomseed");
  lua_pushinteger(L, 0);
  lua_call(L, 1, 0); /* math.random is seeded and therefore deterministic */
  lua_pushnil(L);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);

  /* The string metatable: a read-only proxy answers getmetatable(""). */
  lua_pushliteral(L, "");
  RP_ASSERT(lua_getmetatable(L, -1));
  lua_newtable(L); /* proxy */
  lua_newtable(L); /* its metatable */
  lua_pushcfunction(L, sb_strmeta);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, sb_strmeta);
  lua_setfield(L, -2, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);

  /* pairs, from the prelude. */
  RP_ASSERT(luaL_loadbufferx(L, prelude, sizeof prelude - 1, "=prelude", "t") == LUA_OK);
  lua_call(L, 0, 1);
  lua_setfield(L, E, "pairs");

  /* Removed names raise instead of reading nil; the metatable is hidden. */
  lua_newtable(L);
  lua_pushcfunction(L, sb_env_index);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, E);
  lua_remove(L, G);
}

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

static void push_ctx(lua_State *L, const Run *r) {
  const HookCtx *c = r->ctx;
  lua_createtable(L, 0, 12);
  set_str(L, "hook", kind_names[r->kind]);
  set_int(L, "world_size", (int64_t)c->nranks);

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
  int pools = lua_gettop(L);
  lua_pushvalue(L, pools);
  lua_setfield(L, -3, "pools");

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

  if (r->kind == HOOK_LAYER_PARTITION || r->kind == HOOK_EXPERT_PLACEMENT) {
    lua_rawgeti(L, pools, (lua_Integer)r->pool + 1);
    lua_setfield(L, -3, "pool");
  }
  lua_pop(L, 1); /* pools */

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
  if (r->kind == HOOK_OBJECTIVE) {
    lua_createtable(L, 0, (int)r->ncand);
    for (size_t i = 0; i < r->ncand; i++) {
      lua_pushnumber(L, r->cand[i].value);
      lua_setfield(L, -2, r->cand[i].key);
    }
    lua_setfield(L, -2, "candidate");
  }
}

/* ---- converting and checking results ---- */

/* Caps repeated reports of one kind of problem. */
#define HOOK_MAX_REPORTS 5

static SrcLoc result_loc(const Run *r) {
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

static void fmt_number(char *buf, size_t n, double v) {
  if (isnan(v)) snprintf(buf, n, "nan");
  else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
  else snprintf(buf, n, "%.17g", v);
}

/* Describes the value at idx for a message: 3, 2.5, nan, "text", a table. */
static void describe(lua_State *L, int idx, char *buf, size_t n) {
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
    else fmt_number(buf, n, lua_tonumber(L, idx));
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
  Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r), "`%s` is %s, expected an integer",
                    subject, buf);
  if (lua_type(L, idx) == LUA_TNUMBER)
    diag_help(g, "round with math.floor or use integer division `//`");
  return false;
}

static bool want_table(Run *r, lua_State *L, int idx, const char *subject, const char *shape) {
  if (lua_type(L, idx) == LUA_TTABLE) return true;
  char buf[64];
  describe(L, idx, buf, sizeof buf);
  Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r), "`%s` is %s, expected a table", subject, buf);
  diag_help(g, "the %s hook returns %s (docs/hooks.md)", kind_names[r->kind], shape);
  return false;
}

static const char placement_shape[] = "a list of {rank = R, node = N, gpu = G}, one per rank";
static const char partition_shape[] = "a list of layer counts, one per pp stage";
static const char expert_shape[] = "a list, one per expert, of lists of ep ranks";

static bool convert_placement(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  if (!want_table(r, L, res, "placement", placement_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if (n != c->nranks) {
    Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r),
                      "`placement` has %zu entries, expected one per rank (%zu)", n, c->nranks);
    diag_help(g, "the placement hook returns %s", placement_shape);
    return false;
  }
  bool ok = true;
  int reports = 0;
  size_t *where = rp_malloc((c->nranks ? c->nranks : 1) * sizeof *where);
  for (size_t i = 0; i < c->nranks; i++) where[i] = 0;
  lua_checkstack(L, 8);
  for (size_t i = 1; i <= n && reports < HOOK_MAX_REPORTS; i++) {
    char subj[64];
    lua_rawgeti(L, res, (lua_Integer)i);
    snprintf(subj, sizeof subj, "placement[%zu]", i);
    if (!want_table(r, L, -1, subj, placement_shape)) {
      lua_pop(L, 1);
      ok = false;
      reports++;
      continue;
    }
    int64_t v[3];
    static const char *const f[3] = {"rank", "node", "gpu"};
    bool eok = true;
    for (int k = 0; k < 3; k++) {
      lua_pushstring(L, f[k]);
      lua_rawget(L, -2);
      snprintf(subj, sizeof subj, "placement[%zu].%s", i, f[k]);
      if (!want_int(r, L, -1, subj, &v[k])) eok = false;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (!eok) {
      ok = false;
      reports++;
      continue;
    }
    if (v[0] < 0 || (uint64_t)v[0] >= c->nranks) {
      Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
                        "`placement[%zu].rank` = %lld, but ranks are 0-%zu", i,
                        (long long)v[0], c->nranks - 1);
      diag_help(g, "ranks are global and 0-based; ctx.world_size is %zu", c->nranks);
      ok = false;
      reports++;
      continue;
    }
    if (where[v[0]]) {
      Diag *g = diag_at(r->d, DIAG_E0611, result_loc(r),
                        "rank %lld is placed twice, by `placement[%zu]` and `placement[%zu]`",
                        (long long)v[0], where[v[0]], i);
      diag_help(g, "place every rank exactly once");
      ok = false;
      reports++;
      continue;
    }
    if (v[1] < 0 || v[1] >= c->nodes) {
      Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
                        "`placement[%zu].node` = %lld, but the cluster has %lld nodes (0-%lld)", i,
                        (long long)v[1], (long long)c->nodes, (long long)c->nodes - 1);
      diag_help(g, "nodes are numbered from 0 to hardware.nodes - 1");
      ok = false;
      reports++;
      continue;
    }
    if (v[2] < 0 || v[2] >= c->gpus_per_node) {
      Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
                        "`placement[%zu].gpu` = %lld, but nodes have %lld GPUs (0-%lld)", i,
                        (long long)v[2], (long long)c->gpus_per_node,
                        (long long)c->gpus_per_node - 1);
      diag_help(g, "GPUs are numbered from 0 to hardware.gpus_per_node - 1 on each node");
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
  return hook_check_placement(c, r->node, r->gpu, result_loc(r), "placement", r->d);
}

static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
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
  /* No GPU twice: sort (GPU id, rank) pairs and compare neighbours. */
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
  if (!ok) return false;
  /* tp groups inside one scale-up domain (and one node when the domain is
   * not larger than a node). */
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

static bool convert_partition(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  const HookPool *p = &c->pools[r->pool];
  if (!want_table(r, L, res, "layer_partition", partition_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if ((int64_t)n != p->pp) {
    Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r),
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
      Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
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
    Diag *g = diag_at(r->d, DIAG_E0616, result_loc(r),
                      "layer partition %s = %lld, expected the model's %lld layers", sb.buf,
                      (long long)sum, (long long)c->layers);
    diag_help(g, "the %lld stages of pool `%s` must hold every layer exactly once",
              (long long)p->pp, p->name);
    sb_free(&sb);
    ok = false;
  }
  return ok;
}

static bool convert_experts(Run *r, lua_State *L, int res) {
  const HookCtx *c = r->ctx;
  const HookPool *p = &c->pools[r->pool];
  int64_t E = c->experts, ep = p->ep;
  if (!want_table(r, L, res, "expert_placement", expert_shape)) return false;
  size_t n = (size_t)lua_rawlen(L, res);
  if ((int64_t)n != E) {
    Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r),
                      "`expert_placement` has %zu entries, expected one per expert (%lld)", n,
                      (long long)E);
    diag_help(g, "the expert_placement hook returns %s", expert_shape);
    return false;
  }
  HookExpertMap *m = &r->em;
  m->experts = E;
  m->ep = ep;
  m->offsets = rp_calloc((size_t)E + 1, sizeof *m->offsets);
  RP_VEC(int64_t) ranks = {0};
  int64_t *load = rp_calloc((size_t)ep, sizeof *load);
  bool ok = true;
  int reports = 0;
  lua_checkstack(L, 8);
  for (int64_t e = 0; e < E && reports < HOOK_MAX_REPORTS; e++) {
    char subj[64];
    snprintf(subj, sizeof subj, "expert_placement[%lld]", (long long)e + 1);
    lua_rawgeti(L, res, (lua_Integer)e + 1);
    m->offsets[e] = (int64_t)ranks.len;
    if (!want_table(r, L, -1, subj, expert_shape)) {
      lua_pop(L, 1);
      ok = false;
      reports++;
      continue;
    }
    size_t k = (size_t)lua_rawlen(L, -1);
    if (k == 0 || (int64_t)k > ep) {
      Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
                        "`%s` (expert %lld) lists %zu ranks, expected 1 to %lld", subj,
                        (long long)e, k, (long long)ep);
      diag_help(g, "every expert needs at least one replica, at most one per ep rank");
      lua_pop(L, 1);
      ok = false;
      reports++;
      continue;
    }
    size_t start = ranks.len;
    for (size_t j = 1; j <= k; j++) {
      char s2[96];
      snprintf(s2, sizeof s2, "%s[%zu]", subj, j);
      lua_rawgeti(L, -1, (lua_Integer)j);
      int64_t v;
      bool iok = want_int(r, L, -1, s2, &v);
      lua_pop(L, 1);
      if (!iok) {
        ok = false;
        reports++;
        break;
      }
      if (v < 0 || v >= ep) {
        Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r),
                          "`%s` = %lld, but pool `%s` has ep ranks 0-%lld", s2, (long long)v,
                          p->name, (long long)ep - 1);
        diag_help(g, "expert placements name ranks of the expert-parallel group, 0-based");
        ok = false;
        reports++;
        break;
      }
      bool dup = false;
      for (size_t q = start; q < ranks.len; q++)
        if (ranks.items[q] == v) dup = true;
      if (dup) {
        Diag *g = diag_at(r->d, DIAG_E0611, result_loc(r),
                          "expert %lld is on ep rank %lld twice (`%s`)", (long long)e,
                          (long long)v, s2);
        diag_help(g, "a rank holds at most one replica of an expert");
        ok = false;
        reports++;
        break;
      }
      rp_vec_push(&ranks, v);
      load[v]++;
    }
    lua_pop(L, 1);
  }
  m->offsets[E] = (int64_t)ranks.len;
  m->ranks = ranks.items ? ranks.items : rp_calloc(1, sizeof(int64_t));
  if (ok) {
    int64_t total = (int64_t)ranks.len;
    if (total % ep != 0) {
      Diag *g = diag_at(r->d, DIAG_E0612, result_loc(r),
                        "%lld expert replicas do not spread evenly over %lld ep ranks of pool `%s`",
                        (long long)total, (long long)ep, p->name);
      diag_help(g, "every ep rank holds the same number of physical experts: use a multiple of %lld replicas (such as %lld or %lld)",
                (long long)ep, (long long)(total / ep * ep), (long long)((total / ep + 1) * ep));
      ok = false;
    } else {
      m->slots_per_rank = total / ep;
      for (int64_t k = 0; k < ep; k++)
        if (load[k] != m->slots_per_rank) {
          Diag *g = diag_at(r->d, DIAG_E0612, result_loc(r),
                            "ep rank %lld of pool `%s` holds %lld experts, expected %lld (%lld replicas over %lld ranks)",
                            (long long)k, p->name, (long long)load[k],
                            (long long)m->slots_per_rank, (long long)total, (long long)ep);
          diag_help(g, "every ep rank holds the same number of physical experts");
          ok = false;
          break;
        }
    }
  }
  free(load);
  return ok;
}

static bool convert_objective(Run *r, lua_State *L, int res) {
  if (lua_type(L, res) != LUA_TNUMBER) {
    char buf[64];
    describe(L, res, buf, sizeof buf);
    Diag *g = diag_at(r->d, DIAG_E0609, result_loc(r), "`objective` is %s, expected a number", buf);
    diag_help(g, "the objective hook returns a score; higher is better");
    return false;
  }
  double v = lua_tonumber(L, res);
  if (!isfinite(v)) {
    char buf[32];
    fmt_number(buf, sizeof buf, v);
    Diag *g = diag_at(r->d, DIAG_E0610, result_loc(r), "`objective` is %s, expected a finite number", buf);
    diag_help(g, "guard divisions: a candidate with no throughput can score 0");
    return false;
  }
  r->score = v;
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
  build_env(L);
  int E = lua_gettop(L);
  push_ctx(L, r);
  int C = lua_gettop(L);
  /* From here on the hook's own allocations count. */
  r->limit = r->used + r->lim->memory;
  r->capped = true;
  set_deadline(r);
  r->step = step_for(r->longest); /* the context's strings count too */
  lua_sethook(L, run_hook, LUA_MASKCOUNT | LUA_MASKRET, r->step);
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
  switch (r->kind) {
  case HOOK_PLACEMENT: r->result_ok = convert_placement(r, L, res); break;
  case HOOK_LAYER_PARTITION: r->result_ok = convert_partition(r, L, res); break;
  case HOOK_EXPERT_PLACEMENT: r->result_ok = convert_experts(r, L, res); break;
  default: r->result_ok = convert_objective(r, L, res); break;
  }
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
  return line > 0 ? result_loc(&tmp) : (SrcLoc){r->path, 0, 0};
}

/* Turns a failed run into one diagnostic. */
static void report_failure(Run *r, int status) {
  const char *hk = kind_names[r->kind];
  Diag *g;
  int line = r->err_line ? r->err_line : r->last_line;
  if (r->kill == KILL_STRING) {
    /* a memory error, which runs no message handler: the line is the one
     * the allocator found on the stack */
    if (r->str_line) line = r->str_line;
    g = diag_at(r->d, DIAG_E0620, line_loc(r, line),
                "%s hook built a string of %lld bytes, longer than the sandbox's limit of %lld bytes",
                hk, (long long)r->str_asked, (long long)HOOK_STRING_MAX);
    if (r->phase == PH_LOAD)
      diag_note(g, "a string literal or name in the hook file, made when the file is compiled; it ends on this line");
    diag_help(g, "keep long text as a table of shorter strings; each string a hook makes is capped at %lld bytes (docs/hooks.md, \"Long strings\")",
              (long long)HOOK_STRING_MAX);
    return;
  }
  if (r->kill == KILL_MEMORY || status == LUA_ERRMEM) {
    g = diag_at(r->d, DIAG_E0607, line_loc(r, line),
                "%s hook went over its memory cap of %lld bytes", hk, (long long)r->lim->memory);
    diag_help(g, "build smaller tables or strings, or raise RANKPLAN_HOOK_MEMORY");
    if (line) diag_note(g, "last line run in the hook: %d", line);
    return;
  }
  if (r->kill == KILL_BUDGET) {
    g = diag_at(r->d, DIAG_E0606, line_loc(r, line),
                "%s hook ran out of its instruction budget of %lld instructions", hk,
                (long long)r->lim->instructions);
    diag_help(g, "look for a loop that never ends, or raise RANKPLAN_HOOK_INSTRUCTIONS");
    return;
  }
  if (r->kill == KILL_DEADLINE && r->total_bound) {
    g = diag_at(r->d, DIAG_E0621, line_loc(r, line),
                "%s hook ran past what is left of the %lld ms that all hook calls of "
                "this command may take together", hk, (long long)r->lim->total_ms);
    diag_help(g, "make the hook faster, score fewer rows (search --top), or raise "
                 "RANKPLAN_HOOK_TOTAL_MS (docs/hooks.md, \"Limits\")");
    return;
  }
  if (r->kill == KILL_DEADLINE) {
    g = diag_at(r->d, DIAG_E0608, line_loc(r, line),
                "%s hook ran past its deadline of %lld ms", hk, (long long)r->lim->timeout_ms);
    diag_help(g, "look for a loop that never ends, or raise RANKPLAN_HOOK_TIMEOUT_MS");
    return;
  }
  if (r->kill == KILL_COSTLY) {
    g = diag_at(r->d, DIAG_E0619, line_loc(r, line),
                "%s hook: %s of its instruction budget of %lld", hk, r->costly,
                (long long)r->lim->instructions);
    diag_help(g, "work on fewer elements or shorter strings (for a pattern: anchor it with `^`, use fewer `*`, `+`, `-` or `?`), or raise RANKPLAN_HOOK_INSTRUCTIONS (docs/hooks.md, \"Library calls\")");
    add_traceback(r, g);
    return;
  }
  if (r->kill == KILL_DENIED) {
    g = diag_at(r->d, DIAG_E0605, line_loc(r, line), "%s hook used %s, which the sandbox does not offer",
                hk, r->denied);
    diag_help(g, "hooks compute from their context table only: no files, processes, modules or debug access (docs/hooks.md)");
    add_traceback(r, g);
    return;
  }
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

/* Runs hook r->kind once. Returns true when it ran and its result passed
 * conversion and every check (outputs in r). */
static bool run_once(Run *r) {
  lua_State *L = lua_newstate(run_alloc, r);
  if (!L) {
    r->kill = KILL_MEMORY;
    report_failure(r, LUA_ERRMEM);
    return false;
  }
  *(Run **)lua_getextraspace(L) = r;
  r->L = L;
  lua_atpanic(L, run_panic);
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
  lua_pushcfunction(L, run_msgh);
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
  Diag *g = diag_at(r->d, DIAG_E0614, result_loc(r), "%s hook gave different results on two runs: %s",
                    kind_names[r->kind], m);
  diag_help(g, "remove the source of chance: tostring() of tables or functions, math.random after reseeding, pairs() over table keys");
  free(m);
  return g;
}

static bool env_ready(HookEnv *env, HookKind k, Diags *d) {
  RP_ASSERT(env->file[k].set);
  return env_load(env, k, d);
}

bool hook_run_placement(HookEnv *env, const HookCtx *ctx, int64_t *node_out,
                        int64_t *gpu_out, Diags *d) {
  if (!env_ready(env, HOOK_PLACEMENT, d)) return false;
  size_t n = ctx->nranks ? ctx->nranks : 1;
  Run a, b;
  run_init(&a, env, HOOK_PLACEMENT, ctx, d);
  a.node = node_out;
  a.gpu = gpu_out;
  bool ok = run_once(&a);
  if (ok && env->lim.twice) {
    run_init(&b, env, HOOK_PLACEMENT, ctx, d);
    b.perturb = true;
    b.node = rp_calloc(n, sizeof(int64_t));
    b.gpu = rp_calloc(n, sizeof(int64_t));
    ok = run_once(&b);
    for (size_t r = 0; ok && r < ctx->nranks; r++)
      if (a.node[r] != b.node[r] || a.gpu[r] != b.gpu[r]) {
        nondeterministic(&a, "rank %zu on node %lld GPU %lld, then on node %lld GPU %lld", r,
                         (long long)a.node[r], (long long)a.gpu[r], (long long)b.node[r],
                         (long long)b.gpu[r]);
        ok = false;
      }
    free(b.node);
    free(b.gpu);
    run_free(&b);
  }
  run_free(&a);
  return ok;
}

bool hook_run_layer_partition(HookEnv *env, const HookCtx *ctx, size_t pool,
                              int64_t *layers_out, Diags *d) {
  RP_ASSERT(pool < ctx->npools);
  if (!env_ready(env, HOOK_LAYER_PARTITION, d)) return false;
  size_t pp = (size_t)ctx->pools[pool].pp;
  Run a, b;
  run_init(&a, env, HOOK_LAYER_PARTITION, ctx, d);
  a.pool = pool;
  a.layers = layers_out;
  bool ok = run_once(&a);
  if (ok && env->lim.twice) {
    run_init(&b, env, HOOK_LAYER_PARTITION, ctx, d);
    b.perturb = true;
    b.pool = pool;
    b.layers = rp_calloc(pp, sizeof(int64_t));
    ok = run_once(&b);
    for (size_t s = 0; ok && s < pp; s++)
      if (a.layers[s] != b.layers[s]) {
        nondeterministic(&a, "stage %zu holds %lld layers, then %lld", s,
                         (long long)a.layers[s], (long long)b.layers[s]);
        ok = false;
      }
    free(b.layers);
    run_free(&b);
  }
  run_free(&a);
  return ok;
}

void hook_expert_map_free(HookExpertMap *m) {
  free(m->offsets);
  free(m->ranks);
  memset(m, 0, sizeof *m);
}

bool hook_run_expert_placement(HookEnv *env, const HookCtx *ctx, size_t pool,
                               HookExpertMap *out, Diags *d) {
  RP_ASSERT(pool < ctx->npools);
  memset(out, 0, sizeof *out);
  if (!env_ready(env, HOOK_EXPERT_PLACEMENT, d)) return false;
  Run a, b;
  run_init(&a, env, HOOK_EXPERT_PLACEMENT, ctx, d);
  a.pool = pool;
  bool ok = run_once(&a);
  if (ok && env->lim.twice) {
    run_init(&b, env, HOOK_EXPERT_PLACEMENT, ctx, d);
    b.perturb = true;
    b.pool = pool;
    ok = run_once(&b);
    if (ok) {
      for (int64_t e = 0; e < a.em.experts; e++) {
        int64_t s = a.em.offsets[e], t = a.em.offsets[e + 1];
        bool same = t - s == b.em.offsets[e + 1] - b.em.offsets[e];
        for (int64_t i = 0; same && i < t - s; i++)
          same = a.em.ranks[s + i] == b.em.ranks[b.em.offsets[e] + i];
        if (!same) {
          nondeterministic(&a, "expert %lld is placed differently", (long long)e);
          ok = false;
          break;
        }
      }
    }
    hook_expert_map_free(&b.em);
    run_free(&b);
  }
  if (ok) *out = a.em;
  else hook_expert_map_free(&a.em);
  run_free(&a);
  return ok;
}

bool hook_run_objective(HookEnv *env, const HookCtx *ctx, const HookKV *cand,
                        size_t ncand, double *score_out, Diags *d) {
  if (!env_ready(env, HOOK_OBJECTIVE, d)) return false;
  Run a, b;
  run_init(&a, env, HOOK_OBJECTIVE, ctx, d);
  a.cand = cand;
  a.ncand = ncand;
  bool ok = run_once(&a);
  if (ok && env->lim.twice) {
    run_init(&b, env, HOOK_OBJECTIVE, ctx, d);
    b.perturb = true;
    b.cand = cand;
    b.ncand = ncand;
    ok = run_once(&b);
    if (ok && memcmp(&a.score, &b.score, sizeof a.score) != 0) {
      char x[32], y[32];
      fmt_number(x, sizeof x, a.score);
      fmt_number(y, sizeof y, b.score);
      nondeterministic(&a, "score %s, then %s", x, y);
      ok = false;
    }
    run_free(&b);
  }
  if (ok) *score_out = a.score;
  run_free(&a);
  return ok;
}
