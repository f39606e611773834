/*
 * cost.c: the analytic cost model (roofline plus communication).
 *
 * Input IR: a Spec without parse errors (spec.h), the model arithmetic of
 * model.h, and a CostLayout per engine instance.
 * Output IR: times in seconds and per-GPU byte/FLOP counts (CostPrefill,
 * CostDecode), queueing waits, and the published closed forms the search
 * uses (xPyD ratio, attention tp optimum, pp rebalance, zigzag cp units).
 * Invariants: byte and FLOP counts are int64 and go through checked
 * arithmetic; an overflow makes the function return false (the caller
 * reports E0501) and never wraps. Times are doubles derived from those
 * counts. Every efficiency and latency constant comes from CostConsts; no
 * number in this file is a tuning knob of its own. docs/cost-model.md is
 * the reference for each formula; the comment above each function names
 * the section.
 */
#include "cost.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "json_pos.h"
#include "memory.h"
#include "model.h"

/* ---- constants table ----------------------------------------------------- */

static const CostConstInfo cost__table[] = {
#define X(name, def, lo, hi, doc) {#name, def, lo, hi, doc, offsetof(CostConsts, name)},
    COST_CONSTANTS(X)
#undef X
};

const CostConstInfo *cost_const_table(size_t *n) {
  *n = RP_ARRAY_LEN(cost__table);
  return cost__table;
}

void cost_consts_default(CostConsts *c) {
  for (size_t i = 0; i < RP_ARRAY_LEN(cost__table); i++)
    *(double *)((char *)c + cost__table[i].offset) = cost__table[i].def;
}

/* One key of a calibration file, at `at`: `source`, `format` or a constant
 * of the table in its range, stored in c. */
static bool cost__calibration_key(Diags *d, SrcLoc at, const char *path, const char *key,
                                  json_t *val, CostConsts *c) {
  if (strcmp(key, "source") == 0) {
    if (json_is_string(val)) return true;
    diag_at(d, DIAG_E0503, at, "`source` in calibration file `%s` must be a string", path);
    return false;
  }
  if (strcmp(key, "format") == 0) {
    if (json_is_string(val) && strcmp(json_string_value(val), "rankplan.calibration/1") == 0) return true;
    Diag *g = diag_at(d, DIAG_E0503, at,
                      "unsupported `format` in calibration file `%s`: expected "
                      "\"rankplan.calibration/1\"", path);
    diag_help(g, "drop the key or write \"format\": \"rankplan.calibration/1\"");
    return false;
  }
  const CostConstInfo *ci = NULL;
  for (size_t i = 0; i < RP_ARRAY_LEN(cost__table); i++)
    if (strcmp(cost__table[i].name, key) == 0) ci = &cost__table[i];
  if (!ci) {
    const char *names[RP_ARRAY_LEN(cost__table) + 2];
    for (size_t i = 0; i < RP_ARRAY_LEN(cost__table); i++) names[i] = cost__table[i].name;
    names[RP_ARRAY_LEN(cost__table)] = "format";
    names[RP_ARRAY_LEN(cost__table) + 1] = "source";
    Diag *g = diag_at(d, DIAG_E0502, at, "unknown key `%s` in calibration file `%s`", key, path);
    const char *near = diag_closest(key, names, RP_ARRAY_LEN(names));
    if (near) diag_help(g, "did you mean `%s`?", near);
    else diag_help(g, "docs/cost-model.md lists every constant");
    return false;
  }
  if (!json_is_number(val)) {
    diag_at(d, DIAG_E0503, at, "`%s` in calibration file `%s` must be a number", key, path);
    return false;
  }
  double v = json_number_value(val);
  if (!(v >= ci->lo && v <= ci->hi)) {
    Diag *g = diag_at(d, DIAG_E0503, at,
                      "`%s` in calibration file `%s` is out of range: expected %g to %g, got %g", key,
                      path, ci->lo, ci->hi, v);
    diag_help(g, "%s", ci->doc);
    return false;
  }
  *(double *)((char *)c + ci->offset) = v;
  return true;
}

/* The calibration file is JSON because `rankplan calibrate` and
 * `rankrun --probe` write it and Jansson is already a dependency; the keys
 * are exactly the table's names so a typo can never be silently ignored. */
bool cost_calibration_load(Diags *d, const char *path, CostConsts *c,
                           bool *unreadable) {
  char *text = NULL;
  size_t len = 0;
  *unreadable = false;
  int err = rp_read_file(path, 1u << 20, &text, &len);
  if (err) {
    Diag *g = diag_at(d, DIAG_E0505, (SrcLoc){diags_intern(d, path), 0, 0},
                      "cannot read calibration file `%s`: %s", path, rp_strerror(err));
    diag_help(g, "pass the JSON file `rankplan calibrate` or `rankrun --probe` wrote, or drop --calibration");
    *unreadable = true;
    return false;
  }
  bool ok = cost_calibration_parse(d, path, text, len, c);
  free(text);
  return ok;
}

bool cost_calibration_parse(Diags *d, const char *path, const char *text, size_t len,
                            CostConsts *c) {
  const char *file = diags_intern(d, path);
  SrcLoc whole = {file, 0, 0};
  diags_add_source(d, path, text, len);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    Diag *g = diag_at(d, DIAG_E0504, (SrcLoc){file, je.line > 0 ? je.line : 0,
                                              je.column > 0 ? je.column : 1},
                      "calibration file `%s` is not valid JSON: %s", path, je.text);
    diag_help(g, "the file is one JSON object: {\"mfu_prefill\": 0.55, ...}");
    return false;
  }
  if (!json_is_object(root)) {
    Diag *g = diag_at(d, DIAG_E0504, whole,
                      "calibration file `%s` must hold a JSON object, got a %s", path,
                      json_is_array(root) ? "array" : "scalar");
    diag_help(g, "write {\"mfu_prefill\": 0.55, ...}");
    json_decref(root);
    return false;
  }
  bool ok = true;
  /* Jansson iterates objects in insertion order, so the diagnostics come in
   * file order and the output is deterministic. */
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    SrcLoc at = json_pos(text, len, 0, (SrcLoc){file, 1, 1}, key, whole);
    if (!cost__calibration_key(d, at, path, key, val, c)) ok = false;
  }
  json_decref(root);
  return ok;
}

/* ---- model ---------------------------------------------------------------- */

int64_t cost_layout_gpus(const CostLayout *l) {
  CkState st = {true};
  int64_t g = ckm(&st, ckm(&st, ckm(&st, l->tp, l->cp), l->dp), l->pp);
  return st.ok ? g : -1;
}

/* Peak dense FLOP/s of the GPU for the model's compute dtype: fp8, int8,
 * mxfp4 or nvfp4 weights run on the fp8/int8/fp4 tensor cores when the
 * hardware gives that figure (as DeepSeek-V3's FP8 GEMMs do); otherwise
 * bf16 (fp16 for fp16 activations). */
static double cost__peak(const Spec *s) {
  const ModelSpec *ms = &s->model;
  DType w = (DType)ms->dtype.weights.v;
  if (w == DT_FP8 && s->hardware.gpu.fp8.v > 0) return s->hardware.gpu.fp8.v;
  if (w == DT_INT8 && s->hardware.gpu.int8.v > 0) return s->hardware.gpu.int8.v;
  if ((w == DT_MXFP4 || w == DT_NVFP4) && s->hardware.gpu.fp4.v > 0) return s->hardware.gpu.fp4.v;
  if ((DType)ms->dtype.activations.v == DT_FP16 && s->hardware.gpu.fp16.v > 0)
    return s->hardware.gpu.fp16.v;
  return s->hardware.gpu.bf16.v;
}

/* A non-negative count computed in double, as int64: rounded up, and held
 * at INT64_MAX where the double is past it (converting such a double is
 * undefined behaviour). With the spec's limits the byte and FLOP counts of
 * one step stay far below; a GPU of 2^63 - 1 bytes does not. */
int64_t cost_ceil_i64(double x) {
  double c = ceil(x);
  if (!(c < 9223372036854775808.0)) return INT64_MAX;
  return c > 0 ? (int64_t)c : 0;
}

/* Activation quantisation block: one fp32 scale per 128 channels of a
 * token (DeepSeek-V3 technical report, section 3.3.2, fine-grained
 * quantisation: 1x128 tiles for activations; DeepEP's fp8 dispatch sends
 * the same per-token scales). */
#define COST_ACT_QUANT_BLOCK 128
#define COST_ACT_SCALE_BYTES 4

/* Bytes of one token's hidden vector of h elements in dtype d, with the
 * scales a 1-byte dtype carries. */
static double cost__moe_tok_bytes(int64_t h, DType d) {
  int64_t num, den;
  model_dtype_size(d, &num, &den);
  double b = (double)h * (double)num / (double)den;
  if (num == den && num == 1)
    b += (double)rp_cdiv64(h, COST_ACT_QUANT_BLOCK) * COST_ACT_SCALE_BYTES;
  return b;
}

/* The MoE shape, routing and dispatch/combine bytes of model ms. */
static void cost__moe_init(const ModelSpec *ms, CostModel *m) {
  m->experts = ms->moe.experts.v;
  m->expert_slots = model_expert_slots(ms);
  m->top_k = ms->moe.top_k.v;
  m->expert_ffn_size = ms->moe.expert_intermediate_size.v;
  m->route_groups = ms->moe.groups.set ? ms->moe.groups.v : 0;
  m->route_group_top_k = ms->moe.group_top_k.set ? ms->moe.group_top_k.v : 0;
  DType act = (DType)ms->dtype.activations.v;
  m->dispatch_bytes = cost__moe_tok_bytes(
      ms->hidden_size.v, ms->moe.dispatch_dtype.set ? (DType)ms->moe.dispatch_dtype.v : act);
  m->combine_bytes = cost__moe_tok_bytes(
      ms->hidden_size.v, ms->moe.combine_dtype.set ? (DType)ms->moe.combine_dtype.v : act);
}

static int64_t cost__cached(const CostModel *m);

/* The engine's scheduler as the aggregated pools' model needs it
 * (docs/cost-model.md, "Aggregated instances"): a token budget when prompt
 * chunks ride in decode steps, the new tokens of a prompt and the mean
 * context a chunk token attends to (the cached prefix and half the new
 * tokens). */
static void cost__sched_init(const Spec *s, CostModel *m) {
  EngineSched es;
  engine_sched(s, &es);
  m->chunk_tokens = es.mixed ? es.tokens : 0;
  m->overlap = es.overlap;
  m->overlap_exposed_s = es.overlap_exposed_s;
  m->sync_gpn = engine_vllm_ray_sync_gpn(s);
  m->eager_prefill = es.eager_prefill;
  m->whole_prompts = es.whole_prompts;
  m->whole_tokens = es.whole_prompts ? es.tokens : 0;
  if ((Engine)s->deployment.engine.v == ENGINE_SGLANG) {
    m->graph_bs[0] = mem_engine_sglang_graph_bs(s, 1);
    m->graph_bs[1] = mem_engine_sglang_graph_bs(s, 4);
  }
  m->prefill_tokens = (Engine)s->deployment.engine.v == ENGINE_SGLANG ? mem_engine_sglang_chunk(s)
                                                                       : es.tokens;
  m->run_seqs = es.seqs;
  m->limits_per_dp = engine_limits_per_dp(s);
  int64_t cached = m->tin > 0 ? cost__cached(m) : 0;
  m->new_tokens = m->tin - cached;
  m->chunk_ctx = (double)cached + (double)m->new_tokens / 2.0;
}

/* ---- kernel-boundary stalls ---------------------------------------------- */

/* Kernels of one layer's forward pass (docs/cost-model.md, "Kernel-boundary
 * stalls"): a dense layer's 7 (Hazy Research's count for a Llama layer); a
 * MoE layer replaces the MLP's 3 (gate-up GEMM, activation, down GEMM) with
 * the router GEMM, top-k, moe_align_block_size, the two grouped GEMMs, the
 * activation and moe_sum (7; vLLM's fused_moe.py, TritonExperts.apply and
 * fused_topk), and its shared experts run a dense MLP's 3 more; MLA adds 5
 * to the attention (q_a_layernorm, q_b_proj and kv_a_layernorm in vLLM's
 * mla.py forward, and the absorbed W_UK and W_UV batched matmuls). */
