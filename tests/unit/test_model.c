/*
 * Unit tests for model.c: parameter counts against the published totals,
 * weight bytes per dtype with quantisation scales, KV bytes per token for
 * the whole model and per rank. Model shapes come from each model's
 * config.json (model_fixtures.h); the published totals are cited where
 * they are checked.
 */
#include "model.h"
#include "model_fixtures.h"
#include "t.h"

static ModelParams params(void (*fx)(ModelSpec *)) {
  ModelSpec m;
  ModelParams p;
  fx(&m);
  memset(&p, 0, sizeof p);
  T_CHECK(model_params(&m, &p, NULL));
  return p;
}

/* Published totals (within 0.5%, as each vendor rounds):
 *  - Llama-3.1-8B 8.03B, -70B 70.6B, -405B 405.9B: the "Model size"
 *    parameter counts on the Hugging Face model pages meta-llama/Llama-3.1-*
 *    (computed from the safetensors headers);
 *  - Qwen3-32B 32.8B: Qwen/Qwen3-32B model card, "Number of Parameters:
 *    32.8B";
 *  - Qwen3-235B-A22B 235B total, 22B activated: Qwen/Qwen3-235B-A22B model
 *    card, "Number of Parameters: 235B in total and 22B activated";
 *  - DeepSeek-V3 671B total, 37B activated: DeepSeek-V3 technical report
 *    (arXiv 2412.19437), abstract; the Hugging Face README adds that the
 *    685B on the hub are 671B main model + 14B MTP module, so the MTP
 *    module is excluded here;
 *  - Mixtral-8x7B 46.7B total, 12.9B per token: Mistral AI, "Mixtral of
 *    experts" announcement (mistral.ai/news/mixtral-of-experts). */
static void test_dense_totals(void) {
  T_NEAR(params(fx_llama8b).total, 8.03e9, 0.005);
  T_NEAR(params(fx_llama70b).total, 70.6e9, 0.005);
  T_NEAR(params(fx_llama405b).total, 405.9e9, 0.005);
  T_NEAR(params(fx_qwen3_32b).total, 32.8e9, 0.005);
  /* A dense model activates every parameter. */
  ModelParams p = params(fx_llama70b);
  T_EQ_INT(p.active, p.total);
  T_EQ_INT(p.n_dense, 80);
  T_EQ_INT(p.n_moe, 0);
}

static void test_moe_totals(void) {
  ModelParams q = params(fx_qwen3_235b);
  T_NEAR(q.total, 235e9, 0.005);
  /* 22.19B computed against a published "22B" (two significant figures):
   * within 1%. */
  T_NEAR(q.active, 22e9, 0.01);
  ModelParams d = params(fx_dsv3);
  T_NEAR(d.total, 671e9, 0.005);
  /* DeepSeek's README_WEIGHTS.md on the Hugging Face hub
   * (deepseek-ai/DeepSeek-V3-Base) states the main model's activation
   * parameters as "36.6B (including 0.9B for the output Head)", that is
   * without the input embedding, whose lookup reads one row per token. The
   * same count here: 36.62B. The report's rounded "37B" is checked too. */
  T_NEAR(d.active - d.embedding, 36.6e9, 0.005);
  T_NEAR(d.active, 37e9, 0.02);
  T_EQ_INT(d.n_dense, 3);
  T_EQ_INT(d.n_moe, 58);
  T_EQ_INT(d.mtp, 0);
  /* The same README_WEIGHTS.md gives the one MTP module (config.json
   * num_nextn_predict_layers 1) as "11.5B unique parameters (excluding the
   * shared 0.9B Embedding and 0.9B output Head)". Its MoE layer and norms
   * alone come to 11.51B here; the module's eh_proj (2h x h = 0.10B, the
   * checkpoint's model.layers.61.eh_proj, which the README lists) is on
   * top of that figure, as its "1.5B" activated (0.58B + 0.9B head without
   * eh_proj, 0.69B with it) also shows. rankplan counts the weights the
   * checkpoint holds, eh_proj included. */
  ModelSpec mtp;
  fx_dsv3(&mtp);
  FX_I(mtp.mtp_layers, 1);
  ModelParams dm;
  T_CHECK(model_params(&mtp, &dm, NULL));
  int64_t eh_proj = 2 * 7168LL * 7168LL;
  T_NEAR(dm.mtp - eh_proj, 11.5e9, 0.005);
  T_EQ_INT(dm.total, d.total);
  ModelParams x = params(fx_mixtral);
  T_NEAR(x.total, 46.7e9, 0.005);
  T_NEAR(x.active, 12.9e9, 0.005);
}

