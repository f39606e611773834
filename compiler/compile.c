/*
 * compile.c: the compile pipeline (compile.h), shared by `rankplan
 * compile` (cmd_compile.c, its arguments) and `rankplan search -o`.
 *
 * parse → validate → layout (rank generator, layer partition, or the
 * spec's layer_partition hook) → placement (default, or the spec's Lua
 * placement hook, validated either way) → the expert_placement hook (MoE
 * pools: an expert -> ep rank map with hot-expert replicas) → memory
 * ledger (counting those replicas) → KV reshard maps → estimates (cost
 * model) → emit.
 * Invariants: nothing is written unless every stage succeeded, and files
 * are written atomically (outfile.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "cost.h"
#include "hooks.h"
#include "layout.h"
#include "model.h"
#include "reshard.h"
#include "spec.h"
#include "validate.h"

/* Runs the layer_partition hook for every pool when the spec names one;
 * its result is checked again by the layout (lay_set_partition). */
static bool hook_partitions(Diags *d, const Spec *spec, Layout *L) {
  if (!spec->deployment.hooks.layer_partition.set) return true;
  HookSession hs;
  bool ok = hook_session_open(&hs, spec, d);
  for (size_t p = 0; ok && p < L->npools; p++) {
    int64_t pp = L->pools[p].size[CO_PP];
    int64_t *counts = rp_calloc((size_t)pp, sizeof *counts);
    ok = hook_run_layer_partition(&hs.env, &hs.ctx, p, counts, d) &&
         lay_set_partition(d, L, p, spec->model.layers.v, counts,
                           spec->deployment.hooks.layer_partition.loc);
    free(counts);
  }
  hook_session_close(&hs);
  return ok && !diags_failed(d);
}

/* Runs the placement hook of session hs and sets its placement in L (the
 * layout checks it again, as it checks any placement). The hook sees the
 * default placement when have_default. */
static bool run_placement_hook(Diags *d, const Spec *spec, Layout *L, HookSession *hs,
                               bool have_default) {
  size_t n = (size_t)L->nranks ? (size_t)L->nranks : 1;
  int64_t *dn = rp_malloc(n * sizeof *dn), *dg = rp_malloc(n * sizeof *dg);
  int64_t *hn = rp_malloc(n * sizeof *hn), *hg = rp_malloc(n * sizeof *hg);
  for (size_t r = 0; r < (size_t)L->nranks; r++) {
    dn[r] = L->ranks[r].node;
    dg[r] = L->ranks[r].device;
  }
  hs->ctx.default_node = have_default ? dn : NULL;
  hs->ctx.default_gpu = have_default ? dg : NULL;
  bool ok = hook_run_placement(&hs->env, &hs->ctx, hn, hg, d);
  if (ok) {
    int32_t *node = rp_malloc(n * sizeof *node), *gpu = rp_malloc(n * sizeof *gpu);
    for (size_t r = 0; r < (size_t)L->nranks; r++) {
      node[r] = hn[r] < INT32_MIN || hn[r] > INT32_MAX ? -1 : (int32_t)hn[r];
      gpu[r] = hg[r] < INT32_MIN || hg[r] > INT32_MAX ? -1 : (int32_t)hg[r];
    }
    ok = lay_place_set(d, L, node, gpu, spec->deployment.hooks.placement.loc);
    free(node);
    free(gpu);
  }
  hs->ctx.default_node = hs->ctx.default_gpu = NULL;
  free(dn);
  free(dg);
  free(hn);
  free(hg);
  return ok;
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
  HookSession hs;
  bool ok = hook_session_open(&hs, spec, d);
  if (ok) ok = run_placement_hook(d, spec, L, &hs, have_default);
  hook_session_close(&hs);
  if (ok && !diags_failed(d) && !L->placed) return lay_place_default(d, L); /* reports why */
  return ok && !diags_failed(d);
}

/* Runs the expert_placement hook for every pool of a MoE model when the
 * spec names one, and stores each pool's map in the layout (LayPool
 * expert_map), where lay_memory counts the replicas' weights and emit
 * writes the map. The hook checked its result (hooks.h); the layout checks
 * the map's shape again. */
