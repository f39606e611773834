/*
 * search.c: SLO-aware layout search and xPyD pool sizing.
 *
 * Input IR: a Spec without parse errors and the cost constants.
 * Output IR: SearchOut (search.h): ranked deployments, each with its pools'
 * layouts and instance counts, predicted TTFT, TPOT, throughput, goodput
 * per GPU, the binding constraint and whether it is on the Pareto frontier.
 *
 * The search runs in three steps.
 *  1. For each pool role (prefill, decode, both) it enumerates every
 *     tp/pp/cp/dp/ep/etp/dcp within the GPU budget in a fixed order, keeps
 *     the layouts that pass the rules (search_layout_valid) and fit memory,
 *     and evaluates each with the cost model: a prefill layout by its
 *     latency and tokens/s per GPU, a decode layout by the largest batch
 *     that meets the TPOT SLO and fits memory, an aggregated layout by both
 *     at once (decode steps stall while the instance runs prefills).
 *  2. Disaggregated: the best prefill and decode layouts are paired; for
 *     each pair the prefill utilisation is capped by the headroom rho and
 *     by the TTFT SLO (M/D/1 queueing), the xPyD ratio comes from
 *     cost_xpyd_ratio, and an integer search over (x, y) picks the
 *     instance counts with the best goodput per GPU that fit the cluster.
 *  3. Everything is ranked (goodput/GPU, then TTFT, TPOT, layout text) and
 *     the Pareto frontier of goodput/GPU against TTFT and TPOT is marked.
 * Every step counts evaluations against the named budget
 * (SearchOptions.max_candidates); the order never depends on anything but
 * the inputs, so the output is byte-identical run to run.
 */
#include "search.h"
#include "engines.h"

#include <jansson.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "layout.h"
#include "memory.h"
#include "model.h"
#include "validate.h"

const char *search_binding_name(SearchBinding b) {
  switch (b) {
  case BIND_MEMORY: return "memory";
  case BIND_TPOT: return "tpot";
  case BIND_BATCH_CAP: return "batch-cap";
  case BIND_GRAPHS: return "cuda-graphs";
  case BIND_LOAD: return "load";
  case BIND_TTFT: return "ttft";
  case BIND_HEADROOM: return "headroom";
  case BIND_GPUS: return "gpus";
  case BIND_NODES: return "nodes";
  case BIND_SLO_MISS: return "slo-miss";
  }
  return "?";
}

const char *search_binding_words(SearchBinding b) {
  switch (b) {
  case BIND_MEMORY: return "KV cache full (--gpu-memory-utilization, --max-model-len)";
  case BIND_TPOT: return "a larger decode batch would miss the TPOT SLO";
  case BIND_BATCH_CAP:
    return "the batch cap per attention data parallel rank (--max-num-seqs)";
  case BIND_GRAPHS:
    return "the engine's CUDA-graph batch (--cuda-graph-max-bs): eager decode beyond it serves less";
  case BIND_LOAD: return "the offered load (workload.rate), served with room to spare";
  case BIND_TTFT: return "prefill queueing at the TTFT SLO";
  case BIND_HEADROOM: return "prefill utilisation at search.headroom";
  case BIND_GPUS: return "the GPU budget (--gpus, search.gpu_budget)";
  case BIND_NODES:
    return "the nodes: the instances the load needs fit the GPU budget but not the engine's packing on the "
           "cluster's nodes (hardware.nodes, hardware.gpus_per_node)";
  case BIND_SLO_MISS: return "an SLO missed at any load";
  }
  return "?";
}

/* ---- rules ---------------------------------------------------------------- */

bool search_layout_valid(const CostModel *m, const CostLayout *l, PoolRole role,
                         bool tp_across_domain, const char **why) {
  const char *w = NULL;
  if (m->heads % l->tp) w = "tensor parallel size does not divide the attention heads";
  else if (m->kind != ATTN_MLA && m->kv_heads % l->tp && l->tp % m->kv_heads)
    w = "tensor parallel size and the KV heads do not divide one another";
  else if (m->hidden % l->tp) w = "tensor parallel size does not divide hidden_size";
  else if (m->n_dense > 0 && m->dense_ffn_size > 0 && m->dense_ffn_size % l->tp)
    w = "tensor parallel size does not divide the FFN intermediate_size";
  else if (!tp_across_domain && l->tp > m->domain) w = "tensor parallel group wider than the NVLink (scale-up) domain";
  else if (l->pp > m->layers) w = "more pipeline stages than layers";
  else if (l->cp > 1 && role != ROLE_PREFILL) w = "context parallelism only in prefill pools";
  else if (l->cp > 1 && m->kind == ATTN_MLA) w = "MLA attention cannot split heads for context parallelism";
  else if (l->cp > 1 && m->heads % (l->tp * l->cp)) w = "tp * cp does not divide the attention heads";
  else if (l->dcp > 1 && role == ROLE_PREFILL) w = "decode context parallelism only in decode pools";
  else if (l->dcp > 1 && m->heads % l->dcp) w = "decode context parallel size does not divide the attention heads";
  else if (l->dcp > 1 && m->kind == ATTN_MLA && (l->tp % l->dcp)) w = "decode context parallel size does not divide tp (MLA)";
  else if (l->dcp > 1 && m->kind != ATTN_MLA &&
           (l->tp < m->kv_heads || (l->tp / m->kv_heads) % l->dcp))
    w = "decode context parallel size does not divide tp / KV heads";
  else if (!m->moe && (l->ep > 1 || l->etp > 1)) w = "expert parallelism needs a MoE model";
  else if (m->moe && (m->expert_slots % l->ep || l->ep > m->expert_slots))
    w = "expert parallel size does not divide the expert slots";
  else if (m->moe && m->expert_slots / l->ep > m->experts)
    w = "an ep rank would hold a redundant expert twice";
  else if (m->moe && m->expert_ffn_size % l->etp) w = "expert tensor parallel size does not divide expert_intermediate_size";
  else if (m->moe && l->etp > 1 && m->expert_ffn_size / l->etp < SEARCH_MIN_EXPERT_COLS)
    w = "expert GEMMs narrower than one 128-wide tile (W0203)";
  else if (m->moe && (l->tp * l->cp * l->dp) % (l->ep * l->etp))
    w = "ep * etp does not divide the instance's tp * cp * attention data parallel ranks";
  if (why) *why = w;
  return w == NULL;
}

/* ---- per-role evaluation ---------------------------------------------------- */

typedef struct {
  CostLayout lay;
  int64_t gpus;
  CostInstance inst;    /* the cost model's evaluation of one instance */
  SearchBinding binding;
  double score;         /* tokens/s per GPU used to keep the best */
} RoleEval;

typedef RP_VEC(RoleEval) RoleVec;

/* One pp stage's memory verdict, cached per tp/cp/dp/ep/etp/dcp. Besides
 * that layout and the role, a stage's ledger depends only on its layer
 * count, how many of its layers are dense, and its place: first
 * (embedding), last (lm_head, logits), both (pp 1) or in between (and
 * with pp > 1 on the pipeline's communicator, which every place but "both"
 * implies). */
typedef struct {
  int64_t gen;       /* valid when equal to Ctx.stage_gen */
  bool fits;         /* weights fit and one max_model_len request fits */
  int64_t requests;  /* requests_fit_instance */
} StageMem;

/* Memory verdicts of prefill layouts with cp 1, for the aggregated role:
 * prefill and aggregated pools have the same ledger (both run whole
 * prompts; docs/memory.md), so an aggregated layout with dcp 1 reuses the
 * prefill verdict of the same tp/pp/dp/ep/etp. Open addressing, keyed by
 * the layout; bmem -1 records a layout that fails. */
typedef struct {
  int64_t tp, pp, dp, ep, etp, bmem;
  bool used;
} MemSlot;

typedef struct {
  MemSlot *slots;
  size_t cap, len;
} MemMap;