#define COST_KERNELS_DENSE 7.0
#define COST_KERNELS_MOE (COST_KERNELS_DENSE - 3.0 + 7.0)
#define COST_KERNELS_SHARED 3.0
#define COST_KERNELS_MLA 5.0
/* Per-head q and k RMSNorms (Qwen3, Gemma 3): two more, vLLM's qwen3.py
 * Qwen3Attention.forward calling q_norm and k_norm. */
#define COST_KERNELS_QK_NORM 2.0

/* The kernels of one forward pass over every layer of the model. */
static double cost__pass_kernels(const CostModel *m) {
  double attn = (m->kind == ATTN_MLA ? COST_KERNELS_MLA : 0.0) +
                (m->ms->attention.qk_norm.v ? COST_KERNELS_QK_NORM : 0.0);
  double moe = COST_KERNELS_MOE + (m->shared_params > 0 ? COST_KERNELS_SHARED : 0.0);
  return (double)m->n_dense * (COST_KERNELS_DENSE + attn) + (double)m->n_moe * (moe + attn);
}

/* The collectives of one forward pass that run as kernels between a
 * layer's other kernels: the two tp all-reduces of every layer (one
 * kernel each: vLLM's custom all-reduce, csrc/custom_all_reduce.cuh, and
 * NCCL alike), the dcp reduction, a MoE layer's etp all-reduce and its ep
 * dispatch and combine. pp sends (once per stage, not per layer) and cp
 * ring passes (behind the attention they feed) are left out. */
static double cost__comm_kernels(const CostModel *m, const CostLayout *l) {
  double per_layer = (l->tp > 1 ? 2.0 : 0.0) + (l->dcp > 1 ? 1.0 : 0.0);
  double per_moe = (l->etp > 1 && l->etp != l->tp ? 1.0 : 0.0) + (l->ep > 1 ? 2.0 : 0.0);
  return ((double)m->n_dense + (double)m->n_moe) * per_layer + (double)m->n_moe * per_moe;
}

/* The stalls of one forward pass over every layer of the model, its
 * collectives' kernels included. */
static double cost__stalls(const CostModel *m, const CostLayout *l) {
  return (m->pass_kernels + cost__comm_kernels(m, l)) * m->k.kernel_stall_s;
}

double cost_eager_issue(const CostModel *m, const CostLayout *l) {
  return (m->pass_kernels + cost__comm_kernels(m, l)) * m->k.eager_kernel_s;
}

/* The model's sizes and per-layer weight bytes the cost model reads. */
static void cost__model_init(CkState *st, const ModelSpec *ms, const ModelParams *mp, const ModelBytes *mb,
                             CostModel *m) {
  m->kind = (AttnKind)ms->attention.kind.v;
  m->moe = model_is_moe(ms);
  m->layers = ms->layers.v;
  m->n_dense = mp->n_dense;
  m->n_moe = mp->n_moe;
  m->hidden = ms->hidden_size.v;
  m->vocab = ms->vocab_size.v;
  m->heads = ms->attention.heads.v;
  m->kv_heads = model_kv_heads(ms);
  m->head_dim = model_head_dim(ms);
  m->dense_ffn_size = ms->ffn.intermediate_size.v;
  if (m->moe) cost__moe_init(ms, m);
  m->attn_params = mp->attn.total;
  m->dense_ffn_params = mp->dense_ffn;
  m->expert_params = mp->expert;
  m->shared_params = mp->shared;
  m->router_params = mp->router;
  m->pass_kernels = cost__pass_kernels(m);
  m->lm_params = ckm(st, m->vocab, m->hidden);
  m->tied = mb->lm_head == 0;
  int64_t L = m->layers > 0 ? m->layers : 1;
  m->b_attn = rp_cdiv64(mb->attention, L);
  m->b_norms = rp_cdiv64(mb->norms, L);
  m->b_dense_ffn = m->n_dense > 0 ? rp_cdiv64(mb->ffn_dense, m->n_dense) : 0;
  if (m->moe && m->n_moe > 0) {
    m->b_expert = rp_cdiv64(mb->experts_routed, ckm(st, m->n_moe, m->experts));
    m->b_shared = rp_cdiv64(mb->experts_shared, m->n_moe);
    m->b_router = rp_cdiv64(mb->routers, m->n_moe);
  }
  m->b_embed = mb->embedding;
  m->b_lm = m->tied ? mb->embedding : mb->lm_head;
  int64_t num, den;
  model_dtype_size((DType)ms->dtype.activations.v, &num, &den);
  m->act_bytes = num >= den ? rp_cdiv64(num, den) : 1;
  m->kv_bytes_token = model_kv_bytes_per_token(ms);
  m->kv_bytes_token_layer = model_kv_bytes_per_token_rank(ms, 1, 1, 1);
  if (m->kv_bytes_token < 0 || m->kv_bytes_token_layer < 0) st->ok = false;
}

/* FLOPs per (query, key) pair per layer: QK^T and AV, 2 FLOPs per
 * multiply-add. MLA prefill runs the expanded (MHA-like) form, MLA decode
 * the absorbed form over the latent (docs/cost-model.md, "Attention"). */
static void cost__pair_flops_init(CkState *st, const ModelSpec *ms, CostModel *m) {
  int64_t H = m->heads;
  if (m->kind == ATTN_MLA) {
    int64_t nope = ms->attention.qk_nope_head_dim.v, rope = ms->attention.qk_rope_head_dim.v;
    int64_t vd = ms->attention.v_head_dim.v, lat = ms->attention.kv_lora_rank.v;
    m->attn_pair_flops_prefill = ckm(st, ckm(st, 2, H), cka(st, cka(st, nope, rope), vd));
    m->attn_pair_flops_decode = ckm(st, ckm(st, 2, H), cka(st, cka(st, lat, rope), lat));
  } else {
    m->attn_pair_flops_prefill = ckm(st, ckm(st, 4, H), m->head_dim);
    m->attn_pair_flops_decode = m->attn_pair_flops_prefill;
  }
}

/* The hardware's figures; E0501 when the cluster's GPU count overflows,
 * E0506 for each figure the model needs and the spec lacks. */
static bool cost__hw_init(Diags *d, const Spec *s, const CostConsts *k, CostModel *m) {
  const HardwareSpec *hw = &s->hardware;
  bool ok = true;
  SrcLoc hl = hw->loc;
  m->peak_flops = cost__peak(s);
  m->hbm_bw = hw->gpu.hbm_bandwidth.v;
  m->gpu_mem = hw->gpu.memory.v;
  m->domain = hw->scale_up.domain.v > 0 ? hw->scale_up.domain.v : hw->gpus_per_node.v;
  if (m->domain < 1) m->domain = 1;
  /* The cluster's size is the hardware's, not the model's: its overflow is
   * reported there (the spec's limits keep it at 2^18; a hand-made Spec
   * can pass anything). */
  if (!ck_mul(hw->nodes.v, hw->gpus_per_node.v, &m->gpus_total)) {
    diag_at(d, DIAG_E0501, hw->nodes.set ? hw->nodes.loc : hl,
            "the cluster's GPU count overflows 64 bits: %lld nodes x %lld GPUs per node",
            (long long)hw->nodes.v, (long long)hw->gpus_per_node.v);
    ok = false;
  }
  m->up_bw = hw->scale_up.bandwidth.v;
  m->out_bw = hw->scale_out.bandwidth.v;
  m->up_lat = hw->scale_up.latency.set ? hw->scale_up.latency.v : k->scale_up_latency_s;
  m->up_nvls = hw->scale_up.nvls_ratio.set ? hw->scale_up.nvls_ratio.v * m->up_bw : 0.0;
  m->out_lat = hw->scale_out.latency.set ? hw->scale_out.latency.v : k->scale_out_latency_s;
  struct { const char *key; double v; SrcLoc loc; } need[] = {
      {"hardware.gpu.memory", (double)m->gpu_mem, hw->gpu.loc},
      {"hardware.gpu.hbm_bandwidth", m->hbm_bw, hw->gpu.loc},
      {"hardware.gpu.bf16", m->peak_flops, hw->gpu.loc},
      {"hardware.scale_up.bandwidth", m->domain > 1 ? m->up_bw : 1.0, hw->scale_up.loc},
      {"hardware.scale_out.bandwidth", m->out_bw, hw->scale_out.loc},
  };
  for (size_t i = 0; i < RP_ARRAY_LEN(need); i++) {
    if (need[i].v > 0) continue;
    Diag *g = diag_at(d, DIAG_E0506, need[i].loc.line ? need[i].loc : hl,
                      "the cost model needs `%s`, which the spec does not give", need[i].key);
    diag_help(g, "set `%s` (with its unit) or use a hardware preset that has it", need[i].key);
    ok = false;
  }
  return ok;
}

/* The workload, the engine's scheduling limits and the SLO. */
static void cost__workload_init(const Spec *s, CostModel *m) {
  m->tin = s->workload.input_tokens.v;
  m->tout = s->workload.output_tokens.v;
  m->rate = s->workload.rate.set ? s->workload.rate.v : 0.0;
  m->concurrency = s->workload.concurrency.set ? (double)s->workload.concurrency.v : 0.0;
  m->requests = s->workload.requests.set ? (double)s->workload.requests.v : 0.0;
  m->draft = s->workload.draft_tokens.set ? s->workload.draft_tokens.v : 0;
  m->accepted = s->workload.accepted_tokens.set ? s->workload.accepted_tokens.v : 1.0;
  m->prefix_hit = s->workload.prefix_cache_hit_rate.set ? s->workload.prefix_cache_hit_rate.v : 0.0;
  cost__sched_init(s, m);
  m->slo_ttft = s->slo.ttft.v;
  m->slo_tpot = s->slo.tpot.v;
}

bool cost_model_init(Diags *d, const Spec *s, const CostConsts *k, CostModel *m) {
  memset(m, 0, sizeof *m);
  m->k = *k;
  m->loc = s->model.loc;
  const ModelSpec *ms = &s->model;
  m->ms = ms;
  ModelParams mp;
  ModelBytes mb;
  if (!model_params(ms, &mp, d) || !model_weight_bytes(ms, &mb, d)) return false;
  CkState st = {true};
  cost__model_init(&st, ms, &mp, &mb, m);
  cost__pair_flops_init(&st, ms, m);
  bool ok = cost__hw_init(d, s, k, m);
  cost__workload_init(s, m);
  if (!st.ok) {
    diag_at(d, DIAG_E0501, m->loc, "a parameter or FLOP count of model `%s` overflows 64 bits",
            ms->name.v ? ms->name.v : "model");
    ok = false;
  }
  return ok;
}

LinkClass cost_link_class(const CostModel *m, int64_t span) {
  return span <= m->domain ? LINK_SCALE_UP : LINK_SCALE_OUT;
}

double cost_link_bw(const CostModel *m, LinkClass c) {
  return c == LINK_SCALE_UP ? m->up_bw * m->k.scale_up_efficiency
                            : m->out_bw * m->k.scale_out_efficiency;
}

double cost_link_lat(const CostModel *m, LinkClass c) {
  return c == LINK_SCALE_UP ? m->up_lat : m->out_lat;
}

double cost_link_nvls(const CostModel *m, LinkClass c) {
  return c == LINK_SCALE_UP ? m->up_nvls : 0.0;
}

double cost_ring_allreduce(double bytes, int64_t n, double bw, double lat) {
  if (n <= 1) return 0.0;
  double f = 2.0 * (double)(n - 1) / (double)n;
  return f * bytes / bw + 2.0 * (double)(n - 1) * lat;
}

/* vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, CustomAllreduce::
 * allreduce; vllm/distributed/device_communicators/custom_all_reduce.py:
 * world sizes 2, 4, 6, 8 and max_size 8 MiB, NCCL beyond), whose kernels
 * SGLang runs too: one stage (every rank reads its n-1 peers' buffers
 * and reduces) at 2 ranks and below 512 KiB at up to 4 ranks or 256 KiB
 * at up to 8; two stages (reduce-scatter, all-gather) otherwise. */
#define COST_CUSTOM_AR_MAX_BYTES (8.0 * 1024.0 * 1024.0)

double cost_nvls_allreduce(double bytes, int64_t n, double busbw) {
  if (n <= 1) return 0.0;
  return COST_NVLS_LAT_S + 2.0 * (double)(n - 1) / (double)n * bytes / busbw;
}

/* NCCL: the faster of its ring and, where the domain has NVLink SHARP, its
 * NVLS all-reduce, as its tuner picks the algorithm of least predicted
 * time (src/graph/tuning.cc). */
