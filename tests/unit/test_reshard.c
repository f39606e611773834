/*
 * test_reshard.c: KV-reshard maps (compiler/reshard.c) proven by the
 * independent checker (compiler/reshard_check.c) on named layout pairs and
 * on 10,000 seeded random pairs; a deliberately broken map must be caught.
 *
 * Model figures come from each model's published config.json:
 *  - Llama-3.1-70B (meta-llama/Llama-3.1-70B): 80 layers, 8 KV heads,
 *    head_dim 128;
 *  - Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B): 94 layers, 4 KV heads,
 *    head_dim 128;
 *  - DeepSeek-V3 (deepseek-ai/DeepSeek-V3): 61 layers, MLA with
 *    kv_lora_rank 512 and qk_rope_head_dim 64.
 * KV bytes per head, layer and token in bf16 (2 bytes): GQA stores K and V,
 * 2 * head_dim * 2 = 512; MLA stores the latent and the rope key,
 * (512 + 64) * 2 = 1152.
 */
#include "t.h"

#include "layout.h"
#include "plan.h"
#include "reshard.h"
#include "spec.h"

static RsLayout lay(const char *pool, const char *model, int64_t layers, int64_t heads, bool mla,
                    int64_t bph) {
  RsLayout l;
  memset(&l, 0, sizeof l);
  l.pool = pool;
  l.model_id = model;
  l.dtype = DT_BF16;
  l.tp = l.pp = l.cp = l.dcp = l.dp = 1;
  l.layers = layers;
  l.kv_heads = heads;
  l.mla = mla;
  l.kv_bytes_per_head_token = bph;
  return l;
}

static RsLayout llama(const char *pool) { return lay(pool, "llama-3.1-70b", 80, 8, false, 512); }
static RsLayout qwen(const char *pool) { return lay(pool, "qwen3-235b-a22b", 94, 4, false, 512); }
static RsLayout dsv3(const char *pool) { return lay(pool, "deepseek-v3", 61, 1, true, 1152); }

/* Builds and proves a map; returns it (empty on failure). */
static RsMap build_ok(const RsLayout *s, const RsLayout *d) {
  Diags dg;
  diags_init(&dg);
  RsMap m;
  bool ok = rs_map_build(&dg, s, d, &m);
  T_CHECK(ok);
  T_EQ_INT(dg.nerrors, 0);
  if (ok) {
    char why[512];
    bool proven = rs_check_map(s, d, &m, why, sizeof why);
    if (!proven) fprintf(stderr, "checker: %s\n", why);
    T_CHECK(proven);
  }
  diags_free(&dg);
  return m;
}

/* Bytes each source rank sends for a T-token request. */
static void src_bytes(const RsMap *m, int64_t T, int64_t *out) {
  for (int64_t r = 0; r < m->src_ranks; r++) out[r] = 0;
  for (size_t i = 0; i < m->xfers.len; i++) {
    int64_t b;
    T_CHECK(rs_xfer_bytes(&m->xfers.items[i], T, &b));
    out[m->xfers.items[i].src] += b;
  }
}

static int64_t map_bytes(const RsMap *m, int64_t T) {
  int64_t tot = 0;
  for (size_t i = 0; i < m->xfers.len; i++) {
    int64_t b;
    T_CHECK(rs_xfer_bytes(&m->xfers.items[i], T, &b));
    tot += b;
  }
  return tot;
}

static void test_ownership_boxes(void) {
  /* Zigzag cp: of 2N chunks rank i holds i and 2N-1-i. */
  RsLayout p = llama("prefill");
  p.tp = 8;
  p.cp = 4;
  RsBox b = rs_rank_box(&p, 1 * 8 + 3); /* t=3, c=1 */
  T_EQ_INT(b.tokens.nchunks, 8);
  T_EQ_INT(b.tokens.nids, 2);
  T_EQ_INT(b.tokens.ids[0], 1);
  T_EQ_INT(b.tokens.ids[1], 6);
  T_EQ_INT(b.head_begin, 3);
  T_EQ_INT(b.head_end, 4);
  T_EQ_INT(b.layer_begin, 0);
  T_EQ_INT(b.layer_end, 80);
  /* dcp: token p lives on dcp rank p mod N; consecutive tp ranks form one
   * dcp group and share heads. */
  RsLayout d = llama("decode");
  d.tp = 8;
  d.dcp = 2;
  b = rs_rank_box(&d, 5);
  T_EQ_INT(b.tokens.stride, 2);
  T_EQ_INT(b.tokens.offset, 1);
  T_EQ_INT(b.head_begin, 4);
  T_EQ_INT(b.head_end, 6);
  /* GQA replication: tp 16 over 8 kv heads puts each head on 2 ranks. */
  d.tp = 16;
  d.dcp = 1;
  T_EQ_INT(rs_rank_box(&d, 0).head_begin, 0);
  T_EQ_INT(rs_rank_box(&d, 1).head_begin, 0);
  T_EQ_INT(rs_rank_box(&d, 2).head_begin, 1);
  T_EQ_INT(rs_rank_box(&d, 15).head_begin, 7);
  T_EQ_INT(rs_rank_box(&d, 15).head_end, 8);
  /* MLA: the latent is one head on every tp rank. */
  RsLayout m = dsv3("prefill");
  m.tp = 8;
  for (int64_t r = 0; r < 8; r++) {
    T_EQ_INT(rs_rank_box(&m, r).head_begin, 0);
    T_EQ_INT(rs_rank_box(&m, r).head_end, 1);
  }
  /* Layer partition, explicit and the default even split. */
  RsLayout q = llama("prefill");
  q.pp = 3;
  T_EQ_INT(rs_rank_box(&q, 0).layer_end, 27); /* 80 = 27 + 27 + 26 */
  T_EQ_INT(rs_rank_box(&q, 2).layer_begin, 54);
  int64_t part[3] = {30, 25, 25};
  q.layer_partition = part;
  T_EQ_INT(rs_rank_box(&q, 1).layer_begin, 30);
  T_EQ_INT(rs_rank_box(&q, 1).layer_end, 55);
}

