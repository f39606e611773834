/*
 * cost.h: the analytic cost model. Given a Spec (model, hardware, workload,
 * SLOs) and the parallel layout of one engine instance, it predicts how long
 * a prefill takes, how long one decode step takes at batch B, how long the
 * prefill -> decode KV transfer takes, and how long a request waits in the
 * queue. docs/cost-model.md states every formula and every constant.
 *
 * Input: a Spec without parse errors and a CostLayout per instance.
 * Output: times in seconds (double) and byte/FLOP counts (int64, checked).
 * Invariants: every byte and FLOP count is an int64 computed with checked
 * arithmetic (overflow is E0501, never a wrap); every efficiency or latency
 * constant lives in the one CostConsts table below, whose defaults are
 * documented (source or "assumption to calibrate") and which a calibration
 * file (--calibration FILE) overrides; the same inputs always give the same
 * outputs (no clocks, no randomness).
 */
#ifndef RANKPLAN_COST_H
#define RANKPLAN_COST_H

#include "spec.h"

/* The one table of efficiency and latency constants.
 * X(name, default, min, max, what it is). Every default is an assumption to
 * calibrate (docs/cost-model.md, "Constants"), measured with
 * `rankrun --probe` and written to a calibration file. */
#define COST_CONSTANTS(X)                                                        \
  X(mfu_prefill, 0.60, 0.01, 1.0,                                                \
    "fraction of the GPU's dense peak FLOP/s reached by prefill")                \
  X(mfu_decode, 0.50, 0.01, 1.0,                                                 \
    "fraction of the GPU's dense peak FLOP/s reached by decode")                 \
  X(hbm_efficiency, 0.80, 0.01, 1.0,                                             \
    "fraction of the peak HBM bandwidth reached by decode reads")                \
  X(scale_up_efficiency, 0.80, 0.01, 1.0,                                        \
    "fraction of the scale-up link bandwidth reached by collectives")            \
  X(scale_out_efficiency, 0.80, 0.01, 1.0,                                       \
    "fraction of the scale-out NIC bandwidth reached by collectives")            \
  X(scale_up_latency_s, 5e-6, 0.0, 1.0,                                          \
    "per-step latency of a scale-up collective when the spec gives none")        \
  X(scale_out_latency_s, 20e-6, 0.0, 1.0,                                        \
    "per-step latency of a scale-out collective when the spec gives none")       \
  X(comm_overlap, 0.0, 0.0, 1.0,                                                 \
    "fraction of communication time hidden behind compute")                      \
  X(ep_overlap, 0.0, 0.0, 1.0,                                                   \
    "fraction of MoE dispatch/combine time hidden behind compute (two micro-batches)") \
  X(expert_imbalance, 1.0, 1.0, 64.0,                                            \
    "tokens of the busiest ep rank over the mean (1: perfectly balanced routing)")  \
  X(step_overhead_s, 0.408e-3, 0.0, 1.0,                                         \
    "fixed time per decode step of one pipeline stage (launch, scheduling)")     \
  X(seq_overhead_s, 12.8e-6, 0.0, 1.0,                                           \
    "time per sequence a decode step's CPU work adds (input preparation, "       \
    "output processing)")                                                        \
  X(kernel_stall_s, 5e-6, 0.0, 1.0,                                              \
    "GPU idle time at each kernel boundary of a forward pass")                   \
  X(eager_kernel_s, 65.6e-6, 0.0, 1.0,                                           \
    "CPU time to issue one kernel of a forward pass run without CUDA graphs "    \
    "(an engine's eager prefill)")                                               \
  X(request_overhead_s, 6.9e-3, 0.0, 1.0,                                        \
    "time a request spends outside the GPU before its first token (HTTP, "       \
    "chat template, tokenisation, streaming)")                                   \
  X(max_batch_per_dp, 256, 1, 1e6,                                               \
    "most sequences one attention dp rank decodes per micro-batch")

typedef struct CostConsts {
#define X(name, def, lo, hi, doc) double name;
  COST_CONSTANTS(X)
#undef X
} CostConsts;

/* One named constant, for printing and for the calibration loader. */
typedef struct {
  const char *name;
  double def, lo, hi;
  const char *doc;
  size_t offset; /* offsetof(CostConsts, name) */
} CostConstInfo;

