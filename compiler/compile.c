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
#include "engines.h"
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
  int64_t slots = model_expert_slots(&spec->model);
  for (size_t p = 0; ok && p < L->npools; p++) {
    HookExpertMap m;
    ok = hook_run_expert_placement(&hs.env, &hs.ctx, p, &m, d);
    if (ok && spec->model.moe.redundant_experts.v > 0 && m.slots_per_rank * m.ep != slots) {
      Diag *g = diag_at(d, DIAG_E0612, spec->deployment.hooks.expert_placement.loc,
                        "the expert_placement hook placed %lld replicas in pool `%s`, but the model has %lld "
                        "expert slots (experts plus model.moe.redundant_experts)",
                        (long long)(m.slots_per_rank * m.ep), L->pools[p].name, (long long)slots);
      diag_help(g, "place exactly %lld replicas, or change model.moe.redundant_experts to match the hook",
                (long long)slots);
      ok = false;
    }
    if (ok) lay_set_expert_map(L, p, m.experts, m.ep, m.slots_per_rank, m.offsets, m.ranks);
    hook_expert_map_free(&m);
  }
  hook_session_close(&hs);
  return ok && !diags_failed(d);
}

/* The starting map of a model with redundant experts and no
 * expert_placement hook: slot s (ep rank s / slots_per_rank) holds expert
 * s mod experts, so the extra slots replicate the first experts; the
 * engine's load balancer moves replicas at run time (docs/memory.md,
 * "Redundant experts"). */