static double cost__nccl_allreduce(double bytes, int64_t n, LinkClass c, double bw, double lat,
                                   double nvls) {
  double ring = cost_ring_allreduce(bytes, n, bw, lat);
  if (c != LINK_SCALE_UP || !(nvls > 0.0)) return ring;
  return fmin(ring, cost_nvls_allreduce(bytes, n, nvls));
}

double cost_allreduce(double bytes, int64_t n, LinkClass c, double bw, double lat, double nvls) {
  if (n <= 1) return 0.0;
  bool sizes = n == 2 || n == 4 || n == 6 || n == 8;
  if (c != LINK_SCALE_UP || !sizes || bytes >= COST_CUSTOM_AR_MAX_BYTES)
    return cost__nccl_allreduce(bytes, n, c, bw, lat, nvls);
  bool one = n == 2 || (n <= 4 && bytes < 512.0 * 1024.0) || bytes < 256.0 * 1024.0;
  if (one) return (double)(n - 1) * bytes / bw + lat;
  return 2.0 * (double)(n - 1) / (double)n * bytes / bw + 2.0 * lat;
}

double cost_all_to_all(double bytes, int64_t n, double bw, double lat) {
  if (n <= 1) return 0.0;
  return (double)(n - 1) / (double)n * bytes / bw + lat;
}

/* Extra work of the last stage (the logits matmul) in units of an average
 * layer's active parameters: e = lm_params / (active params per layer). */
static double cost__tail_extra(const CostModel *m) {
  double per_layer = (double)m->attn_params +
                     ((double)m->n_dense * (double)m->dense_ffn_params +
                      (double)m->n_moe * ((double)m->top_k * (double)m->expert_params +
                                          (double)m->shared_params + (double)m->router_params)) /
                         (double)m->layers;
  return per_layer > 0 ? (double)m->lm_params / per_layer : 0.0;
}

/* The tail's share beta solves tail + e = full stage with full = L/(p-1+beta)
 * and tail = beta * full: beta = (L - e(p-1)) / (L + e). */
static double cost__tail_beta(const CostModel *m, int64_t pp) {
  double L = (double)m->layers, e = cost__tail_extra(m);
  double beta = (L - e * (double)(pp - 1)) / (L + e);
  if (beta > 1.0) beta = 1.0;
  if (beta < 0.05) beta = 0.05;
  return beta;
}

/* Fills part[pp] with the stage split the cost model assumes; a split the
 * rebalance cannot give falls back to the balanced one. */
static void cost__partition(const CostModel *m, int64_t pp, int64_t *part, double *beta) {
  double b = pp > 1 ? cost__tail_beta(m, pp) : 1.0;
  if (!cost_pp_rebalance(m->layers, pp, b, part)) {
    /* Balanced: the first layers % pp stages take one layer more. */
    b = 1.0;
    for (int64_t i = 0; i < pp; i++) part[i] = m->layers / pp + (i < m->layers % pp);
  }
  if (beta) *beta = b;
}

int64_t cost_stage_layers(const CostModel *m, int64_t pp, double *beta_out) {
  if (pp <= 1) {
    if (beta_out) *beta_out = 1.0;
    return m->layers;
  }
  int64_t *part = rp_malloc((size_t)pp * sizeof *part);
  cost__partition(m, pp, part, beta_out);
  int64_t mx = 0;
  for (int64_t i = 0; i < pp; i++) mx = part[i] > mx ? part[i] : mx;
  free(part);
  return mx;
}

int64_t cost_weight_bytes_gpu(const CostModel *m, const CostLayout *l) {
  CkState st = {true};
  int64_t pp = l->pp;
  int64_t *part = rp_malloc((size_t)pp * sizeof *part);
  cost__partition(m, pp, part, NULL);
  int64_t worst = 0, first = 0;
  int64_t local_experts = m->moe ? rp_cdiv64(m->expert_slots, l->ep) : 0;
  int64_t per_moe = cka(&st, cka(&st, rp_cdiv64(m->b_shared, l->tp), m->b_router),
                        ckm(&st, local_experts, rp_cdiv64(m->b_expert, l->etp)));
  int64_t per_attn = cka(&st, rp_cdiv64(m->b_attn, l->tp), m->b_norms);
  int64_t per_dense = rp_cdiv64(m->b_dense_ffn, l->tp);
  for (int64_t sidx = 0; sidx < pp; sidx++) {
    int64_t n = part[sidx];
    int64_t nd = 0;
    if (first < m->n_dense) nd = (m->n_dense - first) < n ? (m->n_dense - first) : n;
    int64_t nm = n - nd;
    int64_t w = ckm(&st, n, per_attn);
    w = cka(&st, w, ckm(&st, nd, per_dense));
    w = cka(&st, w, ckm(&st, nm, per_moe));
    if (sidx == 0) w = cka(&st, w, rp_cdiv64(m->b_embed, l->tp));
    /* The last stage holds the lm_head; a tied head is the embedding, a
     * second copy only when the last stage is not the first. */
    if (sidx == pp - 1 && (!m->tied || pp > 1)) w = cka(&st, w, rp_cdiv64(m->b_lm, l->tp));
    if (w > worst) worst = w;
    first += n;
  }
  free(part);
  return st.ok ? worst : -1;
}

int64_t cost_kv_bytes_token_gpu(const CostModel *m, const CostLayout *l) {
  int64_t layers = cost_stage_layers(m, l->pp, NULL);
  int64_t b = model_kv_bytes_per_token_rank(m->ms, l->tp, layers, l->dcp);
  if (b < 0) return -1;
  return rp_cdiv64(b, l->dcp * (l->cp > 0 ? l->cp : 1));
}

/* ---- MoE ------------------------------------------------------------------ */

/* Expected distinct bins of n that k uniform picks hit: n (1 - (1-1/n)^k). */
static double cost__bins_hit(double n, double k) {
  return n <= 1.0 ? 1.0 : n * (1.0 - pow(1.0 - 1.0 / n, k));
}

/* The most nodes a token reaches: all of them, or under group-limited
 * routing top-groups groups of experts, each spanning ceil(nodes/groups)
 * nodes (experts laid out contiguously over the ep ranks). */
static double cost__node_cap(const CostModel *m, int64_t nodes) {
  if (m->route_groups < 1 || m->route_group_top_k < 1) return (double)nodes;
  int64_t per = rp_cdiv64(nodes, m->route_groups);
  int64_t cap = m->route_group_top_k * (per > 0 ? per : 1);
  return (double)(cap < nodes ? cap : nodes);
}

void cost_ep_rate(const CostModel *m, const CostLayout *l, CostEpRate *out) {
  memset(out, 0, sizeof *out);
  CostEpComm *o = &out->one;
  if (!m->moe || l->ep <= 1) return;
  double k = (double)m->top_k, ep = (double)l->ep;
  int64_t span = l->ep * l->etp;
  int64_t nodes = span <= m->domain ? 1 : rp_cdiv64(span, m->domain);
  /* distinct destination GPUs other than this one: ep - 1 others, each
   * hit with probability 1 - (1 - 1/ep)^k */
  o->gpus = (ep - 1.0) / ep * cost__bins_hit(ep, k);
  o->nodes = fmin(cost__bins_hit((double)nodes, k), cost__node_cap(m, nodes));
  o->remote_nodes = o->nodes * (double)(nodes - 1) / (double)nodes;
  double per_tok = (m->dispatch_bytes + m->combine_bytes) * m->k.expert_imbalance;
  o->bytes_up = o->gpus * per_tok;
  o->bytes_out = o->remote_nodes * per_tok;
  if (nodes == 1) {
    LinkClass c = cost_link_class(m, span);
    o->time = o->bytes_up / cost_link_bw(m, c);
    out->lat = 2.0 * cost_link_lat(m, c);
    return;
  }
  out->lat = 2.0 * cost_link_lat(m, LINK_SCALE_OUT);
  double out_t = o->bytes_out / cost_link_bw(m, LINK_SCALE_OUT);
  if (m->domain <= 1) { /* one GPU per node: every copy crosses scale-out */
    o->bytes_up = 0.0;
    o->time = out_t;
    return;
  }
  /* Dispatch and combine each overlap their scale-up forwarding with the
   * scale-out transfer (DeepSeek-V3 report, section 3.2.2). */
  o->time = fmax(o->bytes_up / cost_link_bw(m, LINK_SCALE_UP), out_t);
}

double cost_ep_time(const CostEpRate *r, double tokens) {
  return tokens > 0 && r->one.time > 0 ? tokens * r->one.time + r->lat : 0.0;
}

void cost_ep_comm(const CostModel *m, const CostLayout *l, double tokens, CostEpComm *out) {
  CostEpRate r;
  cost_ep_rate(m, l, &r);
  *out = r.one;
  if (!(tokens > 0)) {
    memset(out, 0, sizeof *out);
    return;
  }
  out->bytes_up *= tokens;
  out->bytes_out *= tokens;
  out->time = cost_ep_time(&r, tokens);
}

/* cost_expert_rows with the touched experts x already known. */
static double cost__rows(const CostModel *m, int64_t local, int64_t tokens, double x) {
  if (!(x > 0)) return 0.0;
  /* tokens reaching this rank's experts, spread over the touched ones */
  double mine = (double)tokens * (double)m->top_k * (double)local / (double)m->expert_slots;
  double per = mine / x * m->k.expert_imbalance;
  return x * ceil(per / COST_GEMM_M_ALIGN) * COST_GEMM_M_ALIGN;
}

double cost_expert_rows(const CostModel *m, int64_t local, int64_t tokens) {
  if (!m->moe || local < 1 || tokens < 1) return 0.0;
  return cost__rows(m, local, tokens, cost_experts_touched(m->expert_slots, m->top_k, local, tokens));
}

/* Experts sharded over etp ranks that hold the same tokens (activations
 * replicated, as a dense FFN over tp): one all-reduce of the layer's
 * output, `tokens` hidden vectors. When the etp group is the tp group, the
 * tp all-reduce after the FFN is that one already. */
static double cost__etp_allreduce(const CostModel *m, const CostLayout *l, double tokens) {
  if (!m->moe || l->etp <= 1 || l->etp == l->tp) return 0.0;
  LinkClass c = cost_link_class(m, l->ep * l->etp);
  double bytes = tokens * (double)m->hidden * (double)m->act_bytes;
  return cost_allreduce(bytes, l->etp, c, cost_link_bw(m, c), cost_link_lat(m, c), cost_link_nvls(m, c));
}

/* Work w with communication c of which a share ov runs behind w (two
 * micro-batches: one computes while the other communicates): the hidden
 * part costs nothing while w lasts. */
static double cost__overlap(double w, double c, double ov) {
  return fmax(w, ov * c) + (1.0 - ov) * c;
}

/* ---- prefill -------------------------------------------------------------- */

/* Prompt tokens found in the prefix cache: a hit skips the cached share of
 * the prompt, so S - cached new tokens are computed, each attending to the
 * whole prefix (docs/cost-model.md, "Prefix cache"). At least one token is
 * computed. */
static int64_t cost__cached(const CostModel *m) {
  int64_t S = m->tin;
  int64_t cached = (int64_t)floor(m->prefix_hit * (double)S);
  return cached > S - 1 ? S - 1 : cached;
}

/* docs/cost-model.md, "Prefill": linear FLOPs 2 * active params per token,
 * causal attention S(S+1)/2 pairs per layer, both split over tp*cp ranks
 * (attention over cp with the zigzag balance); tp all-reduces, cp ring KV
 * passes, ep dispatch/combine and pp boundary sends per layer. */
/* The GPU's work in one prefill pass of k prompts on a dp rank (pp 1):
 * the roofline of their compute against one read of the weights, their
 * collectives and the pass's kernel stalls. */
static double cost__pass_gpu(const CostModel *m, const CostPrefill *p, double k, double stalls) {
  return cost__overlap(fmax(k * p->compute, p->memory), k * p->comm_ep, m->k.ep_overlap) +
         (1.0 - m->k.comm_overlap) * k * (p->comm_tp + p->comm_cp) + stalls;
}

/* One prefill pass of k prompts: the GPU's work, and for an eager engine
 * at least the CPU time to issue the pass's kernels (docs/cost-model.md,
 * "Eager prefill"); at k = 1 the prefill latency of a one-stage layout. */
static double cost__pass_time(const CostModel *m, const CostLayout *l, const CostPrefill *p,
                              double k) {
  double gpu = cost__pass_gpu(m, p, k, cost__stalls(m, l));
  return fmax(gpu, m->eager_prefill ? cost_eager_issue(m, l) : 0.0);
}

