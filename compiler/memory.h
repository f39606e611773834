/*
 * memory.h: the per-rank memory ledger. For one rank class (a pool and one
 * of its pp stages; every rank of that class holds the same bytes, since
 * experts, heads and vocabulary rows divide evenly once the rules of
 * validate.c pass, and ceilings are used when they do not), how GPU memory
 * splits into weights, activations, workspace, reserve, communication
 * buffers and the KV pool, and how many requests the KV pool holds.
 *
 * Input: a Spec that parsed, one of its pools, a pp stage and the layer
 * partition. Output: a MemLedger of int64 byte counts. Invariants: every
 * figure is computed with checked arithmetic (overflow is E0299, never a
 * wrap); kv_pool may be negative (the weights do not fit), and then
 * kv_blocks, requests_fit are 0. docs/memory.md states every formula.
 */
#ifndef RANKPLAN_MEMORY_H
#define RANKPLAN_MEMORY_H

#include "model.h"

/* What one rank of the class holds, as counts (the layout stage turns them
 * into [start, end) ranges). */
typedef struct {
  int64_t first_layer, layers;   /* [first_layer, first_layer + layers) */
  int64_t dense_layers, moe_layers; /* of those layers */
  int64_t mtp_layers;            /* MTP modules on this (the last) stage, besides layers */
  int64_t q_heads;               /* heads / tp */
  int64_t kv_heads;              /* max(1, kv_heads / tp); 1 for MLA */
  int64_t experts;               /* routed experts per ep rank: ceil(experts / ep) */
  int64_t vocab;                 /* ceil(vocab / tp) rows, on first/last stage only */
  bool has_embedding, has_lm_head;
  bool has_draft;                /* model.draft is loaded here (the last stage, when drafting) */
} MemShard;

typedef struct MemLedger {
  MemShard shard;
  int64_t ranks;                 /* ranks in this class: replicas * tp * cp * dp */
  /* Weight bytes by component (scales included). */
  int64_t w_embedding, w_lm_head, w_attention, w_norms, w_ffn_dense;
  int64_t w_experts, w_shared, w_routers;
  int64_t w_mtp_proj;            /* the MTP modules' 2h x h projections and norms */
  int64_t w_draft;               /* the draft model (model.draft), sharded as the target */
  int64_t w_rope;                /* vllm, sglang, trtllm: the rotary embedding's cos/sin cache (ledger_rope) */
  int64_t w_layout;              /* vllm: MXFP4 experts' Hopper padding and scale copy */
  /* The ledger, bytes per rank. */
  int64_t capacity;              /* hardware.gpu.memory */
  int64_t engine_total;          /* the total the engine's fraction multiplies (mem_engine.c) */
  double utilization;            /* the fraction used: the spec's, or SGLang's default */
  int64_t usable;                /* floor(engine_total * utilization) */
  int64_t weights;               /* sum of the w_* above */
  int64_t activations;           /* peak live activations of one forward */
  int64_t forward_peak;          /* the forward's widest layer (and, generic, logits) */
  int64_t sampler;               /* vllm: the profile's sampler warm-up and kept hidden states */
  int64_t moe_workspace;         /* vllm 0.19: the fused-MoE kernels' workspace, kept from the
                                    first MoE layer on (in forward_peak and activations) */
  int64_t profile_seqs;          /* sequences the sampler estimate assumes */
  int64_t workspace;             /* library workspace (GEMM) */
  int64_t reserve;               /* deployment.memory.reserve */
  int64_t comm;                  /* communication buffers */
  int64_t kv_pool;               /* usable - all of the above; may be < 0 */
  /* KV capacity. */
  int64_t kv_bytes_per_token;    /* this rank's layers and heads (and the draft's), every
                                    layer counted: a token inside every window */
  int64_t kv_draft_bytes_per_token; /* of which the MTP modules' and the draft model's */
  int64_t kv_block_tokens;       /* deployment.memory.kv_block */
  int64_t kv_blocks;             /* floor(kv_pool / (block * bytes/token)), >= 0 */
  int64_t tokens_per_forward;    /* tokens the activation estimate assumes */
  /* Requests. One request's KV lives on one attention replica (the tp*cp
   * ranks of one dp rank, over every pp stage); cp and dcp split its
   * tokens across ranks. */
  int64_t request_tokens;        /* workload input + output tokens */
  int64_t request_blocks;        /* blocks one such request needs on a rank: its bytes
                                    over all layers (sliding and chunked ones keep their
                                    window only) over block * kv_bytes_per_token, rounded up */
  int64_t max_context_blocks;    /* blocks one max_model_len request needs on a rank */
  int64_t requests_fit;          /* B_memory per attention replica */
  int64_t requests_fit_instance; /* requests_fit * dp */
  bool max_context_fits;         /* kv_blocks >= max_context_blocks */
} MemLedger;

