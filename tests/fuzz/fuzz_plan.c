/*
 * fuzz_plan.c: libFuzzer target for the plan loader (plan_load.c). A plan
 * file reaches rankrun from wherever the operator copied it, so the loader
 * treats it as untrusted: any bytes must give either a Plan whose documented
 * invariants hold (plan.h) or one error message, never both, never a crash
 * or a leak. The input is copied into a buffer of its exact size, so a read
 * past the end is caught.
 *
 * A plan that loads is then checked against the invariants plan.h promises
 * (an assertion failure is a finding: the loader accepted a plan the
 * runtime would misread) and printed by every `rankplan explain` view, text
 * and JSON, since explain trusts what the loader accepted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
  o.summary = o.ranks = o.memory = o.reshard = true;
  o.tokens = 4096;
  o.rank = p->nranks > 0 ? p->ranks[p->nranks - 1].rank : -1;
  o.groups = true;
  for (int json = 0; json < 2; json++) {
    o.json = json;
    for (int k = 0; k < GK__COUNT; k++) {
      o.kind = (GroupKind)k;
      /* Only the first pass prints the heavy views; the others add the
       * group listing of each kind. */
      if (k == 1) o.summary = o.ranks = o.memory = o.reshard = false;
      CHECK(plan_explain(out, out, p, &o));
    }
    o.summary = o.ranks = o.memory = o.reshard = true;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  if (!devnull) abort();
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  char *err = NULL;
  Plan *p = plan_load_mem("fuzz.plan.json", text, size, NULL, &err);
  /* Exactly one of a plan and a message. */
  CHECK((p != NULL) != (err != NULL));
  if (err) CHECK(err[0] != '\0');
  if (p) {
    check_plan(p);
    explain_all(p, devnull);
  }
  plan_free(p);
  free(err);
  free(text);
  return 0;
}
