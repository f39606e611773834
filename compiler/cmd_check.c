/*
 * cmd_check.c: `rankplan check SPEC...`, the dry-run validator and CI gate.
 *
 * Runs, per spec, parse (types, units, structure) and then every rule
 * `rankplan compile` runs: the model, memory and topology rules
 * (validate.c), the layout, the spec's hooks, placement, the memory ledger
 * with expert replicas and the KV-reshard maps (compile_layout, compile.h),
 * so a spec `check` accepts compiles. A search spec (mode search, no
 * pools) runs the search instead, and a spec with pools gets its predicted
 * TTFT and TPOT compared with the SLOs (W0501). Prints every diagnostic,
 * not just the first. --deny CODE and --warnings-as-errors turn warnings
 * (or notes) into errors.
 *
 * Exit (docs/ci.md): 0 every spec valid; 4 every spec valid, but for some
 * no layout meets the SLOs (only E0500/E0508 errors, or W0501); 1 a spec
 * is invalid; 2 a usage error or an unreadable file. The worst one wins.
 *
 * Besides the diagnostics it prints the memory ledger of every rank class
 * (pool x pp stage, memory.c): as a table on stdout in text mode (unless
 * --quiet), and under a "ledger" key added to the diagnostics object in
 * json mode (docs/memory.md documents the keys). SARIF output carries
 * diagnostics only. With several specs, text output comes spec by spec;
 * json and sarif are one document for all of them.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compile.h"
#include "engines.h"
#include "layout.h"
#include "memory.h"
#include "search.h"
#include "spec.h"
#include "validate.h"

static const char check_usage[] =
    "usage: rankplan check [options] SPEC...\n"
    "\n"
    "Validates deployment specs without launching anything: YAML, types and\n"
    "units, required keys, pools against the cluster, head/expert\n"
    "divisibility, memory fit per rank, KV capacity against the context,\n"
    "topology, and every later rule `rankplan compile` runs (layout, hooks,\n"
    "placement, KV-reshard maps), so a spec check accepts compiles. A search\n"
    "spec runs the search; a spec with pools has its predicted TTFT and TPOT\n"
    "compared with its SLOs. Every problem is reported with its\n"
    "file:line:col.\n"
    "\n"
    "options:\n"
    "  --format text|json|sarif  diagnostics format (default text; json is\n"
    "                            documented in docs/errors.md; sarif is 2.1.0);\n"
    "                            json and sarif are one document for all specs\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "                            (default: $RANKPLAN_CATALOG, else the data\n"
    "                            directory's, which `rankplan --version` names)\n"
    "  --deny CODE               report diagnostic CODE (a warning or note,\n"
    "                            e.g. W0301) as an error; repeatable\n"
    "  --warnings-as-errors      report every warning as an error\n"
    "  -q, --quiet               print diagnostics only, no summary tables\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 every spec valid; 4 valid, but for some spec no layout meets the\n"
    "SLOs (E0500/E0508 only, or W0501); 1 a spec is invalid; 2 usage error or\n"
    "unreadable file (docs/ci.md)\n";

/* One ledger row: a pool's pp stage. */
typedef struct {
  const PoolSpec *pool;
  int64_t stage;
  MemLedger L;
} LedgerRow;
typedef RP_VEC(LedgerRow) LedgerRows;

/* Whether the ledger would be meaningless: the model-level rules failed,
 * or no catalog entry gives the engine's accounting for the version the
 * spec names (E0701, E0702): another release's rules would be printed as
 * the engine's own log lines. */
static bool ledger_unknown(const Diags *d) {
  for (size_t i = 0; i < d->list.len; i++) {
    DiagCode c = d->list.items[i]->code;
    if (c == DIAG_E0218 || c == DIAG_E0219 || c == DIAG_E0220 || c == DIAG_E0299 || c == DIAG_E0701 ||
        c == DIAG_E0702)
      return true;
  }
  return false;
}

/* Computes the ledger of every pool and stage with a scratch Diags (the
 * rules already reported the problems). Pools whose partition is invalid
 * are skipped. */
