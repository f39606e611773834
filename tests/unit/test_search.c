/*
 * test_search.c: the layout search (compiler/search.c): rules, the xPyD
 * integer search, ranking, the Pareto frontier, determinism, the budget
 * and the SLO diagnostics, on in-memory specs of public models (shapes
 * from each checkpoint's config.json, H200 figures from NVIDIA's
 * datasheet; see test_cost.c).
 *
 * `test_search --bench GPUS` runs the DeepSeek-V3 aggregated +
 * disaggregated search on GPUS H200s and prints the wall time; it asserts
 * nothing about time (tests/bench/bench_search.sh records the figures).
 */
#include <jansson.h>
#include <time.h>

#include "engines.h"
#include "search.h"
#include "search_space.h"
#include "t.h"

#include "cost_fixtures.h"

static bool has_code(Diags *d, DiagCode c) {
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == c) return true;
  return false;
}

static bool run(Spec *s, SearchOptions *o, SearchOut *out, Diags *d) {
  CostConsts k;
  cost_consts_default(&k);
  diags_init(d);
  return search_run(d, s, &k, o, out);
}

static CostModel model_of(Spec *s) {
  CostConsts k;
  cost_consts_default(&k);
  CostModel m;
  Diags d;
  diags_init(&d);
  T_CHECK(cost_model_init(&d, s, &k, &m));
  diags_free(&d);
  return m;
}

