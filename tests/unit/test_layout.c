/*
 * test_layout.c: the rank generator, layer partitions, lay_build and
 * placement.
 *
 * How the expected groups were established. Megatron-Core builds its
 * process groups in megatron/core/parallel_state.py with
 * RankGenerator(tp, ep, dp, pp, cp, order).get_ranks(token), which calls
 * generate_masked_orthogonal_rank_groups(world, ordered sizes, mask). The
 * vectors below come from three sources, each marked:
 *  [doc-init]  the worked example in initialize_model_parallel's docstring:
 *              16 GPUs, tp 2, pp 4 (so dp 2), default order, listing the
 *              8 tp, 8 dp and 4 pp groups;
 *  [doc-gen]   generate_masked_orthogonal_rank_groups' docstring: sizes
 *              [tp, dp, pp] = [2, 3, 4] with the dp mask gives dp_group[0] =
 *              [0, 2, 4], dp_group[1] = [1, 3, 5], dp_group[7] = [19, 21, 23];
 *              and order tp-pp-dp, sizes 2-2-2: dp groups [[0,4],[1,5],[2,6],[3,7]];
 *  [doc-cp]    the context_parallel_size docstring: 8 GPUs, tp 4, cp 2:
 *              cp groups [0,4], [1,5], [2,6], [3,7];
 *  [hand]      worked by hand from the published algorithm: rank =
 *              sum(index_i * stride_i), stride the prefix product of the
 *              ordered sizes; the masked dimensions vary inside a group
 *              (innermost first) and the unmasked ones enumerate groups.
 */
#include <stdlib.h>

#include "layout.h"
#include "t.h"

static bool groups_eq(const RankGen *g, const char *token, int64_t ng, int64_t gs,
                      const int32_t *want) {
  int64_t n, s;
  int32_t *got;
  if (!lay_rankgen_groups(g, token, &n, &s, &got)) return false;
  bool ok = n == ng && s == gs && memcmp(got, want, (size_t)(ng * gs) * sizeof *got) == 0;
  if (!ok) {
    fprintf(stderr, "  %s: got %lld groups of %lld:", token, (long long)n, (long long)s);
    for (int64_t i = 0; i < n * s; i++) fprintf(stderr, " %d", got[i]);
    fputc('\n', stderr);
  }
  free(got);
  return ok;
}

static void test_doc_init(void) {
  /* [doc-init] */
  RankGen g;
  const char *err = NULL;
  T_CHECK(lay_rankgen_init(&g, "tp-cp-ep-dp-pp", 2, 1, 2, 4, 1, &err));
  T_EQ_INT(g.world, 16);
  static const int32_t dp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  static const int32_t tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int32_t pp[] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  T_CHECK(groups_eq(&g, "dp", 8, 2, dp));
  T_CHECK(groups_eq(&g, "tp", 8, 2, tp));
  T_CHECK(groups_eq(&g, "pp", 4, 4, pp));
  /* [hand] model parallel (tp-pp) of the same example: tp varies first. */
  static const int32_t tpp[] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
  T_CHECK(groups_eq(&g, "tp-pp", 2, 8, tpp));
  T_EQ_INT(lay_rankgen_coord(&g, 13, "tp"), 1);
  T_EQ_INT(lay_rankgen_coord(&g, 13, "dp"), 0);
  T_EQ_INT(lay_rankgen_coord(&g, 13, "pp"), 3);
}

static void test_doc_gen(void) {
  /* [doc-gen] parallel_size [tp, dp, pp] = [2, 3, 4], mask dp. */
  RankGen g;
  const char *err = NULL;
  T_CHECK(lay_rankgen_init(&g, "tp-dp-pp", 2, 1, 3, 4, 1, &err));
  int64_t n, s;
  int32_t *r;
  T_CHECK(lay_rankgen_groups(&g, "dp", &n, &s, &r));
  T_EQ_INT(n, 8);
  T_EQ_INT(s, 3);
  T_EQ_INT(r[0], 0);
  T_EQ_INT(r[1], 2);
  T_EQ_INT(r[2], 4);
  T_EQ_INT(r[3], 1);
  T_EQ_INT(r[4], 3);
  T_EQ_INT(r[5], 5);
  T_EQ_INT(r[21], 19);
  T_EQ_INT(r[22], 21);
  T_EQ_INT(r[23], 23);
  free(r);
  /* [doc-gen] order tp-pp-dp, sizes 2-2-2: dp groups. */
  T_CHECK(lay_rankgen_init(&g, "tp-pp-dp", 2, 1, 2, 2, 1, &err));
  static const int32_t dp[] = {0, 4, 1, 5, 2, 6, 3, 7};
  T_CHECK(groups_eq(&g, "dp", 4, 2, dp));
}

