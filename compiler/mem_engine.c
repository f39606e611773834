/*
 * mem_engine.c: the top-level budget of the memory ledger as the chosen
 * engine counts it (docs/memory.md, "Engine accounting"): the device
 * total its memory fraction multiplies, the tokens and sequences of the
 * forward it profiles, its sampler warm-up, its memory outside PyTorch,
 * the reserve default and what is left for the KV pool.
 *
 * Input: a parsed Spec and the parts of a MemLedger memory.c filled in
 * (weights, forward_peak). Output: the budget entries of that ledger.
 * Invariants: every byte count uses the sticky-overflow accumulator;
 * `engine: generic` keeps the generic ledger (the nvidia-smi total, a 2
 * GiB reserve, fixed workspace and 64 MiB per communicator); `vllm`
 * follows vLLM 0.11's or 0.19's worker (by engine.version), `sglang` SGLang's mem_fraction_static and
 * `trtllm` TensorRT-LLM's free_gpu_memory_fraction, each formula citing
 * its source in docs/memory.md.
 */
#include "memory.h"

#include "engines.h"

#include <math.h>
#include <string.h>

static Engine engine_of(const Spec *s) { return (Engine)s->deployment.engine.v; }

int64_t mem_engine_total(const Spec *s) {
  const HardwareSpec *h = &s->hardware;
  Engine e = engine_of(s);
  bool cuda = e == ENGINE_VLLM || e == ENGINE_SGLANG || e == ENGINE_TRTLLM;
  return cuda && h->gpu.cuda_memory.set && h->gpu.cuda_memory.v > 0 ? h->gpu.cuda_memory.v
                                                                     : h->gpu.memory.v;
}

void mem_engine_forward(const Spec *s, bool decode, int64_t prompt, int64_t dp, int64_t *tokens,
                        int64_t *seqs) {
  int64_t chunk = s->serving.max_num_batched_tokens.v, nseq = s->serving.max_num_seqs.v;
  if (engine_of(s) == ENGINE_VLLM) {
    /* vLLM profiles one forward of max_num_batched_tokens tokens whatever
     * the pool's role (gpu_model_runner.py, profile_run). */
    EngineSched es;
    engine_sched(s, &es); /* the spec's serving values, else vLLM's defaults */
    *tokens = es.tokens;
    *seqs = es.seqs;
    if (*seqs > *tokens) *seqs = *tokens;
    return;
  }
  if (engine_of(s) == ENGINE_TRTLLM) {
    /* TensorRT-LLM profiles dummy context requests of max_num_tokens
     * tokens in all, each as long as a prompt (tensorrt_llm/_torch/
     * pyexecutor/_util.py, KvCacheCreator._create_dummy_context_requests). */
    EngineSched es;
    engine_sched(s, &es);
    *tokens = es.tokens;
    *seqs = prompt > 0 ? (es.tokens + prompt - 1) / prompt : 1;
    return;
  }
  /* The serving limits are the instance's where the engine shares them
   * out over its dp ranks (engine_limits_per_dp): SGLang's attention dp
   * divides --max-running-requests and --chunked-prefill-size by
   * --dp-size (model_runner.py, server_args.py). */
  if (engine_of(s) == ENGINE_SGLANG) chunk = mem_engine_sglang_chunk(s); /* the spec's, else SGLang's default */
  int64_t reps = engine_limits_per_dp(s) || dp < 1 ? 1 : dp;
  int64_t dec = nseq > 0 ? (nseq + reps - 1) / reps : MEM_DECODE_SEQS;
  int64_t budget = chunk / reps;
  *tokens = decode ? dec : prompt;
  if (!decode && budget > 0 && budget < *tokens) *tokens = budget;
  *seqs = decode ? dec : 1;
}

