/*
 * layout.c: the layout stage. Spec → Layout (layout.h).
 *
 * Input IR: a Spec without errors. Output IR: a Layout holding every global
 * rank (pool, instance, coordinates), every process group and each pool's
 * layer partition; placement (place.c) fills in nodes and devices later.
 *
 * The groups of one instance are Megatron-Core's: a dense RankGenerator
 * over (tp, cp, dp, pp) and a decoupled expert RankGenerator over (etp, ep,
 * edp, pp), both reading the spec's order string, innermost first. Every
 * instance of a pool has the same shape, so the groups are generated once
 * per pool in instance-relative ranks and then copied with the instance's
 * first global rank added (Megatron's rank_offset). That keeps group
 * construction O(ranks) at any scale.
 *
 * Invariants on return from lay_build(): see layout.h.
 */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

static const char *const dim_names[LAY_MAX_DIMS] = {"tp", "cp", "ep", "dp", "pp"};

/* ---- rank generator ---------------------------------------------------- */

static int rg__index(const RankGen *g, const char *name, size_t n) {
  for (int i = 0; i < g->ndims; i++)
    if (strlen(g->name[i]) == n && strncmp(g->name[i], name, n) == 0) return i;
  return -1;
}

bool lay_rankgen_init(RankGen *g, const char *order, int64_t tp, int64_t ep,
                      int64_t dp, int64_t pp, int64_t cp, const char **err) {
  /* Same name → size table as Megatron-Core's RankGenerator. */
  const int64_t sizes[LAY_MAX_DIMS] = {tp, cp, ep, dp, pp};
  memset(g, 0, sizeof *g);
  if (ep > 1 && cp > 1) {
    *err = "ep and cp cannot both exceed 1 in one rank generator";
    return false;
  }
  const char *p = order ? order : SPEC_ORDER_DEFAULT;
  while (*p) {
    const char *q = strchr(p, '-');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    int which = -1;
    for (int i = 0; i < LAY_MAX_DIMS; i++)
      if (n == 2 && strncmp(p, dim_names[i], 2) == 0) which = i;
    if (which < 0) {
      *err = "the order names a dimension other than tp, cp, ep, dp, pp";
      return false;
    }
    if (rg__index(g, p, n) >= 0) {
      *err = "the order names a dimension twice";
      return false;
    }
    if (g->ndims == LAY_MAX_DIMS) {
      *err = "the order names too many dimensions";
      return false;
    }
    memcpy(g->name[g->ndims], dim_names[which], 3);
    g->size[g->ndims++] = sizes[which];
    if (!q) break;
    p = q + 1;
    if (!*p) {
      *err = "the order ends with '-'";
      return false;
    }
  }
  /* A dimension left out of the order is appended (outermost) when its
   * size is 1; Megatron-Core raises otherwise, so do we
   * (megatron/core/parallel_state.py, RankGenerator.__init__). Where the
   * size-1 dimensions go does not change any group. */
  static const char *const left_out[LAY_MAX_DIMS] = {
      "the order leaves out tp, whose size is not 1", "the order leaves out cp, whose size is not 1",
      "the order leaves out ep, whose size is not 1", "the order leaves out dp, whose size is not 1",
      "the order leaves out pp, whose size is not 1"};
  for (int i = 0; i < LAY_MAX_DIMS; i++) {
    if (rg__index(g, dim_names[i], 2) >= 0) continue;
    if (sizes[i] != 1) {
      *err = left_out[i];
      return false;
    }
    memcpy(g->name[g->ndims], dim_names[i], 3);
    g->size[g->ndims++] = 1;
  }
  CkState st = {true};
  g->world = 1;
  for (int i = 0; i < g->ndims; i++) {
    if (g->size[i] < 1) {
      *err = "a parallel size is below 1";
      return false;
    }
    g->world = ckm(&st, g->world, g->size[i]);
  }
  if (!st.ok || g->world > INT32_MAX) {
    *err = "the parallel sizes multiply past 2^31";
    return false;
  }
  return true;
}

