/*
 * model.c: model arithmetic (parameter counts, weight bytes, KV bytes).
 *
 * Input IR: ModelSpec (spec.h), fields already typed by parse.
 * Output IR: ModelParams, ModelBytes and KV byte counts (model.h).
 * Invariants: every product goes through the sticky-overflow accumulator
 * (CkState); a function that overflowed returns false or -1 and never a
 * wrapped number. Counts follow the Hugging Face checkpoints' layouts:
 * SwiGLU FFNs (gate, up, down), RMSNorm weights without bias, MTP modules
 * not counted (DeepSeek-V3's 671B excludes its 14B MTP module).
 */
#include "model.h"

#include <string.h>

int64_t model_kv_heads(const ModelSpec *m) {
  switch ((AttnKind)m->attention.kind.v) {
  case ATTN_MQA: return m->attention.kv_heads.set ? m->attention.kv_heads.v : 1;
  case ATTN_MLA: return 1;
  case ATTN_MHA:
  case ATTN_GQA:
  default:
    return m->attention.kv_heads.set && m->attention.kv_heads.v > 0
               ? m->attention.kv_heads.v
               : m->attention.heads.v;
  }
}

int64_t model_head_dim(const ModelSpec *m) {
  if (m->attention.head_dim.set && m->attention.head_dim.v > 0) return m->attention.head_dim.v;
  if (m->attention.heads.v > 0) return m->hidden_size.v / m->attention.heads.v;
  return 0;
}

bool model_is_moe(const ModelSpec *m) {
  return m->moe.present && m->moe.experts.v > 0;
}

int64_t model_expert_slots(const ModelSpec *m) {
  int64_t r;
  return ck_add(m->moe.experts.v, m->moe.redundant_experts.v, &r) ? r : INT64_MAX;
}

static bool is_mla(const ModelSpec *m) {
  return (AttnKind)m->attention.kind.v == ATTN_MLA;
}

/* Counts the attention block of one layer into *a. */
static void attn_params(CkState *st, const ModelSpec *m, AttnParams *a) {
  memset(a, 0, sizeof *a);
  int64_t h = m->hidden_size.v, nh = m->attention.heads.v;
  if (is_mla(m)) {
    int64_t ql = m->attention.q_lora_rank.v, kvl = m->attention.kv_lora_rank.v;
    int64_t nope = m->attention.qk_nope_head_dim.v, rope = m->attention.qk_rope_head_dim.v;
    int64_t vd = m->attention.v_head_dim.v;
    int64_t qdim = ckm(st, nh, cka(st, nope, rope));
    if (ql > 0) {
      a->mla_q_a = ckm(st, ql, h);
      a->mla_q_b = ckm(st, qdim, ql);
      a->mla_norms = ql;
    } else {
      a->mla_q_b = ckm(st, qdim, h);
    }
    a->mla_kv_a = ckm(st, cka(st, kvl, rope), h);
    a->mla_kv_b = ckm(st, ckm(st, nh, cka(st, nope, vd)), kvl);
    a->mla_norms = cka(st, a->mla_norms, kvl);
    a->o = ckm(st, h, ckm(st, nh, vd));
    a->total = cka(st, cka(st, cka(st, a->mla_q_a, a->mla_q_b), cka(st, a->mla_kv_a, a->mla_kv_b)),
                   cka(st, a->mla_norms, a->o));
    return;
  }
  int64_t hd = model_head_dim(m), kvh = model_kv_heads(m);
  int64_t qdim = ckm(st, nh, hd), kvdim = ckm(st, kvh, hd);
  a->q = ckm(st, qdim, h);
  a->k = ckm(st, kvdim, h);
  a->v = ckm(st, kvdim, h);
  a->o = ckm(st, h, qdim);
  if (m->attention.qkv_bias.v) {
    a->q = cka(st, a->q, qdim);
    a->k = cka(st, a->k, kvdim);
    a->v = cka(st, a->v, kvdim);
  }
  if (m->attention.qk_norm.v) a->qk_norm = ckm(st, 2, hd);
  a->total = cka(st, cka(st, cka(st, a->q, a->k), cka(st, a->v, a->o)), a->qk_norm);
}