bool cost_prefill(const CostModel *m, const CostLayout *l, CostPrefill *out) {
  memset(out, 0, sizeof *out);
  CkState st = {true};
  int64_t S = m->tin;
  int64_t cached = cost__cached(m);
  int64_t Sn = S - cached;
  int64_t tpcp = ckm(&st, l->tp, l->cp);
  int64_t f_dense = ckm(&st, 2, cka(&st, m->attn_params, m->dense_ffn_params));
  /* MoE layers without the routed experts, which run as a grouped GEMM
   * (cost_expert_rows) over the tokens of the dp ranks' requests. */
  int64_t f_moe = ckm(&st, 2, cka(&st, cka(&st, m->attn_params, m->shared_params), m->router_params));
  int64_t lin = cka(&st, ckm(&st, m->n_dense, f_dense), ckm(&st, m->n_moe, f_moe));
  lin = ckm(&st, lin, Sn);
  int64_t pairs = ckm(&st, S, S + 1) / 2 - ckm(&st, cached, cached + 1) / 2;
  int64_t attn = ckm(&st, ckm(&st, pairs, m->attn_pair_flops_prefill), m->layers);
  int64_t lm = ckm(&st, 2, m->lm_params); /* logits of the last token only */
  /* One copy of the experts spans ep * etp of the instance's tp*cp*dp
   * ranks and serves their share of the dp requests' tokens. */
  int64_t group_tokens = rp_cdiv64(ckm(&st, ckm(&st, Sn, l->ep), l->etp), tpcp);
  if (!st.ok) return false;
  double imb = cost_cp_imbalance(l->cp, true);
  double rows = cost_expert_rows(m, rp_cdiv64(m->expert_slots, l->ep), group_tokens);
  double f_exp = (double)m->n_moe * 2.0 * rows * (double)m->expert_params / (double)l->etp;
  double flops_rank = (double)lin / (double)tpcp + f_exp + (double)attn * imb / (double)tpcp +
                      (double)lm / (double)l->tp;
  out->cp_imbalance = imb;
  out->compute = flops_rank / (m->peak_flops * m->k.mfu_prefill);
  double act = (double)m->act_bytes, h = (double)m->hidden;
  double L = (double)m->layers;
  if (l->tp > 1) {
    LinkClass c = cost_link_class(m, l->tp);
    double bytes = (double)Sn / (double)l->cp * h * act;
    out->comm_tp = L * 2.0 * cost_allreduce(bytes, l->tp, c, cost_link_bw(m, c), cost_link_lat(m, c),
                                            cost_link_nvls(m, c));
  }
  if (l->cp > 1) {
    LinkClass c = cost_link_class(m, tpcp);
    int64_t kvr = model_kv_bytes_per_token_rank(m->ms, l->tp, 1, 1);
    double chunk = (double)S / (double)l->cp * (double)kvr;
    out->comm_cp = L * (double)(l->cp - 1) * (chunk / cost_link_bw(m, c) + cost_link_lat(m, c));
  }
  CostEpComm ec;
  cost_ep_comm(m, l, (double)Sn / (double)tpcp, &ec);
  out->comm_ep = (double)m->n_moe * (ec.time + cost__etp_allreduce(m, l, (double)Sn / (double)l->cp));
  int64_t gpus = cost_layout_gpus(l);
  double send = 0.0;
  if (l->pp > 1) {
    LinkClass c = cost_link_class(m, gpus);
    send = (double)Sn / (double)l->cp * h * act / cost_link_bw(m, c) + cost_link_lat(m, c);
    out->comm_pp = (double)(l->pp - 1) * send;
  }
  /* Roofline over the whole request: every stage reads its weights once
   * (the heaviest stage's bytes, pp times). */
  int64_t wgpu = cost_weight_bytes_gpu(m, l);
  if (wgpu < 0) return false;
  out->memory = (double)wgpu * (double)l->pp / (m->hbm_bw * m->k.hbm_efficiency);
  /* The forward pass idles the GPU at every kernel boundary of every
   * layer (docs/cost-model.md, "Kernel-boundary stalls"). */
  out->overhead = cost__stalls(m, l);
  double gpu = cost__pass_gpu(m, out, 1.0, out->overhead), work = cost__pass_time(m, l, out, 1.0);
  out->overhead += work - gpu; /* the GPU waiting for an eager pass's CPU */
  out->latency = work + out->comm_pp;
  double frac = (double)cost_stage_layers(m, l->pp, NULL) / L;
  out->stage = l->pp > 1 ? work * frac + send : work;
  out->mu = (double)l->dp / out->stage;
  out->tok_s_gpu = out->mu * (double)S / (double)gpus;
  return true;
}

/* ---- decode --------------------------------------------------------------- */

/* One layer of one decode step on one GPU: roofline max(bytes/HBM,
 * FLOPs/peak) plus the layer's collectives. */
typedef struct {
  double bytes, flops, comm;
} CostLayerStep;

int64_t cost_sched_batch(int64_t B, int64_t pp, int64_t dp) {
  return rp_cdiv64(rp_cdiv64(B, pp), dp);
}

int64_t cost_graph_bs(const CostModel *m, const CostLayout *l) {
  if (m->moe && l->dp > 1) return 0;
  return m->graph_bs[l->tp >= 4];
}

bool cost_decode_prep(const CostModel *m, const CostLayout *l, double ctx, CostDecodePrep *p) {
  memset(p, 0, sizeof *p);
  p->l = *l;
  p->c = (int64_t)ceil(ctx);
  p->kvr = model_kv_bytes_per_token_rank(m->ms, l->tp, 1, l->dcp);
  if (p->kvr < 0) return false;
  CkState st = {true};
  p->w_dense = cka(&st, cka(&st, rp_cdiv64(m->b_attn, l->tp), m->b_norms),
                   rp_cdiv64(m->b_dense_ffn, l->tp));
  p->p_dense = cka(&st, m->attn_params, m->dense_ffn_params);
  if (m->moe) {
    p->local = rp_cdiv64(m->expert_slots, l->ep);
    p->w_moe = cka(&st, cka(&st, rp_cdiv64(m->b_attn, l->tp), m->b_norms),
                   cka(&st, rp_cdiv64(m->b_shared, l->tp), m->b_router));
    p->w_expert = rp_cdiv64(m->b_expert, l->etp);
    p->p_moe = cka(&st, m->attn_params, m->shared_params);
    p->tpdp = ckm(&st, l->tp, l->dp);
    cost_ep_rate(m, l, &p->ep);
  }
  if (!st.ok) return false;
  LinkClass lc = cost_link_class(m, l->tp);
  p->tp_class = lc;
  p->stalls = cost__stalls(m, l);
  p->graph_bs = cost_graph_bs(m, l);
  p->eager_issue = cost_eager_issue(m, l);
  p->tp_bw = cost_link_bw(m, lc);
  p->tp_lat = cost_link_lat(m, lc);
  p->tp_nvls = cost_link_nvls(m, lc);
  if (l->pp > 1) {
    lc = cost_link_class(m, cost_layout_gpus(l));
    p->pp_bw = cost_link_bw(m, lc);
    p->pp_lat = cost_link_lat(m, lc);
  }
  p->lm_bytes = (double)rp_cdiv64(m->b_lm, l->tp);
  return true;
}

/* One MoE layer of a decode step on one GPU (docs/cost-model.md,
 * "Decode"): the non-expert weights, the touched experts' weights and the
 * KV; the grouped GEMM's padded rows; dispatch/combine of this rank's
 * share of its dp rank's tokens (*ep) and, with etp, the expert
 * all-reduce. b: the micro-batch, bdp: this dp rank's requests. */
static bool cost__decode_moe(const CostModel *m, const CostDecodePrep *p, int64_t b, int64_t bdp,
                             double kv_layer, int64_t attn_flops, CostLayerStep *ml, double *ep) {
  const CostLayout *l = &p->l;
  CkState st = {true};
  /* one copy of the experts spans ep * etp of the tp*dp ranks */
  int64_t group = rp_cdiv64(ckm(&st, ckm(&st, b, l->ep), l->etp), p->tpdp);
  double touched = group > 0 ? cost_experts_touched(m->expert_slots, m->top_k, p->local, group) : 0.0;
  ml->bytes = (double)p->w_moe + touched * (double)p->w_expert + kv_layer;
  int64_t f = ckm(&st, ckm(&st, 2, bdp), p->p_moe) / l->tp;
  f = cka(&st, f, ckm(&st, ckm(&st, 2, bdp), m->router_params));
  f = cka(&st, f, attn_flops);
  if (!st.ok) return false;
  double rows = cost__rows(m, p->local, group, touched);
  ml->flops = (double)f + 2.0 * rows * (double)m->expert_params / (double)l->etp;
  *ep = cost_ep_time(&p->ep, (double)rp_cdiv64(bdp, l->tp)) + cost__etp_allreduce(m, l, (double)bdp);
  return true;
}

/* KV bytes one layer reads in a step on one GPU, the mean over the
 * model's layers: n requests, each reading at context c what its layers'
 * attention types read (model_kv_read_tokens: a sliding layer its window, a
 * chunked one its chunk so far), split over dcp ranks. With every layer
 * full this is ceil(n * c * kvr / dcp). */
static int64_t cost__kv_read_layer(CkState *st, const CostModel *m, const CostDecodePrep *p,
                                   int64_t n, int64_t c) {
  if (n <= 0) return 0;
  int64_t layers = m->ms->layers.v;
  int64_t read = model_kv_read_tokens(m->ms, c);
  if (read < 0 || layers <= 0) {
    st->ok = false;
    return 0;
  }
  return rp_cdiv64(ckm(st, ckm(st, n, read), p->kvr), ckm(st, p->l.dcp, layers));
}

/* A decode step whose batch per scheduler, bdp, is beyond what the
 * engine's CUDA graphs cover runs eagerly: it takes at least the CPU time
 * to issue its forward pass's kernels (docs/cost-model.md, "Eager
 * decode"). The part of that time beyond the GPU's work gpu. */
static double cost__eager_excess(const CostDecodePrep *p, int64_t bdp, int64_t chunk, double gpu) {
  if (chunk > 0 || p->graph_bs <= 0 || bdp <= p->graph_bs) return 0.0;
  return fmax(0.0, p->eager_issue - gpu);
}

/* Prompt tokens of a mixed step per dp rank: the busiest rank's (slow),
 * which set the step's per-rank work, and the mean over the ranks, which
 * sets the experts' (docs/cost-model.md, "The busiest dp rank"). */
typedef struct {
  int64_t slow, mean;
} CostChunk;

/* The per-layer work of one step, before it is timed. */
typedef struct {
  CostLayerStep dl, ml;  /* a dense and a MoE layer */
  double ep_comm;        /* a MoE layer's dispatch and combine */
  int64_t tq, tk, bdp;   /* query tokens, tokens through the linears, batch per scheduler */
} CostStepWork;

/* The tp all-reduces of one layer over tk tokens, and for dcp the
 * reduction of the partial attention outputs (dcp ranks hold different
 * tokens of the same heads). */
static double cost__step_tp_comm(const CostModel *m, const CostDecodePrep *p, int64_t tk) {
  const CostLayout *l = &p->l;
  double act = (double)m->act_bytes, h = (double)m->hidden, c = 0.0;
  if (l->tp > 1)
    c = 2.0 * cost_allreduce((double)tk * h * act, l->tp, p->tp_class, p->tp_bw, p->tp_lat, p->tp_nvls);
  if (l->dcp > 1)
    c += cost_allreduce((double)tk * h * act * (double)l->dcp / (double)l->tp, l->dcp, p->tp_class,
                        p->tp_bw, p->tp_lat, p->tp_nvls);
  return c;
}

/* The bytes, FLOPs and communication of one dense and one MoE layer of a
 * step holding B requests and the prompt tokens ch per dp rank: the
 * busiest rank's ch.slow go through its attention, linears and
 * collectives, every rank's ch.mean through the experts they share. */
