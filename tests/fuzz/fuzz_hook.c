/*
 * fuzz_hook.c: libFuzzer target for the Lua hook sandbox (hooks.c). A hook
 * is code from whoever wrote the spec, so the compiler runs it under an
 * instruction budget, a memory cap and a deadline, and converts what it
 * returns with full validation. Each input is one hook file: it is run as
 * the placement, layer_partition, expert_placement and objective hook of
 * the example spec plans/examples/qwen3-235b-ep.yaml (16 ranks, 128
 * experts over ep 8), so that one file returning a table of functions
 * reaches every conversion.
 *
 * The limits are tight (200,000 instructions, 4 MiB) so that a loop or a
 * large allocation ends in the sandbox's own error quickly; a run that
 * reaches libFuzzer's -timeout instead is a finding (the budget failed to
 * stop it). Each call must return true exactly when it reported no error,
 * and a result it accepted must satisfy the checks hooks.h documents.
 * Inputs of odd length run each hook twice (the determinism check).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "rp_config.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "fuzz_hook: `%s` does not hold\n", #c);              \
      abort();                                                              \
    }                                                                       \
  } while (0)

#define SPEC RP_SOURCE_ROOT "/plans/examples/qwen3-235b-ep.yaml"

/* Built once: the spec, its Diags (the spec's locations point into it) and
 * the context every run sees. */
static Diags spec_diags;
static Spec *spec;
static HookCtx ctx;
static FILE *devnull;

static void init(void) {
  if (spec) return;
  devnull = fopen("/dev/null", "w");
  char *text;
  size_t len;
  CHECK(devnull && rp_read_file(SPEC, 1u << 20, &text, &len) == 0);
  diags_init(&spec_diags);
  spec = spec_parse(&spec_diags, SPEC, text, len, RP_SOURCE_ROOT "/plans/catalog");
  free(text);
  CHECK(spec != NULL);
  CHECK(hook_ctx_build(&ctx, spec, &spec_diags));
  CHECK(ctx.npools == 1 && ctx.nranks > 0 && ctx.experts > 0);
}

/* A hook call's result must agree with the errors it reported: true
 * exactly when d holds no more errors than `before`. */
static bool agreed(const Diags *d, int before, bool ok) {
  CHECK(ok == (d->nerrors == before));
  return ok;
}

static void check_placement(const int64_t *node, const int64_t *gpu) {
  for (size_t r = 0; r < ctx.nranks; r++) {
    CHECK(node[r] >= 0 && node[r] < ctx.nodes);
    CHECK(gpu[r] >= 0 && gpu[r] < ctx.gpus_per_node);
    for (size_t q = 0; q < r; q++) CHECK(node[q] != node[r] || gpu[q] != gpu[r]);
  }
}

static void check_experts(const HookExpertMap *m) {
  CHECK(m->experts == ctx.experts && m->ep == ctx.pools[0].ep);
  CHECK(m->offsets[0] == 0);
  int64_t *per = calloc((size_t)m->ep, sizeof *per);
  CHECK(per != NULL);
  for (int64_t e = 0; e < m->experts; e++) {
    CHECK(m->offsets[e + 1] > m->offsets[e]);
    for (int64_t i = m->offsets[e]; i < m->offsets[e + 1]; i++) {
      CHECK(m->ranks[i] >= 0 && m->ranks[i] < m->ep);
      per[m->ranks[i]]++;
    }
  }
  for (int64_t k = 0; k < m->ep; k++) CHECK(per[k] == m->slots_per_rank);
  free(per);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  Diags d;
  diags_init(&d);
  HookEnv env;
  memset(&env, 0, sizeof env);
  hook_limits_default(&env.lim);
  env.lim.instructions = 200000;
  env.lim.memory = INT64_C(4) << 20;
  env.lim.timeout_ms = 5000;
  env.lim.twice = (size & 1) != 0;
  /* The hook file, as env_load would have read it (exact-size buffer). */
  char *text = fuzz_text(data, size);
  CHECK(text != NULL);
  const char *path = diags_add_source(&d, "fuzz.lua", text, size);
  for (int k = 0; k < HOOK__COUNT; k++) {
    env.file[k].path = path;
    env.file[k].text = text;
    env.file[k].len = size;
    env.file[k].set = env.file[k].loaded = true;
  }

  int64_t *node = calloc(ctx.nranks, sizeof *node), *gpu = calloc(ctx.nranks, sizeof *gpu);
  int64_t *layers = calloc((size_t)ctx.pools[0].pp, sizeof *layers);
  CHECK(node && gpu && layers);
  int before = d.nerrors;
  if (agreed(&d, before, hook_run_placement(&env, &ctx, node, gpu, &d)))
    check_placement(node, gpu);
  before = d.nerrors;
  if (agreed(&d, before, hook_run_layer_partition(&env, &ctx, 0, layers, &d))) {
    int64_t sum = 0;
    for (int64_t s = 0; s < ctx.pools[0].pp; s++) {
      CHECK(layers[s] > 0);
      sum += layers[s];
    }
    CHECK(sum == ctx.layers);
  }
  HookExpertMap em;
  before = d.nerrors;
  if (agreed(&d, before, hook_run_expert_placement(&env, &ctx, 0, &em, &d))) {
    check_experts(&em);
    hook_expert_map_free(&em);
  }
  /* The example spec's SLOs, in milliseconds. */
  HookKV cand[] = {{"ttft_ms", spec->slo.ttft.v * 1000.0}, {"tpot_ms", spec->slo.tpot.v * 1000.0}};
  double score = 0;
  before = d.nerrors;
  if (agreed(&d, before, hook_run_objective(&env, &ctx, cand, 2, &score, &d)))
    CHECK(isfinite(score));

  /* Every diagnostic renders, with the hook's lines and carets; with
   * FUZZ_HOOK_PRINT set (to replay one input) the text goes to stderr. */
  diags_print(&d, getenv("FUZZ_HOOK_PRINT") ? stderr : devnull, DIAG_FMT_TEXT, false);
  diags_print(&d, devnull, DIAG_FMT_JSON, false);
  diags_print(&d, devnull, DIAG_FMT_SARIF, false);

  for (int k = 1; k < HOOK__COUNT; k++) env.file[k].text = NULL; /* one owner */
  hook_env_free(&env);
  free(node);
  free(gpu);
  free(layers);
  diags_free(&d);
  return 0;
}