bool model_params(const ModelSpec *m, ModelParams *out, Diags *d) {
  CkState st = {true};
  ModelParams p;
  memset(&p, 0, sizeof p);
  int64_t h = m->hidden_size.v, L = m->layers.v, V = m->vocab_size.v;
  attn_params(&st, m, &p.attn);
  p.layer_norms = ckm(&st, 2, h);
  p.dense_ffn = ckm(&st, ckm(&st, 3, h), m->ffn.intermediate_size.v);
  if (model_is_moe(m)) {
    int64_t E = m->moe.experts.v, ie = m->moe.expert_intermediate_size.v;
    int64_t nd = m->moe.dense_layers.set ? m->moe.dense_layers.v : 0;
    if (nd > L) nd = L;
    p.n_dense = nd;
    p.n_moe = L - nd;
    p.expert = ckm(&st, ckm(&st, 3, h), ie);
    p.shared = ckm(&st, m->moe.shared_experts.v, p.expert);
    p.router = ckm(&st, E, h);
    if (m->moe.router_bias.v) p.router = cka(&st, p.router, E);
  } else {
    p.n_dense = L;
    p.n_moe = 0;
  }
  int64_t common = cka(&st, p.attn.total, p.layer_norms);
  p.dense_layer = cka(&st, common, p.dense_ffn);
  if (model_is_moe(m)) {
    int64_t shared_router = cka(&st, p.shared, p.router);
    int64_t k = m->moe.top_k.v < m->moe.experts.v ? m->moe.top_k.v : m->moe.experts.v;
    p.moe_layer = cka(&st, cka(&st, common, ckm(&st, m->moe.experts.v, p.expert)), shared_router);
    p.moe_layer_active = cka(&st, cka(&st, common, ckm(&st, k, p.expert)), shared_router);
  }
  p.embedding = ckm(&st, V, h);
  p.lm_head = m->tie_embeddings.v ? 0 : p.embedding;
  p.final_norm = h;
  p.attention = ckm(&st, p.attn.total, L);
  p.norms = cka(&st, ckm(&st, p.layer_norms, L), p.final_norm);
  p.ffn_dense = ckm(&st, p.dense_ffn, p.n_dense);
  p.experts_routed = ckm(&st, ckm(&st, m->moe.experts.v, p.expert), p.n_moe);
  p.experts_shared = ckm(&st, p.shared, p.n_moe);
  p.routers = ckm(&st, p.router, p.n_moe);
  int64_t outside = cka(&st, cka(&st, p.embedding, p.lm_head), p.final_norm);
  p.total = cka(&st, cka(&st, ckm(&st, p.dense_layer, p.n_dense), ckm(&st, p.moe_layer, p.n_moe)),
                outside);
  int64_t mtp_one = cka(&st, p.n_moe > 0 ? p.moe_layer : p.dense_layer,
                        cka(&st, ckm(&st, ckm(&st, 2, h), h), ckm(&st, 3, h)));
  p.mtp = ckm(&st, mtp_one, m->mtp_layers.v);
  p.active = cka(&st, cka(&st, ckm(&st, p.dense_layer, p.n_dense),
                          ckm(&st, p.moe_layer_active, p.n_moe)),
                 outside);
  if (!st.ok) {
    if (d)
      diag_at(d, DIAG_E0299, m->loc,
              "parameter count of model `%s` overflows a 64-bit integer",
              m->name.v ? m->name.v : "model");
    return false;
  }
  *out = p;
  return true;
}

void model_dtype_size(DType t, int64_t *num, int64_t *den) {
  *den = 1;
  switch (t) {
  case DT_FP32: *num = 4; break;
  case DT_BF16:
  case DT_FP16: *num = 2; break;
  case DT_FP8:
  case DT_INT8: *num = 1; break;
  case DT_INT4:
  case DT_MXFP4:
  case DT_NVFP4: *num = 1; *den = 2; break;
  case DT__COUNT:
  default: rp_internal("model_dtype_size: bad dtype %d", (int)t);
  }
}

bool model_dtype_quantised(DType t) {
  return t == DT_FP8 || t == DT_INT8 || t == DT_INT4 || t == DT_MXFP4 || t == DT_NVFP4;
}

