/*
 * compile.h: the compile pipeline as one call, shared by `rankplan
 * compile` and `rankplan search -o` (implemented in compile.c).
 *
 * Input: a parsed Spec with pools (validation runs here). Output: the plan
 * file (and node files), written atomically, or diagnostics.
 * Stages, in order: validate → layout (rank generator, layer partition)
 * → the layer_partition hook → placement (default, or the placement hook,
 * validated either way) → the expert_placement hook (MoE pools) → memory
 * ledger (with the hook's expert replicas) → KV reshard maps → estimates
 * (cost model) → emit. Nothing is written unless every stage succeeded.
 */
#ifndef RANKPLAN_COMPILE_H
#define RANKPLAN_COMPILE_H

#include "cost.h"
#include "layout.h"

typedef struct {
  const char *out;               /* where the plan goes (NULL: no whole plan) */
  const char *split_dir;         /* NULL: no node files */
  const CostConsts *consts;      /* for the estimates; NULL: the defaults */
} CompileOpts;

/* Runs every stage on spec and writes the plan. Returns RP_EXIT_OK when
 * written; RP_EXIT_INPUT when a stage reported an error to d (nothing is
 * written); RP_EXIT_USAGE when a file cannot be written: *what (malloc'd,
 * caller frees) names it and *werr holds the errno. Warnings stay in d and
 * go into the plan's `diagnostics`. */
int compile_spec_to_plan(const Spec *spec, const CompileOpts *o, Diags *d, char **what,
                         int *werr);

/* The stages of compile_spec_to_plan up to the memory ledger and the KV
 * reshard maps, without estimates and emit: the placed Layout with its
 * ledger, or NULL after reporting. The caller frees it with lay_free. */
Layout *compile_layout(const Spec *spec, Diags *d);

/* W0502 at workload.rate when served (req/s; from a plan's estimates or a
 * search row) is less than the offered rate: "`who` serves X of Y req/s".
 * Nothing when the spec gives no rate. help: NULL for the default.
 * Returns the warning, for its caller's notes, or NULL when none was made. */
Diag *compile_load_check(Diags *d, const Spec *spec, double served, const char *who,
                        const char *help);

/* W0503 at a pool whose decode batch per scheduler (the estimates' batch
 * over pp micro-batches and dp) is larger than the engine's CUDA graphs
 * cover (PlanPoolEst.graph_bs; TensorRT-LLM's cuda_graph_config, not
 * priced): its decode steps run eagerly (docs/cost-model.md, "Eager
 * decode"). */
void compile_graph_check(Diags *d, const Spec *spec, const Layout *L, const PlanEstimates *e);

/* The plan's `estimates` for a compiled layout, from the cost model
 * (cost.h) with the formulas the search uses (docs/plan.md, "estimates"):
 * one pool of role `both`, or one prefill and one decode pool, at the
 * load workload.rate asks for (capped at what meets the SLOs), or at the
 * most load that meets the SLOs when the spec gives no rate. Returns false
 * with est->has false and *why (static text) saying what is missing when
 * the spec does not give what the model needs (workload tokens, both SLOs,
 * hardware figures) or the pools are of another shape. Never reports:
 * estimates are optional. k NULL: the default constants. */
bool compile_estimates(const Spec *spec, const Layout *L, const CostConsts *k,
                       PlanEstimates *est, const char **why);

#endif