static void test_tokens(void) {
  RsTokens z = {8, 2, {1, 6}, 1, 0};
  T_EQ_INT(rs_tokens_count(&z, 80), 20);
  T_EQ_INT(rs_tokens_count(&z, 81), 20); /* chunk 6 of 81 is [60, 70), chunk 1 is [10, 20) */
  int64_t *r = NULL;
  size_t n = rs_tokens_ranges(&z, 80, &r);
  T_EQ_INT(n, 2);
  T_EQ_INT(r[0], 10);
  T_EQ_INT(r[1], 20);
  T_EQ_INT(r[2], 60);
  T_EQ_INT(r[3], 70);
  free(r);
  /* The middle pair of a zigzag is one range. */
  RsTokens mid = {8, 2, {3, 4}, 1, 0};
  n = rs_tokens_ranges(&mid, 81, &r);
  T_EQ_INT(n, 1);
  T_EQ_INT(r[0], 30);
  T_EQ_INT(r[1], 50);
  free(r);
  RsTokens s = {1, 1, {0, 0}, 4, 3};
  T_EQ_INT(rs_tokens_count(&s, 10), 2); /* 3, 7 */
  T_CHECK(rs_tokens_has(&s, 10, 7));
  T_CHECK(!rs_tokens_has(&s, 10, 6));
  StrBuf sb;
  sb_init(&sb);
  rs_tokens_format(&z, &sb);
  sb_puts(&sb, "|");
  rs_tokens_format(&s, &sb);
  sb_puts(&sb, "|");
  RsTokens all = {1, 1, {0, 0}, 1, 0};
  rs_tokens_format(&all, &sb);
  T_EQ_STR(sb.buf, "chunks 1,6/8|p%4==3|all");
  sb_free(&sb);
}

/* P TP8 -> D TP4, 8 KV heads: decode rank d takes heads 2d, 2d+1 from
 * prefill ranks 2d and 2d+1. */
static void test_tp8_to_tp4(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  d.tp = 4;
  RsMap m = build_ok(&p, &d);
  T_EQ_INT(m.xfers.len, 8);
  for (size_t i = 0; i < m.xfers.len; i++) {
    RsTransfer *x = &m.xfers.items[i];
    T_EQ_INT(x->dst, x->src / 2);
    T_EQ_INT(x->head_begin, x->src);
    T_EQ_INT(x->head_end, x->src + 1);
    T_EQ_INT(x->layer_end - x->layer_begin, 80);
    T_EQ_INT(x->bytes_per_token, 80 * 512);
  }
  /* One request of 4000 tokens moves every cell once. */
  T_EQ_INT(map_bytes(&m, 4000), (int64_t)80 * 8 * 512 * 4000);
  rs_map_free(&m);
}

/* P TP2 -> D TP16, 8 KV heads: decode replicates each head on two ranks,
 * each of which receives it from the one prefill rank that owns it. */
static void test_tp2_to_tp16(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 2;
  d.tp = 16;
  RsMap m = build_ok(&p, &d);
  T_EQ_INT(m.xfers.len, 16);
  for (size_t i = 0; i < m.xfers.len; i++) {
    RsTransfer *x = &m.xfers.items[i];
    T_EQ_INT(x->dst, (int64_t)i);
    T_EQ_INT(x->src, x->dst / 8);
    T_EQ_INT(x->head_begin, x->dst / 2);
  }
  /* Replication on the decode side doubles the bytes moved. */
  T_EQ_INT(map_bytes(&m, 1000), (int64_t)2 * 80 * 8 * 512 * 1000);
  rs_map_free(&m);
}

/* P TP16 -> D TP8, Qwen3-235B with 4 KV heads: four prefill replicas per
 * head feed two decode replicas; every prefill rank sends the same bytes. */
static void test_qwen_tp16_to_tp8(void) {
  RsLayout p = qwen("prefill"), d = qwen("decode");
  p.tp = 16;
  d.tp = 8;
  RsMap m = build_ok(&p, &d);
  int64_t sb[16];
  src_bytes(&m, 4000, sb);
  for (int r = 0; r < 16; r++) T_EQ_INT(sb[r], (int64_t)94 * 2 * 512 * 4000 / 4);
  rs_map_free(&m);
}

/* DeepSeek-V3 P TP8 -> D attention-DP8 (tp 1, dp 8): the serving decode
 * replica is one rank; the latent is on all 8 prefill ranks, so the 61
 * layers are cut over the 8 sources, at most ceil(61/8) = 8 layers each. */