/* generate_masked_orthogonal_rank_groups: the masked dimensions vary inside
 * a group (innermost first), the unmasked ones enumerate the groups
 * (innermost first). A rank is sum(index[i] * stride[i]) with stride the
 * prefix product of the ordered sizes. */
bool lay_rankgen_groups(const RankGen *g, const char *token, int64_t *ngroups,
                        int64_t *gsize, int32_t **out) {
  bool mask[LAY_MAX_DIMS] = {false};
  const char *p = token;
  while (*p) {
    const char *q = strchr(p, '-');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    int i = rg__index(g, p, n);
    if (i < 0) return false;
    mask[i] = true;
    if (!q) break;
    p = q + 1;
  }
  int64_t stride[LAY_MAX_DIMS];
  int64_t acc = 1;
  for (int i = 0; i < g->ndims; i++) {
    stride[i] = acc;
    acc *= g->size[i];
  }
  int64_t mshape[LAY_MAX_DIMS], mstride[LAY_MAX_DIMS], ushape[LAY_MAX_DIMS],
      ustride[LAY_MAX_DIMS];
  int nm = 0, nu = 0;
  int64_t gs = 1;
  for (int i = 0; i < g->ndims; i++) {
    if (mask[i]) {
      mshape[nm] = g->size[i];
      mstride[nm++] = stride[i];
      gs *= g->size[i];
    } else {
      ushape[nu] = g->size[i];
      ustride[nu++] = stride[i];
    }
  }
  int64_t ng = g->world / gs;
  int32_t *r = rp_malloc((size_t)g->world * sizeof *r);
  /* Offsets of the members inside one group do not depend on the group:
   * compute them once. */
  int64_t *inner = rp_malloc((size_t)gs * sizeof *inner);
  for (int64_t k = 0; k < gs; k++) {
    int64_t rem = k, v = 0;
    for (int i = 0; i < nm; i++) {
      v += (rem % mshape[i]) * mstride[i];
      rem /= mshape[i];
    }
    inner[k] = v;
  }
  for (int64_t grp = 0; grp < ng; grp++) {
    int64_t rem = grp, base = 0;
    for (int i = 0; i < nu; i++) {
      base += (rem % ushape[i]) * ustride[i];
      rem /= ushape[i];
    }
    for (int64_t k = 0; k < gs; k++) r[grp * gs + k] = (int32_t)(base + inner[k]);
  }
  free(inner);
  *ngroups = ng;
  *gsize = gs;
  *out = r;
  return true;
}

int64_t lay_rankgen_coord(const RankGen *g, int64_t r, const char *name) {
  for (int i = 0; i < g->ndims; i++) {
    if (strcmp(g->name[i], name) == 0) return r % g->size[i];
    r /= g->size[i];
  }
  return 0;
}

/* ---- weights for the generic partition --------------------------------- */

LayWeights lay_default_weights(const Spec *s) {
  /* Parameter counts from the shapes, enough to weigh the embedding and
   * lm_head against one layer when balancing pipeline stages. The model
   * stage owns the exact per-component ledger; only ratios matter here. */
  const ModelSpec *m = &s->model;
  CkState st = {true};
  int64_t h = m->hidden_size.v, v = m->vocab_size.v;
  int64_t heads = m->attention.heads.v, kvh = m->attention.kv_heads.v;
  int64_t hd = m->attention.head_dim.v;
  int64_t attn;
  if (m->attention.kind.v == ATTN_MLA) {
    int64_t qk = cka(&st, m->attention.qk_nope_head_dim.v, m->attention.qk_rope_head_dim.v);
    int64_t qr = m->attention.q_lora_rank.v, kr = m->attention.kv_lora_rank.v;
    int64_t q = qr > 0 ? cka(&st, ckm(&st, h, qr), ckm(&st, qr, ckm(&st, heads, qk)))
                       : ckm(&st, h, ckm(&st, heads, qk));
    int64_t kv = cka(&st, ckm(&st, h, cka(&st, kr, m->attention.qk_rope_head_dim.v)),
                     ckm(&st, kr, ckm(&st, heads, cka(&st, m->attention.qk_nope_head_dim.v,
                                                       m->attention.v_head_dim.v))));
    int64_t o = ckm(&st, ckm(&st, heads, m->attention.v_head_dim.v), h);
    attn = cka(&st, cka(&st, q, kv), o);
  } else {
    attn = ckm(&st, h, ckm(&st, hd, cka(&st, ckm(&st, 2, heads), ckm(&st, 2, kvh))));
  }
  int64_t ffn;
  if (m->moe.present) {
    int64_t per = ckm(&st, 3, ckm(&st, h, m->moe.expert_intermediate_size.v));
    ffn = ckm(&st, per, cka(&st, m->moe.experts.v, m->moe.shared_experts.v));
  } else {
    ffn = ckm(&st, 3, ckm(&st, h, m->ffn.intermediate_size.v));
  }
  LayWeights w;
  w.layer = cka(&st, attn, ffn);
  w.embedding = ckm(&st, v, h);
  w.head = w.embedding;
  if (!st.ok || w.layer <= 0) w = (LayWeights){1, 0, 0};
  return w;
}

