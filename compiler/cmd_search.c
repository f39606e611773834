/*
 * cmd_search.c: `rankplan search SPEC`, the layout and xPyD search.
 *
 * Parses the spec, loads the cost constants (defaults, then
 * --calibration FILE), runs search_run() and prints the ranked table (or
 * JSON) on stdout. Diagnostics go to stderr (as JSON on stdout when the
 * search fails under --format json). Progress goes to stderr only when it
 * is a terminal. Exit 0 when a layout meets the SLOs, 4 when the spec is
 * valid but no layout meets them (E0500/E0508 only), 1 when the input is
 * wrong, 2 on usage errors or unreadable files.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "compile.h"
#include "hooks.h"
#include "layout.h"
#include "outfile.h"
#include "render.h"
#include "reshard.h"
#include "search.h"
#include "search_whatif.h"
#include "spec.h"
#include "validate.h"

static const char search_usage[] =
    "usage: rankplan search [options] SPEC\n"
    "\n"
    "Finds the parallel layout (tp/pp/cp/dp/ep/etp/dcp per pool), aggregated or\n"
    "disaggregated serving, and the xPyD instance counts with the most goodput\n"
    "per GPU that meet the spec's TTFT and TPOT SLOs on its cluster. Prints the\n"
    "ranked deployments with predicted TTFT, TPOT, throughput, goodput/GPU, the\n"
    "binding constraint and the Pareto frontier. docs/cost-model.md states the\n"
    "model behind every figure.\n"
    "\n"
    "options:\n"
    "  --top N               rows to print (default: search.top, else 10)\n"
    "  --format text|json    output format (default text; json is\n"
    "                        \"rankplan.search/1\")\n"
    "  --explain             say why each alternative lost against the winner\n"
    "  --calibration FILE    cost constants (the file `rankplan calibrate` or\n"
    "                        `rankrun --probe` writes; unknown keys are errors)\n"
    "  --max-candidates N    the search budget (default 4000000 evaluations)\n"
    "  --gpus N              GPU budget (default: search.gpu_budget, else the\n"
    "                        whole cluster)\n"
    "  --sort KEY            rank by goodput per used-gpu (default), per\n"
    "                        cluster-gpu (GPUs of the budget: idle ones count),\n"
    "                        total goodput, or min-gpus; with workload.rate,\n"
    "                        deployments that serve all of it come first\n"
    "  -o PLAN               compile the winner to a plan file (the same\n"
    "                        stages as `rankplan compile`, hooks included)\n"
    "  --emit-spec FILE      write the winner's `deployment:` section as YAML,\n"
    "                        to replace the spec's (written atomically)\n"
    "  --min-gpus            rank by the fewest GPUs that serve workload.rate\n"
    "                        under the SLOs (the same as --sort min-gpus)\n"
    "  --what-if KEY=V,...   one search per value, one row each: gpu=ENTRY,...\n"
    "                        (catalog hardware entries on the spec's nodes) or\n"
    "                        nodes=N,... (cluster sizes); prints that table\n"
    "                        instead of the ranking\n"
    "  --plot FILE           write goodput per GPU against TTFT and TPOT, the\n"
    "                        Pareto front and the winner marked: an SVG when\n"
    "                        FILE ends in .svg, else an HTML page (docs/render.md)\n"
    "  --catalog DIR         where `preset:` entries are looked up\n"
    "  -h, --help            show this help\n"
    "\n"
    "The spec's `search:` constraints bound the space before anything is\n"
    "evaluated (docs/spec.md, \"Search constraints\"). Lua hooks named in the\n"
    "spec (`filter` drops pool layouts before the shortlist, `objective`\n"
    "re-ranks the results; -o runs the placement hooks) run in a sandbox with\n"
    "these limits\n"
    "(environment, docs/hooks.md):\n"
    HOOK_ENV_HELP
    "\n"
    "exit: 0 a layout meets the SLOs, 4 the spec is valid but no layout meets\n"
    "them (E0500, E0508), 1 the input is wrong, 2 usage error or unreadable\n"
    "file\n";

/* Compiles the winner: the spec with its deployment replaced by the
 * winner's pools (search_result_spec), through compile_spec_to_plan
 * (compile.h): the stages `rankplan compile` runs, the spec's hooks
 * included. The plan's `estimates` come from the same evaluation the
 * search ranked the winner by (cost_deploy_eval), so they are the row's
 * figures. Returns an exit code. */
