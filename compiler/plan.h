/*
 * plan.h: the plan file as C data, shared by the compiler (`rankplan
 * explain`) and the runtime (`rankrun`). docs/plan.md is the reference for
 * every key; schemas/plan.schema.json is its machine-readable form.
 *
 * plan_load() reads a plan written by `rankplan compile`, checks it and
 * returns it as flat arrays, so that a runtime needs no arithmetic of its
 * own: each rank's node, device, coordinates, group ids and shards are
 * explicit. The loader depends on util.c, reshard_check.c and libc only (it
 * reads JSON with its own small reader): no libyaml, no Lua, no Jansson.
 *
 * Invariants of a Plan returned by plan_load():
 *  - format is "rankplan.plan/1";
 *  - ranks[] is sorted by rank and groups[] by id; in a whole plan (not a
 *    --split-by-node file) ranks[i].rank == i, groups[i].id == i and
 *    nranks == world_size;
 *  - every rank belongs to exactly one group of each kind except
 *    embedding, and to at most one embedding group; ranks[i].groups[k] is
 *    that group's id, or -1 when the rank is in no group of kind k
 *    (embedding only);
 *  - group membership agrees with the members' coordinates: members of a
 *    tp group share every coordinate but tp, and so on for each kind (see
 *    plan_kind_fixes()), and every member lists the group under its kind;
 *  - ranks[i].node < nnodes and ranks[i].device < nodes[node].gpus; a
 *    node's ranks are ascending, local_rank is a rank's index among them,
 *    and no two ranks share a device;
 *  - each pool's ranks are [first_rank, first_rank + nranks);
 *  - coordinates name one rank each: (tp, cp, dp, pp) per instance,
 *    (etp, ep, edp) per instance and pp stage, dcp = tp mod dcp;
 *  - shards and KV bytes are those of one model: shard.layers is the pp
 *    stage's range of the pool's layer partition, shard.kv_heads the tp
 *    index's heads, kv.bytes_per_token those layers x heads x one head's
 *    bytes (the same for every rank), kv.blocks what kv_cache holds;
 *  - memory is one ledger per pool and pp stage, capacity the same on
 *    every rank, and with kv_cache > 0 the other five entries add up to
 *    capacity;
 *  - a pool's expert_map holds every expert id 0 .. E-1 at least once;
 *  - kv_reshard holds one pair per (prefill pool, decode pool), each with
 *    transfers that reshard_check.c proves an exact cover of the decode
 *    replica's KV, and request.bytes their bytes at input_tokens.
 */
#ifndef RANKPLAN_PLAN_H
#define RANKPLAN_PLAN_H

#include "util.h"

#define PLAN_FORMAT "rankplan.plan/1"

/* Loader caps (docs/plan.md, "Loader caps"). The largest plan the project
 * benchmarks, 131,072 ranks, is 199.1 MB and loads in 1.1 GB
 * (docs/benchmarks.md); 512 MiB leaves room for 2.5 times that while
 * keeping the loader's peak memory near 3 GB. A longer file is refused
 * before it is parsed. */
#define PLAN_MAX_BYTES ((size_t)512 << 20)
/* world_size of a --split-by-node file, whose ranks[] holds one node only:
 * the world group's span is expanded to world_size ranks, so it needs a
 * bound the document itself cannot give. A whole plan's world_size is its
 * ranks[] length. 2^22 = 4,194,304 ranks is 32 times the largest
 * benchmarked plan; the span then takes at most 16 MiB. */
#define PLAN_MAX_WORLD_SPLIT ((int64_t)1 << 22)

/* Process-group kinds, in the order the plan lists a rank's groups. The
 * first eleven are Megatron-Core groups (dense, then decoupled expert);
 * dcp groups consecutive tp ranks (decode context parallel); embedding holds
 * the first and last pp stage; instance is one engine replica; world is
 * every rank of the plan. */
typedef enum {
  GK_TP,
  GK_CP,
  GK_DP,
  GK_PP,
  GK_TP_CP,
  GK_DP_CP,
  GK_TP_PP,
  GK_TP_DP_CP,
  GK_EP,
  GK_ETP,
  GK_EDP,
  GK_TP_EP,
  GK_DCP,
  GK_EMBEDDING,
  GK_INSTANCE,
  GK_WORLD,
  GK__COUNT
} GroupKind;

/* Coordinates of a rank inside its instance. */
typedef enum {
  CO_TP,
  CO_CP,
  CO_DP,
  CO_PP,
  CO_EP,
  CO_ETP,
  CO_EDP,
  CO_DCP,
  CO__COUNT
} CoordKind;