static size_t memmap_hash(const CostLayout *l, size_t cap) {
  uint64_t h = 1469598103934665603ULL;
  int64_t v[5] = {l->tp, l->pp, l->dp, l->ep, l->etp};
  for (int i = 0; i < 5; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ULL;
  return (size_t)(h & (cap - 1));
}

static MemSlot *memmap_find(const MemMap *mm, const CostLayout *l) {
  if (!mm->cap) return NULL;
  for (size_t i = memmap_hash(l, mm->cap);; i = (i + 1) & (mm->cap - 1)) {
    MemSlot *s = &mm->slots[i];
    if (!s->used) return NULL;
    if (s->tp == l->tp && s->pp == l->pp && s->dp == l->dp && s->ep == l->ep && s->etp == l->etp)
      return s;
  }
}

static void memmap_put(MemMap *mm, const CostLayout *l, int64_t bmem) {
  if ((mm->len + 1) * 2 > mm->cap) {
    MemMap g = {rp_calloc(mm->cap ? mm->cap * 2 : 1024, sizeof(MemSlot)), mm->cap ? mm->cap * 2 : 1024, 0};
    for (size_t i = 0; i < mm->cap; i++)
      if (mm->slots[i].used) {
        CostLayout k = {mm->slots[i].tp, mm->slots[i].pp, 1, mm->slots[i].dp, mm->slots[i].ep,
                        mm->slots[i].etp, 1};
        memmap_put(&g, &k, mm->slots[i].bmem);
      }
    free(mm->slots);
    *mm = g;
  }
  size_t i = memmap_hash(l, mm->cap);
  while (mm->slots[i].used) i = (i + 1) & (mm->cap - 1);
  mm->slots[i] = (MemSlot){l->tp, l->pp, l->dp, l->ep, l->etp, bmem, true};
  mm->len++;
}

typedef struct {
  const CostModel *m;
  const Spec *s;
  MemMap prefill_mem;
  /* Ledgers of the stages seen for the current tp/cp/dp/ep/etp/dcp (pp
   * runs innermost, so every pp of one layout shares them), indexed by
   * (layers, dense layers, place); a new generation empties the table. */
  StageMem *stages;
  int64_t stage_gen;
  int64_t guess; /* the last batch answer within this generation, 0: none */
  int64_t G;
  double rho;
  int64_t max;
  int64_t evals;
  int64_t steps, max_steps; /* enumeration steps, valid or not (ctx_step) */
  bool hit;
  bool strict;    /* SearchOptions.strict: validate_pool on every layout, no prefilter */
  LayWeights lw;  /* the generic engine's partition weights, computed once */
  /* The engine's layer partition per pp, computed on first use: it depends
   * only on the engine, the layer count, pp and lw, all fixed for one
   * search (NULL: not computed yet; pp up to SEARCH_PART_CACHE_PP). */
  int64_t **part_by_pp;
  bool *part_ok;
  FILE *progress;
  int64_t gpn;    /* GPUs per node (search.whole_nodes, separate_nodes) */
  SearchPack pack; /* the nodes an engine's instances pack on (search_space.h) */
  SearchRejects *rej; /* why candidates were rejected (search_space.h) */
  HookSession *filter; /* the spec's filter hook, NULL when none */
  EngineCaps *caps;    /* deployment.engine's catalog entry, NULL: generic */
  Diags *d;
  bool failed;    /* the filter hook failed (reported): stop */
} Ctx;

/* Progress line (stderr on a terminal only): the phase and the count,
 * rewritten in place. */
static void ctx_progress(Ctx *c, const char *phase) {
  if (!c->progress) return;
  fprintf(c->progress, "\rsearch: %s, %lld candidates evaluated\033[K", phase, (long long)c->evals);
  fflush(c->progress);
}

static bool ctx_spend(Ctx *c, int64_t n) {
  if (c->evals + n > c->max) {
    c->hit = true;
    return false;
  }
  c->evals += n;
  if (c->progress && (c->evals & 0x3fff) < n) ctx_progress(c, "searching");
  return true;
}

/* One step of the layout enumeration, whether or not it yields a layout:
 * the loops of search__role count against the budget too, so a space where
 * few sizes are valid (a prime expert count on a large cluster) ends. */
static bool ctx_step(Ctx *c) {
  if (c->failed) return false;
  if (++c->steps > c->max_steps) {
    c->hit = true;
    return false;
  }
  return true;
}

/* The binding constraint of a decode or both instance's batch. */
static SearchBinding batch_binding(const CostInstance *in) {
  if (in->batch == in->bmem) return BIND_MEMORY;
  if (in->batch == in->cap) return BIND_BATCH_CAP;
  return in->graphs > 0 && in->batch == in->graphs ? BIND_GRAPHS : BIND_TPOT;
}

/* Why the cost model or the memory ledger dropped a layout, in the words
 * of the engine flags that set each figure (docs/cost-model.md). */
typedef enum { REJ_KV_MEM, REJ_TTFT, REJ_TPOT, REJ_MEM, REJ__COUNT } RejectTerm;
static const char *const reject_terms[] = {
    [REJ_KV_MEM] = ("the weights fit but not one max_model_len request's KV cache "
                    "(--max-model-len, --gpu-memory-utilization)"),
    [REJ_TTFT] = "one prompt's prefill alone takes longer than the TTFT SLO",
    [REJ_TPOT] = "a decode step at batch 1 already misses the TPOT SLO",
    [REJ_MEM] = ("a pipeline stage's weights or one max_model_len request do not fit GPU memory "
                 "(--gpu-memory-utilization, --max-model-len)"),
};

static void search__reject(Ctx *c, PoolRole role, const CostLayout *l, RejectTerm t) {
  search_rejects_add(c->rej, reject_terms[t], role, l);
}

/* Runs the spec's filter hook on an evaluated layout (ctx.candidate: its
 * role, sizes and figures); true when it keeps it. A hook failure (already
 * reported) stops the search. */
static bool search__filter(Ctx *c, PoolRole role, const RoleEval *e) {
  if (!c->filter) return true;
  const CostLayout *l = &e->lay;
  double lat = role == ROLE_PREFILL ? e->inst.pre.latency : e->inst.tpot;
  HookKV kv[] = {{"tp", (double)l->tp}, {"pp", (double)l->pp}, {"cp", (double)l->cp},
                 {"dp", (double)l->dp}, {"ep", (double)l->ep}, {"etp", (double)l->etp},
                 {"dcp", (double)l->dcp}, {"gpus", (double)e->gpus},
                 {"batch", role == ROLE_PREFILL ? 0.0 : (double)e->inst.batch},
                 {"latency_ms", lat * 1e3}, {"tok_s_per_gpu", e->score}};
  bool keep = false;
  char *why = NULL;
  if (!hook_run_filter(&c->filter->env, &c->filter->ctx, role_name(role), kv, RP_ARRAY_LEN(kv),
                       &keep, &why, c->d)) {
    c->failed = true;
    return false;
  }
  if (!keep) {
    char *w = rp_sprintf("the filter hook: %s", why ? why : "dropped (returned false)");
    search_rejects_add(c->rej, w, role, l);
    free(w);
  }
  free(why);
  return keep;
}

static void search__keep(Ctx *c, PoolRole role, const RoleEval *e, RoleVec *out) {
  if (search__filter(c, role, e)) rp_vec_push(out, *e);
}

/* Evaluates one valid layout of a role with the cost model's instance
 * evaluation (cost_instance_eval, which `compile` runs too); bmem is
 * B_memory from the ledger (decode and aggregated). Layouts that cannot
 * serve (no request fits, the SLO is missed at batch 1) are dropped. */
/* A prefill whose latency, with the time outside the GPU, already reaches
 * the TTFT SLO leaves its queue nothing: the layout cannot meet it. */
static bool search__prefill_misses_ttft(const CostModel *m, const CostInstance *in) {
  return in->pre.latency + m->k.request_overhead_s >= m->slo_ttft;
}

static void search__eval_layout(Ctx *c, PoolRole role, const CostLayout *l, int64_t bmem,
                                RoleVec *out) {
  const CostModel *m = c->m;
  RoleEval e;
  memset(&e, 0, sizeof e);
  e.lay = *l;
  e.gpus = cost_layout_gpus(l);
  if (role == ROLE_PREFILL) {
    /* the memory ledger has admitted one max_context request per
     * attention replica (search__rules_pass) */
    if (!cost_instance_eval(m, role, l, 0, c->rho, NULL, &e.inst)) return;
    if (search__prefill_misses_ttft(m, &e.inst)) {
      search__reject(c, role, l, REJ_TTFT);
      return;
    }
    e.score = e.inst.pre.tok_s_gpu;
    search__keep(c, role, &e, out);
    return;
  }
  if (bmem < 1) {
      search__reject(c, role, l, REJ_KV_MEM);
      return;
    }
  bool ok = cost_instance_eval(m, role, l, bmem, c->rho, &c->guess, &e.inst);
  if (!ok) return;
  if (!e.inst.slo_ok) {
      search__reject(c, role, l, REJ_TPOT);
      return;
    }
  if (role == ROLE_BOTH && search__prefill_misses_ttft(m, &e.inst)) {
      search__reject(c, role, l, REJ_TTFT);
      return;
    }
  e.binding = batch_binding(&e.inst);
  if (role == ROLE_DECODE) {
    e.score = e.inst.dec_tok_s / (double)e.gpus;
  } else {
    if (e.inst.ttft_bound && e.binding == BIND_TPOT) e.binding = BIND_TTFT;
    e.score = e.inst.rho * e.inst.rcap * (double)m->tout / (double)e.gpus;
  }
  search__keep(c, role, &e, out);
}

/* A PoolSpec of one layout, every value at position `at`. */
static void pool_spec_fill(PoolSpec *p, const char *name, PoolRole role, const CostLayout *l,
                           int64_t replicas, SrcLoc at) {
  memset(p, 0, sizeof *p);
  p->loc = at;
  p->name = (SStr){name, at, true};
  p->role = (SEnum){(int)role, at, true};
  p->replicas = (SInt){replicas, at, true};
  p->tp = (SInt){l->tp, at, true};
  p->pp = (SInt){l->pp, at, true};
  p->cp = (SInt){l->cp, at, true};
  p->dp = (SInt){l->dp, at, true};
  p->ep = (SInt){l->ep, at, true};
  p->etp = (SInt){l->etp, at, true};
  p->dcp = (SInt){l->dcp, at, true};
  p->layer_partition.loc = at;
}

static void search__pool_of(const Ctx *c, PoolRole role, const CostLayout *l, PoolSpec *p) {
  pool_spec_fill(p, "candidate", role, l, 1, c->s->deployment.loc);
}

/* The model stage's rules (validate_pool) on a candidate, with a scratch
 * Diags: the search proposes only layouts `rankplan compile` accepts. */
static bool search__validate(const Ctx *c, PoolRole role, const CostLayout *l) {
  PoolSpec p;
  search__pool_of(c, role, l, &p);
  Diags d;
  diags_init(&d);
  validate_pool(&d, c->s, &p);
  bool ok = !diags_failed(&d);
  diags_free(&d);
  return ok;
}

/* The engine's layer partition and the memory rules of the model stage on
 * a candidate: every pp stage's weights fit and its KV holds one
 * max_context request (the rules validate_pool applies to the same
 * ledger). *bmem is B_memory from the ledger (docs/memory.md): the fewest
 * requests any pp stage holds, over the instance's dp ranks.
 * Stages whose ledger must be equal (StageMem says which) are computed once per
 * tp/cp/dp/ep/etp/dcp: pp runs innermost, and across pp = 1 .. layers the
 * stages repeat, so a candidate's cost does not grow with pp. The rest of validate_pool (the
 * divisibility rules, which search_layout_valid mirrors) runs on the
 * shortlisted layouts only (search__shortlist), or on every layout in
 * strict mode; the unit tests check both modes give the same output. (A
 * cheaper prefilter on the cost model's weight bytes is not used: its
 * pipeline split differs from the engine's, and the unit test caught it
 * dropping layouts the ledger accepts.) */
/* The layer partition for l->pp into part (l->pp entries), from the
 * per-pp cache where pp is small enough to keep. */
static bool search__partition(Ctx *c, Diags *d, const CostLayout *l, const PoolSpec *p,
                              int64_t *part) {
  Engine e = (Engine)c->s->deployment.engine.v;
  int64_t pp = l->pp;
  if (pp > SEARCH_PART_CACHE_PP || pp > c->m->layers || p->layer_partition.set)
    return lay_partition(d, e, c->m->layers, pp, p, &c->lw, part);
  if (!c->part_by_pp[pp]) {
    c->part_by_pp[pp] = rp_malloc((size_t)pp * sizeof **c->part_by_pp);
    c->part_ok[pp] = lay_partition(d, e, c->m->layers, pp, p, &c->lw, c->part_by_pp[pp]);
  }
  memcpy(part, c->part_by_pp[pp], (size_t)pp * sizeof *part);
  return c->part_ok[pp];
}

static bool search__rules_pass(Ctx *c, PoolRole role, const CostLayout *l, int64_t *bmem) {
  PoolSpec p;
  search__pool_of(c, role, l, &p);
  Diags d;
  diags_init(&d);
  *bmem = INT64_MAX;
  int64_t *part = rp_malloc((size_t)l->pp * sizeof *part);
  bool ok = search__partition(c, &d, l, &p, part);
  int64_t first = 0;
  for (int64_t st = 0; ok && st < l->pp; first += part[st], st++) {
    int64_t n = part[st];
    int64_t nd = first < c->m->n_dense ? (c->m->n_dense - first < n ? c->m->n_dense - first : n) : 0;
    int64_t place = l->pp == 1 ? 3 : st == 0 ? 0 : st == l->pp - 1 ? 1 : 2;
    RP_ASSERT(n >= 0 && n <= c->m->layers && nd >= 0 && nd <= c->m->n_dense);
    StageMem *e = &c->stages[(n * (c->m->n_dense + 1) + nd) * 4 + place];
    if (e->gen != c->stage_gen) {
      MemLedger led;
      e->gen = c->stage_gen;
      e->fits = mem_ledger(c->s, &p, st, part, &led, &d) && led.kv_pool >= 0 && led.max_context_fits;
      e->requests = e->fits ? led.requests_fit_instance : 0;
    }
    if (!e->fits) ok = false;
    else if (e->requests < *bmem) *bmem = e->requests;
  }
  free(part);
  diags_free(&d);
  if (ok && c->strict) ok = search__validate(c, role, l);
  return ok;
}

/* The engine's prompt budget (engine_prompt_budget): a prefill-running
 * layout whose cp ranks would each hold more of the workload's prompt. */
static const char *search__prompt_refusal(const Ctx *c, PoolRole role, const CostLayout *l, char *buf, size_t n) {
  int64_t budget = engine_prompt_budget(c->s), in = c->s->workload.input_tokens.v;
  if (role == ROLE_DECODE || budget <= 0 || in <= budget * l->cp) return NULL;
  snprintf(buf, n, "engine %s: a %lld-token prompt over cp %lld exceeds max_num_tokens (%lld) without chunked "
           "prefill (E0713)", engine_name((Engine)c->s->deployment.engine.v), (long long)in, (long long)l->cp,
           (long long)budget);
  return buf;
}

/* The engine's fp8 expert blocks (engine_fp8_expert_block). */
static const char *search__fp8_refusal(const Ctx *c, const CostLayout *l, char *buf, size_t n) {
  int64_t block = engine_fp8_expert_block(c->s), w = c->m->expert_ffn_size;
  if (block <= 0 || l->etp <= 0 || w % l->etp || (w / l->etp) % block == 0) return NULL;
  snprintf(buf, n, "engine %s: expert width %lld over etp %lld is not whole %lld-wide fp8 blocks (E0221)",
           engine_name((Engine)c->s->deployment.engine.v), (long long)w, (long long)l->etp, (long long)block);
  return buf;
}

/* SGLang's chunked-prefill share per attention dp rank against its page
 * (engine_sglang_chunk_share). */
static const char *search__chunk_refusal(const Ctx *c, PoolRole role, const CostLayout *l, char *buf, size_t n) {
  int64_t share = engine_sglang_chunk_share(c->s, role, l->dp);
  if (!share) return NULL;
  snprintf(buf, n, "engine sglang: a chunked-prefill share of %lld tokens per dp rank is not a multiple of the "
           "%lld-token page (E0717)", (long long)share, (long long)engine_kv_block(c->s));
  return buf;
}

/* Whether layout l of role is in the search space, before any rule,
 * memory ledger or cost evaluation: the spec's constraints first
 * (search_space.h), then the rules the search needs (search_layout_valid).
 * A rejection is tallied with the constraint or rule that decided it. */
static bool search__admit(Ctx *c, PoolRole role, const CostLayout *l) {
  char buf[160];
  const char *why = search_space_reject(&c->s->search, role, l, cost_layout_gpus(l), c->gpn, buf,
                                        sizeof buf);
  /* The engine's capability rules (what deployment.engine can run, per
   * role; engines.h, the rules `check` applies): after the spec's
   * constraints, before the model's rules, so the tally names the engine
   * when it is the engine that refuses. */
  if (!why && c->caps) {
    int64_t v[ED__COUNT] = {l->tp, l->pp, l->dp, l->ep, l->etp, l->cp, l->dcp};
    EngineDim dim = ED_TP;
    const char *e = engine_layout_refusal(c->caps, role, v, c->s->model.moe.present, &dim);
    if (e) {
      snprintf(buf, sizeof buf, "engine %s %s, `%s` of %s pools: %s", engine_name(c->caps->engine),
               c->caps->version, engine_dim_name(dim), role_name(role), e);
      why = buf;
    }
  }
  if (!why)
    why = search_pack_reject(&c->pack, engine_name((Engine)c->s->deployment.engine.v), cost_layout_gpus(l), buf,
                             sizeof buf);
  if (!why && (Engine)c->s->deployment.engine.v == ENGINE_VLLM) {
    int64_t v[ED__COUNT] = {l->tp, l->pp, l->dp, l->ep, l->etp, l->cp, l->dcp};
    const char *e = engine_vllm_nodes_refusal(v, c->gpn, c->s->deployment.order.set ? c->s->deployment.order.v : NULL);
    if (e) {
      snprintf(buf, sizeof buf, "engine vllm: %s", e);
      why = buf;
    }
  }
  if (!why) why = search__prompt_refusal(c, role, l, buf, sizeof buf);
  if (!why) why = search__fp8_refusal(c, l, buf, sizeof buf);
  if (!why) why = search__chunk_refusal(c, role, l, buf, sizeof buf);
  if (!why)
    search_layout_valid(c->m, l, role, c->s->deployment.allow_tp_across_domain.v, &why);
  if (!why) return true;
  search_rejects_add(c->rej, why, role, l);
  return false;
}

/* Enumerates the layouts of one role in a fixed order (tp, cp, dp, ep, etp,
 * dcp, pp, each ascending; pp innermost so that the stage ledgers are
 * shared) and evaluates the valid ones. Every size runs
 * over every value the validation rules allow within the GPU budget, not
 * only powers of two: tp over the divisors of the head count (within the
 * scale-up domain unless the spec allows more), pp over 1..layers, cp over
 * the divisors of heads/tp (prefill pools, not MLA), dp over every count
 * (MoE models), ep over the divisors of the expert count that divide the
 * instance's tp*cp*dp ranks, etp over the divisors of the expert FFN width
 * with ep*etp dividing the ranks, dcp over the divisors of tp (MLA) or
 * tp/kv_heads (decode and aggregated pools).
 * Dense models keep dp at 1: without MoE layers, attention dp inside one
 * instance is the same computation as dp separate replicas, which the xPyD
 * and replica counts already cover (docs/cost-model.md, "Search space").
 * cp stays on prefill pools: the decode step model splits context with dcp,
 * which reuses the tp ranks instead of adding GPUs. */
static void search__role(Ctx *c, PoolRole role, RoleVec *out) {
  const CostModel *m = c->m;
  bool across = c->s->deployment.allow_tp_across_domain.v;
  ctx_progress(c, role == ROLE_PREFILL ? "prefill layouts" : role == ROLE_DECODE ? "decode layouts"
                                                                                 : "aggregated layouts");
  int64_t G = c->G;
  for (int64_t tp = 1; tp <= m->heads && tp <= G; tp++) {
    if (!ctx_step(c)) return;
    if (m->heads % tp) continue;
    if (!across && tp > m->domain) break;
    int64_t cpmax = role == ROLE_PREFILL && m->kind != ATTN_MLA ? m->heads / tp : 1;
    for (int64_t cp = 1; cp <= cpmax && tp * cp <= G; cp++) {
      if (!ctx_step(c)) return;
      if (cpmax % cp) continue;
      int64_t dpmax = m->moe ? G / (tp * cp) : 1;
      for (int64_t dp = 1; dp <= dpmax; dp++) {
        if (!ctx_step(c)) return;
        int64_t ranks = tp * cp * dp;
        int64_t epmax = m->moe ? (ranks < m->expert_slots ? ranks : m->expert_slots) : 1;
        for (int64_t ep = 1; ep <= epmax; ep++) {
          if (!ctx_step(c)) return;
          if (ranks % ep || (m->moe && m->expert_slots % ep)) continue;
          int64_t etpmax = m->moe ? ranks / ep : 1;
          for (int64_t etp = 1; etp <= etpmax; etp++) {
            if (!ctx_step(c)) return;
            if ((ranks / ep) % etp || (m->moe && m->expert_ffn_size % etp)) continue;
            int64_t dcpmax = role == ROLE_PREFILL ? 1 : tp;
            for (int64_t dcp = 1; dcp <= dcpmax; dcp++) {
              if (!ctx_step(c)) return;
              if (tp % dcp) continue;
              c->stage_gen++;
              c->guess = 0;
              for (int64_t pp = 1; pp <= m->layers && ranks * pp <= G; pp++) {
                if (!ctx_step(c)) return;
                CostLayout l = {tp, pp, cp, dp, ep, etp, dcp};
                if (!search__admit(c, role, &l)) continue;
                if (!ctx_spend(c, 1)) return;
                int64_t bmem = 0;
                MemSlot *ms = role == ROLE_BOTH && !c->strict && cp == 1 && dcp == 1
                                  ? memmap_find(&c->prefill_mem, &l)
                                  : NULL;
                bool pass = ms ? ms->bmem >= 0 : search__rules_pass(c, role, &l, &bmem);
                if (ms) bmem = ms->bmem;
                else if (role == ROLE_PREFILL && cp == 1 && !c->strict)
                  memmap_put(&c->prefill_mem, &l, pass ? bmem : -1);
                if (!pass) {
                  search__reject(c, role, &l, REJ_MEM);
                  continue;
                }
                search__eval_layout(c, role, &l, bmem, out);
              }
            }
          }
        }
      }
    }
  }
}

/* Keeps the k best by score and the k2 fastest (prefill latency or decode
 * TPOT), in a deterministic order. */
static int cmp_score(const void *a, const void *b) {
  const RoleEval *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  if (x->gpus != y->gpus) return x->gpus < y->gpus ? -1 : 1;
  return memcmp(&x->lay, &y->lay, sizeof x->lay);
}

static double role_latency(const RoleEval *e, PoolRole role) {
  return role == ROLE_PREFILL ? e->inst.pre.latency : e->inst.tpot;
}

static PoolRole cmp_role;
static int cmp_latency(const void *a, const void *b) {
  const RoleEval *x = a, *y = b;
  double lx = role_latency(x, cmp_role), ly = role_latency(y, cmp_role);
  if (lx != ly) return lx < ly ? -1 : 1;
  return cmp_score(a, b);
}

/* search__shortlist by sorting v in full (its fallback). */
static size_t search__shortlist_sorted(const Ctx *c, RoleVec *v, PoolRole role, size_t k,
                                       size_t k2, RoleVec *out) {
  if (v->len == 0) return 0;
  size_t dropped = 0, i = 0;
  qsort(v->items, v->len, sizeof *v->items, cmp_score);
  for (; i < v->len && out->len < k; i++) {
    if (!c->strict && !search__validate(c, role, &v->items[i].lay)) dropped++;
    else rp_vec_push(out, v->items[i]);
  }
  if (i >= v->len) return dropped;
  size_t nrest = v->len - i, taken = 0;
  RoleEval *rest = rp_malloc(nrest * sizeof *rest);
  memcpy(rest, v->items + i, nrest * sizeof *rest);
  cmp_role = role;
  qsort(rest, nrest, sizeof *rest, cmp_latency);
  for (size_t j = 0; j < nrest && taken < k2; j++) {
    if (!c->strict && !search__validate(c, role, &rest[j].lay)) {
      dropped++;
      continue;
    }
    rp_vec_push(out, rest[j]);
    taken++;
  }
  free(rest);
  return dropped;
}

/* The n best items of v under cmp, in order, into sel (capacity n), among
 * those that rank after `after` under cmp_score (NULL: all). A bounded
 * insertion: one comparison per item with the current n-th. Returns how
 * many were selected. */
static size_t search__select(const RoleVec *v, int (*cmp)(const void *, const void *),
                             const RoleEval *after, size_t n, const RoleEval **sel) {
  size_t len = 0;
  for (size_t i = 0; i < v->len; i++) {
    const RoleEval *e = &v->items[i];
    if (after && cmp_score(e, after) <= 0) continue;
    if (len == n && cmp(e, sel[len - 1]) >= 0) continue;
    size_t lo = 0, hi = len;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (cmp(sel[mid], e) < 0) lo = mid + 1;
      else hi = mid;
    }
    if (len < n) len++;
    memmove(sel + lo + 1, sel + lo, (len - 1 - lo) * sizeof *sel);
    sel[lo] = e;
  }
  return len;
}