/* Quantisation group size (int8, int4); fp8's block edge is MODEL_FP8_BLOCK. */
#define QUANT_BLOCK 128
/* Elements per shared scale: MXFP4 32 (OCP Microscaling Formats v1.0),
 * NVFP4 16 (NVIDIA's NVFP4 format). docs/memory.md cites both. */
#define MXFP4_BLOCK 32
#define NVFP4_BLOCK 16

int64_t model_matrix_bytes(DType t, int64_t rows, int64_t cols, int64_t count) {
  CkState st = {true};
  if (rows <= 0 || cols <= 0 || count <= 0) return 0;
  int64_t num, den;
  model_dtype_size(t, &num, &den);
  int64_t elems = ckm(&st, rows, cols);
  int64_t data = rp_cdiv64(ckm(&st, elems, num), den);
  int64_t scales = 0;
  switch (t) {
  case DT_FP8: /* one fp32 scale per 128x128 block */
    scales = ckm(&st, ckm(&st, rp_cdiv64(rows, MODEL_FP8_BLOCK), rp_cdiv64(cols, MODEL_FP8_BLOCK)), 4);
    break;
  case DT_INT8: /* one bf16 scale per row and group of 128 inputs */
    scales = ckm(&st, ckm(&st, rows, rp_cdiv64(cols, QUANT_BLOCK)), 2);
    break;
  case DT_INT4: /* bf16 scale and bf16 zero point per row and group */
    scales = ckm(&st, ckm(&st, rows, rp_cdiv64(cols, QUANT_BLOCK)), 4);
    break;
  case DT_MXFP4: /* one E8M0 byte per row and block of 32 inputs */
    scales = ckm(&st, rows, rp_cdiv64(cols, MXFP4_BLOCK));
    break;
  case DT_NVFP4: /* one E4M3 byte per row and block of 16 inputs, one fp32 per matrix */
    scales = cka(&st, ckm(&st, rows, rp_cdiv64(cols, NVFP4_BLOCK)), 4);
    break;
  case DT_FP32:
  case DT_BF16:
  case DT_FP16:
  case DT__COUNT:
  default: break;
  }
  int64_t r = ckm(&st, cka(&st, data, scales), count);
  return st.ok ? r : -1;
}

int64_t model_plain_bytes(DType t, int64_t n) {
  int64_t r;
  if (n <= 0) return 0;
  int64_t per = model_dtype_quantised(t) ? 2 : (t == DT_FP32 ? 4 : 2);
  return ck_mul(n, per, &r) ? r : -1;
}

/* Sticky wrappers: -1 from the byte helpers turns the state to failed. */
static int64_t mb(CkState *st, DType t, int64_t rows, int64_t cols, int64_t count) {
  int64_t r = model_matrix_bytes(t, rows, cols, count);
  if (r < 0) {
    st->ok = false;
    return 0;
  }
  return r;
}
static int64_t pb(CkState *st, DType t, int64_t n) {
  int64_t r = model_plain_bytes(t, n);
  if (r < 0) {
    st->ok = false;
    return 0;
  }
  return r;
}

DType model_attention_dtype(const ModelSpec *m) {
  return (DType)(m->dtype.attention_weights.set ? m->dtype.attention_weights.v : m->dtype.weights.v);
}

/* The attention projections of the whole model (norms, biases and q/k
 * norms included), in the attention dtype: the weights' unless the spec
 * keeps them apart (`dtype.attention_weights`). MLA's projections alone
 * go to *mla_proj. */
