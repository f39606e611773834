/*
 * test_hooks.c: the Lua hook sandbox and the four hook entry points.
 *
 * Abuse cases live in tests/hooks/abuse/, one Lua file per attack; each
 * must end in its diagnostic code, naming the hook file, without a crash
 * (the ASan+UBSan build runs this same program). Good cases check that
 * results are converted exactly, and the lua/ examples run against a
 * context built like the compiler builds it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks.h"
#include "rp_config.h"
#include "t.h"

static char tmpdir[] = "/tmp/rp-hooks-XXXXXX";
static int tmpn;

/* Writes src to a fresh file and returns its path (static storage). */
static const char *tmp_hook(const char *src) {
  static char path[256];
  snprintf(path, sizeof path, "%s/h%d.lua", tmpdir, tmpn++);
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(src, f);
  fclose(f);
  return path;
}

static const char *abuse(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/tests/hooks/abuse/%s.lua", RP_SOURCE_ROOT, name);
  return path;
}

static const char *example(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/lua/%s.lua", RP_SOURCE_ROOT, name);
  return path;
}

/* 4 nodes of 8 GPUs in racks of 2 nodes; pools: prefill tp8 x2, decode
 * tp4 x4 (32 ranks). */
static void ctx_pd(HookCtx *c, Diags *d) {
  memset(c, 0, sizeof *c);
  c->nodes = 4;
  c->gpus_per_node = 8;
  c->domain = 8;
  c->nodes_per_rack = 2;
  c->model_name = "test-model";
  c->layers = 80;
  c->hidden_size = 8192;
  c->vocab_size = 128256;
  c->heads = 64;
  c->kv_heads = 8;
  c->head_dim = 128;
  c->intermediate_size = 28672;
  c->npools = 2;
  c->pools = calloc(2, sizeof *c->pools);
  c->pools[0] = (HookPool){.name = "prefill", .role = ROLE_PREFILL, .replicas = 2, .tp = 8,
                           .pp = 1, .cp = 1, .dp = 1, .ep = 1, .etp = 1, .dcp = 1};
  c->pools[1] = (HookPool){.name = "decode", .role = ROLE_DECODE, .replicas = 4, .tp = 4,
                           .pp = 1, .cp = 1, .dp = 1, .ep = 1, .etp = 1, .dcp = 1};
  T_CHECK(hook_ctx_layout(c, NULL, d));
}

typedef struct {
  int64_t instructions, memory, timeout_ms;
  bool twice;
} Lim;

static void env_for(HookEnv *env, Diags *d, HookKind k, const char *path, const Lim *l) {
  hook_env_init(env, d);
  if (l) {
    if (l->instructions) env->lim.instructions = l->instructions;
    if (l->memory) env->lim.memory = l->memory;
    if (l->timeout_ms) env->lim.timeout_ms = l->timeout_ms;
    env->lim.twice = l->twice;
  }
  SrcLoc loc = {"spec.yaml", 3, 5};
  hook_env_set(env, d, k, path, loc);
}

/* The first error's code and message; prints every diagnostic on failure. */
static const Diag *first_error(Diags *d) {
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->sev == SEV_ERROR) return d->list.items[i];
  return NULL;
}

static void dump(Diags *d) { diags_print(d, stderr, DIAG_FMT_TEXT, false); }

/* Runs the placement hook `path` and expects diagnostic `code` whose
 * message contains `text` and whose position is in the hook file (at
 * `line`, or any line when line < 0). */