void mem_engine_last_stage(CkState *st, const Spec *s, int64_t tokens, int64_t seqs,
                           int64_t vocab_rank, MemLedger *L) {
  const ModelSpec *m = &s->model;
  L->profile_seqs = seqs;
  if (engine_of(s) != ENGINE_VLLM) {
    /* fp32 logits of the forward's sequences, vocab-parallel */
    L->activations = cka(st, L->forward_peak, ckm(st, ckm(st, seqs, vocab_rank), 4));
    return;
  }
  /* vLLM's sampler warm-up after the profiling forward: the logits of
   * one token per sequence, gathered to the whole vocabulary on every tp
   * rank, through the top-k/top-p path, while the forward's hidden
   * states [tokens, hidden] are still held. */
  int64_t an, ad;
  model_dtype_size((DType)m->dtype.activations.v, &an, &ad);
  int64_t hidden = ckm(st, ckm(st, tokens, m->hidden_size.v), an) / (ad > 0 ? ad : 1);
  int64_t per = engine_vllm_019(s->deployment.engine_version.v) ? MEM_VLLM019_SAMPLER_BYTES
                : engine_sampler_flashinfer(s)                  ? MEM_VLLM_SAMPLER_FLASHINFER_BYTES
                                                                : MEM_VLLM_SAMPLER_BYTES;
  int64_t logits = ckm(st, ckm(st, seqs, m->vocab_size.v), per);
  L->sampler = cka(st, hidden, logits);
  int64_t warm = cka(st, L->sampler, L->moe_workspace); /* the workspace outlives the forward */
  L->activations = L->forward_peak > warm ? L->forward_peak : warm;
}

void mem_engine_overheads(CkState *st, const Spec *s, int64_t groups, bool tp_group, bool pp_group,
                          MemLedger *L) {
  const DeploymentSpec *dep = &s->deployment;
  Engine e = engine_of(s);
  bool named = e == ENGINE_VLLM || e == ENGINE_SGLANG || e == ENGINE_TRTLLM;
  /* The engines' own accounting leaves the headroom above their fraction
   * to the rest of the device: no reserve unless the spec asks for one. */
  bool explicit_reserve = dep->memory.reserve.set;
  L->reserve = explicit_reserve ? dep->memory.reserve.v : named ? 0 : (int64_t)2 << 30;
  if (e == ENGINE_VLLM && engine_vllm_019(s->deployment.engine_version.v)) {
    /* the tp group's workspaces as measured; other communicators but pp's
     * (which adds none) at 0.11's figure, not measured on 0.19 */
    int64_t others = groups - tp_group - pp_group;
    L->workspace = MEM_VLLM019_NON_TORCH_BYTES;
    L->comm = cka(st, tp_group ? MEM_VLLM019_TP_COMM_BYTES : 0, ckm(st, others, MEM_VLLM_NON_TORCH_PER_GROUP));
    return;
  }
  if (e == ENGINE_VLLM) {
    L->workspace = MEM_VLLM_NON_TORCH_BYTES;
    L->comm = ckm(st, groups, MEM_VLLM_NON_TORCH_PER_GROUP);
    return;
  }
  L->workspace = MEM_WORKSPACE_BYTES;
  L->comm = ckm(st, groups, MEM_COMM_BYTES_PER_GROUP);
  if (e == ENGINE_TRTLLM) {
    /* its decode graphs' data, in the peak its fraction is taken after */
    int64_t per = ckm(st, ckm(st, engine_trtllm_graph_count(s), MEM_TRTLLM_GRAPH_BYTES), L->shard.layers);
    L->workspace = cka(st, L->workspace, per / MEM_TRTLLM_GRAPH_LAYERS);
  }
}

/* floor(total * util) without leaving int64: util is in (0, 1], and the
 * double of a total near 2^63 rounds up to 2^63, which no int64 holds. */
static int64_t frac_of(int64_t total, double util) {
  double v = (double)total * util;
  return v >= (double)INT64_MAX ? total : (int64_t)v;
}

/* The SGLang release whose default-fraction rule applies: the rule was
 * read at 0.4.7, 0.4.10.post2, 0.5.4 and 0.5.6 (docs/memory.md), each
 * applied from its release up to the next one read. A spec without
 * engine.version gets the catalog's newest entry, a commit after 0.5.14,
 * and a version without a dot names a commit: both take 0.5.6's rule,
 * assumed there, not read (docs/memory.md). */
typedef enum { SGL_RULE_047, SGL_RULE_0410, SGL_RULE_054, SGL_RULE_056 } SglRule;