static int64_t model_attention_bytes(CkState *st, const ModelSpec *m, const ModelParams *p,
                                     int64_t *mla_proj) {
  DType t = model_attention_dtype(m);
  int64_t h = m->hidden_size.v, L = m->layers.v, nh = m->attention.heads.v;
  if (is_mla(m)) {
    int64_t ql = m->attention.q_lora_rank.v, kvl = m->attention.kv_lora_rank.v;
    int64_t nope = m->attention.qk_nope_head_dim.v, rope = m->attention.qk_rope_head_dim.v;
    int64_t vd = m->attention.v_head_dim.v;
    int64_t qdim = ckm(st, nh, cka(st, nope, rope));
    int64_t per = 0;
    if (ql > 0) {
      per = cka(st, per, mb(st, t, ql, h, 1));
      per = cka(st, per, mb(st, t, qdim, ql, 1));
    } else {
      per = cka(st, per, mb(st, t, qdim, h, 1));
    }
    per = cka(st, per, mb(st, t, cka(st, kvl, rope), h, 1));
    per = cka(st, per, mb(st, t, ckm(st, nh, cka(st, nope, vd)), kvl, 1));
    per = cka(st, per, mb(st, t, h, ckm(st, nh, vd), 1));
    *mla_proj = ckm(st, per, L);
    return cka(st, *mla_proj, ckm(st, pb(st, t, p->attn.mla_norms), L));
  }
  int64_t hd = model_head_dim(m), kvh = model_kv_heads(m);
  /* q [heads*hd, hidden], o [hidden, heads*hd], k and v [kv_heads*hd, hidden]. */
  int64_t per = cka(st, cka(st, mb(st, t, ckm(st, nh, hd), h, 1), mb(st, t, h, ckm(st, nh, hd), 1)),
                    mb(st, t, ckm(st, kvh, hd), h, 2));
  int64_t extra = p->attn.qk_norm;
  if (m->attention.qkv_bias.v) extra = cka(st, extra, ckm(st, cka(st, nh, ckm(st, 2, kvh)), hd));
  per = cka(st, per, pb(st, t, extra)); /* biases and qk norms */
  return ckm(st, per, L);
}

bool model_weight_bytes(const ModelSpec *m, ModelBytes *out, Diags *d) {
  ModelParams p;
  if (!model_params(m, &p, d)) return false;
  CkState st = {true};
  ModelBytes b;
  memset(&b, 0, sizeof b);
  DType t = (DType)m->dtype.weights.v;
  int64_t h = m->hidden_size.v;
  b.embedding = pb(&st, t, p.embedding);
  b.lm_head = pb(&st, t, p.lm_head);
  b.attention = model_attention_bytes(&st, m, &p, &b.attention_proj_mla);
  b.norms = pb(&st, t, p.norms);
  int64_t I = m->ffn.intermediate_size.v;
  int64_t ffn = cka(&st, mb(&st, t, I, h, 2), mb(&st, t, h, I, 1));
  b.ffn_dense = ckm(&st, ffn, p.n_dense);
  if (model_is_moe(m)) {
    int64_t ie = m->moe.expert_intermediate_size.v, E = m->moe.experts.v;
    int64_t one = cka(&st, mb(&st, t, ie, h, 2), mb(&st, t, h, ie, 1));
    b.experts_routed = ckm(&st, ckm(&st, one, E), p.n_moe);
    int64_t is = ckm(&st, ie, m->moe.shared_experts.v);
    int64_t sh = cka(&st, mb(&st, t, is, h, 2), mb(&st, t, h, is, 1));
    b.experts_shared = ckm(&st, sh, p.n_moe);
    b.routers = pb(&st, t, p.routers);
  }
  b.total = cka(&st, cka(&st, cka(&st, b.embedding, b.lm_head), cka(&st, b.attention, b.norms)),
                cka(&st, cka(&st, b.ffn_dense, b.experts_routed),
                     cka(&st, b.experts_shared, b.routers)));
  if (!st.ok) {
    if (d)
      diag_at(d, DIAG_E0299, m->loc, "weight bytes of model `%s` overflow a 64-bit integer",
              m->name.v ? m->name.v : "model");
    return false;
  }
  *out = b;
  return true;
}

/* KV elements one token stores in one layer, whole model (not per rank). */
static int64_t kv_elems_layer(CkState *st, const ModelSpec *m, int64_t kv_heads) {
  if (is_mla(m))
    return cka(st, m->attention.kv_lora_rank.v, m->attention.qk_rope_head_dim.v);
  return ckm(st, ckm(st, 2, kv_heads), model_head_dim(m));
}

static int64_t kv_bytes(const ModelSpec *m, int64_t kv_heads, int64_t layers) {
  CkState st = {true};
  int64_t num, den;
  model_dtype_size((DType)m->dtype.kv_cache.v, &num, &den);
  int64_t per_layer = rp_cdiv64(ckm(&st, kv_elems_layer(&st, m, kv_heads), num), den);
  int64_t r = ckm(&st, per_layer, layers);
  return st.ok ? r : -1;
}