static void test_dsv3_tp8_to_dp8(void) {
  RsLayout p = dsv3("prefill"), d = dsv3("decode");
  p.tp = 8;
  d.dp = 8;
  RsMap m = build_ok(&p, &d);
  T_EQ_INT(m.dst_ranks, 1);
  T_EQ_INT(m.xfers.len, 8);
  int64_t sb[8];
  src_bytes(&m, 1000, sb);
  for (int r = 0; r < 8; r++) {
    T_CHECK(sb[r] >= (int64_t)7 * 1152 * 1000);
    T_CHECK(sb[r] <= (int64_t)8 * 1152 * 1000);
  }
  T_EQ_INT(map_bytes(&m, 1000), (int64_t)61 * 1152 * 1000);
  /* MLA on both sides, TP8 -> TP8: each decode rank takes the whole latent
   * from one prefill rank, all eight used. */
  d.dp = 1;
  d.tp = 8;
  RsMap m2 = build_ok(&p, &d);
  T_EQ_INT(m2.xfers.len, 8);
  src_bytes(&m2, 1000, sb);
  for (int r = 0; r < 8; r++) T_EQ_INT(sb[r], (int64_t)61 * 1152 * 1000);
  rs_map_free(&m);
  rs_map_free(&m2);
}

/* P PP4 -> D PP1, and two different partitions of the same pp. */
static void test_pp(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  p.pp = 4;
  d.tp = 8;
  RsMap m = build_ok(&p, &d);
  T_EQ_INT(m.xfers.len, 32);
  for (size_t i = 0; i < m.xfers.len; i++) {
    RsTransfer *x = &m.xfers.items[i];
    T_EQ_INT(x->layer_begin, (x->src / 8) * 20);
    T_EQ_INT(x->layer_end - x->layer_begin, 20);
  }
  rs_map_free(&m);
  int64_t pa[4] = {20, 20, 20, 20}, pb[4] = {19, 21, 21, 19};
  p.layer_partition = pa;
  d.pp = 4;
  d.layer_partition = pb;
  m = build_ok(&p, &d);
  /* Stage boundaries 20/40/60 against 19/40/61: stage 0 of decode takes
   * 19 layers from stage 0; stage 1 takes 1 + 20; stage 2 takes 20 + 1;
   * stage 3 takes 19. Per tp rank: 6 transfers. */
  T_EQ_INT(m.xfers.len, 6 * 8);
  rs_map_free(&m);
}

/* P CP4 (zigzag) -> D DCP2 (interleaved). */
static void test_cp4_to_dcp2(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  p.cp = 4;
  d.tp = 8;
  d.dcp = 2;
  RsMap m = build_ok(&p, &d);
  /* Decode rank d (dcp rank d%2, heads 2*(d/2)..+2) takes from 4 cp ranks x
   * 2 tp ranks. */
  T_EQ_INT(m.xfers.len, 8 * 4 * 2);
  for (size_t i = 0; i < m.xfers.len; i++) {
    RsTransfer *x = &m.xfers.items[i];
    T_EQ_INT(x->tokens.nchunks, 8);
    T_EQ_INT(x->tokens.stride, 2);
    T_EQ_INT(x->tokens.offset, x->dst % 2);
  }
  T_EQ_INT(map_bytes(&m, 4000), (int64_t)80 * 8 * 512 * 4000);
  rs_map_free(&m);
}

/* Non-power-of-two tp ratio: 24 KV heads, TP6 -> TP4 and back. */
static void test_non_pow2(void) {
  RsLayout p = lay("prefill", "m24", 10, 24, false, 256), d = lay("decode", "m24", 10, 24, false, 256);
  p.tp = 6;
  d.tp = 4;
  RsMap m = build_ok(&p, &d);
  rs_map_free(&m);
  m = build_ok(&d, &p);
  rs_map_free(&m);
  /* TP3 -> TP12 over 6 heads: 12 does not fit, 6 heads over 12 ranks
   * replicates; 3 splits 2 heads each. */
  RsLayout a = lay("prefill", "m6", 4, 6, false, 64), b = lay("decode", "m6", 4, 6, false, 64);
  a.tp = 3;
  b.tp = 12;
  m = build_ok(&a, &b);
  rs_map_free(&m);
}

static bool tokens_same(const RsTokens *a, const RsTokens *b) {
  return a->nchunks == b->nchunks && a->nids == b->nids && a->ids[0] == b->ids[0] &&
         (a->nids < 2 || a->ids[1] == b->ids[1]) && a->stride == b->stride &&
         a->offset == b->offset;
}

static bool box_same(const RsBox *a, const RsBox *b) {
  return a->layer_begin == b->layer_begin && a->layer_end == b->layer_end &&
         a->head_begin == b->head_begin && a->head_end == b->head_end &&
         tokens_same(&a->tokens, &b->tokens);
}

static bool xfer_same(const RsTransfer *a, const RsTransfer *b) {
  return a->src == b->src && a->dst == b->dst && a->layer_begin == b->layer_begin &&
         a->layer_end == b->layer_end && a->head_begin == b->head_begin &&
         a->head_end == b->head_end && tokens_same(&a->tokens, &b->tokens) &&
         a->bytes_per_token == b->bytes_per_token && a->same_node == b->same_node &&
         a->scale_up == b->scale_up;
}