/* The table, in declaration order, and its length. */
const CostConstInfo *cost_const_table(size_t *n);

/* Fills c with the defaults of the table. */
void cost_consts_default(CostConsts *c);

/* Reads a calibration file: one JSON object whose keys are constant names
 * (see the table) with numbers inside [min, max], plus the optional keys
 * "format" (must be "rankplan.calibration/1") and "source" (free text:
 * where the figures were measured). Unknown keys are rejected (E0502) with
 * the file and the key named; bad values are E0503; JSON syntax E0504; an
 * unreadable file E0505 and *unreadable set. Returns false on any error,
 * leaving c partly updated. */
bool cost_calibration_load(Diags *d, const char *path, CostConsts *c,
                           bool *unreadable);
/* The same on a calibration file's contents already read (text, len bytes;
 * `path` names it in the diagnostics). */
bool cost_calibration_parse(Diags *d, const char *path, const char *text, size_t len,
                            CostConsts *c);

/* The parallel layout of one engine instance (spec.md semantics): an
 * instance has tp*cp*dp*pp GPUs; ep and etp regroup them for MoE layers;
 * dcp reuses tp ranks. */
typedef struct {
  int64_t tp, pp, cp, dp, ep, etp, dcp;
} CostLayout;

/* GPUs of one instance, or -1 on overflow. */
int64_t cost_layout_gpus(const CostLayout *l);

/* Link class of a communication group: scale-up when the ranks it spans
 * fit in one scale-up domain under the default placement (instances start
 * at domain boundaries, tp innermost), scale-out otherwise. */
typedef enum { LINK_SCALE_UP, LINK_SCALE_OUT } LinkClass;

/* Everything the formulas need, derived once from the Spec (model shape,
 * parameter counts, hardware figures, workload, constants). */
typedef struct {
  /* model */
  const ModelSpec *ms;             /* the spec's model (borrowed) */
  bool tied;                       /* lm_head shares the embedding */
  AttnKind kind;
  bool moe;
  int64_t layers, n_dense, n_moe, hidden, vocab, heads, kv_heads, head_dim;
  double pass_kernels;             /* kernels of one forward pass over every layer */
  int64_t experts, top_k;
  int64_t expert_slots;            /* experts + moe.redundant_experts: ep divides it */
  int64_t route_groups, route_group_top_k; /* group-limited routing; 0: none */
  double dispatch_bytes, combine_bytes;    /* per token, scales included */
  int64_t dense_ffn_size, expert_ffn_size; /* intermediate sizes (divisibility) */
  /* parameters (FLOPs: 2 per parameter per token) */
  int64_t attn_params, dense_ffn_params, expert_params, shared_params;
  int64_t router_params, lm_params;       /* lm_params: the logits matmul */
  /* weight bytes, scales included (model_weight_bytes), per layer or whole */
  int64_t b_attn, b_norms, b_dense_ffn, b_expert, b_shared, b_router;
  int64_t b_embed, b_lm;                  /* b_lm: bytes the logits matmul reads */
  int64_t act_bytes;                      /* bytes of one activation element */
  int64_t kv_bytes_token;          /* whole model, one copy */
  int64_t kv_bytes_token_layer;    /* one layer, one copy */
  /* FLOPs of attention per (query, key) pair per layer, all heads */
  int64_t attn_pair_flops_prefill, attn_pair_flops_decode;
  /* hardware */
  double peak_flops, hbm_bw;
  int64_t gpu_mem;                 /* B_memory comes from the memory ledger (docs/cost-model.md) */
  int64_t domain, gpus_total;
  double up_bw, up_lat, out_bw, out_lat;
  double up_nvls;                  /* B/s: NCCL's NVLS all-reduce bus bandwidth in the domain, 0: none */
  /* workload and SLOs */
  int64_t tin, tout;
  double rate;                     /* req/s, 0 when not given */
  double concurrency;              /* requests in flight (closed loop), 0 when not given */
  double requests;                 /* requests a finite closed-loop run sends, 0: steady state */
  int64_t draft;                   /* speculative tokens proposed per step, 0: none */
  double accepted;                 /* tokens emitted per step and request, >= 1 */
  double prefix_hit;               /* share of the prompt found in the prefix cache */
  /* aggregated pools: the engine's scheduler (engines.h, engine_sched) */
  int64_t chunk_tokens;            /* per-step token budget of one dp rank when prompt
                                      chunks ride in decode steps; 0: the engine
                                      alternates prefill and decode steps */
  int64_t new_tokens;              /* prompt tokens a prefill computes (tin less the
                                      prefix-cache hit, at least 1) */
  double chunk_ctx;                /* mean context a prompt-chunk token attends to */
  bool overlap;                    /* the engine hides step_overhead_s behind the GPU's step */
  double overlap_exposed_s;        /* what the overlap still leaves exposed a step (engines.h) */
  int64_t sync_gpn;                /* an engine larger than this many GPUs runs
                                      synchronously whatever `overlap` says (vLLM
                                      0.19 under Ray, engine_vllm_ray_sync_gpn); 0: none */
  bool eager_prefill;              /* the engine runs a prefill without CUDA graphs */
  bool whole_prompts;              /* aggregated steps carry whole prompts beside the decodes (engines.h) */
  int64_t whole_tokens;            /* their per-step token budget (max_num_tokens), 0 when unknown */
  int64_t graph_bs[2];             /* SGLang's CUDA-graph batch at --tp-size below 4 and
                                      from 4 (mem_engine_sglang_graph_bs); 0: not known */
  int64_t prefill_tokens;          /* most prompt tokens one prefill pass takes (the
                                      engine's budget; see limits_per_dp), 0: one
                                      prompt a pass */
  int64_t run_seqs;                /* the engine's most running sequences (serving.max_num_seqs
                                      or its default), 0: none known */
  bool limits_per_dp;              /* run_seqs and prefill_tokens are each dp rank's, not the
                                      instance's (engine_limits_per_dp) */
  double slo_ttft, slo_tpot;       /* s */
  CostConsts k;
  SrcLoc loc;                      /* where to report model-wide problems */
} CostModel;