/* Shards a rank holds, each a half-open range [start, end). */
typedef enum { SH_LAYERS, SH_Q_HEADS, SH_KV_HEADS, SH_EXPERTS, SH_VOCAB, SH__COUNT } ShardKind;

/* Memory ledger entries, bytes. */
typedef enum {
  MEM_WEIGHTS,
  MEM_KV_CACHE,
  MEM_ACTIVATIONS,
  MEM_WORKSPACE,
  MEM_RESERVED,
  MEM_CAPACITY,
  MEM__COUNT
} MemKind;

/* Names as they appear in the plan ("tp-cp", "kv_heads", ...). */
const char *plan_kind_name(GroupKind k);
const char *plan_coord_name(CoordKind c);
const char *plan_shard_name(ShardKind s);
const char *plan_mem_name(MemKind m);

/* ---- per-pool estimates (docs/plan.md, "estimates") ---------------------- */

/* Communication kinds the per-phase split names, in the plan's order. */
typedef enum { PEC_TP, PEC_CP, PEC_EP, PEC_PP, PEC__COUNT } PlanEstComm;
const char *plan_est_comm_name(PlanEstComm k);

/* One phase of one pool's instance: its time (prefill: one request;
 * decode: one step at the batch in flight), tokens/s per GPU, and the time
 * in compute, HBM reads, per-step engine overhead and communication by
 * group kind (ms). */
typedef struct {
  double time_ms, tok_s_per_gpu, compute_ms, hbm_ms, overhead_ms;
  double comm_ms[PEC__COUNT];
} PlanPhaseEst;

/* The estimates of one pool: prefill for prefill and both pools, decode
 * for decode and both pools, with the batch in flight and the batch to
 * configure as the engine's most concurrent sequences. */
typedef struct {
  size_t pool;              /* index into the plan's pools */
  bool has_prefill, has_decode;
  PlanPhaseEst prefill, decode;
  int64_t batch, max_batch; /* decode: requests in flight per instance, B */
  int64_t graph_bs;         /* decode: the largest batch of one scheduler the engine's
                               CUDA graphs cover (cost_graph_bs), 0: none known */
  double eager_ms;          /* the CPU time of issuing one eager forward pass
                               (cost_eager_issue); graph_bs and eager_ms are not
                               written to the plan */
} PlanPoolEst;
#define PLAN_EST_POOLS 2
/* Looks a group kind up by its plan name; false when unknown. */
bool plan_kind_parse(const char *s, GroupKind *out);
/* Whether all members of one group of kind k must share coordinate c.
 * Dense kinds fix the dense coordinates (tp, cp, dp, pp) they do not span;
 * expert kinds fix the expert coordinates (etp, ep, edp, pp) they do not
 * span; dcp fixes cp, dp and pp; embedding fixes tp, cp and dp; instance
 * and world fix nothing. */
bool plan_kind_fixes(GroupKind k, CoordKind c);

typedef struct {
  int32_t node;  /* index == position in nodes[] */
  int32_t gpus;  /* local GPUs (devices 0 .. gpus-1) */
  int32_t first_rank, nranks; /* ranks placed here: listed in node_ranks */
} PlanNode;

typedef struct {
  char *name;
  char *role;                /* "prefill" | "decode" | "both" */
  int64_t replicas;
  int64_t size[CO__COUNT];   /* tp, cp, dp, pp, ep, etp, edp, dcp */
  int64_t instance_size;     /* tp * cp * dp * pp */
  int64_t first_rank, nranks;
  int64_t *layer_partition;  /* size[CO_PP] entries: layers per pp stage */
  double memory_fraction;    /* optional: the pool's SGLang or TensorRT-LLM memory fraction flag; 0: none */
  /* The optional `expert_map` (an expert_placement hook ran): ep rank e of
   * every instance holds the routed experts expert_map[e * expert_slots ..
   * (e + 1) * expert_slots), ascending, none twice. expert_slots 0 and
   * expert_map NULL without one: then ranks' shard.experts says it. */
  int64_t expert_slots;
  int32_t *expert_map;
} PlanPool;

typedef struct {
  int32_t rank, node, local_rank, device, pool, instance;
  int32_t coords[CO__COUNT];
  int32_t groups[GK__COUNT];       /* group id per kind, -1: none */
  int64_t shard[SH__COUNT][2];     /* [start, end) */
  int64_t memory[MEM__COUNT];      /* bytes */
  int64_t kv_bytes_per_token, kv_block_tokens, kv_blocks;
  int64_t kv_draft_bytes_per_token; /* of kv_bytes_per_token: MTP modules and draft model (optional, 0) */
} PlanRank;