static bool cost__step_work(const CostModel *m, const CostDecodePrep *p, int64_t B, CostChunk ch,
                            CostStepWork *w) {
  int64_t chunk = ch.slow;
  const CostLayout *l = &p->l;
  CkState st = {true};
  int64_t b = rp_cdiv64(B, l->pp);
  w->bdp = cost_sched_batch(B, l->pp, l->dp);
  /* Speculative decoding runs 1 + draft tokens of each request per step
   * (docs/cost-model.md, "Speculative decoding"): tq tokens on this dp
   * rank, over the same KV; tk adds the prompt chunk. */
  int64_t q = 1 + m->draft;
  w->tq = ckm(&st, w->bdp, q);
  w->tk = cka(&st, w->tq, chunk);
  int64_t c = p->c;
  int64_t cctx = chunk > 0 ? (int64_t)ceil(m->chunk_ctx) : 0;
  /* KV read per layer: this dp rank's requests and the chunk's prompt. */
  int64_t kv_layer = cka(&st, cost__kv_read_layer(&st, m, p, w->bdp, c),
                         cost__kv_read_layer(&st, m, p, chunk > 0, cctx));
  int64_t attn_flops = cka(&st, ckm(&st, ckm(&st, w->tq, c), m->attn_pair_flops_decode),
                           ckm(&st, ckm(&st, chunk, cctx), m->attn_pair_flops_prefill)) / l->tp;
  w->dl.bytes = (double)p->w_dense + (double)kv_layer;
  w->dl.flops = (double)cka(&st, ckm(&st, ckm(&st, 2, w->tk), p->p_dense) / l->tp, attn_flops);
  int64_t b_tok = cka(&st, ckm(&st, b, q), ckm(&st, ch.mean, l->dp));
  if (m->moe && !cost__decode_moe(m, p, b_tok, w->tk, (double)kv_layer, attn_flops, &w->ml, &w->ep_comm))
    return false;
  if (!st.ok) return false;
  w->dl.comm = w->ml.comm = cost__step_tp_comm(m, p, w->tk);
  return true;
}

/* One step of an instance holding B decoding requests whose dp ranks
 * also run prompt tokens of a chunked prefill, `slow` on the busiest rank
 * and `mean` on average (0 and 0: a decode step; docs/cost-model.md,
 * "Decode" and "Aggregated instances"). The chunk's tokens go through
 * every linear layer, collective and expert with the decode tokens; they
 * attend to m->chunk_ctx tokens of their prompt, whose KV the step reads
 * once per layer; they produce no logits. */
bool cost_step_ranks(const CostModel *m, const CostDecodePrep *p, int64_t B, int64_t slow,
                     int64_t mean, CostDecode *out) {
  memset(out, 0, sizeof *out);
  const CostLayout *l = &p->l;
  CostStepWork w = {0};
  CostChunk ch = {slow, mean};
  int64_t chunk = slow;
  if (!cost__step_work(m, p, B < 1 ? 1 : B, ch, &w)) return false;
  const CostLayerStep *dl = &w.dl, *ml = &w.ml;
  double nd = (double)m->n_dense, nm = (double)m->n_moe;
  out->comm_tp = (nd + nm) * dl->comm;
  double bw = m->hbm_bw * m->k.hbm_efficiency;
  double pk = m->peak_flops * m->k.mfu_decode;
  double ov = 1.0 - m->k.comm_overlap;
  double t_mem = nd * dl->bytes / bw + nm * ml->bytes / bw;
  double t_cmp = nd * dl->flops / pk + nm * ml->flops / pk;
  /* Each layer also idles the GPU at its kernel boundaries
   * (docs/cost-model.md, "Kernel-boundary stalls"). */
  double stalls = p->stalls;
  double t_layers = nd * (fmax(dl->bytes / bw, dl->flops / pk) + ov * dl->comm) +
                    nm * (cost__overlap(fmax(ml->bytes / bw, ml->flops / pk), w.ep_comm,
                                        m->k.ep_overlap) + ov * ml->comm) +
                    stalls;
  /* The logits of every sequence on the last stage (vocab split over tp). */
  double lm_bytes = p->lm_bytes;
  double lm_flops = 2.0 * (double)w.tq * (double)m->lm_params / (double)l->tp;
  double t_lm = fmax(lm_bytes / bw, lm_flops / pk);
  double send = 0.0;
  if (l->pp > 1) send = (double)w.tk * (double)m->hidden * (double)m->act_bytes / p->pp_bw + p->pp_lat;
  out->memory = t_mem + lm_bytes / bw;
  out->compute = t_cmp + lm_flops / pk;
  out->comm_pp = (double)(l->pp - 1) * send;
  out->comm_ep = nm * w.ep_comm;
  out->comm = out->comm_tp + out->comm_ep + out->comm_pp;
  out->memory_bound = out->memory >= out->compute;
  /* An MTP draft is one more transformer block and the shared head per
   * draft token (DeepSeek-V3 report, section 2.2): priced as an average
   * layer of this step plus the logits. */
  double draft = (double)m->draft * (t_layers / (nd + nm) + t_lm);
  double gpu = t_layers + t_lm + out->comm_pp + draft;
  double eager = cost__eager_excess(p, w.bdp, chunk, gpu);
  gpu += eager;
  /* The engine's CPU work per step, a fixed part and a part per sequence
   * of the scheduler's batch (docs/cost-model.md, "Engine overhead per
   * step"): exposed in full, or only what the GPU's step does not cover
   * when the engine overlaps the two, and at least what the engine's
   * overlap is known to leave exposed. */
  double cpu = (double)l->pp * (m->k.step_overhead_s + m->k.seq_overhead_s * (double)w.bdp);
  bool overlap = m->overlap && !engine_spans_nodes(m->sync_gpn, l->tp * l->cp, l->pp, l->dp);
  double exposed = overlap ? fmax((double)l->pp * m->overlap_exposed_s, cpu - gpu) : cpu;
  out->step = gpu + exposed;
  out->overhead = exposed + eager + stalls * (1.0 + (double)m->draft / (nd + nm));
  out->tpot = out->step / m->accepted;
  double pp = (double)l->pp;
  out->bytes_gpu = cost_ceil_i64((nd * dl->bytes + nm * ml->bytes + lm_bytes) / pp);
  out->flops_gpu = cost_ceil_i64((nd * dl->flops + nm * ml->flops + lm_flops) / pp);
  return true;
}

bool cost_step_at(const CostModel *m, const CostDecodePrep *p, int64_t B, int64_t chunk,
                  CostDecode *out) {
  return cost_step_ranks(m, p, B, chunk, chunk, out);
}

bool cost_decode_at(const CostModel *m, const CostDecodePrep *p, int64_t B, CostDecode *out) {
  return cost_step_at(m, p, B, 0, out);
}

bool cost_decode_step(const CostModel *m, const CostLayout *l, int64_t B, double ctx,
                      CostDecode *out) {
  CostDecodePrep p;
  if (!cost_decode_prep(m, l, ctx, &p)) {
    memset(out, 0, sizeof *out);
    return false;
  }
  return cost_decode_at(m, &p, B, out);
}

double cost_kv_transfer(const CostModel *m, const CostLayout *pre, const CostLayout *dec) {
  double bytes = (double)m->tin * (double)m->kv_bytes_token;
  /* Ranks holding distinct KV: GQA splits heads over min(tp, kv_heads)
   * ranks, MLA's latent is whole on every tp rank; pp and cp split layers
   * and tokens. */
  int64_t hs = m->kind == ATTN_MLA ? 1 : m->kv_heads;
  int64_t src = (pre->tp < hs ? pre->tp : hs) * pre->pp * pre->cp;
  int64_t dst = (dec->tp < hs ? dec->tp : hs) * dec->pp;
  int64_t n = src < dst ? src : dst;
  if (n < 1) n = 1;
  return bytes / ((double)n * cost_link_bw(m, LINK_SCALE_OUT)) + cost_link_lat(m, LINK_SCALE_OUT);
}

/* ---- one deployment -------------------------------------------------------- */

double cost_decode_ctx(const CostModel *m) { return (double)m->tin + (double)m->tout / 2.0; }

double cost_headroom(const Spec *s) {
  double h = s->search.headroom.v;
  if (s->search.headroom.set && h > 0.0 && h <= 1.0) return h;
  return s->workload.concurrency.set ? 1.0 : 0.9;
}

/* How far batch B is over the SLO (<= 0: it meets it; +inf: the batch
 * cannot run), monotone in B: non-decreasing. */
typedef double (*CostBatchExcess)(const CostModel *m, int64_t B, void *arg);

/* t's excess over the SLO as cost__largest reads it: <= 0 exactly when
 * t <= slo, +inf where t is not a number. */
static double cost__excess(double t, double slo) {
  if (t <= slo) return t - slo <= 0.0 ? t - slo : 0.0; /* inf - inf: still met */
  return t - slo > 0.0 ? t - slo : (double)INFINITY;
}

/* The next batch to test strictly inside (lo, hi): where the line through
 * (lo, flo) and (hi, fhi) crosses 0, the step time being close to linear
 * in B between them, or the midpoint when that line is not known (fhi
 * infinite) or the last step did not halve the interval. */
static int64_t cost__probe(int64_t lo, double flo, int64_t hi, double fhi, bool bisect) {
  int64_t mid = lo + (hi - lo) / 2;
  if (bisect || !isfinite(flo) || !isfinite(fhi) || !(fhi > flo)) return mid;
  double x = (double)lo + -flo / (fhi - flo) * (double)(hi - lo);
  return x < (double)(lo + 1) ? lo + 1 : x > (double)(hi - 1) ? hi - 1 : (int64_t)x;
}

/* Largest B in [1, hi] with f(B) <= 0; 0 when f(1) > 0. Tests the ends,
 * the guess (the last layout's answer), then closes (lo, hi) by the
 * Illinois form of regula falsi: interpolation, halving the weight of an
 * end that two tests in a row left in place (the step time is concave in
 * B where more experts are touched, so plain interpolation creeps up from
 * one side); and every third test, when those three left more than half
 * of the interval, the next one bisects: the interval halves at least
 * once in any six tests, so they stay within six times the bisection's.
 * Invariant: f(lo) <= 0 < f(hi). */
static int64_t cost__largest(const CostModel *m, int64_t hi, CostBatchExcess f, void *arg,
                             int64_t guess) {
  if (hi < 1) return 0;
  double wlo = f(m, 1, arg), whi; /* the ends' excess, as the interpolation weighs them */
  if (!(wlo <= 0.0)) return 0;
  if ((whi = f(m, hi, arg)) <= 0.0) return hi;
  int64_t lo = 1;
  if (guess > 1 && guess < hi) {
    double fg = f(m, guess, arg);
    if (fg <= 0.0) lo = guess, wlo = fg;
    else hi = guess, whi = fg;
  }
  int side = 0, tests = 0; /* side: the end the last test moved, -1 lo, +1 hi */
  int64_t width = hi - lo;
  bool bisect = false;
  while (hi - lo > 1) {
    int64_t b = cost__probe(lo, wlo, hi, whi, bisect);
    double fb = f(m, b, arg);
    if (fb <= 0.0) {
      if (side < 0) whi /= 2.0;
      lo = b, wlo = fb, side = -1;
    } else {
      if (side > 0) wlo /= 2.0;
      hi = b, whi = fb, side = 1;
    }
    bisect = false;
    if (++tests % 3 == 0) {
      bisect = 2 * (hi - lo) > width;
      width = hi - lo;
    }
  }
  return lo;
}

/* Whether the decode step meets the TPOT SLO at micro-batch b (the step
 * depends on B only through ceil(B/pp)). */
typedef struct {
  const CostDecodePrep *prep;
  int64_t hi; /* the largest B */
} CostDecArg;

static double cost__excess_decode_mb(const CostModel *m, int64_t b, void *arg) {
  const CostDecArg *a = arg;
  int64_t pp = a->prep->l.pp;
  int64_t B = b * pp < a->hi ? b * pp : a->hi;
  CostDecode dc;
  if (!cost_decode_at(m, a->prep, B, &dc)) return (double)INFINITY;
  return cost__excess(dc.tpot, m->slo_tpot);
}

/* Aggregated instance at batch B (docs/cost-model.md, "Aggregated
 * instances"): R_cap = 1 / (1/mu_p + tout / (B / tpot)); rho = min(headroom,
 * the M/D/1 rho that meets TTFT); decode steps stretch by 1 / (1 - u_p),
 * u_p = rho * R_cap / mu_p. */
typedef struct {
  const CostPrefill *pre;
  const CostDecodePrep *prep;
  double headroom;
  double tpot_eff, rcap, rho;
  bool ttft_bound;
} CostAggArg;