/* Fills out with the k best of v by score and then the k2 fastest of the
 * rest, each confirmed by validate_pool (search__rules_pass explains why
 * that runs here); a layout that fails it is dropped from v's count.
 * Returns how many were dropped. The same as sorting v by score, walking
 * it until k pass, then sorting what is left by latency: each list is
 * selected with room for SHORT_SLACK failures, and sorted in full only
 * when more fail. */
enum { SHORT_SLACK = 16 };

static size_t search__shortlist(const Ctx *c, RoleVec *v, PoolRole role, size_t k, size_t k2,
                                RoleVec *out) {
  if (v->len == 0) return 0;
  size_t dropped = 0;
  const RoleEval **sel = rp_malloc((k + k2 + SHORT_SLACK) * sizeof *sel);
  size_t n = search__select(v, cmp_score, NULL, k + SHORT_SLACK, sel);
  size_t i = 0;
  for (; i < n && out->len < k; i++) {
    if (!c->strict && !search__validate(c, role, &sel[i]->lay)) dropped++;
    else rp_vec_push(out, *sel[i]);
  }
  if (out->len < k && n < v->len) {
    /* More than SHORT_SLACK of the best failed validate_pool: start over
     * the slow way. */
    free(sel);
    out->len = 0;
    return search__shortlist_sorted(c, v, role, k, k2, out);
  }
  if (i >= v->len) {
    free(sel);
    return dropped;
  }
  const RoleEval *last = sel[i - 1];
  RoleEval lastv = *last;
  cmp_role = role;
  size_t n2 = search__select(v, cmp_latency, &lastv, k2 + SHORT_SLACK, sel);
  size_t taken = 0, j = 0;
  for (; j < n2 && taken < k2; j++) {
    if (!c->strict && !search__validate(c, role, &sel[j]->lay)) {
      dropped++;
      continue;
    }
    rp_vec_push(out, *sel[j]);
    taken++;
  }
  size_t rest = 0;
  for (size_t r = 0; r < v->len; r++) rest += cmp_score(&v->items[r], &lastv) > 0;
  if (taken < k2 && n2 < rest) {
    free(sel);
    out->len = 0;
    return search__shortlist_sorted(c, v, role, k, k2, out);
  }
  free(sel);
  return dropped;
}