typedef struct {
  int32_t id;
  GroupKind kind;
  int32_t pool, instance; /* -1 for the world group */
  int32_t n;
  int32_t *ranks;         /* global ranks, in the plan's order */
} PlanGroup;

/* One KV transfer of kv_reshard[] (docs/plan.md): src and dst are ranks
 * relative to the serving attention replica of the prefill and decode
 * instance. tokens is "all", a list of ranges, or a stride class; a range
 * list may carry a stride class too (stride > 1), and then a token must be
 * in both. stride is 1 and offset 0 when the plan gives none. */
typedef enum { PT_ALL, PT_RANGES, PT_STRIDE } PlanTokensKind;
typedef struct PlanTransfer {
  int64_t src, dst;
  int64_t layers[2], kv_heads[2];
  PlanTokensKind tokens;
  size_t nranges;
  int64_t (*ranges)[2];     /* PT_RANGES: [start, end) */
  int64_t stride, offset;   /* tokens t with t % stride == offset (1, 0: all) */
  int64_t bytes_per_token;
} PlanTransfer;

typedef struct {
  char *prefill, *decode;   /* pool names */
  size_t ntransfers;
  PlanTransfer *transfers;
  /* One request at the workload's input_tokens (has_request false when the
   * spec gave none): bytes in all and per link class, and the time per
   * class and overall, as reshard.c's rs_map_cost() computed them. */
  bool has_request;
  int64_t input_tokens, bytes, bytes_scale_up, bytes_scale_out;
  double time_scale_up_ms, time_scale_out_ms, time_ms;
} PlanReshard;

typedef struct {
  char *code, *severity, *message;
} PlanDiag;

/* The nominal hardware figures the cost model used (docs/plan.md,
 * `hardware`), so that a runtime can turn a measured bandwidth into the
 * efficiency constants of a calibration file. Bandwidths are bytes/s per
 * GPU per direction; 0 means the spec gave none (the plan holds null).
 * Latencies are seconds, has_* false when the spec gave none (the cost
 * model then uses its calibration constants). */
typedef struct {
  int64_t scale_up_domain;     /* GPUs per scale-up domain, >= 1 */
  double hbm_bandwidth;        /* bytes/s per GPU */
  double scale_up_bandwidth, scale_out_bandwidth;
  bool has_scale_up_latency, has_scale_out_latency;
  double scale_up_latency_s, scale_out_latency_s;
} PlanHardware;

/* The optional `launch` key (docs/plan.md): what the launch targets need
 * beyond the ranks, present when the spec named an engine. Strings hold no
 * control characters (the loader checks); host names only letters,
 * digits, `.` and `-`. Counts of 0 mean unset (the engine's default). */
typedef struct {
  bool present;
  char *engine, *engine_version;   /* "vllm" | "sglang" | "trtllm"; the catalog entry's version */
  char *source, *revision, *served_model_name;  /* NULL when unset */
  int64_t port, max_model_len, max_num_seqs, max_num_batched_tokens, kv_block;
  char *kv_cache_dtype, *activations_dtype, *kv_transfer;
  char *sampler;                   /* serving.sampler; NULL: the engine's own choice */
  char *attention_backend;         /* the backend the plan's KV pages and dtype follow; NULL: the engine's choice */
  int overlap_schedule;            /* serving.overlap_schedule: 1 on, 0 off, -1 the engine's default */
  int chunked_prefill;             /* serving.chunked_prefill: 1 on, 0 off, -1 the engine's default */
  int64_t cuda_graph_max_bs;       /* serving.cuda_graph_max_bs; 0: the engine's default */
  double gpu_memory_utilization;   /* in (0, 1]: the fraction the ledger was planned with */
  bool moe;                        /* the model has MoE layers */
  size_t nhostnames;               /* 0: none given */
  char **hostnames;
  char *hostname_pattern, *image;  /* NULL when unset */
  bool amd;                        /* launch.gpu_vendor "amd"; absent: NVIDIA GPUs */
} PlanLaunch;