/* Derives m from s. Reports E0506 when a hardware figure the model needs
 * is missing, E0501 on overflow; returns false then. */
bool cost_model_init(Diags *d, const Spec *s, const CostConsts *k,
                     CostModel *m);

LinkClass cost_link_class(const CostModel *m, int64_t span);
/* Per-GPU per-direction bandwidth (bytes/s, efficiency applied) and
 * per-step latency (s) of a link class. */
double cost_link_bw(const CostModel *m, LinkClass c);
double cost_link_lat(const CostModel *m, LinkClass c);

/* MoE dispatch and combine of one MoE layer (docs/cost-model.md, "MoE
 * dispatch and combine"): `tokens` tokens one rank sends to the ep group
 * and gets back. Each token goes once to each distinct destination GPU
 * over scale-up and once to each distinct remote node over scale-out (at
 * most min(top_k, nodes), fewer under group-limited routing); the two
 * links run at once, so each phase takes the slower of the two. */
typedef struct {
  double bytes_up, bytes_out; /* dispatch + combine, per rank */
  double nodes, remote_nodes, gpus; /* expected destinations of one token */
  double time;                /* s, dispatch + combine */
} CostEpComm;
void cost_ep_comm(const CostModel *m, const CostLayout *l, double tokens, CostEpComm *out);
/* cost_ep_comm is linear in the tokens: the figures of one token (time:
 * seconds per token, lat: the fixed part), computed once per layout. */
typedef struct {
  CostEpComm one;  /* bytes and time of one token, without latency */
  double lat;      /* s per dispatch + combine */
} CostEpRate;
void cost_ep_rate(const CostModel *m, const CostLayout *l, CostEpRate *out);
double cost_ep_time(const CostEpRate *r, double tokens);

/* GEMM M alignment of a contiguous grouped GEMM: each expert's rows are
 * padded to this (DeepGEMM, get_m_alignment_for_contiguous_layout()). */
#define COST_GEMM_M_ALIGN 128
/* Rows the grouped GEMM of one MoE layer runs on one rank holding `local`
 * experts when the ep group routes `tokens` tokens: the experts touched
 * times their tokens (times expert_imbalance), padded to COST_GEMM_M_ALIGN. */
double cost_expert_rows(const CostModel *m, int64_t local, int64_t tokens);

