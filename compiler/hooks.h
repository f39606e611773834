/*
 * hooks.h: sandboxed Lua 5.4 hooks (docs/hooks.md).
 *
 * A spec may name up to five Lua files under `deployment.hooks`:
 * `placement`, `layer_partition`, `expert_placement`, `objective` and
 * `filter`. Each
 * file returns either a function (the hook) or a table holding a function
 * under the hook's name, so one file can serve several hooks. The compiler
 * calls the hook with one argument, the context table (topology, pools,
 * ranks, groups, model summary), converts what it returns to C with full
 * validation and never trusts it: a bad result is a diagnostic naming the
 * hook file, the line of the `return` and the offending value.
 *
 * Every call runs in a fresh Lua state with a whitelisted environment (no
 * io, os, debug, package/require, dofile, loadfile; `load` takes text only),
 * an instruction budget, a memory cap and a wall-clock deadline
 * (HookLimits, tunable through RANKPLAN_HOOK_* environment variables), a
 * fixed cap on the length of each string (HOOK_STRING_MAX), and
 * optionally twice, rejecting results that differ.
 *
 * Callers (the layout stage, the search) fill a HookCtx, usually with
 * hook_ctx_build(), and call one hook_run_* entry point per hook.
 */
#ifndef RANKPLAN_HOOKS_H
#define RANKPLAN_HOOKS_H

#include "spec.h"

typedef enum {
  HOOK_PLACEMENT,
  HOOK_LAYER_PARTITION,
  HOOK_EXPERT_PLACEMENT,
  HOOK_OBJECTIVE,
  HOOK_FILTER,
  HOOK__COUNT
} HookKind;

/* "placement", "layer_partition", "expert_placement", "objective", "filter". */
const char *hook_kind_name(HookKind k);

/* Limits of one hook call. Defaults (hook_limits_default) and the
 * environment variables that override them (hook_env_init):
 *   instructions  100000000   RANKPLAN_HOOK_INSTRUCTIONS  (Lua VM instructions)
 *   memory        64 MiB      RANKPLAN_HOOK_MEMORY        (bytes; KiB/MiB/GiB suffix allowed)
 *   timeout_ms    5000        RANKPLAN_HOOK_TIMEOUT_MS    (wall clock per call)
 *   twice         false       RANKPLAN_HOOK_TWICE=1       (run twice, compare)
 *   total_ms      60000       RANKPLAN_HOOK_TOTAL_MS      (wall clock of all the
 *                                                          calls of one command) */
typedef struct {
  int64_t instructions;
  int64_t memory;
  int64_t timeout_ms;
  bool twice;
  int64_t total_ms;
} HookLimits;

void hook_limits_default(HookLimits *lim);

/* The settings above, as the --help of every command that runs hooks
 * lists them (one line each; the defaults are hook_limits_default's). */
#define HOOK_ENV_HELP                                                          \
  "  RANKPLAN_HOOK_INSTRUCTIONS  instruction budget (default 100000000)\n"     \
  "  RANKPLAN_HOOK_MEMORY        memory cap, bytes or KiB/MiB/GiB (default "   \
  "64MiB)\n"                                                                   \
  "  RANKPLAN_HOOK_TIMEOUT_MS    wall-clock deadline (default 5000)\n"         \
  "  RANKPLAN_HOOK_TWICE         1: run each hook twice, reject differing "    \
  "results\n"                                                                   \
  "  RANKPLAN_HOOK_TOTAL_MS      wall-clock time of all hook calls of the "     \
  "command (default 60000)\n"

/* The longest string, in bytes, a hook may make (a literal in its file, a
 * result of `..`, string.rep, table.concat, string.format, ...): a longer
 * one is refused with E0620. Fixed, not a setting: it bounds what one Lua
 * instruction can do with its string operands (docs/hooks.md, "Long
 * strings"). The context's strings are not held to it. */