static int search__compile(Diags *d, const Spec *spec, const SearchResult *w, const char *path,
                           const CostConsts *k) {
  Spec s;
  PoolSpec pools[2];
  search_result_spec(spec, w, pools, &s);
  CompileOpts o = {path, NULL, k};
  char *what = NULL;
  int werr = 0;
  int rc = compile_spec_to_plan(&s, &o, d, &what, &werr);
  if (werr)
    fprintf(stderr, "rankplan search: cannot write `%s`: %s\n", what ? what : path, rp_strerror(werr));
  free(what);
  return rc;
}

/* Writes the Pareto plot of a search that ran (render.h); returns an exit
 * code. */
static int search__plot(const SearchOut *out, const char *spec_path, const char *file) {
  size_t n = strlen(file);
  bool svg = n >= 4 && strcmp(file + n - 4, ".svg") == 0;
  const char *slash = strrchr(spec_path, '/');
  StrBuf sb;
  sb_init(&sb);
  render_pareto(&sb, out, slash ? slash + 1 : spec_path, svg);
  int e = rp_write_file_atomic(file, sb.buf, sb.len);
  sb_free(&sb);
  if (!e) return RP_EXIT_OK;
  fprintf(stderr, "rankplan search: cannot write `%s`: %s\n", file, rp_strerror(e));
  return RP_EXIT_USAGE;
}

/* --emit-spec: the winner's deployment section (search_deployment_yaml,
 * made before anything is printed), written atomically. Returns an exit
 * code. */
static int search__emit_spec(const char *yaml, const char *path) {
  int err = rp_write_file_atomic(path, yaml, strlen(yaml));
  if (!err) return RP_EXIT_OK;
  fprintf(stderr, "rankplan search: cannot write `%s`: %s\n", path, rp_strerror(err));
  return RP_EXIT_USAGE;
}

/* The search options of the command line (no progress lines). */
static SearchOptions search__options(SearchSort sort, long long maxc, long long gpus) {
  SearchOptions so;
  memset(&so, 0, sizeof so);
  so.sort = sort;
  so.max_candidates = maxc;
  so.gpu_budget = gpus;
  return so;
}

/* --what-if: the table of winners, one search per value
 * (search_whatif.h). Returns an exit code. */
static int search__what_if(Diags *d, const char *arg, const char *path, const char *catalog,
                           const CostConsts *k, SearchSort sort, long long maxc, long long gpus,
                           bool json) {
  WhatIf w;
  char *err = NULL;
  if (!search_what_if_parse(arg, &w, &err)) {
    int rc = cli_usage_error("search", "%s", err);
    free(err);
    return rc;
  }
  SearchOptions so = search__options(sort, maxc, gpus);
  char *txt = NULL;
  bool ok = search_what_if_run(d, &w, path, catalog, k, &so, json, &txt);
  search_what_if_free(&w);
  if (txt) fputs(txt, stdout);
  free(txt);
  return ok ? RP_EXIT_OK : RP_EXIT_INPUT;
}

/* The output files' usage rules: none is standard output (the results
 * are), none is an input, --plot and -o differ, --what-if takes none.
 * Returns RP_OPT_GO when they hold, else the usage error's exit code. */