static void default_expert_map(const Spec *spec, Layout *L) {
  int64_t E = spec->model.moe.experts.v, S = model_expert_slots(&spec->model);
  if (spec->deployment.hooks.expert_placement.set || spec->model.moe.redundant_experts.v <= 0 || E <= 0) return;
  int64_t *offsets = rp_calloc((size_t)E + 1, sizeof *offsets);
  int64_t *ranks = rp_calloc((size_t)S, sizeof *ranks);
  for (size_t p = 0; p < L->npools; p++) {
    int64_t ep = L->pools[p].size[CO_EP], k = S / ep, n = 0;
    for (int64_t e = 0; e < E; e++) {
      offsets[e] = n;
      for (int64_t s = e; s < S; s += E) ranks[n++] = s / k;
    }
    offsets[E] = n;
    lay_set_expert_map(L, p, E, ep, k, offsets, ranks);
  }
  free(offsets);
  free(ranks);
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
  if (L && !diags_failed(d) && place(d, spec, L)) lay_place_check_engine(d, spec, L);
  if (L && !diags_failed(d)) hook_experts(d, spec, L);
  if (L && !diags_failed(d)) default_expert_map(spec, L);
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

/* Evaluates one instance of each pool with the cost model's instance
 * evaluation, B_memory from the pool's memory ledger: the figures the
 * search computes for the same layout. */
static bool est_instance(const CostModel *m, double rho, const LayPool *P, CostInstance *in,
                         const char **why) {
  CostLayout l = cost_layout_of(P);
  int64_t bmem = P->role == ROLE_PREFILL ? 0 : P->requests_fit_instance;
  if (P->role != ROLE_PREFILL && bmem < 1) {
    *why = "not one request fits the pool's KV memory";
    return false;
  }
  if (!cost_instance_eval(m, P->role, &l, bmem, rho, NULL, in)) {
    *why = "the cost model cannot evaluate the pool";
    return false;
  }
  return true;
}

_Static_assert((int)COST_COMM__N == (int)PEC__COUNT, "the plan names every comm kind");

static PlanPhaseEst est_phase(const CostPhase *c) {
  PlanPhaseEst e = {c->time * 1e3, c->tok_s_gpu, c->compute * 1e3, c->hbm * 1e3,
                    c->overhead * 1e3, {0}};
  for (int i = 0; i < PEC__COUNT; i++) e.comm_ms[i] = c->comm[i] * 1e3;
  return e;
}

/* The pools the estimates cover: one `both` pool (*agg), or one prefill
 * pool and one decode pool, in pl; false for any other set. */
static bool est_pools_of(const Layout *L, const LayPool *pl[2], bool *agg) {
  const LayPool *both = NULL, *pre = NULL, *dec = NULL;
  size_t nboth = 0, npre = 0, ndec = 0;
  for (size_t p = 0; p < L->npools; p++) {
    const LayPool *P = &L->pools[p];
    if (P->role == ROLE_BOTH) both = P, nboth++;
    else if (P->role == ROLE_PREFILL) pre = P, npre++;
    else if (P->role == ROLE_DECODE) dec = P, ndec++;
  }
  *agg = nboth == 1 && npre == 0 && ndec == 0;
  pl[0] = *agg ? both : pre;
  pl[1] = dec;
  return *agg || (nboth == 0 && npre == 1 && ndec == 1);
}

/* The per-phase figures of each pool (docs/plan.md, "estimates"). */
static bool est_pools(const CostModel *m, const Layout *L, const LayPool *const *pl, size_t n,
                      const CostInstance *inst, const CostDeployEval *ev, PlanEstimates *e) {
  for (size_t i = 0; i < n; i++) {
    CostPoolPhases ph;
    if (!cost_pool_phases(m, &inst[i], ev, &ph)) return false;
    PlanPoolEst *o = &e->pools[i];
    o->pool = (size_t)(pl[i] - L->pools);
    o->has_prefill = ph.has_prefill;
    o->has_decode = ph.has_decode;
    o->prefill = est_phase(&ph.prefill);
    o->decode = est_phase(&ph.decode);
    o->batch = ph.batch_used;
    o->max_batch = ph.max_batch;
    o->graph_bs = cost_graph_bs(m, &inst[i].lay);
    o->eager_ms = cost_eager_issue(m, &inst[i].lay) * 1e3;
  }
  e->npools = n;
  if (n == 2 && e->pools[0].pool > e->pools[1].pool) { /* the plan's pool order */
    PlanPoolEst t = e->pools[0];
    e->pools[0] = e->pools[1];
    e->pools[1] = t;
  }
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
  const LayPool *pl[2];
  bool agg;
  if (!est_pools_of(L, pl, &agg)) {
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
  /* The deployment's figures come from the one evaluation the search
   * runs too (cost_deploy_eval): a search row compiles to its figures. */
  CostInstance inst[2];
  CostDeploy dp = {agg ? 1 : 2, {&inst[0], &inst[1]}, {0, 0}, cost_headroom(spec)};
  for (size_t i = 0; i < dp.npools; i++) {
    if (!est_instance(&m, dp.rho, pl[i], &inst[i], why)) return false;
    dp.replicas[i] = pl[i]->replicas;
  }
  CostDeployEval ev;
  if (!cost_deploy_eval(&m, &dp, &ev)) {
    *why = "the cost model cannot evaluate the deployment";
    return false;
  }
  PlanEstimates e = {0};
  e.ttft_ms = ev.ttft * 1e3;
  e.tpot_ms = ev.tpot * 1e3;
  e.throughput_tok_s = ev.tok_s;
  if (!isfinite(e.ttft_ms) || !isfinite(e.tpot_ms) || !isfinite(e.throughput_tok_s) ||
      e.ttft_ms < 0 || e.tpot_ms < 0 || e.throughput_tok_s < 0) {
    *why = "the cost model gives no finite figure for this layout";
    return false;
  }
  e.goodput_tok_s_per_gpu = ev.goodput_gpu;
  if (!est_pools(&m, L, pl, dp.npools, inst, &ev, &e)) {
    *why = "the cost model cannot evaluate a pool's phases";
    return false;
  }
  e.has = true;
  *est = e;
  return true;
}

Diag *compile_load_check(Diags *d, const Spec *spec, double served, const char *who,
                         const char *help) {
  double rate = spec->workload.rate.v;
  if (!spec->workload.rate.set || !(rate > 0) || !(served < rate * (1 - 1e-9))) return NULL;
  /* `search -o` compiles its winner after its own W0502 said this */
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == DIAG_W0502) return NULL;
  Diag *g = diag_at(d, DIAG_W0502, spec->workload.rate.loc,
                    "%s serves %.2f of the %g req/s offered (workload.rate)", who, served, rate);
  diag_help(g, "%s", help ? help : "add replicas, or let `rankplan search` size the pools for the load");
  return g;
}

/* A TensorRT-LLM pool decoding more requests per attention dp rank than
 * every batch of which has a graph (engine_trtllm_graph_cover): its steps
 * at the other batches run without one, which is not priced
 * (docs/cost-model.md, "Eager decode"). */
static void trtllm_graph_check(Diags *d, const Spec *spec, const LayPool *P, int64_t per, int64_t pp) {
  int64_t cover = engine_trtllm_graph_cover(spec);
  if (per <= cover) return;
  bool set = spec->serving.cuda_graph_max_bs.set;
  char what[128];
  if (set) snprintf(what, sizeof what, "more than the %lld TensorRT-LLM's CUDA graphs cover (cuda_graph_max_bs)",
                    (long long)cover);
  else snprintf(what, sizeof what, "where TensorRT-LLM's default CUDA graphs cover the batches up to %lld, then 64 "
                "and 128 only", (long long)cover);
  Diag *g = diag_at(d, DIAG_W0503, P->loc,
                    "pool `%s` decodes %lld requests per attention dp rank, %s: %s run without graphs, which the "
                    "plan does not price",
                    P->name, (long long)per, what, set ? "those steps" : "steps at other batches");
  /* --max_batch_size holds each attention dp rank's requests (engine_limits_per_dp), pp micro-batches of them */
  CkState st = {true};
  int64_t cap = ckm(&st, cover, pp);
  diag_help(g, "capture the batch with `serving.cuda_graph_max_bs: %lld` (the launch files write it padded, so "
               "every batch up to it runs a graph), or cap the running requests with `serving.max_num_seqs: %lld`",
            (long long)per, (long long)(st.ok ? cap : INT64_MAX));
}

void compile_graph_check(Diags *d, const Spec *spec, const Layout *L, const PlanEstimates *e) {
  for (size_t i = 0; i < e->npools; i++) {
    const PlanPoolEst *o = &e->pools[i];
    const LayPool *P = &L->pools[o->pool];
    int64_t pp = P->size[CO_PP], dp = P->size[CO_DP];
    int64_t per = cost_sched_batch(o->batch, pp, dp);
    if (o->has_decode && (Engine)spec->deployment.engine.v == ENGINE_TRTLLM)
      trtllm_graph_check(d, spec, P, per, pp);
    if (!o->has_decode || o->graph_bs <= 0 || per <= o->graph_bs) continue;
    Diag *g = diag_at(d, DIAG_W0503, P->loc,
                      "pool `%s` decodes %lld requests per scheduler, more than the %lld "
                      "SGLang's CUDA graphs cover (cuda_graph_max_bs): those steps run eagerly, "
                      "and issuing one step's kernels takes %.1f ms of CPU time (the step: %.1f ms)",
                      P->name, (long long)per, (long long)o->graph_bs, o->eager_ms,
                      o->decode.time_ms);
    /* serving.max_num_seqs holds every scheduler of the instance where
     * SGLang shares it out (attention dp), one where each --dp-size
     * replica takes it whole (engine_limits_per_dp) */
    CkState st = {true};
    int64_t cap = ckm(&st, ckm(&st, o->graph_bs, engine_limits_per_dp(spec) ? 1 : dp), pp);
    diag_help(g, "capture the batch with `serving.cuda_graph_max_bs: %lld` (SGLang's default fraction reserves "
                 "2 MiB a request for it), or cap the running requests with `serving.max_num_seqs: %lld`",
              (long long)per, (long long)(st.ok ? cap : INT64_MAX));
  }
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
  if (compile_estimates(spec, L, o->consts, &est, &why)) {
    if (est.goodput_tok_s_per_gpu > 0)
      compile_load_check(d, spec, est.throughput_tok_s / (double)spec->workload.output_tokens.v,
                         "the deployment", NULL);
    compile_graph_check(d, spec, L, &est);
  }
  int rc = RP_EXIT_OK;
  *werr = emit_plan_files(d, spec, L, &est, o->out, o->split_dir, what);
  if (*werr) rc = RP_EXIT_USAGE;
  lay_free(L);
  return rc;
}