/* An aggregated instance whose engine runs prompt chunks inside decode
 * steps (m->chunk_tokens > 0), full at batch B (docs/cost-model.md,
 * "Aggregated instances"). Per dp rank and micro-batch, a step runs the
 * decode tokens tq and a chunk of prompt tokens, at most the budget left,
 * cmax = T - tq. In steady state every step finishes tq / T_out requests'
 * worth of output, so the prompts arriving per step are cs = tq S_n /
 * T_out tokens: the step runs c = min(cs, cmax), and the instance serves
 * R_cap = min(tq, c T_out / S_n) dp pp / (T_out t(B, c)) requests/s. */
typedef struct {
  int64_t cmax;    /* prompt tokens per dp rank and step: the budget less the decode tokens */
  int64_t chunk;   /* c: the chunk of a full instance's step */
  CostDecode step; /* t(B, c) */
  double rcap;     /* requests/s */
  double steps;    /* steps one prompt's new tokens take: ceil(S_n / cmax) */
  double latency;  /* s: those steps, each carrying min(S_n, cmax) of its tokens */
  CostDecode carry;/* a step carrying one prompt's chunk */
} CostMixed;

/* The tokens of one prompt a step runs: its new tokens, at most cmax. */
static int64_t cost__prompt_chunk(const CostModel *m, int64_t cmax) {
  return m->new_tokens < cmax ? m->new_tokens : cmax;
}

/* The dp ranks of an instance one copy of its experts joins: ep * etp
 * of its tp * dp GPUs hold one copy, tp of them per dp rank (1 for a
 * dense model, whose dp ranks share nothing). */
static int64_t cost__joined_ranks(const CostModel *m, const CostLayout *l) {
  if (!m->moe || l->tp < 1) return 1;
  int64_t j = l->ep * l->etp / l->tp;
  return j < 1 ? 1 : j > l->dp ? l->dp : j;
}

/* The dp ranks' prompt tokens in a mixed step that carries `mean` per
 * rank on average, with at most cmax on one rank (docs/cost-model.md,
 * "The busiest dp rank"). Where MoE layers join n dp ranks, every step
 * waits for the busiest of them, and the engine gives each prompt to one
 * rank, which runs it in chunks of k = min(S_n, cmax): a rank carries one
 * in a share q = mean / k of the steps, and the busiest of n ranks that
 * run independently carries k (1 - (1 - q)^n) on average. With n = 1
 * that is the mean. */
static CostChunk cost__rank_chunks(const CostModel *m, const CostLayout *l, int64_t cmax,
                                   int64_t mean) {
  CostChunk c = {mean, mean};
  int64_t k = cost__prompt_chunk(m, cmax);
  int64_t n = cost__joined_ranks(m, l);
  if (n <= 1 || mean <= 0 || k <= mean) return c;
  double q = (double)mean / (double)k;
  double slow = ceil((double)k * (1.0 - pow(1.0 - q, (double)n)));
  if (slow > (double)mean) c.slow = slow < (double)k ? (int64_t)slow : k;
  return c;
}

/* The step that carries a chunk of one given prompt, `one` tokens on its
 * rank, while the other dp ranks carry `mean` each on average: where MoE
 * layers join n ranks, their experts see the mean over those n. */
static CostChunk cost__carry_chunks(const CostModel *m, const CostLayout *l, int64_t one,
                                    int64_t mean) {
  CostChunk c = {one, one};
  int64_t n = cost__joined_ranks(m, l);
  if (n <= 1) return c;
  double all = (double)one + (double)(n - 1) * (double)mean;
  c.mean = (int64_t)ceil(all / (double)n);
  return c;
}

static bool cost__mixed(const CostModel *m, const CostDecodePrep *p, int64_t B, CostMixed *x) {
  memset(x, 0, sizeof *x);
  const CostLayout *l = &p->l;
  CkState st = {true};
  int64_t tq = ckm(&st, rp_cdiv64(rp_cdiv64(B < 1 ? 1 : B, l->pp), l->dp), 1 + m->draft);
  x->cmax = st.ok ? m->chunk_tokens - tq : 0;
  if (x->cmax < 1 || m->new_tokens < 1 || m->tout < 1) return false;
  double cs = ceil((double)tq * (double)m->new_tokens / (double)m->tout);
  x->chunk = cs < (double)x->cmax ? (int64_t)cs : x->cmax;
  int64_t one = cost__prompt_chunk(m, x->cmax);
  CostChunk full = cost__rank_chunks(m, l, x->cmax, x->chunk);
  CostChunk carry = cost__carry_chunks(m, l, one, x->chunk);
  if (!cost_step_ranks(m, p, B, full.slow, full.mean, &x->step) || !(x->step.step > 0) ||
      !cost_step_ranks(m, p, B, carry.slow, carry.mean, &x->carry))
    return false;
  double out_tok = fmin((double)tq, (double)x->chunk * (double)m->tout / (double)m->new_tokens);
  x->rcap = out_tok * (double)l->dp * (double)l->pp /
            ((double)m->tout * (double)(1 + m->draft) * x->step.tpot);
  x->steps = ceil((double)m->new_tokens / (double)x->cmax);
  x->latency = x->steps * x->carry.step;
  return true;
}

/* TPOT at batch B with `chunk` prompt tokens per dp rank on average in
 * each step, at most cmax on one rank. */
static double cost__mixed_tpot(const CostModel *m, const CostDecodePrep *p, int64_t B,
                               int64_t chunk, int64_t cmax) {
  CostDecode dc;
  CostChunk ch = cost__rank_chunks(m, &p->l, cmax, chunk < 0 ? 0 : chunk);
  if (!cost_step_ranks(m, p, B, ch.slow, ch.mean, &dc) || !(dc.tpot > 0))
    return (double)INFINITY;
  return dc.tpot;
}

/* The chunk a step carries at a share u of R_cap: the prompt tokens
 * arriving per step scale with the rate. */
static int64_t cost__chunk_at(const CostMixed *x, double u) {
  double c = ceil(u * (double)x->chunk);
  return c < 0.0 ? 0 : c > (double)x->chunk ? x->chunk : (int64_t)c;
}

/* The part of the TTFT SLO left to the queue once a request has paid its
 * time outside the GPU (request_overhead_s) and `latency`. */
static double cost__ttft_room(const CostModel *m, double latency) {
  return m->slo_ttft - m->k.request_overhead_s - latency;
}

/* Mixed steps at batch B: R_cap above; a prompt waits in an M/D/1 queue at
 * R_cap, then for its chunks (latency); at the planned rate R each step
 * carries the share R / R_cap of the full instance's chunk. */
static bool cost__agg_mixed_at(const CostModel *m, int64_t B, CostAggArg *a) {
  CostMixed x;
  if (!cost__mixed(m, a->prep, B, &x)) return false;
  a->rcap = x.rcap;
  double rt = cost_md1_max_rho(a->rcap, cost__ttft_room(m, x.latency));
  a->ttft_bound = rt < a->headroom;
  a->rho = a->ttft_bound ? rt : a->headroom;
  a->tpot_eff = cost__mixed_tpot(m, a->prep, B, cost__chunk_at(&x, a->rho), x.cmax);
  return a->rho > 0.0;
}

/* Decode steps of time tpot when a share up of the instance's time runs
 * prefills at rate mu (1 / the prefill's time): an alternating engine's
 * steps wait behind them, tpot / (1 - up); up >= 1 leaves none. */
static double cost__stretch(double tpot, double up) {
  if (up <= 0.0) return tpot;
  return up < 1.0 ? tpot / (1.0 - up) : (double)INFINITY;
}

/* The mean step of an instance at batch B that runs whole prompts beside
 * its decodes (docs/cost-model.md, "Whole prompts"), prompts arriving at
 * R a second: a step takes every prompt that arrived while the one before
 * it ran, so with lambda = R t arrivals per step of mean t a share
 * q = 1 - e^-lambda of the steps carry lambda / q prompts (at least one)
 * beside the decodes, at most what the token budget leaves (one prompt
 * whatever the budget), and t = (1 - q) t(B, 0) + q t(B, prompts): a
 * fixed point, reached in a few rounds (t(B, c) moves by a fraction of
 * itself with q). Every step advances every decode by a token, so t is the
 * TPOT. */
static double cost__whole_step(const CostModel *m, const CostDecodePrep *p, int64_t B, double R,
                               double t0, double start) {
  CkState st = {true};
  int64_t tq = ckm(&st, cost_sched_batch(B, p->l.pp, p->l.dp), 1 + m->draft), S = m->new_tokens;
  int64_t room = st.ok && m->whole_tokens - S > tq ? m->whole_tokens - tq : S;
  double t = start > t0 ? start : t0;
  if (!(R > 0.0) || S < 1) return t0;
  for (int i = 0; i < 16; i++) {
    double lam = R * t / (double)p->l.dp, q = 1.0 - exp(-lam);
    if (!(q > 0.0)) break;
    double k = fmax(1.0, lam / q), c = fmin(ceil(k * (double)S), (double)room);
    CostChunk ch = cost__carry_chunks(m, &p->l, (int64_t)c, 0);
    CostDecode s;
    if (!cost_step_ranks(m, p, B, ch.slow, ch.mean, &s) || !(s.tpot > 0)) break;
    double next = (1.0 - q) * t0 + q * s.tpot;
    bool done = fabs(next - t) <= 1e-6 * t;
    t = next;
    if (done) break;
  }
  return t;
}

/* R_cap of such an instance: the rate at which its B decodes, each T_out
 * steps of the mean step at that rate, finish as fast as prompts arrive,
 * R T_out t(R) = B (bisection: t grows with R). */
static double cost__whole_rcap(const CostModel *m, const CostDecodePrep *p, int64_t B, double t0) {
  double hi = (double)B / ((double)m->tout * t0), lo = 0.0, t = t0;
  for (int i = 0; i < 20; i++) { /* 2^-20 of the range: below print precision */
    double r = 0.5 * (lo + hi);
    t = cost__whole_step(m, p, B, r, t0, t); /* from the last round's step */
    if (r * (double)m->tout * t > (double)B) hi = r;
    else lo = r;
  }
  return lo;
}

static bool cost__agg_at(const CostModel *m, int64_t B, CostAggArg *a) {
  if (m->chunk_tokens > 0) return cost__agg_mixed_at(m, B, a);
  CostDecode dc;
  if (!cost_decode_at(m, a->prep, B, &dc)) return false;
  /* alternating: a request's cycle is its prefill and T_out / D of
   * decoding, D = B / TPOT(B) the instance's output tokens/s */
  if (m->whole_prompts) a->rcap = cost__whole_rcap(m, a->prep, B, dc.tpot);
  else a->rcap = 1.0 / (1.0 / a->pre->mu + (double)m->tout * dc.tpot / (double)B);
  if (!(a->rcap > 0.0)) return false;
  double rt = cost_md1_max_rho(a->rcap, cost__ttft_room(m, a->pre->latency));
  a->ttft_bound = rt < a->headroom;
  a->rho = a->ttft_bound ? rt : a->headroom;
  double up = a->rho * a->rcap / a->pre->mu;
  a->tpot_eff = m->whole_prompts ? cost__whole_step(m, a->prep, B, a->rho * a->rcap, dc.tpot, dc.tpot)
                                 : cost__stretch(dc.tpot, up);
  return a->rho > 0.0;
}

static double cost__excess_agg(const CostModel *m, int64_t B, void *arg) {
  CostAggArg *a = arg;
  if (!cost__agg_at(m, B, a)) return (double)INFINITY;
  return cost__excess(a->tpot_eff, m->slo_tpot);
}

/* Requests/s a decode or both instance serves at batch B: B / TPOT / T_out
 * for decode, rho R_cap for both. */
static double cost__batch_rate(const CostModel *m, CostInstance *o, const CostDecodePrep *prep,
                               int64_t B, double rho) {
  if (o->role == ROLE_DECODE) {
    CostDecode dc;
    if (!cost_decode_at(m, prep, B, &dc) || !(dc.tpot > 0)) return 0.0;
    return (double)B / dc.tpot / (double)m->tout;
  }
  CostAggArg a = {&o->pre, prep, rho, 0, 0, 0, false};
  return cost__agg_at(m, B, &a) ? a.rho * a.rcap : 0.0;
}

/* The largest instance batch whose every scheduler's decode batch the
 * engine's CUDA graphs cover, 0 when no limit is known (or none an int64
 * holds, which no batch reaches). */