static int search__outputs_ok(const char *path, const char *calib, const char *plan,
                              const char *emit, const char *plot, const char *whatif_s) {
  if (whatif_s && (plan || emit || plot))
    return cli_usage_error("search", "--what-if prints a table of winners; -o, --emit-spec and "
                                     "--plot take the search of the spec as written");
  if (emit && strcmp(emit, "-") == 0)
    return cli_usage_error("search", "--emit-spec - is not available: the results are standard "
                                     "output; write the section to a file");
  if (plan && strcmp(plan, "-") == 0)
    return cli_usage_error("search", "-o - is not available: the results are standard output; "
                                     "write the plan to a file");
  const char *inputs[] = {path, calib};
  if (plan && cli_output_not_input("search", "-o", plan, inputs, 2)) return RP_EXIT_USAGE;
  if (emit && cli_output_not_input("search", "--emit-spec", emit, inputs, 2)) return RP_EXIT_USAGE;
  if (plot && strcmp(plot, "-") == 0)
    return cli_usage_error("search", "--plot - is not available: the results are standard output; "
                                     "write the plot to a file");
  if (plot && cli_output_not_input("search", "--plot", plot, inputs, 2)) return RP_EXIT_USAGE;
  if (plot && plan && strcmp(plot, plan) == 0)
    return cli_usage_error("search", "--plot and -o name the same file `%s`", plot);

  return RP_OPT_GO;
}

/* The command line of `search`. */
typedef struct {
  const char *path, *fmt_s, *catalog, *calib, *plan, *plot, *top_s, *max_s, *gpus_s, *sort_s, *emit;
  const char *whatif_s;
  bool explain, min_gpus, json;
  long long top, maxc, gpus;
  SearchSort sort;
} SearchArgs;

/* The options' values checked and converted; RP_OPT_GO, else the usage
 * error's exit code. */
static int search__check_args(SearchArgs *a) {
  if (strcmp(a->fmt_s, "json") == 0) a->json = true;
  else if (strcmp(a->fmt_s, "text") != 0)
    return cli_usage_error("search", "unknown format '%s' (expected text or json)", a->fmt_s);
  a->top = -1;
  if (a->top_s && !cli_parse_int(a->top_s, 1, 1000000, &a->top))
    return cli_usage_error("search", "--top expects a count from 1, got '%s'", a->top_s);
  if (a->max_s && !cli_parse_int(a->max_s, 1, INT64_MAX, &a->maxc))
    return cli_usage_error("search", "--max-candidates expects a count from 1, got '%s'", a->max_s);
  if (a->gpus_s && !cli_parse_int(a->gpus_s, 1, INT32_MAX, &a->gpus))
    return cli_usage_error("search", "--gpus expects a count from 1, got '%s'", a->gpus_s);
  a->sort = SEARCH_SORT_USED_GPU;
  if (a->sort_s && !search_sort_parse(a->sort_s, &a->sort))
    return cli_usage_error("search", "unknown --sort key '%s' (expected used-gpu, cluster-gpu or "
                                     "goodput)", a->sort_s);
  if (a->min_gpus) a->sort = SEARCH_SORT_MIN_GPUS;
  if (!a->path) return cli_usage_error("search", "missing SPEC");
  return search__outputs_ok(a->path, a->calib, a->plan, a->emit, a->plot, a->whatif_s);
}

/* Search the spec at a->path and write what the options ask for: the
 * report on standard output, the plot, the deployment section, the plan. */
