/*
 * plan_invariants.h: what a Plan that plan_load() accepted must satisfy,
 * shared by the plan fuzz targets (fuzz_plan.c: any bytes; fuzz_plan_mutate.c:
 * numbers of valid plans changed). A failed CHECK aborts: a finding.
 *
 * check_plan() holds a plan to the invariants plan.h lists (the memory
 * ledger's in check_memory_ledger()); check_kv_bytes()
 * recomputes, from the ranks alone, the bytes each kv_reshard pair must move
 * for one request and compares them with its transfers' bytes; explain_all()
 * prints every `rankplan explain` view, since explain trusts the loader.
 */
#ifndef RANKPLAN_FUZZ_PLAN_INVARIANTS_H
#define RANKPLAN_FUZZ_PLAN_INVARIANTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "reshard.h"

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "fuzz_plan: invariant `%s` does not hold\n", #c);    \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* The invariants listed at the top of plan.h. */
static void check_plan(const Plan *p) {
  CHECK(p->nranks >= 0 && p->ngroups >= 0);
  if (!p->partial) CHECK(p->nranks == p->world_size);
  for (int64_t i = 0; i < p->nranks; i++) {
    const PlanRank *r = &p->ranks[i];
    if (!p->partial) CHECK(r->rank == i);
    if (i > 0) CHECK(r->rank > p->ranks[i - 1].rank);
    CHECK(plan_find_rank(p, r->rank) == r);
    /* A split plan lists only its own node, under that node's id. */
    const PlanNode *nd = NULL;
    if (!p->partial) {
      CHECK(r->node >= 0 && (size_t)r->node < p->nnodes);
      nd = &p->nodes[r->node];
    } else {
      CHECK(p->nnodes == 1 && r->node == p->partial_node && p->nodes[0].node == r->node);
      nd = &p->nodes[0];
    }
    CHECK(r->device >= 0 && r->device < nd->gpus);
    CHECK(r->pool >= 0 && (size_t)r->pool < p->npools);
    const PlanPool *pl = &p->pools[r->pool];
    CHECK(r->rank >= pl->first_rank && r->rank - pl->first_rank < pl->nranks);
    for (int k = 0; k < GK__COUNT; k++) {
      const PlanGroup *g = plan_rank_group(p, r, (GroupKind)k);
      if (r->groups[k] < 0) {
        CHECK(k == GK_EMBEDDING && g == NULL);
        continue;
      }
      CHECK(g != NULL && g->id == r->groups[k] && g->kind == (GroupKind)k);
      bool member = false;
      for (int32_t j = 0; j < g->n; j++) member |= g->ranks[j] == r->rank;
      CHECK(member);
    }
  }
  for (int64_t i = 0; i < p->ngroups; i++) {
    const PlanGroup *g = &p->groups[i];
    if (!p->partial) CHECK(g->id == i);
    if (i > 0) CHECK(g->id > p->groups[i - 1].id);
    CHECK(g->n >= 0 && (g->n == 0 || g->ranks != NULL));
    for (int32_t j = 0; j < g->n; j++) {
      const PlanRank *m = plan_find_rank(p, g->ranks[j]);
      if (!p->partial) CHECK(m != NULL);
      if (m) CHECK(m->groups[g->kind] == g->id);
    }
  }
  for (size_t n = 0; n < p->nnodes; n++) {
    const PlanNode *nd = &p->nodes[n];
    if (!p->partial) CHECK(nd->node == (int32_t)n);
    CHECK(nd->gpus >= 0);
    CHECK(nd->first_rank >= 0 && nd->nranks >= 0);
  }
}

