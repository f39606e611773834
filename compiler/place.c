/*
 * place.c: placement of ranks on nodes and GPUs.
 *
 * Input: a Layout without placement (lay_build). Output: the same Layout
 * with ranks[].node, device and local_rank set.
 * Invariants after lay_place_default() or lay_place_set() returned true:
 * every rank is on exactly one GPU of the cluster, no GPU holds two ranks,
 * and every tp group lies inside one scale-up domain (and so one node when
 * the domain is not larger than a node) unless the spec sets
 * deployment.allow_tp_across_domain.
 *
 * A placement is validated whatever produced it, the default packer or a
 * Lua hook: lay_place_validate() is the one gate.
 */
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "layout.h"

/* The scale-up domain of a GPU (util.h, rp_scaleup_domain). */
static int64_t domain_of(const Layout *L, int64_t node, int64_t gpu) {
  return rp_scaleup_domain(L->domain, L->gpus_per_node, node, gpu);
}

/* The cluster's GPU count; lay_build refused clusters past INT32_MAX GPUs,
 * so the product neither overflows nor leaves the int32 GPU index. */
static int64_t cluster_gpus(const Layout *L) {
  int64_t n = 0;
  RP_ASSERT(ck_mul(L->nodes, L->gpus_per_node, &n) && n <= INT32_MAX);
  return n;
}

/* How many diagnostics of one kind to print before summarising: a broken
 * hook on 100k ranks should not print 100k lines. */
enum { PLACE_MAX_REPORTS = 5 };

/* Every tp group inside one scale-up domain (E0322 for each that is not,
 * the first PLACE_MAX_REPORTS of them shown); *cross counts them. */
static bool tp_groups_in_domain(Diags *d, const Layout *L, const int32_t *node, const int32_t *gpu,
                                SrcLoc origin, int *cross) {
  bool ok = true;
  for (int64_t gi = 0; gi < L->ngroups; gi++) {
    const LayGroup *G = &L->groups[gi];
    if (G->kind != GK_TP || G->n < 2) continue;
    const int32_t *m = L->members + G->off;
    int64_t dom0 = domain_of(L, node[m[0]], gpu[m[0]]);
    for (int32_t j = 1; j < G->n; j++) {
      if (domain_of(L, node[m[j]], gpu[m[j]]) == dom0 && (L->domain > L->gpus_per_node ||
                                                          node[m[j]] == node[m[0]]))
        continue;
      if ((*cross)++ < PLACE_MAX_REPORTS) {
        const LayPool *P = &L->pools[G->pool];
        Diag *g = diag_at(d, DIAG_E0322, origin,
                          "tp group %lld of pool `%s` instance %d spans scale-up domains: rank "
                          "%d is on node %d gpu %d, rank %d on node %d gpu %d (domain of %lld "
                          "GPUs)",
                          (long long)gi, P->name, G->instance, m[0], node[m[0]], gpu[m[0]],
                          m[j], node[m[j]], gpu[m[j]], (long long)L->domain);
        if (P->size[CO_TP] > L->domain)
          diag_help(g, "tp %lld is larger than the scale-up domain (%lld GPUs): lower tp, or "
                       "set deployment.allow_tp_across_domain: true",
                    (long long)P->size[CO_TP], (long long)L->domain);
        else
          diag_help(g, "put tp first in deployment.order so each tp group is on consecutive "
                       "GPUs, or set deployment.allow_tp_across_domain: true");
      }
      ok = false;
      break;
    }
  }
  return ok;
}