/* ---- lay_build ----------------------------------------------------------- */

/* Tokens of the Megatron-Core groups, by kind; NULL for the kinds built
 * otherwise. The expert kinds use the expert generator, where "tp" is etp
 * and "dp" is edp. */
static const char *const kind_token[GK__COUNT] = {
    [GK_TP] = "tp",         [GK_CP] = "cp",       [GK_DP] = "dp",
    [GK_PP] = "pp",         [GK_TP_CP] = "tp-cp", [GK_DP_CP] = "dp-cp",
    [GK_TP_PP] = "tp-pp",   [GK_TP_DP_CP] = "tp-dp-cp",
    [GK_EP] = "ep",         [GK_ETP] = "tp",      [GK_EDP] = "dp",
    [GK_TP_EP] = "tp-ep",
};
static bool kind_is_expert(GroupKind k) {
  return k == GK_EP || k == GK_ETP || k == GK_EDP || k == GK_TP_EP;
}

/* One pool's groups in instance-relative ranks. */
typedef struct {
  int64_t ngroups[GK__COUNT], gsize[GK__COUNT];
  int32_t *rows[GK__COUNT];   /* ngroups * gsize; embedding rows may be shorter */
  int32_t *emb_len;           /* embedding: members of each group (1 or 2) */
  int32_t coords[CO__COUNT];  /* unused: coords are per rank */
} PoolPattern;

static void pattern_free(PoolPattern *pp) {
  for (int k = 0; k < GK__COUNT; k++) free(pp->rows[k]);
  free(pp->emb_len);
}

/* E0302: etp * ep (which may overflow: then it divides nothing) does not
 * divide the instance's tp * cp * dp = tcd ranks. Lists the ep that do. */
static void expert_split_error(Diags *d, const PoolSpec *ps, const char *name, int64_t tcd,
                               int64_t etp, int64_t ep) {
  int64_t eg = 0;
  char prod[32];
  if (ck_mul(etp, ep, &eg)) snprintf(prod, sizeof prod, "%lld", (long long)eg);
  else snprintf(prod, sizeof prod, "more than 2^63");
  Diag *g = diag_at(d, DIAG_E0302, ps->ep.set ? ps->ep.loc : ps->loc,
                    "`etp * ep` does not divide `tp * cp * dp` in pool `%s`: expected a divisor "
                    "of %lld, got %lld * %lld = %s",
                    name, (long long)tcd, (long long)etp, (long long)ep, prod);
  StrBuf sb;
  sb_init(&sb);
  for (int64_t v = 1; v <= tcd / etp; v++)
    if (tcd % (v * etp) == 0) sb_printf(&sb, "%s%lld", sb.len ? ", " : "", (long long)v);
  if (!sb.len) diag_help(g, "etp = %lld is larger than the instance's %lld ranks; lower it",
                         (long long)etp, (long long)tcd);
  else diag_help(g, "with etp = %lld, ep can be one of: %s", (long long)etp, sb.buf);
  sb_free(&sb);
}