typedef struct Plan {
  char *path;
  char *compiler;           /* version that wrote it */
  char spec_sha256[65];
  int64_t world_size;
  PlanHardware hardware;
  PlanLaunch launch;
  size_t nnodes;
  PlanNode *nodes;
  int32_t *node_ranks;      /* ranks grouped by node: nodes[n].first_rank indexes here */
  size_t npools;
  PlanPool *pools;
  int64_t nranks;
  PlanRank *ranks;
  int64_t ngroups;
  PlanGroup *groups;
  size_t nreshard;
  PlanReshard *reshard;
  /* estimates; has_estimates false when the plan holds null */
  bool has_estimates;
  double ttft_ms, tpot_ms, throughput_tok_s, goodput_tok_s_per_gpu;
  size_t nest_pools;
  PlanPoolEst est_pools[PLAN_EST_POOLS];
  size_t ndiags;
  PlanDiag *diags;
  bool partial;             /* a --split-by-node file: only one node's ranks */
  int32_t partial_node;
} Plan;

/* Reads and checks a plan file. spec_path, when not NULL, is the spec the
 * plan must have been compiled from (its SHA-256 must match spec_sha256).
 * On failure returns NULL and sets *err to a message naming the place, like
 * "plan.json: ranks[12].node: expected an integer, got a string" (free it
 * with free()). */
Plan *plan_load(const char *path, const char *spec_path, char **err);

/* Same from bytes already read; name is the path used in messages. */
Plan *plan_load_mem(const char *name, const char *text, size_t len,
                    const char *spec_path, char **err);

void plan_free(Plan *p);

/* s as text safe to print on a terminal (free it with free()): control
 * characters (C0, DEL, and C1 written in UTF-8) and bytes that are not
 * UTF-8 become \xHH, one per byte, so a pool name or message from a plan
 * cannot move the cursor, clear the screen or retitle the window. The
 * loader's messages and explain's text views print plan strings this way. */
char *plan_escape(const char *s);

/* The rank's group of kind k, or NULL when it has none. In a split plan a
 * rank not on this node has no entry: r must be a rank the plan lists
 * (plan_find_rank). */
const PlanGroup *plan_rank_group(const Plan *p, const PlanRank *r, GroupKind k);

/* The entry for global rank r, or NULL when the plan does not hold it (a
 * split plan holds only its node's ranks). */
const PlanRank *plan_find_rank(const Plan *p, int64_t r);

/* Global rank of relative rank rel (t + tp * (c + cp * s), docs/reshard.md)
 * of the attention replica (instance inst, attention-dp rank dp) of pool
 * pool, found from the ranks' coordinates, so independent of the rank
 * order; -1 when the plan holds no such rank. The KV executor and
 * `rankplan render` map kv_reshard transfers with it (reshard_plan.c). */
int64_t plan_replica_rank(const Plan *p, int pool, int64_t inst, int64_t dp, int64_t rel);

/* ---- explain.c: `rankplan explain` ------------------------------------ */

typedef struct {
  bool summary;     /* the plan at a glance: pools, nodes, groups, warnings */
  bool ranks;       /* one line per rank (the default with no other view) */
  bool memory;      /* the memory ledger per pool and pp stage */
  bool reshard;     /* kv_reshard transfers (reshard.h prints them) */
  bool costs;       /* the per-pool estimates: phases, their split, the batch */
  int64_t tokens;   /* request length for the reshard byte totals; 0: none */
  int64_t rank;     /* >= 0: everything about this rank */
  bool groups;      /* list the groups of kind `kind` */
  GroupKind kind;
  bool json;        /* one JSON document for tools instead of tables */
} ExplainOpts;

/* Prints the views o asks for, in the order summary, ranks, rank, groups,
 * memory, reshard, costs. Returns false (after printing "explain: ..." to err)
 * when o->rank is not in the plan. */
bool plan_explain(FILE *out, FILE *err, const Plan *p, const ExplainOpts *o);
/* `rankplan explain PLAN --reshard`: prints every pair's transfers, one per
 * line: src -> dst, layers, kv heads, tokens, bytes per token and bytes per
 * request of n_tokens_opt tokens (when 0: the plan's own input_tokens, from
 * the pair's `request`; without either, bytes only for range lists), then
 * the pair's bytes and transfer time per link class at input_tokens. */
void plan_explain_reshard(FILE *out, const Plan *p, int64_t n_tokens_opt);
/* `rankplan explain PLAN --costs` (explain_costs.c): per pool, the prefill
 * and decode phases with their compute, HBM, overhead and communication
 * split and the batch to configure; the JSON form is estimates.pools
 * (null when the plan holds no estimates). */
void plan_explain_costs(FILE *out, const Plan *p);
struct json_t *plan_explain_costs_json(const Plan *p);

#endif