static void ledger_rows(const Spec *s, LedgerRows *rows) {
  Diags scratch;
  diags_init(&scratch);
  LayWeights w = lay_default_weights(s);
  for (size_t i = 0; i < s->deployment.npools; i++) {
    const PoolSpec *p = &s->deployment.pools[i];
    int64_t pp = p->pp.v > 0 ? p->pp.v : 1;
    int64_t *part = rp_calloc((size_t)pp, sizeof *part);
    if (lay_partition(&scratch, (Engine)s->deployment.engine.v, s->model.layers.v, pp, p, &w, part)) {
      for (int64_t st = 0; st < pp; st++) {
        LedgerRow r;
        memset(&r, 0, sizeof r);
        r.pool = p;
        r.stage = st;
        if (mem_ledger(s, p, st, part, &r.L, &scratch)) rp_vec_push(rows, r);
      }
    }
    free(part);
  }
  diags_free(&scratch);
}

/* Bytes of the row nobody claims: capacity less every use and the KV
 * blocks actually allocated (negative when the weights do not fit). */
static int64_t row_free(const MemLedger *L) {
  int64_t kv = L->kv_blocks * L->kv_block_tokens * L->kv_bytes_per_token;
  return L->capacity - L->weights - L->activations - L->workspace - L->comm - L->reserve - kv;
}

static void print_ledger_text(const LedgerRows *rows, FILE *out) {
  if (!rows->len) return;
  fprintf(out, "memory per GPU, by pool and pipeline stage:\n");
  fprintf(out, "%-12s %5s %6s %9s %11s %11s %11s %11s %11s %11s %9s %11s\n", "pool", "stage",
          "ranks", "layers", "weights", "kv cache", "activations", "buffers", "reserve", "free",
          "requests", "max context");
  for (size_t i = 0; i < rows->len; i++) {
    const LedgerRow *r = &rows->items[i];
    const MemLedger *L = &r->L;
    char w[32], kv[32], act[32], buf[32], res[32], fr[32], layers[48];
    int64_t kvb = L->kv_blocks * L->kv_block_tokens * L->kv_bytes_per_token;
    snprintf(layers, sizeof layers, "%lld-%lld", (long long)L->shard.first_layer,
             (long long)(L->shard.first_layer + L->shard.layers - 1));
    fprintf(out, "%-12s %5lld %6lld %9s %11s %11s %11s %11s %11s %11s %9lld %11s\n",
            r->pool->name.v ? r->pool->name.v : "?", (long long)r->stage, (long long)L->ranks,
            layers, rp_fmt_bytes(L->weights, w, sizeof w), rp_fmt_bytes(kvb, kv, sizeof kv),
            rp_fmt_bytes(L->activations, act, sizeof act),
            rp_fmt_bytes(L->workspace + L->comm, buf, sizeof buf),
            rp_fmt_bytes(L->reserve, res, sizeof res), rp_fmt_bytes(row_free(L), fr, sizeof fr),
            (long long)L->requests_fit_instance, L->max_context_fits ? "fits" : "does not fit");
  }
}

/* The two figures an engine logs at start-up for one attention replica
 * (vLLM: "GPU KV cache size: N tokens" and "Maximum concurrency for L
 * tokens per request: Cx"): the tokens the replica's KV blocks hold
 * (its tokens are split over cp x dcp ranks, each holding a share) and
 * how many max_context requests fit. A pool takes its tightest stage. */
static int64_t row_kv_tokens(const LedgerRow *r) {
  int64_t split = (r->pool->cp.v > 0 ? r->pool->cp.v : 1) * (r->pool->dcp.v > 0 ? r->pool->dcp.v : 1);
  return mul_sat(mul_sat(r->L.kv_blocks, r->L.kv_block_tokens), split);
}

static double row_concurrency(const LedgerRow *r) {
  return r->L.max_context_blocks > 0 ? (double)r->L.kv_blocks / (double)r->L.max_context_blocks : 0.0;
}

/* The CUDA-graph capture of a pool that decodes, as the engine logs it:
 * SGLang's decode batch ("Capture cuda graph bs [1, 2, ..., B]"),
 * cuda_graph_max_bs at the pool's --tp-size, where it is known; vLLM's
 * largest captured step in tokens; TensorRT-LLM's largest decode batch,
 * cuda_graph_config.max_batch_size, 128 when unset, and how many graphs
 * that captures, whose data the ledger counts (docs/memory.md). */