static void explain_all(const Plan *p, FILE *out) {
  ExplainOpts o = {0};
  o.summary = o.ranks = o.memory = o.reshard = o.costs = true;
  o.tokens = 4096;
  o.rank = p->nranks > 0 ? p->ranks[p->nranks - 1].rank : -1;
  o.groups = true;
  for (int json = 0; json < 2; json++) {
    o.json = json;
    for (int k = 0; k < GK__COUNT; k++) {
      o.kind = (GroupKind)k;
      /* Only the first pass prints the heavy views; the others add the
       * group listing of each kind. */
      if (k == 1) o.summary = o.ranks = o.memory = o.reshard = o.costs = false;
      CHECK(plan_explain(out, out, p, &o));
    }
    o.summary = o.ranks = o.memory = o.reshard = o.costs = true;
  }
}

/* Every rank's ledger with a KV pool adds up to its capacity, and ranks
 * of one pool and pp stage share it (plan.h). */
static void check_memory_ledger(const Plan *p) {
  for (int64_t i = 0; i < p->nranks; i++) {
    const PlanRank *r = &p->ranks[i];
    int64_t sum = 0;
    for (int k = 0; k < MEM__COUNT; k++)
      if (k != MEM_CAPACITY) CHECK(!__builtin_add_overflow(sum, r->memory[k], &sum));
    if (r->memory[MEM_KV_CACHE] > 0) CHECK(sum == r->memory[MEM_CAPACITY]);
    for (int64_t j = i + 1; j < p->nranks && j < i + 64; j++)
      if (p->ranks[j].pool == r->pool && p->ranks[j].coords[CO_PP] == r->coords[CO_PP])
        CHECK(memcmp(p->ranks[j].memory, r->memory, sizeof r->memory) == 0);
  }
}

/* For every kv_reshard pair of a whole plan whose decode pool has cp 1:
 * the transfers' bytes for a request of the pair's input_tokens T equal
 * what one decode attention replica holds of it, the sum over its ranks of
 * kv.bytes_per_token x the tokens of its dcp class (p % dcp == tp % dcp).
 * An accepted map that moved less (or more) than the decode side holds is
 * a finding. Counted from the ranks, not from the map or the checker. */
static void check_kv_bytes(const Plan *p) {
  if (p->partial) return;
  for (size_t i = 0; i < p->nreshard; i++) {
    const PlanReshard *R = &p->reshard[i];
    if (!R->has_request) continue;
    int dec = -1;
    for (size_t k = 0; k < p->npools; k++)
      if (strcmp(p->pools[k].name, R->decode) == 0) dec = (int)k;
    CHECK(dec >= 0 && R->ntransfers > 0);
    const PlanPool *D = &p->pools[dec];
    if (D->size[CO_CP] != 1) continue;
    int64_t T = R->input_tokens, dcp = D->size[CO_DCP], want = 0, moved = 0;
    for (int64_t r = D->first_rank; r < D->first_rank + D->nranks; r++) {
      const PlanRank *K = &p->ranks[r];
      if (K->instance != 0 || K->coords[CO_DP] != 0) continue;
      int64_t c = K->coords[CO_TP] % dcp, tokens = T / dcp + (c < T % dcp ? 1 : 0), b;
      CHECK(!__builtin_mul_overflow(K->kv_bytes_per_token, tokens, &b) && !__builtin_add_overflow(want, b, &want));
    }
    for (size_t k = 0; k < R->ntransfers; k++) {
      int64_t b = rs_plan_xfer_bytes(&R->transfers[k], T);
      CHECK(b >= 0 && !__builtin_add_overflow(moved, b, &moved));
    }
    CHECK(moved == want && moved == R->bytes);
  }
}

/* Loads text as a plan: exactly one of a plan and a message; a plan that
 * loads holds every invariant above and prints in every explain view. */
static void load_and_check(const char *name, const char *text, size_t len, FILE *devnull) {
  char *err = NULL;
  Plan *p = plan_load_mem(name, text, len, NULL, &err);
  CHECK((p != NULL) != (err != NULL));
  if (err) CHECK(err[0] != '\0');
  if (p) {
    check_plan(p);
    check_memory_ledger(p);
    check_kv_bytes(p);
    explain_all(p, devnull);
  }
  plan_free(p);
  free(err);
}

#endif
