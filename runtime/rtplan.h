/*
 * rtplan.h: the runtime's view of a plan. The runtime reads the loader's
 * Plan (compiler/plan.h) directly; these helpers answer the two questions
 * it asks of it, header-only so that every runtime file can use them
 * without depending on another runtime file.
 *
 * Groups are addressed by their position in plan->groups (the same on
 * every rank: the store keys `pf/G` and `nccl/id/G` use it); ranks by
 * their global rank number. Node numbers are positions in the plan's
 * nodes[]: in a whole plan that is the node's id, in a --split-by-node
 * file (one node) it is 0.
 */
#ifndef RANKRUN_RTPLAN_H
#define RANKRUN_RTPLAN_H

#include "plan.h"

/* Index of rank r inside group g, or -1. */
static inline int rt_group_index(const PlanGroup *g, int r) {
  for (int i = 0; i < g->n; i++)
    if (g->ranks[i] == r) return i;
  return -1;
}

/* The node (position in nodes[]) of global rank r, or -1 when the plan
 * does not hold it (a split plan holds one node's ranks). */
static inline int rt_rank_node(const Plan *p, int64_t r) {
  const PlanRank *R = plan_find_rank(p, r);
  if (!R) return -1;
  return p->partial ? 0 : R->node;
}

#endif