/* dcp divides tp in pool lp (E0304 otherwise, listing the divisors). */
static bool dcp_divides_tp(Diags *d, const PoolSpec *ps, const LayPool *lp) {
  int64_t tp = lp->size[CO_TP], dcp = lp->size[CO_DCP];
  if (tp % dcp == 0) return true;
  Diag *g = diag_at(d, DIAG_E0304, ps->dcp.set ? ps->dcp.loc : ps->loc,
                    "`dcp` does not divide `tp` in pool `%s`: expected a divisor of %lld, got %lld",
                    lp->name, (long long)tp, (long long)dcp);
  StrBuf sb;
  sb_init(&sb);
  for (int64_t v = 1; v <= tp; v++)
    if (tp % v == 0) sb_printf(&sb, "%s%lld", sb.len ? ", " : "", (long long)v);
  diag_help(g, "dcp reuses the tp ranks; choose one of: %s", sb.buf);
  sb_free(&sb);
  return false;
}

/* Megatron-Core asserts that the expert and dense pipeline groups agree;
 * they differ only when the order does not end in pp and edp != dp
 * (E0303). */
static bool pp_groups_agree(Diags *d, SrcLoc oloc, const char *order, const LayPool *lp,
                            const RankGen *expert, const PoolPattern *pat) {
  int64_t ng, gs;
  int32_t *epp;
  bool ok = lay_rankgen_groups(expert, "pp", &ng, &gs, &epp);
  RP_ASSERT(ok);
  bool same = ng == pat->ngroups[GK_PP] &&
              memcmp(epp, pat->rows[GK_PP], (size_t)(ng * gs) * sizeof *epp) == 0;
  free(epp);
  if (same) return true;
  Diag *g = diag_at(d, DIAG_E0303, oloc,
                    "expert and dense pipeline groups differ in pool `%s` under order `%s`: "
                    "expected edp == dp, got edp %lld and dp %lld",
                    lp->name, order, (long long)lp->size[CO_EDP], (long long)lp->size[CO_DP]);
  diag_help(g, "put pp last in the order (e.g. `tp-cp-ep-dp-pp`), or choose ep and etp so "
               "that etp * ep == tp * cp");
  return false;
}

/* The groups derived from the tp and pp groups: dcp, the embedding
 * groups and the whole instance. */
static void derived_groups(const LayPool *lp, PoolPattern *pat) {
  int64_t n = lp->instance_size, dcp = lp->size[CO_DCP], pp = lp->size[CO_PP];
  /* dcp: consecutive tp ranks, dcp at a time, inside each tp group. */
  pat->ngroups[GK_DCP] = n / dcp;
  pat->gsize[GK_DCP] = dcp;
  pat->rows[GK_DCP] = rp_malloc((size_t)n * sizeof(int32_t));
  memcpy(pat->rows[GK_DCP], pat->rows[GK_TP], (size_t)n * sizeof(int32_t));
  /* embedding: first and last rank of each pp group (just the first when
   * pp == 1), as default_embedding_ranks does. */
  int64_t npp = pat->ngroups[GK_PP];
  pat->ngroups[GK_EMBEDDING] = npp;
  pat->gsize[GK_EMBEDDING] = pp == 1 ? 1 : 2;
  pat->rows[GK_EMBEDDING] = rp_malloc((size_t)(npp * 2) * sizeof(int32_t));
  for (int64_t i = 0; i < npp; i++) {
    pat->rows[GK_EMBEDDING][i * pat->gsize[GK_EMBEDDING]] = pat->rows[GK_PP][i * pp];
    if (pp > 1) pat->rows[GK_EMBEDDING][i * 2 + 1] = pat->rows[GK_PP][i * pp + pp - 1];
  }
  pat->ngroups[GK_INSTANCE] = 1;
  pat->gsize[GK_INSTANCE] = n;
  pat->rows[GK_INSTANCE] = rp_malloc((size_t)n * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) pat->rows[GK_INSTANCE][i] = (int32_t)i;
}

/* Builds the pattern and each instance-relative rank's coordinates
 * (coords: instance_size * CO__COUNT). Returns false after reporting. */
