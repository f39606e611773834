/*
 * memory.c: the per-rank memory ledger, and the memory stage of the
 * compile (lay_memory: every pool and pp stage of a layout, with the
 * expert_placement hook's replicas).
 *
 * Input IR: Spec (spec.h) after parse, one PoolSpec, a pp stage and the
 * layer partition. Output IR: MemLedger (memory.h), one per rank class
 * (pool x pp stage). Invariants: every byte count is int64 and computed
 * with the sticky-overflow accumulator; an overflow returns false with
 * E0299 and leaves *out zeroed. The ledger only measures: whether the
 * result is acceptable (weights over budget, KV under one max_context
 * request) is decided by validate.c, so the plan stage can call this on
 * candidate layouts without producing diagnostics.
 *
 * How each component is sharded (docs/memory.md has the full table):
 *  - embedding on the first stage and lm_head on the last, vocab-parallel
 *    over tp (ceil(vocab / tp) rows per rank); tied embeddings with pp > 1
 *    keep a copy on the last stage;
 *  - attention q/o (and MLA q_b, kv_b, o) split by heads over tp; k/v
 *    split over tp down to one KV head per rank (replicated beyond);
 *    MLA q_a and kv_a projections are replicated on every tp rank, as
 *    vLLM's and SGLang's DeepSeek models load them (ReplicatedLinear);
 *  - norms and routers replicated on every rank;
 *  - dense FFNs split over tp (column/row parallel); shared experts too,
 *    or whole on every rank (moe.shared_placement: replicated);
 *  - routed experts split over ep (whole experts) and etp (each expert's
 *    intermediate dimension);
 *  - cp and attention dp replicate the dense weights;
 *  - a draft model (model.draft) on the last stage, sharded as the target.
 */
#include "memory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "layout.h"

static int64_t dim(const SInt *v) { return v->v > 0 ? v->v : 1; }
static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? a / b + (a % b > 0) : 0; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void mem_balanced_partition(int64_t layers, int64_t pp, int64_t *out) {
  RP_ASSERT(pp > 0);
  for (int64_t i = 0; i < pp; i++) out[i] = layers / pp + (i < layers % pp ? 1 : 0);
}

/* Matrix and plain-tensor bytes with the overflow folded into st. */
static int64_t mat(CkState *st, DType t, int64_t rows, int64_t cols, int64_t count) {
  int64_t r = model_matrix_bytes(t, rows, cols, count);
  if (r < 0) st->ok = false;
  return r < 0 ? 0 : r;
}
static int64_t plain(CkState *st, DType t, int64_t n) {
  int64_t r = model_plain_bytes(t, n);
  if (r < 0) st->ok = false;
  return r < 0 ? 0 : r;
}

/* SwiGLU FFN with intermediate I split over n ranks: gate and up
 * [I/n, hidden], down [hidden, I/n]. */
static int64_t ffn_bytes(CkState *st, DType t, int64_t hidden, int64_t inter_rank) {
  if (inter_rank <= 0) return 0;
  return cka(st, mat(st, t, inter_rank, hidden, 2), mat(st, t, hidden, inter_rank, 1));
}

/* One layer's attention weights on one rank. */
static int64_t attn_bytes_rank(CkState *st, const ModelSpec *m, const MemShard *sh) {
  DType t = model_attention_dtype(m);
  int64_t h = m->hidden_size.v, qh = sh->q_heads;
  if ((AttnKind)m->attention.kind.v == ATTN_MLA) {
    int64_t ql = m->attention.q_lora_rank.v, kvl = m->attention.kv_lora_rank.v;
    int64_t nope = m->attention.qk_nope_head_dim.v, rope = m->attention.qk_rope_head_dim.v;
    int64_t vd = m->attention.v_head_dim.v;
    int64_t qdim = ckm(st, qh, cka(st, nope, rope));
    int64_t b = 0, norms = kvl;
    if (ql > 0) {
      b = cka(st, b, mat(st, t, ql, h, 1));      /* q_a: replicated */
      b = cka(st, b, mat(st, t, qdim, ql, 1));   /* q_b: split by heads */
      norms = cka(st, norms, ql);
    } else {
      b = cka(st, b, mat(st, t, qdim, h, 1));
    }
    b = cka(st, b, mat(st, t, cka(st, kvl, rope), h, 1));                /* kv_a: replicated */
    b = cka(st, b, mat(st, t, ckm(st, qh, cka(st, nope, vd)), kvl, 1));  /* kv_b */
    b = cka(st, b, mat(st, t, h, ckm(st, qh, vd), 1));                   /* o */
    return cka(st, b, plain(st, t, norms));
  }
  int64_t hd = model_head_dim(m), kvh = sh->kv_heads;
  int64_t b = cka(st, cka(st, mat(st, t, ckm(st, qh, hd), h, 1), mat(st, t, h, ckm(st, qh, hd), 1)),
                  mat(st, t, ckm(st, kvh, hd), h, 2));
  int64_t extra = m->attention.qk_norm.v ? ckm(st, 2, hd) : 0;
  if (m->attention.qkv_bias.v) extra = cka(st, extra, ckm(st, cka(st, qh, ckm(st, 2, kvh)), hd));
  return cka(st, b, plain(st, t, extra));
}

/* Activation elements one token keeps live on one rank during the widest
 * step of a layer: the residual stream, the normed input, the attention
 * output and the sum being reduced (4 * hidden), the rank's q/k/v (or the
 * MLA q, latent and expanded k/v) and the FFN's gate and up outputs
 * (2 * its intermediate share; without the routed experts' when the
 * engine keeps those in a workspace of its own, routed false). */
