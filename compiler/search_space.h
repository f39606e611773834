/*
 * search_space.h: the search space a spec allows and the tally of what the
 * search rejected.
 *
 * Input: the spec's `search:` constraints (SearchSpec, parsed and checked
 * by the parse stage; docs/spec.md, "Search constraints") and one
 * candidate layout of a pool role. Output: whether the layout is inside the
 * space, and if not which constraint excluded it, in the words the spec
 * uses. The search applies this before any rule, memory ledger, cost
 * evaluation or pruning, so a constrained search ranks exactly the layouts
 * inside the space.
 * The tally (SearchRejects) counts each reason a candidate was rejected
 * for, with the first such layout, so `search --explain` can say what
 * decided each rejection. Deterministic: reasons keep their first-seen
 * order, which the enumeration order fixes.
 */
#ifndef RANKPLAN_SEARCH_SPACE_H
#define RANKPLAN_SEARCH_SPACE_H

#include <jansson.h>

#include "cost.h"

/* How the default placement (compiler/place.c) packs instances on nodes
 * for an engine whose launcher needs the same number of ranks on every
 * node of an instance (docs/engines.md, "CUDA_VISIBLE_DEVICES and
 * nodes"): nodes 0 for an engine without that need (generic). */
typedef struct {
  int64_t gpn, nodes;
} SearchPack;

/* NULL when layout l of one instance of `role` (gpus GPUs) is inside the
 * spec's constraints; else the constraint that excludes it, written into
 * buf (n bytes) and returned. gpn: GPUs per node. */
const char *search_space_reject(const SearchSpec *se, PoolRole role, const CostLayout *l,
                                int64_t gpus, int64_t gpn, char *buf, size_t n);

/* NULL when an instance of gpus GPUs can have the same number of ranks on
 * each of its nodes as the default placement puts it (one node or less,
 * or whole nodes) under pk; else why not, in buf (one reason for every
 * size, so the tally counts them together). */
const char *search_pack_reject(const SearchPack *pk, const char *engine, int64_t gpus, char *buf, size_t n);

/* The prefill instance counts x allowed with prefill instances of gp GPUs:
 * multiples of the returned step. 1 unless search.separate_nodes, where the
 * prefill pool must end on a node boundary so that the decode instances,
 * placed after it, start on a node of their own. */
int64_t search_space_xstep(const SearchSpec *se, int64_t gp, int64_t gpn);

/* The most instances of gd GPUs the placement puts after x instances of
 * gp GPUs with every instance whole on its nodes: one of a node or less
 * inside one node, a larger one (whole nodes, search_space_reject) on
 * nodes of its own; -1 when the x do not fit so; INT64_MAX when pk is
 * NULL or has no nodes. */
int64_t search_pack_max(const SearchPack *pk, int64_t gp, int64_t x, int64_t gd);

/* Distinct reasons kept; later new reasons count under the last one. */
enum { SEARCH_REJECT_MAX = 48 };

typedef struct {
  char *why;        /* the constraint, engine rule, model rule or cost term */
  PoolRole role;
  int64_t n;        /* candidates it rejected */
  CostLayout first; /* the first one, in enumeration order */
} SearchReject;

typedef RP_VEC(SearchReject) SearchRejects;

void search_rejects_add(SearchRejects *v, const char *why, PoolRole role, const CostLayout *l);
void search_rejects_free(SearchRejects *v);

/* "tp4,pp2": the sizes above 1 (tp always). */
void search_layout_put(StrBuf *sb, const CostLayout *l);

/* The tally as text (a heading and one line per reason) and as a JSON
 * array of {role, reason, candidates, first}. */
void search_rejects_text(StrBuf *sb, const SearchRejects *v);
json_t *search_rejects_json(const SearchRejects *v);

#endif