static void test_doc_cp(void) {
  /* [doc-cp] 8 GPUs, tp 4, cp 2. */
  RankGen g;
  const char *err = NULL;
  T_CHECK(lay_rankgen_init(&g, "tp-cp-ep-dp-pp", 4, 1, 1, 1, 2, &err));
  static const int32_t cp[] = {0, 4, 1, 5, 2, 6, 3, 7};
  T_CHECK(groups_eq(&g, "cp", 4, 2, cp));
  /* [hand] tp-cp spans all 8; dp-cp equals cp when dp is 1. */
  static const int32_t tcp[] = {0, 1, 2, 3, 4, 5, 6, 7};
  T_CHECK(groups_eq(&g, "tp-cp", 1, 8, tcp));
  T_CHECK(groups_eq(&g, "dp-cp", 4, 2, cp));
}

static void test_hand_orders(void) {
  RankGen g;
  const char *err = NULL;
  /* [hand] tp 2, dp 2, pp 2 with order pp-tp-dp (pp innermost): strides
   * pp 1, tp 2, dp 4. tp groups vary the tp index at stride 2. */
  T_CHECK(lay_rankgen_init(&g, "pp-tp-dp", 2, 1, 2, 2, 1, &err));
  static const int32_t tp[] = {0, 2, 1, 3, 4, 6, 5, 7};
  static const int32_t pp[] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int32_t dp[] = {0, 4, 1, 5, 2, 6, 3, 7};
  T_CHECK(groups_eq(&g, "tp", 4, 2, tp));
  T_CHECK(groups_eq(&g, "pp", 4, 2, pp));
  T_CHECK(groups_eq(&g, "dp", 4, 2, dp));
  /* [hand] tp-dp-cp over tp 2, cp 2, dp 2, pp 2 (default order): one group
   * per pp stage, each the 8 ranks of that stage. */
  T_CHECK(lay_rankgen_init(&g, NULL, 2, 1, 2, 2, 2, &err));
  static const int32_t tdc[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  T_CHECK(groups_eq(&g, "tp-dp-cp", 2, 8, tdc));
  /* [hand] a dimension left out of the order is appended when its size is
   * 1 and refused otherwise, as RankGenerator.__init__ does. */
  T_CHECK(lay_rankgen_init(&g, "tp-dp", 2, 1, 2, 1, 1, &err));
  T_EQ_INT(g.ndims, 5);
  T_CHECK(!lay_rankgen_init(&g, "tp-dp", 2, 1, 2, 2, 1, &err));
  T_CHECK(!lay_rankgen_init(&g, "tp-cp-ep-dp-pp", 1, 2, 1, 1, 2, &err)); /* ep and cp */
  T_CHECK(!lay_rankgen_init(&g, "tp-tp-dp", 1, 1, 1, 1, 1, &err));
  T_CHECK(!lay_rankgen_init(&g, "tp-xx", 1, 1, 1, 1, 1, &err));
  int64_t n, s;
  int32_t *r = NULL;
  T_CHECK(lay_rankgen_init(&g, "tp-dp", 2, 1, 2, 1, 1, &err));
  T_CHECK(!lay_rankgen_groups(&g, "zz", &n, &s, &r));
}

static void test_hand_expert(void) {
  /* [hand] the expert generator of initialize_model_parallel: tp = etp,
   * ep, dp = edp = tp*cp*dp / (etp*ep), cp 1, same order. Instance tp 2,
   * dp 2 (4 ranks), etp 1, ep 2 → edp 2; sizes [1, 1, 2, 2, 1]. */
  RankGen e;
  const char *err = NULL;
  T_CHECK(lay_rankgen_init(&e, "tp-cp-ep-dp-pp", 1, 2, 2, 1, 1, &err));
  static const int32_t ep[] = {0, 1, 2, 3};
  static const int32_t edp[] = {0, 2, 1, 3};
  static const int32_t etp[] = {0, 1, 2, 3};
  T_CHECK(groups_eq(&e, "ep", 2, 2, ep));
  T_CHECK(groups_eq(&e, "dp", 2, 2, edp));
  T_CHECK(groups_eq(&e, "tp", 4, 1, etp));
  /* etp 2, ep 4 over 8 ranks: tp-ep is the whole instance. */
  T_CHECK(lay_rankgen_init(&e, "tp-cp-ep-dp-pp", 2, 4, 1, 1, 1, &err));
  static const int32_t tpep[] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int32_t ep2[] = {0, 2, 4, 6, 1, 3, 5, 7};
  T_CHECK(groups_eq(&e, "tp-ep", 1, 8, tpep));
  T_CHECK(groups_eq(&e, "ep", 2, 4, ep2));
}

/* [hand] Every permutation of the order and every token, against a second
 * derivation written from the docstring's equations rather than from the
 * algorithm: rank r has coordinates c_i (innermost first); its group is
 * numbered by its unmasked coordinates and its place in the group by its
 * masked ones, each read as a mixed-radix number innermost first. */
static bool reference_matches(const RankGen *g, unsigned mask) {
  char token[32] = "";
  for (int i = 0; i < g->ndims; i++)
    if (mask & (1u << i)) {
      if (token[0]) strcat(token, "-");
      strcat(token, g->name[i]);
    }
  int64_t ng, gs;
  int32_t *got;
  if (!lay_rankgen_groups(g, token, &ng, &gs, &got)) return false;
  int32_t *want = calloc((size_t)g->world, sizeof *want);
  for (int64_t r = 0; r < g->world; r++) {
    int64_t rem = r, gi = 0, mi = 0, gmul = 1, mmul = 1;
    for (int i = 0; i < g->ndims; i++) {
      int64_t c = rem % g->size[i];
      rem /= g->size[i];
      if (mask & (1u << i)) {
        mi += c * mmul;
        mmul *= g->size[i];
      } else {
        gi += c * gmul;
        gmul *= g->size[i];
      }
    }
    want[gi * gs + mi] = (int32_t)r;
  }
  bool ok = ng * gs == g->world && memcmp(got, want, (size_t)g->world * sizeof *got) == 0;
  free(want);
  free(got);
  return ok;
}

static void test_all_orders(void) {
  static const char *const names[5] = {"tp", "cp", "ep", "dp", "pp"};
  static const int perm_count = 120;
  int checked = 0;
  for (int p = 0; p < perm_count; p++) {
    /* p-th permutation of the five names (factorial number system) */
    int idx[5] = {0, 1, 2, 3, 4}, k = p;
    char order[32] = "";
    for (int i = 0; i < 5; i++) {
      int f = 1;
      for (int j = 1; j < 5 - i; j++) f *= j;
      int pick = k / f;
      k %= f;
      if (i) strcat(order, "-");
      strcat(order, names[idx[pick]]);
      for (int j = pick; j < 4 - i; j++) idx[j] = idx[j + 1];
    }
    RankGen dense, expert;
    const char *err = NULL;
    T_CHECK(lay_rankgen_init(&dense, order, 2, 1, 2, 2, 3, &err)); /* tp 2, dp 2, pp 2, cp 3 */
    T_CHECK(lay_rankgen_init(&expert, order, 2, 3, 2, 2, 1, &err)); /* etp 2, ep 3, edp 2, pp 2 */
    for (unsigned mask = 1; mask < 32; mask++) {
      T_CHECK(reference_matches(&dense, mask));
      T_CHECK(reference_matches(&expert, mask));
      checked += 2;
    }
  }
  T_EQ_INT(checked, 120 * 31 * 2);
}

/* ---- partitions ------------------------------------------------------- */

static bool part_is(Engine e, int64_t layers, int64_t pp, const LayWeights *w,
                    const int64_t *want) {
  Diags d;
  diags_init(&d);
  int64_t out[64];
  bool ok = lay_partition(&d, e, layers, pp, NULL, w, out);
  for (int64_t i = 0; ok && i < pp; i++)
    if (out[i] != want[i]) ok = false;
  if (!ok) {
    fprintf(stderr, "  partition(%s, %lld, %lld):", engine_name(e), (long long)layers, (long long)pp);
    for (int64_t i = 0; i < pp; i++) fprintf(stderr, " %lld", (long long)out[i]);
    fputc('\n', stderr);
  }
  diags_free(&d);
  return ok;
}

static void test_partition(void) {
  /* vLLM get_pp_indices: layers // pp each, partitions[-i] += 1 for i in
   * 2 .. rem+1 (worked by hand from vllm/distributed/utils.py). */
  T_CHECK(part_is(ENGINE_VLLM, 10, 4, NULL, (const int64_t[]){2, 3, 3, 2}));
  T_CHECK(part_is(ENGINE_VLLM, 126, 4, NULL, (const int64_t[]){31, 32, 32, 31}));
  T_CHECK(part_is(ENGINE_VLLM, 11, 4, NULL, (const int64_t[]){3, 3, 3, 2}));
  T_CHECK(part_is(ENGINE_VLLM, 80, 4, NULL, (const int64_t[]){20, 20, 20, 20}));
  T_CHECK(part_is(ENGINE_VLLM, 61, 1, NULL, (const int64_t[]){61}));
  /* SGLang get_pp_indices: the last `rem` partitions take one more
   * (sglang/srt/distributed/utils.py). */
  T_CHECK(part_is(ENGINE_SGLANG, 10, 4, NULL, (const int64_t[]){2, 2, 3, 3}));
  T_CHECK(part_is(ENGINE_SGLANG, 61, 8, NULL, (const int64_t[]){7, 7, 7, 8, 8, 8, 8, 8}));
  /* generic: with no embedding weight, the balanced split (ties low). */
  T_CHECK(part_is(ENGINE_GENERIC, 10, 4, NULL, (const int64_t[]){3, 3, 2, 2}));
  /* generic: embedding and lm_head each worth two layers: total 84 layer
   * units over 4 stages is 21 each, so the end stages take 19 layers. */
  LayWeights w = {100, 200, 200};
  T_CHECK(part_is(ENGINE_GENERIC, 80, 4, &w, (const int64_t[]){19, 21, 21, 19}));
  /* only the embedding weighs (tied lm_head counted elsewhere). */
  LayWeights w2 = {10, 35, 0};
  T_CHECK(part_is(ENGINE_GENERIC, 32, 2, &w2, (const int64_t[]){14, 18}));
}

static void test_partition_errors(void) {
  Diags d;
  diags_init(&d);
  int64_t out[8];
  PoolSpec p;
  memset(&p, 0, sizeof p);
  p.name.v = "decode";
  SInt items[3] = {{40, {"s.yaml", 9, 5}, true}, {30, {"s.yaml", 9, 9}, true}, {0, {"s.yaml", 9, 13}, true}};
  p.layer_partition.set = true;
  p.layer_partition.loc = (SrcLoc){"s.yaml", 9, 3};
  p.layer_partition.items = items;
  p.layer_partition.len = 3;
  /* wrong length */
  T_CHECK(!lay_partition(&d, ENGINE_GENERIC, 80, 2, &p, NULL, out));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0307);
  /* entry below 1 */
  T_CHECK(!lay_partition(&d, ENGINE_GENERIC, 70, 3, &p, NULL, out));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0309);
  /* sum */
  items[2].v = 5;
  T_CHECK(!lay_partition(&d, ENGINE_GENERIC, 80, 3, &p, NULL, out));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0308);
  T_CHECK(strstr(d.list.items[d.list.len - 1]->msg, "expected 80, got 75") != NULL);
  /* honoured when right */
  items[2].v = 10;
  T_CHECK(lay_partition(&d, ENGINE_VLLM, 80, 3, &p, NULL, out));
  T_EQ_INT(out[0], 40);
  T_EQ_INT(out[2], 10);
  /* pp over layers */
  T_CHECK(!lay_partition(&d, ENGINE_VLLM, 4, 8, NULL, NULL, out));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0306);
  diags_free(&d);
}