static void expect_placement(const char *path, const Lim *l, const char *code,
                             const char *text, int line) {
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  HookEnv env;
  env_for(&env, &d, HOOK_PLACEMENT, path, l);
  int64_t node[32], gpu[32];
  bool ok = hook_run_placement(&env, &c, node, gpu, &d);
  T_CHECK(!ok);
  const Diag *g = first_error(&d);
  T_CHECK(g != NULL);
  if (g) {
    T_EQ_STR(diag_info(g->code)->code, code);
    T_CHECK(strstr(g->msg, text) != NULL);
    T_EQ_STR(g->loc.file, path);
    if (line >= 0) T_EQ_INT(g->loc.line, line);
    if (strcmp(diag_info(g->code)->code, code) != 0 || !strstr(g->msg, text) ||
        (line >= 0 && g->loc.line != line))
      dump(&d);
  }
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static double run_objective(const char *path, const Lim *l, bool *ok, Diags *d) {
  HookCtx c;
  ctx_pd(&c, d);
  HookEnv env;
  env_for(&env, d, HOOK_OBJECTIVE, path, l);
  HookKV cand[] = {{"goodput", 12.5}, {"gpus", 32}};
  double score = -1;
  *ok = hook_run_objective(&env, &c, cand, 2, &score, d);
  hook_env_free(&env);
  hook_ctx_free(&c);
  return score;
}

static void expect_objective(const char *path, const Lim *l, const char *code, const char *text) {
  Diags d;
  diags_init(&d);
  bool ok;
  run_objective(path, l, &ok, &d);
  T_CHECK(!ok);
  const Diag *g = first_error(&d);
  T_CHECK(g != NULL);
  if (g) {
    T_EQ_STR(diag_info(g->code)->code, code);
    T_CHECK(strstr(g->msg, text) != NULL);
    T_EQ_STR(g->loc.file, path);
    if (strcmp(diag_info(g->code)->code, code) != 0 || !strstr(g->msg, text)) dump(&d);
  }
  diags_free(&d);
}

/* The objective hook at path runs without a diagnostic and returns 1. */
static void expect_objective_ok(const char *path) {
  Diags d;
  diags_init(&d);
  bool ok;
  double v = run_objective(path, NULL, &ok, &d);
  T_CHECK(ok);
  T_CHECK(v == 1);
  if (!ok) dump(&d);
  diags_free(&d);
}

/* ---- limits ---- */

static void test_infinite_loop(void) {
  Lim l = {.instructions = 2000000};
  expect_placement(abuse("infinite_loop"), &l, "E0606", "instruction budget of 2000000", -1);
}

static void test_pcall_cannot_catch_budget(void) {
  Lim l = {.instructions = 2000000};
  expect_placement(abuse("pcall_escape"), &l, "E0606", "instruction budget", -1);
}

static void test_deadline(void) {
  Lim l = {.instructions = INT64_C(1000000000000), .timeout_ms = 50};
  expect_objective(abuse("deadline"), &l, "E0608", "deadline of 50 ms");
}

static void test_deep_recursion(void) {
  expect_objective(abuse("deep_recursion"), NULL, "E0617", "stack overflow");
}

static void test_string_rep_bomb(void) {
  expect_objective(abuse("string_rep_bomb"), NULL, "E0607", "memory cap of 67108864 bytes");
}

static void test_table_bomb(void) {
  Lim l = {.memory = INT64_C(8) << 20};
  expect_placement(abuse("table_bomb"), &l, "E0607", "memory cap of 8388608 bytes", -1);
}

/* ---- the sandbox ---- */

static void test_os_execute(void) {
  expect_placement(abuse("os_execute"), NULL, "E0605", "used `os`", 2);
}

static void test_io_open(void) {
  expect_placement(abuse("io_open"), NULL, "E0605", "used `io`", 2);
}

static void test_require(void) {
  expect_placement(abuse("require"), NULL, "E0605", "used `require`", 1);
}

static void test_string_dump(void) {
  expect_placement(abuse("string_dump"), NULL, "E0605", "used `string.dump`", 3);
}

static void test_binary_chunk(void) {
  expect_placement(abuse("binary_chunk"), NULL, "E0605", "precompiled (binary) chunk", 4);
}

static void test_pcall_cannot_catch_denial(void) {
  expect_placement(abuse("pcall_denied"), NULL, "E0605", "used `io`", 3);
}

static void test_strmeta_tamper(void) {
  expect_placement(abuse("strmeta_tamper"), NULL, "E0605", "the string metatable", 3);
}

static void test_gc_finalizer(void) {
  expect_placement(abuse("gc_finalizer"), NULL, "E0605", "`__gc`", 3);
}

static void test_error_table(void) {
  expect_placement(abuse("error_table"), NULL, "E0604", "with a table value", 2);
}

static void test_error_nil(void) {
  expect_placement(abuse("error_nil"), NULL, "E0604", "with a nil value", 2);
}

/* A plain error() names the innermost line of the hook file and keeps the
 * traceback as notes. */
static void test_error_string(void) {
  expect_placement(abuse("error_string"), NULL, "E0604", "need at least 100 nodes, got 4", 3);
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  HookEnv env;
  env_for(&env, &d, HOOK_PLACEMENT, abuse("error_string"), NULL);
  int64_t node[32], gpu[32];
  T_CHECK(!hook_run_placement(&env, &c, node, gpu, &d));
  const Diag *g = first_error(&d);
  T_CHECK(g && g->notes && strstr(g->notes, "error_string.lua:7: in function"));
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void test_syntax_and_shape(void) {
  expect_placement(abuse("syntax"), NULL, "E0602", "unexpected symbol near '='", 2);
  expect_placement(abuse("not_function"), NULL, "E0603", "returns a number", 0);
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  HookEnv env;
  env_for(&env, &d, HOOK_PLACEMENT, "/nonexistent/hook.lua", NULL);
  int64_t node[32], gpu[32];
  T_CHECK(!hook_run_placement(&env, &c, node, gpu, &d));
  T_CHECK(!hook_run_placement(&env, &c, node, gpu, &d)); /* reported once */
  T_EQ_INT(d.nerrors, 1);
  const Diag *g = first_error(&d);
  T_CHECK(g && g->code == DIAG_E0601 && strstr(g->msg, "cannot read placement hook `/nonexistent/hook.lua`"));
  T_CHECK(g && strcmp(g->loc.file, "spec.yaml") == 0 && g->loc.line == 3);
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

/* The sandbox environment: what is there, what is not, determinism aids. */
static void test_environment(void) {
  const char *src =
      "return function(ctx)\n"
      "  local got = {}\n"
      "  for _, n in ipairs({'string','table','math','utf8','pairs','ipairs','load','pcall'}) do\n"
      "    assert(_G[n] ~= nil, n)\n"
      "  end\n"
      "  assert(('abc'):upper() == 'ABC')\n"
      "  assert(getmetatable('') ~= nil)\n"
      "  assert(math.randomseed == nil)\n"
      "  local keys = {}\n"
      "  for k in pairs({zeta = 1, alpha = 2, [3] = 3, [1] = 4, mid = 5}) do keys[#keys + 1] = tostring(k) end\n"
      "  assert(table.concat(keys, ',') == '1,3,alpha,mid,zeta', table.concat(keys, ','))\n"
      "  local f = load('return 6 * 7')\n"
      "  assert(f() == 42)\n"
      "  assert(load('return string')() == string)\n"
      "  assert(collectgarbage('count') > 0)\n"
      "  return math.random(1, 1000000) + 0.5\n"
      "end\n";
  const char *path = tmp_hook(src);
  Diags d;
  diags_init(&d);
  bool ok;
  double a = run_objective(path, NULL, &ok, &d);
  T_CHECK(ok);
  if (!ok) dump(&d);
  double b = run_objective(path, NULL, &ok, &d);
  T_CHECK(ok);
  T_CHECK(a == b); /* math.random is seeded the same in every run */
  diags_free(&d);
  /* io is nil-safe to test only through the error: reading it is refused. */
  expect_objective(tmp_hook("return function(ctx) return io and 1 or 0 end\n"), NULL, "E0605", "`io`");
  expect_objective(tmp_hook("return function(ctx) collectgarbage('stop') return 1 end\n"), NULL,
                   "E0605", "collectgarbage");
  expect_objective(tmp_hook("return function(ctx) return debug.traceback() end\n"), NULL, "E0605",
                   "`debug`");
  expect_objective(tmp_hook("return function(ctx) return dofile('/etc/passwd') end\n"), NULL, "E0605",
                   "`dofile`");
  expect_objective(tmp_hook("return function(ctx) return loadfile('/etc/passwd') end\n"), NULL,
                   "E0605", "`loadfile`");
  expect_objective(tmp_hook("return function(ctx) return package.loaded end\n"), NULL, "E0605",
                   "`package`");
}

/* ---- results ---- */

static void test_nan(void) {
  expect_placement(abuse("nan_node"), NULL, "E0609", "`placement[4].node` is nan, expected an integer", 9);
  expect_objective(abuse("nan_objective"), NULL, "E0610", "`objective` is nan, expected a finite number");
}

static void test_non_integer(void) {
  expect_placement(abuse("non_integer"), NULL, "E0609", "`placement[2].gpu` is 2.5, expected an integer", 8);
}

static void test_out_of_range(void) {
  expect_placement(abuse("gpu_out_of_range"), NULL, "E0610",
                   "`placement[17].gpu` = 9, but nodes have 8 GPUs (0-7)", 8);
  expect_placement(abuse("rank_out_of_range"), NULL, "E0610",
                   "`placement[5].rank` = 32, but ranks are 0-31", 8);
}

static void test_duplicates(void) {
  expect_placement(abuse("duplicate_rank"), NULL, "E0611",
                   "rank 2 is placed twice, by `placement[3]` and `placement[6]`", 8);
  expect_placement(abuse("duplicate_gpu"), NULL, "E0611", "GPU 0 of node 0 holds ranks 0 and 1", 8);
  expect_placement(abuse("short_result"), NULL, "E0609", "has 1 entries, expected one per rank (32)", 2);
}

static void test_tp_domain(void) {
  expect_placement(abuse("tp_across_domain"), NULL, "E0613",
                   "tp group of pool `prefill` instance 0 spans ranks 0 (node 0 GPU 0) and 1 (node 1 GPU 0)", 8);
  /* allowed: a warning and the placement is accepted */
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  c.allow_tp_across_domain = true;
  HookEnv env;
  env_for(&env, &d, HOOK_PLACEMENT, abuse("tp_across_domain"), NULL);
  int64_t node[32], gpu[32];
  T_CHECK(hook_run_placement(&env, &c, node, gpu, &d));
  T_EQ_INT(d.nerrors, 0);
  T_EQ_INT(d.nwarnings, 1);
  T_EQ_INT(node[5], 1);
  T_EQ_INT(gpu[5], 1);
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void test_metamethods_not_run(void) {
  Lim l = {.instructions = 2000000};
  expect_placement(abuse("metamethod_result"), &l, "E0609", "`placement[1].rank` is nil, expected an integer", 9);
}

static void test_nondeterministic(void) {
  Lim l = {.twice = true};
  expect_objective(abuse("nondeterministic"), &l, "E0614", "different results on two runs");
  /* a deterministic hook passes the same check */
  Diags d;
  diags_init(&d);
  bool ok;
  double s = run_objective(tmp_hook("return {objective = function(ctx)\n"
                                    "  return ctx.candidate.goodput / ctx.candidate.gpus\nend}\n"),
                           &l, &ok, &d);
  T_CHECK(ok);
  T_NEAR(s, 12.5 / 32, 1e-12);
  diags_free(&d);
}

static void test_placement_ok(void) {
  /* Reverses the GPUs inside each node: a valid placement, read exactly. */
  const char *path = tmp_hook(
      "return function(ctx)\n"
      "  local g, out = ctx.topology.gpus_per_node, {}\n"
      "  for _, r in ipairs(ctx.ranks) do\n"
      "    out[#out + 1] = {rank = r.rank, node = r.rank // g, gpu = g - 1 - r.rank % g}\n"
      "  end\n"
      "  return out\n"
      "end\n");
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  HookEnv env;
  env_for(&env, &d, HOOK_PLACEMENT, path, &(Lim){.twice = true});
  int64_t node[32], gpu[32];
  T_CHECK(hook_run_placement(&env, &c, node, gpu, &d));
  T_EQ_INT(d.list.len, 0);
  for (int r = 0; r < 32; r++) {
    T_EQ_INT(node[r], r / 8);
    T_EQ_INT(gpu[r], 7 - r % 8);
  }
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void test_context(void) {
  /* ranks, groups, pools and topology as the hook sees them */
  const char *path = tmp_hook(
      "return function(ctx)\n"
      "  assert(ctx.hook == 'objective')\n"
      "  assert(ctx.world_size == 32 and #ctx.ranks == 32)\n"
      "  assert(ctx.topology.racks == 2 and ctx.topology.nodes_per_rack == 2)\n"
      "  assert(ctx.pools[2].name == 'decode' and ctx.pools[2].first_rank == 16)\n"
      "  assert(ctx.pools[2].role == 'decode' and ctx.pools[2].size == 4)\n"
      "  local r = ctx.ranks[19]\n"
      "  assert(r.rank == 18 and r.pool == 'decode' and r.instance == 0 and r.tp == 2)\n"
      "  local n = 0\n"
      "  for _, g in ipairs(ctx.groups) do\n"
      "    if g.kind == 'tp' and g.pool == 'decode' then n = n + 1 end\n"
      "  end\n"
      "  assert(n == 4, n)\n"
      "  assert(ctx.model.layers == 80 and ctx.model.kv_heads == 8)\n"
      "  return ctx.candidate.gpus\n"
      "end\n");
  Diags d;
  diags_init(&d);
  bool ok;
  double s = run_objective(path, NULL, &ok, &d);
  T_CHECK(ok);
  if (!ok) dump(&d);
  T_NEAR(s, 32, 0);
  diags_free(&d);
}

static void test_layout_order(void) {
  /* order pp-tp: tp is outer, so a tp group strides by pp */
  Diags d;
  diags_init(&d);
  HookCtx c;
  memset(&c, 0, sizeof c);
  c.nodes = 1;
  c.gpus_per_node = 8;
  c.npools = 1;
  c.pools = calloc(1, sizeof *c.pools);
  c.pools[0] = (HookPool){.name = "p", .replicas = 1, .tp = 4, .pp = 2, .cp = 1, .dp = 1, .ep = 1,
                          .etp = 1, .dcp = 1};
  T_CHECK(hook_ctx_layout(&c, "pp-tp-cp-ep-dp", &d));
  T_EQ_INT(c.nranks, 8);
  T_EQ_INT(c.ranks[1].pp, 1);
  T_EQ_INT(c.ranks[1].tp, 0);
  T_EQ_INT(c.ranks[2].tp, 1);
  const HookGroup *tp0 = NULL;
  for (size_t i = 0; i < c.ngroups; i++)
    if (strcmp(c.groups[i].kind, "tp") == 0) {
      tp0 = &c.groups[i];
      break;
    }
  T_CHECK(tp0 && tp0->n == 4 && tp0->ranks[0] == 0 && tp0->ranks[1] == 2 && tp0->ranks[3] == 6);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void test_layer_partition(void) {
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  c.pools[1].pp = 4;
  HookEnv env;
  env_for(&env, &d, HOOK_LAYER_PARTITION, tmp_hook("return function(ctx)\n  return {19, 21, 21, 19}\nend\n"), NULL);
  int64_t out[4];
  T_CHECK(hook_run_layer_partition(&env, &c, 1, out, &d));
  T_EQ_INT(out[0], 19);
  T_EQ_INT(out[1], 21);
  hook_env_free(&env);
  env_for(&env, &d, HOOK_LAYER_PARTITION, tmp_hook("return function(ctx)\n  return {20, 20, 20, 19}\nend\n"), NULL);
  T_CHECK(!hook_run_layer_partition(&env, &c, 1, out, &d));
  const Diag *g = first_error(&d);
  T_CHECK(g && g->code == DIAG_E0616 && strstr(g->msg, "20 + 20 + 20 + 19 = 79, expected the model's 80 layers"));
  hook_env_free(&env);
  diags_free(&d);
  diags_init(&d);
  env_for(&env, &d, HOOK_LAYER_PARTITION, tmp_hook("return function(ctx)\n  return {80, 0, 0, 0}\nend\n"), NULL);
  T_CHECK(!hook_run_layer_partition(&env, &c, 1, out, &d));
  g = first_error(&d);
  T_CHECK(g && g->code == DIAG_E0610 && strstr(g->msg, "`layer_partition[2]` = 0"));
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void ctx_moe(HookCtx *c, Diags *d, int64_t experts, int64_t ep) {
  ctx_pd(c, d);
  c->experts = experts;
  c->top_k = 8;
  c->pools[0].ep = ep;
}

static void test_expert_placement(void) {
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_moe(&c, &d, 4, 2);
  HookEnv env;
  HookExpertMap m;
  /* 4 experts, expert 0 replicated: 6 replicas, 3 per rank */
  env_for(&env, &d, HOOK_EXPERT_PLACEMENT, tmp_hook("return function(ctx)\n  return {{0, 1}, {0}, {1}, {1, 0}}\nend\n"), NULL);
  T_CHECK(hook_run_expert_placement(&env, &c, 0, &m, &d));
  T_EQ_INT(m.slots_per_rank, 3);
  T_EQ_INT(m.offsets[4], 6);
  T_EQ_INT(m.ranks[m.offsets[3]], 1);
  hook_expert_map_free(&m);
  hook_env_free(&env);
  /* unbalanced: 3 on rank 0, 2 on rank 1 */
  env_for(&env, &d, HOOK_EXPERT_PLACEMENT, tmp_hook("return function(ctx)\n  return {{0, 1}, {0}, {1}, {0}}\nend\n"), NULL);
  T_CHECK(!hook_run_expert_placement(&env, &c, 0, &m, &d));
  T_CHECK(d.nerrors == 1 && d.list.items[0]->code == DIAG_E0612);
  hook_env_free(&env);
  diags_free(&d);
  diags_init(&d);
  /* duplicate and out-of-range ranks */
  env_for(&env, &d, HOOK_EXPERT_PLACEMENT, tmp_hook("return function(ctx)\n  return {{0, 0}, {0}, {2}, {1}}\nend\n"), NULL);
  T_CHECK(!hook_run_expert_placement(&env, &c, 0, &m, &d));
  T_EQ_INT(d.nerrors, 2);
  T_CHECK(d.list.items[0]->code == DIAG_E0611 && strstr(d.list.items[0]->msg, "expert 0 is on ep rank 0 twice"));
  T_CHECK(d.list.items[1]->code == DIAG_E0610 && strstr(d.list.items[1]->msg, "`expert_placement[3][1]` = 2, but pool `prefill` has ep ranks 0-1"));
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

/* lua/expert_placement/eplb_hot.lua: the hottest expert gets replicas,
 * every ep rank the same number of experts, and the busiest rank carries
 * less load than with the plain contiguous split (experts/ep per rank). */
static void test_example_eplb(void) {
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_moe(&c, &d, 16, 4);
  HookEnv env;
  HookExpertMap m;
  env_for(&env, &d, HOOK_EXPERT_PLACEMENT, example("expert_placement/eplb_hot"), &(Lim){.twice = true});
  T_CHECK(hook_run_expert_placement(&env, &c, 0, &m, &d));
  if (d.list.len) dump(&d);
  T_EQ_INT(m.slots_per_rank, 5); /* 16 experts + 4 redundant over 4 ranks */
  /* the same histogram as the Lua file */
  double load[16], per_rank[4] = {0, 0, 0, 0}, naive[4] = {0, 0, 0, 0};
  for (int e = 0; e < 16; e++) load[e] = (double)(1000000 / ((e * 37) % 16 + 1));
  T_CHECK(m.offsets[1] - m.offsets[0] > 1); /* expert 0 is the hottest */
  for (int e = 0; e < 16; e++) {
    int64_t k = m.offsets[e + 1] - m.offsets[e];
    for (int64_t i = m.offsets[e]; i < m.offsets[e + 1]; i++) per_rank[m.ranks[i]] += load[e] / (double)k;
    naive[e / 4] += load[e];
  }
  double worst = 0, worst_naive = 0;
  for (int r = 0; r < 4; r++) {
    if (per_rank[r] > worst) worst = per_rank[r];
    if (naive[r] > worst_naive) worst_naive = naive[r];
  }
  T_CHECK(worst < worst_naive);
  hook_expert_map_free(&m);
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

/* lua/layer_partition/lighter_ends.lua: the stages hold every layer, the
 * first and last hold no more than the middle ones, and fewer together. */
static void test_example_layer_partition(void) {
  Diags d;
  diags_init(&d);
  HookCtx c;
  ctx_pd(&c, &d);
  c.pools[1].pp = 4;
  HookEnv env;
  env_for(&env, &d, HOOK_LAYER_PARTITION, example("layer_partition/lighter_ends"), NULL);
  int64_t out[4];
  T_CHECK(hook_run_layer_partition(&env, &c, 1, out, &d));
  if (d.list.len) dump(&d);
  T_EQ_INT(out[0] + out[1] + out[2] + out[3], 80);
  T_CHECK(out[0] + out[3] < out[1] + out[2]);
  T_CHECK(out[0] <= out[1] && out[0] <= out[2] && out[3] <= out[1] && out[3] <= out[2]);
  hook_env_free(&env);
  hook_ctx_free(&c);
  diags_free(&d);
}

static void test_example_objective(void) {
  Diags d;
  diags_init(&d);
  bool ok;
  double s = run_objective(example("objective/goodput_per_gpu"), NULL, &ok, &d);
  T_CHECK(ok);
  T_NEAR(s, 12.5 / 32, 1e-12);
  diags_free(&d);
}

/* ---- library calls that loop in C (docs/hooks.md, "Library calls") ---- */

/* The fuzz finding: a backtracking pattern is one C call where no
 * instruction is counted. It must be refused before it starts, at the line
 * of the call, instead of running for minutes. */
static void test_pattern_backtrack(void) {
  expect_placement(abuse("pattern_backtrack"), NULL, "E0619",
                   "`string.find` with pattern \".-.-.-.-.-.-.-b\" on a 48-byte string may take 352282530600 steps",
                   7);
  /* The same through the string metatable, gmatch, gsub and match, and
   * under pcall, which cannot catch the refusal. */
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  return (('a'):rep(48)):find('.-.-.-.-.-.-.-b') or 0\n"
                            "end\n"),
                   NULL, "E0619", "`string.find` with pattern");
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  for w in ('a'):rep(48):gmatch('.-.-.-.-.-.-.-b') do end\n"
                            "  return 0\n"
                            "end\n"),
                   NULL, "E0619", "`string.gmatch`");
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  local ok = pcall(string.gsub, ('a'):rep(48), '(.-)(.-)(.-)(.-)(.-)(.-)(.-)b', '')\n"
                            "  return 1\n"
                            "end\n"),
                   NULL, "E0619", "`string.gsub`");
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  return #(('ab'):rep(30):match('^(a*a*a*a*a*a*a*a*a*c)') or '')\n"
                            "end\n"),
                   NULL, "E0619", "`string.match` with pattern \"^(a*a*a*a*a*a*a*a*a*c)\" on a 60-byte");
}

/* Each call's estimate is charged to the instruction budget: 1000 calls of
 * 72114 steps each (`a*b` on 100 bytes) overrun a budget of 1000000 that the
 * loop alone (a few thousand instructions) would not. */
static void test_pattern_charged(void) {
  const char *src = "return function(ctx)\n"
                    "  local s, n = ('a'):rep(100), 0\n"
                    "  for i = 1, 1000 do\n"
                    "    if s:find('a*b') then n = n + 1 end\n"
                    "  end\n"
                    "  return n\n"
                    "end\n";
  Lim l = {.instructions = 1000000};
  expect_objective(tmp_hook(src), &l, "E0619", "on a 100-byte string may take 72114 steps");
  Diags d;
  diags_init(&d);
  bool ok;
  Lim big = {.instructions = 1000000000};
  double v = run_objective(tmp_hook(src), &big, &ok, &d);
  T_CHECK(ok);
  T_CHECK(v == 0);
  diags_free(&d);
}

/* Ordinary uses give exactly the library's results and errors. */
static void test_pattern_results(void) {
  const char *src =
      "return function(ctx)\n"
      "  local a, b, c = ('node-12.rack-3'):find('(%d+)')\n"
      "  assert(a == 6 and b == 7 and c == '12', tostring(a))\n"
      "  assert(string.match('tp8-pp2', '^tp(%d+)%-pp(%d+)$') == '8')\n"
      "  local t = {}\n"
      "  for k, v in ('a=1, b=2, c=3'):gmatch('(%w+)=(%w+)') do t[#t + 1] = k .. v end\n"
      "  assert(table.concat(t, ',') == 'a1,b2,c3')\n"
      "  local s, n = string.gsub('hello world', 'o', '0')\n"
      "  assert(s == 'hell0 w0rld' and n == 2)\n"
      "  assert(('x.y'):find('.', 1, true) == 2)\n"
      "  assert(('(x)'):match('%b()') == '(x)')\n"
      "  assert(string.find(12345, 34) == 3)\n"
      "  local ok, err = pcall(string.find, 'x', '%')\n"
      "  assert(not ok and err:find('malformed pattern', 1, true), err)\n"
      "  ok, err = pcall(string.rep)\n"
      "  assert(not ok and err:find('bad argument #1', 1, true), err)\n"
      "  assert(string.rep('', math.maxinteger) == '')\n"
      "  assert(string.rep('', math.maxinteger, '') == '')\n"
      "  assert(string.rep('ab', 3, '-') == 'ab-ab-ab')\n"
      "  local m = table.move({1, 2, 3}, 1, 3, 2)\n"
      "  assert(m[1] == 1 and m[2] == 1 and m[4] == 3)\n"
      "  return 1\n"
      "end\n";
  expect_objective_ok(tmp_hook(src));
}

/* table.move walks nil elements in C without allocating: bounded by the
 * budget, not by the memory cap. */
static void test_table_move(void) {
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  table.move({}, 1, math.maxinteger - 1, 2)\n"
                            "  return 1\n"
                            "end\n"),
                   NULL, "E0619", "`table.move` of 9223372036854775806 elements");
}