static int64_t act_width(CkState *st, const ModelSpec *m, const MemShard *sh, int64_t tp,
                         int64_t etp, bool routed) {
  int64_t h = m->hidden_size.v, w = ckm(st, 4, h);
  if ((AttnKind)m->attention.kind.v == ATTN_MLA) {
    int64_t nope = m->attention.qk_nope_head_dim.v, rope = m->attention.qk_rope_head_dim.v;
    int64_t vd = m->attention.v_head_dim.v, kvl = m->attention.kv_lora_rank.v;
    w = cka(st, w, ckm(st, sh->q_heads, cka(st, cka(st, nope, rope), cka(st, nope, vd))));
    w = cka(st, w, cka(st, kvl, rope));
  } else {
    w = cka(st, w, ckm(st, cka(st, sh->q_heads, ckm(st, 2, sh->kv_heads)), model_head_dim(m)));
  }
  int64_t inter = 0;
  if (sh->dense_layers > 0) inter = ceil_div(m->ffn.intermediate_size.v, tp);
  if (sh->moe_layers > 0) {
    int64_t ie = m->moe.expert_intermediate_size.v;
    int64_t r = routed ? ckm(st, min64(m->moe.top_k.v, m->moe.experts.v), ceil_div(ie, etp)) : 0;
    int64_t shared = ceil_div(ckm(st, m->moe.shared_experts.v, ie), tp);
    inter = max64(inter, cka(st, r, shared));
  }
  return cka(st, w, ckm(st, 2, inter));
}

/* The pool's parallel sizes with defaults applied. */
typedef struct {
  int64_t tp, pp, cp, dp, ep, etp, dcp, replicas;
} Par;

static Par pool_par(const PoolSpec *p) {
  Par r = {dim(&p->tp), dim(&p->pp), dim(&p->cp), dim(&p->dp),
           dim(&p->ep), dim(&p->etp), dim(&p->dcp), dim(&p->replicas)};
  return r;
}

/* The heads, experts and vocabulary rows of m one rank holds. */
static void shard_widths(const ModelSpec *m, const Par *q, MemShard *sh) {
  sh->q_heads = ceil_div(m->attention.heads.v, q->tp);
  sh->kv_heads = model_kv_heads_per_rank(m, q->tp);
  sh->experts = model_is_moe(m) ? ceil_div(model_expert_slots(m), q->ep) : 0;
  sh->vocab = ceil_div(m->vocab_size.v, q->tp);
}

/* The layers, heads, experts and vocabulary rows stage pp_stage of pool p
 * holds on one rank. */
static void stage_shard(CkState *st, const Spec *s, const PoolSpec *p, const Par *q,
                        int64_t pp_stage, const int64_t *layer_partition, MemShard *sh) {
  const ModelSpec *m = &s->model;
  int64_t nl = m->layers.v;
  int64_t *part = rp_calloc((size_t)q->pp, sizeof *part);
  if (layer_partition) {
    memcpy(part, layer_partition, (size_t)q->pp * sizeof *part);
  } else if (p->layer_partition.set && p->layer_partition.len == (size_t)q->pp) {
    for (int64_t i = 0; i < q->pp; i++) part[i] = p->layer_partition.items[i].v;
  } else {
    mem_balanced_partition(nl, q->pp, part);
  }
  for (int64_t i = 0; i < pp_stage; i++) sh->first_layer = cka(st, sh->first_layer, part[i]);
  sh->layers = part[pp_stage] > 0 ? part[pp_stage] : 0;
  free(part);
  int64_t n_dense = nl;
  if (model_is_moe(m)) n_dense = min64(m->moe.dense_layers.set ? m->moe.dense_layers.v : 0, nl);
  int64_t end = cka(st, sh->first_layer, sh->layers);
  sh->dense_layers = max64(0, min64(end, n_dense) - min64(sh->first_layer, n_dense));
  sh->moe_layers = sh->layers - sh->dense_layers;
  /* The MTP modules run after the last layer, on the last stage, and are
   * loaded only for speculative decoding (docs/memory.md, "MTP"). */
  if (pp_stage == q->pp - 1 && s->workload.draft_tokens.v > 0) sh->mtp_layers = m->mtp_layers.v;
  sh->has_draft = pp_stage == q->pp - 1 && s->workload.draft_tokens.v > 0 && m->draft;
  shard_widths(m, q, sh);
  sh->has_embedding = pp_stage == 0;
  sh->has_lm_head = pp_stage == q->pp - 1 && (!m->tie_embeddings.v || q->pp > 1);
}

/* The draft model's shard: every layer of it, with its embedding and
 * head, split over the target's tp and ep (vLLM and SGLang run the draft
 * at the target's tensor parallel size; docs/memory.md, "Draft model"). */
static void draft_shard(const ModelSpec *d, const Par *q, MemShard *sh) {
  memset(sh, 0, sizeof *sh);
  sh->layers = d->layers.v;
  int64_t n_dense = sh->layers;
  if (model_is_moe(d)) n_dense = min64(d->moe.dense_layers.set ? d->moe.dense_layers.v : 0, sh->layers);
  sh->dense_layers = n_dense;
  sh->moe_layers = sh->layers - n_dense;
  shard_widths(d, q, sh);
  sh->has_embedding = true;
  sh->has_lm_head = !d->tie_embeddings.v;
}