static bool hook_experts(Diags *d, const Spec *spec, Layout *L) {
  if (!spec->deployment.hooks.expert_placement.set || !model_is_moe(&spec->model)) return true;
  HookSession hs;
  bool ok = hook_session_open(&hs, spec, d);
  for (size_t p = 0; ok && p < L->npools; p++) {
    HookExpertMap m;
    ok = hook_run_expert_placement(&hs.env, &hs.ctx, p, &m, d);
    if (ok) lay_set_expert_map(L, p, m.experts, m.ep, m.slots_per_rank, m.offsets, m.ranks);
    hook_expert_map_free(&m);
  }
  hook_session_close(&hs);
  return ok && !diags_failed(d);
}

Layout *compile_layout(const Spec *spec, Diags *d) {
  if (!spec || diags_failed(d)) return NULL;
  validate_spec(d, spec);
  if (diags_failed(d)) return NULL;
  if (spec->deployment.mode.v == MODE_SEARCH && spec->deployment.npools == 0) {
    Diag *g = diag_at(d, DIAG_E0310, spec->deployment.loc,
                      "`compile` needs pools, got a search spec without any");
    diag_help(g, "run `rankplan search` on it, or write the pools under `deployment.pools`");
    return NULL;
  }
  Layout *L = lay_build(d, spec, NULL);
  if (L && !diags_failed(d)) hook_partitions(d, spec, L);
  if (L && !diags_failed(d)) place(d, spec, L);
  if (L && !diags_failed(d)) hook_experts(d, spec, L);
  if (L && !diags_failed(d)) lay_memory(d, spec, L);
  if (L && !diags_failed(d)) {
    /* KV reshard maps between prefill and decode pools: errors stop the
     * compile, warnings go into the plan. emit writes the maps. */
    RsPlan rsp;
    if (rs_plan_build(d, spec, L, &rsp)) rs_plan_free(&rsp);
  }
  if (L && diags_failed(d)) {
    lay_free(L);
    L = NULL;
  }
  return L;
}

/* ---- estimates ------------------------------------------------------------ */

static CostLayout cost_layout_of(const LayPool *P) {
  CostLayout c = {P->size[CO_TP], P->size[CO_PP], P->size[CO_CP], P->size[CO_DP],
                  P->size[CO_EP], P->size[CO_ETP], P->size[CO_DCP]};
  return c;
}

/* The mean context of a decode step: the whole prompt and half the output,
 * as the search assumes. */
static double est_ctx(const CostModel *m) { return (double)m->tin + (double)m->tout / 2.0; }

/* The decode batch of one instance: the largest B up to the KV memory and
 * the batch cap whose step meets the TPOT SLO (1 when none does). 0 when
 * not even one request fits in KV memory. */