/* A library (C) function as a metamethod is refused by setmetatable: the
 * loops that call metamethods count no instruction for a C one. */
static void test_metamethod_cfunction(void) {
  expect_placement(abuse("metamethod_cfunction"), NULL, "E0605",
                   "a library function as the `__index` metamethod", 5);
  const char *mm[] = {"__len = rawlen", "__lt = rawequal", "__le = rawequal",
                      "__eq = rawequal", "__concat = table.concat", "__newindex = rawset",
                      "__call = table.sort", "__index = string.rep"};
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    char src[256];
    snprintf(src, sizeof src,
             "return function(ctx)\n  local t = setmetatable({}, {%s})\n  return 1\nend\n", mm[i]);
    expect_objective(tmp_hook(src), NULL, "E0605", "a library function as the");
  }
}

/* Library loops charged per element before they start: each of these
 * would loop in C for hours (2^40 elements, or gigabytes compared) without
 * one counted instruction. */
static void test_library_loops(void) {
  expect_placement(abuse("concat_late_metamethod"), NULL, "E0619",
                   "`table.concat` of 1099511627776 elements", 8);
  expect_placement(abuse("sort_long_strings"), NULL, "E0619",
                   "`table.sort` of 1000 elements with strings of 1048576 bytes", 9);
  expect_placement(abuse("insert_len_lie"), NULL, "E0619",
                   "`table.insert` shifting 1099511627776 elements", 6);
  expect_placement(abuse("utf8_skip"), NULL, "E0619", "`utf8.codes` step over a 1048576-byte", 7);
  /* table.remove and table.unpack, and table.sort of a claimed length
   * whose elements come from a C `__index` added after setmetatable */
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  local t = setmetatable({}, {__len = function() return 1 << 40 end})\n"
                            "  table.remove(t, 1)\n"
                            "  return 1\n"
                            "end\n"),
                   NULL, "E0619", "`table.remove` shifting 1099511627775 elements");
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  local mt = {__len = function() return (1 << 31) - 2 end}\n"
                            "  local t = setmetatable({}, mt)\n"
                            "  mt.__index = rawlen\n"
                            "  table.sort(t)\n"
                            "  return 1\n"
                            "end\n"),
                   NULL, "E0619", "`table.sort` of 2147483646 elements");
  /* a `__len` that answers 2 to the estimate and 2^31 - 2 to the library,
   * with a C comparator that never raises on nil: charged per comparison */
  Lim small = {.instructions = 100000};
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  local calls = 0\n"
                            "  local t = setmetatable({}, {__len = function()\n"
                            "    calls = calls + 1\n"
                            "    return calls == 1 and 2 or (1 << 31) - 2\n"
                            "  end})\n"
                            "  table.sort(t, rawequal)\n"
                            "  return 1\n"
                            "end\n"),
                   &small, "E0619", "a `table.sort` comparison");
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  return select('#', table.unpack({}, 1, 1 << 40))\n"
                            "end\n"),
                   NULL, "E0619", "`table.unpack` of 1099511627776 elements");
  /* many calls that each copy a MiB add up: 1000 MiB against 10^8 steps
   * (every string within HOOK_STRING_MAX, so that the charge is what ends
   * the run). The charge, not the clock, must end these runs: on a loaded
   * machine the default 5 s deadline can come first, so it is set far out. */
  Lim charge_only = {.timeout_ms = 600000};
  const char *each[] = {
      "local x = string.rep('x', 1 << 20)",
      "local x = string.format('%s', s)",
      "local x = s:upper()",
      "local x = s:reverse()",
      "local x = s:sub(1, -1)",
      "local x = utf8.len(s)",
      "local x = tonumber(d)",
      "local x = load('return ' .. d)",
      "local x = table.concat({h, h})",
      "local x = string.pack('z', s)",
      "local x = string.unpack('z', z)",
  };
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
    char src[512];
    snprintf(src, sizeof src,
             "return function(ctx)\n"
             "  local s = string.rep('a', (1 << 20) - 1)\n"
             "  local d = string.rep('1', (1 << 20) - 8)\n"
             "  local h = string.rep('a', 1 << 19)\n"
             "  local z = s .. '\\0'\n"
             "  for i = 1, 1000 do %s end\n"
             "  return 1\n"
             "end\n",
             each[i]);
    expect_objective(tmp_hook(src), &charge_only, "E0619", "steps, more than the");
  }
  /* collectgarbage walks the heap: 2 x 10^5 live tables, 10^5 full
   * collections (minutes of marking and sweeping) */
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  local keep = {}\n"
                            "  for i = 1, 200000 do keep[i] = {} end\n"
                            "  for i = 1, 100000 do collectgarbage() end\n"
                            "  return #keep\n"
                            "end\n"),
                   &charge_only, "E0619", "`collectgarbage` over");
}

