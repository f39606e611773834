/*
 * model.h: model arithmetic. Parameter counts per component, weight bytes
 * per dtype (with the scales quantised formats carry) and KV-cache bytes per
 * token, for dense and MoE transformers with MHA, GQA, MQA and MLA
 * attention.
 *
 * Input: a ModelSpec (spec.h) whose fields passed parse. Output: plain
 * int64 counts; every product is checked and an overflow is a diagnostic
 * (E0299), never a wrap. docs/memory.md states every formula.
 *
 * Shape conventions (what the layout stage shards):
 *  - a "matrix" is one linear projection [rows = outputs, cols = inputs];
 *  - per-layer figures are for ONE layer of that kind; the model totals are
 *    per-layer figures times the number of such layers;
 *  - MoE models have `moe.dense_layers` leading dense layers, then MoE
 *    layers; a dense model has only dense layers.
 */
#ifndef RANKPLAN_MODEL_H
#define RANKPLAN_MODEL_H

#include "spec.h"

/* Parameters of one attention block (one layer). For GQA/MHA/MQA the q, k,
 * v, o projections (with biases when qkv_bias) and the per-head q/k norms
 * (qk_norm); for MLA the low-rank projections: q_a [q_lora_rank, hidden]
 * (or q [heads*(nope+rope), hidden] when q_lora_rank is 0), q_b
 * [heads*(nope+rope), q_lora_rank], kv_a [kv_lora_rank+rope, hidden], kv_b
 * [heads*(nope+v), kv_lora_rank], o [hidden, heads*v] and the q_a/kv_a
 * RMSNorms. Unused fields are 0. */
typedef struct {
  int64_t q, k, v, o;            /* GQA/MHA/MQA projections incl. biases */
  int64_t qk_norm;               /* per-head q and k norm weights */
  int64_t mla_q_a, mla_q_b;      /* MLA: q_b holds the full q when q_lora_rank == 0 */
  int64_t mla_kv_a, mla_kv_b;
  int64_t mla_norms;             /* q_a_layernorm + kv_a_layernorm */
  int64_t total;                 /* sum of the above, plus o for MLA */
} AttnParams;

typedef struct ModelParams {
  /* One layer. */
  AttnParams attn;               /* same in every layer */
  int64_t layer_norms;           /* input + post-attention RMSNorm: 2*hidden */
  int64_t dense_ffn;             /* gate+up+down of one dense layer: 3*hidden*I */
  int64_t expert;                /* one routed expert: 3*hidden*I_e */
  int64_t shared;                /* all shared experts of one MoE layer: shared*3*hidden*I_e */
  int64_t router;                /* experts*hidden (+ experts when router_bias) */
  int64_t dense_layer;           /* attn + norms + dense_ffn */
  int64_t moe_layer;             /* attn + norms + experts*expert + shared + router */
  int64_t moe_layer_active;      /* attn + norms + top_k*expert + shared + router */
  /* Layer counts. */
  int64_t n_dense, n_moe;        /* n_dense + n_moe == layers */
  /* Whole model, per component. */
  int64_t embedding;             /* vocab*hidden */
  int64_t lm_head;               /* vocab*hidden, 0 when tied */
  int64_t final_norm;            /* hidden */
  int64_t attention;             /* attn.total * layers */
  int64_t norms;                 /* layer_norms*layers + final_norm */
  int64_t ffn_dense;             /* dense_ffn * n_dense */
  int64_t experts_routed;        /* experts*expert * n_moe */
  int64_t experts_shared;        /* shared * n_moe */
  int64_t routers;               /* router * n_moe */
  int64_t total;                 /* every parameter (MTP modules excluded) */
  int64_t mtp;                   /* the MTP modules, besides total: each a layer like the last,
                                    the 2h x h projection and three norms (embedding and head shared) */
  int64_t active;                /* per token: total minus the routed experts not chosen */
} ModelParams;

/* Fills *out. Returns false (and reports E0299 at the model's position
 * when d is not NULL) when a count overflows int64. Missing optional fields
 * take their spec.h defaults. */
bool model_params(const ModelSpec *m, ModelParams *out, Diags *d);

/* Bytes per element of a dtype as a fraction num/den (int4, mxfp4,
 * nvfp4: 1/2). */
void model_dtype_size(DType t, int64_t *num, int64_t *den);

/* Whether weights of this dtype carry quantisation scales (fp8, int8,
 * int4, mxfp4, nvfp4). Quantised models keep embedding, lm_head, norms, routers and
 * biases in bf16; only the linear projections are quantised. */
bool model_dtype_quantised(DType t);

/* The dtype of the attention projections: model.dtype.attention_weights
 * when the spec sets it, else the weights'. */
DType model_attention_dtype(const ModelSpec *m);