static SglRule sglang_rule(const Spec *s) {
  const SStr *v = &s->deployment.engine_version;
  if (!v->set || !v->v || !strchr(v->v, '.')) return SGL_RULE_056;
  if (engine_version_cmp(v->v, "0.4.10.post2") < 0) return SGL_RULE_047;
  if (engine_version_cmp(v->v, "0.5.4") < 0) return SGL_RULE_0410;
  return engine_version_cmp(v->v, "0.5.6") < 0 ? SGL_RULE_054 : SGL_RULE_056;
}

/* SGLang's chunked-prefill size and CUDA-graph batch by nvidia-smi's MiB
 * (server_args.py of 0.5.4 and 0.5.6, _handle_gpu_memory_settings; CUDA,
 * not NPU); 0.5.4 captured 16 below 35 GiB and tp 4 where 0.5.6 does 24. */
static void sglang_sizes(int64_t mib, int64_t tp, SglRule rule, int64_t *chunk, int64_t *bs) {
  static const struct { int64_t below, chunk, bs_small, bs_big; } T[] = {
      {20 * 1024, 2048, 8, 8},      {35 * 1024, 2048, 24, 80},    {60 * 1024, 4096, 32, 160},
      {90 * 1024, 8192, 256, 512},  {160 * 1024, 8192, 256, 512}, {INT64_MAX, 16384, 512, 512},
  };
  size_t i = 0;
  while (mib >= T[i].below) i++;
  *chunk = T[i].chunk;
  *bs = tp < 4 ? T[i].bs_small : T[i].bs_big;
  if (rule == SGL_RULE_054 && i == 1 && tp < 4) *bs = 16;
}

/* 0.4.7 (server_args.py, __post_init__): a table by tp x pp up to 80
 * GiB, 0.79 above 180,000 MiB on CUDA (not ROCm: amd), and between them
 * the least of 0.88 + 48 GiB x 0.12 / total and (total - 18 GiB) / total
 * (20 GiB with speculative decoding); x 0.95 with speculative decoding up
 * to 96 GiB. */
static double sglang_frac_047(double mib, int64_t par, bool spec, bool amd) {
  double f = 0.88;
  if (mib <= 81920) f = par >= 16 ? 0.79 : par >= 8 ? 0.81 : par >= 4 ? 0.85 : par >= 2 ? 0.87 : 0.88;
  if (mib > 180000 && !amd) return 0.79;
  if (mib > 96 * 1024) {
    double a = f + 48.0 * 1024 * (1 - f) / mib, b = (mib - (spec ? 20480 : 18432)) / mib;
    return a < b ? a : b;
  }
  return spec ? f * 0.95 : f;
}

/* 0.4.10.post2 (the same function): a reserve in GiB by total and tp x
 * pp, 2 more with speculative decoding, 4 more with attention dp. */
static double sglang_reserve_0410(int64_t mib, int64_t par, bool spec, bool dp_attn) {
  double p = (double)par, r = mib < 35 * 1024    ? 2.8 + p / 10
                            : mib < 90 * 1024    ? 9.5 + p / 2
                            : mib < 160 * 1024   ? 12 + p / 2
                                                 : 32;
  return (r + (spec ? 2 : 0) + (dp_attn ? 4 : 0)) * 1024;
}

/* The 0.5.4 / 0.5.6 table's chunked-prefill size and CUDA-graph batch at
 * --tp-size sgl_tp (sglang_sizes); false for the releases whose rule has
 * no such table, or without a device total. */
static bool sglang_table(const Spec *s, int64_t sgl_tp, int64_t *chunk, int64_t *bs) {
  SglRule rule = sglang_rule(s);
  int64_t mib = s->hardware.gpu.memory.v >> 20;
  if ((rule != SGL_RULE_054 && rule != SGL_RULE_056) || mib <= 0) return false;
  sglang_sizes(mib, sgl_tp, rule, chunk, bs);
  return true;
}

int64_t mem_engine_sglang_chunk(const Spec *s) {
  if (s->serving.max_num_batched_tokens.v > 0) return s->serving.max_num_batched_tokens.v;
  int64_t chunk, bs;
  return sglang_table(s, 1, &chunk, &bs) ? chunk : 0;
}