static bool has_code(const Diags *dg, const char *code, const char *needle1, const char *needle2) {
  for (size_t i = 0; i < dg->list.len; i++) {
    const Diag *g = dg->list.items[i];
    if (strcmp(diag_info(g->code)->code, code) != 0) continue;
    if (needle1 && !strstr(g->msg, needle1)) continue;
    if (needle2 && !strstr(g->msg, needle2)) continue;
    return true;
  }
  return false;
}

static void test_errors(void) {
  Diags dg;
  RsMap m;
  /* Different models: the error names both. */
  diags_init(&dg);
  RsLayout p = llama("prefill"), d = qwen("decode");
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0401", "llama-3.1-70b", "qwen3-235b-a22b"));
  T_EQ_INT(m.xfers.len, 0);
  diags_free(&dg);
  /* Different KV dtypes. */
  diags_init(&dg);
  d = llama("decode");
  d.dtype = DT_FP8;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0402", "`bf16`", "`fp8`"));
  diags_free(&dg);
  /* 8 heads over tp 3: the help lists the valid choices. */
  diags_init(&dg);
  d = llama("decode");
  d.tp = 3;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0403", "got 3", NULL));
  T_CHECK(dg.list.len == 1 && dg.list.items[0]->help &&
          strstr(dg.list.items[0]->help, "1, 2, 4, 8, 16, 24"));
  diags_free(&dg);
  /* dcp must divide tp. */
  diags_init(&dg);
  d = llama("decode");
  d.tp = 4;
  d.dcp = 3;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0407", "got 3", NULL));
  diags_free(&dg);
  /* Two different zigzag chunkings. */
  diags_init(&dg);
  d = llama("decode");
  p.cp = 4;
  d.cp = 2;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0404", "got 4 and 2", NULL));
  diags_free(&dg);
  /* A layer partition that does not sum to the layers. */
  diags_init(&dg);
  p = llama("prefill");
  d = llama("decode");
  int64_t part[2] = {40, 39};
  d.pp = 2;
  d.layer_partition = part;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0405", "expected 80 layers", "got 79"));
  diags_free(&dg);
  /* Same model name, different shape. */
  diags_init(&dg);
  d = llama("decode");
  d.kv_bytes_per_head_token = 256;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0408", NULL, NULL));
  diags_free(&dg);
  /* Non-positive sizes. */
  diags_init(&dg);
  d = llama("decode");
  d.pp = 0;
  T_CHECK(!rs_map_build(&dg, &p, &d, &m));
  T_CHECK(has_code(&dg, "E0409", "`pp`", NULL));
  diags_free(&dg);
}

/* The checker must catch broken maps. */
static void test_checker_catches(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  p.cp = 2;
  d.tp = 4;
  d.dcp = 2;
  RsMap m = build_ok(&p, &d);
  char why[512];
  T_CHECK(rs_check_map(&p, &d, &m, why, sizeof why));
  RsTransfer keep = m.xfers.items[3];
  /* A gap: the last transfer dropped. */
  m.xfers.len--;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "never receives") != NULL);
  m.xfers.len++;
  /* A duplicate: one transfer sent twice. */
  m.xfers.items[m.xfers.len - 1] = m.xfers.items[0];
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "twice") != NULL);
  rs_map_free(&m);
  m = build_ok(&p, &d);
  /* A source that does not own what it sends. */
  m.xfers.items[3].src = (keep.src + 1) % 16;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "does not own") != NULL);
  m.xfers.items[3] = keep;
  T_CHECK(rs_check_map(&p, &d, &m, why, sizeof why));
  /* The wrong residue class. */
  m.xfers.items[3].tokens.offset ^= 1;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  m.xfers.items[3] = keep;
  /* A layer short. */
  m.xfers.items[3].layer_end--;
  m.xfers.items[3].bytes_per_token -= (keep.head_end - keep.head_begin) * 512;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "never receives") != NULL);
  m.xfers.items[3] = keep;
  /* A wrong byte count. */
  m.xfers.items[3].bytes_per_token++;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "bytes_per_token") != NULL);
  m.xfers.items[3] = keep;
  /* Only the zigzag pair's second chunk: a gap at uneven boundaries too. */
  m.xfers.items[3].tokens.nids = 1;
  T_CHECK(!rs_check_map(&p, &d, &m, why, sizeof why));
  m.xfers.items[3] = keep;
  T_CHECK(rs_check_map(&p, &d, &m, why, sizeof why));
  rs_map_free(&m);
}

/* The checker's own bounds, now that it checks plans from files: a map
 * whose cells exceed RS_CHECK_MAX_CELLS, chunk counts whose lcm overflows,
 * or a byte count whose product overflows is refused with a reason, not
 * computed; a map just under the cap is proven, one destination rank's
 * cells at a time. */
