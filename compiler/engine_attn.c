/*
 * engine_attn.c: the attention backend an engine picks for a model and a
 * GPU where it constrains the KV block or the KV dtype (engines.h,
 * EngineAttn; docs/engines.md, "Attention backends").
 *
 * Input: a parsed Spec. Output: the backend's constraints, the block the
 * plan counts, E0715 / W0704 for a stated block or dtype the engine would
 * change, refuse or run on a slower backend, and E0717 for an SGLang
 * chunked-prefill size its page does not divide. Each rule below names
 * the engine source it was read from; a model, GPU or release not covered
 * gets no constraint and the spec's block, else the engine's default.
 */
#include <stdio.h>
#include <string.h>

#include "engines.h"
#include "memory.h"
#include "model.h"

/* SGLang from 0.5.4, when is_sm100_supported() (compute capability major
 * 10) and no backend is named (server_args.py of the 0.5.4 and 0.5.6
 * wheels, _handle_model_specific_adjustments; at 001067f
 * arg_groups/overrides.py): DeepseekV3ForCausalLM runs trtllm_mla, which
 * "only supports page_size of 32 or 64", changing another (an unset one
 * included) to 64, and raises for a kv_cache_dtype other than fp8_e4m3 and
 * auto; GptOssForCausalLM runs trtllm_mha, "only supports page_size of 16,
 * 32 or 64", another (an unset one included) becoming 64
 * (_handle_attention_backend_compatibility). 0.4.7 and 0.4.10.post2 pick
 * flashinfer there (model_runner.py), which takes any page. */
static void attn_sglang(const Spec *s, EngineAttn *o) {
  const SStr *v = &s->deployment.engine_version, *a = &s->model.architecture;
  if (v->set && v->v && strchr(v->v, '.') && engine_version_cmp(v->v, "0.5.4") < 0) return;
  if (!a->set || !engine_gpu_is_sm100(&s->hardware)) return;
  if (strcmp(a->v, "DeepseekV3ForCausalLM") == 0)
    *o = (EngineAttn){.backend = "trtllm_mla", .page = 64, .only = {32, 64}, .changes = true, .pinned = true,
                      .why = "SGLang runs DeepseekV3ForCausalLM models on compute capability 10 GPUs with its "
                             "trtllm_mla attention backend"};
  else if (strcmp(a->v, "GptOssForCausalLM") == 0)
    *o = (EngineAttn){.backend = "trtllm_mha", .page = 64, .only = {16, 32, 64}, .changes = true, .pinned = true,
                      .why = "SGLang runs GptOssForCausalLM models on compute capability 10 GPUs with its "
                             "trtllm_mha attention backend"};
}

/* vLLM 0.11.x, MLA models, VLLM_ATTENTION_BACKEND unset
 * (vllm/platforms/cuda.py, CudaPlatform.check_and_update_config): on
 * compute capability exactly 10.0 CUTLASS MLA, "Forcing kv cache block
 * size to 128"; on Hopper, where the wheel's FlashMLA runs, "Forcing kv
 * cache block size to 64 for FlashMLA backend". 0.11.0 forces any other
 * size; 0.11.1 and 0.11.2 keep a multiple. Elsewhere (the B300's 10.3
 * included) nothing is forced. */
static void attn_vllm011(const Spec *s, EngineAttn *o) {
  const SStr *v = &s->deployment.engine_version;
  bool exact = !v->set || !v->v || engine_version_cmp(v->v, "0.11.1") < 0;
  int64_t page = 0;
  if (engine_gpu_is_sm100_0(&s->hardware)) page = 128;
  else if (engine_gpu_is_hopper(&s->hardware)) page = 64;
  if (!page) return;
  *o = (EngineAttn){.backend = page == 128 ? "CUTLASS_MLA" : "FLASHMLA", .page = page, .unit = page,
                    .only = {exact ? page : 0, 0}, .changes = true,
                    .why = page == 128 ? "vLLM 0.11 runs MLA models on compute capability 10.0 GPUs with CUTLASS MLA"
                                       : "vLLM 0.11 runs MLA models on Hopper GPUs with FlashMLA"};
}