/* Ring all-reduce of `bytes` over n ranks: 2(n-1)/n * bytes / bw plus
 * 2(n-1) steps of latency. 0 when n <= 1. */
double cost_ring_allreduce(double bytes, int64_t n, double bw, double lat);
/* The all-reduce an engine runs over n ranks (docs/cost-model.md,
 * "Collectives"): inside a scale-up domain, at 2, 4, 6 or 8 ranks and
 * below 8 MiB, the one-stage or two-stage custom all-reduce; else the
 * ring. */
double cost_allreduce(double bytes, int64_t n, LinkClass c, double bw, double lat, double nvls);
/* NCCL's all-reduce over NVLink SHARP (docs/cost-model.md, "Collectives"):
 * NCCL's NVLS latency (src/graph/tuning.cc) plus 2(n-1)/n * bytes at the
 * domain's NVLS bus bandwidth busbw (B/s). */
#define COST_NVLS_LAT_S 25e-6
double cost_nvls_allreduce(double bytes, int64_t n, double busbw);
/* The NVLS bus bandwidth of link class c: the domain's (0 when it has
 * none) inside it, 0 over the NIC. */
double cost_link_nvls(const CostModel *m, LinkClass c);
/* All-to-all where each rank sends `bytes` spread evenly over n ranks:
 * (n-1)/n * bytes / bw plus one latency. 0 when n <= 1. */
double cost_all_to_all(double bytes, int64_t n, double bw, double lat);

/* Weight bytes one GPU of the heaviest pp stage holds (stage layers from
 * cost_stage_layers), embedding and lm_head included where they live.
 * -1 on overflow. */
int64_t cost_weight_bytes_gpu(const CostModel *m, const CostLayout *l);
/* KV bytes one token of one request occupies on one GPU of the heaviest
 * stage: GQA keeps max(1, kv_heads/tp) heads, MLA the whole latent; dcp
 * splits tokens, so the figure is divided by dcp (rounded up). -1 on
 * overflow. */
int64_t cost_kv_bytes_token_gpu(const CostModel *m, const CostLayout *l);
/* Layers of the heaviest stage when the last stage also runs the lm_head
 * (cost_pp_rebalance with the tail's share beta). */
int64_t cost_stage_layers(const CostModel *m, int64_t pp, double *beta_out);

/* Prefill of one request of m->tin tokens on one instance. */
typedef struct {
  double latency;      /* s, one request through every stage */
  double stage;        /* s, the slowest stage: one new batch per stage time */
  double mu;           /* requests/s one instance completes (dp per stage time) */
  double tok_s_gpu;    /* input tokens/s per GPU */
  double compute, comm_tp, comm_cp, comm_ep, comm_pp; /* s, per request, all stages */
  double memory;       /* s, the stage's weights read once from HBM (all stages) */
  double overhead;     /* s, per request: kernel-boundary stalls and exposed engine CPU work */
  double cp_imbalance; /* max/mean attention work over cp ranks (zigzag: 1) */
} CostPrefill;
bool cost_prefill(const CostModel *m, const CostLayout *l, CostPrefill *out);

/* One decode step of an instance holding B requests at mean context ctx
 * (tokens); pp micro-batches of ceil(B/pp) requests, each split over dp. */
typedef struct {
  double tpot;        /* s per output token: step / accepted tokens */
  double step;        /* s: the stages add up, plus pp boundary sends and drafts */
  double compute, memory, comm; /* s, summed over the stages */
  double comm_tp, comm_ep, comm_pp; /* s, comm by group kind (tp includes dcp) */
  double overhead;    /* s, fixed per step: the kernel-boundary stalls of every layer
                       * (kernel_stall_s) and the engine's exposed CPU work */
  int64_t bytes_gpu;  /* HBM bytes one GPU reads per step of its stage */
  int64_t flops_gpu;  /* FLOPs one GPU runs per step of its stage */
  bool memory_bound;  /* roofline: bytes time >= FLOPs time */
} CostDecode;
bool cost_decode_step(const CostModel *m, const CostLayout *l, int64_t B,
                      double ctx, CostDecode *out);

