/*
 * Unit tests for memory.c: the per-rank ledger. Specs are built as structs
 * (model_fixtures.h); expected figures are recomputed here from the
 * model's parameter counts and the sharding rules of docs/memory.md, so a
 * change in either side shows up.
 */
#include "memory.h"
#include "mem_fixtures.h"
#include "t.h"
#include "validate.h"

/* Llama-3.1-70B on one 80 GB GPU: 141 GB of bf16 weights cannot fit. */
static void test_over_budget(void) {
  Spec s;
  fx_spec(&s, fx_llama70b, 80 * 1000000000LL);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  ModelParams p;
  T_CHECK(model_params(&s.model, &p, NULL));
  T_EQ_INT(L.weights, 2 * p.total);
  T_CHECK(L.kv_pool < 0);
  T_EQ_INT(L.kv_blocks, 0);
  T_EQ_INT(L.requests_fit, 0);
  T_CHECK(!L.max_context_fits);
  T_EQ_INT(L.usable, 72 * 1000000000LL);
}

/* Llama-3.1-70B at TP8 on 141 GB GPUs: every split is exact, so the rank's
 * weights are the sharded parameters times two bytes, norms replicated. */
static void test_tp8_dense(void) {
  Spec s;
  fx_spec(&s, fx_llama70b, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  ModelParams p;
  T_CHECK(model_params(&s.model, &p, NULL));
  int64_t sharded = (p.total - p.norms) / 8;
  T_EQ_INT(L.weights, 2 * (sharded + p.norms));
  T_EQ_INT(L.w_embedding, 2 * 128256LL / 8 * 8192);
  T_EQ_INT(L.shard.q_heads, 8);
  T_EQ_INT(L.shard.kv_heads, 1);
  T_EQ_INT(L.shard.vocab, 16032);
  T_EQ_INT(L.kv_bytes_per_token, 40960);
  /* The ledger adds up. */
  T_EQ_INT(L.kv_pool, L.usable - L.weights - L.activations - L.workspace - L.reserve - L.comm);
  T_EQ_INT(L.comm, MEM_COMM_BYTES_PER_GROUP); /* the tp group only */
  T_EQ_INT(L.kv_blocks, L.kv_pool / (16 * 40960));
  /* 4500 tokens need 282 blocks of 16; 131072 need 8192. */
  T_EQ_INT(L.request_blocks, 282);
  T_EQ_INT(L.max_context_blocks, 8192);
  T_EQ_INT(L.requests_fit, L.kv_blocks / 282);
  T_CHECK(L.requests_fit > 0);
  T_CHECK(L.max_context_fits);
  /* Activations: 4000 tokens x (4*8192 + (8+2)*128 + 2*28672/8) x 2 bytes,
   * plus one sequence's fp32 logits over 16032 vocabulary rows. */
  T_EQ_INT(L.tokens_per_forward, 4000);
  T_EQ_INT(L.activations, 4000LL * (4 * 8192 + 10 * 128 + 2 * 3584) * 2 + 16032LL * 4);
  T_EQ_INT(L.ranks, 8);
}

/* pp 2: the stages split the layers; embedding first, lm_head and the
 * final norm last; together they hold what pp 1 holds. */
static void test_pp_stages(void) {
  Spec s;
  fx_spec(&s, fx_llama70b, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  MemLedger one, a, b;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &one, NULL));
  FX_I(pool.pp, 2);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &a, NULL));
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &b, NULL));
  T_EQ_INT(a.shard.first_layer, 0);
  T_EQ_INT(a.shard.layers, 40);
  T_EQ_INT(b.shard.first_layer, 40);
  T_CHECK(a.shard.has_embedding && !a.shard.has_lm_head);
  T_CHECK(!b.shard.has_embedding && b.shard.has_lm_head);
  T_EQ_INT(a.weights + b.weights, one.weights);
  T_EQ_INT(a.kv_bytes_per_token, 20480);
  /* An explicit partition wins over the balanced split. */
  int64_t part[2] = {30, 50};
  T_CHECK(mem_ledger(&s, &pool, 1, part, &b, NULL));
  T_EQ_INT(b.shard.first_layer, 30);
  T_EQ_INT(b.shard.layers, 50);
  T_EQ_INT(b.kv_bytes_per_token, 25600);
  int64_t bal[3];
  mem_balanced_partition(10, 3, bal);
  T_CHECK(bal[0] == 4 && bal[1] == 3 && bal[2] == 3);
  /* Tied embeddings: with pp > 1 the last stage keeps its own copy. */
  FX_I(s.model.tie_embeddings, true);
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &b, NULL));
  T_CHECK(b.shard.has_lm_head && b.w_lm_head > 0);
  FX_I(pool.pp, 1);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &b, NULL));
  T_CHECK(!b.shard.has_lm_head && b.w_lm_head == 0);
}