/* Component arithmetic, exact, from the config.json shapes. */
static void test_components(void) {
  ModelParams p = params(fx_llama8b);
  T_EQ_INT(p.embedding, 128256LL * 4096);
  T_EQ_INT(p.lm_head, 128256LL * 4096);
  T_EQ_INT(p.attn.q, 4096LL * 4096);
  T_EQ_INT(p.attn.k, 1024LL * 4096);
  T_EQ_INT(p.attn.v, 1024LL * 4096);
  T_EQ_INT(p.attn.o, 4096LL * 4096);
  T_EQ_INT(p.dense_ffn, 3LL * 4096 * 14336);
  T_EQ_INT(p.norms, 2LL * 4096 * 32 + 4096);
  /* Tied embeddings: no lm_head. */
  ModelSpec m;
  fx_llama8b(&m);
  FX_I(m.tie_embeddings, true);
  ModelParams t;
  T_CHECK(model_params(&m, &t, NULL));
  T_EQ_INT(t.lm_head, 0);
  T_EQ_INT(t.total, p.total - p.embedding);
  /* qkv bias (Qwen2 style) adds heads*hd + 2*kv_heads*hd per layer. */
  FX_I(m.attention.qkv_bias, true);
  ModelParams b;
  T_CHECK(model_params(&m, &b, NULL));
  T_EQ_INT(b.attn.total - t.attn.total, 4096 + 2 * 1024);
  /* MQA: one KV head by default. */
  fx_llama8b(&m);
  m.attention.kind.v = ATTN_MQA;
  m.attention.kv_heads.set = false;
  T_EQ_INT(model_kv_heads(&m), 1);
  T_EQ_INT(model_kv_bytes_per_token(&m), 32LL * 2 * 128 * 2);
  /* MHA defaults kv_heads to heads. */
  m.attention.kind.v = ATTN_MHA;
  T_EQ_INT(model_kv_heads(&m), 32);
  /* DeepSeek-V3 MLA, one layer. */
  ModelParams d = params(fx_dsv3);
  T_EQ_INT(d.attn.mla_q_a, 1536LL * 7168);
  T_EQ_INT(d.attn.mla_q_b, 128LL * 192 * 1536);
  T_EQ_INT(d.attn.mla_kv_a, 576LL * 7168);
  T_EQ_INT(d.attn.mla_kv_b, 128LL * 256 * 512);
  T_EQ_INT(d.attn.o, 7168LL * 128 * 128);
  T_EQ_INT(d.attn.mla_norms, 1536 + 512);
  T_EQ_INT(d.router, 256LL * 7168 + 256);
  T_EQ_INT(d.shared, 3LL * 7168 * 2048);
}

/* "DeepSeek-V3 MLA projection weights are about 11.4 GB at FP8": the five
 * MLA projections (q_a, q_b, kv_a, kv_b, o) of the 61 layers hold
 * 187.1M parameters per layer (config.json shapes), 11.41e9 bytes at one
 * byte each plus the 128x128-block fp32 scales. */
static void test_dsv3_mla_fp8(void) {
  ModelSpec m;
  fx_dsv3(&m);
  ModelBytes b;
  T_CHECK(model_weight_bytes(&m, &b, NULL));
  T_NEAR(b.attention_proj_mla, 11.4e9, 0.005);
  /* Whole model at fp8: 671B params, routed experts dominate. */
  T_NEAR(b.total, 673.15e9, 0.001);
}

