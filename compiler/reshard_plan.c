/*
 * reshard_plan.c: the KV-reshard arithmetic the plan library needs without
 * the compiler's map algebra (reshard.c): a replica's rank count, tokens of
 * a stride class, and the bytes one plan transfer moves. The loader's proof
 * of a plan's maps (plan_load.c, reshard_check.c), `rankplan explain` and
 * reshard.c use them.
 */
#include "plan.h"
#include "reshard.h"

int64_t rs_replica_ranks(const RsLayout *l) { return l->tp * l->cp * l->pp; }

int64_t rs_below(int64_t x, int64_t s, int64_t o) { return x > o ? (x - o - 1) / s + 1 : 0; }

int64_t rs_plan_xfer_bytes(const PlanTransfer *x, int64_t n_tokens) {
  int64_t count = -1, b;
  if (x->tokens == PT_ALL) {
    if (n_tokens > 0) count = n_tokens;
  } else if (x->tokens == PT_STRIDE) {
    if (n_tokens > 0) count = rs_below(n_tokens, x->stride, x->offset);
  } else {
    int64_t st = x->stride > 0 ? x->stride : 1, off = x->stride > 0 ? x->offset : 0;
    count = 0;
    for (size_t j = 0; j < x->nranges; j++)
      count += rs_below(x->ranges[j][1], st, off) - rs_below(x->ranges[j][0], st, off);
  }
  if (count < 0 || !ck_mul(count, x->bytes_per_token, &b)) return -1;
  return b;
}

int64_t plan_replica_rank(const Plan *pl, int pool, int64_t inst, int64_t dp, int64_t rel) {
  const PlanPool *P = &pl->pools[pool];
  int64_t tp = P->size[CO_TP], cp = P->size[CO_CP];
  int64_t t = rel % tp, c = (rel / tp) % cp, s = rel / (tp * cp);
  /* A whole plan lists the pool's ranks at their global ranks; a node
   * file only its node's, anywhere in ranks[]. */
  int64_t lo = pl->partial ? 0 : P->first_rank;
  int64_t hi = pl->partial ? pl->nranks : P->first_rank + P->nranks;
  for (int64_t i = lo; i < hi; i++) {
    const PlanRank *R = &pl->ranks[i];
    if (R->pool == pool && R->instance == inst && R->coords[CO_DP] == dp && R->coords[CO_TP] == t &&
        R->coords[CO_CP] == c && R->coords[CO_PP] == s)
      return R->rank;
  }
  return -1;
}