#define HOOK_STRING_MAX (INT64_C(1) << 20)

/* The hook files of one compilation. Texts are read once, on first use. */
typedef struct {
  HookLimits lim;
  struct {
    const char *path; /* as diagnostics show it (interned in the Diags) */
    SrcLoc loc;       /* the spec key that named it, for "cannot read" */
    char *text;
    size_t len;
    bool set, loaded, failed;
  } file[HOOK__COUNT];
} HookEnv;

/* Starts with the default limits overridden by RANKPLAN_HOOK_*; a malformed
 * value is reported (E0615) and the default kept. Returns false when any
 * setting was malformed. */
bool hook_env_init(HookEnv *env, Diags *d);
/* Names the file of hook k; path is used as given (already resolved). */
void hook_env_set(HookEnv *env, Diags *d, HookKind k, const char *path, SrcLoc loc);
/* Names every hook the spec names, each path taken relative to the
 * directory of the spec file (spec->file). */
void hook_env_from_spec(HookEnv *env, Diags *d, const Spec *spec);
void hook_env_free(HookEnv *env);

/* ---- the context a hook sees (docs/hooks.md, "The context table") ---- */

typedef struct {
  const char *name;
  PoolRole role;
  int64_t replicas, tp, pp, cp, dp, ep, etp, dcp;
  int64_t first_rank; /* global rank of replica 0's rank 0 */
  int64_t size;       /* ranks per instance: tp * cp * dp * pp */
} HookPool;

typedef struct {
  int64_t pool;     /* index into HookCtx.pools */
  int64_t instance; /* replica index inside the pool */
  int64_t local;    /* rank inside the instance */
  int64_t tp, cp, dp, pp; /* coordinates inside the instance */
} HookRank;

typedef struct {
  const char *kind; /* "tp", "cp", "dp", "pp" or "instance" */
  int64_t pool, instance;
  size_t n;
  int64_t *ranks; /* global ranks, ascending */
} HookGroup;

typedef struct {
  /* topology */
  int64_t nodes, gpus_per_node;
  int64_t domain;         /* scale-up (NVLink) domain, GPUs */
  int64_t nodes_per_rack; /* 0 when the spec does not say */
  bool allow_tp_across_domain;
  /* model summary */
  const char *model_name;
  int64_t layers, hidden_size, vocab_size, heads, kv_heads, head_dim;
  int64_t intermediate_size;
  int64_t experts, top_k, shared_experts, expert_intermediate_size, dense_layers;
  /* pools, ranks (index = global rank) and groups */
  size_t npools;
  HookPool *pools;
  size_t nranks;
  HookRank *ranks;
  size_t ngroups;
  HookGroup *groups;
  /* Optional: the compiler's default placement (node and GPU per rank),
   * shown to the placement hook as ctx.default; NULL when not known. */
  const int64_t *default_node, *default_gpu;
} HookCtx;

/* Fills ctx from a parsed spec: pools in spec order, then replicas, then the
 * instance's ranks in `deployment.order` (innermost first; ep and etp
 * regroup ranks and add no coordinate), and the tp/cp/dp/pp/instance
 * groups. Strings point into the spec. Returns false (and reports E0618)
 * when a count overflows. Free with hook_ctx_free. */
bool hook_ctx_build(HookCtx *ctx, const Spec *spec, Diags *d);
/* The rank and group part of hook_ctx_build: with ctx's topology and pools
 * filled (name, role, replicas and the parallel sizes; first_rank and size
 * are computed here), lays out ranks and groups by `order` (NULL: the
 * default "tp-cp-ep-dp-pp"). The caller owns ctx->pools (hook_ctx_free
 * frees it). Returns false (E0618) when the rank count overflows. */
bool hook_ctx_layout(HookCtx *ctx, const char *order, Diags *d);
void hook_ctx_free(HookCtx *ctx);

/* What every caller of a hook sets up: the spec's hook files with the
 * limits from the environment, and the context built from the spec. */