static void print_graph_line(const Spec *s, const PoolSpec *p, FILE *out) {
  Engine e = (Engine)s->deployment.engine.v;
  if ((PoolRole)p->role.v == ROLE_PREFILL) return;
  const char *name = p->name.v ? p->name.v : "?";
  if (e == ENGINE_VLLM) {
    fprintf(out, "  %-12s CUDA graphs: steps up to %lld tokens per engine core (max_cudagraph_capture_size)\n",
            name, (long long)engine_vllm_graph_tokens(s));
    return;
  }
  if (e == ENGINE_TRTLLM) {
    int64_t b = engine_trtllm_graph_bs(s), n = engine_trtllm_graph_count(s);
    fprintf(out,
            "  %-12s CUDA graphs: decode batches up to %lld per attention dp rank "
            "(cuda_graph_config.max_batch_size), %lld graphs\n",
            name, (long long)b, (long long)n);
    return;
  }
  if (e != ENGINE_SGLANG) return;
  int64_t tp = p->tp.v > 0 ? p->tp.v : 1, dp = p->dp.v > 0 ? p->dp.v : 1;
  int64_t b = mem_engine_sglang_graph_bs(s, mem_engine_sglang_tp_size(s, tp, dp));
  if (b > 0)
    fprintf(out, "  %-12s CUDA graphs: decode batches up to %lld per scheduler (cuda_graph_max_bs)\n", name,
            (long long)b);
}

/* The KV figure in the words of the engine's own start-up log, for the
 * engines whose logs word it differently from the line above: SGLang's
 * memory pool (mem_cache/memory_pool.py) and TensorRT-LLM's KV cache
 * manager ("[MemUsageChange] Allocated X GiB for max tokens in paged KV
 * cache (N)."). vLLM's two lines are the line above. */
static void print_log_words(const Spec *s, const char *name, int64_t tokens, FILE *out) {
  Engine e = (Engine)s->deployment.engine.v;
  if (e == ENGINE_SGLANG)
    fprintf(out, "  %-12s SGLang logs it as: KV Cache is allocated. #tokens: %lld\n", name, (long long)tokens);
  else if (e == ENGINE_TRTLLM)
    fprintf(out, "  %-12s TensorRT-LLM logs it as: ... for max tokens in paged KV cache (%lld).\n", name,
            (long long)tokens);
}

static void print_engine_lines(const Spec *s, const LedgerRows *rows, FILE *out) {
  if (!rows->len) return;
  /* Without an engine there is no start-up log to set the figures beside. */
  fprintf(out, "%s\n", (Engine)s->deployment.engine.v == ENGINE_GENERIC
                           ? "Per attention replica (no engine named: the generic ledger's figures):"
                           : "Per attention replica, as the engine logs it at start-up:");
  for (size_t i = 0; i < rows->len;) {
    const PoolSpec *p = rows->items[i].pool;
    int64_t tokens = INT64_MAX;
    double conc = 1e300;
    for (; i < rows->len && rows->items[i].pool == p; i++) {
      if (!rows->items[i].L.shard.layers) continue;
      if (row_kv_tokens(&rows->items[i]) < tokens) tokens = row_kv_tokens(&rows->items[i]);
      if (row_concurrency(&rows->items[i]) < conc) conc = row_concurrency(&rows->items[i]);
    }
    if (tokens == INT64_MAX) continue;
    fprintf(out, "  %-12s KV cache: %lld tokens; maximum concurrency for %lld tokens per request: %.2fx\n",
            p->name.v ? p->name.v : "?", (long long)tokens, (long long)spec_max_model_len(s), conc);
    print_log_words(s, p->name.v ? p->name.v : "?", tokens, out);
    print_graph_line(s, p, out);
  }
}