static void test_checker_bounds(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  d.tp = 8;
  RsMap m = build_ok(&p, &d);
  char why[512];
  T_CHECK(rs_check_map(&p, &d, &m, why, sizeof why));
  /* 8 ranks x 80 layers x 8 heads x T: over the cap at T = 2^16 + 1. */
  T_CHECK(!rs_check_map_at(&p, &d, &m, ((int64_t)1 << 16) + 1, why, sizeof why));
  T_CHECK(strstr(why, "too many cells to check") != NULL);
  /* 5120 cells a token: at T = 2^12, 2^26 * 5/16 cells, under the cap. */
  T_CHECK(rs_check_map_at(&p, &d, &m, (int64_t)1 << 12, why, sizeof why));
  RsLayout q = p;
  q.cp = (int64_t)1 << 40;
  T_CHECK(!rs_check_map(&q, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "no usable lcm") != NULL);
  /* 80 layers x 1 head x 2^62 bytes overflows: refused, not wrapped. */
  m.xfers.items[0].bytes_per_token = INT64_MAX;
  RsLayout big = p;
  big.kv_bytes_per_head_token = INT64_MAX / 2 + 1;
  T_CHECK(!rs_check_map(&big, &d, &m, why, sizeof why));
  T_CHECK(strstr(why, "bytes_per_token 9223372036854775807, expected -1") != NULL);
  rs_map_free(&m);
}

/* Node preference: a destination takes its cells from a replica on its own
 * node when there is one. */
static void test_node_preference(void) {
  RsLayout p = dsv3("prefill"), d = dsv3("decode");
  p.tp = 8;
  d.tp = 2;
  int64_t pn[8] = {0, 0, 0, 0, 1, 1, 1, 1}, dn[2] = {1, 5};
  p.node_of_rank = pn;
  d.node_of_rank = dn;
  RsMap m = build_ok(&p, &d);
  int64_t used0 = 0;
  for (size_t i = 0; i < m.xfers.len; i++) {
    RsTransfer *x = &m.xfers.items[i];
    if (x->dst == 0) {
      T_CHECK(x->src >= 4);
      T_CHECK(x->same_node);
      used0++;
    } else {
      T_CHECK(!x->same_node);
    }
  }
  T_EQ_INT(used0, 4); /* 61 layers cut over the 4 local replicas */
  /* The second destination has no replica on its node; water filling
   * gives its 61 layers to the idle ranks 0..3, so every prefill rank sends
   * 15 or 16 layers (122 layers over 8 ranks). */
  int64_t sb[8];
  src_bytes(&m, 100, sb);
  for (int r = 0; r < 8; r++) {
    T_CHECK(sb[r] >= (int64_t)15 * 1152 * 100);
    T_CHECK(sb[r] <= (int64_t)16 * 1152 * 100);
  }
  rs_map_free(&m);
}

static void test_cost_and_slo(void) {
  RsLayout p = llama("prefill"), d = llama("decode");
  p.tp = 8;
  d.tp = 4;
  RsMap m = build_ok(&p, &d);
  RsCost c;
  T_CHECK(rs_map_cost(NULL, &m, 4000, 450e9, 50e9, 0, 0, &c));
  T_EQ_INT(c.bytes_total, (int64_t)80 * 8 * 512 * 4000);
  T_EQ_INT(c.bytes_scale_out, c.bytes_total);
  T_EQ_INT(c.bytes_scale_up, 0);
  T_EQ_INT(c.max_bytes_per_src, (int64_t)80 * 512 * 4000);
  /* Each decode rank receives 2 heads: 327,680,000 B over 50 GB/s. */
  T_NEAR(c.time_s, 80.0 * 2 * 512 * 4000 / 50e9, 1e-12);
  Diags dg;
  diags_init(&dg);
  T_CHECK(!rs_warn_slo(&dg, (SrcLoc){0}, &p, &d, &c, 0.6));
  T_CHECK(rs_warn_slo(&dg, (SrcLoc){0}, &p, &d, &c, 0.03));
  T_EQ_INT(dg.nwarnings, 1);
  T_CHECK(has_code(&dg, "W0401", "`prefill`", "`decode`"));
  diags_free(&dg);
  rs_map_free(&m);
  /* One scale-up domain for both sides: scale-up bandwidth applies. */
  int64_t dom8[8] = {0}, dom4[4] = {0};
  p.domain_of_rank = dom8;
  d.domain_of_rank = dom4;
  m = build_ok(&p, &d);
  T_CHECK(rs_map_cost(NULL, &m, 4000, 450e9, 50e9, 0, 0, &c));
  T_EQ_INT(c.bytes_scale_up, c.bytes_total);
  T_NEAR(c.time_s, 80.0 * 2 * 512 * 4000 / 450e9, 1e-12);
  rs_map_free(&m);
}

static void test_global_rank(void) {
  RsLayout l = llama("decode");
  l.tp = 2;
  l.cp = 2;
  l.dp = 2;
  l.pp = 2;
  int64_t g;
  /* rel = t + tp*(c + cp*s); order tp-cp-ep-dp-pp: t + 2c + 4dp + 8s. */
  for (int64_t dp = 0; dp < 2; dp++)
    for (int64_t rel = 0; rel < 8; rel++) {
      int64_t t = rel % 2, c = (rel / 2) % 2, s = rel / 4;
      T_CHECK(rs_global_rank("tp-cp-ep-dp-pp", &l, 100, dp, rel, &g));
      T_EQ_INT(g, 100 + t + 2 * c + 4 * dp + 8 * s);
      T_CHECK(rs_global_rank("tp-pp-dp-cp", &l, 0, dp, rel, &g));
      T_EQ_INT(g, t + 2 * s + 4 * dp + 8 * c);
    }
  T_CHECK(!rs_global_rank("tp-cp-dp", &l, 0, 0, 0, &g));
  T_CHECK(!rs_global_rank("tp-cp-dp-pp-tp", &l, 0, 0, 0, &g));
  T_CHECK(!rs_global_rank("tp-cp-dp-pp", &l, 0, 2, 0, &g));
}