/* ---- xPyD ----------------------------------------------------------------- */

bool search_xpyd_best(int64_t gp, int64_t gd, double rp, double rd, int64_t G, int64_t budget,
                      int64_t *x, int64_t *y, int64_t *evals, bool *cut) {
  return search_xpyd_best_step(gp, gd, rp, rd, G, 1, NULL, budget, x, y, evals, cut);
}

bool search_xpyd_best_step(int64_t gp, int64_t gd, double rp, double rd, int64_t G, int64_t xstep,
                           const SearchPack *pk, int64_t budget, int64_t *x, int64_t *y, int64_t *evals,
                           bool *cut) {
  RP_ASSERT(xstep >= 1);
  bool found = false;
  *cut = false;
  double best = -1, best_r = -1;
  int64_t best_g = 0;
  /* The pools' GPU ratio (tin/P):(tout/D) in request units: one request/s
   * needs gp/rp prefill GPUs and gd/rd decode GPUs. Its instance form
   * (gx/gp):(gy/gd) gives, for each x, the y that balances the pools. */
  int64_t gx = 1, gy = 1;
  if (!cost_xpyd_ratio(1.0, 1.0, rp / (double)gp, rd / (double)gd, G, &gx, &gy)) return false;
  double y_per_x = ((double)gy / (double)gd) / ((double)gx / (double)gp);
  for (int64_t xi = xstep; xi * gp + gd <= G; xi += xstep) {
    int64_t ymax = (G - xi * gp) / gd, packed = search_pack_max(pk, gp, xi, gd);
    if (packed < 1) break; /* more prefill instances leave no more room */
    if (packed < ymax) ymax = packed;
    /* Clamped to [1, ymax] before converting, as the candidates are
     * after: a ratio far off either end is no integer. */
    double ys = fmin(fmax((double)xi * y_per_x, 1.0), (double)ymax);
    int64_t cand[2] = {(int64_t)floor(ys), (int64_t)ceil(ys)};
    for (int j = 0; j < 2; j++) {
      int64_t yi = cand[j] < 1 ? 1 : cand[j] > ymax ? ymax : cand[j];
      if (j == 1 && yi == (cand[0] < 1 ? 1 : cand[0] > ymax ? ymax : cand[0])) continue;
      if (*evals >= budget) {
        *cut = true;
        return found;
      }
      (*evals)++;
      double r = fmin((double)xi * rp, (double)yi * rd);
      int64_t g = xi * gp + yi * gd;
      double per = r / (double)g;
      bool better = !found || per > best * (1 + 1e-12) ||
                    (per >= best * (1 - 1e-12) && (r > best_r * (1 + 1e-12) ||
                                                    (r >= best_r * (1 - 1e-12) && g < best_g)));
      if (better) {
        found = true;
        best = per;
        best_r = r;
        best_g = g;
        *x = xi;
        *y = yi;
      }
    }
  }
  return found;
}

/* *n = ceil(rate / per), the instances that serve rate at per each, when
 * that is at most limit (else false, and nothing converted: workload.rate
 * is any positive double, so the quotient may be past INT64_MAX). */
static bool instances_for(double rate, double per, int64_t limit, int64_t *n) {
  double q = ceil(rate / per);
  if (!(q <= (double)limit)) return false;
  *n = (int64_t)q;
  return true;
}

static void pool_from(SearchPool *p, PoolRole role, const RoleEval *e, int64_t replicas) {
  memset(p, 0, sizeof *p);
  p->role = role;
  p->lay = e->lay;
  p->replicas = replicas;
  p->gpus = e->gpus;
  p->batch = role == ROLE_PREFILL ? 0 : e->inst.batch;
  p->tok_s_gpu = role == ROLE_PREFILL ? e->inst.pre.tok_s_gpu : e->inst.dec_tok_s / (double)e->gpus;
  p->latency = role == ROLE_PREFILL ? e->inst.pre.latency : e->inst.tpot;
  p->binding = e->binding;
}

/* The figures of a deployment at its instance counts, from the cost
 * model's one evaluation (cost_deploy_eval, which `compile` runs on the
 * same pools): what the result reports is what a compile of it reports. */
static void search__figures(const Ctx *c, const CostDeploy *dp, SearchResult *r) {
  CostDeployEval ev;
  cost_deploy_eval(c->m, dp, &ev);
  SearchPool *last = &r->pools[r->npools - 1];
  for (size_t i = 0; i < r->npools; i++) r->pools[i].replicas = dp->replicas[i];
  last->batch = ev.batch;
  last->latency = ev.tpot;
  r->gpus = ev.gpus;
  r->util_prefill = ev.util;
  r->queue = ev.queue;
  r->kv_transfer = ev.rates.kv_transfer;
  r->ttft = ev.ttft;
  r->tpot = ev.tpot;
  r->req_s = ev.served;
  r->tok_s = ev.tok_s;
  r->feasible = ev.feasible;
  r->goodput_gpu = ev.goodput_gpu;
  r->goodput_cluster_gpu = c->G > 0 ? ev.goodput_gpu * (double)ev.gpus / (double)c->G : 0.0;
}

/* One prefill/decode pair: the planned rates (utilisation caps), the xPyD
 * ratio, (x, y), then the figures at those counts. */