/* Strings are capped at HOOK_STRING_MAX bytes, however they are made: one
 * VM instruction reads or copies its string operands whole, so the cap
 * bounds each instruction, and once long strings exist the count hook runs
 * often enough that the deadline still holds. */
static void test_long_strings(void) {
  /* a loop of `<`, `==`, `..` and string-to-number on 1 MiB strings ends on
   * its deadline */
  Lim l = {.instructions = INT64_C(1000000000000), .timeout_ms = 100};
  expect_objective(abuse("long_string_compare"), &l, "E0608", "deadline of 100 ms");
  /* one byte over: refused where it is made, naming the line; pcall cannot
   * catch it */
  expect_placement(abuse("long_string_concat"), NULL, "E0620",
                   "built a string of 2097152 bytes, longer than the sandbox's limit of 1048576 bytes", 5);
  const char *over[] = {
      "local x = string.rep('x', (1 << 20) + 1)",
      "local x = s .. 'y'",
      "local x = table.concat({s, 'y'})",
      "local x = string.format('%s%s', s, 'y')",
      "local x = s:rep(2)",
      "local x = ('y'):rep(1 << 20, 'z')",
      "local x = load('return ... .. \"y\"')(s)",
      "local ok = pcall(string.rep, s, 2)",
  };
  for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
    char src[512];
    snprintf(src, sizeof src,
             "return function(ctx)\n"
             "  local s = string.rep('a', 1 << 20)\n"
             "  %s\n"
             "  return 1\n"
             "end\n",
             over[i]);
    expect_objective(tmp_hook(src), NULL, "E0620", "longer than the sandbox's limit of 1048576 bytes");
    expect_placement(tmp_hook(src), NULL, "E0620", "built a string of", 3);
  }
  /* exactly the limit, made each way, runs; so does an error message of
   * that length (the traceback the sandbox builds from it is not held to
   * the cap) */
  const char *at[] = {
      "local x = string.rep('x', 1 << 20)",
      "local x = s:sub(2) .. 'y'",
      "local x = table.concat({s:sub(2), 'y'})",
      "local x = string.format('%s%s', s:sub(2), 'y')",
      "local x = s:sub(2):upper() .. 'y'",
      "local x = load('return [[' .. s:sub(13) .. 'y]]')() .. s:sub(1, 11)",
  };
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    char src[512];
    snprintf(src, sizeof src,
             "return function(ctx)\n"
             "  local s = string.rep('a', 1 << 20)\n"
             "  %s\n"
             "  assert(#x == 1 << 20)\n"
             "  return 1\n"
             "end\n",
             at[i]);
    expect_objective_ok(tmp_hook(src));
  }
  expect_objective(tmp_hook("return function(ctx)\n"
                            "  error(string.rep('m', 1 << 20), 0)\n"
                            "end\n"),
                   NULL, "E0604", "failed: mmmm");
  /* a literal in the hook file over the limit: refused when the file is
   * compiled, at the line the literal ends on */
  size_t n = ((size_t)1 << 20) + 1;
  char *big = malloc(n + 256);
  T_CHECK(big != NULL);
  if (!big) return;
  int k = snprintf(big, 256, "-- a long literal\nlocal s = [[\n");
  memset(big + k, 'q', n);
  snprintf(big + k + n, 256, "]]\nreturn function(ctx) return #s end\n");
  expect_objective(tmp_hook(big), NULL, "E0620", "built a string of 1048577 bytes");
  expect_placement(tmp_hook(big), NULL, "E0620", "built a string of 1048577 bytes", 3);
  /* one byte shorter, it compiles */
  snprintf(big + k + n - 1, 256, "]]\nreturn function(ctx) return #s end\n");
  Diags d;
  diags_init(&d);
  bool ok;
  double v = run_objective(tmp_hook(big), NULL, &ok, &d);
  T_CHECK(ok && v == (double)((size_t)1 << 20));
  if (!ok) dump(&d);
  diags_free(&d);
  /* the context's strings are not held to the cap: a 2 MiB model name */
  HookCtx c;
  diags_init(&d);
  ctx_pd(&c, &d);
  memset(big, 'n', n - 1);
  big[n - 1] = '\0';
  char *name = malloc(2 * n);
  T_CHECK(name != NULL);
  if (name) {
    snprintf(name, 2 * n, "%s%s", big, big);
    c.model_name = name;
    HookEnv env;
    env_for(&env, &d, HOOK_OBJECTIVE,
            tmp_hook("return function(ctx) return #ctx.model.name end\n"), NULL);
    HookKV cand[] = {{"goodput", 1}};
    double score = 0;
    T_CHECK(hook_run_objective(&env, &c, cand, 1, &score, &d));
    T_CHECK(score == (double)(2 * (n - 1)));
    hook_env_free(&env);
  }
  hook_ctx_free(&c);
  diags_free(&d);
  free(name);
  free(big);
}