/* ---- lay_build on a hand-made Spec ------------------------------------ */

static SInt si(int64_t v) { return (SInt){v, {"t.yaml", 1, 1}, true}; }

typedef struct {
  Spec s;
  PoolSpec pools[3];
} TSpec;

static void tspec_init(TSpec *t, int64_t nodes, int64_t gpn, int64_t domain) {
  memset(t, 0, sizeof *t);
  Spec *s = &t->s;
  s->model.layers = si(80);
  s->model.hidden_size = si(8192);
  s->model.vocab_size = si(128256);
  s->model.attention.kind = (SEnum){ATTN_GQA, {0}, true};
  s->model.attention.heads = si(64);
  s->model.attention.kv_heads = si(8);
  s->model.attention.head_dim = si(128);
  s->model.ffn.intermediate_size = si(28672);
  s->hardware.nodes = si(nodes);
  s->hardware.gpus_per_node = si(gpn);
  s->hardware.scale_up.domain = si(domain);
  s->hardware.gpu.memory = si((int64_t)141000000000);
  s->deployment.engine = (SEnum){ENGINE_GENERIC, {0}, true};
  s->deployment.memory.kv_block = si(16);
  s->deployment.pools = t->pools;
}

static PoolSpec *tspec_pool(TSpec *t, const char *name, PoolRole role, int64_t replicas,
                            int64_t tp, int64_t pp) {
  PoolSpec *p = &t->pools[t->s.deployment.npools++];
  memset(p, 0, sizeof *p);
  p->name = (SStr){name, {"t.yaml", 10, 3}, true};
  p->role = (SEnum){role, {0}, true};
  p->replicas = si(replicas);
  p->tp = si(tp);
  p->pp = si(pp);
  p->cp = si(1);
  p->dp = si(1);
  p->ep = si(1);
  p->etp = si(1);
  p->dcp = si(1);
  return p;
}