static bool search__pair(Ctx *c, const RoleEval *P, const RoleEval *D, SearchResult *r) {
  const CostModel *m = c->m;
  memset(r, 0, sizeof *r);
  /* the engine's prefill/decode rules: a KV layout it cannot move, or one
   * no source read establishes (W0701 at check) */
  if (c->caps && !engine_pd_established(c->caps, P->lay.tp, D->lay.tp, P->lay.pp, D->lay.pp)) return false;
  r->mode = SEARCH_DISAGGREGATED;
  r->npools = 2;
  CostDeploy dp = {2, {&P->inst, &D->inst}, {1, 1}, c->rho};
  CostRates rates;
  cost_deploy_rates(m, &dp, &rates);
  double rp = rates.r[0], rd = rates.r[1]; /* req/s per prefill, decode instance */
  SearchBinding pb = rates.ttft_bound ? BIND_TTFT : BIND_HEADROOM;
  pool_from(&r->pools[0], ROLE_PREFILL, P, 0);
  pool_from(&r->pools[1], ROLE_DECODE, D, 0);
  r->pools[0].binding = pb;
  if (rp <= 0) {
    /* The TTFT SLO is missed at any load: 1P1D, for the figures. */
    r->binding = BIND_SLO_MISS;
    search__figures(c, &dp, r);
    return true;
  }
  cost_xpyd_ratio((double)m->tin, (double)m->tout, rp * (double)m->tin / (double)P->gpus,
                  rd * (double)m->tout / (double)D->gpus, c->G, &r->ratio_x, &r->ratio_y);
  int64_t x = 0, y = 0, ev = 0;
  bool cut = false;
  int64_t xstep = search_space_xstep(&c->s->search, P->gpus, c->gpn);
  bool fits = search_xpyd_best_step(P->gpus, D->gpus, rp, rd, c->G, xstep, &c->pack, c->max - c->evals, &x,
                                    &y, &ev, &cut);
  /* A pair whose integer search the budget cut keeps the best point it
   * reached; the pairs after it are not tried (c->hit). */
  if (!ctx_spend(c, ev > 0 || cut ? ev : 1)) return false;
  if (cut) c->hit = true;
  if (!fits) return false;
  SearchBinding bind = rp * (double)x <= rd * (double)y ? pb : D->binding;
  bool at_rate = false;
  if (m->rate > 0) {
    int64_t xn = 0, yn = 0;
    at_rate = instances_for(m->rate, rp, c->G, &xn) && instances_for(m->rate, rd, c->G, &yn);
    xn = (xn + xstep - 1) / xstep * xstep;
    bool gpus_ok = at_rate && xn <= c->G && xn * P->gpus + yn * D->gpus <= c->G;
    at_rate = gpus_ok && search_pack_max(&c->pack, P->gpus, xn, D->gpus) >= yn;
    if (at_rate) {
      x = xn;
      y = yn;
    } else {
      bind = gpus_ok ? BIND_NODES : BIND_GPUS;
    }
  }
  dp.replicas[0] = x;
  dp.replicas[1] = y;
  search__figures(c, &dp, r);
  /* The offered load is served and the decode batch it leaves is below
   * the bound that set B: the load binds. */
  if (at_rate && r->pools[1].batch < D->inst.batch) bind = BIND_LOAD;
  r->binding = bind;
  return true;
}

static void search__agg(Ctx *c, const RoleEval *A, SearchResult *r) {
  const CostModel *m = c->m;
  memset(r, 0, sizeof *r);
  r->mode = SEARCH_AGGREGATED;
  r->npools = 1;
  pool_from(&r->pools[0], ROLE_BOTH, A, 0);
  int64_t most = search_pack_max(&c->pack, 0, 0, A->gpus);
  CostDeploy dp = {1, {&A->inst, NULL}, {c->G / A->gpus < most ? c->G / A->gpus : most, 0}, c->rho};
  CostRates rates;
  cost_deploy_rates(m, &dp, &rates);
  SearchBinding bind = A->binding;
  if (m->rate > 0) {
    int64_t xn = 0;
    if (instances_for(m->rate, rates.r[0], dp.replicas[0], &xn)) {
      dp.replicas[0] = xn;
      bind = BIND_LOAD;
    } else {
      /* more instances of this size would fit the GPUs than the nodes hold */
      bind = instances_for(m->rate, rates.r[0], c->G / A->gpus, &xn) ? BIND_NODES : BIND_GPUS;
    }
  }
  search__figures(c, &dp, r);
  r->binding = bind;
}

/* ---- ranking -------------------------------------------------------------- */

void search_result_spec(const Spec *spec, const SearchResult *r, PoolSpec pools[2], Spec *out) {
  *out = *spec;
  memset(pools, 0, 2 * sizeof *pools);
  for (size_t i = 0; i < r->npools; i++) {
    const SearchPool *sp = &r->pools[i];
    const char *name = sp->role == ROLE_PREFILL ? "prefill" : sp->role == ROLE_DECODE ? "decode" : "serve";
    pool_spec_fill(&pools[i], name, sp->role, &sp->lay, sp->replicas, spec->deployment.loc);
  }
  out->deployment.pools = pools;
  out->deployment.npools = r->npools;
  out->deployment.mode.v = r->mode == SEARCH_AGGREGATED ? MODE_AGGREGATED : MODE_DISAGGREGATED;
}

char *search_layout_str(const SearchResult *r) {
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < r->npools; i++) {
    const SearchPool *p = &r->pools[i];
    if (i) sb_putc(&sb, ' ');
    sb_printf(&sb, "%lldx%s(", (long long)p->replicas,
              p->role == ROLE_PREFILL ? "P" : p->role == ROLE_DECODE ? "D" : "PD");
    search_layout_put(&sb, &p->lay);
    sb_putc(&sb, ')');
  }
  return sb_take(&sb);
}

static const char *const sort_names[] = {"used-gpu", "cluster-gpu", "goodput", "min-gpus"};

const char *search_sort_name(SearchSort k) {
  return (unsigned)k < RP_ARRAY_LEN(sort_names) ? sort_names[k] : "?";
}

bool search_sort_parse(const char *s, SearchSort *k) {
  for (size_t i = 0; i < RP_ARRAY_LEN(sort_names); i++)
    if (strcmp(s, sort_names[i]) == 0) {
      *k = (SearchSort)i;
      return true;
    }
  return false;
}

/* The ranking's first key under --sort and the offered rate (qsort has no
 * context argument). */
static SearchSort cmp_sort;
static double cmp_rate;

/* The key of --sort (higher is better): --min-gpus negates the GPUs. */
static double sort_key(const SearchResult *r) {
  switch (cmp_sort) {
  case SEARCH_SORT_CLUSTER_GPU: return r->goodput_cluster_gpu;
  case SEARCH_SORT_GOODPUT: return r->goodput_gpu * (double)r->gpus;
  case SEARCH_SORT_MIN_GPUS: return -(double)r->gpus;
  case SEARCH_SORT_USED_GPU: break;
  }
  return r->goodput_gpu;
}

/* With workload.rate, whether r serves all of it. Under every sort such a
 * deployment ranks above one that serves less: goodput per used GPU
 * counts a deployment that serves the rate with room to spare at the
 * rate, and one that cannot at its capacity, so without this tier the
 * second could outrank the first (docs/cost-model.md, "The offered
 * load"). */
static bool serves_rate_at(const SearchResult *r, double rate) {
  return rate > 0 && r->req_s >= rate * (1 - 1e-9);
}

static bool serves_rate(const SearchResult *r) { return serves_rate_at(r, cmp_rate); }

static const char *sort_words(SearchSort k) {
  static const char *const w[] = {[SEARCH_SORT_USED_GPU] = "goodput per used GPU",
                                  [SEARCH_SORT_CLUSTER_GPU] = "goodput per GPU of the budget",
                                  [SEARCH_SORT_GOODPUT] = "goodput of the deployment",
                                  [SEARCH_SORT_MIN_GPUS] = "the fewest GPUs that serve the offered rate"};
  return w[k];
}

static int cmp_result(const void *a, const void *b) {
  const SearchResult *x = a, *y = b;
  if (x->feasible != y->feasible) return x->feasible ? -1 : 1;
  if (serves_rate(x) != serves_rate(y)) return serves_rate(x) ? -1 : 1;
  double kx = sort_key(x), ky = sort_key(y);
  if (kx != ky) return kx > ky ? -1 : 1;
  if (x->goodput_gpu != y->goodput_gpu) return x->goodput_gpu > y->goodput_gpu ? -1 : 1;
  if (x->ttft != y->ttft) return x->ttft < y->ttft ? -1 : 1;
  if (x->tpot != y->tpot) return x->tpot < y->tpot ? -1 : 1;
  if (x->gpus != y->gpus) return x->gpus < y->gpus ? -1 : 1;
  char *sx = search_layout_str(x), *sy = search_layout_str(y);
  int c = strcmp(sx, sy);
  free(sx);
  free(sy);
  return c;
}

static void search__pareto(SearchOut *out) {
  size_t n = out->results.len;
  SearchResult *r = out->results.items;
  for (size_t i = 0; i < n; i++) {
    if (!r[i].feasible) continue;
    bool dominated = false;
    for (size_t j = 0; j < n && !dominated; j++) {
      if (j == i || !r[j].feasible) continue;
      bool ge = r[j].goodput_gpu >= r[i].goodput_gpu && r[j].ttft <= r[i].ttft &&
                r[j].tpot <= r[i].tpot;
      bool gt = r[j].goodput_gpu > r[i].goodput_gpu || r[j].ttft < r[i].ttft ||
                r[j].tpot < r[i].tpot;
      dominated = ge && gt;
    }
    r[i].pareto = !dominated;
  }
}

/* ---- objective hook ------------------------------------------------------- */

size_t search_candidate_kv(const SearchResult *r, SearchKV *kv) {
  size_t n = 0;
#define KV(k, v) (kv[n].key = (k), kv[n].value = (double)(v), n++)
  KV("goodput", r->feasible ? r->req_s : 0.0);
  KV("gpus", r->gpus);
  KV("ttft_ms", r->ttft * 1e3);
  KV("tpot_ms", r->tpot * 1e3);
  KV("throughput_req_s", r->req_s);
  KV("throughput_tok_s", r->tok_s);
  KV("goodput_tok_s_per_gpu", r->goodput_gpu);
  KV("feasible", r->feasible ? 1 : 0);
  KV("aggregated", r->mode == SEARCH_AGGREGATED ? 1 : 0);
  for (size_t i = 0; i < r->npools; i++) {
    const SearchPool *p = &r->pools[i];
    static const char *const keys[3][9] = {
        {"prefill_replicas", "prefill_tp", "prefill_pp", "prefill_cp", "prefill_dp", "prefill_ep",
         "prefill_etp", "prefill_dcp", "prefill_batch"},
        {"decode_replicas", "decode_tp", "decode_pp", "decode_cp", "decode_dp", "decode_ep",
         "decode_etp", "decode_dcp", "decode_batch"},
        {"serve_replicas", "serve_tp", "serve_pp", "serve_cp", "serve_dp", "serve_ep", "serve_etp",
         "serve_dcp", "serve_batch"},
    };
    int ri = p->role == ROLE_PREFILL ? 0 : p->role == ROLE_DECODE ? 1 : 2;
    int64_t v[9] = {p->replicas, p->lay.tp, p->lay.pp, p->lay.cp, p->lay.dp,
                    p->lay.ep, p->lay.etp, p->lay.dcp, p->batch};
    for (int j = 0; j < 9; j++) KV(keys[ri][j], v[j]);
  }
#undef KV
  RP_ASSERT(n <= SEARCH_HOOK_KEYS);
  return n;
}

static int cmp_scored(const void *a, const void *b) {
  const SearchResult *x = a, *y = b;
  if (x->feasible != y->feasible) return x->feasible ? -1 : 1;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return cmp_result(a, b);
}

/* When the spec names an `objective` hook, it scores every ranked result
 * and the feasible ones are re-ranked by its score (ties keep the built-in
 * order). Returns false when the hook failed (already reported). */