static bool pool_pattern(Diags *d, const DeploymentSpec *dep, const PoolSpec *ps,
                         LayPool *lp, PoolPattern *pat, int32_t *coords) {
  const char *order = dep->order.set && dep->order.v ? dep->order.v : SPEC_ORDER_DEFAULT;
  SrcLoc oloc = dep->order.set ? dep->order.loc : ps->loc;
  RankGen dense, expert;
  const char *err = NULL;
  int64_t tp = lp->size[CO_TP], cp = lp->size[CO_CP], dp = lp->size[CO_DP],
          pp = lp->size[CO_PP], ep = lp->size[CO_EP], etp = lp->size[CO_ETP];
  if (!lay_rankgen_init(&dense, order, tp, 1, dp, pp, cp, &err)) {
    Diag *g = diag_at(d, DIAG_E0301, oloc, "rank order `%s` is not usable for pool `%s`: %s",
                      order, lp->name, err);
    diag_help(g, "name every dimension whose size is not 1, innermost first, e.g. `tp-cp-ep-dp-pp`");
    return false;
  }
  /* tp * cp * dp divides the instance size, which lay_build checked; etp
   * and ep are spec integers of their own, so their product is checked. */
  int64_t tcd = tp * cp * dp, eg = 0;
  if (!ck_mul(etp, ep, &eg) || tcd % eg != 0) {
    expert_split_error(d, ps, lp->name, tcd, etp, ep);
    return false;
  }
  lp->size[CO_EDP] = tcd / eg;
  if (!lay_rankgen_init(&expert, order, etp, ep, lp->size[CO_EDP], pp, 1, &err)) {
    Diag *g = diag_at(d, DIAG_E0301, oloc, "rank order `%s` is not usable for the expert groups of pool `%s`: %s",
                      order, lp->name, err);
    diag_help(g, "name every dimension whose size is not 1 (here tp is etp and dp is edp), innermost "
                 "first, e.g. `tp-cp-ep-dp-pp`");
    return false;
  }
  int64_t dcp = lp->size[CO_DCP];
  if (!dcp_divides_tp(d, ps, lp)) return false;
  for (int k = 0; k < GK__COUNT; k++) {
    if (!kind_token[k]) continue;
    const RankGen *g = kind_is_expert((GroupKind)k) ? &expert : &dense;
    bool ok = lay_rankgen_groups(g, kind_token[k], &pat->ngroups[k], &pat->gsize[k], &pat->rows[k]);
    RP_ASSERT(ok);
  }
  if (!pp_groups_agree(d, oloc, order, lp, &expert, pat)) return false;
  int64_t n = lp->instance_size;
  derived_groups(lp, pat);
  for (int64_t r = 0; r < n; r++) {
    int32_t *c = coords + r * CO__COUNT;
    c[CO_TP] = (int32_t)lay_rankgen_coord(&dense, r, "tp");
    c[CO_CP] = (int32_t)lay_rankgen_coord(&dense, r, "cp");
    c[CO_DP] = (int32_t)lay_rankgen_coord(&dense, r, "dp");
    c[CO_PP] = (int32_t)lay_rankgen_coord(&dense, r, "pp");
    c[CO_ETP] = (int32_t)lay_rankgen_coord(&expert, r, "tp");
    c[CO_EP] = (int32_t)lay_rankgen_coord(&expert, r, "ep");
    c[CO_EDP] = (int32_t)lay_rankgen_coord(&expert, r, "dp");
    c[CO_DCP] = (int32_t)(c[CO_TP] % dcp);
  }
  return true;
}

/* Pool p's sizes from its spec (defaults filled in), as the layout keeps
 * them. */