bool lay_place_validate(Diags *d, const Layout *L, const int32_t *node, const int32_t *gpu,
                        SrcLoc origin) {
  bool ok = true;
  int64_t ngpus = cluster_gpus(L);
  int32_t *owner = rp_malloc((size_t)(ngpus ? ngpus : 1) * sizeof *owner);
  for (int64_t i = 0; i < ngpus; i++) owner[i] = -1;
  int bad_gpu = 0, shared = 0, cross = 0;
  for (int64_t r = 0; r < L->nranks; r++) {
    if (node[r] < 0 || node[r] >= L->nodes || gpu[r] < 0 || gpu[r] >= L->gpus_per_node) {
      if (bad_gpu++ < PLACE_MAX_REPORTS) {
        Diag *g = diag_at(d, DIAG_E0320, origin,
                          "rank %lld is placed on a GPU the cluster does not have: expected node "
                          "0..%lld and gpu 0..%lld, got node %d gpu %d",
                          (long long)r, (long long)(L->nodes - 1),
                          (long long)(L->gpus_per_node - 1), node[r], gpu[r]);
        diag_help(g, "the cluster has %lld nodes of %lld GPUs (hardware.nodes, "
                     "hardware.gpus_per_node)",
                  (long long)L->nodes, (long long)L->gpus_per_node);
      }
      ok = false;
      continue;
    }
    int64_t slot = (int64_t)node[r] * L->gpus_per_node + gpu[r];
    if (owner[slot] >= 0) {
      if (shared++ < PLACE_MAX_REPORTS) {
        Diag *g = diag_at(d, DIAG_E0321, origin,
                          "ranks %d and %lld are placed on the same GPU: node %d gpu %d",
                          owner[slot], (long long)r, node[r], gpu[r]);
        diag_help(g, "each rank needs a GPU of its own");
      }
      ok = false;
      continue;
    }
    owner[slot] = (int32_t)r;
  }
  free(owner);
  if (ok && !L->allow_tp_across_domain) ok = tp_groups_in_domain(d, L, node, gpu, origin, &cross);
  if (bad_gpu > PLACE_MAX_REPORTS || shared > PLACE_MAX_REPORTS || cross > PLACE_MAX_REPORTS) {
    DiagCode code = bad_gpu > PLACE_MAX_REPORTS ? DIAG_E0320
                    : shared > PLACE_MAX_REPORTS  ? DIAG_E0321
                                                  : DIAG_E0322;
    Diag *g = diag_at(d, code, origin,
                      "the placement has more problems: %d off the cluster, %d on a shared GPU, "
                      "%d tp groups across domains",
                      bad_gpu, shared, cross);
    diag_help(g, "only the first %d of each kind are shown", PLACE_MAX_REPORTS);
  }
  return ok;
}

bool lay_place_set(Diags *d, Layout *L, const int32_t *node, const int32_t *gpu, SrcLoc origin) {
  if (!lay_place_validate(d, L, node, gpu, origin)) return false;
  /* local_rank: the rank's index among its node's ranks, in global order. */
  int32_t *count = rp_calloc((size_t)(L->nodes ? L->nodes : 1), sizeof *count);
  for (int64_t r = 0; r < L->nranks; r++) {
    LayRank *R = &L->ranks[r];
    R->node = node[r];
    R->device = gpu[r];
    R->local_rank = count[node[r]]++;
  }
  free(count);
  L->placed = true;
  int64_t ngpus = cluster_gpus(L);
  if (L->nranks < ngpus) {
    Diag *g = diag_at(d, DIAG_W0301, L->nodes_loc, "the plan leaves %lld of the cluster's %lld GPUs unused",
                      (long long)(ngpus - L->nranks), (long long)ngpus);
    diag_help(g, "add replicas to a pool, or lower hardware.nodes");
  }
  return true;
}

/* Whether placing the instance [base, base+n) of pool P at global GPU
 * index at keeps every tp group in one domain and one node. */