/* The weights of the shard, by part, and their sum. An MTP module is one
 * more layer of the last layer's kind, plus its projection and norms. */
static void ledger_weights(CkState *st, const ModelSpec *m, const Par *q, bool last_stage,
                           MemLedger *L) {
  const MemShard *sh = &L->shard;
  DType wt = (DType)m->dtype.weights.v;
  int64_t h = m->hidden_size.v;
  bool moe = model_is_moe(m) && m->layers.v > (m->moe.dense_layers.set ? m->moe.dense_layers.v : 0);
  int64_t layers = cka(st, sh->layers, sh->mtp_layers);
  int64_t dense = cka(st, sh->dense_layers, moe ? 0 : sh->mtp_layers);
  int64_t moe_layers = cka(st, sh->moe_layers, moe ? sh->mtp_layers : 0);
  int64_t vocab_rows = ckm(st, sh->vocab, h);
  if (sh->has_embedding) L->w_embedding = plain(st, wt, vocab_rows);
  if (sh->has_lm_head) L->w_lm_head = plain(st, wt, vocab_rows);
  L->w_attention = ckm(st, attn_bytes_rank(st, m, sh), layers);
  L->w_norms = plain(st, wt, cka(st, ckm(st, ckm(st, 2, h), layers), last_stage ? h : 0));
  L->w_ffn_dense = ckm(st, ffn_bytes(st, wt, h, ceil_div(m->ffn.intermediate_size.v, q->tp)), dense);
  if (model_is_moe(m) && moe_layers > 0) {
    int64_t ie = m->moe.expert_intermediate_size.v;
    int64_t one = ffn_bytes(st, wt, h, ceil_div(ie, q->etp));
    L->w_experts = ckm(st, ckm(st, one, sh->experts), moe_layers);
    int64_t shared_inter = ckm(st, m->moe.shared_experts.v, ie);
    int64_t shared_split = m->moe.shared_placement.v == SHARED_REPLICATED ? 1 : q->tp;
    L->w_shared = ckm(st, ffn_bytes(st, wt, h, ceil_div(shared_inter, shared_split)), moe_layers);
    int64_t router = ckm(st, m->moe.experts.v, h);
    if (m->moe.router_bias.v) router = cka(st, router, m->moe.experts.v);
    L->w_routers = ckm(st, plain(st, wt, router), moe_layers);
  }
  /* eh_proj (2h -> h) and the enorm, hnorm and head norm, whole on every
   * rank and unquantised */
  L->w_mtp_proj = plain(st, wt, ckm(st, cka(st, ckm(st, ckm(st, 2, h), h), ckm(st, 3, h)), sh->mtp_layers));
  L->weights = cka(st, cka(st, cka(st, L->w_embedding, L->w_lm_head), cka(st, L->w_attention, L->w_norms)),
                   cka(st, cka(st, L->w_ffn_dense, L->w_experts), cka(st, L->w_shared, L->w_routers)));
  L->weights = cka(st, L->weights, L->w_mtp_proj);
}

/* Positions of the scaled table: vLLM and SGLang build linear and dynamic
 * scaling's table over max_position_embeddings x factor positions and
 * yarn's over original_max_position_embeddings x factor
 * (rotary_embedding/linear_scaling_rope.py, dynamic_ntk_scaling_rope.py,
 * yarn_scaling_rope.py: torch.arange of the product, so its ceiling);
 * TensorRT-LLM over max_position_embeddings (RopeParams.max_positions in
 * tensorrt_llm/_torch/attention_backend/interface.py). */
static int64_t rope_rows(const ModelSpec *m, Engine e, int64_t pos) {
  RopeScaling sc = (RopeScaling)m->rope.scaling.v;
  double f = m->rope.factor.set ? m->rope.factor.v : 1.0;
  if (e == ENGINE_TRTLLM || (sc != ROPE_LINEAR && sc != ROPE_DYNAMIC && sc != ROPE_YARN)) return pos;
  double base = sc == ROPE_YARN ? (double)m->rope.original_max_position_embeddings.v : (double)pos;
  double rows = ceil(base * f);
  return rows < 9.2e18 ? (int64_t)rows : INT64_MAX;
}

/* Model classes whose vLLM code builds its RoPE table in fp32 whatever the
 * activations: gpt-oss (vllm/model_executor/models/gpt_oss.py, get_rope(...,
 * dtype=torch.float32), in the 0.11.0 and 0.19.0 wheels). */
static bool vllm_rope_fp32(const ModelSpec *m) {
  return m->architecture.v && strcmp(m->architecture.v, "GptOssForCausalLM") == 0;
}

/* The engine's rotary-embedding cache, counted with the weights as the
 * engines count what loading the model takes (docs/memory.md, "The RoPE
 * cache"): cos and sin of every position of rope_rows over the rotary
 * dimensions (model.rope.rotary_dim, else the head dimension; MLA's
 * qk_rope_head_dim), one buffer a process that every layer of the stage
 * shares, and a second, unscaled, where the sliding layers have their own
 * base (model.rope.local_base: Gemma 3). vLLM casts it to the model's
 * dtype (vllm/model_executor/layers/rotary_embedding/base.py) unless the
 * model's code asks for fp32 (vllm_rope_fp32);
 * SGLang keeps it in fp32 on CUDA and casts it elsewhere
 * (python/sglang/srt/layers/rotary_embedding, RotaryEmbedding.__init__).
 * TensorRT-LLM keeps it in fp32, one (cos, sin) pair per frequency, and
 * for MLA (qk_rope_head_dim set) twice over: RopeParams.from_config sets
 * duplicate_data, which concatenates the frequencies with themselves
 * (tensorrt_llm/_torch/attention_backend/interface.py,
 * create_rope_const_params, a per-model cache since TensorRT-LLM PR
 * #3378; RopeEmbeddingUtils in tensorrt_llm/functional.py). generic:
 * none. */