static int64_t est_decode_batch(const CostModel *m, const CostLayout *l) {
  int64_t bmem = cost_batch_memory(m, l);
  int64_t cap = l->dp * l->pp * (int64_t)m->k.max_batch_per_dp;
  int64_t hi = bmem < cap ? bmem : cap;
  if (hi < 1) return 0;
  CostDecode dc;
  if (!cost_decode_step(m, l, 1, est_ctx(m), &dc) || dc.tpot > m->slo_tpot) return 1;
  int64_t lo = 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (cost_decode_step(m, l, mid, est_ctx(m), &dc) && dc.tpot <= m->slo_tpot) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* One prefill pool (x instances) and one decode pool (y instances), as
 * search.c's pair evaluation with the instance counts fixed by the spec. */
static bool est_disagg(const CostModel *m, double rho, const LayPool *Pp, const LayPool *Pd,
                       PlanEstimates *e, const char **why) {
  CostLayout P = cost_layout_of(Pp), D = cost_layout_of(Pd);
  double x = (double)Pp->replicas, y = (double)Pd->replicas;
  CostPrefill pre;
  if (!cost_prefill(m, &P, &pre) || !(pre.mu > 0)) {
    *why = "the cost model cannot evaluate the prefill pool";
    return false;
  }
  int64_t B = est_decode_batch(m, &D);
  CostDecode dc;
  if (B < 1 || !cost_decode_step(m, &D, B, est_ctx(m), &dc) || !(dc.tpot > 0)) {
    *why = "not one request fits the decode pool's KV memory";
    return false;
  }
  double tkv = cost_kv_transfer(m, &P, &D);
  double rt = cost_md1_max_rho(pre.mu, m->slo_ttft - pre.latency - tkv);
  double rho_p = rt > 0 && rt < rho ? rt : rho;
  double rd = rho * (double)B / dc.tpot / (double)m->tout; /* req/s per decode instance */
  double served = fmin(x * rho_p * pre.mu, y * rd);
  if (m->rate > 0 && m->rate < served) served = m->rate;
  /* Little's law: each decode instance holds served/y * tout * TPOT
   * requests; at a smaller batch than B the step is shorter. */
  double tpot = dc.tpot;
  int64_t bl = cost_ceil_i64(served / y * (double)m->tout * dc.tpot);
  if (bl < 1) bl = 1;
  CostDecode dl;
  if (bl < B && cost_decode_step(m, &D, bl, est_ctx(m), &dl)) tpot = dl.tpot;
  double util = served / (x * pre.mu);
  e->ttft_ms = (cost_md1_wait(util, pre.mu) + pre.latency + tkv) * 1e3;
  e->tpot_ms = tpot * 1e3;
  e->throughput_tok_s = served * (double)m->tout;
  return true;
}

/* One pool of role both (x instances), as search.c's aggregated
 * evaluation: prefills and decode steps alternate on each instance. */
static bool est_agg(const CostModel *m, double rho, const LayPool *Pa, PlanEstimates *e,
                    const char **why) {
  CostLayout A = cost_layout_of(Pa);
  double x = (double)Pa->replicas;
  CostPrefill pre;
  if (!cost_prefill(m, &A, &pre) || !(pre.mu > 0)) {
    *why = "the cost model cannot evaluate the pool";
    return false;
  }
  int64_t bmem = cost_batch_memory(m, &A);
  int64_t cap = A.dp * A.pp * (int64_t)m->k.max_batch_per_dp;
  int64_t hi = bmem < cap ? bmem : cap;
  if (hi < 1) {
    *why = "not one request fits the pool's KV memory";
    return false;
  }
  /* For batch B: capacity rcap = 1 / (1/mu_p + tout / (B / tpot)), load
   * rho_a = min(headroom, the M/D/1 rho meeting TTFT), decode steps
   * stretched by the prefill share. The largest B meeting TPOT wins (1
   * when none does). */
  int64_t best = 1;
  for (int64_t lo = 1, top = hi; lo <= top;) {
    int64_t mid = lo + (top - lo) / 2;
    CostDecode dc;
    bool good = false;
    if (cost_decode_step(m, &A, mid, est_ctx(m), &dc) && dc.tpot > 0) {
      double rcap = 1.0 / (1.0 / pre.mu + (double)m->tout * dc.tpot / (double)mid);
      double rt = cost_md1_max_rho(rcap, m->slo_ttft - pre.latency);
      double ra = rt < rho ? rt : rho;
      double up = ra * rcap / pre.mu;
      good = ra > 0 && up < 1.0 && dc.tpot / (1.0 - up) <= m->slo_tpot;
    }
    if (good) {
      best = mid;
      lo = mid + 1;
    } else {
      top = mid - 1;
    }
  }
  CostDecode dc;
  if (!cost_decode_step(m, &A, best, est_ctx(m), &dc) || !(dc.tpot > 0)) {
    *why = "the cost model cannot evaluate the pool's decode step";
    return false;
  }
  double rcap = 1.0 / (1.0 / pre.mu + (double)m->tout * dc.tpot / (double)best);
  double rt = cost_md1_max_rho(rcap, m->slo_ttft - pre.latency);
  double ra = rt > 0 && rt < rho ? rt : rho;
  double served = x * ra * rcap;
  if (m->rate > 0 && m->rate < served) served = m->rate;
  double util = served / (x * rcap);
  double up = util * rcap / pre.mu;
  e->ttft_ms = (cost_md1_wait(util, rcap) + pre.latency) * 1e3;
  e->tpot_ms = dc.tpot / (1.0 - up) * 1e3;
  e->throughput_tok_s = served * (double)m->tout;
  return true;
}

bool compile_estimates(const Spec *spec, const Layout *L, const CostConsts *k,
                       PlanEstimates *est, const char **why) {
  memset(est, 0, sizeof *est);
  *why = NULL;
  if (spec->workload.input_tokens.v <= 0 || spec->workload.output_tokens.v <= 0) {
    *why = "the spec gives no workload input_tokens and output_tokens";
    return false;
  }
  if (!(spec->slo.ttft.v > 0) || !(spec->slo.tpot.v > 0)) {
    *why = "the spec gives no slo ttft and tpot";
    return false;
  }
  const LayPool *both = NULL, *pre = NULL, *dec = NULL;
  size_t nboth = 0, npre = 0, ndec = 0;
  for (size_t p = 0; p < L->npools; p++) {
    const LayPool *P = &L->pools[p];
    if (P->role == ROLE_BOTH) both = P, nboth++;
    else if (P->role == ROLE_PREFILL) pre = P, npre++;
    else if (P->role == ROLE_DECODE) dec = P, ndec++;
  }
  bool agg = nboth == 1 && npre == 0 && ndec == 0;
  if (!agg && !(nboth == 0 && npre == 1 && ndec == 1)) {
    *why = "the estimates cover one `both` pool or one prefill and one decode pool";
    return false;
  }
  CostConsts kd;
  if (!k) {
    cost_consts_default(&kd);
    k = &kd;
  }
  /* The cost model reports what it lacks; estimates are optional, so its
   * diagnostics go to a scratch list and only the fact is kept. */
  Diags scratch;
  diags_init(&scratch);
  CostModel m;
  bool ok = cost_model_init(&scratch, spec, k, &m) && !diags_failed(&scratch);
  diags_free(&scratch);
  if (!ok) {
    *why = "the cost model lacks a hardware figure or overflows";
    return false;
  }
  double rho = spec->search.headroom.v > 0 && spec->search.headroom.v < 1 ? spec->search.headroom.v : 0.9;
  PlanEstimates e = {0};
  ok = agg ? est_agg(&m, rho, both, &e, why) : est_disagg(&m, rho, pre, dec, &e, why);
  if (!ok) return false;
  if (!isfinite(e.ttft_ms) || !isfinite(e.tpot_ms) || !isfinite(e.throughput_tok_s) ||
      e.ttft_ms < 0 || e.tpot_ms < 0 || e.throughput_tok_s < 0) {
    *why = "the cost model gives no finite figure for this layout";
    return false;
  }
  /* Goodput counts the served tokens only when both SLOs hold (the
   * search's rule, with the same tolerance for rounding). */
  bool meets = e.ttft_ms <= m.slo_ttft * 1e3 * (1 + 1e-9) && e.tpot_ms <= m.slo_tpot * 1e3 * (1 + 1e-9);
  e.goodput_tok_s_per_gpu = meets && L->world_size > 0 ? e.throughput_tok_s / (double)L->world_size : 0.0;
  e.has = true;
  *est = e;
  return true;
}

/* ---- the whole pipeline --------------------------------------------------- */

int compile_spec_to_plan(const Spec *spec, const CompileOpts *o, Diags *d, char **what,
                         int *werr) {
  *what = NULL;
  *werr = 0;
  Layout *L = compile_layout(spec, d);
  if (!L) return RP_EXIT_INPUT;
  PlanEstimates est = {0};
  const char *why = NULL;
  if (o->estimates) est = *o->estimates;
  else compile_estimates(spec, L, o->consts, &est, &why);
  int rc = RP_EXIT_OK;
  *werr = emit_plan_files(d, spec, L, &est, o->out, o->split_dir, what);
  if (*werr) rc = RP_EXIT_USAGE;
  lay_free(L);
  return rc;
}