/* cost_decode_step in two parts, for callers that evaluate one layout at
 * many batches (the search's batch bisection): cost_decode_prep computes
 * what does not depend on B once (weight bytes per layer, KV bytes per
 * token, the link of each group), cost_decode_at one batch from it.
 * cost_decode_step is exactly prep + at, so the figures are identical. */
typedef struct {
  CostLayout l;
  int64_t c, kvr;                      /* context tokens, KV bytes/token/layer/rank */
  int64_t w_dense, w_moe, w_expert;    /* weight bytes a GPU reads per layer */
  int64_t p_dense, p_moe, local, tpdp; /* parameters, local experts, tp*dp */
  CostEpRate ep;                       /* dispatch/combine per token */
  double tp_bw, tp_lat, pp_bw, pp_lat;
  double tp_nvls;                      /* cost_link_nvls of the tp group's class */
  LinkClass tp_class;
  double lm_bytes;
  double stalls;                       /* s, kernel-boundary stalls of one forward pass */
  int64_t graph_bs;                    /* the largest decode batch of one scheduler the
                                          engine's CUDA graphs cover; 0: none known */
  double eager_issue;                  /* s, CPU time to issue one eager forward pass */
} CostDecodePrep;
bool cost_decode_prep(const CostModel *m, const CostLayout *l, double ctx, CostDecodePrep *p);
/* The largest decode batch of one scheduler the engine's CUDA graphs
 * cover for layout l (docs/cost-model.md, "Eager decode"): SGLang's
 * cuda_graph_max_bs at its --tp-size, tp when the pool runs no attention
 * dp. With attention dp the releases compare different batches (the sum
 * over the dp ranks, or the largest), so none is priced: 0. 0 too for
 * every other engine. */
int64_t cost_graph_bs(const CostModel *m, const CostLayout *l);
/* The decode requests one scheduler (a dp rank's micro-batch) runs when
 * an instance of pp stages and dp ranks holds B: ceil(ceil(B / pp) / dp). */
int64_t cost_sched_batch(int64_t B, int64_t pp, int64_t dp);
/* The CPU time an eager forward pass of layout l takes to issue its
 * kernels, the collectives' included (docs/cost-model.md, "Eager
 * prefill"). */
double cost_eager_issue(const CostModel *m, const CostLayout *l);
bool cost_decode_at(const CostModel *m, const CostDecodePrep *p, int64_t B, CostDecode *out);
/* One step at batch B whose every dp rank (per micro-batch) also runs
 * `chunk` prompt tokens of a chunked prefill: they go through every linear
 * layer, collective and expert with the decode tokens, attend to
 * m->chunk_ctx tokens of their prompt (whose KV the step reads once per
 * layer) and produce no logits. cost_decode_at is chunk 0. */
bool cost_step_at(const CostModel *m, const CostDecodePrep *p, int64_t B, int64_t chunk,
                  CostDecode *out);
/* The same step with the prompt tokens spread unevenly over the dp ranks:
 * the busiest rank's `slow` tokens set its attention, linears, collectives
 * and dispatch, the ranks' `mean` the experts they share
 * (docs/cost-model.md, "The busiest dp rank"). cost_step_at is slow =
 * mean = chunk. */
bool cost_step_ranks(const CostModel *m, const CostDecodePrep *p, int64_t B, int64_t slow,
                     int64_t mean, CostDecode *out);

/* Time to move one request's KV (m->tin tokens) from a prefill instance to
 * a decode instance over scale-out: each of min(prefill GPUs, decode GPUs)
 * links carries its share, plus one latency. */
double cost_kv_transfer(const CostModel *m, const CostLayout *pre,
                        const CostLayout *dec);

/* ---- one deployment: the evaluation `search` and `compile` share -------- */

/* The mean context of a decode step: the whole prompt and half the output
 * (docs/cost-model.md, "Decode"). */
double cost_decode_ctx(const CostModel *m);

/* The headroom rho the pools are planned at: the spec's `search.headroom`
 * (in (0, 1]) when given, else 0.9. */
double cost_headroom(const Spec *s);

/* One instance of a pool, whatever its replica count: the prefill figures
 * (prefill and both), and for decode and both the batch B the engine is
 * configured for: the largest B <= min(B_memory, B_cap) whose TPOT (both:
 * effective TPOT with prefill stalls at the planned utilisation) meets the
 * SLO. docs/cost-model.md, "Batch bounds" and "Aggregated instances". */