static void pool_sizes(const Spec *s, const PoolSpec *ps, LayPool *lp) {
  lp->name = ps->name.v;
  lp->role = (PoolRole)ps->role.v;
  lp->loc = ps->loc;
  lp->replicas = ps->replicas.set ? ps->replicas.v : 1;
  lp->size[CO_TP] = ps->tp.set ? ps->tp.v : 1;
  lp->size[CO_CP] = ps->cp.set ? ps->cp.v : 1;
  lp->size[CO_DP] = ps->dp.set ? ps->dp.v : 1;
  lp->size[CO_PP] = ps->pp.set ? ps->pp.v : 1;
  /* etp of an MoE pool is the spec's or its default tp*cp*dp/ep (parse.c,
   * default_expert_tp); without MoE the expert groups only mirror the
   * dense ones, so take Megatron-Core's default etp = tp, which keeps them
   * consistent under any order. ep and etp set on a dense model have no
   * effect (W0204) and are not used. */
  bool moe = s->model.moe.present;
  lp->size[CO_EP] = moe && ps->ep.set ? ps->ep.v : 1;
  lp->size[CO_ETP] = moe ? (ps->etp.v > 0 ? ps->etp.v : 1) : lp->size[CO_TP];
  lp->size[CO_DCP] = ps->dcp.set ? ps->dcp.v : 1;
  for (int c = 0; c < CO__COUNT; c++)
    if (c != CO_EDP && lp->size[c] < 1) lp->size[c] = 1;
  if (lp->replicas < 1) lp->replicas = 1;
}

/* Every pool's sizes and rank range, and the arrays for all ranks,
 * members and groups, sized with checked arithmetic: the plan indexes
 * ranks and groups with int32. False after reporting E0305. */
static bool size_layout(Diags *d, const Spec *s, Layout *L) {
  CkState st = {true};
  int64_t next = 0, nmembers = 0, ngroups = 1; /* + the world group */
  for (size_t p = 0; p < L->npools; p++) {
    LayPool *lp = &L->pools[p];
    pool_sizes(s, &s->deployment.pools[p], lp);
    lp->instance_size = ckm(&st, ckm(&st, lp->size[CO_TP], lp->size[CO_CP]),
                            ckm(&st, lp->size[CO_DP], lp->size[CO_PP]));
    lp->first_rank = next;
    lp->nranks = ckm(&st, lp->replicas, lp->instance_size);
    next = cka(&st, next, lp->nranks);
    /* Upper bound on members: every kind but world holds each rank once. */
    nmembers = cka(&st, nmembers, ckm(&st, lp->nranks, GK__COUNT - 1));
    ngroups = cka(&st, ngroups, ckm(&st, lp->nranks, GK__COUNT - 1));
  }
  nmembers = cka(&st, nmembers, next);
  /* Placement indexes the cluster's GPUs (node * gpus_per_node + gpu) with
   * int32 as well. */
  int64_t cluster = ckm(&st, L->nodes, L->gpus_per_node);
  if (!st.ok || next > INT32_MAX || ngroups > INT32_MAX || nmembers > INT64_MAX / 8 ||
      cluster > INT32_MAX) {
    diag_at(d, DIAG_E0305, s->deployment.loc,
            "the deployment has too many ranks for a plan: expected at most %d ranks and "
            "groups, got %s",
            INT32_MAX, st.ok ? "more" : "a count past 2^63");
    return false;
  }
  L->world_size = L->nranks = next;
  L->ranks = rp_malloc((size_t)(next ? next : 1) * sizeof *L->ranks);
  L->members = rp_malloc((size_t)(nmembers ? nmembers : 1) * sizeof *L->members);
  L->groups = rp_malloc((size_t)(ngroups ? ngroups : 1) * sizeof *L->groups);
  return true;
}

/* The ranks and groups of instance inst of pool p, from the pool's
 * pattern (one instance's coordinates and groups). */
static void fill_instance(Layout *L, size_t p, int64_t inst, const PoolPattern *pat,
                          const int32_t *coords) {
  const LayPool *lp = &L->pools[p];
  int64_t n = lp->instance_size, base = lp->first_rank + inst * n;
  for (int64_t r = 0; r < n; r++) {
    LayRank *R = &L->ranks[base + r];
    R->pool = (int32_t)p;
    R->instance = (int32_t)inst;
    R->node = R->local_rank = R->device = -1;
    memcpy(R->coords, coords + r * CO__COUNT, sizeof R->coords);
    for (int k = 0; k < GK__COUNT; k++) R->group[k] = -1;
  }
  for (int k = 0; k < GK_WORLD; k++) {
    for (int64_t gi = 0; gi < pat->ngroups[k]; gi++) {
      LayGroup *G = &L->groups[L->ngroups];
      G->kind = (GroupKind)k;
      G->pool = (int32_t)p;
      G->instance = (int32_t)inst;
      G->n = (int32_t)pat->gsize[k];
      G->off = L->nmembers;
      const int32_t *row = pat->rows[k] + gi * pat->gsize[k];
      for (int64_t j = 0; j < pat->gsize[k]; j++) {
        int32_t gr = (int32_t)(base + row[j]);
        L->members[L->nmembers++] = gr;
        L->ranks[gr].group[k] = (int32_t)L->ngroups;
      }
      L->ngroups++;
    }
  }
}