/* What vLLM raises when no attention backend it would run takes the
 * block: 0.19's selector (vllm/platforms/cuda.py and rocm.py,
 * get_attn_backend_cls), 0.11.0's FLASH_ATTN and TRITON_ATTN at the KV
 * cache's shape (vllm/v1/attention/backends/flash_attn.py and
 * triton_attn.py, get_kv_cache_shape), and 0.11.1's model runner when no
 * kernel block size of the backend divides the block
 * (vllm/v1/worker/gpu_model_runner.py, "No common block size for N."). */
#define VLLM019_REFUSAL "No valid attention backend found for ..."
#define VLLM011_REFUSAL "Block size must be a multiple of 16."
#define VLLM0111_REFUSAL "No common block size for ..."

/* vLLM 0.19.x, MLA models (vllm/platforms/cuda.py, _get_backend_priorities
 * and get_attn_backend_cls; vllm/v1/attention/backends/mla/): the first
 * valid backend of the priority list; a --block-size the backend's kernel
 * sizes do not divide rules it out ("--block-size N precluded
 * higher-priority backend(s) ... may result in reduced performance"), and
 * without one vLLM sets the backend's smallest size
 * (update_block_size_for_backend). Compute capability 10: FLASHINFER_MLA
 * (blocks 32 or 64, qk_nope_head_dim 64, 128 or 192), else CUTLASS_MLA
 * (128). Hopper: FLASH_ATTN_MLA (multiples of 16, capability 9 only; no
 * fp8 KV), else with an fp8 KV cache FLASHMLA (64). What they rule out
 * runs on TRITON_MLA (multiples of 16), as every MLA model does on the
 * other NVIDIA GPUs and, AITER being off unless VLLM_ROCM_USE_AITER is
 * set (vllm/envs.py), on AMD ones (platforms/rocm.py). No MLA backend
 * takes a block that is not a multiple of 16. */
static void attn_vllm019(const Spec *s, EngineAttn *o) {
  int64_t nope = s->model.attention.qk_nope_head_dim.v;
  bool fp8 = s->model.dtype.kv_cache.v == DT_FP8, hopper = engine_gpu_is_hopper(&s->hardware);
  if (engine_gpu_is_sm100(&s->hardware)) {
    bool fi = nope == 64 || nope == 128 || nope == 192;
    *o = (EngineAttn){.backend = fi ? "FLASHINFER_MLA" : "CUTLASS_MLA", .page = fi ? 32 : 128, .unit = fi ? 32 : 128,
                      .why = fi ? "vLLM 0.19 runs MLA models on compute capability 10 GPUs with FlashInfer MLA"
                                : "vLLM 0.19 runs this MLA model on compute capability 10 GPUs with CUTLASS MLA"};
  } else if (hopper && fp8) {
    *o = (EngineAttn){.backend = "FLASHMLA", .page = 64, .unit = 64,
                      .why = "vLLM 0.19 runs MLA models with an fp8 KV cache on Hopper GPUs with FlashMLA"};
  } else {
    *o = (EngineAttn){.backend = hopper ? "FLASH_ATTN_MLA" : "TRITON_MLA", .page = 16, .unit = 16,
                      .why = hopper ? "vLLM 0.19 runs MLA models on Hopper GPUs with FLASH_ATTN_MLA"
                                    : "vLLM 0.19 runs MLA models on this GPU with TRITON_MLA"};
  }
  if (o->unit > 16) o->fallback = "TRITON_MLA";
  o->fallback_unit = 16;
  o->refusal = VLLM019_REFUSAL;
}

/* gpt-oss's attention has sinks (GptOssForCausalLM), which vLLM's
 * FLEX_ATTENTION does not take and 0.11 runs with TRITON_ATTN off Hopper. */
static bool attn_sinks(const Spec *s) {
  const SStr *a = &s->model.architecture;
  return a->set && a->v && strcmp(a->v, "GptOssForCausalLM") == 0;
}

/* vLLM 0.19.x, other attention: on NVIDIA GPUs FLASH_ATTN first, FLASHINFER
 * on compute capability 10 (_get_backend_priorities), both, like
 * TRITON_ATTN after them, taking multiples of 16; a block they do not
 * take leaves FLEX_ATTENTION (flex_attention.py: any block, no fp8 KV
 * cache, no attention sinks, which gpt-oss has). On AMD GPUs ROCM_ATTN
 * first and every other backend (rocm.py) takes multiples of 16 too. */
