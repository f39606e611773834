/*
 * Unit tests for the architecture features of the memory ledger and the
 * cost model: per-layer attention types (full, sliding window, chunked),
 * a draft model's weights and KV, and where shared experts live. Every
 * expected figure is worked out by hand in the comment above it from the
 * models' config.json shapes (model_fixtures.h) and docs/memory.md.
 */
#include "cost.h"
#include "memory.h"
#include "mem_fixtures.h"
#include "t.h"

#include "cost_fixtures.h"

static SEnum types[128];

/* Layer i gets type `local` unless i % every == every - 1 (full). */
static void set_types(ModelSpec *m, LayerAttn local, int every) {
  int64_t n = m->layers.v;
  T_CHECK(n <= (int64_t)RP_ARRAY_LEN(types));
  for (int64_t i = 0; i < n; i++) types[i] = (SEnum){(int)(i % every == every - 1 ? LAYER_FULL : local), {0}, true};
  m->attention.layer_types.items = types;
  m->attention.layer_types.len = (size_t)n;
  m->attention.layer_types.set = true;
}

/* Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16: 4,096 B per token
 * and layer at tp 1) with every 4th layer full and the others a
 * 1,024-token window: 8 full and 24 sliding layers. A request of
 * 4,000 + 500 = 4,500 tokens in 16-token blocks keeps
 *   full:    ceil(4500 / 16) = 282 blocks per layer;
 *   sliding: min(4500, 1024 - 1 + 1) = 1024 tokens = 64 blocks, + 1 = 65;
 * (8 * 282 + 24 * 65) = 3,816 layer-blocks of 16 * 4,096 B; a ledger
 * block (16 tokens at all 32 layers) is 32 layer-blocks: ceil(3816 / 32)
 * = 120 blocks, against 282 with every layer full. max_context 131,072:
 * (8 * 8192 + 24 * 65) / 32 = 67,096 / 32 -> 2,097. */
static void test_sliding_ledger(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 141 * 1000000000LL);
  MemLedger full, mixed, chunked;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &full, NULL));
  T_EQ_INT(full.request_blocks, 282);
  FX_I(s.model.attention.sliding_window, 1024);
  set_types(&s.model, LAYER_SLIDING, 4);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &mixed, NULL));
  T_EQ_INT(mixed.kv_bytes_per_token, 32 * 4096);
  T_EQ_INT(mixed.kv_blocks, full.kv_blocks);
  T_EQ_INT(mixed.request_blocks, 120);
  T_EQ_INT(mixed.max_context_blocks, 2097);
  T_EQ_INT(mixed.requests_fit, mixed.kv_blocks / 120);
  T_CHECK(mixed.requests_fit > 2 * full.requests_fit);
  /* A prefill step of 2,048 tokens (serving.max_num_batched_tokens): a
   * sliding layer keeps min(4500, 1023 + 2048) = 3,071 tokens = 192
   * blocks + 1 = 193; (8 * 282 + 24 * 193) = 6,888 / 32 -> 216. */
  FX_I(s.serving.max_num_batched_tokens, 2048);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &mixed, NULL));
  T_EQ_INT(mixed.request_blocks, 216);
  /* Chunked (Llama 4): chunk 2,048 plus one token, min(4500, 2049) = 129
   * blocks (no block more: a chunk starts on a block boundary when the
   * chunk is a multiple of the block); (8 * 282 + 24 * 129) = 5,352 / 32
   * -> 168. */
  s.serving.max_num_batched_tokens = (SInt){0};
  s.model.attention.sliding_window = (SInt){0};
  FX_I(s.model.attention.chunk_size, 2048);
  set_types(&s.model, LAYER_CHUNKED, 4);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &chunked, NULL));
  T_EQ_INT(chunked.request_blocks, 168);
  /* A request shorter than the window keeps all its tokens: 100 + 10
   * tokens are 7 blocks at every layer, as with full attention. */
  FX_I(s.workload.input_tokens, 100);
  FX_I(s.workload.output_tokens, 10);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &chunked, NULL));
  T_EQ_INT(chunked.request_blocks, 7);
}

/* Without layer_types a window applies to every layer (Mistral 7B
 * v0.1): min(4500, 1024) = 64 blocks + 1 = 65 at every layer. A pp stage
 * holds its own layers' types: stage 1 of pp 2 holds layers 16-31. */
static void test_window_defaults(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 141 * 1000000000LL);
  FX_I(s.model.attention.sliding_window, 1024);
  MemLedger L;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &L, NULL));
  T_EQ_INT(L.request_blocks, 65);
  T_EQ_INT(model_layer_attn(&s.model, 31), LAYER_SLIDING);
  set_types(&s.model, LAYER_SLIDING, 2); /* odd layers full */
  FX_I(pool.pp, 2);
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &L, NULL));
  /* 8 full (282) and 8 sliding (65) of 16 layers: 2,776 / 16 -> 174 */
  T_EQ_INT(L.shard.first_layer, 16);
  T_EQ_INT(L.request_blocks, 174);
}

/* KV tokens read per decoded token: Llama-3.1-8B's 32 layers at context
 * 4,250 with every 4th layer full: 8 * 4250 + 24 * min(4250, 1024) =
 * 58,576; chunked with 8,192-token chunks at context 10,000: each chunked
 * layer reads (9999 mod 8192) + 1 = 1,808 tokens, 8 * 10000 + 24 * 1808
 * = 123,392. */