static int64_t cost__graph_batch(const CostDecodePrep *p) {
  if (p->graph_bs <= 0) return 0;
  CkState st = {true};
  int64_t g = ckm(&st, ckm(&st, p->graph_bs, p->l.dp), p->l.pp);
  return st.ok ? g : 0;
}

static int64_t cost__batch_slo(const CostModel *m, CostInstance *o, const CostDecodePrep *prep,
                               int64_t hi, double rho, int64_t guess) {
  if (o->role == ROLE_DECODE) {
    int64_t pp = o->lay.pp, hb = (hi + pp - 1) / pp;
    CostDecArg da = {prep, hi};
    int64_t bb = cost__largest(m, hb, cost__excess_decode_mb, &da, guess);
    return bb * pp < hi ? bb * pp : hi;
  }
  CostAggArg a = {&o->pre, prep, rho, 0, 0, 0, false};
  return cost__largest(m, hi, cost__excess_agg, &a, guess);
}

/* B for a decode or both instance: the largest batch meeting the SLO
 * within hi, 0 when batch 1 misses it; but the largest batch the CUDA
 * graphs cover when the eager steps beyond it serve no more. */
static int64_t cost__batch(const CostModel *m, CostInstance *o, const CostDecodePrep *prep,
                           int64_t hi, double rho, int64_t guess) {
  int64_t B = cost__batch_slo(m, o, prep, hi, rho, guess);
  int64_t g = cost__graph_batch(prep);
  if (g > 0 && B > g &&
      cost__batch_rate(m, o, prep, g, rho) >= cost__batch_rate(m, o, prep, B, rho))
    return g;
  return B;
}

/* A mixed aggregated instance's prefill figures while it decodes b
 * requests: one prompt takes `steps` steps, each carrying one chunk of it
 * (their parts, decode tokens included); the input tokens/s are what the
 * steps carry at a full chunk; mu is R_cap at b, so the prefill share u_p
 * of a load R is its utilisation R / R_cap. */
static bool cost__mixed_prefill(const CostModel *m, const CostDecodePrep *p, int64_t b,
                                CostPrefill *pre) {
  CostMixed x;
  CostDecode full;
  if (!cost__mixed(m, p, b, &x) || !cost_step_at(m, p, b, x.cmax, &full) || !(full.step > 0))
    return false;
  pre->latency = x.latency;
  pre->stage = x.carry.step;
  pre->mu = x.rcap;
  /* input tokens/s per GPU: the prompt tokens the steps carry at a full
   * chunk (every prompt token counts, cached ones included) */
  double per_step = (double)x.cmax * (double)p->l.dp * (double)p->l.pp;
  pre->tok_s_gpu = per_step * (double)m->tin / (double)m->new_tokens / full.step /
                   (double)cost_layout_gpus(&p->l);
  pre->compute = x.steps * x.carry.compute;
  pre->memory = x.steps * x.carry.memory;
  pre->comm_tp = x.steps * x.carry.comm_tp;
  pre->comm_cp = 0.0;
  pre->comm_ep = x.steps * x.carry.comm_ep;
  pre->comm_pp = x.steps * x.carry.comm_pp;
  pre->overhead = x.steps * x.carry.overhead;
  return true;
}

/* The prefill figures of instance `in` while it decodes b requests: its
 * own, or a mixed aggregated instance's at b (docs/cost-model.md,
 * "Mixed"). */
static CostPrefill cost__prefill_at(const CostModel *m, const CostInstance *in, int64_t b) {
  CostPrefill pre = in->pre;
  if (in->role != ROLE_BOTH || m->chunk_tokens <= 0) return pre;
  CostDecodePrep p;
  if (!cost_decode_prep(m, &in->lay, cost_decode_ctx(m), &p) || !cost__mixed_prefill(m, &p, b, &pre))
    return in->pre;
  return pre;
}

bool cost_instance_eval(const CostModel *m, PoolRole role, const CostLayout *l, int64_t bmem,
                        double rho, int64_t *guess, CostInstance *out) {
  memset(out, 0, sizeof *out);
  out->role = role;
  out->lay = *l;
  if (role != ROLE_DECODE && (!cost_prefill(m, l, &out->pre) || !(out->pre.mu > 0))) return false;
  if (role == ROLE_PREFILL) return true;
  CostDecodePrep prep;
  if (bmem < 1 || !cost_decode_prep(m, l, cost_decode_ctx(m), &prep)) return false;
  out->bmem = bmem;
  out->cap = l->dp * l->pp * (int64_t)m->k.max_batch_per_dp;
  if (m->run_seqs > 0) {
    /* The engine runs at most run_seqs sequences (per dp rank for vLLM's
     * engine cores and TensorRT-LLM's attention-dp ranks). */
    int64_t run = m->limits_per_dp ? l->dp * m->run_seqs : m->run_seqs;
    if (run < out->cap) out->cap = run;
  }
  if (role == ROLE_BOTH && m->chunk_tokens > 0) {
    /* Decode tokens leave at least one token of the budget to the prompts. */
    int64_t per = (m->chunk_tokens - 1) / (1 + m->draft);
    if (per < 1) return false;
    if (per < (int64_t)m->k.max_batch_per_dp) out->cap = l->dp * l->pp * per;
  }
  out->graphs = cost__graph_batch(&prep);
  int64_t B = cost__batch(m, out, &prep, bmem < out->cap ? bmem : out->cap, rho,
                          guess ? *guess : 0);
  /* The decode search's guess is in micro-batches, the aggregated one's
   * in requests: each role passes back what it searched over. */
  if (guess) *guess = role == ROLE_DECODE ? (B + l->pp - 1) / l->pp : B;
  out->slo_ok = B >= 1;
  out->batch = B >= 1 ? B : 1;
  CostDecode dc;
  if (!cost_decode_at(m, &prep, out->batch, &dc) || !(dc.tpot > 0)) return false;
  out->tpot = dc.tpot;
  out->dec_tok_s = (double)out->batch / dc.tpot;
  if (role == ROLE_BOTH && m->chunk_tokens > 0 && !cost__mixed_prefill(m, &prep, out->batch, &out->pre))
    return false;
  if (role == ROLE_BOTH) {
    CostAggArg a = {&out->pre, &prep, rho, 0, 0, 0, false};
    cost__agg_at(m, out->batch, &a);
    out->tpot = a.tpot_eff;
    out->rcap = a.rcap;
    out->rho = a.rho;
    out->ttft_bound = a.ttft_bound;
  }
  return true;
}

void cost_deploy_rates(const CostModel *m, const CostDeploy *dp, CostRates *out) {
  memset(out, 0, sizeof *out);
  const CostInstance *a = dp->inst[0];
  if (dp->npools == 1) {
    out->r[0] = a->rho * a->rcap;
    out->ttft_bound = a->ttft_bound;
    return;
  }
  const CostInstance *d = dp->inst[1];
  out->kv_transfer = cost_kv_transfer(m, &a->lay, &d->lay);
  double rt = cost_md1_max_rho(a->pre.mu, cost__ttft_room(m, a->pre.latency + out->kv_transfer));
  out->ttft_bound = rt < dp->rho;
  out->r[0] = fmin(dp->rho, rt) * a->pre.mu;
  out->r[1] = dp->rho * d->dec_tok_s / (double)m->tout;
}

/* What the TPOT of instance `in` at any batch shares: the decode prep
 * and, when the engine mixes prompt chunks into decode steps, the step at
 * the instance's full batch (whose chunk sets the share up's). */
typedef struct {
  CostDecodePrep p;
  bool mixed;
  CostMixed full;
  double mu;      /* the instance's prefill rate (cost__stretch) */
} CostTpotCtx;

static bool cost__tpot_ctx(const CostModel *m, const CostInstance *in, CostTpotCtx *t) {
  if (!cost_decode_prep(m, &in->lay, cost_decode_ctx(m), &t->p)) return false;
  t->mixed = in->role == ROLE_BOTH && m->chunk_tokens > 0;
  t->mu = in->pre.mu;
  return !t->mixed || cost__mixed(m, &t->p, in->batch, &t->full);
}

/* TPOT at batch B below the full batch with prefill share up of R_cap:
 * the prompt tokens arriving per step are the rate's, R S_n t(B, c) / (dp
 * pp), and R = up R_cap, so each step carries the full step's chunk scaled
 * by up and by its own TPOT over the full step's, c = up c_full t(B, c) /
 * t_full (docs/cost-model.md, "Aggregated instances"): a fixed point,
 * reached from c = up c_full (t(B, c) <= t_full) in a few rounds, as c
 * moves t by a fraction of itself. */
static double cost__mixed_below(const CostModel *m, const CostTpotCtx *t, int64_t B, double up,
                                int64_t cmax) {
  int64_t c = cost__chunk_at(&t->full, up);
  double tpot = (double)INFINITY;
  for (int i = 0; i < 4; i++) {
    tpot = cost__mixed_tpot(m, &t->p, B, c < cmax ? c : cmax, cmax);
    if (!isfinite(tpot) || !(t->full.step.tpot > 0)) return tpot;
    double next = ceil(up * (double)t->full.chunk * fmin(tpot / t->full.step.tpot, 1.0));
    if ((int64_t)next == c) break;
    c = (int64_t)next;
  }
  return tpot;
}

/* TPOT at batch B with prefill share up: a decode step stretched by
 * 1 / (1 - up) when the engine alternates, the step carrying the share up
 * of the full chunk at the instance's batch when it mixes. */
static bool cost__tpot_at(const CostModel *m, const CostTpotCtx *t, int64_t B, double up,
                          double *tpot) {
  if (t->mixed) {
    CostMixed at;
    if (!cost__mixed(m, &t->p, B, &at)) return false;
    *tpot = cost__mixed_below(m, t, B, up, at.cmax);
    return isfinite(*tpot);
  }
  CostDecode dc;
  if (!cost_decode_at(m, &t->p, B, &dc)) return false;
  *tpot = m->whole_prompts ? cost__whole_step(m, &t->p, B, up * t->mu, dc.tpot, dc.tpot)
                           : cost__stretch(dc.tpot, up);
  return true;
}

/* Little's law: one decode instance serving `per` req/s holds per * T_out
 * * TPOT requests; below B the step is shorter (one step of the fixed
 * point: at that shorter step fewer still are in flight, so the figure
 * errs towards the slower TPOT). up: the aggregated prefill share u_p, by
 * which decode steps stretch (0 for a decode pool).
 * cap: the most requests one instance can hold (a closed loop's requests
 * in flight per instance; INFINITY for an open loop). */
static void cost__little(const CostModel *m, const CostInstance *in, double per, double up,
                         double cap, CostDeployEval *out) {
  double tpot;
  CostTpotCtx t;
  out->batch = in->batch;
  out->tpot = (double)INFINITY;
  if (!cost__tpot_ctx(m, in, &t) || !cost__tpot_at(m, &t, in->batch, up, &tpot)) return;
  out->tpot = tpot;
  double x = fmax(fmin(per * (double)m->tout * out->tpot, cap), 1.0);
  double bl = ceil(x);
  if (bl >= (double)in->batch || !cost__tpot_at(m, &t, (int64_t)bl, up, &tpot)) return;
  out->batch = (int64_t)bl;
  out->tpot = tpot;
  /* A mean of x requests in flight runs steps of floor(x) and ceil(x)
   * requests in the proportions that give that mean: the TPOT between
   * theirs, so that it moves with the load without steps. */
  double lo_b = floor(x), frac = x - lo_b, lo_tpot;
  if (frac > 0 && lo_b >= 1.0 && cost__tpot_at(m, &t, (int64_t)lo_b, up, &lo_tpot))
    out->tpot = lo_tpot + frac * (tpot - lo_tpot);
}

static void cost__finish(const CostModel *m, const CostDeploy *dp, CostDeployEval *out) {
  CkState st = {true};
  int64_t g = 0;
  for (size_t i = 0; i < dp->npools; i++)
    g = cka(&st, g, ckm(&st, dp->replicas[i], cost_layout_gpus(&dp->inst[i]->lay)));
  out->gpus = st.ok ? g : INT64_MAX;
  out->tok_s = out->served * (double)m->tout;
  out->feasible = out->served > 0 && out->ttft <= m->slo_ttft * (1 + 1e-9) &&
                  out->tpot <= m->slo_tpot * (1 + 1e-9);
  out->goodput_gpu = out->feasible ? out->tok_s / (double)out->gpus : 0.0;
}

/* The deployment at an offered open-loop load (req/s; 0: the most it
 * serves). */