/* Appends the ledger rows of spec `path` to the json array a. */
static void ledger_append(json_t *a, const LedgerRows *rows, const char *path) {
  for (size_t i = 0; i < rows->len; i++) {
    const LedgerRow *r = &rows->items[i];
    const MemLedger *L = &r->L;
    json_t *o = json_object();
    json_t *spec = json_string(path); /* NULL: the path is not UTF-8 */
    json_object_set_new(o, "spec", spec ? spec : json_null());
    json_object_set_new(o, "pool", json_string(r->pool->name.v ? r->pool->name.v : "?"));
    json_object_set_new(o, "role", json_string(role_name((PoolRole)r->pool->role.v)));
    json_object_set_new(o, "stage", json_integer(r->stage));
    json_object_set_new(o, "ranks", json_integer(L->ranks));
    json_object_set_new(o, "layers", json_pack("[II]", (json_int_t)L->shard.first_layer,
                                               (json_int_t)(L->shard.first_layer + L->shard.layers)));
    json_object_set_new(o, "capacity", json_integer(L->capacity));
    json_object_set_new(o, "engine_total", json_integer(L->engine_total));
    json_object_set_new(o, "usable", json_integer(L->usable));
    json_object_set_new(o, "weights", json_integer(L->weights));
    json_object_set_new(o, "activations", json_integer(L->activations));
    json_object_set_new(o, "forward_peak", json_integer(L->forward_peak));
    json_object_set_new(o, "sampler", json_integer(L->sampler));
    json_object_set_new(o, "moe_workspace", json_integer(L->moe_workspace));
    json_object_set_new(o, "profile_tokens", json_integer(L->tokens_per_forward));
    json_object_set_new(o, "profile_seqs", json_integer(L->profile_seqs));
    json_object_set_new(o, "workspace", json_integer(L->workspace));
    json_object_set_new(o, "comm", json_integer(L->comm));
    json_object_set_new(o, "reserved", json_integer(L->reserve));
    json_object_set_new(o, "kv_pool", json_integer(L->kv_pool));
    json_object_set_new(o, "kv_cache",
                        json_integer(L->kv_blocks * L->kv_block_tokens * L->kv_bytes_per_token));
    json_object_set_new(o, "free", json_integer(row_free(L)));
    json_object_set_new(o, "kv_bytes_per_token", json_integer(L->kv_bytes_per_token));
    json_object_set_new(o, "kv_block_tokens", json_integer(L->kv_block_tokens));
    json_object_set_new(o, "kv_blocks", json_integer(L->kv_blocks));
    json_object_set_new(o, "requests_fit", json_integer(L->requests_fit));
    json_object_set_new(o, "requests_fit_instance", json_integer(L->requests_fit_instance));
    json_object_set_new(o, "max_context_fits", json_boolean(L->max_context_fits));
    json_object_set_new(o, "kv_tokens", json_integer(row_kv_tokens(r)));
    json_object_set_new(o, "max_concurrency", json_real(row_concurrency(r)));
    json_array_append_new(a, o);
  }
}

/* The command line: the specs, the codes to deny, the flags. */
typedef struct {
  const char *usage;
  RP_VEC(const char *) files;
  bool deny[DIAG__COUNT];
  bool werror, quiet;
  const char *catalog;
  DiagFormat fmt;
} CheckArgs;

static int check_help(void *ctx, const RpOpt *opt, const char *value) {
  return cli_help((void *)((CheckArgs *)ctx)->usage, opt, value);
}

static int check_file(void *ctx, const char *arg) {
  rp_vec_push(&((CheckArgs *)ctx)->files, arg);
  return RP_OPT_GO;
}