static void test_rules(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  const char *why = NULL;
  CostLayout ok = {8, 1, 1, 1, 1, 1, 1};
  T_CHECK(search_layout_valid(&m, &ok, ROLE_DECODE, false, &why));
  T_CHECK(why == NULL);
  CostLayout bad_tp = {3, 1, 1, 1, 1, 1, 1};
  T_CHECK(!search_layout_valid(&m, &bad_tp, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "tensor parallel size does not divide the attention heads");
  CostLayout wide = {16, 1, 1, 1, 1, 1, 1};
  T_CHECK(!search_layout_valid(&m, &wide, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "tensor parallel group wider than the NVLink (scale-up) domain");
  T_CHECK(search_layout_valid(&m, &wide, ROLE_DECODE, true, &why));
  CostLayout ep = {8, 1, 1, 1, 2, 1, 1};
  T_CHECK(!search_layout_valid(&m, &ep, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "expert parallelism needs a MoE model");
  CostLayout cpd = {4, 1, 2, 1, 1, 1, 1};
  T_CHECK(search_layout_valid(&m, &cpd, ROLE_PREFILL, false, &why));
  T_CHECK(!search_layout_valid(&m, &cpd, ROLE_DECODE, false, &why));
  /* GQA dcp: at most tp / kv_heads; tp 8 over 8 KV heads leaves none. */
  CostLayout dcp = {8, 1, 1, 1, 1, 1, 2};
  T_CHECK(!search_layout_valid(&m, &dcp, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "decode context parallel size does not divide tp / KV heads");

  Spec v3 = dsv3(16);
  CostModel d = model_of(&v3);
  CostLayout mla_cp = {8, 1, 2, 1, 1, 1, 1};
  T_CHECK(!search_layout_valid(&d, &mla_cp, ROLE_PREFILL, false, &why));
  T_EQ_STR(why, "MLA attention cannot split heads for context parallelism");
  CostLayout e3 = {8, 1, 1, 1, 3, 1, 1};
  T_CHECK(!search_layout_valid(&d, &e3, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "expert parallel size does not divide the expert slots");
  CostLayout e16 = {8, 1, 1, 1, 16, 1, 1};
  T_CHECK(!search_layout_valid(&d, &e16, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "ep * etp does not divide the instance's tp * cp * attention data parallel ranks");
  CostLayout e16d = {8, 1, 1, 2, 16, 1, 1};
  T_CHECK(search_layout_valid(&d, &e16d, ROLE_DECODE, false, &why));
  CostLayout mla_dcp = {8, 1, 1, 1, 8, 1, 8};
  T_CHECK(search_layout_valid(&d, &mla_dcp, ROLE_DECODE, false, &why));
}

static void test_xpyd_best(void) {
  int64_t x = 0, y = 0, ev = 0;
  bool cut = false;
  /* Prefill instances serve 2 req/s, decode 1 req/s: y = 2x balances;
   * 8-GPU instances on 64 GPUs: 2P4D (48 GPUs, 4 req/s = 1/12 per GPU)
   * beats 3P5D (64 GPUs, 5 req/s = 5/64 per GPU). */
  T_CHECK(search_xpyd_best(8, 8, 2.0, 1.0, 64, INT64_MAX, &x, &y, &ev, &cut));
  T_EQ_INT(x, 2);
  T_EQ_INT(y, 4);
  T_CHECK(ev > 0);
  /* Ties in rate per GPU go to the larger deployment. */
  T_CHECK(search_xpyd_best(8, 8, 1.0, 1.0, 64, INT64_MAX, &x, &y, &ev, &cut));
  T_EQ_INT(x, 4);
  T_EQ_INT(y, 4);
  /* 1P1D does not fit. */
  T_CHECK(!search_xpyd_best(8, 16, 1.0, 1.0, 16, INT64_MAX, &x, &y, &ev, &cut));
  T_CHECK(!cut);
}

/* Packing on nodes (search_pack_max): instances of a node or less stay
 * inside one node, larger ones take whole nodes of their own. */
static void test_pack(void) {
  SearchPack pk = {8, 2};
  T_EQ_INT(search_pack_max(&pk, 6, 1, 6), 1);  /* 6 + 6 on two 8-GPU nodes: one each */
  T_EQ_INT(search_pack_max(&pk, 3, 2, 2), 5);  /* 3 + 3 leave 2 of node 0, then 4 of 2 on node 1 */
  T_EQ_INT(search_pack_max(&pk, 3, 5, 2), -1); /* five of 3 need three nodes */
  T_EQ_INT(search_pack_max(&pk, 0, 0, 16), 1);
  T_EQ_INT(search_pack_max(&pk, 2, 1, 8), 1);  /* a whole node after 2 GPUs of node 0 */
  T_EQ_INT(search_pack_max(NULL, 6, 1, 6), INT64_MAX);
  pk.nodes = 0; /* generic: no such limit */
  T_EQ_INT(search_pack_max(&pk, 6, 1, 6), INT64_MAX);
  char buf[200];
  pk.nodes = 2;
  T_CHECK(search_pack_reject(&pk, "vllm", 9, buf, sizeof buf) != NULL);
  T_CHECK(search_pack_reject(&pk, "vllm", 16, buf, sizeof buf) == NULL);
  T_CHECK(search_pack_reject(&pk, "vllm", 6, buf, sizeof buf) == NULL);
  /* xPyD under the packing: 6-GPU prefill and decode instances on two
   * 8-GPU nodes are 1P1D at most, where 16 GPUs alone would allow 2P0D */
  int64_t x = 0, y = 0, ev = 0;
  bool cut = false;
  T_CHECK(search_xpyd_best_step(6, 6, 1.0, 2.0, 16, 1, &pk, INT64_MAX, &x, &y, &ev, &cut));
  T_CHECK(x == 1 && y == 1);
  pk.gpn = 4; /* 6-GPU instances on 4-GPU nodes never pack */
  T_CHECK(!search_xpyd_best_step(6, 6, 1.0, 2.0, 16, 1, &pk, INT64_MAX, &x, &y, &ev, &cut));
  /* vLLM over nodes: dp 1 (Ray), or whole engines a node with pp inside
   * dp in the rank order */
  int64_t v[ED__COUNT] = {4, 2, 2, 1, 8, 1, 1}; /* tp 4, pp 2, dp 2 on 8-GPU nodes */
  T_CHECK(engine_vllm_nodes_refusal(v, 8, NULL) != NULL);
  T_CHECK(engine_vllm_nodes_refusal(v, 8, "tp-cp-ep-pp-dp") == NULL);
  T_CHECK(engine_vllm_nodes_refusal(v, 16, NULL) == NULL); /* one node */
  v[ED_PP] = 1;
  v[ED_DP] = 4;
  T_CHECK(engine_vllm_nodes_refusal(v, 8, NULL) == NULL);
  v[ED_TP] = 16;
  v[ED_DP] = 2;
  T_CHECK(engine_vllm_nodes_refusal(v, 8, NULL) != NULL); /* an engine over two nodes with dp 2 */
  v[ED_DP] = 1;
  T_CHECK(engine_vllm_nodes_refusal(v, 8, NULL) == NULL); /* Ray */
}

/* The xPyD step counts against the search budget: on 2^18 GPUs of 1-GPU
 * instances it would try about 2^18 x values; with a budget of 1,000 it
 * tries exactly 1,000 points, says so, and keeps the best of them. At and
 * above the number of points it needs, the budget does not cut. */
static void test_xpyd_budget(void) {
  int64_t x = 0, y = 0, ev = 0, all = 0;
  bool cut = false;
  T_CHECK(search_xpyd_best(1, 1, 2.0, 1.0, 262144, 1000, &x, &y, &ev, &cut));
  T_CHECK(cut);
  T_EQ_INT(ev, 1000);
  T_CHECK(x >= 1 && y >= 1 && x + y <= 262144);
  T_CHECK(search_xpyd_best(8, 8, 2.0, 1.0, 64, INT64_MAX, &x, &y, &all, &cut));
  T_CHECK(!cut);
  ev = 0;
  T_CHECK(search_xpyd_best(8, 8, 2.0, 1.0, 64, all, &x, &y, &ev, &cut));
  T_CHECK(!cut);
  T_EQ_INT(ev, all);
  T_EQ_INT(x, 2);
  T_EQ_INT(y, 4);
  ev = 0;
  T_CHECK(search_xpyd_best(8, 8, 2.0, 1.0, 64, all - 1, &x, &y, &ev, &cut));
  T_CHECK(cut);
  T_EQ_INT(ev, all - 1);
  ev = 0;
  T_CHECK(!search_xpyd_best(8, 8, 2.0, 1.0, 64, 0, &x, &y, &ev, &cut));
  T_CHECK(cut);
  T_EQ_INT(ev, 0);
}

/* A GPU of 2^63 - 1 bytes used in full: the ledger, the cost model and
 * the decode batch work with counts near 2^63 without converting a double
 * past INT64_MAX (the UBSan build stops on such a conversion) and the
 * search still ranks something. */
static void test_huge_gpu(void) {
  Spec s = llama70b(1);
  s.hardware.gpu.memory.v = INT64_MAX;
  s.deployment.memory.utilization.v = 1.0;
  s.deployment.memory.utilization.set = true;
  SearchOptions o;
  memset(&o, 0, sizeof o);
  o.max_candidates = 2000;
  SearchOut out;
  Diags d;
  run(&s, &o, &out, &d);
  T_CHECK(out.evaluated > 0 && out.evaluated <= 2000);
  T_CHECK(out.model.gpu_mem > 0);
  search_out_free(&out);
  diags_free(&d);
  /* An offered load of 1e300 req/s: the instances it needs are past
   * INT64_MAX; every deployment is bound by the GPUs it has. */
  s = llama70b(4);
  s.workload.rate.v = 1e300;
  s.workload.rate.set = true;
  memset(&o, 0, sizeof o);
  run(&s, &o, &out, &d);
  T_CHECK(out.results.len > 0);
  for (size_t i = 0; i < out.results.len; i++)
    T_CHECK(out.results.items[i].binding == BIND_GPUS || !out.results.items[i].feasible);
  search_out_free(&out);
  diags_free(&d);
}

/* nodes x gpus_per_node past 2^63 in a Spec made by hand: E0501 at
 * hardware.nodes, naming the cluster, not the model's parameter count. */
static void test_cluster_overflow(void) {
  Spec s = llama70b(4);
  s.hardware.nodes.v = (int64_t)1 << 62;
  s.hardware.nodes.loc = (SrcLoc){"t.yaml", 14, 10};
  s.hardware.nodes.set = true;
  CostConsts k;
  cost_consts_default(&k);
  CostModel m;
  Diags d;
  diags_init(&d);
  T_CHECK(!cost_model_init(&d, &s, &k, &m));
  T_CHECK(d.list.len == 1 && d.list.items[0]->code == DIAG_E0501);
  if (d.list.len == 1) {
    T_CHECK(strstr(d.list.items[0]->msg, "cluster's GPU count") != NULL);
    T_EQ_INT(d.list.items[0]->loc.line, 14);
  }
  diags_free(&d);
}

static void test_llama_search(void) {
  Spec s = llama70b(4);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  T_EQ_INT(d.nerrors, 0);
  T_CHECK(out.results.len > 0);
  T_EQ_INT(out.gpu_budget, 32);
  const SearchResult *w = &out.results.items[0];
  T_CHECK(w->feasible);
  T_CHECK(w->pareto);
  /* within the SLOs, to the search's own tolerance (a winner bound by
   * the TTFT SLO sits on it) */
  T_CHECK(w->ttft <= 0.6 * (1 + 1e-9) && w->tpot <= 0.04);
  T_CHECK(w->gpus <= 32);
  T_CHECK(w->goodput_gpu > 0);
  /* Ranked: feasible first, goodput/GPU descending. */
  bool seen_bad = false, agg = false, dis = false;
  for (size_t i = 0; i < out.results.len; i++) {
    const SearchResult *r = &out.results.items[i];
    if (!r->feasible) seen_bad = true;
    T_CHECK(!(seen_bad && r->feasible));
    if (i) T_CHECK(!r->feasible || r->goodput_gpu <= out.results.items[i - 1].goodput_gpu);
    if (r->mode == SEARCH_AGGREGATED) agg = true;
    else dis = true;
    /* Every layout the search produced fits the budget and passes the rules. */
    T_CHECK(r->gpus <= 32);
    for (size_t p = 0; p < r->npools; p++) {
      T_CHECK(search_layout_valid(&out.model, &r->pools[p].lay, r->pools[p].role, false, NULL));
      T_EQ_INT(r->pools[p].gpus, cost_layout_gpus(&r->pools[p].lay));
    }
    /* Disaggregated TTFT = queue + prefill + KV transfer + the time
     * outside the GPU. */
    if (r->mode == SEARCH_DISAGGREGATED && r->feasible)
      T_NEAR(r->ttft,
             r->queue + r->pools[0].latency + r->kv_transfer + out.model.k.request_overhead_s,
             1e-9);
  }
  T_CHECK(agg && dis);
  /* Pareto, both ways: a feasible result is on the frontier exactly when no
   * other feasible result is at least as good on goodput/GPU, TTFT and TPOT
   * and better on one of them; an infeasible one never is. Both kinds must
   * occur, or the check would not tell a right frontier from "all" or
   * "none". */
  size_t on = 0, off = 0;
  for (size_t i = 0; i < out.results.len; i++) {
    const SearchResult *a = &out.results.items[i];
    bool dominated = false;
    for (size_t j = 0; j < out.results.len; j++) {
      const SearchResult *b = &out.results.items[j];
      if (!b->feasible || i == j) continue;
      if (b->goodput_gpu >= a->goodput_gpu && b->ttft <= a->ttft && b->tpot <= a->tpot &&
          (b->goodput_gpu > a->goodput_gpu || b->ttft < a->ttft || b->tpot < a->tpot))
        dominated = true;
    }
    T_EQ_INT(a->pareto, a->feasible && !dominated);
    if (a->feasible) {
      if (a->pareto) on++;
      else off++;
    }
  }
  T_CHECK(on >= 2 && off >= 1);
  /* Deterministic: a second run gives the same bytes. */
  char *j1 = search_format_json(&out, &s, 0, true);
  char *t1 = search_format_text(&out, &s, 10, true);
  SearchOut out2;
  Diags d2;
  T_CHECK(run(&s, &o, &out2, &d2));
  char *j2 = search_format_json(&out2, &s, 0, true);
  T_EQ_STR(j1, j2);
  /* The JSON is valid and carries the table's fields. */
  json_error_t je;
  json_t *root = json_loads(j1, 0, &je);
  T_CHECK(root != NULL);
  T_EQ_STR(json_string_value(json_object_get(root, "format")), "rankplan.search/1");
  json_t *r0 = json_array_get(json_object_get(root, "results"), 0);
  T_CHECK(json_is_number(json_object_get(r0, "goodput_tok_s_per_gpu")));
  T_CHECK(json_is_string(json_object_get(r0, "binding")));
  T_CHECK(json_is_string(json_object_get(r0, "explain")));
  json_decref(root);
  T_CHECK(strstr(t1, "goodput/GPU") != NULL);
  T_CHECK(strstr(t1, "why the alternatives lost") != NULL);
  /* The explanation of the runner-up names its loss against #1. */
  char *e1 = search_explain(&out, 1);
  T_CHECK(strstr(e1, "than #1") != NULL || strstr(e1, "misses") != NULL ||
          (strstr(e1, "ties #1") != NULL && strstr(e1, "ranked lower on") != NULL));
  free(e1);
  free(j1);
  free(j2);
  free(t1);
  search_out_free(&out);
  search_out_free(&out2);
  diags_free(&d);
  diags_free(&d2);
}

static void test_modes_and_rate(void) {
  Spec s = llama70b(4);
  s.deployment.mode.v = MODE_AGGREGATED;
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  for (size_t i = 0; i < out.results.len; i++)
    T_CHECK(out.results.items[i].mode == SEARCH_AGGREGATED);
  search_out_free(&out);
  diags_free(&d);

  /* With an offered load that a few instances serve, the winner serves
   * exactly that load and says the load binds. */
  s.deployment.mode.v = MODE_DISAGGREGATED;
  s.workload.rate.v = 1.0;
  s.workload.rate.set = true;
  T_CHECK(run(&s, &o, &out, &d));
  const SearchResult *w = &out.results.items[0];
  T_CHECK(w->mode == SEARCH_DISAGGREGATED);
  T_NEAR(w->req_s, 1.0, 1e-12);
  T_CHECK(w->binding == BIND_LOAD || w->binding == BIND_TTFT || w->binding == BIND_HEADROOM);
  T_CHECK(w->gpus < 32);
  search_out_free(&out);
  diags_free(&d);
}

static void test_budget_and_slo(void) {
  Spec s = llama70b(4);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  o.max_candidates = 20;
  SearchOut out;
  Diags d;
  run(&s, &o, &out, &d);
  T_CHECK(out.budget_hit);
  T_CHECK(out.evaluated <= 20);
  T_CHECK(has_code(&d, DIAG_W0500));
  search_out_free(&out);
  diags_free(&d);

  /* A TPOT no layout reaches: E0508 (no decode layout meets it). */
  memset(&o, 0, sizeof o);
  s.slo.tpot.v = 1e-4;
  T_CHECK(!run(&s, &o, &out, &d));
  T_CHECK(has_code(&d, DIAG_E0508));
  search_out_free(&out);
  diags_free(&d);

  /* A TTFT below prefill latency + KV transfer for every pairing: E0500 or
   * E0508, never a result that claims to meet it. */
  s.slo.tpot.v = 0.04;
  s.slo.ttft.v = 0.05;
  T_CHECK(!run(&s, &o, &out, &d));
  T_CHECK(has_code(&d, DIAG_E0500) || has_code(&d, DIAG_E0508));
  for (size_t i = 0; i < out.results.len; i++) T_CHECK(!out.results.items[i].feasible);
  search_out_free(&out);
  diags_free(&d);

  s.slo.ttft.v = 0;
  T_CHECK(!run(&s, &o, &out, &d));
  T_CHECK(has_code(&d, DIAG_E0507));
  search_out_free(&out);
  diags_free(&d);
}

static void test_dsv3_search(void) {
  Spec s = dsv3(16);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  T_CHECK(out.results.len > 0 && out.results.items[0].feasible);
  /* MLA: the search reports the attention tp optimum. */
  T_CHECK(out.tp_opt > 0);
  T_CHECK(!out.budget_hit);
  search_out_free(&out);
  diags_free(&d);
}


/* The search space covers every size the rules allow, not only powers of
 * two: Llama-3.1-70B (bf16, about 141 GB of weights) on a budget of 3 H200
 * GPUs fits as tp 1 with pp 3 (64 heads allow no tp 3); a powers-of-two
 * search would never evaluate it. */
static void test_space_not_pow2(void) {
  Spec s = llama70b(1);
  workload(&s, 1000, 200, 5.0, 0.2);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  o.gpu_budget = 3;
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  bool pp3 = false;
  for (size_t i = 0; i < out.results.len; i++)
    for (size_t p = 0; p < out.results.items[i].npools; p++)
      if (out.results.items[i].pools[p].lay.pp == 3 && out.results.items[i].pools[p].lay.tp == 1)
        pp3 = true;
  T_CHECK(pp3);
  search_out_free(&out);
  diags_free(&d);
  /* DeepSeek-V3 on 3 nodes: ep runs over the divisors of 256 experts that
   * divide the instance's ranks, so dp 3 (24 ranks at tp 8) pairs with ep
   * 8 only; the rules accept it and reject ep 3. */
  Spec v3 = dsv3(3);
  CostModel m = model_of(&v3);
  const char *why = NULL;
  CostLayout dp3 = {8, 1, 1, 3, 8, 1, 1};
  T_CHECK(search_layout_valid(&m, &dp3, ROLE_DECODE, false, &why));
  CostLayout ep3 = {8, 1, 1, 3, 3, 1, 1};
  T_CHECK(!search_layout_valid(&m, &ep3, ROLE_DECODE, false, &why));
  /* Expert GEMMs under one 128-wide tile (the model stage's W0203):
   * 2048 columns over etp 32 is 64. */
  CostLayout narrow = {8, 1, 1, 4, 1, 32, 1};
  T_CHECK(!search_layout_valid(&m, &narrow, ROLE_DECODE, false, &why));
  T_EQ_STR(why, "expert GEMMs narrower than one 128-wide tile (W0203)");
}

/* Qwen1.5-MoE-A2.7B (config.json of Qwen/Qwen1.5-MoE-A2.7B: 24 layers,
 * hidden 2048, 16 heads and 16 KV heads, 60 routed experts with top 4,
 * moe_intermediate_size 1408, shared_expert_intermediate_size 5632, that
 * is 4 shared experts of 1408, vocab 151936, bf16). */
static Spec qwen_moe(int64_t nodes) {
  Spec s;
  memset(&s, 0, sizeof s);
  ModelSpec *m = &s.model;
  m->name.v = "qwen1.5-moe-a2.7b";
  m->layers = (SInt)SI(24);
  m->hidden_size = (SInt)SI(2048);
  m->vocab_size = (SInt)SI(151936);
  m->attention.kind.v = ATTN_MHA;
  m->attention.kind.set = true;
  m->attention.heads = (SInt)SI(16);
  m->attention.kv_heads = (SInt)SI(16);
  m->attention.head_dim = (SInt)SI(128);
  m->ffn.intermediate_size = (SInt)SI(5632);
  m->moe.present = true;
  m->moe.experts = (SInt)SI(60);
  m->moe.top_k = (SInt)SI(4);
  m->moe.shared_experts = (SInt)SI(4);
  m->moe.expert_intermediate_size = (SInt)SI(1408);
  m->dtype.weights.v = DT_BF16;
  m->dtype.kv_cache.v = DT_BF16;
  m->dtype.activations.v = DT_BF16;
  m->max_context = (SInt)SI(8192);
  hw_h200(&s, nodes);
  workload(&s, 2000, 200, 2.0, 0.05);
  return s;
}

/* ep over every divisor of the expert count that divides the ranks: 60
 * experts on a budget of 3 GPUs give ep 3 (tp 1, dp 3), which powers of
 * two never reach; with so few layouts every one is shortlisted, so it
 * shows in the results. */
static void test_space_ep3(void) {
  Spec s = qwen_moe(1);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  o.gpu_budget = 3;
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  bool ep3 = false;
  for (size_t i = 0; i < out.results.len; i++)
    for (size_t p = 0; p < out.results.items[i].npools; p++) {
      const CostLayout *l = &out.results.items[i].pools[p].lay;
      if (l->ep == 3 && l->dp == 3) ep3 = true;
    }
  T_CHECK(ep3);
  search_out_free(&out);
  diags_free(&d);
}

/* The fast path (per-stage ledger once per distinct stage, aggregated
 * layouts reusing prefill memory verdicts, validate_pool on the shortlist
 * only) prints the same bytes as the strict path that runs the ledger and
 * validate_pool on every layout. */
static void test_strict_same(void) {
  Spec specs[3] = {llama70b(2), dsv3(4), qwen_moe(1)};
  for (int i = 0; i < 3; i++) {
    char *txt[2];
    for (int strict = 0; strict < 2; strict++) {
      SearchOptions o;
      memset(&o, 0, sizeof o);
      o.strict = strict;
      SearchOut out;
      Diags d;
      run(&specs[i], &o, &out, &d);
      T_CHECK(out.results.len > 0);
      txt[strict] = search_format_text(&out, &specs[i], 0, true);
      search_out_free(&out);
      diags_free(&d);
    }
    T_EQ_STR(txt[0], txt[1]);
    free(txt[0]);
    free(txt[1]);
  }
}

/* --explain: every alternative after the winner says why it lost, with
 * its goodput against the winner's and the binding constraint of both. */
static void test_explain_alternatives(void) {
  Spec s = dsv3(4);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  Diags d;
  T_CHECK(run(&s, &o, &out, &d));
  T_CHECK(out.results.len >= 5);
  size_t n = out.results.len < 8 ? out.results.len : 8;
  for (size_t i = 1; i < n; i++) {
    char *e = search_explain(&out, i);
    const SearchResult *r = &out.results.items[i];
    if (r->feasible) {
      T_CHECK(strstr(e, "less goodput/GPU than #1") || strstr(e, "ties #1 on goodput/GPU"));
      char want[256];
      SearchBinding wb = out.results.items[0].binding;
      snprintf(want, sizeof want, "bound by %s (#1: %s)", search_binding_words(r->binding),
               wb == r->binding ? "the same" : search_binding_words(wb));
      T_CHECK(strstr(e, want) != NULL);
      T_CHECK(strstr(e, "tok/s/GPU") != NULL);
    } else {
      T_CHECK(strstr(e, "misses the") != NULL);
    }
    free(e);
  }
  /* The MLA attention tp optimum is printed next to the winner's tp. */
  char *txt = search_format_text(&out, &s, 3, false);
  T_CHECK(strstr(txt, "TP* = ") != NULL);
  T_CHECK(strstr(txt, "the winner uses attention tp") != NULL);
  free(txt);
  search_out_free(&out);
  diags_free(&d);
}

static int bench(int64_t gpus) {
  Spec s = dsv3(gpus / 8);
  SearchOptions o;
  memset(&o, 0, sizeof o);
  SearchOut out;
  Diags d;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  bool ok = run(&s, &o, &out, &d);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  char *ls = out.results.len ? search_layout_str(&out.results.items[0]) : rp_strdup("-");
  printf("%lld GPUs: %.1f ms, %lld candidates, layouts P/D/agg %lld/%lld/%lld, winner %s (%.1f tok/s/GPU)\n",
         (long long)gpus, ms, (long long)out.evaluated, (long long)out.layouts[0],
         (long long)out.layouts[1], (long long)out.layouts[2], ls,
         out.results.len ? out.results.items[0].goodput_gpu : 0.0);
  free(ls);
  search_out_free(&out);
  diags_free(&d);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--bench") == 0) return bench(atoll(argv[2]));
  T_RUN(test_rules);
  T_RUN(test_xpyd_best);
  T_RUN(test_xpyd_budget);
  T_RUN(test_pack);
  T_RUN(test_huge_gpu);
  T_RUN(test_cluster_overflow);
  T_RUN(test_llama_search);
  T_RUN(test_modes_and_rate);
  T_RUN(test_budget_and_slo);
  T_RUN(test_dsv3_search);
  T_RUN(test_space_not_pow2);
  T_RUN(test_space_ep3);
  T_RUN(test_strict_same);
  T_RUN(test_explain_alternatives);
  T_DONE();
}