static void ledger_rope(CkState *st, const Spec *s, MemLedger *L) {
  const ModelSpec *m = &s->model;
  Engine e = (Engine)s->deployment.engine.v;
  if ((e != ENGINE_VLLM && e != ENGINE_SGLANG && e != ENGINE_TRTLLM) || L->shard.layers <= 0) return;
  bool mla = (AttnKind)m->attention.kind.v == ATTN_MLA;
  int64_t pos = m->max_position_embeddings.set ? m->max_position_embeddings.v : m->max_context.v;
  int64_t dim = mla ? m->attention.qk_rope_head_dim.v
                    : m->rope.rotary_dim.set ? m->rope.rotary_dim.v : model_head_dim(m);
  int64_t an = 4, ad = 1;
  if (e == ENGINE_TRTLLM && mla) an = 8;
  if ((e == ENGINE_VLLM && !vllm_rope_fp32(m)) || (e == ENGINE_SGLANG && engine_gpu_is_amd(&s->hardware)))
    model_dtype_size((DType)m->dtype.activations.v, &an, &ad);
  int64_t rows = rope_rows(m, e, pos);
  if (m->rope.local_base.v) rows = cka(st, rows, pos);
  L->w_rope = ceil_div(ckm(st, ckm(st, rows, dim), an), ad);
  L->weights = cka(st, L->weights, L->w_rope);
}

/* Whether the spec's vLLM release lays MXFP4 experts out for Hopper: it
 * swizzles them with triton_kernels only under torch 2.8.1 or later
 * (quantization/utils/mxfp4_utils.py, _swizzle_mxfp4), which 0.11.1
 * (torch 2.9.0) and 0.19.0 (torch 2.10.0) pin and 0.11.0 (torch 2.8.0)
 * does not (the wheels' Requires-Dist). A bare "0.11" is read as 0.11.0,
 * the entry's source. */
static bool vllm_swizzles_mxfp4(const Spec *s) {
  const char *v = s->deployment.engine_version.v;
  if ((Engine)s->deployment.engine.v != ENGINE_VLLM || !engine_gpu_is_hopper(&s->hardware)) return false;
  return engine_vllm_019(v) || (v && strchr(v, '.') && engine_version_cmp(v, "0.11.1") >= 0);
}

/* n rounded up to a multiple of m. */
static int64_t round_up(CkState *st, int64_t n, int64_t m) { return ckm(st, ceil_div(n, m), m); }

/* vLLM's MXFP4 experts on Hopper (docs/memory.md, "MXFP4 experts on
 * Hopper"): the Triton backend pads each rank's expert width to a
 * multiple of 64 (fused_moe/oracle/mxfp4.py,
 * mxfp4_round_up_hidden_size_and_intermediate_size; 0.11.1's
 * quantization/mxfp4.py), and swizzling the block scales makes a copy in
 * triton_kernels' Hopper scale layout, rows padded to 256 and columns to
 * 2 (hopper_scale.py, 8 warps), while the loaded scales stay registered
 * (quantization/mxfp4.py deletes only the weights). Added to the weights,
 * as vLLM's "Model loading took" counts them. */
static void ledger_vllm_mxfp4(CkState *st, const Spec *s, const Par *q, MemLedger *L) {
  const ModelSpec *m = &s->model;
  const MemShard *sh = &L->shard;
  if ((DType)m->dtype.weights.v != DT_MXFP4 || !model_is_moe(m) || sh->moe_layers <= 0 ||
      !vllm_swizzles_mxfp4(s))
    return;
  int64_t h = m->hidden_size.v, ip = ceil_div(m->moe.expert_intermediate_size.v, q->etp);
  int64_t pad = round_up(st, ip, 64), n = ckm(st, sh->experts, sh->moe_layers);
  int64_t grow = cks(st, ffn_bytes(st, DT_MXFP4, h, pad), ffn_bytes(st, DT_MXFP4, h, ip));
  int64_t scales = cka(st, ckm(st, round_up(st, ckm(st, 2, pad), 256), round_up(st, ceil_div(h, 32), 2)),
                       ckm(st, round_up(st, h, 256), round_up(st, ceil_div(pad, 32), 2)));
  L->w_layout = ckm(st, cka(st, grow, scales), n);
  L->weights = cka(st, L->weights, L->w_layout);
}

/* The draft model's weights, added to the shard's (its KV is in
 * ledger_kv). */
static void ledger_draft(CkState *st, const ModelSpec *m, const Par *q, MemLedger *L) {
  if (!L->shard.has_draft) return;
  MemLedger D;
  memset(&D, 0, sizeof D);
  draft_shard(m->draft, q, &D.shard);
  ledger_weights(st, m->draft, q, true, &D);
  L->w_draft = D.weights;
  L->weights = cka(st, L->weights, L->w_draft);
}