static int check_deny(void *ctx, const RpOpt *opt, const char *value) {
  RP_UNUSED(opt);
  char up[16] = {0};
  for (size_t i = 0; value[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)value[i]);
  DiagCode c = strlen(value) < sizeof up ? diag_lookup(up) : DIAG__COUNT;
  if (c == DIAG__COUNT) {
    const char *codes[DIAG__COUNT];
    for (size_t i = 0; i < DIAG__COUNT; i++) codes[i] = diag_info((DiagCode)i)->code;
    const char *near = diag_closest(value, codes, DIAG__COUNT);
    return cli_usage_error("check", "--deny: unknown diagnostic code '%s'%s%s%s (docs/errors.md lists them)",
                           value, near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
  }
  ((CheckArgs *)ctx)->deny[c] = true;
  return RP_OPT_GO;
}

static int check_flag(void *ctx, const RpOpt *opt, const char *value) {
  RP_UNUSED(value);
  CheckArgs *a = ctx;
  if (strcmp(opt->name, "--quiet") == 0) a->quiet = true;
  else a->werror = true;
  return RP_OPT_GO;
}

static int check_value(void *ctx, const RpOpt *opt, const char *value) {
  CheckArgs *a = ctx;
  if (strcmp(opt->name, "--catalog") == 0) {
    a->catalog = value;
    return RP_OPT_GO;
  }
  if (!diag_format_parse(value, &a->fmt))
    return cli_usage_error("check", "unknown format '%s' (expected text, json or sarif)", value);
  return RP_OPT_GO;
}

static int check_parse_args(CheckArgs *a, int argc, char **argv) {
  static const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, check_help, NULL},
      {"--quiet", "-q", false, NULL, NULL, check_flag, NULL},
      {"--warnings-as-errors", NULL, false, NULL, NULL, check_flag, NULL},
      {"--format", NULL, true, NULL, NULL, check_value, NULL},
      {"--catalog", NULL, true, NULL, NULL, check_value, NULL},
      {"--deny", NULL, true, NULL, NULL, check_deny, NULL},
  };
  RpOptSpec s = {"check", opts, RP_ARRAY_LEN(opts), cli_usage_msg, check_file, NULL, "SPEC", a};
  int pr = rp_opts_parse(&s, argc, argv, 1);
  if (pr != RP_OPT_GO) return pr;
  if (a->files.len == 0) return cli_usage_error("check", "missing SPEC");
  return RP_OPT_GO;
}

/* --deny and --warnings-as-errors: the diagnostic becomes an error, with a
 * note saying which option made it one. Warnings past the kept 200 are
 * counted as errors too under --warnings-as-errors. */
static void check_promote(Diags *d, const CheckArgs *a) {
  for (size_t i = 0; i < d->list.len; i++) {
    Diag *g = d->list.items[i];
    bool deny = a->deny[g->code], all = a->werror && g->sev == SEV_WARNING;
    if (g->sev == SEV_ERROR || !(deny || all)) continue;
    if (g->sev == SEV_WARNING) d->nwarnings--;
    else d->nnotes--;
    g->sev = SEV_ERROR;
    d->nerrors++;
    diag_note(g, "an error here because of %s", deny ? "--deny" : "--warnings-as-errors");
  }
  if (a->werror) {
    d->nerrors += d->nwarnings;
    d->nwarnings = 0;
  }
}

/* A search spec: the search decides whether a layout meets the SLOs
 * (E0500, E0508 when none does). */
static void check_search(Diags *d, const Spec *s) {
  CostConsts k;
  cost_consts_default(&k);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  search_run(d, s, &k, &o, &out);
  search_out_free(&out);
}

/* A spec with pools: W0501 when its predicted TTFT or TPOT misses the SLO
 * (the plan's estimates, docs/plan.md). */
static void check_slo(Diags *d, const Spec *s, const Layout *L) {
  PlanEstimates e;
  const char *why = NULL;
  if (!compile_estimates(s, L, NULL, &e, &why)) return;
  compile_graph_check(d, s, L, &e);
  double ttft = s->slo.ttft.v * 1e3, tpot = s->slo.tpot.v * 1e3;
  if (e.goodput_tok_s_per_gpu > 0) {
    compile_load_check(d, s, e.throughput_tok_s / (double)s->workload.output_tokens.v,
                       "the deployment", NULL);
    return;
  }
  Diag *g = diag_at(d, DIAG_W0501, s->slo.loc,
                    "the pools' predicted TTFT %.1f ms and TPOT %.2f ms at %.0f tok/s miss the SLO "
                    "(ttft %.0f ms, tpot %.1f ms)", e.ttft_ms, e.tpot_ms, e.throughput_tok_s, ttft, tpot);
  diag_help(g, "`rankplan search` finds layouts that meet it; or relax `slo`, or lower "
               "`workload.rate`");
}

/* Every rule of `rankplan compile` (compile_layout: validate, layout,
 * hooks, placement, ledger, KV maps), or the search for a search spec. */