static void test_build_pd(void) {
  /* Llama-3.1-70B shapes, prefill 2 x TP8, decode 2 x TP4 on 4 nodes. */
  TSpec t;
  tspec_init(&t, 4, 8, 8);
  tspec_pool(&t, "prefill", ROLE_PREFILL, 2, 8, 1);
  PoolSpec *dec = tspec_pool(&t, "decode", ROLE_DECODE, 2, 4, 1);
  dec->dcp = si(2);
  Diags d;
  diags_init(&d);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  if (!L) return;
  T_EQ_INT(L->world_size, 24);
  T_EQ_INT(L->pools[1].first_rank, 16);
  T_EQ_INT(L->ranks[16].pool, 1);
  T_EQ_INT(L->ranks[19].instance, 0);
  T_EQ_INT(L->ranks[20].instance, 1);
  T_EQ_INT(L->ranks[21].coords[CO_TP], 1);
  T_EQ_INT(L->ranks[21].coords[CO_DCP], 1);
  /* every rank in exactly one group per kind but embedding (pp 1: all in) */
  for (int64_t r = 0; r < L->nranks; r++)
    for (int k = 0; k < GK__COUNT; k++) T_CHECK(L->ranks[r].group[k] >= 0);
  const LayGroup *g = lay_rank_group(L, 21, GK_TP);
  T_EQ_INT(g->n, 4);
  T_EQ_INT(L->members[g->off], 20);
  const LayGroup *dc = lay_rank_group(L, 21, GK_DCP);
  T_EQ_INT(dc->n, 2);
  T_EQ_INT(L->members[dc->off], 20);
  T_EQ_INT(L->members[dc->off + 1], 21);
  T_EQ_INT(L->groups[L->ngroups - 1].kind, GK_WORLD);
  T_EQ_INT(L->groups[L->ngroups - 1].n, 24);
  /* group ids are dense and each group lists its members back */
  for (int64_t gi = 0; gi < L->ngroups; gi++) {
    const LayGroup *G = &L->groups[gi];
    for (int32_t j = 0; j < G->n; j++) T_EQ_INT(L->ranks[L->members[G->off + j]].group[G->kind], gi);
  }
  /* shards */
  int64_t sh[SH__COUNT][2];
  lay_rank_shards(L, &t.s, 21, sh);
  T_EQ_INT(sh[SH_Q_HEADS][0], 16);
  T_EQ_INT(sh[SH_Q_HEADS][1], 32);
  T_EQ_INT(sh[SH_KV_HEADS][0], 2);
  T_EQ_INT(sh[SH_KV_HEADS][1], 4);
  T_EQ_INT(sh[SH_LAYERS][1], 80);
  T_EQ_INT(sh[SH_VOCAB][0], 32064);
  T_EQ_INT(sh[SH_VOCAB][1], 64128);
  /* default placement: consecutive GPUs, 8 unused GPUs warned */
  T_CHECK(lay_place_default(&d, L));
  T_EQ_INT(L->ranks[8].node, 1);
  T_EQ_INT(L->ranks[16].node, 2);
  T_EQ_INT(L->ranks[20].device, 4);
  T_EQ_INT(d.nwarnings, 1);
  T_EQ_INT(d.list.items[0]->code, DIAG_W0301);
  lay_free(L);
  diags_free(&d);
}