static void test_deterministic(void) {
  RsLayout p = qwen("prefill"), d = qwen("decode");
  p.tp = 16;
  p.cp = 2;
  d.tp = 8;
  d.dcp = 2;
  RsMap a = build_ok(&p, &d), b = build_ok(&p, &d);
  T_EQ_INT(a.xfers.len, b.xfers.len);
  for (size_t i = 0; i < a.xfers.len && i < b.xfers.len; i++)
    T_CHECK(xfer_same(&a.xfers.items[i], &b.xfers.items[i]));
  rs_map_free(&a);
  rs_map_free(&b);
}

/* xorshift64*, fixed seed: the same 10,000 pairs on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t n) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (int64_t)((rng_state * 0x2545f4914f6cdd1dull) >> 33) % n;
}

typedef struct {
  RsLayout l;
  int64_t part[4];
  int64_t node[64], dom[64];
} RandSide;

static void rand_side(RandSide *s, const RsLayout *model, bool decode, int64_t src_cp) {
  static const int64_t hg[] = {1, 2, 3, 4, 6, 8, 12, 16};
  s->l = *model;
  int64_t h = model->mla ? 1 : model->kv_heads;
  for (;;) {
    int64_t e = hg[rnd(8)];
    if (h % e != 0 && e % h != 0) continue;
    int64_t dcp = 1 + rnd(4);
    if (dcp == 3 && rnd(3)) dcp = 1;
    s->l.dcp = dcp;
    s->l.tp = e * dcp;
    s->l.pp = 1 + rnd(model->layers < 4 ? model->layers : 4);
    if (decode) s->l.cp = rnd(6) == 0 ? src_cp : 1;
    else s->l.cp = 1 + rnd(4);
    if (rs_replica_ranks(&s->l) <= 64) break;
  }
  s->l.dp = 1 + rnd(3);
  s->l.layer_partition = NULL;
  if (rnd(2)) {
    /* A random composition of the layers into pp positive parts. */
    int64_t left = s->l.layers;
    for (int64_t i = 0; i < s->l.pp; i++) {
      int64_t rest = s->l.pp - i - 1;
      s->part[i] = i == s->l.pp - 1 ? left : 1 + rnd(left - rest);
      left -= s->part[i];
    }
    s->l.layer_partition = s->part;
  }
  s->l.node_of_rank = NULL;
  s->l.domain_of_rank = NULL;
  if (rnd(2)) {
    for (int i = 0; i < 64; i++) {
      s->node[i] = rnd(4);
      s->dom[i] = s->node[i] / 2;
    }
    s->l.node_of_rank = s->node;
    s->l.domain_of_rank = s->dom;
  }
}

static void test_random_pairs(void) {
  static const int64_t heads[] = {1, 2, 3, 4, 6, 8, 12, 16};
  int proven = 0, failed = 0;
  for (int i = 0; i < 10000; i++) {
    RsLayout model = lay("prefill", "random", 1 + rnd(12), heads[rnd(8)], rnd(4) == 0,
                         1 + rnd(1000));
    RandSide s, d;
    rand_side(&s, &model, false, 1);
    rand_side(&d, &model, true, s.l.cp);
    d.l.pool = "decode";
    if (d.l.node_of_rank && !s.l.node_of_rank) d.l.node_of_rank = d.l.domain_of_rank = NULL;
    Diags dg;
    diags_init(&dg);
    RsMap m;
    if (!rs_map_build(&dg, &s.l, &d.l, &m)) {
      if (failed++ < 3)
        fprintf(stderr, "pair %d: build failed: %s\n", i, dg.list.len ? dg.list.items[0]->msg : "?");
      diags_free(&dg);
      continue;
    }
    char why[512];
    if (rs_check_map(&s.l, &d.l, &m, why, sizeof why)) {
      proven++;
    } else if (failed++ < 3) {
      fprintf(stderr,
              "pair %d: P tp%lld cp%lld dcp%lld pp%lld -> D tp%lld cp%lld dcp%lld pp%lld "
              "(heads %lld mla %d layers %lld): %s\n",
              i, (long long)s.l.tp, (long long)s.l.cp, (long long)s.l.dcp, (long long)s.l.pp,
              (long long)d.l.tp, (long long)d.l.cp, (long long)d.l.dcp, (long long)d.l.pp,
              (long long)model.kv_heads, model.mla, (long long)model.layers, why);
    }
    /* Balance: without node ids a replica class is one group, so no source
     * sends more than its even share plus one layer of one piece. */
    if (!s.l.node_of_rank) {
      int64_t ns = m.src_ranks, T = 576; /* a multiple of every lcm(2cp) * lcm(dcp) drawn here */
      int64_t *sb = calloc((size_t)ns, sizeof *sb), *unit = calloc((size_t)ns, sizeof *unit);
      src_bytes(&m, T, sb);
      for (size_t k = 0; k < m.xfers.len; k++) {
        RsTransfer *x = &m.xfers.items[k];
        int64_t u = (x->head_end - x->head_begin) * rs_tokens_count(&x->tokens, T) *
                    s.l.kv_bytes_per_head_token;
        if (u > unit[x->src]) unit[x->src] = u;
      }
      for (int64_t r = 0; r < ns; r++) {
        RsBox br = rs_rank_box(&s.l, r);
        int64_t n = 0, tot = 0, umax = 0;
        for (int64_t q = 0; q < ns; q++) {
          RsBox bq = rs_rank_box(&s.l, q);
          if (!box_same(&br, &bq)) continue;
          n++;
          tot += sb[q];
          if (unit[q] > umax) umax = unit[q];
        }
        T_CHECK(sb[r] <= (tot + n - 1) / n + umax);
      }
      free(sb);
      free(unit);
    }
    rs_map_free(&m);
    diags_free(&dg);
  }
  fprintf(stderr, "random pairs: %d proven, %d failed\n", proven, failed);
  T_EQ_INT(proven, 10000);
  T_EQ_INT(failed, 0);
}

