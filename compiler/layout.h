/*
 * layout.h: the Layout IR, output of the layout stage and input of
 * placement, reshard, cost and emit.
 *
 * Stage contract (compiler/layout.c, place.c, partition.c):
 *   input:  a Spec that parsed without errors (spec.h);
 *   output: a Layout: every global rank with its pool, instance and
 *           coordinates, every process group (Megatron-Core RankGenerator
 *           semantics per instance, plus dcp, embedding, instance, world),
 *           each pool's layer partition, and, once placed, each rank's node,
 *           local rank and device.
 * Invariants of a Layout returned by lay_build():
 *   - global rank order is pools in spec order, then replicas, then the
 *     instance's ranks in the spec's `order` (innermost first);
 *   - ranks[r].group[k] is the id of the one group of kind k holding r
 *     (-1 only for embedding, which holds the first and last pp stage);
 *   - group ids are dense, 0 .. ngroups-1, assigned pool by pool, instance
 *     by instance, kind by kind (GroupKind order), group by group in the
 *     generator's order, and the world group is last;
 *   - pools[p].layer_partition sums to the model's layers, one entry per pp
 *     stage.
 * Counts that scale with the cluster are int32 (at most 2^31-1 ranks or
 * group ids; lay_build rejects more); byte counts are int64.
 */
#ifndef RANKPLAN_LAYOUT_H
#define RANKPLAN_LAYOUT_H

#include "plan.h"
#include "spec.h"

/* ---- rank generator (Megatron-Core RankGenerator) ---------------------- */

/* Parallel dimensions in an order string. */
enum { LAY_MAX_DIMS = 5 };

typedef struct {
  int ndims;
  char name[LAY_MAX_DIMS][3];    /* "tp", "cp", "ep", "dp", "pp", innermost first */
  int64_t size[LAY_MAX_DIMS];
  int64_t world;                 /* product of the sizes */
} RankGen;

/* Sets up a generator as Megatron-Core's RankGenerator(tp, ep, dp, pp, cp,
 * order) does: order is a '-'-separated list of tp, cp, ep, dp, pp (any
 * permutation, innermost first); a name missing from order is appended when
 * its size is 1 and is an error otherwise; ep and cp may not both exceed 1.
 * Returns false and sets *err (static text) when the order or sizes are
 * invalid. */
bool lay_rankgen_init(RankGen *g, const char *order, int64_t tp, int64_t ep,
                      int64_t dp, int64_t pp, int64_t cp, const char **err);

/* The groups for token (a '-'-separated subset of the order's names, e.g.
 * "tp-dp"), as generate_masked_orthogonal_rank_groups computes them: the
 * result is ngroups rows of gsize ranks, row-major, in *out (malloc'd,
 * caller frees). Returns false when token names a dimension the order does
 * not have. */
bool lay_rankgen_groups(const RankGen *g, const char *token, int64_t *ngroups,
                        int64_t *gsize, int32_t **out);

/* The coordinate of rank r along dimension name ("tp" ...), 0 when the
 * order lacks it. */
int64_t lay_rankgen_coord(const RankGen *g, int64_t r, const char *name);

/* ---- layer partition (partition.c) ------------------------------------- */

/* Weights the generic engine balances, in any one unit (parameters or
 * bytes): one transformer layer, the input embedding (first stage) and the
 * lm_head plus final norm (last stage). */
typedef struct {
  int64_t layer, embedding, head;
} LayWeights;

/* Splits `layers` layers over `pp` stages into out[0 .. pp-1]:
 *   vllm:    layers/pp each, the remainder one by one to stages pp-2, pp-3,
 *            ... (vllm/distributed/utils.py get_pp_indices);
 *   sglang:  layers/pp each, the remainder to the last stages
 *            (sglang/srt/distributed/utils.py get_pp_indices);
 *   generic: the split minimising the heaviest stage, with w->embedding on
 *            stage 0 and w->head on stage pp-1 (w NULL: no extra weight);
 *            ties go to the lower stage.
 * When pool has an explicit layer_partition it is used instead and checked
 * (length pp, every entry >= 1, sum == layers); problems are reported to d
 * at the partition's position and false is returned. pool may be NULL. */