/* Qwen3-235B-A22B at TP8 and EP8: one KV head per GPU (replicated), 16
 * experts per rank, routers and norms replicated. */
static void test_moe_ep(void) {
  Spec s;
  fx_spec(&s, fx_qwen3_235b, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  FX_I(pool.ep, 8);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.kv_bytes_per_token, 48128);
  T_EQ_INT(L.shard.experts, 16);
  T_EQ_INT(L.w_experts, 94LL * 16 * 3 * 4096 * 1536 * 2);
  T_EQ_INT(L.w_routers, 94LL * 128 * 4096 * 2);
  T_EQ_INT(L.w_shared, 0);
  T_EQ_INT(L.shard.moe_layers, 94);
  T_EQ_INT(L.comm, 2 * MEM_COMM_BYTES_PER_GROUP); /* tp and ep */
  /* etp 2 halves each expert and doubles... nothing else. */
  FX_I(pool.ep, 4);
  FX_I(pool.etp, 2);
  MemLedger E;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &E, NULL));
  T_EQ_INT(E.shard.experts, 32);
  T_EQ_INT(E.w_experts, L.w_experts);
}

/* DeepSeek-V3 (fp8 weights, 128x128 block scales) with attention dp 8 and
 * ep 8 on 141 GB GPUs: MLA weights whole on each rank (tp 1), 32 experts
 * per rank, dense layers replicated, latent KV 70,272 bytes per token. */