/* The wrapped functions answer exactly as the library does. */
static void test_library_results(void) {
  const char *src =
      "return function(ctx)\n"
      "  local t = {1, 2, 3}\n"
      "  table.insert(t, 4); table.insert(t, 1, 0)\n"
      "  assert(table.concat(t, ',') == '0,1,2,3,4')\n"
      "  assert(table.remove(t) == 4 and table.remove(t, 1) == 0 and #t == 3)\n"
      "  assert(table.remove({}) == nil)\n"
      "  local ok, err = pcall(table.insert, t, 9, 1)\n"
      "  assert(not ok and err:find('position out of bounds', 1, true), err)\n"
      "  ok, err = pcall(table.insert, t, 1, 2, 3)\n"
      "  assert(not ok and err:find(\"wrong number of arguments to 'insert'\", 1, true), err)\n"
      "  ok, err = pcall(table.concat, 5)\n"
      "  assert(not ok and err:find('table expected', 1, true), err)\n"
      "  assert(table.concat({'a', 'b', 'c'}, '-', 2) == 'b-c')\n"
      "  assert(table.concat({}) == '')\n"
      "  local a, b, c = table.unpack({7, 8, 9})\n"
      "  assert(a == 7 and b == 8 and c == 9)\n"
      "  assert(select('#', table.unpack({1, 2}, 2)) == 1)\n"
      "  local p = setmetatable({}, {__len = function() return 2 end, __index = function(_, i) return i * 10 end})\n"
      "  assert(table.concat(p, ' ') == '10 20')\n"
      "  local u = {5, 3, 9, 1}\n"
      "  table.sort(u); assert(table.concat(u, ',') == '1,3,5,9')\n"
      "  table.sort(u, function(x, y) return x > y end); assert(table.concat(u, ',') == '9,5,3,1')\n"
      "  local w = {'b', 'a', 'c'}; table.sort(w); assert(table.concat(w) == 'abc')\n"
      "  assert(('Ab'):upper() == 'AB' and ('Ab'):lower() == 'ab' and ('abc'):reverse() == 'cba')\n"
      "  assert(('hello'):sub(2, -2) == 'ell' and ('hello'):sub(-3) == 'llo')\n"
      "  assert(('hello'):byte() == 104 and select('#', ('hello'):byte(1, -1)) == 5)\n"
      "  assert(string.char(104, 105) == 'hi')\n"
      "  assert(string.format('%5.2f|%d|%s|%q', 3.14159, 42, 'x', 'a\\n') == ' 3.14|42|x|\"a\\\\\\n\"')\n"
      "  assert(string.unpack('<i4', string.pack('<i4', 258)) == 258)\n"
      "  assert(string.packsize('i4i8') == 12)\n"
      "  assert(utf8.char(72, 228) == 'H\\xC3\\xA4' and utf8.len('H\\xC3\\xA4') == 2)\n"
      "  assert(utf8.codepoint('H\\xC3\\xA4', 2) == 228 and utf8.offset('H\\xC3\\xA4', 2) == 2)\n"
      "  local cps = {}\n"
      "  for pos, cp in utf8.codes('a\\xC3\\xA4b') do cps[#cps + 1] = pos .. ':' .. cp end\n"
      "  assert(table.concat(cps, ',') == '1:97,2:228,4:98', table.concat(cps, ','))\n"
      "  assert(tonumber(0.1) == 0.1 and tonumber('ff', 16) == 255 and tonumber('x') == nil)\n"
      "  assert(load('return 1 + 1')() == 2)\n"
      "  local q = setmetatable({}, {__index = function(_, k) return k end})\n"
      "  assert(q.x == 'x')\n"
      "  for i = 1, 1000 do local c = ('abc'):rep(1000):sub(i, i) end\n"
      "  return 1\n"
      "end\n";
  expect_objective_ok(tmp_hook(src));
}

