/*
 * search.h: SLO-aware layout search and xPyD pool sizing.
 *
 * Input: a Spec without parse errors (its model, hardware, workload, SLOs
 * and `search:` section), the cost constants (cost.h) and SearchOptions.
 * Output: SearchOut, every evaluated deployment ranked by goodput per GPU
 * (requests that meet both SLOs), with the binding constraint of each, the
 * Pareto frontier (goodput/GPU against TTFT and TPOT) marked, and text or
 * JSON renderings.
 * Invariants: deterministic (the enumeration order, the tie-breaks and the
 * output never depend on time, addresses or hash order) and bounded (at
 * most SearchOptions.max_candidates evaluations; hitting the budget is the
 * warning W0500, and the results cover what was evaluated).
 */
#ifndef RANKPLAN_SEARCH_H
#define RANKPLAN_SEARCH_H

#include "cost.h"
#include "search_space.h"

/* The named budget: evaluations (one layout of one role, or one (x, y)
 * point of the xPyD integer search) before the search stops. */
#define SEARCH_MAX_CANDIDATES_DEFAULT ((int64_t)4000000)

/* The layout enumeration's loops count too: each step, whether it yields
 * a layout or not, is 1/SEARCH_STEPS_PER_CANDIDATE of a candidate, so at
 * most max_candidates * 64 steps run (W0500 when they are used up). 64 is
 * about 3x the most steps per evaluated candidate of any bundled example
 * (22, plans/examples/deepseek-v3-1024.yaml), so a search that ends within
 * its candidate budget never meets it; a step is a few integer
 * operations, so the default budget's 256 million take about a second. */
#define SEARCH_STEPS_PER_CANDIDATE ((int64_t)64)
/* The search keeps the layer partition of each pp up to this one (at most
 * 4096 * 4097 / 2 int64 entries, 64 MiB, and only for the pp values the
 * search visits); a larger pp computes it per candidate. */
#define SEARCH_PART_CACHE_PP ((int64_t)4096)

/* Narrowest expert GEMM (expert_intermediate_size / etp columns) the
 * search proposes: one 128-wide tile, the bound of the model stage's
 * warning W0203. */
#define SEARCH_MIN_EXPERT_COLS 128

typedef enum { SEARCH_AGGREGATED, SEARCH_DISAGGREGATED } SearchMode;

/* What stopped a deployment from going further. */
typedef enum {
  BIND_MEMORY,    /* decode batch = B_memory (KV pool full) */
  BIND_TPOT,      /* decode batch = largest B whose step meets the TPOT SLO */
  BIND_BATCH_CAP, /* decode batch = max_batch_per_dp * dp * pp */
  BIND_GRAPHS,    /* decode batch = the engine's CUDA-graph batch: eager steps beyond it serve less */
  BIND_LOAD,      /* the offered load (workload.rate) is served with room to spare */
  BIND_TTFT,      /* prefill utilisation cut so that queueing meets the TTFT SLO */
  BIND_HEADROOM,  /* utilisation at the headroom rho */
  BIND_GPUS,      /* the offered load needs more GPUs than the budget */
  BIND_NODES,     /* the GPUs would serve it, but the instances do not pack on the nodes */
  BIND_SLO_MISS   /* infeasible: one SLO cannot be met at any load */
} SearchBinding;

const char *search_binding_name(SearchBinding b);
/* What a binding means to someone running the engine: the SLO, the spec
 * key or the engine flag that sets the bound ("the batch cap per attention
 * data parallel rank (--max-num-seqs)"); the explanations use these. */
const char *search_binding_words(SearchBinding b);

typedef struct {
  PoolRole role;
  CostLayout lay;
  int64_t replicas;     /* instances */
  int64_t gpus;         /* GPUs of one instance */
  int64_t batch;        /* decode requests per instance (decode/both) */
  double tok_s_gpu;     /* prefill: input tok/s/GPU at full load; decode: output */
  double latency;       /* prefill latency or decode TPOT of one instance, s */
  SearchBinding binding;
} SearchPool;