static bool fits_at(const Layout *L, const LayPool *P, int64_t first_group, int64_t at) {
  for (int64_t gi = first_group; gi < L->ngroups; gi++) {
    const LayGroup *G = &L->groups[gi];
    if (G->pool != L->groups[first_group].pool || G->instance != L->groups[first_group].instance)
      break;
    if (G->kind != GK_TP || G->n < 2) continue;
    const int32_t *m = L->members + G->off;
    int64_t inst_base = P->first_rank + (int64_t)G->instance * P->instance_size;
    int64_t g0 = at + (m[0] - inst_base);
    int64_t n0 = g0 / L->gpus_per_node, dom0 = domain_of(L, n0, g0 % L->gpus_per_node);
    for (int32_t j = 1; j < G->n; j++) {
      int64_t g = at + (m[j] - inst_base);
      int64_t nj = g / L->gpus_per_node;
      if (domain_of(L, nj, g % L->gpus_per_node) != dom0) return false;
      if (L->domain <= L->gpus_per_node && nj != n0) return false;
    }
  }
  return true;
}

/* Where the instance whose first group is gi starts, the cursor being at:
 * at itself when its tp groups fit there, else the next boundary that keeps
 * them whole: the next domain boundary inside a node or the next node,
 * then, for a domain spanning nodes (an NVL72 rack), the next domain.
 * When none helps (tp larger than the domain, or a tp group strided wider
 * than it) the instance stays at `at` and validation says why. */
static int64_t instance_start(const Layout *L, const LayPool *P, int64_t gi, int64_t at) {
  if (L->allow_tp_across_domain || fits_at(L, P, gi, at)) return at;
  int64_t align = L->domain < L->gpus_per_node ? L->domain : L->gpus_per_node;
  int64_t next = (at / align + 1) * align;
  if (fits_at(L, P, gi, next)) return next;
  if (L->domain > L->gpus_per_node) {
    next = (at / L->domain + 1) * L->domain;
    if (fits_at(L, P, gi, next)) return next;
  }
  return at;
}

/* Whether n GPUs placed from offset off of a gpn-GPU node take the same
 * number on every node they touch, as the engines' launchers need
 * (emit_inst.c). */
static bool splits_evenly(int64_t off, int64_t n, int64_t gpn) {
  int64_t first = n < gpn - off ? n : gpn - off;
  for (int64_t rest = n - first; rest > 0; rest -= gpn)
    if ((rest < gpn ? rest : gpn) != first) return false;
  return true;
}

/* Where the instance (n GPUs, first group gi) starts once at is known
 * (instance_start): the next node when from at its nodes would hold
 * unequal parts of it and from there they would not, provided the left
 * GPUs of the instances still to place (this one included) fit after
 * that boundary; otherwise at itself. */
static int64_t node_start(const Layout *L, const LayPool *P, int64_t gi, int64_t at, int64_t n, int64_t left,
                          int64_t ngpus) {
  int64_t gpn = L->gpus_per_node, off = gpn > 0 ? at % gpn : 0;
  if (off == 0 || splits_evenly(off, n, gpn) || !splits_evenly(0, n, gpn)) return at;
  int64_t next = at - off + gpn;
  if (next > ngpus - left || (!L->allow_tp_across_domain && !fits_at(L, P, gi, next))) return at;
  return next;
}