typedef struct {
  PoolRole role;
  CostLayout lay;
  CostPrefill pre;    /* prefill, both */
  int64_t bmem, cap;  /* B_memory (from the caller's ledger) and B_cap */
  int64_t graphs;     /* the largest B the engine's CUDA graphs cover, 0: no limit known */
  int64_t batch;      /* B; 1 when even batch 1 misses the SLO (slo_ok false) */
  bool slo_ok;        /* batch 1 meets the (effective) TPOT SLO */
  double tpot;        /* decode: TPOT(B); both: TPOT(B) / (1 - u_p) at rho */
  double dec_tok_s;   /* B / TPOT(B): output tokens/s at full batch */
  double rcap, rho;   /* both: R_cap at B and the planned utilisation */
  bool ttft_bound;    /* both: rho is the TTFT cap, below the headroom */
} CostInstance;

/* Evaluates one instance of role `role` with B_memory bmem (decode and
 * both; the memory ledger's figure, docs/memory.md) at headroom rho.
 * *guess (may be NULL) is a batch to start the bisection from, and is set
 * to the answer: the search passes the answer of the layout it evaluated
 * just before (same result, fewer steps). Returns false when the cost
 * model cannot evaluate the layout (an overflow, no request fits: bmem < 1
 * for decode or both). */
bool cost_instance_eval(const CostModel *m, PoolRole role, const CostLayout *l, int64_t bmem,
                        double rho, int64_t *guess, CostInstance *out);

/* A deployment: one `both` pool, or a prefill and a decode pool, each with
 * its instance evaluation and replica count, planned at headroom rho, at
 * the spec's offered load (m->rate; 0: the most the pools serve). */
typedef struct {
  size_t npools;               /* 1: aggregated; 2: pools[0] prefill, pools[1] decode */
  const CostInstance *inst[2];
  int64_t replicas[2];
  double rho;
} CostDeploy;

/* Requests/s one instance of each pool serves at its planned utilisation:
 * prefill rho_p * mu with rho_p = min(rho, rho_ttft) (ttft_bound when the
 * TTFT cap is lower), decode rho * B / (TPOT * T_out); aggregated
 * rho_a * R_cap. What the search sizes x and y with. */
typedef struct {
  double r[2];                 /* per instance, pools' order */
  double kv_transfer;          /* s, disaggregated */
  bool ttft_bound;             /* the prefill utilisation is the TTFT cap */
} CostRates;
void cost_deploy_rates(const CostModel *m, const CostDeploy *dp, CostRates *out);

/* The evaluation of a deployment (docs/cost-model.md, "One evaluation"):
 * served = min(x r_p, y r_d) (aggregated x r_a), capped at the offered
 * load; the decode batch each instance holds at that load by Little's law
 * (at most B) and the TPOT at it; the queue and TTFT at the prefill
 * utilisation; goodput per GPU when both SLOs hold. */
typedef struct {
  CostRates rates;
  double served;        /* req/s */
  double tok_s;         /* output tokens/s */
  double util;          /* prefill (aggregated: instance) utilisation */
  double queue, ttft, tpot; /* s */
  double prefill;       /* s: one prompt's prefill at the served load (TTFT less
                         * queue and KV transfer) */
  int64_t batch;        /* decode requests per instance at the served load (closed
                         * loop: at most the requests in flight per instance) */
  int64_t gpus;         /* all instances */
  bool load_served;     /* m->rate > 0 and served == m->rate; or m->concurrency >
                         * 0 and the pools serve the closed loop below their most */
  bool prefill_limited; /* disaggregated: x r_p <= y r_d */
  bool feasible;        /* TTFT and TPOT within the SLOs */
  double goodput_gpu;   /* tok_s / gpus when feasible, else 0 */
} CostDeployEval;
bool cost_deploy_eval(const CostModel *m, const CostDeploy *dp, CostDeployEval *out);

/* The share of the steady closed loop's rate that a run of `requests`
 * requests at `concurrency` in flight serves on average, the loop's drain
 * at its end included (docs/cost-model.md, "A finite run"); 1 when either
 * is 0 (a steady loop). */
double cost_finite_run_share(double concurrency, double requests);