static bool search__objective(Diags *d, const Spec *s, SearchOut *out) {
  if (!s->deployment.hooks.objective.set || out->results.len == 0) return true;
  HookSession hs;
  bool ok = hook_session_open(&hs, s, d);
  for (size_t i = 0; ok && i < out->results.len; i++) {
    SearchResult *r = &out->results.items[i];
    SearchKV kv[SEARCH_HOOK_KEYS];
    HookKV hk[SEARCH_HOOK_KEYS];
    size_t n = search_candidate_kv(r, kv);
    for (size_t j = 0; j < n; j++) hk[j] = (HookKV){kv[j].key, kv[j].value};
    ok = hook_run_objective(&hs.env, &hs.ctx, hk, n, &r->score, d);
    r->scored = ok;
  }
  if (ok) qsort(out->results.items, out->results.len, sizeof *out->results.items, cmp_scored);
  hook_session_close(&hs);
  return ok;
}

/* ---- driver --------------------------------------------------------------- */

/* W0500: the candidate budget, or the enumeration steps it allows, ran
 * out. */
static void search__budget_hit(Diags *d, const Spec *s, const Ctx *c) {
  Diag *g;
  if (c->steps > c->max_steps)
    g = diag_at(d, DIAG_W0500, s->search.loc,
                "search stopped at its budget of %lld candidates: enumerating layouts took "
                "%lld steps (%lld per candidate of the budget) for %lld evaluated; the ranking "
                "covers only what was evaluated",
                (long long)c->max, (long long)c->max_steps, (long long)SEARCH_STEPS_PER_CANDIDATE,
                (long long)c->evals);
  else
    g = diag_at(d, DIAG_W0500, s->search.loc,
                "search stopped at its budget of %lld candidates; the ranking covers "
                "only what was evaluated", (long long)c->max);
  diag_help(g, "raise it with --max-candidates N, or narrow the search with "
               "`search.gpu_budget`");
}

/* Shortlist sizes: the k best layouts of a role by tokens/s per GPU and the
 * k2 fastest; pairs are k_total^2 at most. */
enum { SHORT_BEST = 24, SHORT_FAST = 8 };

static void search__free_ctx(Ctx *c, RoleVec *pre, RoleVec *dec, RoleVec *both, RoleVec *sp,
                             RoleVec *sd) {
  free(c->stages);
  if (c->part_by_pp) {
    int64_t np = c->m->layers < SEARCH_PART_CACHE_PP ? c->m->layers : SEARCH_PART_CACHE_PP;
    for (int64_t i = 0; i <= np; i++) free(c->part_by_pp[i]);
  }
  free(c->part_by_pp);
  free(c->part_ok);
  free(c->prefill_mem.slots);
  engine_caps_free(c->caps);
  free(pre->items);
  free(dec->items);
  free(both->items);
  free(sp->items);
  free(sd->items);
}

/* The search's context from the spec and the options (budget, headroom,
 * limits, the engine's entry); out receives the rejection tally. */
static void search__ctx_init(Ctx *c, Diags *d, const Spec *s, const SearchOptions *o, SearchOut *out) {
  const CostModel *m = &out->model;
  memset(c, 0, sizeof *c);
  c->m = m;
  c->s = s;
  c->G = o->gpu_budget > 0 ? o->gpu_budget
         : s->search.gpu_budget.v > 0 ? s->search.gpu_budget.v : m->gpus_total;
  if (c->G > m->gpus_total && m->gpus_total > 0) c->G = m->gpus_total;
  c->rho = o->headroom > 0 ? o->headroom : cost_headroom(s);
  c->max = o->max_candidates > 0 ? o->max_candidates : SEARCH_MAX_CANDIDATES_DEFAULT;
  c->max_steps = c->max > INT64_MAX / SEARCH_STEPS_PER_CANDIDATE ? INT64_MAX
                                                                 : c->max * SEARCH_STEPS_PER_CANDIDATE;
  c->progress = o->progress;
  c->strict = o->strict;
  c->stages = rp_calloc((size_t)((m->layers + 1) * (m->n_dense + 1) * 4), sizeof *c->stages);
  c->lw = lay_default_weights(s);
  int64_t np = (m->layers < SEARCH_PART_CACHE_PP ? m->layers : SEARCH_PART_CACHE_PP) + 1;
  c->part_by_pp = rp_calloc((size_t)np, sizeof *c->part_by_pp);
  c->part_ok = rp_calloc((size_t)np, sizeof *c->part_ok);
  c->gpn = s->hardware.gpus_per_node.v;
  c->pack.gpn = c->gpn;
  c->pack.nodes = (Engine)s->deployment.engine.v == ENGINE_GENERIC ? 0 : s->hardware.nodes.v;
  c->rej = &out->rejects;
  c->d = d;
  c->caps = engine_caps_of(s);
}

/* E0507 unless the workload has both lengths and the SLO both targets. */
static bool search__has_targets(Diags *d, const Spec *s, const CostModel *m) {
  if (m->tin >= 1 && m->tout >= 1 && m->slo_ttft > 0 && m->slo_tpot > 0) return true;
  Diag *g = diag_at(d, DIAG_E0507, s->slo.loc.line ? s->slo.loc : s->workload.loc,
                    "search needs workload input/output tokens and both SLOs: got "
                    "input_tokens %lld, output_tokens %lld, ttft %g s, tpot %g s",
                    (long long)m->tin, (long long)m->tout, m->slo_ttft, m->slo_tpot);
  diag_help(g, "add `workload: {input_tokens, output_tokens}` and `slo: {ttft, tpot}`");
  return false;
}

/* MLA: the attention tp that minimises per-GPU decode reads at the
 * winner's batch, reported next to the tp the search chose. */
static void search__mla_tp_opt(SearchOut *out) {
  const CostModel *m = &out->model;
  if (m->kind != ATTN_MLA || !out->results.len) return;
  const SearchResult *w = &out->results.items[0];
  const SearchPool *dp = &w->pools[w->npools - 1];
  double kv_total = (double)dp->batch * cost_decode_ctx(m) * (double)m->kv_bytes_token;
  out->tp_opt = cost_attn_tp_opt((double)m->b_attn * (double)m->layers, (double)dp->gpus, kv_total);
}

void search_domain_note(Diag *g, const Spec *s, const CostModel *m, int64_t G) {
  int64_t lim = G < s->hardware.gpus_per_node.v ? G : s->hardware.gpus_per_node.v;
  if (s->deployment.allow_tp_across_domain.v || m->domain >= lim || m->domain >= m->heads) return;
  diag_note(g,
            "tp was searched only up to the scale-up domain of %lld GPU%s (hardware.scale_up.domain); "
            "`deployment.allow_tp_across_domain: true` lets tp groups span domains over the "
            "scale-out link",
            (long long)m->domain, m->domain == 1 ? "" : "s");
}

/* Whether a rejection is the model's memory or the SLO (reject_terms),
 * not the space: a constraint, an engine rule or a model rule. */
static bool search__reject_is_fit(const SearchReject *r) {
  for (int t = 0; t < REJ__COUNT; t++)
    if (strcmp(r->why, reject_terms[t]) == 0) return true;
  return false;
}

/* E0508's notes: what decided the rejections, memory and the SLO before
 * the space, then the most frequent first (ties in enumeration order), at
 * most SEARCH_VERDICT_REASONS of them. */
enum { SEARCH_VERDICT_REASONS = 4 };
static void search__reject_notes(Diag *g, const SearchRejects *v) {
  bool used[SEARCH_REJECT_MAX] = {false};
  for (int k = 0; k < SEARCH_VERDICT_REASONS; k++) {
    size_t best = v->len;
    for (size_t i = 0; i < v->len; i++) {
      if (used[i]) continue;
      bool fi = search__reject_is_fit(&v->items[i]), fb = best < v->len && search__reject_is_fit(&v->items[best]);
      if (best == v->len || fi > fb || (fi == fb && v->items[i].n > v->items[best].n)) best = i;
    }
    if (best == v->len) return;
    used[best] = true;
    const SearchReject *r = &v->items[best];
    StrBuf sb;
    sb_init(&sb);
    search_layout_put(&sb, &r->first);
    diag_note(g, "%lld %s layout%s rejected: %s (first: %s)", (long long)r->n,
              r->role == ROLE_BOTH ? "aggregated" : role_name(r->role), r->n == 1 ? "" : "s", r->why,
              sb.buf ? sb.buf : "");
    sb_free(&sb);
  }
}

/* The search's outcome: E0508 when no layout of a role fits on its own
 * (none), E0500 when no deployment meets the SLO, naming the closest. */
static bool search__verdict(Diags *d, const Spec *s, const SearchOut *out, bool none, int64_t G) {
  const CostModel *m = &out->model;
  if (none) {
    Diag *g = diag_at(d, DIAG_E0508, s->deployment.loc.line ? s->deployment.loc : s->model.loc,
                      "no parallel layout of `%s` fits memory and meets the TTFT/TPOT SLO on "
                      "its own within %lld GPUs",
                      s->model.name.v ? s->model.name.v : "model", (long long)G);
    search__reject_notes(g, &out->rejects);
    search_domain_note(g, s, m, G);
    diag_help(g, "raise `search.gpu_budget` or the cluster size, or relax `slo`");
    return false;
  }
  if (out->results.len && out->results.items[0].feasible) return true;
  Diag *g = diag_at(d, DIAG_E0500, s->slo.loc,
                    "no layout meets ttft %.0f ms and tpot %.1f ms within %lld GPUs",
                    m->slo_ttft * 1e3, m->slo_tpot * 1e3, (long long)G);
  if (out->results.len) {
    const SearchResult *b = &out->results.items[0];
    char *ls = search_layout_str(b);
    diag_note(g, "closest: %s at ttft %.1f ms, tpot %.2f ms", ls, b->ttft * 1e3, b->tpot * 1e3);
    free(ls);
  }
  search_domain_note(g, s, m, G);
  diag_help(g, "relax `slo`, lower `workload.rate`, or add GPUs");
  return false;
}

/* A search that stops before it enumerates: its context freed, false. */
static bool search__stop(Ctx *c) {
  RoleVec none = {0};
  search__free_ctx(c, &none, &none, &none, &none, &none);
  return false;
}

/* The modes to search when the options name neither: the spec's. */
static void search__modes(const Spec *s, bool *agg, bool *dis) {
  if (*agg || *dis) return;
  DeployMode dm = (DeployMode)s->deployment.mode.v;
  const SearchSpec *se = &s->search; /* set and false turns a mode off */
  *agg = dm != MODE_DISAGGREGATED && !(se->aggregated.set && !se->aggregated.v);
  *dis = dm != MODE_AGGREGATED && !(se->disaggregated.set && !se->disaggregated.v);
}