static void test_build_gqa_replication_and_pp(void) {
  /* tp 16 over 8 KV heads: each head on two ranks; pp 2 on vllm. */
  TSpec t;
  tspec_init(&t, 4, 8, 8);
  t.s.deployment.engine.v = ENGINE_VLLM;
  t.s.model.layers.v = 126;
  tspec_pool(&t, "both", ROLE_BOTH, 1, 8, 4);
  Diags d;
  diags_init(&d);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  if (!L) return;
  T_EQ_INT(L->pools[0].layer_partition[0], 31);
  T_EQ_INT(L->pools[0].layer_partition[1], 32);
  int64_t sh[SH__COUNT][2];
  lay_rank_shards(L, &t.s, 9, sh); /* stage 1, tp 1 */
  T_EQ_INT(sh[SH_LAYERS][0], 31);
  T_EQ_INT(sh[SH_LAYERS][1], 63);
  T_EQ_INT(sh[SH_VOCAB][1], 0); /* middle stage: no vocabulary */
  /* embedding: rank 9 (stage 1) in none, rank 25 (stage 3) with rank 1 */
  T_CHECK(lay_rank_group(L, 9, GK_EMBEDDING) == NULL);
  const LayGroup *e = lay_rank_group(L, 25, GK_EMBEDDING);
  T_CHECK(e && e->n == 2 && L->members[e->off] == 1 && L->members[e->off + 1] == 25);
  lay_free(L);
  /* tp 16 > kv_heads 8: replication */
  tspec_init(&t, 2, 8, 16);
  tspec_pool(&t, "both", ROLE_BOTH, 1, 16, 1);
  L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  if (!L) return;
  lay_rank_shards(L, &t.s, 3, sh);
  T_EQ_INT(sh[SH_KV_HEADS][0], 1);
  T_EQ_INT(sh[SH_KV_HEADS][1], 2);
  /* domain 16 spans two 8-GPU nodes: tp 16 across them is allowed */
  T_CHECK(lay_place_default(&d, L));
  T_EQ_INT(d.nerrors, 0);
  lay_free(L);
  diags_free(&d);
}