bool lay_place_default(Diags *d, Layout *L) {
  int64_t ngpus = cluster_gpus(L);
  int32_t *node = rp_malloc((size_t)(L->nranks ? L->nranks : 1) * sizeof *node);
  int32_t *gpu = rp_malloc((size_t)(L->nranks ? L->nranks : 1) * sizeof *gpu);
  int64_t at = 0, gi = 0, left = 0;
  bool ok = true;
  for (size_t p = 0; p < L->npools; p++) left += L->pools[p].replicas * L->pools[p].instance_size;
  for (size_t p = 0; p < L->npools && ok; p++) {
    const LayPool *P = &L->pools[p];
    for (int64_t inst = 0; inst < P->replicas && ok; inst++) {
      /* Groups are stored instance by instance: find this instance's first. */
      while (gi < L->ngroups &&
             (L->groups[gi].pool != (int32_t)p || L->groups[gi].instance != (int32_t)inst))
        gi++;
      RP_ASSERT(gi < L->ngroups);
      at = node_start(L, P, gi, instance_start(L, P, gi, at), P->instance_size, left, ngpus);
      left -= P->instance_size;
      if (at + P->instance_size > ngpus) {
        Diag *g = diag_at(d, DIAG_E0323, P->loc,
                          "the default placement runs out of GPUs at pool `%s` instance %lld: "
                          "expected %lld free GPUs, got %lld",
                          P->name, (long long)inst, (long long)P->instance_size,
                          (long long)(ngpus - at));
        diag_help(g, "instances start on a scale-up domain boundary when they would otherwise "
                     "split a tp group; add nodes, or make instance sizes multiples of the "
                     "domain (%lld GPUs)",
                  (long long)L->domain);
        ok = false;
        break;
      }
      int64_t base = P->first_rank + inst * P->instance_size;
      for (int64_t r = 0; r < P->instance_size; r++) {
        node[base + r] = (int32_t)((at + r) / L->gpus_per_node);
        gpu[base + r] = (int32_t)((at + r) % L->gpus_per_node);
      }
      at += P->instance_size;
    }
  }
  SrcLoc origin = L->npools ? L->pools[0].loc : (SrcLoc){0};
  if (ok) ok = lay_place_set(d, L, node, gpu, origin);
  free(node);
  free(gpu);
  return ok;
}

/* W0702 for one instance (ranks [base, base + n)): unequal parts on its
 * nodes, or under vLLM a layout its launch files cannot run over nodes
 * (engine_vllm_nodes_refusal). cnt: one zeroed counter per node. */
static void check_instance(Diags *d, const Spec *s, const Layout *L, const LayPool *P, int64_t inst,
                           int64_t *cnt) {
  int64_t base = P->first_rank + inst * P->instance_size, lo = INT64_MAX, hi = 0, nodes = 0;
  for (int64_t r = base; r < base + P->instance_size; r++) cnt[L->ranks[r].node]++;
  for (int64_t k = 0; k < L->nodes; k++) {
    if (!cnt[k]) continue;
    nodes++;
    if (cnt[k] < lo) lo = cnt[k];
    if (cnt[k] > hi) hi = cnt[k];
    cnt[k] = 0;
  }
  Engine e = (Engine)s->deployment.engine.v;
  const int64_t *z = P->size;
  int64_t v[ED__COUNT] = {z[CO_TP], z[CO_PP], z[CO_DP], z[CO_EP], z[CO_ETP], z[CO_CP], z[CO_DCP]};
  const char *why = lo != hi ? "the same number of ranks on every node of an instance"
                    : e == ENGINE_VLLM && nodes > 1
                        ? engine_vllm_nodes_refusal(v, L->gpus_per_node,
                                                    s->deployment.order.set ? s->deployment.order.v : NULL)
                        : NULL;
  if (!why) return;
  Diag *g = diag_at(d, DIAG_W0702, P->loc,
                    "pool `%s` instance %lld is placed on %lld nodes (%lld to %lld ranks each), which %s's launch "
                    "files cannot run: they need %s",
                    P->name, (long long)inst, (long long)nodes, (long long)lo, (long long)hi, engine_name(e), why);
  diag_help(g, "`rankplan emit -t %s` refuses the plan; make the instance one node or less, or whole nodes, or "
               "place it with a `placement` hook (docs/engines.md, \"CUDA_VISIBLE_DEVICES and nodes\")",
            engine_name(e));
}

void lay_place_check_engine(Diags *d, const Spec *s, const Layout *L) {
  if ((Engine)s->deployment.engine.v == ENGINE_GENERIC || !L->placed || L->nodes <= 0) return;
  int64_t *cnt = rp_calloc((size_t)L->nodes, sizeof *cnt);
  for (size_t p = 0; p < L->npools; p++)
    for (int64_t i = 0; i < L->pools[p].replicas; i++) check_instance(d, s, L, &L->pools[p], i, cnt);
  free(cnt);
}
