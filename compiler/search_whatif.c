/*
 * search_whatif.c: the what-if table of `rankplan search` (search_whatif.h).
 */
#include "search_whatif.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The largest node count a value may give: the spec's own limit
 * (docs/spec.md, "Limits"). */
enum { WHATIF_MAX_NODES = 262144 };

bool search_what_if_parse(const char *arg, WhatIf *w, char **err) {
  memset(w, 0, sizeof *w);
  const char *eq = strchr(arg, '=');
  size_t kl = eq ? (size_t)(eq - arg) : 0;
  if (eq && kl == 3 && strncmp(arg, "gpu", 3) == 0) w->key = WHATIF_GPU;
  else if (eq && kl == 5 && strncmp(arg, "nodes", 5) == 0) w->key = WHATIF_NODES;
  else {
    *err = rp_sprintf("--what-if expects gpu=ENTRY,... or nodes=N,..., got '%s'", arg);
    return false;
  }
  const char *s = eq + 1;
  for (;;) {
    size_t l = strcspn(s, ",");
    char *v = rp_malloc(l + 1);
    memcpy(v, s, l);
    v[l] = '\0';
    w->vals = rp_realloc(w->vals, (w->n + 1) * sizeof *w->vals);
    w->vals[w->n++] = v;
    long long x;
    if (l == 0) *err = rp_sprintf("--what-if: an empty value in '%s'", arg);
    else if (w->key == WHATIF_NODES && !cli_parse_int(v, 1, WHATIF_MAX_NODES, &x))
      *err = rp_sprintf("--what-if nodes= expects counts from 1 to %d, got '%s'", WHATIF_MAX_NODES, v);
    if (l == 0 || *err) {
      search_what_if_free(w);
      return false;
    }
    if (!s[l]) return true;
    s += l + 1;
  }
}

void search_what_if_free(WhatIf *w) {
  for (size_t i = 0; i < w->n; i++) free(w->vals[i]);
  free(w->vals);
  memset(w, 0, sizeof *w);
}

/* One row: the value's winner, or the first error code. */
typedef struct {
  const char *value;
  int64_t nodes, budget;
  bool has;
  SearchResult win;
  char *layout;
  const char *code; /* NULL, or the error that left no winner */
  double rate;
} Row;

static void row_search(Row *r, const Spec *s, const CostConsts *k, const SearchOptions *o) {
  Diags sd;
  diags_init(&sd);
  SearchOut out;
  bool ok = search_run(&sd, s, k, o, &out);
  r->nodes = s->hardware.nodes.v;
  r->budget = out.gpu_budget;
  r->rate = out.model.rate;
  if (ok && out.results.len && out.results.items[0].feasible) {
    r->has = true;
    r->win = out.results.items[0];
    r->layout = search_layout_str(&r->win);
  }
  for (size_t i = 0; !r->has && i < sd.list.len && !r->code; i++)
    if (sd.list.items[i]->sev == SEV_ERROR) r->code = diag_info(sd.list.items[i]->code)->code;
  if (!r->has && !r->code) r->code = "E0500";
  search_out_free(&out);
  diags_free(&sd);
}

static void rows_text(StrBuf *sb, const WhatIf *w, const Row *rows, const SearchOptions *o) {
  sb_printf(sb, "what-if over %s, winners by --sort %s\n\n", w->key == WHATIF_GPU ? "the GPU type" : "the cluster size",
            search_sort_name(o->sort));
  sb_printf(sb, "%-14s %6s %6s  %-44s %6s %16s %11s %11s %9s %8s\n", w->key == WHATIF_GPU ? "gpu" : "nodes",
            "nodes", "budget", "winner", "GPUs", "serves req/s", "goodput/GPU", "/budgetGPU", "TTFT ms",
            "TPOT ms");
  for (size_t i = 0; i < w->n; i++) {
    const Row *r = &rows[i];
    sb_printf(sb, "%-14s %6lld %6lld  ", r->value, (long long)r->nodes, (long long)r->budget);
    if (!r->has) {
      sb_printf(sb, "no winner (%s)\n", r->code);
      continue;
    }
    char served[48];
    if (r->rate > 0) snprintf(served, sizeof served, "%.2f of %g", r->win.req_s, r->rate);
    else snprintf(served, sizeof served, "%.2f", r->win.req_s);
    sb_printf(sb, "%-44s %6lld %16s %11.1f %11.1f %9.1f %8.2f\n", r->layout, (long long)r->win.gpus, served,
              r->win.goodput_gpu, r->win.goodput_cluster_gpu, r->win.ttft * 1e3, r->win.tpot * 1e3);
  }
}