int64_t mem_engine_sglang_graph_bs(const Spec *s, int64_t sgl_tp) {
  if (s->serving.cuda_graph_max_bs.set) return s->serving.cuda_graph_max_bs.v;
  int64_t chunk, bs;
  return sglang_table(s, sgl_tp, &chunk, &bs) ? bs : 0;
}

double mem_engine_sglang_graph_mib(const Spec *s, int64_t tp, int64_t dp) {
  int64_t bs = mem_engine_sglang_graph_bs(s, mem_engine_sglang_tp_size(s, tp, dp));
  double r = (double)bs * 2;
  if (mem_engine_sglang_dp_attn(s, dp)) r += (double)(bs * dp) * (bs > 300 ? 4.5 : 3);
  return r;
}

/* 0.5.4 and 0.5.6: the reserve in MiB from the chunked-prefill size and
 * the CUDA-graph batch (server_args.py, _handle_gpu_memory_settings). */
static double sglang_reserve_05(const Spec *s, int64_t mib, int64_t tp, int64_t pp, int64_t dp) {
  int64_t chunk = mem_engine_sglang_chunk(s); /* the spec's --chunked-prefill-size, else the table's */
  int64_t sgl_tp = mem_engine_sglang_tp_size(s, tp, dp);
  double r = 512 + (double)(chunk > 2048 ? chunk : 2048) * 1.5 + mem_engine_sglang_graph_mib(s, tp, dp) +
             (double)(sgl_tp * pp) / 8 * 1024;
  if (mib > 60 * 1024 && r < 10 * 1024) r = 10 * 1024;
  if (s->workload.draft_tokens.v > 0) r += 2 * 1024; /* EAGLE / NEXTN */
  return r;
}

bool mem_engine_sglang_dp_attn(const Spec *s, int64_t dp) { return model_is_moe(&s->model) && dp > 1; }

int64_t mem_engine_sglang_tp_size(const Spec *s, int64_t tp, int64_t dp) {
  return mem_engine_sglang_dp_attn(s, dp) ? tp * dp : tp;
}

/* SGLang's default mem_fraction_static by release (sglang_rule): the
 * device less a reserve in MiB for activations and CUDA graphs, as a
 * fraction of nvidia-smi's total rounded to 3 decimals (0.4.7: a table),
 * at its --tp-size (mem_engine_sglang_tp_size). */
double mem_engine_sglang_fraction(const Spec *s, int64_t tp, int64_t pp, int64_t dp) {
  int64_t mib = s->hardware.gpu.memory.v >> 20;
  bool dp_attn = mem_engine_sglang_dp_attn(s, dp), spec = s->workload.draft_tokens.v > 0;
  int64_t sgl_tp = mem_engine_sglang_tp_size(s, tp, dp);
  SglRule rule = sglang_rule(s);
  if (mib <= 0) return 0;
  if (rule == SGL_RULE_047) return sglang_frac_047((double)mib, sgl_tp * pp, spec, engine_gpu_is_amd(&s->hardware));
  double r = rule == SGL_RULE_0410 ? sglang_reserve_0410(mib, sgl_tp * pp, spec, dp_attn)
                                   : sglang_reserve_05(s, mib, tp, pp, dp);
  double f = nearbyint(((double)mib - r) / (double)mib * 1000) / 1000;
  return f > 0 && f <= 1 ? f : 0;
}

/* What SGLang's distributed start-up (NCCL communicators, custom
 * all-reduce buffers) takes of each GPU before it measures the free
 * memory its fraction multiplies: its log line "Init torch distributed
 * ends. mem usage=X GB" (GiB) at 2, 4 and 8 ranks (docs/memory.md,
 * "SGLang"); the 8-rank figure beyond, none at one rank. */
static int64_t sglang_dist_init(int64_t ranks) {
  int64_t centi_gib = ranks <= 1 ? 0 : ranks <= 2 ? 134 : ranks <= 4 ? 143 : 201;
  return ((int64_t)centi_gib << 30) / 100;
}