/* Pool p: its layer partition, then every instance's ranks and groups.
 * False after reporting. */
static bool fill_pool(Diags *d, const Spec *s, const LayWeights *wd, Layout *L, size_t p) {
  const PoolSpec *ps = &s->deployment.pools[p];
  LayPool *lp = &L->pools[p];
  int64_t n = lp->instance_size, ppn = lp->size[CO_PP];
  lp->layer_partition = rp_calloc((size_t)ppn, sizeof(int64_t));
  lp->layer_start = rp_calloc((size_t)ppn, sizeof(int64_t));
  if (!lay_partition(d, L->engine, s->model.layers.v, ppn, ps, wd, lp->layer_partition))
    return false;
  for (int64_t i = 1; i < ppn; i++)
    lp->layer_start[i] = lp->layer_start[i - 1] + lp->layer_partition[i - 1];
  PoolPattern pat;
  memset(&pat, 0, sizeof pat);
  int32_t *coords = rp_malloc((size_t)(n * CO__COUNT) * sizeof *coords);
  bool ok = pool_pattern(d, &s->deployment, ps, lp, &pat, coords);
  for (int64_t inst = 0; ok && inst < lp->replicas; inst++) fill_instance(L, p, inst, &pat, coords);
  pattern_free(&pat);
  free(coords);
  return ok;
}

/* The world group: every rank of the plan. */
static void add_world(Layout *L) {
  LayGroup *G = &L->groups[L->ngroups];
  G->kind = GK_WORLD;
  G->pool = G->instance = -1;
  G->n = (int32_t)L->nranks;
  G->off = L->nmembers;
  for (int64_t r = 0; r < L->nranks; r++) {
    L->members[L->nmembers++] = (int32_t)r;
    L->ranks[r].group[GK_WORLD] = (int32_t)L->ngroups;
  }
  L->ngroups++;
}

Layout *lay_build(Diags *d, const Spec *s, const LayWeights *w) {
  const DeploymentSpec *dep = &s->deployment;
  Layout *L = rp_calloc(1, sizeof *L);
  L->nodes = s->hardware.nodes.v;
  L->nodes_loc = s->hardware.nodes.set ? s->hardware.nodes.loc : s->hardware.loc;
  L->gpus_per_node = s->hardware.gpus_per_node.v;
  L->domain = s->hardware.scale_up.domain.set && s->hardware.scale_up.domain.v > 0
                  ? s->hardware.scale_up.domain.v
                  : L->gpus_per_node;
  L->allow_tp_across_domain = dep->allow_tp_across_domain.set && dep->allow_tp_across_domain.v;
  L->engine = (Engine)dep->engine.v;
  L->npools = dep->npools;
  L->pools = rp_calloc(L->npools ? L->npools : 1, sizeof *L->pools);
  LayWeights wd = w ? *w : lay_default_weights(s);
  bool ok = size_layout(d, s, L);
  for (size_t p = 0; ok && p < L->npools; p++) ok = fill_pool(d, s, &wd, L, p);
  if (!ok) {
    lay_free(L);
    return NULL;
  }
  add_world(L);
  return L;
}

void lay_free(Layout *L) {
  if (!L) return;
  for (size_t p = 0; p < L->npools; p++) {
    free(L->pools[p].layer_partition);
    free(L->pools[p].layer_start);
    free(L->pools[p].mem);
    free(L->pools[p].kv_bytes_per_token);
    free(L->pools[p].kv_draft_bytes_per_token);
    free(L->pools[p].kv_blocks);
    free(L->pools[p].expert_map);
  }
  free(L->pools);
  free(L->ranks);
  free(L->groups);
  free(L->members);
  free(L);
}