static void cost__eval_at(const CostModel *m, const CostDeploy *dp, double offered,
                          CostDeployEval *out) {
  memset(out, 0, sizeof *out);
  cost_deploy_rates(m, dp, &out->rates);
  const CostInstance *a = dp->inst[0], *d = dp->inst[dp->npools - 1];
  double x = (double)dp->replicas[0], y = (double)dp->replicas[dp->npools - 1];
  double served = x * out->rates.r[0];
  if (dp->npools == 2) {
    out->prefill_limited = x * out->rates.r[0] <= y * out->rates.r[1];
    served = fmin(served, y * out->rates.r[1]);
  }
  if (offered > 0 && offered <= served) {
    served = offered;
    out->load_served = true;
  }
  out->served = served;
  double mu = dp->npools == 2 ? a->pre.mu : a->rcap;
  out->util = served / (x * mu);
  out->queue = cost_md1_wait(out->util, mu);
  /* Aggregated: decode steps wait while the instance prefills, a share
   * u_p = (served / x) / mu_p of its time. */
  double up = dp->npools == 2 ? 0.0 : served / x / a->pre.mu;
  double cap = m->concurrency > 0 ? ceil(m->concurrency / y) : (double)INFINITY;
  cost__little(m, d, served / y, up, cap, out);
  out->prefill = cost__prefill_at(m, a, out->batch).latency;
  out->ttft = out->queue + out->prefill + out->rates.kv_transfer + m->k.request_overhead_s;
  cost__finish(m, dp, out);
}

/* Requests one request cycle holds by Little's law at the evaluated
 * load: served * (TTFT + T_out * TPOT). */
static double cost__in_flight(const CostModel *m, const CostDeployEval *e) {
  return e->served * (e->ttft + (double)m->tout * e->tpot);
}

/* Closed loop at N = m->concurrency requests in flight (docs/cost-model.md,
 * "Closed loop"): the served rate R solves R * (TTFT(R) + T_out TPOT(R))
 * = N, found by bisection on [0, the most the pools serve] (the left side
 * grows with R). When even the most leaves requests over, the pools run at
 * their most and the rest wait: TTFT = N / R - T_out TPOT. */
static void cost__closed_loop(const CostModel *m, const CostDeploy *dp, CostDeployEval *out) {
  double n = m->concurrency;
  cost__eval_at(m, dp, 0.0, out);
  if (!(out->served > 0) || !isfinite(out->tpot)) return;
  if (cost__in_flight(m, out) <= n) {
    out->ttft = fmax(out->ttft, n / out->served - (double)m->tout * out->tpot);
    out->queue = out->ttft - out->prefill - out->rates.kv_transfer - m->k.request_overhead_s;
    cost__finish(m, dp, out);
    return;
  }
  double lo = 0.0, hi = out->served;
  for (int i = 0; i < 48; i++) { /* 2^-48 of the range: far below print precision */
    double mid = 0.5 * (lo + hi);
    cost__eval_at(m, dp, mid, out);
    if (cost__in_flight(m, out) <= n) lo = mid;
    else hi = mid;
  }
  cost__eval_at(m, dp, lo > 0 ? lo : hi, out);
}

/* A closed-loop run of P = m->requests requests (docs/cost-model.md, "A
 * finite run"): N = min(concurrency, P) are in flight until the last one
 * is sent; then their remaining times are spread evenly over one request
 * latency L (k L / N, k = 1..N), so the run lasts (P + (N - 1) / 2) L / N
 * where a steady loop serves P in P L / N. The served rate over the run is
 * R * P / (P + (N - 1) / 2); TTFT, TPOT and the batch stay the steady
 * loop's. */
double cost_finite_run_share(double concurrency, double requests) {
  if (!(concurrency > 0) || !(requests > 0)) return 1.0;
  double n = fmin(concurrency, requests);
  return requests / (requests + 0.5 * (n - 1.0));
}

double cost_mean_passes(double n, double k) {
  double q = floor(n / k), r = n - q * k;
  return (k * q * (q + 1.0) / 2.0 + r * (q + 1.0)) / n;
}

/* The start of a closed-loop run of P = m->requests requests
 * (docs/cost-model.md, "A finite run"): its first N = min(concurrency, P)
 * are sent at once, N / (x dp) to each dp rank of the x prefilling
 * instances, which prefill them in passes of k = budget / prompt tokens
 * of them (at most all; one with pp > 1 or no known budget); the prompts
 * of the j-th pass get their first token after j passes. That replaces
 * the steady queue and prefill for those N requests, and the run's mean
 * TTFT weighs them with the P - N steady ones. */
static void cost__burst_start(const CostModel *m, const CostDeploy *dp, CostDeployEval *out) {
  double p = m->requests, n = fmin(m->concurrency, p);
  const CostInstance *a = dp->inst[0];
  const CostLayout *l = &a->lay;
  double nd = n / (double)dp->replicas[0] / (double)l->dp;
  if (!(p > 0) || !(nd > 1)) return;
  double k = 1.0;
  /* the budget of one dp rank: the instance's over its dp ranks where the
   * engine shares it out (engine_limits_per_dp) */
  int64_t budget = m->limits_per_dp ? m->prefill_tokens : m->prefill_tokens / l->dp;
  if (l->pp == 1 && budget > 0)
    k = fmin(ceil(nd), fmax(1.0, floor((double)budget / (double)m->new_tokens)));
  double pass = l->pp == 1 ? cost__pass_time(m, l, &a->pre, k) : a->pre.latency;
  double burst = out->ttft - out->queue - out->prefill + pass * cost_mean_passes(nd, k);
  if (!isfinite(burst)) return;
  out->ttft = (n * burst + (p - n) * out->ttft) / p;
  out->queue = out->ttft - out->prefill - out->rates.kv_transfer - m->k.request_overhead_s;
}

bool cost_deploy_eval(const CostModel *m, const CostDeploy *dp, CostDeployEval *out) {
  memset(out, 0, sizeof *out);
  if (dp->npools < 1 || dp->npools > 2 || dp->replicas[0] < 1 ||
      (dp->npools == 2 && dp->replicas[1] < 1))
    return false;
  if (m->concurrency > 0) {
    cost__closed_loop(m, dp, out);
    out->served *= cost_finite_run_share(m->concurrency, m->requests);
    cost__burst_start(m, dp, out);
    cost__finish(m, dp, out);
  } else {
    cost__eval_at(m, dp, m->rate, out);
  }
  return true;
}

/* ---- per-phase figures ------------------------------------------------------ */

/* One phase's figures: its time, tokens/s per GPU and parts (s). */
static void cost__phase(CostPhase *p, double time, double tok_s_gpu, double compute, double hbm,
                        double overhead, const double comm[COST_COMM__N]) {
  p->time = time;
  p->tok_s_gpu = tok_s_gpu;
  p->compute = compute;
  p->hbm = hbm;
  p->overhead = overhead;
  memcpy(p->comm, comm, sizeof p->comm);
}

bool cost_pool_phases(const CostModel *m, const CostInstance *in, const CostDeployEval *ev,
                      CostPoolPhases *out) {
  memset(out, 0, sizeof *out);
  double gpus = (double)cost_layout_gpus(&in->lay);
  if (!(gpus > 0)) return false;
  if (in->role != ROLE_DECODE) {
    CostPrefill pre = cost__prefill_at(m, in, ev->batch > 0 ? ev->batch : in->batch);
    double comm[COST_COMM__N] = {0};
    comm[COST_COMM_TP] = pre.comm_tp;
    comm[COST_COMM_CP] = pre.comm_cp;
    comm[COST_COMM_EP] = pre.comm_ep;
    comm[COST_COMM_PP] = pre.comm_pp;
    out->has_prefill = true;
    cost__phase(&out->prefill, pre.latency, pre.tok_s_gpu, pre.compute, pre.memory, pre.overhead,
                comm);
  }
  if (in->role == ROLE_PREFILL) return true;
  CostDecode dc;
  out->max_batch = in->batch;
  out->batch_used = ev->batch > 0 ? ev->batch : in->batch;
  if (!cost_decode_step(m, &in->lay, out->batch_used, cost_decode_ctx(m), &dc)) return false;
  double comm[COST_COMM__N] = {0};
  comm[COST_COMM_TP] = dc.comm_tp;
  comm[COST_COMM_EP] = dc.comm_ep;
  comm[COST_COMM_PP] = dc.comm_pp;
  out->has_decode = true;
  cost__phase(&out->decode, dc.step, (double)out->batch_used / dc.tpot / gpus, dc.compute,
              dc.memory, dc.overhead, comm);
  return true;
}

/* ---- queueing ------------------------------------------------------------- */

double cost_md1_wait(double rho, double mu) {
  if (rho <= 0.0) return 0.0;
  if (rho >= 1.0 || mu <= 0.0) return (double)INFINITY;
  return rho / (2.0 * mu * (1.0 - rho));
}

double cost_md1_max_rho(double mu, double w) {
  if (w <= 0.0 || mu <= 0.0) return 0.0;
  double x = 2.0 * mu * w;
  return x / (1.0 + x);
}

/* ---- published formulas --------------------------------------------------- */

bool cost_xpyd_ratio(double tin, double tout, double P, double D, int64_t maxden,
                     int64_t *x, int64_t *y) {
  if (!(tin > 0 && tout > 0 && P > 0 && D > 0) || maxden < 1) return false;
  double r = (tin / P) / (tout / D); /* x / y */
  /* Continued fraction of r; stop when the next convergent exceeds maxden
   * in either term or matches r to 1e-9. */
  int64_t h0 = 0, h1 = 1, k0 = 1, k1 = 0; /* h/k convergents */
  double v = r;
  for (int i = 0; i < 64; i++) {
    double a = floor(v);
    if (a > (double)INT32_MAX) break;
    int64_t ai = (int64_t)a;
    int64_t h2 = ai * h1 + h0, k2 = ai * k1 + k0;
    if (h2 > maxden || k2 > maxden) break;
    h0 = h1; h1 = h2; k0 = k1; k1 = k2;
    if (fabs((double)h1 / (double)k1 - r) <= 1e-9 * r) break;
    double frac = v - a;
    if (frac < 1e-12) break;
    v = 1.0 / frac;
  }
  if (h1 < 1 || k1 < 1) {
    /* r is below 1/maxden or above maxden: clamp to the extreme ratio. */
    if (r < 1.0) { h1 = 1; k1 = maxden; }
    else { h1 = maxden; k1 = 1; }
  }
  *x = h1;
  *y = k1;
  return true;
}

double cost_attn_tp_opt(double w_mla, double gpus, double kv_total) {
  if (!(w_mla > 0 && gpus > 0 && kv_total > 0)) return 1.0;
  return sqrt(w_mla * gpus / kv_total);
}

bool cost_pp_rebalance(int64_t layers, int64_t p, double beta, int64_t *out) {
  if (p < 1 || layers < p || !(beta > 0.0)) return false;
  if (p == 1) {
    out[0] = layers;
    return true;
  }
  int64_t n = llround((double)layers / ((double)(p - 1) + beta));
  while (n > 1 && layers - (p - 1) * n < 1) n--;
  int64_t tail = layers - (p - 1) * n;
  if (n < 1 || tail < 1) return false;
  for (int64_t i = 0; i + 1 < p; i++) out[i] = n;
  out[p - 1] = tail;
  return true;
}

int64_t cost_cp_chunk_units(int64_t n, int64_t rank, bool zigzag) {
  if (n < 1 || rank < 0 || rank >= n) return 0;
  if (zigzag) return (rank + 1) + (2 * n - rank); /* chunks r and 2n-1-r */
  return (2 * rank + 1) + (2 * rank + 2);         /* chunks 2r and 2r+1 */
}

double cost_cp_imbalance(int64_t n, bool zigzag) {
  if (n <= 1) return 1.0;
  int64_t mx = 0, sum = 0;
  for (int64_t r = 0; r < n; r++) {
    int64_t u = cost_cp_chunk_units(n, r, zigzag);
    sum += u;
    if (u > mx) mx = u;
  }
  return (double)mx * (double)n / (double)sum;
}

double cost_experts_touched(int64_t experts, int64_t top_k, int64_t local, int64_t tokens) {
  if (experts <= 0 || local <= 0 || tokens <= 0) return 0.0;
  double p = 1.0 - (double)top_k / (double)experts;
  if (p < 0.0) p = 0.0;
  return (double)local * (1.0 - pow(p, (double)tokens));
}