/* vLLM 0.19's fused-MoE workspace on one rank (docs/memory.md, "vLLM
 * 0.19"): the modular kernel takes its buffers from the worker's
 * WorkspaceManager, which keeps its largest allocation for the process
 * (vllm/v1/worker/workspace.py), so the profile's peak holds it beside
 * the sampler warm-up. The Triton experts (fused_moe.py, TritonExperts.
 * workspace_shapes) ask, for M tokens, k routed experts a token, the
 * rank's expert width I (N = 2I gate and up) and hidden size K, for
 * max(M k max(I, K), M K) and M k max(2I, K) elements of the activations'
 * dtype, one allocation of both (modular_kernel.py, _allocate_buffers).
 * 0 where that does not hold as read: another engine or release, no MoE
 * layer on the stage, attention dp (the dispatch's token count was not
 * read) or int8, int4 and fp4 experts (int8's fused_experts allocates
 * per call, the others' kernels allocate their own). fp8 experts take
 * Triton's shapes or DeepGEMM's, which its comment calls strictly larger
 * (triton_deep_gemm_moe.py): the ledger counts Triton's. */
static int64_t vllm_moe_workspace(CkState *st, const Spec *s, const MemShard *sh, const Par *q,
                                  int64_t tokens) {
  const ModelSpec *m = &s->model;
  DType w = (DType)m->dtype.weights.v;
  /* the integer tests first: this runs for every layout the search prices */
  if (sh->moe_layers <= 0 || q->dp > 1 || !(w == DT_BF16 || w == DT_FP16 || w == DT_FP32 || w == DT_FP8) ||
      (Engine)s->deployment.engine.v != ENGINE_VLLM || !engine_vllm_019(s->deployment.engine_version.v))
    return 0;
  int64_t an, ad;
  model_dtype_size((DType)m->dtype.activations.v, &an, &ad);
  int64_t k = min64(m->moe.top_k.v, m->moe.experts.v), h = m->hidden_size.v;
  int64_t inter = ceil_div(m->moe.expert_intermediate_size.v, q->etp);
  int64_t mk = ckm(st, tokens, k);
  int64_t ws13 = max64(ckm(st, mk, max64(inter, h)), ckm(st, tokens, h));
  int64_t ws2 = ckm(st, mk, max64(ckm(st, 2, inter), h));
  /* each slice aligned to 256 bytes (workspace.py, get_simultaneous) */
  return cka(st, round_up(st, ceil_div(ckm(st, ws13, an), ad), 256), round_up(st, ceil_div(ckm(st, ws2, an), ad), 256));
}

/* Activations: one forward's widest layer, plus on the last stage the
 * logits (generic) or the engine's sampler warm-up (mem_engine.c). The
 * tokens of the forward are the engine's (mem_engine_forward): a whole
 * prompt split over cp, or the chunked-prefill budget, on prefill and
 * aggregated pools; the decode sequences on decode pools; vLLM's
 * profiling forward of max_num_batched_tokens on every pool. */
static void ledger_activations(CkState *st, const Spec *s, const PoolSpec *p, const Par *q,
                               bool last_stage, MemLedger *L) {
  const ModelSpec *m = &s->model;
  int64_t an, ad;
  model_dtype_size((DType)m->dtype.activations.v, &an, &ad);
  bool decode = (PoolRole)p->role.v == ROLE_DECODE;
  int64_t in_tok = s->workload.input_tokens.v > 0 ? s->workload.input_tokens.v : 1;
  int64_t seqs;
  mem_engine_forward(s, decode, ceil_div(in_tok, q->cp), q->dp, &L->tokens_per_forward, &seqs);
  L->moe_workspace = vllm_moe_workspace(st, s, &L->shard, q, L->tokens_per_forward);
  int64_t width = act_width(st, m, &L->shard, q->tp, q->etp, L->moe_workspace == 0);
  L->forward_peak = cka(st, ceil_div(ckm(st, ckm(st, L->tokens_per_forward, width), an), ad), L->moe_workspace);
  L->activations = L->forward_peak;
  if (last_stage) mem_engine_last_stage(st, s, L->tokens_per_forward, seqs, L->shard.vocab, L);
}

/* Fixed costs, the usable memory and what is left of it for the KV pool,
 * as the pool's engine counts them (mem_engine.c). */
static void ledger_budget(CkState *st, const Spec *s, const Par *q, MemLedger *L) {
  const ModelSpec *m = &s->model;
  /* vLLM has no expert tensor-parallel communicator: its MoE layers shard
   * over the tp (and dp) ranks' own groups (docs/memory.md). */
  bool etp_group = model_is_moe(m) && q->etp > 1 && (Engine)s->deployment.engine.v != ENGINE_VLLM;
  int64_t groups = (q->tp > 1) + (q->cp > 1) + (q->dp > 1) + (q->pp > 1) +
                   (model_is_moe(m) && q->ep > 1) + etp_group;
  L->capacity = s->hardware.gpu.memory.v;
  mem_engine_overheads(st, s, groups, q->tp > 1, q->pp > 1, L);
  mem_engine_kv_pool(st, s, q->tp, q->pp, q->dp, L);
}

/* Blocks (of kv_block_tokens tokens at every layer of the rank) one
 * request of `tokens` tokens takes: its bytes layer by layer, each layer
 * keeping what its attention type keeps (model_kv_request_bytes_rank),
 * the draft model's full-attention layers included. The step's token
 * budget is serving.max_num_batched_tokens when set, else one decode
 * token (docs/memory.md, "Attention types"). */