typedef struct {
  SearchMode mode;
  size_t npools;        /* 1 (aggregated) or 2 (prefill, decode) */
  SearchPool pools[2];
  int64_t gpus;         /* all instances */
  int64_t ratio_x, ratio_y; /* xPyD GPU ratio from cost_xpyd_ratio (disaggregated) */
  double ttft, tpot;    /* s */
  double queue, kv_transfer; /* s, parts of ttft */
  double req_s;         /* requests/s served */
  double tok_s;         /* output tokens/s served */
  double goodput_gpu;   /* output tokens/s per GPU of requests meeting both SLOs */
  double goodput_cluster_gpu; /* the same per GPU of the budget (idle GPUs count) */
  size_t group;         /* the row this one is shown under: itself, or the best-ranked
                         * deployment it equals up to splitting decode instances */
  double util_prefill;  /* prefill (or instance) utilisation */
  SearchBinding binding;
  bool feasible, pareto;
  bool scored;          /* the spec's objective hook scored it */
  double score;         /* the hook's score (higher is better) */
} SearchResult;

/* The ranking's first key (--sort): goodput per used GPU, per GPU of the
 * budget (idle GPUs count against a deployment), total goodput, or
 * (--min-gpus) serving workload.rate with the fewest GPUs. */
typedef enum {
  SEARCH_SORT_USED_GPU, SEARCH_SORT_CLUSTER_GPU, SEARCH_SORT_GOODPUT, SEARCH_SORT_MIN_GPUS
} SearchSort;

/* "used-gpu", "cluster-gpu", "goodput", "min-gpus"; search_sort_parse:
 * false when s is none of them. */
const char *search_sort_name(SearchSort k);
bool search_sort_parse(const char *s, SearchSort *k);

typedef struct {
  SearchSort sort;
  int64_t max_candidates; /* the budget; <= 0: SEARCH_MAX_CANDIDATES_DEFAULT */
  int64_t gpu_budget;     /* <= 0: the spec's search.gpu_budget, else the cluster */
  double headroom;        /* <= 0: the spec's search.headroom, else 0.9 */
  bool aggregated, disaggregated; /* both false: from deployment.mode */
  FILE *progress;         /* NULL: silent; else progress lines (a TTY) */
  bool strict;            /* validate_pool on every layout: the same output, slower
                           * (the unit tests compare the two) */
} SearchOptions;

typedef struct {
  CostModel model;
  RP_VEC(SearchResult) results; /* ranked, best first */
  int64_t evaluated;            /* evaluations spent */
  int64_t max_candidates;
  bool budget_hit;
  int64_t gpu_budget;
  double headroom;
  int64_t layouts[3];           /* valid layouts per role (prefill, decode, both) */
  double tp_opt;                /* MLA attention tp optimum at the winner's decode batch, 0 else */
  SearchRejects rejects;        /* why candidates left the search, by reason */
  SearchSort sort;
} SearchOut;

/* Marks each result's group (SearchResult.group): disaggregated results
 * with the same prefill pool and as many decode GPUs, split into other
 * instances, are shown as one row under the best-ranked of them. */
void search_group(SearchOut *out);

/* The winner's `deployment:` section as YAML (mode, the spec's engine,
 * order, allow_tp_across_domain, memory and hooks as it sets them, and the
 * winner's pools), with a comment naming the spec and the row: replacing
 * the spec's section with it compiles the winner. Caller frees. */
char *search_deployment_yaml(const Spec *s, const SearchOut *out);

/* Where a domain smaller than a node capped tp below the GPUs and heads
 * the search had (PCIe cards are domains of 1, bridged cards of 2 or 4),
 * notes so on g: a tp group across the node's cards is a layout engines
 * run, over the scale-out link, once the spec allows it. A domain of whole
 * nodes gets no note: tp across nodes is rarely what a deployment wants. */
void search_domain_note(Diag *g, const Spec *s, const CostModel *m, int64_t G);

/* W0502 when the winner serves less than workload.rate (nothing when the
 * spec gives no rate or no result is feasible). */
