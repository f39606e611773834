/*
 * reshard.h: KV-reshard maps between a prefill layout and a decode layout
 * (docs/reshard.md is the reference).
 *
 * One request is served on each side by one attention replica: the
 * tp * cp * pp ranks of one dp rank of one engine instance. Inside that
 * replica a rank is named by its relative rank
 *
 *     rel = t + tp * (c + cp * s)        (t: tp index, c: cp index, s: pp stage)
 *
 * and owns a box of KV cells over (layer range, kv-head range, token set).
 * A map is the list of transfers that moves one request's KV from the
 * prefill replica's boxes into the decode replica's boxes; it is computed by
 * box intersection (reshard.c) and proven cell by cell by an independent
 * checker (reshard_check.c).
 *
 * The descriptor RsLayout is self-contained on purpose: the compiler maps its
 * Spec and layout onto it, tests build it by hand.
 */
#ifndef RANKPLAN_RESHARD_H
#define RANKPLAN_RESHARD_H

#include "diag.h"

/* One side's layout, for one attention replica. */
typedef struct RsLayout {
  const char *pool;      /* pool name, for messages */
  SrcLoc loc;            /* the pool's mapping in the spec (line 0: none) */
  const char *model_id;  /* model name; both sides must agree */
  int dtype;             /* KV cache DType (spec.h); both sides must agree */
  int64_t tp, pp, cp, dcp, dp;  /* dcp reuses tp ranks; dp does not change the map */
  int64_t layers;
  /* pp entries, layers per stage, summing to layers; NULL: even split, the
   * first layers % pp stages take one layer more. */
  const int64_t *layer_partition;
  int64_t kv_heads;      /* GQA/MHA/MQA KV heads; ignored (1) when mla */
  bool mla;              /* MLA: one latent "head", replicated on every tp rank */
  int64_t kv_bytes_per_head_token; /* bytes of one kv head, one layer, one token (K and V) */
  /* Optional, tp*cp*pp entries each, indexed by relative rank: the node and
   * the scale-up domain of each rank (global ids, comparable across the two
   * sides). NULL: the side shares no node and no domain with the other. */
  const int64_t *node_of_rank;
  const int64_t *domain_of_rank;
} RsLayout;

/* A token set of one request: the tokens p with
 *   chunk(p) in ids[0 .. nids)   (chunk j of nchunks holds tokens
 *                                 [floor(j*T/nchunks), floor((j+1)*T/nchunks)))
 *   and p % stride == offset.
 * nchunks == 1 (ids {0}) means no chunking; stride == 1 means no residue
 * class. Prefill cp with zigzag chunks gives nchunks = 2*cp and ids
 * {i, 2*cp-1-i}; dcp gives stride = dcp, offset = the dcp rank. */
#define RS_MAX_CHUNK_IDS 2
typedef struct {
  int64_t nchunks;
  int nids;
  int64_t ids[RS_MAX_CHUNK_IDS]; /* ascending */
  int64_t stride, offset;
} RsTokens;

/* The cells one rank owns. */
typedef struct {
  int64_t layer_begin, layer_end;
  int64_t head_begin, head_end;
  RsTokens tokens;
} RsBox;

/* One transfer: src (prefill) and dst (decode) are relative ranks. */
typedef struct {
  int64_t src, dst;
  int64_t layer_begin, layer_end;
  int64_t head_begin, head_end;
  RsTokens tokens;
  int64_t bytes_per_token;  /* per token of the set: layers * heads * kv_bytes_per_head_token */
  bool same_node;           /* src and dst on one node (known only with node ids) */
  bool scale_up;            /* src and dst in one scale-up domain */
} RsTransfer;

typedef struct {
  RP_VEC(RsTransfer) xfers;  /* sorted by dst, layer, head, tokens, src */
  int64_t src_ranks, dst_ranks;
} RsMap;

/* Ranks of one attention replica: tp * cp * pp (reshard_plan.c). */
int64_t rs_replica_ranks(const RsLayout *l);
/* Tokens t in [0, x) with t mod s == o (s > 0, 0 <= o < s). */
int64_t rs_below(int64_t x, int64_t s, int64_t o);

/* Checks one side on its own (positive sizes, dcp divides tp, heads divisible
 * by tp/dcp or the reverse, layer partition). Reports E04xx against l->loc
 * and returns false on error. */
bool rs_layout_check(Diags *d, const RsLayout *l);

/* The box relative rank rel owns. l must have passed rs_layout_check. */
RsBox rs_rank_box(const RsLayout *l, int64_t rel);

/* Builds the map that moves one request's KV from src to dst. Checks both
 * sides and that they hold the same model, KV dtype and KV shape (errors
 * name both pools). Among replicas of a cell, sources are chosen by the rule
 * of docs/reshard.md (prefer the destination's node, then balance bytes).
 * Returns false with diagnostics on error; *out is then empty. */
bool rs_map_build(Diags *d, const RsLayout *src, const RsLayout *dst, RsMap *out);
void rs_map_free(RsMap *m);

/* Number of tokens of a T-token request in the set. */
int64_t rs_tokens_count(const RsTokens *t, int64_t T);
/* Whether token p of a T-token request is in the set. */
bool rs_tokens_has(const RsTokens *t, int64_t T, int64_t p);
/* Appends a short form: "all", "chunks 1,6/8", "p%2==1", or both joined by
 * " & ". */