static int64_t kv_request_blocks(CkState *st, const Spec *s, const Par *q, const MemLedger *L,
                                 int64_t tokens) {
  const ModelSpec *m = &s->model;
  const MemShard *sh = &L->shard;
  int64_t split = ckm(st, q->cp, q->dcp);
  /* Every layer full: the request's tokens in blocks, as before any
   * window (and without the byte count, which a huge context overflows). */
  if (!model_has_local_layers(m) && !(sh->has_draft && model_has_local_layers(m->draft)))
    return ceil_div(ceil_div(tokens, split), L->kv_block_tokens);
  int64_t batched = s->serving.max_num_batched_tokens.v > 0 ? s->serving.max_num_batched_tokens.v : 1;
  KvRequest r = {q->tp, sh->first_layer, sh->layers, sh->mtp_layers,
                 tokens, split, L->kv_block_tokens, batched};
  int64_t bytes = model_kv_request_bytes_rank(m, &r), draft = 0;
  if (sh->has_draft) {
    KvRequest d = r;
    d.first_layer = 0;
    d.layers = m->draft->layers.v;
    d.full_layers = 0;
    draft = model_kv_request_bytes_rank(m->draft, &d);
  }
  if (bytes < 0 || draft < 0) {
    st->ok = false;
    return 0;
  }
  bytes = cka(st, bytes, draft);
  int64_t block_bytes = ckm(st, L->kv_block_tokens, L->kv_bytes_per_token);
  return ceil_div(bytes, block_bytes);
}

/* KV capacity and requests. One request's tokens spread over the cp and
 * dcp ranks of its attention replica. */
static void ledger_kv(CkState *st, const Spec *s, const Par *q, MemLedger *L) {
  const ModelSpec *m = &s->model;
  const MemShard *sh = &L->shard;
  L->kv_bytes_per_token = model_kv_bytes_per_token_rank(m, q->tp, sh->layers, q->dcp);
  int64_t mtp = model_kv_bytes_per_token_rank(m, q->tp, sh->mtp_layers, q->dcp);
  int64_t draft = sh->has_draft ? model_kv_bytes_per_token_rank(m->draft, q->tp, m->draft->layers.v, q->dcp) : 0;
  if (L->kv_bytes_per_token < 0 || mtp < 0 || draft < 0) {
    st->ok = false;
  } else {
    L->kv_draft_bytes_per_token = cka(st, mtp, draft);
    L->kv_bytes_per_token = cka(st, L->kv_bytes_per_token, L->kv_draft_bytes_per_token);
  }
  L->kv_block_tokens = engine_kv_block(s);
  int64_t block_bytes = ckm(st, L->kv_block_tokens, L->kv_bytes_per_token);
  L->kv_blocks = L->kv_pool > 0 && block_bytes > 0 ? L->kv_pool / block_bytes : 0;
  L->request_tokens = cka(st, s->workload.input_tokens.v, s->workload.output_tokens.v);
  L->request_blocks = kv_request_blocks(st, s, q, L, L->request_tokens);
  L->max_context_blocks = kv_request_blocks(st, s, q, L, spec_max_model_len(s));
  if (sh->layers == 0) {
    /* A stage without layers stores no KV: it never limits requests. */
    L->request_blocks = L->max_context_blocks = 0;
  }
  L->requests_fit = L->request_blocks > 0 ? L->kv_blocks / L->request_blocks : 0;
  L->requests_fit_instance = ckm(st, L->requests_fit, q->dp);
  L->max_context_fits = L->kv_blocks >= L->max_context_blocks;
}

bool mem_ledger(const Spec *s, const PoolSpec *p, int64_t pp_stage,
                const int64_t *layer_partition, MemLedger *out, Diags *d) {
  Par q = pool_par(p);
  CkState st = {true};
  MemLedger L;
  memset(&L, 0, sizeof L);
  memset(out, 0, sizeof *out);
  RP_ASSERT(pp_stage >= 0 && pp_stage < q.pp);
  bool last = pp_stage == q.pp - 1;
  stage_shard(&st, s, p, &q, pp_stage, layer_partition, &L.shard);
  L.ranks = ckm(&st, ckm(&st, q.replicas, q.tp), ckm(&st, q.cp, q.dp));
  ledger_weights(&st, &s->model, &q, last, &L);
  ledger_draft(&st, &s->model, &q, &L);
  ledger_rope(&st, s, &L);
  ledger_vllm_mxfp4(&st, s, &q, &L);
  ledger_activations(&st, s, p, &q, last, &L);
  ledger_budget(&st, s, &q, &L);
  ledger_kv(&st, s, &q, &L);
  if (!st.ok) {
    if (d)
      diag_at(d, DIAG_E0299, p->loc,
              "memory ledger of pool `%s` stage %lld overflows a 64-bit integer",
              p->name.v ? p->name.v : "?", (long long)pp_stage);
    return false;
  }
  *out = L;
  return true;
}

/* ---- the memory stage: every pool and stage of a layout ------------------ */

/* The ledger of memory.c counts ceil(experts / ep) routed experts per rank.
 * With an expert_placement map each ep rank holds expert_slots experts
 * instead: the replicas of hot experts are weights too. This adds the
 * extra experts' bytes (the ledger's bytes per expert, times the extra
 * count) to the weights, takes them from the KV pool and recounts the KV
 * blocks and requests, as memory.c would. The model stage checked the
 * rules on the ledger without replicas; the same two rules are checked
 * again here (E0216 weights over budget, E0217 no room for one
 * max_context request), naming the replicas as the cause. */