static void test_dsv3_dp_ep(void) {
  Spec s;
  fx_spec(&s, fx_dsv3, 141 * 1000000000LL);
  FX_I(pool.dp, 8);
  FX_I(pool.ep, 8);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.shard.experts, 32);
  T_EQ_INT(L.shard.dense_layers, 3);
  T_EQ_INT(L.shard.moe_layers, 58);
  T_EQ_INT(L.kv_bytes_per_token, 70272);
  /* One routed expert at fp8: gate/up [2048, 7168] and down [7168, 2048]
   * with 16x56 and 56x16 blocks of fp32 scales. */
  int64_t expert = 3LL * 2048 * 7168 + 3 * 16 * 56 * 4;
  T_EQ_INT(L.w_experts, 58 * 32 * expert);
  ModelBytes b;
  T_CHECK(model_weight_bytes(&s.model, &b, NULL));
  T_EQ_INT(L.w_attention, b.attention);
  T_EQ_INT(L.w_ffn_dense, b.ffn_dense);
  T_EQ_INT(L.requests_fit_instance, 8 * L.requests_fit);
  T_EQ_INT(L.ranks, 8);
  /* At tp 8 the latent is stored on every rank, still 70,272 bytes. */
  FX_I(pool.dp, 1);
  FX_I(pool.tp, 8);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.kv_bytes_per_token, 70272);
  T_EQ_INT(L.shard.q_heads, 16);
  /* Where the other parts live at tp 8, ep 8 (docs/memory.md): the shared
   * expert (intermediate 2048) is split over tp, 256 columns per rank, at
   * fp8 with one fp32 scale per 128x128 block (2x56 blocks per matrix);
   * the router (256 experts x 7168, plus the 256-entry bias) and every
   * RMSNorm are whole on every rank and stay bf16; the embedding and the
   * lm_head are vocab-parallel, 129280 / 8 = 16160 rows each. */
  T_EQ_INT(L.w_shared, 58 * 3 * (256LL * 7168 + 2 * 56 * 4));
  T_EQ_INT(L.w_routers, 58 * (256LL * 7168 + 256) * 2);
  T_EQ_INT(L.w_norms, (2LL * 7168 * 61 + 7168) * 2);
  T_EQ_INT(L.w_embedding, 16160LL * 7168 * 2);
  T_EQ_INT(L.w_lm_head, 16160LL * 7168 * 2);
  T_EQ_INT(L.shard.experts, 32);
  /* The dense layers' FFN (intermediate 18432) is split over tp: 2304
   * columns per rank, 18x56 blocks per matrix. */
  T_EQ_INT(L.w_ffn_dense, 3 * 3 * (2304LL * 7168 + 18 * 56 * 4));
  /* MLA at tp 8, per layer: q_a [1536, 7168] and kv_a [576, 7168] whole on
   * every rank (12x56 and 5x56 blocks); q_b [16*192, 1536], kv_b
   * [16*256, 512] and o [7168, 16*128] split by heads (24x12, 32x4 and
   * 56x16 blocks); the q_a and kv_a norms (1536 + 512) whole, in bf16. */
  int64_t mla = (1536LL * 7168 + 12 * 56 * 4) + (576LL * 7168 + 5 * 56 * 4) +
                (3072LL * 1536 + 24 * 12 * 4) + (4096LL * 512 + 32 * 4 * 4) +
                (7168LL * 2048 + 56 * 16 * 4) + (1536 + 512) * 2;
  T_EQ_INT(L.w_attention, 61 * mla);
}

/* DeepSeek-V3's MTP module (model.mtp_layers 1) is loaded for speculative
 * decoding only: with draft tokens the last pp stage holds one more MoE
 * layer (experts, shared expert, router, attention, norms, KV), the 2h x
 * h eh_proj and three norms in bf16; the first stage and a run without
 * drafts are unchanged. */
static void test_mtp(void) {
  Spec s;
  fx_spec(&s, fx_dsv3, 141 * 1000000000LL);
  FX_I(s.model.mtp_layers, 1);
  FX_I(pool.pp, 2);
  FX_I(pool.ep, 8);
  FX_I(pool.dp, 8);
  MemLedger first, last, first_d, last_d;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &first, NULL));
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &last, NULL));
  T_EQ_INT(last.shard.mtp_layers, 0);
  T_EQ_INT(last.w_mtp_proj, 0);
  FX_I(s.workload.draft_tokens, 1);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &first_d, NULL));
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &last_d, NULL));
  T_EQ_INT(first_d.weights, first.weights);
  T_EQ_INT(first_d.kv_bytes_per_token, first.kv_bytes_per_token);
  T_EQ_INT(last_d.shard.mtp_layers, 1);
  int64_t moe = last.shard.moe_layers, layers = last.shard.layers;
  T_EQ_INT(last_d.w_experts, last.w_experts / moe * (moe + 1));
  T_EQ_INT(last_d.w_shared, last.w_shared / moe * (moe + 1));
  T_EQ_INT(last_d.w_attention, last.w_attention / layers * (layers + 1));
  T_EQ_INT(last_d.w_mtp_proj, (2LL * 7168 * 7168 + 3 * 7168) * 2);
  T_EQ_INT(last_d.kv_bytes_per_token, last.kv_bytes_per_token / layers * (layers + 1));
  T_CHECK(last_d.kv_blocks < last.kv_blocks);
}

/* Redundant experts: 256 experts plus 32 slots over ep 72 is 4 expert
 * slots per rank, each with a whole expert's weights. */