bool lay_partition(Diags *d, Engine engine, int64_t layers, int64_t pp,
                   const PoolSpec *pool, const LayWeights *w, int64_t *out);

/* ---- the Layout -------------------------------------------------------- */

struct Layout;

/* Replaces pool `pool`'s layer partition with counts (its pp entries, from
 * a layer_partition hook or any other source), after checking it as an
 * explicit `layer_partition` is checked: every entry >= 1, sum == layers.
 * Reports E0308/E0309 at origin and returns false when it does not hold. */
bool lay_set_partition(Diags *d, struct Layout *L, size_t pool, int64_t layers,
                       const int64_t *counts, SrcLoc origin);

typedef struct {
  const char *name;       /* borrowed from the Spec */
  PoolRole role;
  SrcLoc loc;
  int64_t replicas;
  int64_t size[CO__COUNT];/* tp, cp, dp, pp, ep, etp, edp, dcp */
  int64_t instance_size;  /* tp * cp * dp * pp */
  int64_t first_rank, nranks;
  int64_t *layer_partition; /* size[CO_PP] entries */
  int64_t *layer_start;     /* first layer of each stage */
  /* Per pp stage, filled by lay_memory(): bytes by MemKind, and KV. */
  int64_t (*mem)[MEM__COUNT];
  int64_t *kv_bytes_per_token, *kv_draft_bytes_per_token, *kv_blocks;
  int64_t kv_block_tokens;
  /* The memory fraction flag that gives this ledger's KV pool under
   * SGLang or TensorRT-LLM, the least over pp stages (mem_engine_fraction);
   * 0 under the other engines. */
  double memory_fraction;
  /* B_memory: the requests one instance holds in KV memory at input +
   * output tokens, the fewest over its pp stages (requests_fit * dp of the
   * ledger, expert replicas counted). */
  int64_t requests_fit_instance;
  /* The expert_placement hook's map (lay_set_expert_map), or none
   * (expert_slots 0, expert_map NULL): ep rank e of every instance and pp
   * stage holds the routed experts expert_map[e * expert_slots ..
   * (e + 1) * expert_slots), ascending. Replicas of hot experts make
   * expert_slots larger than experts / ep; lay_memory counts their
   * weights. */
  int64_t expert_slots;
  int32_t *expert_map;
} LayPool;

typedef struct {
  int32_t pool, instance;   /* instance: replica index inside the pool */
  int32_t node, local_rank, device; /* -1 until placed */
  int32_t coords[CO__COUNT];
  int32_t group[GK__COUNT];
} LayRank;

typedef struct {
  GroupKind kind;
  int32_t pool, instance;   /* -1 for the world group */
  int32_t n;
  int64_t off;              /* members[off .. off+n) */
} LayGroup;

typedef struct Layout {
  int64_t world_size;
  int64_t nodes, gpus_per_node, domain; /* domain: scale-up domain in GPUs */
  bool allow_tp_across_domain;
  Engine engine;
  size_t npools;
  LayPool *pools;
  int64_t nranks;
  LayRank *ranks;
  int64_t ngroups;
  LayGroup *groups;
  int64_t nmembers;
  int32_t *members;
  bool placed;
  SrcLoc nodes_loc;         /* hardware.nodes, where idle-GPU warnings point */
} Layout;

/* Builds ranks, coordinates, groups and layer partitions from a valid
 * Spec. w gives the generic engine's stage weights (NULL: derived from the
 * model's shapes by lay_default_weights). Reports E03xx and returns NULL on
 * problems (an order the generator refuses, ep*etp not dividing the
 * instance, a bad layer_partition, more ranks than the plan can index). */
Layout *lay_build(Diags *d, const Spec *s, const LayWeights *w);
void lay_free(Layout *L);

/* Parameter counts of one layer, the embedding and the lm_head from the
 * model's shapes (bf16-independent: parameters, not bytes). */
LayWeights lay_default_weights(const Spec *s);

/* The group of kind k holding rank r, or NULL. */
const LayGroup *lay_rank_group(const Layout *L, int64_t r, GroupKind k);