static void attn_vllm019_mha(const Spec *s, EngineAttn *o) {
  const HardwareSpec *h = &s->hardware;
  bool sinks = attn_sinks(s), amd = engine_gpu_is_amd(h), sm100 = engine_gpu_is_sm100(h);
  *o = (EngineAttn){.backend = amd ? "ROCM_ATTN" : sm100 ? "FLASHINFER" : "FLASH_ATTN", .page = 16, .unit = 16,
                    .refusal = VLLM019_REFUSAL,
                    .why = amd     ? "vLLM 0.19 runs attention on AMD GPUs with ROCM_ATTN"
                           : sm100 ? "vLLM 0.19 runs attention on compute capability 10 GPUs with FlashInfer"
                                   : "vLLM 0.19 runs attention on this GPU with FLASH_ATTN"};
  if (!amd && !sinks && s->model.dtype.kv_cache.v != DT_FP8) o->fallback = "FLEX_ATTENTION";
}

/* vLLM 0.11.x, other attention. 0.11.0 (platforms/cuda.py and rocm.py,
 * get_attn_backend_cls): FlashInfer on compute capability exactly 10.0,
 * which shapes any block (no rule here); on the other NVIDIA GPUs, the
 * B300's 10.3 included, FLASH_ATTN, or TRITON_ATTN for attention sinks or
 * an fp8 KV cache off Hopper; on AMD GPUs, AITER being off unless
 * VLLM_ROCM_USE_AITER is set, TRITON_ATTN. FLASH_ATTN and TRITON_ATTN
 * raise for a block that is not a multiple of 16 when they shape the
 * cache. 0.11.1 and 0.11.2 (_get_backend_priorities): FlashInfer first on
 * compute capability 10, else FLASH_ATTN, FlashInfer for an fp8 KV cache
 * off Hopper (FLASH_ATTN's fp8 needs Hopper), TRITON_ATTN for sinks there;
 * AMD as 0.11.0. Their kernel block sizes ([16, 32, 64] or multiples of
 * 16) must divide the block, else the model runner raises
 * (gpu_model_runner.py, select_common_block_size). */
static void attn_vllm011_mha(const Spec *s, EngineAttn *o) {
  const HardwareSpec *h = &s->hardware;
  const SStr *v = &s->deployment.engine_version;
  bool later = v->set && v->v && engine_version_cmp(v->v, "0.11.1") >= 0;
  if (!later && engine_gpu_is_sm100_0(h)) return;
  bool sinks = attn_sinks(s), odd = (sinks || s->model.dtype.kv_cache.v == DT_FP8) && !engine_gpu_is_hopper(h);
  const char *b = "FLASH_ATTN", *why = "vLLM 0.11 runs attention on this GPU with FLASH_ATTN";
  if (engine_gpu_is_amd(h)) b = "TRITON_ATTN", why = "vLLM 0.11 runs attention on AMD GPUs with TRITON_ATTN";
  else if (later && engine_gpu_is_sm100(h))
    b = "FLASHINFER", why = "vLLM 0.11.1 and later run attention on compute capability 10 GPUs with FlashInfer";
  else if (odd && later && !sinks)
    b = "FLASHINFER", why = "vLLM 0.11.1 and later run an fp8 KV cache on this GPU with FlashInfer";
  else if (odd) b = "TRITON_ATTN", why = "vLLM 0.11 runs this model on this GPU with TRITON_ATTN";
  *o = (EngineAttn){.backend = b, .page = 16, .unit = 16, .refusal = later ? VLLM0111_REFUSAL : VLLM011_REFUSAL,
                    .why = why};
}

/* TensorRT-LLM's PyTorch backend, MLA models whose latent KV is 576 wide
 * (kv_lora_rank + qk_rope_head_dim: DeepSeek-V2/V3, Kimi-K2) on compute
 * capability 9.0 under its default TRTLLM attention backend: FlashMLA
 * (tensorrt_llm/_torch/model_config.py, ModelConfig.enable_flash_mla), and
 * py_executor_creator.py sets tokens_per_block = 64, "Change
 * tokens_per_block to: 64 for using FlashMLA", whatever the YAML says.
 * Read in the stored versions of both files (model_config.py at 008e0af;
 * the override is in py_executor_creator.py from before April 2025, PR
 * #3571, through 2026), not at the catalog entries' own commits. */
