/*
 * cmd_compile.c: `rankplan compile SPEC -o PLAN`, the pipeline end to end.
 *
 * parse → validate → layout (rank generator, layer partition, or the
 * spec's layer_partition hook) → placement
 * (default, or the spec's Lua placement hook, validated either way) →
 * memory ledger → KV reshard maps → emit. Nothing is written unless every stage succeeded:
 * with any error the command prints the diagnostics and exits 1, and an
 * existing plan at PLAN stays as it was. Files are written atomically.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hooks.h"
#include "layout.h"
#include "reshard.h"
#include "spec.h"
#include "validate.h"

static const char compile_usage[] =
    "usage: rankplan compile [options] SPEC -o PLAN\n"
    "\n"
    "Compiles a deployment spec to its plan: every rank's node, GPU,\n"
    "coordinates, process groups, shards and memory (docs/plan.md). The plan\n"
    "is written atomically (temp file, then rename); with any error nothing\n"
    "is written.\n"
    "\n"
    "options:\n"
    "  -o, --output PLAN         where to write the plan (required)\n"
    "  --split-by-node DIR       also write DIR/node-<N>.plan.json per node,\n"
    "                            each holding only what that node's ranks need\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "  --format text|json|sarif  diagnostics format (default text)\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 written, 1 the spec is wrong, 2 usage error or unreadable or\n"
    "unwritable file, 70 internal error\n";

/* Runs the layer_partition hook for every pool when the spec names one;
 * its result is checked again by the layout (lay_set_partition). */
static bool hook_partitions(Diags *d, const Spec *spec, Layout *L) {
  if (!spec->deployment.hooks.layer_partition.set) return true;
  HookEnv env;
  hook_env_init(&env, d);
  hook_env_from_spec(&env, d, spec);
  bool ok = !diags_failed(d);
  if (ok && hook_env_has(&env, HOOK_LAYER_PARTITION)) {
    HookCtx ctx;
    ok = hook_ctx_build(&ctx, spec, d); /* frees what it built on failure */
    for (size_t p = 0; ok && p < L->npools; p++) {
      int64_t pp = L->pools[p].size[CO_PP];
      int64_t *counts = rp_calloc((size_t)pp, sizeof *counts);
      ok = hook_run_layer_partition(&env, &ctx, p, counts, d) &&
           lay_set_partition(d, L, p, spec->model.layers.v, counts,
                             spec->deployment.hooks.layer_partition.loc);
      free(counts);
    }
    hook_ctx_free(&ctx);
  }
  hook_env_free(&env);
  return ok && !diags_failed(d);
}

/* Runs the placement hook when the spec names one, else the default
 * placement. The hook sees the default placement as ctx.default when the
 * default is valid; when it is not (a tp group the default cannot keep in
 * one domain), the hook may still produce a valid one, so the default's
 * problems are not reported then. */
static bool place(Diags *d, const Spec *spec, Layout *L) {
  if (!spec->deployment.hooks.placement.set) return lay_place_default(d, L);
  Diags scratch;
  diags_init(&scratch);
  bool have_default = lay_place_default(&scratch, L);
  diags_free(&scratch);
  HookEnv env;
  hook_env_init(&env, d);
  hook_env_from_spec(&env, d, spec);
  bool ok = !diags_failed(d);
  if (ok && hook_env_has(&env, HOOK_PLACEMENT)) {
    HookCtx ctx;
    ok = hook_ctx_build(&ctx, spec, d);
    if (ok) {
      size_t n = (size_t)L->nranks;
      int64_t *dn = rp_malloc((n ? n : 1) * sizeof *dn), *dg = rp_malloc((n ? n : 1) * sizeof *dg);
      int64_t *hn = rp_malloc((n ? n : 1) * sizeof *hn), *hg = rp_malloc((n ? n : 1) * sizeof *hg);
      for (size_t r = 0; r < n; r++) {
        dn[r] = L->ranks[r].node;
        dg[r] = L->ranks[r].device;
      }
      ctx.default_node = have_default ? dn : NULL;
      ctx.default_gpu = have_default ? dg : NULL;
      ok = hook_run_placement(&env, &ctx, hn, hg, d);
      if (ok) {
        /* The hook checked its own result; the layout checks it again, the
         * same way it checks any placement. */
        int32_t *node = rp_malloc((n ? n : 1) * sizeof *node), *gpu = rp_malloc((n ? n : 1) * sizeof *gpu);
        for (size_t r = 0; r < n; r++) {
          node[r] = hn[r] < INT32_MIN || hn[r] > INT32_MAX ? -1 : (int32_t)hn[r];
          gpu[r] = hg[r] < INT32_MIN || hg[r] > INT32_MAX ? -1 : (int32_t)hg[r];
        }
        ok = lay_place_set(d, L, node, gpu, spec->deployment.hooks.placement.loc);
        free(node);
        free(gpu);
      }
      free(dn);
      free(dg);
      free(hn);
      free(hg);
      hook_ctx_free(&ctx);
    }
  }
  hook_env_free(&env);
  if (ok && !diags_failed(d) && !L->placed) return lay_place_default(d, L); /* reports why */
  return ok && !diags_failed(d);
}