static void test_build_errors(void) {
  TSpec t;
  Diags d;
  diags_init(&d);
  /* etp*ep must divide tp*cp*dp (on a MoE model: a dense one ignores
   * them, W0204) */
  tspec_init(&t, 1, 8, 8);
  t.s.model.moe.present = true;
  PoolSpec *p = tspec_pool(&t, "both", ROLE_BOTH, 1, 4, 1);
  p->ep = si(3);
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0302);
  T_CHECK(strstr(d.list.items[d.list.len - 1]->help, "1, 2, 4") != NULL);
  /* dcp must divide tp */
  tspec_init(&t, 1, 8, 8);
  p = tspec_pool(&t, "decode", ROLE_DECODE, 1, 4, 1);
  p->dcp = si(3);
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0304);
  /* expert pp groups differ: order with pp inside dp and edp != dp */
  tspec_init(&t, 1, 8, 8);
  t.s.model.moe.present = true;
  t.s.deployment.order = (SStr){"tp-cp-ep-pp-dp", {"t.yaml", 4, 10}, true};
  p = tspec_pool(&t, "both", ROLE_BOTH, 1, 2, 2);
  p->dp = si(2); /* etp 1, ep 1: edp 4 != dp 2 */
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0303);
  /* the same order is fine once edp == dp (etp * ep == tp * cp) */
  p->ep = si(2);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  lay_free(L);
  diags_free(&d);
}

/* ep and etp set on a dense model have no effect (W0204): the layout uses
 * ep 1 and etp = tp, as the plan loader requires of a dense pool. */
static void test_build_dense_ignores_ep(void) {
  TSpec t;
  Diags d;
  diags_init(&d);
  tspec_init(&t, 1, 8, 8);
  PoolSpec *p = tspec_pool(&t, "both", ROLE_BOTH, 1, 4, 1);
  p->ep = si(3);
  p->etp = si(2);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  if (L) {
    T_EQ_INT(L->pools[0].size[CO_EP], 1);
    T_EQ_INT(L->pools[0].size[CO_ETP], 4);
  }
  lay_free(L);
  diags_free(&d);
}

/* Products of spec integers in lay_build and placement are checked even
 * where the spec's limits (docs/spec.md, "Limits") keep them small: a Spec
 * made by hand gets a diagnostic, never a wrapped product (a division by
 * zero, a GPU table allocated too small). */
