/*
 * backend.c: the backend registry and the preflight that every backend
 * runs the same way.
 *
 * Input: a backend name; communicators made by that backend. Output: the
 * backend's function table; preflight results per group.
 * Invariants: the registry lists every backend compiled in, host first;
 * the preflight calls collectives in the communicators' order, which is
 * the plan's group order on every rank.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const RtBackend *const registry[] = {
    &rt_backend_host,
#if RP_HAVE_NCCL || defined(RP_FAKE_GPU)
    &rt_backend_nccl,
#endif
};

const RtBackend *rt_backend_find(const char *name) {
  for (size_t i = 0; i < RP_ARRAY_LEN(registry); i++)
    if (strcmp(registry[i]->name, name) == 0) {
      RP_ASSERT(registry[i]->version == RT_BACKEND_VERSION);
      return registry[i];
    }
  return NULL;
}

const char *rt_backend_names(void) {
#if RP_HAVE_NCCL || defined(RP_FAKE_GPU)
  return "host, nccl";
#else
  return "host";
#endif
}

const char *rt_backend_absent_note(const char *name) {
  if (strcmp(name, "nccl") == 0)
    return "this build has no NCCL (meson found none)";
  return NULL;
}

RtResult rt_preflight(const RtBackend *be, void *state, const Plan *plan,
                      int rank, RtComm **comms, const int *groups, int n,
                      int64_t bytes, RtPreflight *out) {
  size_t count = (size_t)(bytes / 4);
  if (count == 0) count = 1;
  int64_t *ids = NULL;
  float *host = rp_malloc(count * sizeof(float));
  void *dev = be->mem_alloc(state, count * sizeof(float));
  void *dev_ids = be->mem_alloc(state, sizeof(int64_t));
  RtResult r = RT_OK;
  if (!dev || !dev_ids) {
    r = rt_err(RT_ERR_SYS, "cannot allocate %lld bytes for the preflight",
               (long long)bytes);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    const PlanGroup *g = &plan->groups[groups[i]];
    RtPreflight *pf = &out[i];
    memset(pf, 0, sizeof *pf);
    pf->group = groups[i];
    /* Check: the sum of rank ids over the group, known from the plan. */
    int64_t mine = rank, expect = 0, got = 0;
    for (int k = 0; k < g->n; k++) expect += g->ranks[k];
    RTCHECKGOTO(be->from_host(state, dev_ids, &mine, sizeof mine), r, done);
    RTCHECKGOTO(be->all_reduce(comms[i], dev_ids, dev_ids, 1, RT_I64, RT_SUM),
                r, done);
    RTCHECKGOTO(be->to_host(state, &got, dev_ids, sizeof got), r, done);
    pf->ok = got == expect;
    if (!pf->ok) {
      r = rt_err(RT_ERR_CHECK,
                 "all-reduce of rank ids in group `%d` (%s) is wrong: "
                 "expected %lld, got %lld", g->id, plan_kind_name(g->kind),
                 (long long)expect, (long long)got);
      goto done;
    }
    /* Bandwidth: a warm-up, then timed iterations. */
    for (size_t k = 0; k < count; k++) host[k] = 1.0f;
    RTCHECKGOTO(be->from_host(state, dev, host, count * sizeof(float)), r,
                done);
    RTCHECKGOTO(be->all_reduce(comms[i], dev, dev, count, RT_F32, RT_SUM), r,
                done);
    pf->iters = 5;
    pf->bytes = (int64_t)(count * sizeof(float));
    double t0 = rt_now();
    for (int it = 0; it < pf->iters; it++)
      RTCHECKGOTO(be->all_reduce(comms[i], dev, dev, count, RT_F32, RT_MAX),
                  r, done);
    RTCHECKGOTO(be->barrier(comms[i]), r, done);
    pf->seconds = rt_now() - t0;
    /* Latency: small all-reduces, after a barrier so that members start
     * together. */
    RTCHECKGOTO(be->barrier(comms[i]), r, done);
    double t1 = rt_now();
    for (int it = 0; it < RT_LAT_ITERS; it++)
      RTCHECKGOTO(be->all_reduce(comms[i], dev_ids, dev_ids, 1, RT_I64, RT_MAX),
                  r, done);
    pf->latency_s = (rt_now() - t1) / RT_LAT_ITERS;
    if (pf->seconds > 0) {
      pf->algbw_gbs = (double)pf->bytes * pf->iters / pf->seconds / 1e9;
      pf->busbw_gbs = g->n > 1 ? pf->algbw_gbs * 2.0 *
                                          (g->n - 1) / g->n
                                    : 0.0;
    }
  }
done:
  if (dev) be->mem_free(state, dev);
  if (dev_ids) be->mem_free(state, dev_ids);
  free(host);
  free(ids);
  return r;
}