int64_t model_kv_bytes_per_token(const ModelSpec *m) {
  return kv_bytes(m, model_kv_heads(m), m->layers.v);
}

int64_t model_kv_heads_per_rank(const ModelSpec *m, int64_t tp) {
  if (is_mla(m)) return 1;
  int64_t kvh = model_kv_heads(m);
  if (tp <= 0) tp = 1;
  return kvh >= tp ? rp_cdiv64(kvh, tp) : 1;
}

int64_t model_kv_bytes_per_token_rank(const ModelSpec *m, int64_t tp, int64_t pp_layers,
                                      int64_t dcp) {
  RP_UNUSED(dcp);
  return kv_bytes(m, model_kv_heads_per_rank(m, tp), pp_layers);
}

LayerAttn model_layer_attn(const ModelSpec *m, int64_t layer) {
  if (m->attention.layer_types.set) {
    if (layer >= 0 && (size_t)layer < m->attention.layer_types.len)
      return (LayerAttn)m->attention.layer_types.items[layer].v;
    return LAYER_FULL;
  }
  if (m->attention.sliding_window.v > 0) return LAYER_SLIDING;
  if (m->attention.chunk_size.v > 0) return LAYER_CHUNKED;
  return LAYER_FULL;
}

bool model_has_local_layers(const ModelSpec *m) {
  if (!m->attention.layer_types.set) return m->layers.v > 0 && model_layer_attn(m, 0) != LAYER_FULL;
  for (int64_t i = 0; i < m->layers.v; i++)
    if (model_layer_attn(m, i) != LAYER_FULL) return true;
  return false;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Blocks one layer of type t keeps for the request r. */
static int64_t kv_layer_blocks(CkState *st, const ModelSpec *m, LayerAttn t, const KvRequest *r) {
  int64_t keep = r->tokens, b = r->batched > 0 ? r->batched : 1;
  if (t == LAYER_SLIDING) keep = min64(keep, cka(st, m->attention.sliding_window.v - 1, b));
  if (t == LAYER_CHUNKED) keep = min64(keep, cka(st, m->attention.chunk_size.v, b));
  int64_t blocks = rp_cdiv64(rp_cdiv64(keep, r->split > 0 ? r->split : 1), r->block);
  /* vLLM's SlidingWindowSpec: the window may start inside a block */
  if (t == LAYER_SLIDING && keep < r->tokens) blocks = cka(st, blocks, 1);
  return blocks;
}

int64_t model_kv_request_bytes_rank(const ModelSpec *m, const KvRequest *r) {
  int64_t per = kv_bytes(m, model_kv_heads_per_rank(m, r->tp), 1);
  if (per < 0 || r->block <= 0) return -1;
  CkState st = {true};
  int64_t blocks = 0, n = cka(&st, r->layers, r->full_layers);
  for (int64_t i = 0; st.ok && i < n; i++) {
    LayerAttn t = i < r->layers ? model_layer_attn(m, r->first_layer + i) : LAYER_FULL;
    blocks = cka(&st, blocks, kv_layer_blocks(&st, m, t, r));
  }
  int64_t bytes = ckm(&st, ckm(&st, blocks, r->block), per);
  return st.ok ? bytes : -1;
}

int64_t model_kv_read_tokens(const ModelSpec *m, int64_t c) {
  CkState st = {true};
  if (!m->attention.layer_types.set && m->attention.sliding_window.v <= 0 && m->attention.chunk_size.v <= 0) {
    int64_t all = ckm(&st, c > 0 ? c : 0, m->layers.v);
    return st.ok ? all : -1;
  }
  int64_t sum = 0;
  for (int64_t i = 0; c > 0 && i < m->layers.v; i++) {
    LayerAttn t = model_layer_attn(m, i);
    int64_t read = c;
    if (t == LAYER_SLIDING) read = min64(c, m->attention.sliding_window.v);
    if (t == LAYER_CHUNKED && m->attention.chunk_size.v > 0) read = (c - 1) % m->attention.chunk_size.v + 1;
    sum = cka(&st, sum, read);
  }
  return st.ok ? sum : -1;
}