static void test_redundant_experts(void) {
  Spec s;
  fx_spec(&s, fx_dsv3, 141 * 1000000000LL);
  FX_I(s.model.moe.redundant_experts, 32);
  FX_I(pool.dp, 72);
  FX_I(pool.ep, 72);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.shard.experts, 4);
  int64_t expert = 3LL * 2048 * 7168 + 3 * 16 * 56 * 4; /* fp8 with block scales, as above */
  T_EQ_INT(L.w_experts, 58 * 4 * expert);
  T_EQ_INT(model_expert_slots(&s.model), 288);
}

/* cp and dcp split one request's tokens over ranks. */
static void test_context_split(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 80 * 1000000000LL);
  FX_I(pool.tp, 8);
  FX_I(pool.role, ROLE_DECODE);
  FX_I(pool.dcp, 4);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.max_context_blocks, 131072 / 4 / 16);
  T_EQ_INT(L.request_blocks, (4500 / 4 + 15) / 16);
  T_EQ_INT(L.tokens_per_forward, MEM_DECODE_SEQS);
  FX_I(pool.role, ROLE_PREFILL);
  FX_I(pool.dcp, 1);
  FX_I(pool.cp, 2);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.tokens_per_forward, 2000);
  T_EQ_INT(L.max_context_blocks, 131072 / 2 / 16);
}

/* The engine's step limits from `serving:`: a chunked prefill runs at most
 * max_num_batched_tokens per forward, a decode step max_num_seqs
 * sequences, and the logits follow the sequences. */
static void test_serving_limits(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 80 * 1000000000LL);
  MemLedger whole, L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &whole, NULL));
  T_EQ_INT(whole.tokens_per_forward, 4000);
  FX_I(s.serving.max_num_batched_tokens, 1024);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.tokens_per_forward, 1024);
  T_CHECK(L.activations < whole.activations);
  FX_I(s.serving.max_num_batched_tokens, 8192); /* larger than the prompt: no chunking */
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.tokens_per_forward, 4000);
  FX_I(pool.role, ROLE_DECODE);
  FX_I(s.serving.max_num_seqs, 64);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.tokens_per_forward, 64);
  /* max_num_seqs is the instance's: each of 8 attention dp replicas runs
   * its share, ceil(64 / 8) and ceil(65 / 8) (docs/memory.md). */
  int64_t tp0 = pool.tp.v;
  FX_I(pool.tp, 1);
  FX_I(pool.dp, 8);
  MemLedger share;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &share, NULL));
  T_EQ_INT(share.tokens_per_forward, 8);
  T_EQ_INT(share.profile_seqs, 8);
  FX_I(s.serving.max_num_seqs, 65);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &share, NULL));
  T_EQ_INT(share.tokens_per_forward, 9);
  FX_I(s.serving.max_num_seqs, 64);
  FX_I(pool.dp, 1);
  FX_I(pool.tp, tp0);
  s.serving.max_num_seqs.v = 0;
  s.serving.max_num_seqs.set = false;
  MemLedger dflt;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &dflt, NULL));
  T_EQ_INT(dflt.tokens_per_forward, MEM_DECODE_SEQS);
  T_CHECK(L.activations < dflt.activations);
}

static void test_overflow(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 80 * 1000000000LL);
  FX_I(s.model.hidden_size, INT64_MAX / 8);
  Diags d;
  diags_init(&d);
  MemLedger L;
  T_CHECK(!mem_ledger(&s, &pool, 0, NULL, &L, &d));
  T_CHECK(d.list.len == 1 && d.list.items[0]->code == DIAG_E0299);
  T_EQ_INT(L.weights, 0);
  diags_free(&d);
}

/* The model-level checks of validate_spec, for a ModelSpec built in code
 * (the spec front end already requires these keys, so no YAML reaches
 * them): each names the missing field, and no pool rule runs after it. */