/* The estimate itself, against the formula in docs/hooks.md:
 * starts x C(n + q + 1, q) x (2 plen + b n + 1). */
static void test_pattern_cost(void) {
  T_EQ_INT(hook__pattern_cost(10, "^abc", 4, true), 1 * 1 * 9);
  T_EQ_INT(hook__pattern_cost(10, "^abc", 4, false), 11 * 1 * 9); /* gmatch: `^` is a character */
  T_EQ_INT(hook__pattern_cost(100, "a*b", 3, true), 101 * 102 * 7);
  /* the examples docs/hooks.md gives */
  T_EQ_INT(hook__pattern_cost(100, "%d+", 3, true), 72114);
  T_EQ_INT(hook__pattern_cost(20, "^node(%d+)$", 11, true), 506);
  T_EQ_INT(hook__pattern_cost(48, ".-.-.-.-.-.-.-b", 15, true), INT64_C(352282530600));
  /* quantifier characters escaped or inside a set are not quantifiers */
  T_EQ_INT(hook__pattern_cost(10, "%*[*+?-]", 8, true), 11 * 1 * 17);
  T_EQ_INT(hook__pattern_cost(10, "[]*]", 4, true), 11 * 1 * 9);
  /* `%b()` and a back-reference scan the subject: b = 2 */
  T_EQ_INT(hook__pattern_cost(10, "%b()(a)%1", 9, true), 11 * 1 * (18 + 20 + 1));
  /* `?` is a choice too; `$` at the end and captures are not items */
  T_EQ_INT(hook__pattern_cost(10, "(a?)$", 5, true), 11 * 12 * 11);
  /* saturates instead of wrapping */
  T_EQ_INT(hook__pattern_cost((size_t)1 << 40, ".-.-.-.-.-.-.-.-b", 17, true), INT64_MAX);
}