static void attn_trtllm(const Spec *s, EngineAttn *o) {
  const ModelSpec *m = &s->model;
  if (m->attention.kv_lora_rank.v + m->attention.qk_rope_head_dim.v != 576 || !engine_gpu_is_hopper(&s->hardware))
    return;
  *o = (EngineAttn){.backend = "FlashMLA", .page = 64, .only = {64, 0}, .changes = true,
                    .why = "TensorRT-LLM runs MLA models with a 576-wide latent KV on Hopper GPUs with FlashMLA"};
}

void engine_attn(const Spec *s, EngineAttn *out) {
  *out = (EngineAttn){0};
  Engine e = (Engine)s->deployment.engine.v;
  bool mla = s->model.attention.kind.v == ATTN_MLA, amd = engine_gpu_is_amd(&s->hardware);
  if (e == ENGINE_SGLANG) attn_sglang(s, out);
  if (e == ENGINE_TRTLLM && mla && !amd) attn_trtllm(s, out);
  if (e != ENGINE_VLLM) return;
  bool v019 = engine_vllm_019(s->deployment.engine_version.v);
  if (v019) (mla ? attn_vllm019 : attn_vllm019_mha)(s, out);
  else if (mla && !amd) attn_vllm011(s, out);
  else if (!mla) attn_vllm011_mha(s, out);
}

const char *engine_attention_backend(const Spec *s) {
  EngineAttn a;
  engine_attn(s, &a);
  return a.pinned ? a.backend : NULL;
}

int64_t engine_kv_block(const Spec *s) {
  const SInt *b = &s->deployment.memory.kv_block;
  if (b->set) return b->v;
  EngineAttn a;
  engine_attn(s, &a);
  if (a.backend) return a.page;
  Engine e = (Engine)s->deployment.engine.v;
  return e == ENGINE_SGLANG ? 1 : e == ENGINE_TRTLLM ? 32 : 16;
}

static bool attn_keeps(const EngineAttn *a, int64_t block) {
  if (a->only[0] > 0) return block == a->only[0] || block == a->only[1] || block == a->only[2];
  return a->unit > 0 && block % a->unit == 0;
}

/* The sizes a backend keeps, as words for a message ("32 or 64", "64",
 * "a multiple of 32"). */
static const char *attn_sizes(const EngineAttn *a, char *buf, size_t n) {
  if (a->only[2] > 0)
    snprintf(buf, n, "%lld, %lld or %lld", (long long)a->only[0], (long long)a->only[1], (long long)a->only[2]);
  else if (a->only[1] > 0) snprintf(buf, n, "%lld or %lld", (long long)a->only[0], (long long)a->only[1]);
  else if (a->only[0] > 0) snprintf(buf, n, "%lld", (long long)a->only[0]);
  else snprintf(buf, n, "a multiple of %lld", (long long)a->unit);
  return buf;
}

/* trtllm_mla raises for a kv_cache_dtype other than fp8_e4m3 and auto
 * (the model's dtype), and SGLang 0.5.4 and 0.5.6 list no bf16 there; the
 * other backends here take every dtype rankplan plans. */
static bool backend_auto_kv(const char *backend) { return backend && strcmp(backend, "trtllm_mla") == 0; }

const char *engine_kv_word(const EngineCaps *c, const char *kv_dtype, const char *activations_dtype,
                           const char *attention_backend) {
  if (backend_auto_kv(attention_backend)) {
    if (strcmp(kv_dtype, activations_dtype) == 0) return "auto";
    if (strcmp(kv_dtype, "fp8") != 0) return NULL;
  }
  return engine_kv(c->kv_dtypes, c->nkv_dtypes, kv_dtype);
}

static void attn_check_dtype(Diags *d, const Spec *s, const EngineAttn *a) {
  DType kv = (DType)s->model.dtype.kv_cache.v, act = (DType)s->model.dtype.activations.v;
  if (!backend_auto_kv(a->backend) || kv == act || kv == DT_FP8) return;
  Diag *g = diag_at(d, DIAG_E0715, s->model.dtype.loc, "%s, which refuses a `%s` KV cache: it takes fp8 or the "
                    "model's dtype (`auto`, here `%s`)", a->why, dtype_name(kv), dtype_name(act));
  diag_help(g, "write `kv_cache: fp8` or `kv_cache: %s`", dtype_name(act));
}

