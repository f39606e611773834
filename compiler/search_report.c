/*
 * search_report.c: what `rankplan search` makes of its ranking for a
 * reader: rows grouped when they are one deployment split into other
 * decode instances, the offered load the winner serves (W0502), and the
 * winner's `deployment:` section as YAML (search --emit-spec).
 *
 * Input: a SearchOut after search_run ranked it. Output: SearchResult.group,
 * diagnostics, or text; nothing here changes a figure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "search.h"

/* Same prefill pool (layout and instances) and as many decode GPUs. */
static bool same_but_decode_split(const SearchResult *a, const SearchResult *b) {
  if (a->mode != SEARCH_DISAGGREGATED || b->mode != SEARCH_DISAGGREGATED) return false;
  if (a->feasible != b->feasible) return false;
  const SearchPool *pa = &a->pools[0], *pb = &b->pools[0];
  if (memcmp(&pa->lay, &pb->lay, sizeof pa->lay) || pa->replicas != pb->replicas) return false;
  const SearchPool *da = &a->pools[1], *db = &b->pools[1];
  return da->replicas * da->gpus == db->replicas * db->gpus;
}

void search_group(SearchOut *out) {
  SearchResult *r = out->results.items;
  for (size_t i = 0; i < out->results.len; i++) {
    r[i].group = i;
    for (size_t j = 0; j < i; j++)
      if (r[j].group == j && same_but_decode_split(&r[j], &r[i])) {
        r[i].group = j;
        break;
      }
  }
}

void search_load_check(Diags *d, const Spec *s, const SearchOut *out) {
  if (out->results.len == 0 || !out->results.items[0].feasible) return;
  const SearchResult *w = &out->results.items[0];
  char *ls = search_layout_str(w);
  char *who = rp_sprintf("the best deployment, %s on %lld of %lld GPUs,", ls, (long long)w->gpus,
                         (long long)out->gpu_budget);
  const char *help =
      w->binding == BIND_NODES
          ? "more instances of its size fit the GPUs but not the engine's packing on the nodes "
            "(an instance takes whole nodes, or an even share of one): add nodes "
            "(hardware.nodes), or keep to instance sizes that divide a node (`search.both.gpus`, "
            "`search.decode.gpus`)"
      : w->gpus < out->gpu_budget
          ? "no deployment within the budget serves the whole rate, and this one leaves GPUs idle: "
            "`--sort cluster-gpu` ranks by goodput per GPU of the budget (the most served on all of "
            "it); add GPUs (`--gpus`, `search.gpu_budget`, hardware.nodes) to serve all of it"
          : "no deployment within the budget serves the whole rate: add GPUs (`--gpus`, "
            "`search.gpu_budget`, hardware.nodes), or relax `slo`";
  Diag *g = compile_load_check(d, s, w->req_s, who, help);
  if (g) search_domain_note(g, s, &out->model, out->gpu_budget);
  free(ls);
  free(who);
}

/* A YAML scalar for a string from the spec: a JSON string is a YAML
 * double-quoted scalar. */
static void yaml_str(StrBuf *sb, const char *s) { sb_json_str(sb, s); }

static void deployment_head(StrBuf *sb, const Spec *s, const SearchResult *w) {
  const DeploymentSpec *dp = &s->deployment;
  sb_printf(sb, "deployment:\n  mode: %s\n", w->mode == SEARCH_AGGREGATED ? "aggregated" : "disaggregated");
  if (dp->engine_version.set) {
    sb_printf(sb, "  engine: { name: %s, version: ", engine_name((Engine)dp->engine.v));
    yaml_str(sb, dp->engine_version.v);
    sb_puts(sb, " }\n");
  } else {
    sb_printf(sb, "  engine: %s\n", engine_name((Engine)dp->engine.v));
  }
  if (dp->image.set) {
    sb_puts(sb, "  image: ");
    yaml_str(sb, dp->image.v);
    sb_putc(sb, '\n');
  }
  if (dp->order.set) {
    sb_puts(sb, "  order: ");
    yaml_str(sb, dp->order.v);
    sb_putc(sb, '\n');
  }
  if (dp->allow_tp_across_domain.set)
    sb_printf(sb, "  allow_tp_across_domain: %s\n", dp->allow_tp_across_domain.v ? "true" : "false");
  if (dp->memory.utilization.set || dp->memory.reserve.set || dp->memory.kv_block.set) {
    sb_puts(sb, "  memory:\n");
    if (dp->memory.utilization.set) {
      /* The shortest of %.15g and %.17g that reads back as the same double. */
      char num[40];
      snprintf(num, sizeof num, "%.15g", dp->memory.utilization.v);
      if (strtod(num, NULL) != dp->memory.utilization.v)
        snprintf(num, sizeof num, "%.17g", dp->memory.utilization.v);
      sb_printf(sb, "    utilization: %s\n", num);
    }
    if (dp->memory.reserve.set) sb_printf(sb, "    reserve: %lld B\n", (long long)dp->memory.reserve.v);
    if (dp->memory.kv_block.set) sb_printf(sb, "    kv_block: %lld\n", (long long)dp->memory.kv_block.v);
  }
  const SStr *hk[] = {&dp->hooks.placement, &dp->hooks.layer_partition, &dp->hooks.expert_placement,
                      &dp->hooks.objective, &dp->hooks.filter};
  static const char *const hn[] = {"placement", "layer_partition", "expert_placement", "objective",
                                   "filter"};
  bool any = false;
  for (size_t i = 0; i < RP_ARRAY_LEN(hk); i++) {
    if (!hk[i]->set) continue;
    if (!any) sb_puts(sb, "  hooks:\n");
    any = true;
    sb_printf(sb, "    %s: ", hn[i]);
    yaml_str(sb, hk[i]->v);
    sb_putc(sb, '\n');
  }
}

char *search_deployment_yaml(const Spec *s, const SearchOut *out) {
  RP_ASSERT(out->results.len > 0);
  const SearchResult *w = &out->results.items[0];
  StrBuf sb;
  sb_init(&sb);
  char *ls = search_layout_str(w);
  sb_puts(&sb, "# `rankplan search` winner for ");
  sb_puts(&sb, s->file ? s->file : "spec");
  sb_printf(&sb, " (spec sha256 %.12s): %s, %.1f tok/s per GPU.\n", s->sha256, ls, w->goodput_gpu);
  sb_puts(&sb, "# Replace the spec's `deployment:` section with this one.\n");
  free(ls);
  deployment_head(&sb, s, w);
  sb_puts(&sb, "  pools:\n");
  for (size_t i = 0; i < w->npools; i++) {
    const SearchPool *p = &w->pools[i];
    const char *name = p->role == ROLE_PREFILL ? "prefill" : p->role == ROLE_DECODE ? "decode" : "serve";
    sb_printf(&sb, "    - name: %s\n      role: %s\n      replicas: %lld\n", name, role_name(p->role),
              (long long)p->replicas);
    const char *k[] = {"tp", "pp", "cp", "dp", "ep", "etp", "dcp"};
    int64_t v[] = {p->lay.tp, p->lay.pp, p->lay.cp, p->lay.dp, p->lay.ep, p->lay.etp, p->lay.dcp};
    for (size_t j = 0; j < RP_ARRAY_LEN(k); j++) sb_printf(&sb, "      %s: %lld\n", k[j], (long long)v[j]);
  }
  return sb_take(&sb);
}