void rs_tokens_format(const RsTokens *t, StrBuf *sb);
/* The set's tokens of a T-token request as half-open ranges, appended to
 * *ranges (a flat array of begin,end pairs, rp_realloc'ed); returns how many
 * ranges. Adjacent chunks merge into one range; a stride class gives
 * ranges of one token each. */
size_t rs_tokens_ranges(const RsTokens *t, int64_t T, int64_t **ranges);

/* Bytes one transfer moves for a T-token request (false on overflow). */
bool rs_xfer_bytes(const RsTransfer *x, int64_t T, int64_t *out);

/* Transfer cost of one request. Each rank's egress and ingress are counted
 * per link class; scale-up and scale-out links run in parallel, a rank's
 * transfers on one link class run back to back. time_s is the slowest rank
 * plus the latency of the slowest class used. */
typedef struct {
  int64_t bytes_total, bytes_scale_up, bytes_scale_out;
  int64_t max_bytes_per_src;   /* the busiest source rank's bytes */
  double time_scale_up_s, time_scale_out_s, time_s;
} RsCost;

/* bw_*: bytes/s per GPU per direction; lat_*: seconds (0 when unknown).
 * Returns false (E0406 reported when d != NULL) on overflow. */
bool rs_map_cost(Diags *d, const RsMap *m, int64_t T, double bw_up,
                 double bw_out, double lat_up, double lat_out, RsCost *out);

/* The share of the TTFT SLO above which the KV transfer draws W0401. */
#define RS_SLO_SHARE 0.20
/* Reports W0401 against loc when cost->time_s > RS_SLO_SHARE * ttft_s.
 * Returns whether it warned. */
bool rs_warn_slo(Diags *d, SrcLoc loc, const RsLayout *src,
                 const RsLayout *dst, const RsCost *cost, double ttft_s);

/* Global rank of relative rank rel of the serving attention replica
 * (dp rank dp_rank) of one instance whose first global rank is
 * instance_base. order is the deployment's rank order, innermost first
 * ("tp-cp-ep-dp-pp"; ep adds no ranks and is skipped). Returns false when
 * order does not name tp, cp, dp and pp once each. */
bool rs_global_rank(const char *order, const RsLayout *l, int64_t instance_base,
                    int64_t dp_rank, int64_t rel, int64_t *out);

/* ---- the compile pipeline: Spec + placed Layout -> maps ---- */

struct Spec;
struct Layout;
struct Plan;

/* One prefill pool -> decode pool pair. The descriptors point into arrays
 * the pair owns (layer partitions, node and domain ids of instance 0, dp
 * rank 0 of each pool). */
typedef struct {
  size_t prefill, decode;   /* pool indices in the Layout */
  RsLayout src, dst;
  RsMap map;
  RsCost cost;              /* at workload.input_tokens */
  bool has_cost;            /* cost was computed (input_tokens > 0, no overflow) */
  int64_t *src_node, *src_dom, *dst_node, *dst_dom;
} RsPair;

typedef struct {
  size_t npairs;
  RsPair *pairs;
} RsPlan;

/* The reshard stage: one map for every (prefill-role pool, decode-role pool)
 * pair of a placed Layout, in spec order (prefill outer). KV bytes per head
 * come from model.h; node preference and link classes from the placement of
 * the first instance of each pool. Reports E04xx on errors and W0401 when a
 * transfer exceeds RS_SLO_SHARE of slo.ttft. Returns false on errors. */
bool rs_plan_build(Diags *d, const struct Spec *s, const struct Layout *L, RsPlan *out);
void rs_plan_free(RsPlan *p);


/* Bytes one plan transfer moves for a request of n_tokens tokens (in
 * reshard_plan.c, with the plan library); -1 when
 * its token set is "all" or a stride class and n_tokens is 0, or on
 * overflow. A range list is counted as written (the plan's input_tokens). */
struct PlanTransfer;
int64_t rs_plan_xfer_bytes(const struct PlanTransfer *x, int64_t n_tokens);


/* ---- reshard_check.c: the independent checker ---- */

/* The most cells (decode ranks x layers x kv heads x tokens) one check
 * visits; the loader proves every plan's maps, so this bounds its time. The
 * checker keeps one destination rank's L x H x T bytes at a time. Measured
 * on the 2-core build machine: Llama-3.1-405B, prefill tp 8 cp 8 to decode
 * tp 8 pp 4 (32 decode ranks, 126 layers, 8 KV heads, T = 32 and 33, about
 * 2^21 cells in all) loads and is proven in 0.05 s, some 25 ns a cell, so
 * 2^26 cells take under 2 s. A map that needs more is refused as
 * unprovable. */
#define RS_CHECK_MAX_CELLS ((int64_t)1 << 26)

/* Proves the map cell by cell for a T-token request: every cell a decode rank
 * owns arrives exactly once, every cell sent is owned by its source and held
 * by its destination, and each transfer's bytes_per_token is its layers x
 * heads x kv_bytes_per_head_token. It shares no code with the map builder:
 * ownership is recomputed from the layouts' coordinates. Returns true when
 * the proof holds; otherwise writes the first failure to why. */
bool rs_check_map_at(const RsLayout *src, const RsLayout *dst, const RsMap *m,
                     int64_t T, char *why, size_t whylen);

/* rs_check_map_at for T = 2L and T = 2L + 1, where L is the lcm of both
 * sides' chunk counts and dcp strides: every chunk and residue class is
 * covered, with even and uneven chunk boundaries. */
bool rs_check_map(const RsLayout *src, const RsLayout *dst, const RsMap *m,
                  char *why, size_t whylen);

#endif