/* The pipeline: a spec parsed from text (the shape of
 * plans/examples/llama-3.1-70b-pd.yaml), laid out and placed by the default
 * placement, then the reshard stage, its JSON and its explain output. */
static const char *pd_pools =
    "    - { name: prefill, role: prefill, replicas: 2, tp: 8 }\n"
    "    - { name: decode, role: decode, replicas: 2, tp: 4 }\n";

static const char *pd_spec(const char *ttft) {
  static char buf[2048];
  snprintf(buf, sizeof buf,
           "version: 1\nname: pd\nmodel:\n  preset: llama-3.1-70b\n"
           "  dtype: { weights: bf16, kv_cache: bf16, activations: bf16 }\n"
           "hardware:\n  preset: h200-sxm\n  nodes: 4\n  gpus_per_node: 8\n"
           "workload:\n  input_tokens: 4000\n  output_tokens: 500\n"
           "slo:\n  ttft: %s\n  tpot: 40 ms\n"
           "deployment:\n  mode: disaggregated\n  pools:\n%s",
           ttft, pd_pools);
  return buf;
}

static Layout *pd_layout(Diags *dg, Spec **sp, const char *ttft) {
  const char *text = pd_spec(ttft);
  *sp = spec_parse(dg, "pd.yaml", text, strlen(text), NULL);
  T_CHECK(*sp != NULL);
  if (!*sp) return NULL;
  Layout *L = lay_build(dg, *sp, NULL);
  T_CHECK(L != NULL);
  if (L) T_CHECK(lay_place_default(dg, L));
  return L;
}

static void test_pipeline(void) {
  Diags dg;
  diags_init(&dg);
  Spec *s;
  Layout *L = pd_layout(&dg, &s, "600 ms");
  if (!L) {
    for (size_t i = 0; i < dg.list.len; i++) fprintf(stderr, "diag: %s\n", dg.list.items[i]->msg);
    diags_free(&dg);
    return;
  }
  RsPlan P;
  T_CHECK(rs_plan_build(&dg, s, L, &P));
  T_EQ_INT(P.npairs, 1);
  T_CHECK(!has_code(&dg, "W0401", NULL, NULL));
  if (P.npairs == 1) {
    RsPair *q = &P.pairs[0];
    T_EQ_INT(q->src.kv_bytes_per_head_token, 512);
    T_EQ_INT(q->map.xfers.len, 8);
    char why[512];
    T_CHECK(rs_check_map(&q->src, &q->dst, &q->map, why, sizeof why));
    T_EQ_INT(q->cost.bytes_total, (int64_t)80 * 8 * 512 * 4000);
    /* The default placement puts prefill and decode on different nodes:
     * every byte goes scale-out, 2 heads per decode rank over the NIC. */
    T_EQ_INT(q->cost.bytes_scale_out, q->cost.bytes_total);
    T_NEAR(q->cost.time_s, 80.0 * 2 * 512 * 4000 / s->hardware.scale_out.bandwidth.v, 1e-9);
    /* The global-rank rule lands on the pools' ranks. */
    int64_t g;
    T_CHECK(rs_global_rank("tp-cp-ep-dp-pp", &q->dst, L->pools[1].first_rank, 0, 3, &g));
    T_EQ_INT(g, L->pools[1].first_rank + 3);
  }
  rs_plan_free(&P);
  size_t len;
  char *text = emit_plan(&dg, s, L, NULL, -1, &len);
  T_CHECK(strstr(text, "\"kv_reshard\": [\n    {\"prefill\":\"prefill\",\"decode\":\"decode\"") != NULL);
  T_CHECK(strstr(text, "{\"src\":7,\"dst\":3,\"layers\":[0,80],\"kv_heads\":[7,8],"
                       "\"tokens\":\"all\",\"bytes_per_token\":40960}") != NULL);
  free(text);
  lay_free(L);
  spec_free(s);
  diags_free(&dg);
  /* A 20 ms TTFT leaves 4 ms for the transfer: W0401. */
  diags_init(&dg);
  L = pd_layout(&dg, &s, "20 ms");
  if (L) {
    T_CHECK(rs_plan_build(&dg, s, L, &P));
    T_CHECK(has_code(&dg, "W0401", "`prefill`", "20.0 ms"));
    rs_plan_free(&P);
    lay_free(L);
  }
  if (s) spec_free(s);
  diags_free(&dg);
}

/* The global-rank rule agrees with the layout's coordinates, with pp and
 * attention dp on the decode side and a pp split on prefill. */
