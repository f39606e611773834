/*
 * partition.c: the layer partition of one pool, per deployment engine.
 *
 * Input: the model's layer count, the pool's pp size, its optional explicit
 * `layer_partition`, and (generic engine) the weight of one layer, the
 * embedding and the lm_head. Output: layers per pipeline stage.
 * Invariants: pp entries, each >= 1, summing to the layer count; the same
 * input always gives the same split (no floating point).
 *
 * Each engine splits as its own loader does, so that the plan describes
 * exactly the layers each stage will load: vLLM's get_pp_indices gives the
 * remainder to stages P-2, P-3, ... (the last stage carries the final norm
 * and lm_head); SGLang's gives it to the last stages; TensorRT-LLM's
 * Mapping.pp_layers (tensorrt_llm/mapping.py, torch.tensor_split) gives
 * it to the first stages. The generic engine
 * balances weight, so the stages holding the embedding and the lm_head get
 * fewer layers.
 */
#include <stdlib.h>

#include "layout.h"

static bool check_explicit(Diags *d, int64_t layers, int64_t pp, const PoolSpec *pool,
                           int64_t *out) {
  const char *name = pool->name.v ? pool->name.v : "?";
  SrcLoc loc = pool->layer_partition.loc;
  size_t n = pool->layer_partition.len;
  if ((int64_t)n != pp) {
    Diag *g = diag_at(d, DIAG_E0307, loc,
                      "`layer_partition` of pool `%s` does not match `pp`: expected %lld "
                      "entries, got %zu",
                      name, (long long)pp, n);
    diag_help(g, "give one layer count per pipeline stage (pp = %lld)", (long long)pp);
    return false;
  }
  bool ok = true;
  int64_t sum = 0;
  CkState st = {true};
  for (size_t i = 0; i < n; i++) {
    const SInt *e = &pool->layer_partition.items[i];
    if (e->v < 1) {
      Diag *g = diag_at(d, DIAG_E0309, e->set ? e->loc : loc,
                        "`layer_partition[%zu]` of pool `%s` is below 1: expected at least 1 "
                        "layer per stage, got %lld",
                        i, name, (long long)e->v);
      diag_help(g, "every pipeline stage needs at least one layer; use a smaller pp instead");
      ok = false;
    }
    sum = cka(&st, sum, e->v);
    out[i] = e->v;
  }
  if (ok && (!st.ok || sum != layers)) {
    Diag *g = diag_at(d, DIAG_E0308, loc,
                      "`layer_partition` of pool `%s` does not add up to the model's layers: "
                      "expected %lld, got %lld",
                      name, (long long)layers, (long long)sum);
    if (st.ok) {
      if (sum < layers)
        diag_help(g, "add %lld layers to the stages", (long long)(layers - sum));
      else
        diag_help(g, "remove %lld layers from the stages", (long long)(sum - layers));
    }
    ok = false;
  }
  return ok;
}

/* Stage cost in the caller's unit, saturating instead of overflowing: the
 * comparison only needs the order. */
static int64_t stage_cost(int64_t nlayers, int64_t layer_w, int64_t extra) {
  int64_t c;
  if (!ck_mul(nlayers, layer_w, &c) || !ck_add(c, extra, &c)) return INT64_MAX;
  return c;
}

bool lay_partition(Diags *d, Engine engine, int64_t layers, int64_t pp, const PoolSpec *pool,
                   const LayWeights *w, int64_t *out) {
  RP_ASSERT(pp >= 1);
  if (pool && pool->layer_partition.set) return check_explicit(d, layers, pp, pool, out);
  if (pp > layers) {
    SrcLoc loc = pool ? (pool->pp.set ? pool->pp.loc : pool->loc) : (SrcLoc){0};
    Diag *g = diag_at(d, DIAG_E0306, loc,
                      "`pp` is larger than the model's layer count%s%s%s: expected at most %lld, "
                      "got %lld",
                      pool ? " in pool `" : "", pool && pool->name.v ? pool->name.v : "",
                      pool ? "`" : "", (long long)layers, (long long)pp);
    diag_help(g, "each pipeline stage needs at least one layer; choose pp <= %lld",
              (long long)layers);
    return false;
  }
  int64_t base = layers / pp, rem = layers % pp;
  switch (engine) {
  case ENGINE_VLLM:
    for (int64_t i = 0; i < pp; i++) out[i] = base;
    /* partitions[-i] += 1 for i in 2 .. rem+1 */
    for (int64_t i = 2; i < rem + 2; i++) out[pp - i] += 1;
    return true;
  case ENGINE_SGLANG:
    for (int64_t i = 0; i < pp; i++) out[i] = base + (i >= pp - rem ? 1 : 0);
    return true;
  case ENGINE_TRTLLM:
    for (int64_t i = 0; i < pp; i++) out[i] = base + (i < rem ? 1 : 0);
    return true;
  case ENGINE_GENERIC:
  default: {
    /* Water filling: give each layer in turn to the stage whose cost after
     * taking it is lowest (ties: the lower stage), starting from one layer
     * each. With equal layer weights this minimises the heaviest stage. */
    int64_t lw = w && w->layer > 0 ? w->layer : 1;
    int64_t ew = w && w->embedding > 0 ? w->embedding : 0;
    int64_t hw = w && w->head > 0 ? w->head : 0;
    for (int64_t i = 0; i < pp; i++) out[i] = 1;
    for (int64_t left = layers - pp; left > 0; left--) {
      int64_t best = -1, best_cost = INT64_MAX;
      for (int64_t i = 0; i < pp; i++) {
        int64_t extra = 0;
        if (i == 0) extra += ew;
        if (i == pp - 1) extra += hw;
        int64_t c = stage_cost(out[i] + 1, lw, extra);
        if (best < 0 || c < best_cost) {
          best = i;
          best_cost = c;
        }
      }
      out[best]++;
    }
    return true;
  }
  }
}

bool lay_set_partition(Diags *d, Layout *L, size_t pool, int64_t layers, const int64_t *counts,
                       SrcLoc origin) {
  RP_ASSERT(pool < L->npools);
  LayPool *P = &L->pools[pool];
  int64_t pp = P->size[CO_PP], sum = 0;
  CkState st = {true};
  for (int64_t i = 0; i < pp; i++) {
    if (counts[i] < 1) {
      Diag *g = diag_at(d, DIAG_E0309, origin,
                        "stage %lld of pool `%s` gets %lld layers: expected at least 1",
                        (long long)i, P->name, (long long)counts[i]);
      diag_help(g, "every pipeline stage needs at least one layer");
      return false;
    }
    sum = cka(&st, sum, counts[i]);
  }
  if (!st.ok || sum != layers) {
    Diag *g = diag_at(d, DIAG_E0308, origin,
                      "the layer partition of pool `%s` does not add up to the model's layers: "
                      "expected %lld, got %lld",
                      P->name, (long long)layers, (long long)sum);
    diag_help(g, "give the %lld stages %lld layers in total", (long long)pp, (long long)layers);
    return false;
  }
  for (int64_t i = 0; i < pp; i++) {
    P->layer_partition[i] = counts[i];
    P->layer_start[i] = i ? P->layer_start[i - 1] + counts[i - 1] : 0;
  }
  return true;
}