/* Stores the expert -> ep rank map of pool `pool` (CSR as the
 * expert_placement hook returns it: expert e on ep ranks
 * ranks[offsets[e] .. offsets[e+1]), every ep rank holding `slots`
 * experts) as the per-ep-rank lists of LayPool.expert_map. Checks what any
 * map must satisfy (ep matches the pool, ranks in [0, ep), each rank holds
 * exactly `slots` experts, every expert somewhere); an internal error when
 * it does not, since the hook's result was checked before. */
void lay_set_expert_map(Layout *L, size_t pool, int64_t experts, int64_t ep, int64_t slots,
                        const int64_t *offsets, const int64_t *ranks);

/* ---- placement (place.c) ----------------------------------------------- */

/* The default placement: pools in order, each instance on consecutive GPUs
 * starting at the next free GPU; an instance that would split a tp group
 * across scale-up domains (or nodes) starts at the next domain boundary
 * instead, and one that would hold unequal parts of its nodes at the next
 * node when the rest still fits. Fills ranks[].node, device and
 * local_rank. Reports E03xx and returns false when the result does not
 * validate. */
bool lay_place_default(Diags *d, Layout *L);

/* W0702 for each instance the engine's launch files (not generic's)
 * cannot run as it is placed: unequal parts on its nodes, or a vLLM
 * layout over nodes they do not launch (docs/engines.md). */
void lay_place_check_engine(Diags *d, const Spec *s, const Layout *L);

/* Validates a placement whatever produced it (the default, a Lua hook):
 * node[r], gpu[r] for every rank r. Checks every rank sits on exactly one
 * existing GPU (node < nodes, gpu < gpus_per_node), no GPU holds two
 * ranks, and every tp group lies inside one scale-up domain and one node
 * unless deployment.allow_tp_across_domain. origin is where the placement
 * came from (the hook file), used as the diagnostics' position. Reports
 * every problem (capped at a few per kind) and returns false if any. */
bool lay_place_validate(Diags *d, const Layout *L, const int32_t *node,
                        const int32_t *gpu, SrcLoc origin);

/* Validates node/gpu (as above) and stores them in L (local_rank is the
 * rank's index among its node's ranks in global rank order). Warns W0301
 * when the placement leaves GPUs of the cluster unused. */
bool lay_place_set(Diags *d, Layout *L, const int32_t *node,
                   const int32_t *gpu, SrcLoc origin);

/* ---- shards ------------------------------------------------------------ */

/* The [start, end) ranges rank r holds of layers, query heads, KV heads,
 * experts (0,0 without MoE, and 0,0 when the pool has an expert_map: the
 * rank then holds the list expert_map gives its ep coordinate) and
 * vocabulary rows (0,0 off the first and last pp stage). */
void lay_rank_shards(const Layout *L, const Spec *s, int64_t r,
                     int64_t out[SH__COUNT][2]);

/* ---- memory and KV per rank class (emit.c) ----------------------------- */

/* Fills pools[].mem: the ledger of each pp stage (every rank of one pool
 * and stage holds the same bytes). Returns false after reporting when the
 * ledger overflows. */
bool lay_memory(Diags *d, const Spec *s, Layout *L); /* memory.c */

/* ---- emit (emit.c) ----------------------------------------------------- */

/* The `estimates` section; has false: the plan holds null. */
typedef struct {
  bool has;
  double ttft_ms, tpot_ms, throughput_tok_s, goodput_tok_s_per_gpu;
  size_t npools;                       /* per-pool figures, in the plan's pool order */
  PlanPoolEst pools[PLAN_EST_POOLS];
} PlanEstimates;

/* The plan JSON (docs/plan.md) for the whole layout (node < 0) or for the
 * ranks of one node (a --split-by-node file: those ranks, the groups they
 * belong to, every pool, the kv_reshard entries involving them). L must be
 * placed and lay_memory() must have run. The warnings in d go to
 * `diagnostics`. Output is deterministic: keys in a fixed order, integers
 * only, except estimates (printed with %.6f). Returns malloc'd text and
 * its length in *len. */
char *emit_plan(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                int32_t node, size_t *len);

/* Writes the whole plan to path atomically (temp file + rename) and, when
 * split_dir is not NULL, one file per node to split_dir/node-<N>.plan.json
 * (the directory is created when missing). Returns 0 or an errno value;
 * *what names the path that failed. */
int emit_plan_files(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                    const char *path, const char *split_dir, char **what);

#endif