static void test_pipeline_global_ranks(void) {
  pd_pools = "    - { name: prefill, role: prefill, replicas: 2, tp: 4, pp: 2 }\n"
             "    - { name: decode, role: decode, replicas: 2, tp: 2, dp: 2, pp: 2 }\n";
  Diags dg;
  diags_init(&dg);
  Spec *s;
  Layout *L = pd_layout(&dg, &s, "600 ms");
  if (!L) {
    for (size_t i = 0; i < dg.list.len; i++) fprintf(stderr, "diag: %s\n", dg.list.items[i]->msg);
    diags_free(&dg);
    return;
  }
  RsPlan P;
  T_CHECK(rs_plan_build(&dg, s, L, &P));
  T_EQ_INT(P.npairs, 1);
  for (size_t i = 0; i < P.npairs; i++) {
    char why[512];
    T_CHECK(rs_check_map(&P.pairs[i].src, &P.pairs[i].dst, &P.pairs[i].map, why, sizeof why));
    const RsLayout *side[2] = {&P.pairs[i].src, &P.pairs[i].dst};
    size_t pool[2] = {P.pairs[i].prefill, P.pairs[i].decode};
    for (int k = 0; k < 2; k++) {
      const LayPool *lp = &L->pools[pool[k]];
      for (int64_t inst = 0; inst < lp->replicas; inst++)
        for (int64_t dp = 0; dp < side[k]->dp; dp++)
          for (int64_t rel = 0; rel < rs_replica_ranks(side[k]); rel++) {
            int64_t g;
            T_CHECK(rs_global_rank("tp-cp-ep-dp-pp", side[k],
                                   lp->first_rank + inst * lp->instance_size, dp, rel, &g));
            const LayRank *R = &L->ranks[g];
            T_EQ_INT(R->pool, (int64_t)pool[k]);
            T_EQ_INT(R->instance, inst);
            T_EQ_INT(R->coords[CO_TP], rel % side[k]->tp);
            T_EQ_INT(R->coords[CO_PP], rel / (side[k]->tp * side[k]->cp));
            T_EQ_INT(R->coords[CO_DP], dp);
          }
    }
  }
  rs_plan_free(&P);
  lay_free(L);
  spec_free(s);
  diags_free(&dg);
}

static void test_explain(void) {
  int64_t rg[2][2] = {{0, 500}, {3500, 4000}};
  PlanTransfer x[4];
  memset(x, 0, sizeof x);
  x[0] = (PlanTransfer){.src = 0, .dst = 0, .layers = {0, 80}, .kv_heads = {0, 1},
                        .tokens = PT_ALL, .bytes_per_token = 40960};
  x[1] = (PlanTransfer){.src = 8, .dst = 0, .layers = {0, 80}, .kv_heads = {0, 1},
                        .tokens = PT_RANGES, .nranges = 2, .ranges = rg, .bytes_per_token = 40960};
  x[2] = (PlanTransfer){.src = 1, .dst = 1, .layers = {0, 80}, .kv_heads = {1, 2},
                        .tokens = PT_STRIDE, .stride = 2, .offset = 1, .bytes_per_token = 40960};
  /* Chunk ranges intersected with a dcp class: 250 + 250 tokens. */
  x[3] = (PlanTransfer){.src = 9, .dst = 1, .layers = {0, 80}, .kv_heads = {1, 2},
                        .tokens = PT_RANGES, .nranges = 2, .ranges = rg, .stride = 2, .offset = 1,
                        .bytes_per_token = 40960};
  PlanReshard R = {.prefill = (char *)"prefill", .decode = (char *)"decode", .ntransfers = 4,
                   .transfers = x};
  Plan p;
  memset(&p, 0, sizeof p);
  p.nreshard = 1;
  p.reshard = &R;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  plan_explain_reshard(f, &p, 4000);
  fclose(f);
  T_CHECK(strstr(text, "kv_reshard prefill -> decode: 4 transfers") != NULL);
  T_CHECK(strstr(text, "    0 -> 0     [0,80)      [0,1)      all") != NULL);
  T_CHECK(strstr(text, "[0,500),[3500,4000)") != NULL);
  T_CHECK(strstr(text, "p%2==1") != NULL);
  T_CHECK(strstr(text, "[0,500),[3500,4000) & p%2==1") != NULL);
  /* 4000 + 1000 + 2000 + 500 tokens of 40960 bytes. */
  T_CHECK(strstr(text, "total 307200000 bytes") != NULL);
  free(text);
}

int main(void) {
  T_RUN(test_ownership_boxes);
  T_RUN(test_tokens);
  T_RUN(test_tp8_to_tp4);
  T_RUN(test_tp2_to_tp16);
  T_RUN(test_qwen_tp16_to_tp8);
  T_RUN(test_dsv3_tp8_to_dp8);
  T_RUN(test_pp);
  T_RUN(test_cp4_to_dcp2);
  T_RUN(test_non_pow2);
  T_RUN(test_errors);
  T_RUN(test_checker_catches);
  T_RUN(test_checker_bounds);
  T_RUN(test_node_preference);
  T_RUN(test_cost_and_slo);
  T_RUN(test_global_rank);
  T_RUN(test_deterministic);
  T_RUN(test_pipeline);
  T_RUN(test_pipeline_global_ranks);
  T_RUN(test_explain);
  T_RUN(test_random_pairs);
  T_DONE();
}