static bool mem__add_replicas(Diags *d, const Spec *s, const LayPool *P, int64_t st,
                              MemLedger *m) {
  int64_t base = m->shard.experts;
  if (base <= 0 || m->w_experts <= 0 || P->expert_slots <= base) return true;
  CkState ck = {true};
  /* w_experts = bytes of one expert * experts * moe layers: exact. */
  int64_t per = m->w_experts / base;
  int64_t extra = ckm(&ck, per, P->expert_slots - base);
  m->w_experts = cka(&ck, m->w_experts, extra);
  m->weights = cka(&ck, m->weights, extra);
  m->kv_pool = cks(&ck, m->kv_pool, extra);
  int64_t block_bytes = ckm(&ck, m->kv_block_tokens, m->kv_bytes_per_token);
  m->kv_blocks = m->kv_pool > 0 && block_bytes > 0 ? m->kv_pool / block_bytes : 0;
  m->requests_fit = m->request_blocks > 0 ? m->kv_blocks / m->request_blocks : 0;
  m->max_context_fits = m->kv_blocks >= m->max_context_blocks;
  const SrcLoc at = s->deployment.hooks.expert_placement.loc;
  if (!ck.ok) {
    diag_at(d, DIAG_E0305, at, "the memory ledger of pool `%s` stage %lld overflows with %lld expert replicas",
            P->name, (long long)st, (long long)(P->expert_slots - base));
    return false;
  }
  if (m->kv_pool < 0) {
    Diag *g = diag_at(d, DIAG_E0216, at,
                      "the weights of pool `%s` stage %lld do not fit with the expert_placement replicas: "
                      "%lld bytes over the usable memory (%lld experts per ep rank, expected at most %lld)",
                      P->name, (long long)st, (long long)-m->kv_pool, (long long)P->expert_slots,
                      (long long)base);
    diag_help(g, "give fewer experts extra replicas, or use a larger ep");
    return false;
  }
  if (!m->max_context_fits && m->max_context_blocks > 0) {
    Diag *g = diag_at(d, DIAG_E0217, at,
                      "the KV pool of pool `%s` stage %lld holds %lld blocks with the expert_placement "
                      "replicas, expected at least %lld (one max_model_len request)",
                      P->name, (long long)st, (long long)m->kv_blocks, (long long)m->max_context_blocks);
    diag_help(g, "give fewer experts extra replicas, or use a larger ep");
    return false;
  }
  return true;
}

/* What vLLM's CUDA graphs need above the share it sizes (docs/memory.md,
 * "CUDA graphs"): 0.19's own estimate for the spec's capture sizes at the
 * largest per-graph figures logged; for 0.11, the same for its sizes, at
 * most the largest capture a 0.11 log shows. */
static int64_t mem__graph_need(const Spec *s, int64_t *sizes, bool *capped) {
  *sizes = engine_vllm_graph_sizes(s);
  CkState ck = {true};
  int64_t need = cka(&ck, MEM_VLLM019_GRAPH_FIRST, ckm(&ck, *sizes > 1 ? *sizes - 1 : 0, MEM_VLLM019_GRAPH_PER_SIZE));
  if (!ck.ok) need = INT64_MAX;
  *capped = !engine_vllm_019(s->deployment.engine_version.v) && need > MEM_VLLM_GRAPHS_LOGGED_MAX;
  return *capped ? MEM_VLLM_GRAPHS_LOGGED_MAX : need;
}

/* W0207 under SGLang: a spec's memory.utilization whose share above
 * SGLang's static fraction cannot hold the forward's activations and
 * workspace and the CUDA graphs SGLang captures there after allocating
 * the KV pool, these counted as SGLang's own default fraction reserves
 * for them (mem_engine_sglang_graph_mib). Only the forward's shortfall is
 * taken from the KV pool (mem_engine_kv_pool); the graphs' would be an
 * out-of-memory error at start-up. */
static void mem__headroom_sglang(Diags *d, const Spec *s, const SNum *u, const LayPool *P, const MemLedger *m) {
  CkState ck = {true};
  int64_t short_by = mem_engine_sglang_short(&ck, m);
  if (!ck.ok) return;
  double gib = (double)((int64_t)1 << 30), fwd = (double)m->activations + (double)m->workspace;
  double graphs = mem_engine_sglang_graph_mib(s, P->size[CO_TP], P->size[CO_DP]) * (double)(1 << 20);
  double share = (double)m->engine_total - (double)m->comm, room = share - (double)m->usable;
  if (short_by <= 0 && room >= fwd + graphs) return;
  double best = share > 0 ? floor((share - fwd - graphs) / share * 1000.0) / 1000.0 : 0.0;
  Diag *g = diag_at(d, DIAG_W0207, u->loc,
                    "`utilization` %.3g leaves %.2f GiB of a GPU of pool `%s` above SGLang's static share "
                    "(mem_fraction_static), below the %.2f GiB its forward's activations and workspace "
                    "(%.2f GiB) and its CUDA graphs (%.2f GiB, what SGLang's own default fraction reserves "
                    "for them) need there",
                    u->v, room / gib, P->name, (fwd + graphs) / gib, fwd / gib, graphs / gib);
  diag_help(g, "SGLang captures its CUDA graphs in that share after allocating the KV pool and may run out of "
               "memory there or in a long prefill; use a utilization of %.3f or less, less still for models "
               "whose capture logs more than that reserve (docs/memory.md, \"CUDA graphs\").%s",
            best > 0 ? best : 0.0, short_by > 0 ? " The ledger takes the forward's shortfall from the KV pool" : "");
}

