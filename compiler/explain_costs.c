/*
 * explain_costs.c: `rankplan explain --costs`, the plan's per-pool
 * estimates (docs/plan.md, "estimates").
 *
 * Input: a loaded Plan (plan_load). Output: per pool, the prefill time of
 * one request and the decode step at the batch in flight, each split into
 * compute, HBM, overhead (kernel-boundary stalls and the engine's exposed
 * CPU work) and communication by group kind, with the
 * batch to configure; as text or as JSON for tools.
 */
#include <jansson.h>

#include "plan.h"

static void text_phase(FILE *out, const char *pool, const char *phase, const PlanPhaseEst *e,
                       int64_t batch) {
  char b[32] = "-";
  if (batch > 0) snprintf(b, sizeof b, "%lld", (long long)batch);
  fprintf(out, "%-12s %-8s %6s %11.3f %12.1f %10.3f %10.3f %10.3f", pool, phase, b, e->time_ms,
          e->tok_s_per_gpu, e->compute_ms, e->hbm_ms, e->overhead_ms);
  for (int k = 0; k < PEC__COUNT; k++) fprintf(out, " %9.3f", e->comm_ms[k]);
  fputc('\n', out);
}

void plan_explain_costs(FILE *out, const Plan *p) {
  if (!p->has_estimates) {
    fprintf(out, "costs: none (the plan holds no estimates)\n");
    return;
  }
  fprintf(out, "%-12s %-8s %6s %11s %12s %10s %10s %10s", "pool", "phase", "batch", "time ms",
          "tok/s/gpu", "compute ms", "hbm ms", "overhd ms");
  for (int k = 0; k < PEC__COUNT; k++) fprintf(out, " %6s ms", plan_est_comm_name((PlanEstComm)k));
  fputc('\n', out);
  for (size_t i = 0; i < p->nest_pools; i++) {
    const PlanPoolEst *e = &p->est_pools[i];
    const char *name = p->pools[e->pool].name;
    if (e->has_prefill) text_phase(out, name, "prefill", &e->prefill, 0);
    if (e->has_decode) text_phase(out, name, "decode", &e->decode, e->batch);
  }
  for (size_t i = 0; i < p->nest_pools; i++) {
    const PlanPoolEst *e = &p->est_pools[i];
    if (e->has_decode)
      fprintf(out, "pool %s: configure the engine for %lld concurrent sequences per instance\n",
              p->pools[e->pool].name, (long long)e->max_batch);
  }
}

static json_t *json_phase(const PlanPhaseEst *e, bool decode, int64_t batch) {
  json_t *o = json_object();
  if (decode) json_object_set_new(o, "batch", json_integer(batch));
  json_object_set_new(o, decode ? "step_ms" : "time_ms", json_real(e->time_ms));
  json_object_set_new(o, decode ? "output_tok_s_per_gpu" : "input_tok_s_per_gpu",
                      json_real(e->tok_s_per_gpu));
  json_object_set_new(o, "compute_ms", json_real(e->compute_ms));
  json_object_set_new(o, "hbm_ms", json_real(e->hbm_ms));
  json_object_set_new(o, "overhead_ms", json_real(e->overhead_ms));
  json_t *c = json_object();
  for (int k = 0; k < PEC__COUNT; k++)
    json_object_set_new(c, plan_est_comm_name((PlanEstComm)k), json_real(e->comm_ms[k]));
  json_object_set_new(o, "comm_ms", c);
  return o;
}

struct json_t *plan_explain_costs_json(const Plan *p) {
  if (!p->has_estimates) return json_null();
  json_t *a = json_array();
  for (size_t i = 0; i < p->nest_pools; i++) {
    const PlanPoolEst *e = &p->est_pools[i];
    json_t *o = json_object();
    json_object_set_new(o, "pool", json_string(p->pools[e->pool].name));
    json_object_set_new(o, "prefill", e->has_prefill ? json_phase(&e->prefill, false, 0) : json_null());
    json_object_set_new(o, "decode",
                        e->has_decode ? json_phase(&e->decode, true, e->batch) : json_null());
    json_object_set_new(o, "max_batch", e->has_decode ? json_integer(e->max_batch) : json_null());
    json_array_append_new(a, o);
  }
  return a;
}