/* Bytes of `count` copies of a [rows, cols] projection in dtype t,
 * including scales: fp8 one fp32 scale per 128x128 block (as DeepSeek-V3
 * ships); int8 and int4 one bf16 scale per group of 128 input elements
 * per row, int4 also one bf16 zero point per group; mxfp4 one byte per 32
 * input elements per row; nvfp4 one byte per 16 and one fp32 per matrix;
 * fp32/bf16/fp16 none.
 * Returns -1 on overflow. */
int64_t model_matrix_bytes(DType t, int64_t rows, int64_t cols, int64_t count);

/* Bytes of n unquantised parameters (norms, biases, routers, embeddings):
 * in dtype t when t is fp32/bf16/fp16, else in bf16. -1 on overflow. */
int64_t model_plain_bytes(DType t, int64_t n);

/* Weight bytes of the whole model in its weight dtype, scales included. */
typedef struct {
  int64_t embedding, lm_head, attention, norms, ffn_dense;
  int64_t experts_routed, experts_shared, routers;
  int64_t attention_proj_mla;   /* MLA q_a+q_b+kv_a+kv_b+o, 0 for others */
  int64_t total;
} ModelBytes;
bool model_weight_bytes(const ModelSpec *m, ModelBytes *out, Diags *d);

/* Bytes of KV cache one token needs over all layers, in the kv_cache dtype:
 * GQA/MHA/MQA 2 * kv_heads * head_dim per layer; MLA (kv_lora_rank +
 * qk_rope_head_dim) per layer (one latent "head"). fp8 is 1 byte, int4 1/2
 * (rounded up per layer); KV scales are not counted. -1 on overflow. */
int64_t model_kv_bytes_per_token(const ModelSpec *m);

/* The same for one rank that holds `pp_layers` layers under tensor
 * parallel size tp and decode context parallel size dcp: GQA keeps
 * max(1, kv_heads / tp) heads per rank (tp > kv_heads replicates each
 * head tp / kv_heads times); MLA's latent is kept whole on every tp rank.
 * dcp splits tokens, not heads, so it does not change the bytes of one
 * token a rank stores (it changes how many tokens a rank stores); it is a
 * parameter so callers state it. -1 on overflow. */
int64_t model_kv_bytes_per_token_rank(const ModelSpec *m, int64_t tp,
                                      int64_t pp_layers, int64_t dcp);

/* The attention type of layer `layer` (0-based): its entry of
 * attention.layer_types, or, without that list, sliding when
 * sliding_window is set, chunked when chunk_size is, else full. */
LayerAttn model_layer_attn(const ModelSpec *m, int64_t layer);

/* Whether some layer is not full attention. */
bool model_has_local_layers(const ModelSpec *m);

/* One request's KV on one rank, by layer type (docs/memory.md, "Attention
 * types"): a full layer keeps every token, a sliding layer the last
 * min(tokens, window - 1 + batched) tokens and one block more when that
 * window starts inside a block, a chunked layer min(tokens, chunk +
 * batched) tokens; each layer's tokens are split over `split` ranks and
 * rounded up to whole blocks of `block` tokens. The rank holds layers
 * [first_layer, first_layer + layers) of m and `full_layers` more layers
 * of full attention after them (MTP modules). */
typedef struct {
  int64_t tp, first_layer, layers, full_layers;
  int64_t tokens, split, block;
  int64_t batched;    /* tokens the engine schedules in one step (>= 1) */
} KvRequest;
/* Bytes (-1 on overflow). For a model whose layers are all full this is
 * ceil(ceil(tokens / split) / block) * block * model_kv_bytes_per_token_rank. */
int64_t model_kv_request_bytes_rank(const ModelSpec *m, const KvRequest *r);

/* KV tokens the attention of all layers reads, summed over the layers,
 * for one token decoded at context c: a full layer reads c, a sliding one
 * min(c, window), a chunked one the tokens of its chunk so far,
 * ((c - 1) mod chunk) + 1. -1 on overflow. */
int64_t model_kv_read_tokens(const ModelSpec *m, int64_t c);

/* KV heads a rank holds at tensor parallel size tp (1 for MLA). */
int64_t model_kv_heads_per_rank(const ModelSpec *m, int64_t tp);

/* Field accessors with the spec.h defaults applied. */
int64_t model_kv_heads(const ModelSpec *m);
int64_t model_head_dim(const ModelSpec *m);
/* The edge of an fp8 weight's square scale block: rankplan counts fp8
 * weights as block-quantised, one fp32 scale per 128 x 128 block
 * (DeepSeek-V3's weight_block_size [128, 128]; docs/memory.md). */
#define MODEL_FP8_BLOCK 128

bool model_is_moe(const ModelSpec *m);

/* Expert slots of one MoE layer: the routed experts plus
 * moe.redundant_experts (saturating at INT64_MAX). ep divides it. */
int64_t model_expert_slots(const ModelSpec *m);

#endif
