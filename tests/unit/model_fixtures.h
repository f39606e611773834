/*
 * model_fixtures.h: published model shapes for the model and memory unit
 * tests, built as ModelSpec structs directly (no YAML). Every number is
 * the one in the model's public config.json on its Hugging Face model
 * page, cited per model.
 */
#ifndef RANKPLAN_MODEL_FIXTURES_H
#define RANKPLAN_MODEL_FIXTURES_H

#include <string.h>

#include "spec.h"

#define FX_I(f, x) ((f).v = (x), (f).set = true)

static inline void fx_base(ModelSpec *m, const char *name, int64_t layers, int64_t hidden,
                           int64_t vocab, int64_t heads, int64_t kv_heads, int64_t head_dim,
                           int64_t inter) {
  memset(m, 0, sizeof *m);
  m->name.v = name;
  m->name.set = true;
  FX_I(m->layers, layers);
  FX_I(m->hidden_size, hidden);
  FX_I(m->vocab_size, vocab);
  FX_I(m->attention.kind, kv_heads == heads ? ATTN_MHA : ATTN_GQA);
  FX_I(m->attention.heads, heads);
  FX_I(m->attention.kv_heads, kv_heads);
  FX_I(m->attention.head_dim, head_dim);
  FX_I(m->ffn.intermediate_size, inter);
  m->dtype.weights.v = DT_BF16;
  m->dtype.kv_cache.v = DT_BF16;
  m->dtype.activations.v = DT_BF16;
  FX_I(m->max_context, 131072);
}

static inline void fx_moe(ModelSpec *m, int64_t experts, int64_t top_k, int64_t shared,
                          int64_t expert_inter, int64_t dense_layers, bool router_bias) {
  m->moe.present = true;
  FX_I(m->moe.experts, experts);
  FX_I(m->moe.top_k, top_k);
  FX_I(m->moe.shared_experts, shared);
  FX_I(m->moe.expert_intermediate_size, expert_inter);
  FX_I(m->moe.dense_layers, dense_layers);
  FX_I(m->moe.router_bias, router_bias);
}

/* meta-llama/Llama-3.1-8B config.json. */
static inline void fx_llama8b(ModelSpec *m) {
  fx_base(m, "llama-3.1-8b", 32, 4096, 128256, 32, 8, 128, 14336);
}
/* meta-llama/Llama-3.1-70B config.json. */
static inline void fx_llama70b(ModelSpec *m) {
  fx_base(m, "llama-3.1-70b", 80, 8192, 128256, 64, 8, 128, 28672);
}
/* meta-llama/Llama-3.1-405B config.json. */
static inline void fx_llama405b(ModelSpec *m) {
  fx_base(m, "llama-3.1-405b", 126, 16384, 128256, 128, 8, 128, 53248);
}
/* Qwen/Qwen3-32B config.json (head_dim 128, q/k RMSNorm per head). */
static inline void fx_qwen3_32b(ModelSpec *m) {
  fx_base(m, "qwen3-32b", 64, 5120, 151936, 64, 8, 128, 25600);
  FX_I(m->attention.qk_norm, true);
  FX_I(m->max_context, 40960);
}
/* Qwen/Qwen3-235B-A22B config.json: every layer is MoE (mlp_only_layers
 * empty), 128 experts, 8 per token, moe_intermediate_size 1536. */
static inline void fx_qwen3_235b(ModelSpec *m) {
  fx_base(m, "qwen3-235b-a22b", 94, 4096, 151936, 64, 4, 128, 12288);
  FX_I(m->attention.qk_norm, true);
  fx_moe(m, 128, 8, 0, 1536, 0, false);
  FX_I(m->max_context, 40960);
}
/* deepseek-ai/DeepSeek-V3 config.json: MLA (q_lora_rank 1536, kv_lora_rank
 * 512, qk_nope 128, qk_rope 64, v 128), 3 dense layers (first_k_dense_replace),
 * 256 routed + 1 shared experts, 8 per token, e_score_correction_bias. */
static inline void fx_dsv3(ModelSpec *m) {
  fx_base(m, "deepseek-v3", 61, 7168, 129280, 128, 128, 0, 18432);
  m->attention.kind.v = ATTN_MLA;
  m->attention.kv_heads.set = false;
  m->attention.head_dim.set = false;
  FX_I(m->attention.q_lora_rank, 1536);
  FX_I(m->attention.kv_lora_rank, 512);
  FX_I(m->attention.qk_nope_head_dim, 128);
  FX_I(m->attention.qk_rope_head_dim, 64);
  FX_I(m->attention.v_head_dim, 128);
  fx_moe(m, 256, 8, 1, 2048, 3, true);
  m->dtype.weights.v = DT_FP8;
  FX_I(m->max_context, 163840);
}
/* mistralai/Mixtral-8x7B-v0.1 config.json. */
static inline void fx_mixtral(ModelSpec *m) {
  fx_base(m, "mixtral-8x7b", 32, 4096, 32000, 32, 8, 128, 14336);
  fx_moe(m, 8, 2, 0, 14336, 0, false);
  FX_I(m->max_context, 32768);
}

#endif