int64_t engine_sglang_chunk_share(const Spec *s, PoolRole role, int64_t dp) {
  const SStr *v = &s->deployment.engine_version;
  if ((Engine)s->deployment.engine.v != ENGINE_SGLANG) return 0;
  int64_t chunk = mem_engine_sglang_chunk(s), page = engine_kv_block(s);
  bool old = v->set && v->v && strchr(v->v, '.') && engine_version_cmp(v->v, "0.5.4") < 0;
  int64_t c = chunk / (mem_engine_sglang_dp_attn(s, dp) ? dp : 1);
  if (chunk <= 0 || page <= 0 || (!old && role == ROLE_DECODE) || c <= 0 || c % page == 0) return 0;
  return c;
}

static void check_sglang_chunk(Diags *d, const Spec *s) {
  for (size_t i = 0; i < s->deployment.npools; i++) {
    const PoolSpec *p = &s->deployment.pools[i];
    int64_t c = engine_sglang_chunk_share(s, (PoolRole)p->role.v, p->dp.v), page = engine_kv_block(s);
    if (!c) continue;
    int64_t dp = model_is_moe(&s->model) && p->dp.v > 1 ? p->dp.v : 1, chunk = mem_engine_sglang_chunk(s);
    const SInt *t = &s->serving.max_num_batched_tokens;
    Diag *g = diag_at(d, DIAG_E0717, t->set ? t->loc : p->loc, "SGLang asserts that its chunked-prefill size "
                      "is a multiple of the page size: pool `%s` runs %lld tokens%s, not a multiple of %lld",
                      p->name.v, (long long)c, dp > 1 ? " per attention dp rank" : "", (long long)page);
    int64_t e = (chunk / (page * dp) + 1) * page * dp;
    diag_help(g, "write `serving.max_num_batched_tokens` as a multiple of %lld (%lld x dp %lld), e.g. %lld",
              (long long)(page * dp), (long long)page, (long long)dp, (long long)e);
    return;
  }
}

void engine_attn_check(Diags *d, const Spec *s) {
  check_sglang_chunk(d, s);
  EngineAttn a;
  engine_attn(s, &a);
  if (!a.backend) return;
  attn_check_dtype(d, s, &a);
  const SInt *kb = &s->deployment.memory.kv_block;
  if (!kb->set || attn_keeps(&a, kb->v)) return;
  char sizes[48];
  attn_sizes(&a, sizes, sizeof sizes);
  if (a.changes) {
    Diag *g = diag_at(d, DIAG_E0715, kb->loc, "%s, which takes KV blocks of %s tokens: it would run `kv_block: %lld` "
                      "as %lld", a.why, sizes, (long long)kb->v, (long long)a.page);
    diag_help(g, "write `kv_block: %lld`, or leave it out: the plan then counts the engine's %lld", (long long)a.page,
              (long long)a.page);
    return;
  }
  if (!a.fallback || (a.fallback_unit > 0 && kb->v % a.fallback_unit != 0)) {
    Diag *g = diag_at(d, DIAG_E0715, kb->loc, "%s, which takes KV blocks of %s tokens, and no other attention backend "
                      "it would run takes `kv_block: %lld`: it refuses to start (\"%s\")", a.why, sizes,
                      (long long)kb->v, a.refusal ? a.refusal : "");
    diag_help(g, "write `kv_block:` a size %s takes, or leave it out: the plan then counts %lld", a.backend,
              (long long)a.page);
    return;
  }
  Diag *g = diag_at(d, DIAG_W0704, kb->loc, "%s, which takes KV blocks of %s tokens: `kv_block: %lld` rules it out "
                    "and the engine runs %s instead, which it warns may be slower", a.why, sizes, (long long)kb->v,
                    a.fallback);
  diag_help(g, "leave `kv_block` out (the plan then counts %lld, as vLLM picks without --block-size) or write a "
               "size %s takes", (long long)a.page, a.backend);
}