static void check_rules(Diags *d, const Spec *s) {
  if (s->deployment.mode.v == MODE_SEARCH && s->deployment.npools == 0) {
    validate_spec(d, s);
    if (!diags_failed(d)) check_search(d, s);
    return;
  }
  Layout *L = compile_layout(s, d);
  if (L) check_slo(d, s, L);
  lay_free(L);
}

/* The exit code of one spec's diagnostics. */
static int check_verdict(const Diags *d, bool unreadable) {
  if (unreadable) return RP_EXIT_USAGE;
  bool slo = false;
  for (size_t i = 0; i < d->list.len; i++) {
    const Diag *g = d->list.items[i];
    if (g->code == DIAG_W0501 && g->sev != SEV_ERROR) slo = true;
  }
  if (diags_failed(d)) return cli_slo_only(d) ? RP_EXIT_SLO : RP_EXIT_INPUT;
  return slo ? RP_EXIT_SLO : RP_EXIT_OK;
}

/* The worse of two exit codes: usage > invalid > SLO > ok. */
static int check_worse(int a, int b) {
  static const int order[] = {RP_EXIT_OK, RP_EXIT_SLO, RP_EXIT_INPUT, RP_EXIT_USAGE};
  int ra = 0, rb = 0;
  for (int i = 0; i < 4; i++) {
    if (order[i] == a) ra = i;
    if (order[i] == b) rb = i;
  }
  return ra >= rb ? a : b;
}

/* Checks one spec: its diagnostics (text: printed now; else moved into
 * all) and its ledger (text: printed; json: appended to ledger). */
static int check_one(const CheckArgs *a, const char *path, Diags *all, json_t *ledger) {
  Diags d;
  diags_init(&d);
  Spec *spec = spec_parse_file(&d, path, a->catalog);
  bool unreadable = false;
  for (size_t i = 0; i < d.list.len; i++)
    if (d.list.items[i]->code == DIAG_E0001) unreadable = true;
  LedgerRows rows = {0};
  if (spec && !diags_failed(&d)) {
    check_rules(&d, spec);
    if (!ledger_unknown(&d)) ledger_rows(spec, &rows);
  }
  check_promote(&d, a);
  int rc = spec ? check_verdict(&d, unreadable) : unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  if (a->fmt == DIAG_FMT_TEXT) {
    diags_print(&d, stderr, DIAG_FMT_TEXT, diag_want_color(stderr));
    if (!a->quiet) print_ledger_text(&rows, stdout);
    if (!a->quiet && spec) print_engine_lines(spec, &rows, stdout);
    if (!a->quiet && rc == RP_EXIT_OK) printf("%s: ok\n", path);
    if (!a->quiet && rc == RP_EXIT_SLO) printf("%s: valid, but no layout meets the SLOs\n", path);
  } else {
    if (ledger) ledger_append(ledger, &rows, path);
    diags_move(all, &d);
  }
  free(rows.items);
  spec_free(spec);
  diags_free(&d);
  return rc;
}

int cmd_check(int argc, char **argv) {
  CheckArgs a;
  memset(&a, 0, sizeof a);
  a.usage = check_usage;
  a.fmt = DIAG_FMT_TEXT;
  int pr = check_parse_args(&a, argc, argv);
  if (pr != RP_OPT_GO) {
    free(a.files.items);
    return pr;
  }
  Diags all;
  diags_init(&all);
  json_t *ledger = a.fmt == DIAG_FMT_JSON ? json_array() : NULL;
  int rc = RP_EXIT_OK;
  for (size_t i = 0; i < a.files.len; i++) rc = check_worse(rc, check_one(&a, a.files.items[i], &all, ledger));
  if (a.fmt == DIAG_FMT_JSON) {
    json_t *root = diags_to_json(&all);
    json_object_set_new(root, "ledger", ledger);
    diags_print_json_object(root, stdout);
    json_decref(root);
  } else if (a.fmt == DIAG_FMT_SARIF) {
    diags_print(&all, stdout, DIAG_FMT_SARIF, false);
  }
  diags_free(&all);
  free(a.files.items);
  return rc;
}