void lay_set_expert_map(Layout *L, size_t pool, int64_t experts, int64_t ep, int64_t slots,
                        const int64_t *offsets, const int64_t *ranks) {
  RP_ASSERT(pool < L->npools);
  LayPool *P = &L->pools[pool];
  RP_ASSERT(ep == P->size[CO_EP] && slots >= 1 && experts >= 1 && slots <= experts);
  RP_ASSERT(slots <= INT32_MAX / ep && experts <= INT32_MAX);
  int32_t *map = rp_malloc((size_t)(ep * slots) * sizeof *map);
  int64_t *used = rp_calloc((size_t)ep, sizeof *used);
  /* Experts in ascending order, so each rank's list comes out ascending. */
  for (int64_t e = 0; e < experts; e++) {
    RP_ASSERT(offsets[e] < offsets[e + 1]);
    for (int64_t i = offsets[e]; i < offsets[e + 1]; i++) {
      int64_t r = ranks[i];
      RP_ASSERT(r >= 0 && r < ep && used[r] < slots);
      map[r * slots + used[r]++] = (int32_t)e;
    }
  }
  for (int64_t r = 0; r < ep; r++) RP_ASSERT(used[r] == slots);
  free(used);
  free(P->expert_map);
  P->expert_map = map;
  P->expert_slots = slots;
}

const LayGroup *lay_rank_group(const Layout *L, int64_t r, GroupKind k) {
  if (r < 0 || r >= L->nranks) return NULL;
  int32_t id = L->ranks[r].group[k];
  return id < 0 ? NULL : &L->groups[id];
}

/* ---- shards -------------------------------------------------------------- */

/* The i-th of n balanced parts of [0, total): [i*total/n, (i+1)*total/n). */
static void part(int64_t total, int64_t n, int64_t i, int64_t out[2]) {
  out[0] = total * i / n;
  out[1] = total * (i + 1) / n;
}

void lay_rank_shards(const Layout *L, const Spec *s, int64_t r, int64_t out[SH__COUNT][2]) {
  const LayRank *R = &L->ranks[r];
  const LayPool *P = &L->pools[R->pool];
  const ModelSpec *m = &s->model;
  int64_t tp = P->size[CO_TP], t = R->coords[CO_TP], st = R->coords[CO_PP];
  out[SH_LAYERS][0] = P->layer_start[st];
  out[SH_LAYERS][1] = P->layer_start[st] + P->layer_partition[st];
  part(m->attention.heads.v, tp, t, out[SH_Q_HEADS]);
  /* KV heads: split over tp while tp <= kv_heads; beyond that each head is
   * replicated tp / kv_heads times (spec.md). MLA's latent KV is one head
   * held by every tp rank. */
  int64_t kvh = m->attention.kind.v == ATTN_MLA ? 1 : m->attention.kv_heads.v;
  if (kvh < 1) kvh = 1;
  if (tp <= kvh) {
    part(kvh, tp, t, out[SH_KV_HEADS]);
  } else {
    int64_t h = t * kvh / tp;
    out[SH_KV_HEADS][0] = h;
    out[SH_KV_HEADS][1] = h + 1;
  }
  if (m->moe.present && m->moe.experts.v > 0 && !P->expert_map) {
    part(m->moe.experts.v, P->size[CO_EP], R->coords[CO_EP], out[SH_EXPERTS]);
  } else {
    out[SH_EXPERTS][0] = out[SH_EXPERTS][1] = 0;
  }
  /* Vocabulary rows: the embedding on the first stage and lm_head on the
   * last, split over tp as a vocab-parallel embedding. */
  if (st == 0 || st == P->size[CO_PP] - 1) {
    int64_t v = m->vocab_size.v, per = (v + tp - 1) / tp;
    int64_t a = per * t, b = per * (t + 1);
    out[SH_VOCAB][0] = a < v ? a : v;
    out[SH_VOCAB][1] = b < v ? b : v;
  } else {
    out[SH_VOCAB][0] = out[SH_VOCAB][1] = 0;
  }
}