void mem_engine_kv_pool(CkState *st, const Spec *s, int64_t tp, int64_t pp, int64_t dp,
                        MemLedger *L) {
  double util = s->deployment.memory.utilization.v > 0 ? s->deployment.memory.utilization.v : 0.90;
  if (engine_of(s) == ENGINE_SGLANG && !s->deployment.memory.utilization.set) {
    double f = mem_engine_sglang_fraction(s, tp, pp, dp);
    if (f > 0) util = f;
  }
  L->utilization = util;
  L->engine_total = mem_engine_total(s);
  if (engine_of(s) == ENGINE_TRTLLM) {
    /* TensorRT-LLM: the fraction of what the profiled peak (weights,
     * forward, buffers) leaves of the total: available_kv_mem = (total -
     * peak) * free_gpu_memory_fraction (tensorrt_llm/_torch/pyexecutor/
     * _util.py, KvCacheCreator; trtllm-serve's --kv_cache_free_gpu_memory_
     * fraction: "after allocating model weights and buffers"). */
    int64_t used = cka(st, cka(st, cka(st, L->weights, L->reserve), L->comm),
                       cka(st, L->activations, L->workspace));
    int64_t free_after = cks(st, L->engine_total, used);
    L->kv_pool = free_after > 0 ? frac_of(free_after, util) : free_after;
    L->usable = cka(st, used, L->kv_pool);
    return;
  }
  if (engine_of(s) != ENGINE_SGLANG) {
    /* generic and vLLM: the fraction of the total, less every other use
     * (vLLM: worker determine_available_memory). */
    L->usable = frac_of(L->engine_total, util);
    int64_t used = cka(st, cka(st, cka(st, L->weights, L->reserve), L->comm),
                       cka(st, L->activations, L->workspace));
    L->kv_pool = cks(st, L->usable, used);
    return;
  }
  /* SGLang: the fraction of the memory free before the weights load (its
   * communicators are set up by then) holds the weights and the KV pool;
   * activations, CUDA graphs and workspaces live above it. Where they do
   * not fit there, the ledger takes the excess from the KV pool. */
  int64_t init = sglang_dist_init(ckm(st, mem_engine_sglang_tp_size(s, tp, dp), pp));
  if (init > L->comm) L->comm = init;
  L->usable = frac_of(cks(st, L->engine_total, L->comm), util);
  int64_t used = cka(st, L->weights, L->reserve);
  int64_t short_by = mem_engine_sglang_short(st, L);
  if (short_by > 0) used = cka(st, used, short_by);
  L->kv_pool = cks(st, L->usable, used);
}

/* The memory fraction flag that gives the ledger's KV pool, floored to 4
 * decimals as the flag is written, or the planned fraction itself where
 * the ledger took nothing more from the pool (no reserve, no activations
 * moved out of SGLang's share above the fraction); 0 for other engines.
 * SGLang holds fraction * (memory free before the weights load) for the
 * weights and the pool: (weights + KV pool) / (total - comm), total being
 * CUDA's. TensorRT-LLM gives the pool fraction * (total - its profiled
 * peak): KV pool / (total - weights - comm - activations - workspace). */
double mem_engine_fraction(const Spec *s, const MemLedger *L) {
  Engine e = engine_of(s);
  if ((e != ENGINE_SGLANG && e != ENGINE_TRTLLM) || L->kv_pool <= 0) return 0;
  double num = (double)L->kv_pool, den = (double)L->engine_total - (double)L->comm;
  if (e == ENGINE_SGLANG) num += (double)L->weights;
  else den -= (double)L->weights + (double)L->activations + (double)L->workspace;
  if (den <= 0) return 0;
  if (L->reserve == 0 && (e == ENGINE_TRTLLM || L->weights + L->kv_pool == L->usable))
    return L->utilization; /* as planned */
  double f = floor(num / den * 10000.0) / 10000.0;
  return f > 0 && f <= 1 ? f : 0;
}

int64_t mem_engine_sglang_short(CkState *st, const MemLedger *L) {
  /* the room above the fraction: CUDA's total (what SGLang sees), not the
   * device's nvidia-smi capacity */
  int64_t above = cks(st, cks(st, L->engine_total, L->comm), L->usable);
  return cks(st, cka(st, L->activations, L->workspace), above);
}