int cmd_compile(int argc, char **argv) {
  const char *path = NULL, *out = NULL, *split = NULL, *fmt_s = "text", *catalog = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(compile_usage, stdout);
      return RP_EXIT_OK;
    }
    if ((r = cli_opt_value("compile", argc, argv, &i, "-o", &out)) ||
        (r = cli_opt_value("compile", argc, argv, &i, "--output", &out)) ||
        (r = cli_opt_value("compile", argc, argv, &i, "--split-by-node", &split)) ||
        (r = cli_opt_value("compile", argc, argv, &i, "--format", &fmt_s)) ||
        (r = cli_opt_value("compile", argc, argv, &i, "--catalog", &catalog))) {
      if (r < 0) return RP_EXIT_USAGE;
      continue;
    }
    if (a[0] == '-' && a[1] != '\0') return cli_usage_error("compile", "unknown option '%s'", a);
    if (path) return cli_usage_error("compile", "expected one SPEC, got '%s' and '%s'", path, a);
    path = a;
  }
  DiagFormat fmt;
  if (!diag_format_parse(fmt_s, &fmt))
    return cli_usage_error("compile", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (!path) return cli_usage_error("compile", "missing SPEC");
  if (!out) return cli_usage_error("compile", "missing '-o PLAN' (where to write the plan)");

  Diags d;
  diags_init(&d);
  Spec *spec = spec_parse_file(&d, path, catalog);
  bool unreadable = false;
  for (size_t i = 0; i < d.list.len; i++)
    if (d.list.items[i]->code == DIAG_E0001) unreadable = true;
  Layout *L = NULL;
  if (spec && !diags_failed(&d)) validate_spec(&d, spec);
  if (spec && !diags_failed(&d)) {
    if (spec->deployment.mode.v == MODE_SEARCH && spec->deployment.npools == 0) {
      Diag *g = diag_at(&d, DIAG_E0310, spec->deployment.loc,
                        "`compile` needs pools, got a search spec without any");
      diag_help(g, "run `rankplan search` on it, or write the pools under `deployment.pools`");
    } else {
      L = lay_build(&d, spec, NULL);
    }
  }
  if (L && !diags_failed(&d)) hook_partitions(&d, spec, L);
  if (L && !diags_failed(&d)) place(&d, spec, L);
  if (L && !diags_failed(&d)) lay_memory(&d, spec, L);
  if (L && !diags_failed(&d)) {
    /* KV reshard maps between prefill and decode pools: errors stop the
     * compile, warnings go into the plan. emit writes the maps. */
    RsPlan rsp;
    if (rs_plan_build(&d, spec, L, &rsp)) rs_plan_free(&rsp);
  }

  int rc = RP_EXIT_OK;
  if (unreadable) rc = RP_EXIT_USAGE;
  else if (!spec || diags_failed(&d)) rc = RP_EXIT_INPUT;
  char *what = NULL;
  int werr = 0;
  if (rc == RP_EXIT_OK) {
    PlanEstimates est = {0};
    werr = emit_plan_files(&d, spec, L, &est, out, split, &what);
  }
  FILE *dout = fmt == DIAG_FMT_TEXT ? stderr : stdout;
  if (fmt != DIAG_FMT_TEXT || d.list.len > 0)
    diags_print(&d, dout, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  if (werr) {
    fprintf(stderr, "rankplan compile: cannot write `%s`: %s\n", what, strerror(werr));
    rc = RP_EXIT_USAGE;
  }
  free(what);
  lay_free(L);
  spec_free(spec);
  diags_free(&d);
  return rc;
}