static int first_code(void (*fx)(ModelSpec *), void (*edit)(ModelSpec *), size_t *n) {
  Spec s;
  fx_spec(&s, fx, 141 * 1000000000LL);
  edit(&s.model);
  Diags d;
  diags_init(&d);
  validate_spec(&d, &s);
  *n = d.list.len;
  int code = d.list.len ? (int)d.list.items[0]->code : -1;
  diags_free(&d);
  return code;
}
static void no_v_head_dim(ModelSpec *m) { m->attention.v_head_dim.v = 0; m->attention.v_head_dim.set = false; }
static void odd_hidden(ModelSpec *m) {
  FX_I(m->hidden_size, 4100); /* 4100 / 32 heads = 128.125 */
  m->attention.head_dim.set = false;
  m->attention.head_dim.v = 0;
}
static void no_top_k(ModelSpec *m) { m->moe.top_k.v = 0; m->moe.top_k.set = false; }
static void test_model_checks(void) {
  size_t n = 0;
  T_EQ_INT(first_code(fx_dsv3, no_v_head_dim, &n), DIAG_E0218);
  T_EQ_INT(n, 1);
  T_EQ_INT(first_code(fx_llama8b, odd_hidden, &n), DIAG_E0220);
  T_EQ_INT(n, 1);
  T_EQ_INT(first_code(fx_mixtral, no_top_k, &n), DIAG_E0219);
  T_EQ_INT(n, 1);
}

/* The pool rules on sizes a hand-made Spec can hold but the spec's limits
 * refuse: products of them are checked, so each rule reports with exact or
 * saturated numbers and nothing wraps (the UBSan build would stop on a
 * signed overflow or a division by zero). */
static bool has_code(const Diags *d, DiagCode c) {
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == c) return true;
  return false;
}
static void test_rules_overflow(void) {
  Spec s;
  Diags d;
  /* ep x etp past 2^63 on a MoE model: E0208, the product saturated. */
  fx_spec(&s, fx_mixtral, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  FX_I(pool.ep, (int64_t)1 << 62);
  FX_I(pool.etp, 4);
  diags_init(&d);
  validate_spec(&d, &s);
  T_CHECK(has_code(&d, DIAG_E0208));
  diags_free(&d);
  /* etp 2^63 - 1 alone, and cp large enough that tp * cp overflows. */
  FX_I(pool.ep, 1);
  FX_I(pool.etp, INT64_MAX);
  diags_init(&d);
  validate_spec(&d, &s);
  T_CHECK(has_code(&d, DIAG_E0208) && has_code(&d, DIAG_E0205));
  diags_free(&d);
  fx_spec(&s, fx_llama8b, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  FX_I(pool.cp, (int64_t)1 << 61);
  diags_init(&d);
  validate_spec(&d, &s);
  T_CHECK(has_code(&d, DIAG_E0211));
  diags_free(&d);
  /* max_context 2^63 - 1: the KV rule's "needs" is a non-negative count
   * (it printed -2^63: blocks x block tokens wrapped). */
  fx_spec(&s, fx_llama8b, 141 * 1000000000LL);
  FX_I(s.model.max_context, INT64_MAX);
  diags_init(&d);
  validate_spec(&d, &s);
  T_CHECK(has_code(&d, DIAG_E0217));
  for (size_t i = 0; i < d.list.len; i++)
    if (d.list.items[i]->code == DIAG_E0217) T_CHECK(strstr(d.list.items[i]->msg, "needs -") == NULL);
  diags_free(&d);
  /* A GPU of 2^63 - 1 bytes at utilization 1: usable is the capacity,
   * not the double 2^63 cast back to int64. */
  fx_spec(&s, fx_llama8b, INT64_MAX);
  s.deployment.memory.utilization.v = 1.0;
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.usable, INT64_MAX);
}

int main(void) {
  T_RUN(test_over_budget);
  T_RUN(test_tp8_dense);
  T_RUN(test_pp_stages);
  T_RUN(test_moe_ep);
  T_RUN(test_dsv3_dp_ep);
  T_RUN(test_context_split);
  T_RUN(test_serving_limits);
  T_RUN(test_mtp);
  T_RUN(test_redundant_experts);
  T_RUN(test_overflow);
  T_RUN(test_model_checks);
  T_RUN(test_rules_overflow);
  T_DONE();
}