static void test_read_tokens(void) {
  Spec s;
  fx_spec(&s, fx_llama8b, 141 * 1000000000LL);
  T_EQ_INT(model_kv_read_tokens(&s.model, 4250), 32 * 4250);
  FX_I(s.model.attention.sliding_window, 1024);
  set_types(&s.model, LAYER_SLIDING, 4);
  T_EQ_INT(model_kv_read_tokens(&s.model, 4250), 58576);
  s.model.attention.sliding_window = (SInt){0};
  FX_I(s.model.attention.chunk_size, 8192);
  set_types(&s.model, LAYER_CHUNKED, 4);
  T_EQ_INT(model_kv_read_tokens(&s.model, 10000), 123392);
  T_EQ_INT(model_kv_read_tokens(&s.model, 8192), 32 * 8192);
}

/* The cost model's decode step reads the windowed KV only: Llama-3.1-70B
 * at tp 8 keeps 512 B per token and layer (one KV head of 128, bf16). With
 * half of its 80 layers a 1,024-token window, 63 more requests at context
 * 4,250 read 63 * (40 * 4250 + 40 * 1024) * 512 bytes more, against
 * 63 * 4250 * 40960 with every layer full (test_cost.c, test_decode). */
static void test_decode_reads_window(void) {
  Spec s = llama70b(4);
  FX_I(s.model.attention.sliding_window, 1024);
  set_types(&s.model, LAYER_SLIDING, 2);
  CostConsts k;
  cost_consts_default(&k);
  CostModel m;
  Diags d;
  diags_init(&d);
  T_CHECK(cost_model_init(&d, &s, &k, &m));
  diags_free(&d);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecode d1, d64;
  T_CHECK(cost_decode_step(&m, &l, 1, 4250, &d1));
  T_CHECK(cost_decode_step(&m, &l, 64, 4250, &d64));
  T_NEAR((double)(d64.bytes_gpu - d1.bytes_gpu), 63.0 * (40 * 4250 + 40 * 1024) * 512, 1e-6);
}

/* A draft model: Llama-3.1-8B drafting for Llama-3.1-70B at tp 8, on the
 * last stage, only when the workload drafts tokens. The draft's rank
 * holds, in parameters: per layer q and o 512 x 4096 each, k and v
 * 128 x 4096 each (5,242,880), gate, up and down 1792 x 4096 each
 * (22,020,096) and two norms (8,192): 27,271,168 x 32 = 872,677,376; the
 * embedding and the head 16,032 x 4096 each (131,334,144) and the final
 * norm 4,096: 1,004,015,616 parameters, 2,008,031,232 bytes in bf16. Its
 * KV: 32 layers x 512 B = 16,384 B per token beside the target's 40,960. */
static void test_draft_model(void) {
  Spec s;
  fx_spec(&s, fx_llama70b, 141 * 1000000000LL);
  ModelSpec draft;
  memset(&draft, 0, sizeof draft);
  fx_llama8b(&draft);
  s.model.draft = &draft;
  FX_I(pool.tp, 8);
  MemLedger off, on;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &off, NULL));
  T_EQ_INT(off.w_draft, 0);
  T_EQ_INT(off.kv_bytes_per_token, 40960);
  FX_I(s.workload.draft_tokens, 3);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &on, NULL));
  T_EQ_INT(on.w_draft, 2008031232LL);
  T_EQ_INT(on.weights, off.weights + 2008031232LL);
  T_EQ_INT(on.kv_bytes_per_token, 40960 + 16384);
  T_EQ_INT(on.request_blocks, off.request_blocks);
  T_CHECK(on.kv_blocks < off.kv_blocks);
  /* pp 2: the draft is on the last stage only */
  FX_I(pool.pp, 2);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &on, NULL));
  T_EQ_INT(on.w_draft, 0);
  T_CHECK(mem_ledger(&s, &pool, 1, NULL, &on, NULL));
  T_EQ_INT(on.w_draft, 2008031232LL);
}

/* DeepSeek-V3's shared expert (2,048 wide, fp8 with one fp32 scale per
 * 128 x 128 block) at tp 8: split, each rank holds gate, up and down of
 * 256 x 7168: 3 x (1,835,008 + 2 x 56 x 4) = 5,506,368 B per layer;
 * replicated (SGLang with a DeepEP all-to-all, vLLM with sequence-parallel
 * MoE), the whole 2048 x 7168: 3 x (14,680,064 + 16 x 56 x 4) =
 * 44,050,944 B per layer; 58 MoE layers. */
static void test_shared_placement(void) {
  Spec s;
  fx_spec(&s, fx_dsv3, 141 * 1000000000LL);
  FX_I(pool.tp, 8);
  FX_I(pool.ep, 8);
  MemLedger tp, rep;
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &tp, NULL));
  T_EQ_INT(tp.w_shared, 58 * 5506368LL);
  FX_I(s.model.moe.shared_placement, SHARED_REPLICATED);
  T_CHECK(mem_ledger(&s, &pool, 0, NULL, &rep, NULL));
  T_EQ_INT(rep.w_shared, 58 * 44050944LL);
  T_EQ_INT(rep.weights - tp.weights, 58 * (44050944LL - 5506368LL));
  T_EQ_INT(rep.w_experts, tp.w_experts);
}

int main(void) {
  T_RUN(test_sliding_ledger);
  T_RUN(test_window_defaults);
  T_RUN(test_read_tokens);
  T_RUN(test_decode_reads_window);
  T_RUN(test_draft_model);
  T_RUN(test_shared_placement);
  T_DONE();
}
