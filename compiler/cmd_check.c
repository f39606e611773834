/*
 * cmd_check.c: `rankplan check SPEC`, the dry-run validator.
 *
 * Runs parse (types, units, structure) and then the model, memory and
 * topology rules (validate.c); prints every diagnostic, not just the first.
 * Exit 0 when valid (warnings allowed), 1 when any error, 2 on usage or
 * unreadable file.
 *
 * Besides the diagnostics it prints the memory ledger of every rank class
 * (pool x pp stage, memory.c): as a table on stdout in text mode (unless
 * --quiet), and under a "ledger" key added to the diagnostics object in
 * json mode (docs/memory.md documents the keys). SARIF output carries
 * diagnostics only.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "layout.h"
#include "spec.h"
#include "validate.h"

static const char check_usage[] =
    "usage: rankplan check [options] SPEC\n"
    "\n"
    "Validates a deployment spec without launching anything: YAML, types and\n"
    "units, required keys, pools against the cluster, head/expert\n"
    "divisibility, memory fit per rank, KV capacity against the context and\n"
    "topology. Every problem is reported with its file:line:col.\n"
    "\n"
    "options:\n"
    "  --format text|json|sarif  diagnostics format (default text; json is\n"
    "                            documented in docs/errors.md; sarif is 2.1.0)\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "                            (default: $RANKPLAN_CATALOG or plans/catalog)\n"
    "  -q, --quiet               print diagnostics only, no summary tables\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 valid, 1 invalid, 2 usage error or unreadable file\n";

/* One ledger row: a pool's pp stage. */
typedef struct {
  const PoolSpec *pool;
  int64_t stage;
  MemLedger L;
} LedgerRow;
typedef RP_VEC(LedgerRow) LedgerRows;

/* Whether the model-level rules failed (the ledger would be meaningless). */
static bool model_broken(const Diags *d) {
  for (size_t i = 0; i < d->list.len; i++) {
    DiagCode c = d->list.items[i]->code;
    if (c == DIAG_E0218 || c == DIAG_E0219 || c == DIAG_E0220 || c == DIAG_E0299) return true;
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

static json_t *ledger_json(const LedgerRows *rows) {
  json_t *a = json_array();
  for (size_t i = 0; i < rows->len; i++) {
    const LedgerRow *r = &rows->items[i];
    const MemLedger *L = &r->L;
    json_t *o = json_object();
    json_object_set_new(o, "pool", json_string(r->pool->name.v ? r->pool->name.v : "?"));
    json_object_set_new(o, "role", json_string(role_name((PoolRole)r->pool->role.v)));
    json_object_set_new(o, "stage", json_integer(r->stage));
    json_object_set_new(o, "ranks", json_integer(L->ranks));
    json_object_set_new(o, "layers", json_pack("[II]", (json_int_t)L->shard.first_layer,
                                               (json_int_t)(L->shard.first_layer + L->shard.layers)));
    json_object_set_new(o, "capacity", json_integer(L->capacity));
    json_object_set_new(o, "usable", json_integer(L->usable));
    json_object_set_new(o, "weights", json_integer(L->weights));
    json_object_set_new(o, "activations", json_integer(L->activations));
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
    json_array_append_new(a, o);
  }
  return a;
}

/* Prints the diagnostics object of docs/errors.md with the "ledger" key
 * added: the object comes from diag.c, so the two outputs cannot drift. */
static void print_json_with_ledger(Diags *d, const LedgerRows *rows, FILE *out) {
  json_t *root = diags_to_json(d);
  json_object_set_new(root, "ledger", ledger_json(rows));
  diags_print_json_object(root, out);
  json_decref(root);
}

int cmd_check(int argc, char **argv) {
  const char *path = NULL, *fmt_s = "text", *catalog = NULL;
  bool quiet = false;
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--quiet", "-q", false, NULL, &quiet, NULL, NULL},
      {"--format", NULL, true, &fmt_s, NULL, NULL, NULL},
      {"--catalog", NULL, true, &catalog, NULL, NULL, NULL},
  };
  int pr = cli_parse("check", check_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "SPEC");
  if (pr != RP_OPT_GO) return pr;
  DiagFormat fmt;
  if (!diag_format_parse(fmt_s, &fmt))
    return cli_usage_error("check", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (!path) return cli_usage_error("check", "missing SPEC");

  Diags d;
  diags_init(&d);
  Spec *spec = spec_parse_file(&d, path, catalog);
  int rc;
  bool unreadable = false;
  for (size_t i = 0; i < d.list.len; i++) {
    DiagCode c = d.list.items[i]->code;
    if (c == DIAG_E0001) unreadable = true;
  }
  /* Model, memory and topology rules run once parse succeeded. */
  LedgerRows rows = {0};
  if (spec && !diags_failed(&d)) {
    validate_spec(&d, spec);
    if (!model_broken(&d)) ledger_rows(spec, &rows);
  }
  FILE *out = fmt == DIAG_FMT_TEXT ? stderr : stdout;
  if (fmt == DIAG_FMT_JSON) print_json_with_ledger(&d, &rows, out);
  else diags_print(&d, out, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  if (unreadable) rc = RP_EXIT_USAGE;
  else if (diags_failed(&d) || !spec) rc = RP_EXIT_INPUT;
  else rc = RP_EXIT_OK;
  if (fmt == DIAG_FMT_TEXT && !quiet) print_ledger_text(&rows, stdout);
  if (rc == RP_EXIT_OK && fmt == DIAG_FMT_TEXT && !quiet)
    printf("%s: ok\n", path);
  free(rows.items);
  spec_free(spec);
  diags_free(&d);
  return rc;
}