bool search_run(Diags *d, const Spec *s, const CostConsts *k, const SearchOptions *o,
                SearchOut *out) {
  memset(out, 0, sizeof *out);
  CostModel *m = &out->model;
  if (!cost_model_init(d, s, k, m) || !search__has_targets(d, s, m)) return false;
  Ctx c;
  search__ctx_init(&c, d, s, o, out);
  out->gpu_budget = c.G;
  out->headroom = c.rho;
  out->max_candidates = c.max;
  if (!engine_vendor_ok(d, s) || (c.caps && !engine_prompts_admitted(d, s, c.caps))) return search__stop(&c);
  HookSession fhs;
  bool filter_ok = true;
  if (s->deployment.hooks.filter.set) {
    filter_ok = hook_session_open(&fhs, s, d);
    c.filter = &fhs;
    c.failed = !filter_ok;
  }
  bool agg = o->aggregated, dis = o->disaggregated;
  search__modes(s, &agg, &dis);
  RoleVec pre = {0}, dec = {0}, both = {0};
  if (dis) {
    search__role(&c, ROLE_PREFILL, &pre);
    search__role(&c, ROLE_DECODE, &dec);
  }
  if (agg) search__role(&c, ROLE_BOTH, &both);
  RoleVec sp = {0}, sd = {0}, sb = {0};
  size_t drop_p = search__shortlist(&c, &pre, ROLE_PREFILL, SHORT_BEST, SHORT_FAST, &sp);
  size_t drop_d = search__shortlist(&c, &dec, ROLE_DECODE, SHORT_BEST, SHORT_FAST, &sd);
  size_t drop_b = search__shortlist(&c, &both, ROLE_BOTH, SHORT_BEST, SHORT_FAST, &sb);
  out->layouts[0] = dis ? (int64_t)(pre.len - drop_p) : -1;
  out->layouts[1] = dis ? (int64_t)(dec.len - drop_d) : -1;
  out->layouts[2] = agg ? (int64_t)(both.len - drop_b) : -1;
  if (sp.len && sd.len) ctx_progress(&c, "xPyD pairs");
  for (size_t i = 0; i < sp.len && !c.hit; i++)
    for (size_t j = 0; j < sd.len && !c.hit; j++) {
      SearchResult r;
      if (search__pair(&c, &sp.items[i], &sd.items[j], &r)) rp_vec_push(&out->results, r);
    }
  for (size_t i = 0; i < sb.len; i++) {
    SearchResult r;
    search__agg(&c, &sb.items[i], &r);
    rp_vec_push(&out->results, r);
  }
  free(sb.items);
  if (c.filter) hook_session_close(&fhs);
  if (c.failed) {
    search__free_ctx(&c, &pre, &dec, &both, &sp, &sd);
    return false;
  }
  if (c.progress) fputs("\r\033[K", c.progress);
  out->evaluated = c.evals;
  out->budget_hit = c.hit;
  out->sort = o->sort;
  cmp_sort = o->sort;
  cmp_rate = m->rate;
  if (out->results.len)
    qsort(out->results.items, out->results.len, sizeof *out->results.items, cmp_result);
  bool hook_ok = search__objective(d, s, out);
  search__pareto(out);
  search_group(out);
  search__mla_tp_opt(out);
  if (c.hit) search__budget_hit(d, s, &c);
  bool none = dec.len == 0 && both.len == 0 && (pre.len == 0 || dis);
  bool ok = search__verdict(d, s, out, none, c.G) && hook_ok;
  search__free_ctx(&c, &pre, &dec, &both, &sp, &sd);
  return ok;
}

void search_out_free(SearchOut *out) {
  free(out->results.items);
  search_rejects_free(&out->rejects);
  memset(out, 0, sizeof *out);
}

/* ---- explanations and output ---------------------------------------------- */

char *search_explain(const SearchOut *out, size_t i) {
  StrBuf sb;
  sb_init(&sb);
  const SearchResult *r = &out->results.items[i];
  const CostModel *m = &out->model;
  if (i == 0) {
    sb_printf(&sb, "winner: bound by %s", search_binding_words(r->binding));
    return sb_take(&sb);
  }
  if (!r->feasible) {
    if (r->ttft > m->slo_ttft)
      sb_printf(&sb, "misses the TTFT SLO: %.1f ms (queue %.1f + prefill %.1f + KV %.1f + outside the GPU %.1f) > %.0f ms",
                r->ttft * 1e3, r->queue * 1e3, r->pools[0].latency * 1e3, r->kv_transfer * 1e3,
                m->k.request_overhead_s * 1e3, m->slo_ttft * 1e3);
    else
      sb_printf(&sb, "misses the TPOT SLO: %.2f ms > %.1f ms", r->tpot * 1e3, m->slo_tpot * 1e3);
    return sb_take(&sb);
  }
  const SearchResult *w = &out->results.items[0];
  double loss = w->goodput_gpu > 0 ? 100.0 * (1.0 - r->goodput_gpu / w->goodput_gpu) : 0.0;
  if (serves_rate_at(w, m->rate) && !serves_rate_at(r, m->rate)) {
    sb_printf(&sb, "serves %.2f of the %.2f req/s offered, #1 all of it (goodput/GPU %.1f vs %.1f)", r->req_s,
              m->rate, r->goodput_gpu, w->goodput_gpu);
  } else if (r->goodput_gpu > w->goodput_gpu) {
    sb_printf(&sb, "more goodput/GPU than #1 (%.1f vs %.1f tok/s/GPU), ranked lower by %s", r->goodput_gpu,
              w->goodput_gpu, sort_words(out->sort));
  } else if (r->goodput_gpu == w->goodput_gpu) {
    /* A tie on goodput/GPU: name the tie-break that ranked it lower. */
    sb_printf(&sb, "ties #1 on goodput/GPU (%.1f tok/s/GPU); ranked lower on ", r->goodput_gpu);
    if (r->ttft != w->ttft) sb_printf(&sb, "TTFT %.1f vs %.1f ms", r->ttft * 1e3, w->ttft * 1e3);
    else if (r->tpot != w->tpot) sb_printf(&sb, "TPOT %.2f vs %.2f ms", r->tpot * 1e3, w->tpot * 1e3);
    else if (r->gpus != w->gpus) sb_printf(&sb, "GPUs %lld vs %lld", (long long)r->gpus, (long long)w->gpus);
    else sb_puts(&sb, "layout name order");
  } else {
    sb_printf(&sb, "%.1f%% less goodput/GPU than #1 (%.1f vs %.1f tok/s/GPU)", loss, r->goodput_gpu,
              w->goodput_gpu);
  }
  /* The binding constraint of each: what stopped this one from going
   * further, against what stopped the winner. */
  sb_printf(&sb, "; bound by %s (#1: %s)", search_binding_words(r->binding),
            r->binding == w->binding ? "the same" : search_binding_words(w->binding));
  if (r->mode != w->mode) {
    sb_printf(&sb, "; %s instead of %s", r->mode == SEARCH_AGGREGATED ? "aggregated" : "disaggregated",
              w->mode == SEARCH_AGGREGATED ? "aggregated" : "disaggregated");
  }
  /* Name the pool that is worse, by its per-GPU rate. */
  for (size_t p = 0; p < r->npools; p++) {
    const SearchPool *a = &r->pools[p];
    const SearchPool *b = NULL;
    for (size_t q = 0; q < w->npools; q++)
      if (w->pools[q].role == a->role) b = &w->pools[q];
    if (!b) continue;
    if (memcmp(&a->lay, &b->lay, sizeof a->lay) == 0 && a->replicas == b->replicas) continue;
    if (a->role == ROLE_PREFILL)
      sb_printf(&sb, "; prefill %.0f vs %.0f input tok/s/GPU (latency %.1f vs %.1f ms)", a->tok_s_gpu,
                b->tok_s_gpu, a->latency * 1e3, b->latency * 1e3);
    else
      sb_printf(&sb, "; %s %.0f vs %.0f output tok/s/GPU at batch %lld vs %lld (bound by %s)",
                a->role == ROLE_DECODE ? "decode" : "instance", a->tok_s_gpu, b->tok_s_gpu,
                (long long)a->batch, (long long)b->batch, search_binding_words(a->binding));
    if (a->lay.dp != b->lay.dp)
      sb_printf(&sb, "; attention data parallel %lld vs %lld", (long long)a->lay.dp, (long long)b->lay.dp);
  }
  if (r->mode == SEARCH_DISAGGREGATED && w->mode == SEARCH_DISAGGREGATED &&
      memcmp(&r->pools[0].lay, &w->pools[0].lay, sizeof r->pools[0].lay) == 0 &&
      memcmp(&r->pools[1].lay, &w->pools[1].lay, sizeof r->pools[1].lay) == 0)
    sb_printf(&sb, "; same layouts, %lld:%lld instances fit the budget worse", (long long)r->pools[0].replicas,
              (long long)r->pools[1].replicas);
  return sb_take(&sb);
}

/* The results shown as rows (SearchResult.group == its index), at most
 * top (all when 0), into idx (out->results.len entries). Returns the count. */
static size_t shown_rows(const SearchOut *out, size_t top, size_t *idx) {
  size_t n = 0;
  for (size_t i = 0; i < out->results.len && (top == 0 || n < top); i++)
    if (out->results.items[i].group == i) idx[n++] = i;
  return n;
}

/* "also as 2xD(tp4) 327.3, 4xD(tp2) 310.2": the other members of row i's
 * group, with their goodput per GPU; nothing when it has none. */
static void also_put(StrBuf *sb, const SearchOut *out, size_t i) {
  bool first = true;
  for (size_t j = i + 1; j < out->results.len; j++) {
    const SearchResult *o = &out->results.items[j];
    if (o->group != i) continue;
    const SearchPool *d = &o->pools[o->npools - 1];
    sb_printf(sb, "%s%lldx%s(", first ? "also as " : ", ", (long long)d->replicas, "D");
    search_layout_put(sb, &d->lay);
    sb_printf(sb, ") %.1f", o->goodput_gpu);
    first = false;
  }
}