typedef struct {
  HookEnv env;
  HookCtx ctx;
} HookSession;

/* Opens a session for spec's hooks; false after reporting (a malformed
 * RANKPLAN_HOOK_* setting, an earlier error, a context that cannot be
 * built). Close it either way. */
bool hook_session_open(HookSession *hs, const Spec *spec, Diags *d);
void hook_session_close(HookSession *hs);

/* ---- entry points: each returns true and fills its output when the hook
 * ran and its result passed every check; false after reporting ---- */

/* placement: ctx->nranks entries; node_out[r], gpu_out[r] for global rank r.
 * Checked: every rank placed exactly once, node and GPU in range, no GPU
 * used twice, every tp group inside one scale-up domain (a warning W0601
 * instead when allow_tp_across_domain). */
bool hook_run_placement(HookEnv *env, const HookCtx *ctx, int64_t *node_out,
                        int64_t *gpu_out, Diags *d);

/* The checks hook_run_placement applies, on plain arrays; where names the
 * hook's return (or any position to blame). Usable for any placement. */
bool hook_check_placement(const HookCtx *ctx, const int64_t *node,
                          const int64_t *gpu, SrcLoc where, const char *what,
                          Diags *d);

/* layer_partition: for pool index `pool`, layers_out[s] for each of its pp
 * stages. Checked: pp positive integers that sum to the model's layers. */
bool hook_run_layer_partition(HookEnv *env, const HookCtx *ctx, size_t pool,
                              int64_t *layers_out, Diags *d);

/* expert_placement for pool index `pool`: where the replicas of each expert
 * live, as ep ranks (0 .. ep-1) of the pool's expert-parallel group. CSR:
 * expert e is on ranks[offsets[e] .. offsets[e+1]). */
typedef struct {
  int64_t experts, ep;
  int64_t slots_per_rank; /* physical experts per ep rank (equal on all) */
  int64_t *offsets;       /* experts + 1 entries */
  int64_t *ranks;         /* offsets[experts] entries */
} HookExpertMap;
/* Checked: one non-empty list per expert, ranks integers in [0, ep), no rank
 * twice for one expert, every ep rank holding the same number of physical
 * experts (as EPLB requires). Free with hook_expert_map_free. */
bool hook_run_expert_placement(HookEnv *env, const HookCtx *ctx, size_t pool,
                               HookExpertMap *out, Diags *d);
void hook_expert_map_free(HookExpertMap *m);

/* objective: scores one search candidate; higher is better. The candidate
 * is a flat list of named numbers (ctx.candidate in Lua; the search decides
 * the names and documents them). Checked: a finite number. */
typedef struct {
  const char *key;
  double value;
} HookKV;
bool hook_run_objective(HookEnv *env, const HookCtx *ctx, const HookKV *cand,
                        size_t ncand, double *score_out, Diags *d);

/* filter: keeps or drops one search candidate (one pool layout of role
 * `role`, "prefill", "decode" or "both": ctx.candidate, with its named
 * numbers and `role`). Checked: true (keep), false (drop) or a string
 * (drop, saying why; at most HOOK_WHY_MAX bytes). *why_out: NULL, or the
 * string (caller frees). */
enum { HOOK_WHY_MAX = 200 };
bool hook_run_filter(HookEnv *env, const HookCtx *ctx, const char *role, const HookKV *cand,
                     size_t ncand, bool *keep_out, char **why_out, Diags *d);

/* The sandbox's worst-case estimate, in steps, of one Lua pattern call
 * (string.find, match, gmatch or gsub) on an n-byte subject: anchor_ok is
 * false for gmatch, where a leading `^` is an ordinary character. Saturates
 * at INT64_MAX. Exposed for tests; docs/hooks.md states the formula. */
int64_t hook__pattern_cost(size_t n, const char *pat, size_t plen, bool anchor_ok);

#endif