static void test_build_overflow(void) {
  TSpec t;
  Diags d;
  diags_init(&d);
  /* ep * etp = 2^62 * 4 wraps to 0: it used to be `tcd % 0`. */
  tspec_init(&t, 1, 8, 8);
  t.s.model.moe.present = true;
  PoolSpec *p = tspec_pool(&t, "both", ROLE_BOTH, 1, 8, 1);
  p->ep = si((int64_t)1 << 62);
  p->etp = si(4);
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0302);
  T_CHECK(strstr(d.list.items[d.list.len - 1]->msg, "= more than 2^63") != NULL);
  /* etp 2^63 - 1 alone: no ep divides, and the help says why. */
  p->ep = si(1);
  p->etp = si(INT64_MAX);
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0302);
  T_CHECK(strstr(d.list.items[d.list.len - 1]->help, "larger than the instance's 8 ranks") != NULL);
  /* etp one over the ranks, and at them. */
  p->etp = si(9);
  T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
  p->etp = si(8);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  lay_free(L);
  /* nodes x gpus_per_node past 2^63, and past the plan's int32 GPU
   * index: E0305 from lay_build, before placement sizes its GPU table. */
  int64_t sizes[][2] = {{(int64_t)1 << 62, 8}, {(int64_t)1 << 32, (int64_t)1 << 32},
                        {(int64_t)1 << 28, 8}};
  for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) {
    tspec_init(&t, sizes[i][0], sizes[i][1], 8);
    tspec_pool(&t, "both", ROLE_BOTH, 1, 8, 1);
    T_CHECK(lay_build(&d, &t.s, NULL) == NULL);
    T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0305);
  }
  /* 2^28 - 1 nodes of 8 GPUs is just under 2^31: built (placing it would
   * allocate an 8 GiB GPU table; the spec's limits never get near). */
  tspec_init(&t, ((int64_t)1 << 28) - 1, 8, 8);
  tspec_pool(&t, "both", ROLE_BOTH, 1, 8, 1);
  L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  lay_free(L);
  diags_free(&d);
}

static void test_placement_validate(void) {
  TSpec t;
  tspec_init(&t, 2, 8, 8);
  tspec_pool(&t, "both", ROLE_BOTH, 2, 8, 1);
  Diags d;
  diags_init(&d);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L != NULL);
  if (!L) return;
  int32_t node[16], gpu[16];
  for (int r = 0; r < 16; r++) {
    node[r] = r / 8;
    gpu[r] = r % 8;
  }
  SrcLoc hook = {"place.lua", 3, 1};
  T_CHECK(lay_place_validate(&d, L, node, gpu, hook));
  /* straddling two nodes: tp across domains */
  for (int r = 0; r < 16; r++) {
    node[r] = ((r + 4) % 16) / 8;
    gpu[r] = (r + 4) % 8;
  }
  T_CHECK(!lay_place_validate(&d, L, node, gpu, hook));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0322);
  /* allowed when the spec says so */
  L->allow_tp_across_domain = true;
  T_CHECK(lay_place_validate(&d, L, node, gpu, hook));
  L->allow_tp_across_domain = false;
  /* two ranks on one GPU; one off the cluster */
  for (int r = 0; r < 16; r++) {
    node[r] = r / 8;
    gpu[r] = r % 8;
  }
  gpu[3] = 2;
  T_CHECK(!lay_place_validate(&d, L, node, gpu, hook));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0321);
  gpu[3] = 3;
  node[15] = 2;
  T_CHECK(!lay_place_validate(&d, L, node, gpu, hook));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0320);
  T_EQ_STR(d.list.items[d.list.len - 1]->loc.file, "place.lua");
  node[15] = 1;
  /* lay_place_set stores and computes local ranks (reverse order here) */
  for (int r = 0; r < 16; r++) gpu[r] = 7 - r % 8;
  T_CHECK(lay_place_set(&d, L, node, gpu, hook));
  T_EQ_INT(L->ranks[9].device, 6);
  T_EQ_INT(L->ranks[9].local_rank, 1);
  lay_free(L);
  /* tp 8 instances on 4-GPU domains: the default placement cannot keep tp
   * in one domain */
  tspec_init(&t, 2, 8, 4);
  tspec_pool(&t, "both", ROLE_BOTH, 1, 8, 1);
  L = lay_build(&d, &t.s, NULL);
  T_CHECK(L && !lay_place_default(&d, L));
  T_EQ_INT(d.list.items[d.list.len - 1]->code, DIAG_E0322);
  lay_free(L);
  /* alignment: tp 4 instances of 4 after a tp 2 instance start at gpu 4 */
  tspec_init(&t, 1, 8, 4);
  tspec_pool(&t, "a", ROLE_PREFILL, 1, 2, 1);
  tspec_pool(&t, "b", ROLE_DECODE, 1, 4, 1);
  L = lay_build(&d, &t.s, NULL);
  T_CHECK(L && lay_place_default(&d, L));
  if (L) T_EQ_INT(L->ranks[2].device, 4);
  lay_free(L);
  diags_free(&d);
}