char *search_format_text(const SearchOut *out, const Spec *s, size_t top, bool explain) {
  StrBuf sb;
  sb_init(&sb);
  const CostModel *m = &out->model;
  sb_printf(&sb, "search: %s on %lld GPUs, %lld in / %lld out tokens", s->model.name.v ? s->model.name.v : "model",
            (long long)out->gpu_budget, (long long)m->tin, (long long)m->tout);
  if (m->rate > 0) sb_printf(&sb, " at %g req/s", m->rate);
  sb_printf(&sb, ", slo ttft %.0f ms tpot %.1f ms, headroom %.2f\n", m->slo_ttft * 1e3, m->slo_tpot * 1e3,
            out->headroom);
  sb_printf(&sb, "evaluated %lld candidates (budget %lld%s); valid layouts:", (long long)out->evaluated,
            (long long)out->max_candidates, out->budget_hit ? ", hit" : "");
  static const char *const role_names[3] = {"prefill", "decode", "aggregated"};
  for (int i = 0; i < 3; i++) {
    if (out->layouts[i] < 0) sb_printf(&sb, "%s %s not searched", i ? "," : "", role_names[i]);
    else sb_printf(&sb, "%s %s %lld", i ? "," : "", role_names[i], (long long)out->layouts[i]);
  }
  sb_putc(&sb, '\n');
  if (out->tp_opt > 0 && out->results.len) {
    const SearchResult *w = &out->results.items[0];
    sb_printf(&sb, "MLA attention tp optimum at the winner's decode batch: TP* = %.1f; the winner "
                   "uses attention tp %lld\n",
              out->tp_opt, (long long)w->pools[w->npools - 1].lay.tp);
  }
  sb_printf(&sb, "ranked by %s (--sort %s)%s\n", sort_words(out->sort), search_sort_name(out->sort),
            m->rate > 0 && out->sort != SEARCH_SORT_MIN_GPUS ? ", deployments that serve the offered rate first" : "");
  sb_printf(&sb, "\n%3s  %-6s  %-44s %6s %9s %8s %9s %11s %11s %11s  %-9s %s\n", "#", "mode", "layout", "GPUs",
            "TTFT ms", "TPOT ms", "req/s", "tok/s", "goodput/GPU", "/budgetGPU", "binding", "pareto");
  size_t *idx = rp_malloc((out->results.len ? out->results.len : 1) * sizeof *idx);
  size_t n = shown_rows(out, top, idx);
  for (size_t k = 0; k < n; k++) {
    const SearchResult *r = &out->results.items[idx[k]];
    char *ls = search_layout_str(r);
    sb_printf(&sb, "%3zu  %-6s  %-44s %6lld %9.1f %8.2f %9.2f %11.0f %11.1f %11.1f  %-9s %s\n", k + 1,
              r->mode == SEARCH_AGGREGATED ? "agg" : "disagg", ls, (long long)r->gpus, r->ttft * 1e3,
              r->tpot * 1e3, r->req_s, r->tok_s, r->goodput_gpu, r->goodput_cluster_gpu,
              search_binding_name(r->binding), r->pareto ? "yes" : "");
    free(ls);
    StrBuf also;
    sb_init(&also);
    also_put(&also, out, idx[k]);
    if (also.len) sb_printf(&sb, "%3s  %-6s  %s\n", "", "", also.buf);
    sb_free(&also);
  }
  if (n > 0 && m->rate > 0) {
    const SearchResult *w = &out->results.items[0];
    sb_printf(&sb, "\n#1 serves %.2f of %g req/s offered on %lld of %lld GPUs\n", w->req_s, m->rate,
              (long long)w->gpus, (long long)out->gpu_budget);
  }
  if (explain && n > 0) {
    sb_puts(&sb, "\nwhy the alternatives lost:\n");
    for (size_t k = 0; k < n; k++) {
      char *e = search_explain(out, idx[k]);
      sb_printf(&sb, "%3zu  %s\n", k + 1, e);
      free(e);
    }
  }
  free(idx);
  if (explain) search_rejects_text(&sb, &out->rejects);
  return sb_take(&sb);
}

/* Rounds to a fixed number of decimals so JSON output is short and
 * byte-stable. */
static json_t *jreal(double v, double scale) {
  if (!isfinite(v)) return json_null();
  return json_real(round(v * scale) / scale);
}

static json_t *layout_json(const CostLayout *l) {
  json_t *o = json_object();
  json_object_set_new(o, "tp", json_integer(l->tp));
  json_object_set_new(o, "pp", json_integer(l->pp));
  json_object_set_new(o, "cp", json_integer(l->cp));
  json_object_set_new(o, "dp", json_integer(l->dp));
  json_object_set_new(o, "ep", json_integer(l->ep));
  json_object_set_new(o, "etp", json_integer(l->etp));
  json_object_set_new(o, "dcp", json_integer(l->dcp));
  return o;
}

/* The other members of row i's group as {layout, goodput_tok_s_per_gpu, pareto}. */
static json_t *also_json(const SearchOut *out, size_t i) {
  json_t *a = json_array();
  for (size_t j = i + 1; j < out->results.len; j++) {
    const SearchResult *o = &out->results.items[j];
    if (o->group != i) continue;
    json_t *e = json_object();
    char *ls = search_layout_str(o);
    json_object_set_new(e, "layout", json_string(ls));
    free(ls);
    json_object_set_new(e, "goodput_tok_s_per_gpu", jreal(o->goodput_gpu, 1e2));
    json_object_set_new(e, "pareto", json_boolean(o->pareto));
    json_array_append_new(a, e);
  }
  return a;
}

/* One pool of a result row in the JSON report. */
static json_t *search__pool_json(const SearchPool *sp) {
  json_t *po = json_object();
  json_object_set_new(po, "role", json_string(sp->role == ROLE_PREFILL ? "prefill"
                                              : sp->role == ROLE_DECODE ? "decode" : "both"));
  json_object_set_new(po, "replicas", json_integer(sp->replicas));
  json_object_set_new(po, "gpus_per_instance", json_integer(sp->gpus));
  json_object_set_new(po, "parallel", layout_json(&sp->lay));
  json_object_set_new(po, "batch", json_integer(sp->batch));
  json_object_set_new(po, sp->role == ROLE_PREFILL ? "latency_ms" : "tpot_ms", jreal(sp->latency * 1e3, 1e3));
  json_object_set_new(po, "tok_s_per_gpu", jreal(sp->tok_s_gpu, 1e2));
  json_object_set_new(po, "binding", json_string(search_binding_name(sp->binding)));
  return po;
}

/* Result i of the search as the JSON report's row `rank`. */
static json_t *search__row_json(const SearchOut *out, size_t i, size_t rank, bool explain) {
  const SearchResult *r = &out->results.items[i];
  json_t *o = json_object();
  json_object_set_new(o, "rank", json_integer((json_int_t)rank));
  json_object_set_new(o, "mode", json_string(r->mode == SEARCH_AGGREGATED ? "aggregated" : "disaggregated"));
  char *ls = search_layout_str(r);
  json_object_set_new(o, "layout", json_string(ls));
  free(ls);
  json_t *pools = json_array();
  for (size_t p = 0; p < r->npools; p++) json_array_append_new(pools, search__pool_json(&r->pools[p]));
  json_object_set_new(o, "pools", pools);
  json_object_set_new(o, "gpus", json_integer(r->gpus));
  if (r->mode == SEARCH_DISAGGREGATED) {
    char ratio[48];
    snprintf(ratio, sizeof ratio, "%lld:%lld", (long long)r->ratio_x, (long long)r->ratio_y);
    json_object_set_new(o, "xpyd_gpu_ratio", json_string(ratio));
  }
  json_object_set_new(o, "ttft_ms", jreal(r->ttft * 1e3, 1e3));
  json_object_set_new(o, "queue_ms", jreal(r->queue * 1e3, 1e3));
  json_object_set_new(o, "kv_transfer_ms", jreal(r->kv_transfer * 1e3, 1e3));
  json_object_set_new(o, "tpot_ms", jreal(r->tpot * 1e3, 1e3));
  json_object_set_new(o, "throughput_req_s", jreal(r->req_s, 1e3));
  json_object_set_new(o, "throughput_tok_s", jreal(r->tok_s, 1e1));
  json_object_set_new(o, "goodput_tok_s_per_gpu", jreal(r->goodput_gpu, 1e2));
  json_object_set_new(o, "goodput_tok_s_per_budget_gpu", jreal(r->goodput_cluster_gpu, 1e2));
  json_object_set_new(o, "also", also_json(out, i));
  json_object_set_new(o, "binding", json_string(search_binding_name(r->binding)));
  json_object_set_new(o, "feasible", json_boolean(r->feasible));
  json_object_set_new(o, "pareto", json_boolean(r->pareto));
  if (explain) {
    char *e = search_explain(out, i);
    json_object_set_new(o, "explain", json_string(e));
    free(e);
  }
  return o;
}

/* The search's budget, layout counts and constants: the JSON report's head. */
static void search__head_json(json_t *root, const SearchOut *out) {
  const CostModel *m = &out->model;
  json_object_set_new(root, "gpu_budget", json_integer(out->gpu_budget));
  json_object_set_new(root, "headroom", jreal(out->headroom, 1e6));
  json_t *b = json_object();
  json_object_set_new(b, "max_candidates", json_integer(out->max_candidates));
  json_object_set_new(b, "evaluated", json_integer(out->evaluated));
  json_object_set_new(b, "hit", json_boolean(out->budget_hit));
  json_object_set_new(root, "budget", b);
  json_t *lv = json_object();
  /* null: that role was not searched (deployment.mode, search.aggregated,
   * search.disaggregated). */
  json_object_set_new(lv, "prefill", out->layouts[0] < 0 ? json_null() : json_integer(out->layouts[0]));
  json_object_set_new(lv, "decode", out->layouts[1] < 0 ? json_null() : json_integer(out->layouts[1]));
  json_object_set_new(lv, "aggregated", out->layouts[2] < 0 ? json_null() : json_integer(out->layouts[2]));
  json_object_set_new(root, "valid_layouts", lv);
  json_t *k = json_object();
  size_t nk;
  const CostConstInfo *t = cost_const_table(&nk);
  for (size_t i = 0; i < nk; i++)
    json_object_set_new(k, t[i].name, json_real(*(const double *)((const char *)&m->k + t[i].offset)));
  json_object_set_new(root, "constants", k);
  json_object_set_new(root, "mla_tp_opt", out->tp_opt > 0 ? jreal(out->tp_opt, 1e3) : json_null());
  json_object_set_new(root, "sort", json_string(search_sort_name(out->sort)));
  json_object_set_new(root, "offered_req_s", m->rate > 0 ? jreal(m->rate, 1e6) : json_null());
}

char *search_format_json(const SearchOut *out, const Spec *s, size_t top, bool explain) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("rankplan.search/1"));
  json_object_set_new(root, "spec_sha256", json_string(s->sha256));
  search__head_json(root, out);
  json_t *arr = json_array();
  size_t *idx = rp_malloc((out->results.len ? out->results.len : 1) * sizeof *idx);
  size_t n = shown_rows(out, top, idx);
  for (size_t row = 0; row < n; row++) json_array_append_new(arr, search__row_json(out, idx[row], row + 1, explain));
  free(idx);
  json_object_set_new(root, "results", arr);
  if (explain) json_object_set_new(root, "rejected", search_rejects_json(&out->rejects));
  char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(root);
  char *res = rp_sprintf("%s\n", txt);
  free(txt);
  return res;
}