static void test_dtype_bytes(void) {
  /* fp8: 7168x7168 holds 56x56 blocks of 128x128, one fp32 scale each. */
  T_EQ_INT(model_matrix_bytes(DT_FP8, 7168, 7168, 1), 7168LL * 7168 + 56 * 56 * 4);
  /* Partial blocks round up: 576 rows are 4.5 blocks -> 5. */
  T_EQ_INT(model_matrix_bytes(DT_FP8, 576, 7168, 1), 576LL * 7168 + 5 * 56 * 4);
  T_EQ_INT(model_matrix_bytes(DT_BF16, 4096, 4096, 2), 2LL * 4096 * 4096 * 2);
  T_EQ_INT(model_matrix_bytes(DT_FP16, 10, 10, 1), 200);
  T_EQ_INT(model_matrix_bytes(DT_FP32, 10, 10, 1), 400);
  /* int8: per row and group of 128 inputs, one bf16 scale. */
  T_EQ_INT(model_matrix_bytes(DT_INT8, 4096, 4096, 1), 4096LL * 4096 + 4096 * 32 * 2);
  /* int4: half a byte per weight plus bf16 scale and zero per group. */
  T_EQ_INT(model_matrix_bytes(DT_INT4, 4096, 4096, 1), 4096LL * 4096 / 2 + 4096 * 32 * 4);
  T_EQ_INT(model_matrix_bytes(DT_INT4, 3, 3, 1), 5 + 3 * 1 * 4);
  /* mxfp4: half a byte per weight, one scale byte per 32 inputs of a row
   * (gpt-oss-120b's expert up/gate projection, 5760x2880: 90 blocks). */
  T_EQ_INT(model_matrix_bytes(DT_MXFP4, 5760, 2880, 1), 5760LL * 2880 / 2 + 5760 * 90);
  T_EQ_INT(model_matrix_bytes(DT_MXFP4, 3, 33, 2), 2 * ((3 * 33 + 1) / 2 + 3 * 2));
  /* nvfp4: one scale byte per 16 inputs of a row, one fp32 per matrix. */
  T_EQ_INT(model_matrix_bytes(DT_NVFP4, 4096, 4096, 1), 4096LL * 4096 / 2 + 4096 * 256 + 4);
  T_EQ_INT(model_matrix_bytes(DT_NVFP4, 1, 17, 3), 3 * (9 + 2 + 4));
  T_CHECK(model_dtype_quantised(DT_MXFP4) && model_dtype_quantised(DT_NVFP4));
  T_EQ_INT(model_plain_bytes(DT_NVFP4, 100), 200);
  T_EQ_INT(model_matrix_bytes(DT_BF16, INT64_MAX / 2, 4, 1), -1);
  /* Plain (unquantised) tensors stay bf16 under quantised dtypes. */
  T_EQ_INT(model_plain_bytes(DT_FP8, 100), 200);
  T_EQ_INT(model_plain_bytes(DT_FP32, 100), 400);
  T_CHECK(model_dtype_quantised(DT_INT4));
  T_CHECK(!model_dtype_quantised(DT_FP16));
  /* Llama-3.1-8B in bf16 is 2 bytes per parameter exactly. */
  ModelSpec m;
  fx_llama8b(&m);
  ModelBytes b;
  ModelParams p;
  T_CHECK(model_weight_bytes(&m, &b, NULL) && model_params(&m, &p, NULL));
  T_EQ_INT(b.total, 2 * p.total);
  /* int4: about a quarter of bf16 plus scales, embeddings stay bf16. */
  m.dtype.weights.v = DT_INT4;
  ModelBytes q;
  T_CHECK(model_weight_bytes(&m, &q, NULL));
  T_EQ_INT(q.embedding, b.embedding);
  T_CHECK(q.total < b.total / 2);
  T_CHECK(q.ffn_dense > b.ffn_dense / 4);
  /* attention_weights keeps the attention projections apart (gpt-oss:
   * mxfp4 experts, bf16 attention); the rest follows weights. */
  m.dtype.attention_weights.v = DT_BF16;
  m.dtype.attention_weights.set = true;
  ModelBytes a;
  T_CHECK(model_weight_bytes(&m, &a, NULL));
  T_EQ_INT(a.attention, b.attention);
  T_EQ_INT(a.ffn_dense, q.ffn_dense);
  T_EQ_INT(a.total, q.total - q.attention + b.attention);
  T_EQ_INT(model_attention_dtype(&m), DT_BF16);
  m.dtype.attention_weights.set = false;
  T_EQ_INT(model_attention_dtype(&m), DT_INT4);
}

/* KV bytes per token. Published figures are those of the list,
 * each the product of config.json numbers (layers * 2 * kv_heads *
 * head_dim * 2 bytes; MLA layers * (kv_lora_rank + qk_rope_head_dim)). */
static void test_kv(void) {
  ModelSpec m;
  fx_llama8b(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 131072);
  fx_llama70b(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 327680);
  T_EQ_INT(model_kv_bytes_per_token_rank(&m, 8, 80, 1), 40960);
  /* pp 2 at tp 8: half the layers. */
  T_EQ_INT(model_kv_bytes_per_token_rank(&m, 8, 40, 1), 20480);
  fx_llama405b(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 516096);
  fx_qwen3_32b(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 262144);
  fx_qwen3_235b(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 192512);
  /* TP8 over 4 KV heads: each head twice, one head per GPU. */
  T_EQ_INT(model_kv_heads_per_rank(&m, 8), 1);
  T_EQ_INT(model_kv_bytes_per_token_rank(&m, 8, 94, 1), 48128);
  T_EQ_INT(model_kv_bytes_per_token_rank(&m, 2, 94, 1), 96256);
  fx_dsv3(&m);
  T_EQ_INT(model_kv_bytes_per_token(&m), 70272);
  for (int64_t tp = 1; tp <= 16; tp *= 2)
    T_EQ_INT(model_kv_bytes_per_token_rank(&m, tp, 61, 1), 70272);
  m.dtype.kv_cache.v = DT_FP8;
  T_EQ_INT(model_kv_bytes_per_token(&m), 35136);
  T_EQ_INT(model_kv_bytes_per_token_rank(&m, 8, 61, 1), 35136);
}

static void test_overflow(void) {
  ModelSpec m;
  fx_llama8b(&m);
  FX_I(m.layers, INT64_MAX / 4);
  Diags d;
  diags_init(&d);
  ModelParams p;
  T_CHECK(!model_params(&m, &p, &d));
  T_EQ_INT(d.nerrors, 1);
  T_CHECK(d.list.len == 1 && d.list.items[0]->code == DIAG_E0299);
  T_EQ_INT(model_kv_bytes_per_token(&m), -1);
  ModelBytes b;
  T_CHECK(!model_weight_bytes(&m, &b, &d));
  diags_free(&d);
  fx_llama8b(&m);
  FX_I(m.hidden_size, INT64_MAX / 2);
  T_CHECK(!model_params(&m, &p, NULL));
}

int main(void) {
  T_RUN(test_dense_totals);
  T_RUN(test_moe_totals);
  T_RUN(test_components);
  T_RUN(test_dsv3_mla_fp8);
  T_RUN(test_dtype_bytes);
  T_RUN(test_kv);
  T_RUN(test_overflow);
  T_DONE();
}