void search_load_check(Diags *d, const Spec *s, const SearchOut *out);

/* The named numbers the `objective` hook sees as ctx.candidate for one
 * result (docs/cost-model.md, "Objective hook"): goodput (req/s meeting the
 * SLOs), gpus, ttft_ms, tpot_ms, throughput_req_s, throughput_tok_s,
 * goodput_tok_s_per_gpu, feasible (0/1), aggregated (0/1), and per pool
 * (prefix prefill_, decode_ or serve_) replicas, tp, pp, cp, dp, ep, etp,
 * dcp, batch. Fills kv (at most SEARCH_HOOK_KEYS entries); keys are static
 * strings. Returns the count. */
enum { SEARCH_HOOK_KEYS = 40 };
typedef struct {
  const char *key;
  double value;
} SearchKV;
size_t search_candidate_kv(const SearchResult *r, SearchKV *kv);

/* Runs the search. Reports E0507 (no workload/SLO), E0508 (no layout
 * fits), E0500 (no layout meets the SLOs), W0500 (budget hit), E0501/E0506
 * from the cost model. Returns false when an error was reported; out is
 * then still valid to free (and may hold the infeasible results). */
bool search_run(Diags *d, const Spec *s, const CostConsts *k, const SearchOptions *o,
                SearchOut *out);
void search_out_free(SearchOut *out);

/* Whether a layout passes the rules the search needs for a pool of this
 * role (head/expert divisibility, tp within the scale-up domain, cp and
 * dcp limits, expert GEMMs at least SEARCH_MIN_EXPERT_COLS wide); *why
 * (static text) says which rule failed. Memory and the engine's layer
 * partition are checked separately (the memory ledger, validate_pool). */
bool search_layout_valid(const CostModel *m, const CostLayout *l, PoolRole role,
                         bool tp_across_domain, const char **why);

/* The xPyD integer search: instance sizes gp, gd GPUs; per-instance
 * capacities rp, rd (requests/s, headroom applied); G GPUs. The pools'
 * GPU ratio from cost_xpyd_ratio gives, for each x, the balancing y; the
 * floor and ceiling of it are tried for every x that fits. Picks (x, y)
 * with the most requests/s per GPU, ties to the most requests/s, then the
 * fewest GPUs. *evals (0 on entry) counts the points tried; at most
 * `budget` are: when more were left, *cut is set and the best of those
 * tried is returned. Returns false when not even 1P1D fits
 * (or the budget allowed no point). */
bool search_xpyd_best(int64_t gp, int64_t gd, double rp, double rd, int64_t G, int64_t budget,
                      int64_t *x, int64_t *y, int64_t *evals, bool *cut);
/* The same with x restricted to multiples of xstep (search_space_xstep:
 * search.separate_nodes) and (x, y) to what pk packs on the nodes
 * (search_pack_max; NULL: no such limit). */
bool search_xpyd_best_step(int64_t gp, int64_t gd, double rp, double rd, int64_t G, int64_t xstep,
                           const SearchPack *pk, int64_t budget, int64_t *x, int64_t *y, int64_t *evals,
                           bool *cut);

/* The spec with its deployment replaced by result r's pools (named
 * prefill, decode or serve, at the spec's deployment position), for
 * compiling a result as `search -o` does: pools (2 entries) holds them,
 * everything else is borrowed from spec. */
void search_result_spec(const Spec *spec, const SearchResult *r, PoolSpec pools[2], Spec *out);

/* One-line layout of a result: "2xP(tp8,ep8) 1xD(tp4,dp2)". Caller frees. */
char *search_layout_str(const SearchResult *r);

/* Why result i lost against the winner (results[0]): one line. Caller
 * frees. */
char *search_explain(const SearchOut *out, size_t i);

/* Renderings of the top rows (all when top == 0). Caller frees. */
char *search_format_text(const SearchOut *out, const Spec *s, size_t top, bool explain);
char *search_format_json(const SearchOut *out, const Spec *s, size_t top, bool explain);

#endif