static json_t *jr(double v, double scale) { return json_real(round(v * scale) / scale); }

static char *rows_json(const WhatIf *w, const Row *rows, const SearchOptions *o) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("rankplan.search-what-if/1"));
  json_object_set_new(root, "key", json_string(w->key == WHATIF_GPU ? "gpu" : "nodes"));
  json_object_set_new(root, "sort", json_string(search_sort_name(o->sort)));
  json_t *arr = json_array();
  for (size_t i = 0; i < w->n; i++) {
    const Row *r = &rows[i];
    json_t *e = json_object();
    json_object_set_new(e, "value", json_string(r->value));
    json_object_set_new(e, "nodes", json_integer(r->nodes));
    json_object_set_new(e, "gpu_budget", json_integer(r->budget));
    json_object_set_new(e, "error", r->has ? json_null() : json_string(r->code));
    json_t *wn = json_null();
    if (r->has) {
      wn = json_object();
      json_object_set_new(wn, "layout", json_string(r->layout));
      json_object_set_new(wn, "gpus", json_integer(r->win.gpus));
      json_object_set_new(wn, "throughput_req_s", jr(r->win.req_s, 1e3));
      json_object_set_new(wn, "goodput_tok_s_per_gpu", jr(r->win.goodput_gpu, 1e2));
      json_object_set_new(wn, "goodput_tok_s_per_budget_gpu", jr(r->win.goodput_cluster_gpu, 1e2));
      json_object_set_new(wn, "ttft_ms", jr(r->win.ttft * 1e3, 1e3));
      json_object_set_new(wn, "tpot_ms", jr(r->win.tpot * 1e3, 1e3));
    }
    json_object_set_new(e, "winner", wn);
    json_array_append_new(arr, e);
  }
  json_object_set_new(root, "rows", arr);
  char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(root);
  char *res = rp_sprintf("%s\n", txt);
  free(txt);
  return res;
}

/* The spec of one value: parsed again with another GPU type, or the same
 * spec on another node count (its default GPU budget with it). */
static Spec *value_spec(Diags *d, const WhatIf *w, size_t i, const char *path, const char *catalog,
                        const Spec *base, Spec *copy) {
  if (w->key == WHATIF_GPU) return spec_parse_file_hw(d, path, catalog, w->vals[i]);
  long long n = 0;
  RP_ASSERT(cli_parse_int(w->vals[i], 1, WHATIF_MAX_NODES, &n));
  *copy = *base;
  copy->hardware.nodes.v = n;
  int64_t all = 0;
  if (!copy->search.gpu_budget.set && ck_mul(n, base->hardware.gpus_per_node.v, &all))
    copy->search.gpu_budget.v = all;
  return copy;
}

bool search_what_if_run(Diags *d, const WhatIf *w, const char *path, const char *catalog,
                        const CostConsts *k, const SearchOptions *o, bool json, char **text) {
  *text = NULL;
  Spec *base = w->key == WHATIF_NODES ? spec_parse_file(d, path, catalog) : NULL;
  if (w->key == WHATIF_NODES && (!base || diags_failed(d))) {
    spec_free(base);
    return false;
  }
  Row *rows = rp_calloc(w->n, sizeof *rows);
  bool ok = true;
  for (size_t i = 0; ok && i < w->n; i++) {
    Spec copy;
    Spec *s = value_spec(d, w, i, path, catalog, base, &copy);
    ok = s && !diags_failed(d);
    rows[i].value = w->vals[i];
    if (ok) row_search(&rows[i], s, k, o);
    if (s != &copy) spec_free(s);
  }
  if (ok) {
    StrBuf sb;
    sb_init(&sb);
    if (json) *text = rows_json(w, rows, o);
    else rows_text(&sb, w, rows, o), *text = sb_take(&sb);
    sb_free(&sb);
  }
  for (size_t i = 0; i < w->n; i++) free(rows[i].layout);
  free(rows);
  spec_free(base);
  return ok;
}