/* The mean number of prefill passes a prompt waits for, its own included,
 * when n prompts arrive at once and each pass takes k of them in order
 * (the start of a finite run, docs/cost-model.md "A finite run"). */
double cost_mean_passes(double n, double k);

/* Communication kinds of the per-phase split (the plan's order, plan.h). */
typedef enum { COST_COMM_TP, COST_COMM_CP, COST_COMM_EP, COST_COMM_PP, COST_COMM__N } CostCommKind;

/* One phase of one pool's instance (docs/plan.md, "estimates"): its time
 * (prefill: one request's latency; decode: one step at the batch used),
 * tokens/s per GPU, and the time split into compute, HBM reads and
 * communication by group kind. */
typedef struct {
  double time, tok_s_gpu, compute, hbm, overhead;
  double comm[COST_COMM__N];
} CostPhase;

/* The per-phase figures of one pool of an evaluated deployment: prefill
 * for prefill and both pools, decode for decode and both pools at the
 * batch in flight (ev->batch), and the batch to configure (B). */
typedef struct {
  bool has_prefill, has_decode;
  CostPhase prefill, decode;
  int64_t batch_used, max_batch;
} CostPoolPhases;
bool cost_pool_phases(const CostModel *m, const CostInstance *in, const CostDeployEval *ev,
                      CostPoolPhases *out);

/* M/D/1 queue (Poisson arrivals, deterministic service at rate mu):
 * Pollaczek-Khinchine mean wait Wq = rho / (2 mu (1 - rho)). Infinity when
 * rho >= 1. */
double cost_md1_wait(double rho, double mu);
/* The largest rho in [0, 1) whose M/D/1 wait is at most w:
 * rho = 2 mu w / (1 + 2 mu w); 0 when w <= 0. */
double cost_md1_max_rho(double mu, double w);

/* ---- published formulas the search uses --------------------------------- */

/* xPyD: prefill and decode GPUs in the ratio (tin/P) : (tout/D), P and D in
 * tokens/s per GPU, reduced to the smallest integers x:y with y, x <=
 * maxden (best rational approximation otherwise). False when an argument
 * is not positive. */
bool cost_xpyd_ratio(double tin, double tout, double P, double D,
                     int64_t maxden, int64_t *x, int64_t *y);

/* The attention tp that minimises the bytes one GPU reads per decode step
 * for MLA: W_mla/t (weights split over t) + KV_total*t/P (each of the P/t
 * attention replicas holds 1/(P/t) of the KV): TP* = sqrt(W_mla * P /
 * KV_total). */
double cost_attn_tp_opt(double w_mla, double gpus, double kv_total);

/* Pipeline split when the last stage also carries extra work (the lm_head,
 * or a speculative-decoding draft module): the first p-1 stages take
 * round(layers / (p - 1 + beta)) layers each and the tail the rest, about
 * beta of a full stage. 61 layers, p = 4, beta = 0.5 -> 17, 17, 17, 10.
 * out has p entries; false when no split gives every stage >= 1 layer. */
bool cost_pp_rebalance(int64_t layers, int64_t p, double beta, int64_t *out);

/* Causal attention work of one cp rank in chunk-units: the sequence is cut
 * into 2n chunks, chunk j (0-based) attends to j+1 chunks. Zigzag gives
 * rank r chunks r and 2n-1-r: 2n+1 units on every rank; contiguous gives
 * rank r chunks 2r and 2r+1: 4r+3 units, 4n-1 on the last rank. */
int64_t cost_cp_chunk_units(int64_t n, int64_t rank, bool zigzag);
/* max over ranks / mean of cost_cp_chunk_units. */
double cost_cp_imbalance(int64_t n, bool zigzag);

/* Expected routed experts of one MoE layer that a GPU holding `local` of
 * `experts` experts must read when `tokens` tokens each pick top_k
 * (uniform routing): local * (1 - (1 - top_k/experts)^tokens). */
double cost_experts_touched(int64_t experts, int64_t top_k, int64_t local,
                            int64_t tokens);

/* A non-negative count computed in double, as int64: rounded up, 0 below
 * zero or for NaN, INT64_MAX where the double is past it (converting such
 * a double is undefined behaviour). */
int64_t cost_ceil_i64(double x);

#endif