/* Instances kept even on their nodes (node_start), on two nodes: two
 * of 6 (pp 6) on 8-GPU nodes take one node each, as 2 GPUs of node 0 and
 * 4 of node 1 is a split no engine launches; with a third of 4 the GPUs
 * after the boundary are too few, and the split 2 + 4 stays; an even
 * split is kept (tp 2, then 4 on 4-GPU nodes whose domain spans both: 2
 * GPUs of each). Each case: two ranks and their node and device. */
static void test_place_even_nodes(void) {
  static const struct {
    int64_t gpn, domain, npools, tp[3], pp[3], at[2][3];
  } cases[] = {
      {8, 8, 2, {1, 1}, {6, 6}, {{6, 1, 0}, {11, 1, 5}}},
      {8, 8, 3, {1, 1, 1}, {6, 6, 4}, {{6, 0, 6}, {8, 1, 0}}},
      {4, 8, 2, {2, 4}, {1, 1}, {{2, 0, 2}, {4, 1, 0}}},
  };
  static const char *const names[3] = {"a", "b", "c"};
  Diags d;
  diags_init(&d);
  for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
    TSpec t;
    tspec_init(&t, 2, cases[i].gpn, cases[i].domain);
    for (int64_t p = 0; p < cases[i].npools; p++)
      tspec_pool(&t, names[p], p ? ROLE_DECODE : ROLE_PREFILL, 1, cases[i].tp[p], cases[i].pp[p]);
    Layout *L = lay_build(&d, &t.s, NULL);
    T_CHECK(L && lay_place_default(&d, L));
    for (int k = 0; L && k < 2; k++) {
      const int64_t *a = cases[i].at[k];
      T_EQ_INT(L->ranks[a[0]].node, a[1]);
      T_EQ_INT(L->ranks[a[0]].device, a[2]);
    }
    lay_free(L);
  }
  diags_free(&d);
}

/* A scale-up domain spanning nodes, shaped as an NVL72 rack (18 trays of
 * 4 GPUs, one domain of 72; plans/catalog/hardware/gb200-nvl72.yaml): tp 8
 * spans 2 trays inside the domain; tp 16 instances never straddle a rack,
 * the 5th starts at the next rack (GPU 72) and the rack's last 8 GPUs stay
 * idle. */
static void test_place_nvl72(void) {
  TSpec t;
  Diags d;
  diags_init(&d);
  tspec_init(&t, 18, 4, 72);
  tspec_pool(&t, "both", ROLE_BOTH, 9, 8, 1);
  Layout *L = lay_build(&d, &t.s, NULL);
  T_CHECK(L && lay_place_default(&d, L));
  if (L) {
    T_EQ_INT(L->ranks[7].node, 1); /* rank 7 of tp group 0 is on the 2nd tray */
    T_EQ_INT(L->ranks[71].node, 17);
  }
  lay_free(L);
  tspec_init(&t, 36, 4, 72);
  tspec_pool(&t, "both", ROLE_BOTH, 8, 16, 1);
  L = lay_build(&d, &t.s, NULL);
  T_CHECK(L && lay_place_default(&d, L));
  if (L) {
    T_EQ_INT(L->ranks[63].node, 15);
    T_EQ_INT(L->ranks[64].node, 18); /* instance 4 starts on the 2nd rack */
    T_EQ_INT(L->ranks[64].device, 0);
  }
  lay_free(L);
  T_EQ_INT(d.nerrors, 0);
  diags_free(&d);
}

int main(void) {
  T_RUN(test_doc_init);
  T_RUN(test_doc_gen);
  T_RUN(test_doc_cp);
  T_RUN(test_hand_orders);
  T_RUN(test_hand_expert);
  T_RUN(test_all_orders);
  T_RUN(test_partition);
  T_RUN(test_partition_errors);
  T_RUN(test_build_pd);
  T_RUN(test_build_gqa_replication_and_pp);
  T_RUN(test_build_errors);
  T_RUN(test_build_dense_ignores_ep);
  T_RUN(test_build_overflow);
  T_RUN(test_placement_validate);
  T_RUN(test_place_even_nodes);
  T_RUN(test_place_nvl72);
  T_DONE();
}