/* Balanced split of `layers` over `pp` stages: the first (layers % pp)
 * stages get one layer more. out has pp entries. This is the generic
 * engine's split; per-engine splits belong to the layout stage
 * (partition.c), whose result callers pass to mem_ledger. */
void mem_balanced_partition(int64_t layers, int64_t pp, int64_t *out);

/* Computes the ledger of pool p's stage pp_stage (0-based). layer_partition
 * has p->pp entries (layers per stage) or is NULL: then the pool's own
 * layer_partition when set, else mem_balanced_partition. Returns false and
 * reports E0299 (when d is not NULL) on overflow; the rules about the
 * result (weights over budget, KV under one max_context request) are
 * validate.c's, not reported here. */
bool mem_ledger(const Spec *s, const PoolSpec *p, int64_t pp_stage,
                const int64_t *layer_partition, MemLedger *out, Diags *d);

/* ---- engine accounting (mem_engine.c; docs/memory.md, "Engine accounting")
 * The parts of the ledger's budget that follow the chosen engine's own
 * accounting: the total its fraction multiplies, the tokens and sequences
 * of its profiling forward, its sampler warm-up, its memory outside
 * PyTorch and what its KV pool is left. */

/* The bytes the engine's memory fraction multiplies. */
int64_t mem_engine_total(const Spec *s);
/* Tokens of one profiling/widest forward and its sequences. decode: a
 * decode pool; prompt: the prompt tokens one rank sees in one forward;
 * dp: the instance's attention replicas. */
void mem_engine_forward(const Spec *s, bool decode, int64_t prompt, int64_t dp, int64_t *tokens,
                        int64_t *seqs);
/* The activation peak of the last stage: fills L->sampler and
 * L->activations from L->forward_peak (tokens, hidden and vocab as the
 * engine's profile run sees them). */
void mem_engine_last_stage(CkState *st, const Spec *s, int64_t tokens, int64_t seqs,
                           int64_t vocab_rank, MemLedger *L);
/* workspace, comm and reserve by engine; groups is the number of
 * communicators with more than one member a rank belongs to, tp_group and
 * pp_group whether its tp and pp groups are among them. */
void mem_engine_overheads(CkState *st, const Spec *s, int64_t groups, bool tp_group, bool pp_group,
                          MemLedger *L);
/* SGLang: by how much the share above its static fraction (the capacity
 * less the communicators and `usable`) falls short of the forward's
 * activations and workspace, which live there; <= 0 when they fit. The
 * ledger takes a shortfall from the KV pool, and W0207 reports it. */
int64_t mem_engine_sglang_short(CkState *st, const MemLedger *L);
double mem_engine_fraction(const Spec *s, const MemLedger *L);
/* usable and kv_pool from engine_total and the other entries; tp, pp and
 * dp are the pool's (SGLang's default fraction depends on them). */
void mem_engine_kv_pool(CkState *st, const Spec *s, int64_t tp, int64_t pp, int64_t dp,
                        MemLedger *L);
/* SGLang's default mem_fraction_static for the pool (0 when it would be
 * outside (0, 1]). */
double mem_engine_sglang_fraction(const Spec *s, int64_t tp, int64_t pp, int64_t dp);
/* SGLang's chunked-prefill size, the most prompt tokens one prefill pass
 * takes: serving.max_num_batched_tokens, else the release's default for
 * the GPU's memory (0.5.4 onwards); 0 when neither is known. */
int64_t mem_engine_sglang_chunk(const Spec *s);
/* SGLang's cuda_graph_max_bs at --tp-size sgl_tp: the largest decode
 * batch of one scheduler its CUDA graphs cover: serving.cuda_graph_max_bs,
 * else the release's default for the GPU's memory (0.5.4 onwards,
 * docs/memory.md); 0 when neither is known. */
int64_t mem_engine_sglang_graph_bs(const Spec *s, int64_t sgl_tp);
/* What SGLang's own default fraction reserves for its CUDA graphs, in
 * MiB (server_args.py, _handle_gpu_memory_settings, 0.5.4 onwards): 2 per
 * unit of cuda_graph_max_bs, plus 3 per unit and dp rank with attention
 * dp (4.5 above 300); 0 where the batch is not known. */
double mem_engine_sglang_graph_mib(const Spec *s, int64_t tp, int64_t dp);
/* Whether SGLang runs an MoE pool of dp > 1 with attention dp
 * (emit_sglang.c). */
bool mem_engine_sglang_dp_attn(const Spec *s, int64_t dp);
/* SGLang's --tp-size for a pool: tp, times dp under attention dp. */
int64_t mem_engine_sglang_tp_size(const Spec *s, int64_t tp, int64_t dp);