/* W0207: a spec's memory.utilization that leaves less of the device
 * outside vLLM's share than its CUDA graphs need there (vLLM captures
 * them after sizing the KV cache), or, under SGLang, less than its
 * forward needs there (mem__headroom_sglang). */
static void mem__headroom(Diags *d, const Spec *s, const LayPool *P, const MemLedger *m) {
  const SNum *u = &s->deployment.memory.utilization;
  if (u->set && (Engine)s->deployment.engine.v == ENGINE_SGLANG) mem__headroom_sglang(d, s, u, P, m);
  if (!u->set || (Engine)s->deployment.engine.v != ENGINE_VLLM) return;
  int64_t sizes;
  bool capped;
  double gib = (double)((int64_t)1 << 30), have = (double)m->engine_total * (1.0 - u->v);
  double need = (double)mem__graph_need(s, &sizes, &capped);
  if (!(have < need)) return;
  char what[128];
  if (engine_vllm_019(s->deployment.engine_version.v))
    snprintf(what, sizeof what, "vLLM 0.19's estimate for its %lld CUDA-graph sizes", (long long)sizes);
  else if (capped)
    snprintf(what, sizeof what, "the largest CUDA-graph capture vLLM 0.11 logs there");
  else
    snprintf(what, sizeof what, "vLLM 0.19's estimate for vLLM 0.11's %lld CUDA-graph sizes", (long long)sizes);
  Diag *g = diag_at(d, DIAG_W0207, u->loc,
                    "`utilization` %.3g leaves %.2f GiB of a GPU of pool `%s` outside vLLM's share, "
                    "below the %.2f GiB of %s",
                    u->v, have / gib, P->name, need / gib, what);
  diag_help(g, "vLLM may run out of memory capturing its CUDA graphs; use a utilization of %.3f "
               "or less (docs/memory.md, \"CUDA graphs\")",
            floor((1.0 - need / (double)m->engine_total) * 1000.0) / 1000.0);
}

bool lay_memory(Diags *d, const Spec *s, Layout *L) {
  for (size_t p = 0; p < L->npools; p++) {
    LayPool *P = &L->pools[p];
    const PoolSpec *ps = &s->deployment.pools[p];
    int64_t pp = P->size[CO_PP];
    free(P->mem);
    free(P->kv_bytes_per_token);
    free(P->kv_draft_bytes_per_token);
    free(P->kv_blocks);
    P->mem = rp_calloc((size_t)pp, sizeof *P->mem);
    P->kv_bytes_per_token = rp_calloc((size_t)pp, sizeof(int64_t));
    P->kv_draft_bytes_per_token = rp_calloc((size_t)pp, sizeof(int64_t));
    P->kv_blocks = rp_calloc((size_t)pp, sizeof(int64_t));
    P->kv_block_tokens = engine_kv_block(s);
    P->requests_fit_instance = INT64_MAX;
    P->memory_fraction = 0;
    for (int64_t st = 0; st < pp; st++) {
      MemLedger m;
      memset(&m, 0, sizeof m);
      if (!mem_ledger(s, ps, st, P->layer_partition, &m, d)) return false;
      if (st == 0) mem__headroom(d, s, P, &m);
      if (P->expert_map && !mem__add_replicas(d, s, P, st, &m)) return false;
      int64_t *e = P->mem[st];
      CkState ck = {true};
      e[MEM_WEIGHTS] = m.weights;
      e[MEM_KV_CACHE] = m.kv_pool > 0 ? m.kv_pool : 0;
      e[MEM_ACTIVATIONS] = m.activations;
      e[MEM_WORKSPACE] = m.workspace;
      /* reserved: what the engine never hands out: the spec's reserve, the
       * communication buffers and the share above the engine's fraction
       * not taken by activations and workspace (mem_engine.c). With a KV
       * pool >= 0 the five entries add up to capacity (weights that do
       * not fit are E0216 before any plan is written). */
      e[MEM_RESERVED] = m.kv_pool < 0 ? cka(&ck, m.reserve, m.comm)
                                      : cks(&ck, cks(&ck, m.capacity, cka(&ck, m.weights, e[MEM_KV_CACHE])),
                                            cka(&ck, m.activations, m.workspace));
      e[MEM_CAPACITY] = m.capacity;
      P->kv_bytes_per_token[st] = m.kv_bytes_per_token;
      P->kv_draft_bytes_per_token[st] = m.kv_draft_bytes_per_token;
      P->kv_blocks[st] = m.kv_blocks;
      double f = mem_engine_fraction(s, &m);
      if (f > 0 && (P->memory_fraction == 0 || f < P->memory_fraction)) P->memory_fraction = f;
      int64_t fit = ckm(&ck, m.requests_fit, P->size[CO_DP]);
      if (fit < P->requests_fit_instance) P->requests_fit_instance = fit;
      P->kv_block_tokens = m.kv_block_tokens ? m.kv_block_tokens : P->kv_block_tokens;
      if (!ck.ok) {
        diag_at(d, DIAG_E0305, P->loc, "the memory ledger of pool `%s` stage %lld overflows",
                P->name, (long long)st);
        return false;
      }
    }
  }
  return true;
}