static int search__run_spec(Diags *d, const SearchArgs *a, const CostConsts *k) {
  int rc = RP_EXIT_OK;
  SearchOut out;
  memset(&out, 0, sizeof out);
  bool unreadable = false;
  Spec *spec = spec_parse_file(d, a->path, a->catalog);
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == DIAG_E0001) unreadable = true;
  if (!spec || diags_failed(d)) {
    rc = unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
    goto done;
  }
  SearchOptions so = search__options(a->sort, a->maxc, a->gpus);
  so.progress = isatty(fileno(stderr)) ? stderr : NULL;
  if (a->sort == SEARCH_SORT_MIN_GPUS && !(spec->workload.rate.v > 0)) {
    Diag *g = diag_at(d, DIAG_E0507, spec->workload.loc, "--min-gpus needs the offered load, "
                                                        "`workload.rate`");
    diag_help(g, "add `rate: 20 req/s` (your load) under `workload:`");
    rc = RP_EXIT_INPUT;
    goto done;
  }
  bool ok = search_run(d, spec, k, &so, &out);
  size_t rows = a->top > 0 ? (size_t)a->top : spec->search.top.v > 0 ? (size_t)spec->search.top.v : 10;
  /* The plot also when nothing met the SLOs, of what was ranked. */
  if (a->plot && out.results.len) rc = search__plot(&out, a->path, a->plot);
  else if (a->plot) fprintf(stderr, "rankplan search: no plot written to `%s`: no deployment was ranked\n", a->plot);
  if (!ok || rc != RP_EXIT_OK) {
    if (rc == RP_EXIT_OK) rc = cli_slo_only(d) ? RP_EXIT_SLO : RP_EXIT_INPUT;
    goto done;
  }
  search_load_check(d, spec, &out);
  char *yaml = a->emit ? search_deployment_yaml(spec, &out) : NULL;
  char *txt = a->json ? search_format_json(&out, spec, rows, a->explain)
                      : search_format_text(&out, spec, rows, a->explain);
  fputs(txt, stdout);
  free(txt);
  if (a->emit) rc = search__emit_spec(yaml, a->emit);
  free(yaml);
  if (a->plan && rc == RP_EXIT_OK) rc = search__compile(d, spec, &out.results.items[0], a->plan, k);
done:
  search_out_free(&out);
  spec_free(spec);
  return rc;
}

int cmd_search(int argc, char **argv) {
  SearchArgs a = {.fmt_s = "text"};
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--explain", NULL, false, NULL, &a.explain, NULL, NULL},
      {"--format", NULL, true, &a.fmt_s, NULL, NULL, NULL},
      {"--catalog", NULL, true, &a.catalog, NULL, NULL, NULL},
      {"--calibration", NULL, true, &a.calib, NULL, NULL, NULL},
      {"--top", NULL, true, &a.top_s, NULL, NULL, NULL},
      {"--max-candidates", NULL, true, &a.max_s, NULL, NULL, NULL},
      {"--gpus", NULL, true, &a.gpus_s, NULL, NULL, NULL},
      {"-o", NULL, true, &a.plan, NULL, NULL, NULL},
      {"--sort", NULL, true, &a.sort_s, NULL, NULL, NULL},
      {"--emit-spec", NULL, true, &a.emit, NULL, NULL, NULL},
      {"--min-gpus", NULL, false, NULL, &a.min_gpus, NULL, NULL},
      {"--what-if", NULL, true, &a.whatif_s, NULL, NULL, NULL},
      {"--plot", NULL, true, &a.plot, NULL, NULL, NULL},
  };
  int pr = cli_parse("search", search_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &a.path, "SPEC");
  if (pr != RP_OPT_GO) return pr;
  pr = search__check_args(&a);
  if (pr != RP_OPT_GO) return pr;
  Diags d;
  diags_init(&d);
  int rc;
  CostConsts k;
  cost_consts_default(&k);
  bool unreadable = false;
  if (a.calib && !cost_calibration_load(&d, a.calib, &k, &unreadable))
    rc = unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  else if (a.whatif_s)
    rc = search__what_if(&d, a.whatif_s, a.path, a.catalog, &k, a.sort, a.maxc, a.gpus, a.json);
  else
    rc = search__run_spec(&d, &a, &k);
  if (d.list.len) {
    if (a.json && rc != RP_EXIT_OK && rc != RP_EXIT_USAGE) diags_print(&d, stdout, DIAG_FMT_JSON, false);
    else diags_print(&d, stderr, DIAG_FMT_TEXT, diag_want_color(stderr));
  }
  diags_free(&d);
  return rc;
}