static void test_settings(void) {
  Diags d;
  diags_init(&d);
  HookEnv env;
  setenv("RANKPLAN_HOOK_MEMORY", "16MiB", 1);
  setenv("RANKPLAN_HOOK_TWICE", "1", 1);
  setenv("RANKPLAN_HOOK_INSTRUCTIONS", "lots", 1);
  T_CHECK(!hook_env_init(&env, &d));
  T_EQ_INT(env.lim.memory, 16 << 20);
  T_CHECK(env.lim.twice);
  T_EQ_INT(env.lim.instructions, 100000000);
  T_CHECK(d.nerrors == 1 && d.list.items[0]->code == DIAG_E0615 &&
          strstr(d.list.items[0]->msg, "`RANKPLAN_HOOK_INSTRUCTIONS` is \"lots\""));
  unsetenv("RANKPLAN_HOOK_MEMORY");
  unsetenv("RANKPLAN_HOOK_TWICE");
  unsetenv("RANKPLAN_HOOK_INSTRUCTIONS");
  hook_env_free(&env);
  diags_free(&d);
}

int main(void) {
  if (!mkdtemp(tmpdir)) return 2;
  T_RUN(test_infinite_loop);
  T_RUN(test_pcall_cannot_catch_budget);
  T_RUN(test_deadline);
  T_RUN(test_deep_recursion);
  T_RUN(test_string_rep_bomb);
  T_RUN(test_table_bomb);
  T_RUN(test_os_execute);
  T_RUN(test_io_open);
  T_RUN(test_require);
  T_RUN(test_string_dump);
  T_RUN(test_binary_chunk);
  T_RUN(test_pcall_cannot_catch_denial);
  T_RUN(test_strmeta_tamper);
  T_RUN(test_gc_finalizer);
  T_RUN(test_error_table);
  T_RUN(test_error_nil);
  T_RUN(test_error_string);
  T_RUN(test_syntax_and_shape);
  T_RUN(test_environment);
  T_RUN(test_nan);
  T_RUN(test_non_integer);
  T_RUN(test_out_of_range);
  T_RUN(test_duplicates);
  T_RUN(test_tp_domain);
  T_RUN(test_metamethods_not_run);
  T_RUN(test_nondeterministic);
  T_RUN(test_placement_ok);
  T_RUN(test_context);
  T_RUN(test_layout_order);
  T_RUN(test_layer_partition);
  T_RUN(test_expert_placement);
  T_RUN(test_example_eplb);
  T_RUN(test_example_layer_partition);
  T_RUN(test_example_objective);
  T_RUN(test_settings);
  T_RUN(test_pattern_backtrack);
  T_RUN(test_pattern_charged);
  T_RUN(test_pattern_results);
  T_RUN(test_table_move);
  T_RUN(test_metamethod_cfunction);
  T_RUN(test_library_loops);
  T_RUN(test_long_strings);
  T_RUN(test_library_results);
  T_RUN(test_pattern_cost);
  for (int i = 0; i < tmpn; i++) {
    char p[256];
    snprintf(p, sizeof p, "%s/h%d.lua", tmpdir, i);
    unlink(p);
  }
  rmdir(tmpdir);
  T_DONE();
}