/* vLLM's sampler warm-up: bytes per (sequence x vocabulary entry) live at
 * the peak of the PyTorch-native top-k/top-p path (docs/memory.md). */
#define MEM_VLLM_SAMPLER_BYTES 38
/* The same on FlashInfer's path (serving.sampler: flashinfer): the logits
 * (2), their fp32 copy (4), top-k's masked logits (4) and the softmax
 * probabilities (4), flashinfer's top_k_top_p_sampling_from_logits. */
#define MEM_VLLM_SAMPLER_FLASHINFER_BYTES 14
/* vLLM's memory outside PyTorch as its log reports it (docs/memory.md):
 * one GPU without communicators, and each communicator more. */
#define MEM_VLLM_NON_TORCH_BYTES (((int64_t)13 << 30) / 100)     /* 0.13 GiB */
/* The largest CUDA-graph capture a vLLM 0.11.0 log read shows ("Graph
 * capturing finished in 19 secs, took 1.92 GiB": Qwen3-VL-30B-A3B at tp 4,
 * 67 piecewise and 35 full graphs; the llm-d H100 runs log up to 1.03 GiB;
 * docs/memory.md, "CUDA graphs"): the share above gpu_memory_utilization
 * must hold it. */
#define MEM_VLLM_GRAPHS_LOGGED_MAX (((int64_t)192 << 30) / 100)  /* 1.92 GiB */
#define MEM_VLLM_NON_TORCH_PER_GROUP (((int64_t)41 << 30) / 100) /* 0.41 GiB */

/* vLLM 0.19 (docs/memory.md, "vLLM 0.19"): the sampler warm-up's bytes per
 * (sequence x vocabulary entry) on either path: the bf16 logits (2), the
 * sampler's fp32 copy (4, which the Triton top-k/top-p kernel or
 * FlashInfer's masks in place), the softmax probabilities (4) and the
 * exponential draw random_sample divides them by (4). */
#define MEM_VLLM019_SAMPLER_BYTES 14
/* vLLM 0.19's memory outside PyTorch (the profile's "non-torch forward
 * increase"), llm-d-planner's accuracy sweep of 0.19.0 on H100
 * (Llama-3.1-8B-Instruct): 0.25 GiB at tp 1, 2.07 GiB at tp 2 (the tp
 * all-reduce's workspaces, the fused all-reduce + RMSNorm pass's among
 * them: 1.82 GiB more); a pp communicator adds none (0.07 GiB at pp 2 and
 * pp 4, below tp 1's). */
#define MEM_VLLM019_NON_TORCH_BYTES (((int64_t)25 << 30) / 100)  /* 0.25 GiB */
#define MEM_VLLM019_TP_COMM_BYTES (((int64_t)182 << 30) / 100)   /* 1.82 GiB */
/* vLLM 0.19 estimates its CUDA graphs' memory as the first capture plus
 * the second's growth for each further size (gpu_model_runner.py,
 * profile_cudagraph_memory): the figures of the sweep's run with the
 * largest capture (Llama-3.3-70B w8a8 at tp 2: "FULL ... 268.00 MiB
 * first-capture + (51-1) x 14.00 MiB per-graph", "PIECEWISE ... 122.00
 * MiB first-capture + (51-1) x 20.00 MiB per-graph", estimated 1.92 GiB,
 * "took 1.85 GiB"). */
#define MEM_VLLM019_GRAPH_FIRST ((int64_t)268 << 20)      /* 268 MiB */
#define MEM_VLLM019_GRAPH_PER_SIZE ((int64_t)(20 + 14) << 20) /* 34 MiB a size, both modes */

/* TensorRT-LLM's decode CUDA graphs share one memory pool (graph.pool())
 * and each adds its graph's own data outside it: "Each CUDA graph metadata
 * takes about 10 MiB for DeepSeek R1" (TensorRT-LLM PR #12895, April
 * 2026: 220 MiB for its 22 graphs, 490 MiB for 49). Taken per layer of
 * the rank, DeepSeek-R1's 61 (a graph's data grows with its kernels):
 * docs/memory.md, "CUDA graphs". */
#define MEM_TRTLLM_GRAPH_BYTES ((int64_t)10 << 20) /* 10 MiB a graph at 61 layers */
#define MEM_TRTLLM_GRAPH_LAYERS 61

/* Communication buffer bytes one rank holds per communicator with more
 * than one member (docs/memory.md). */
#define MEM_COMM_BYTES_PER_GROUP ((int64_t)64 << 20)
/* GEMM library workspace per rank (docs/memory.md). */
#define MEM_WORKSPACE_BYTES ((int64_t)32 << 20)
/* Sequences per decode forward the activation estimate assumes. */
#define MEM_DECODE_SEQS 256

#endif
