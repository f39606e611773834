/*
 * engines.c: the engine rules of `check` and `compile` (engines.h).
 *
 * Input: a parsed Spec. Output: diagnostics E0701-E0799 only; the Spec is
 * not changed. For every pool and every parallel dimension above 1 the
 * engine's catalog entry must list the pool's role, and the entry's named
 * rules must hold; a refusal names the engine, its version, the dimension
 * and the nearest layout the engine runs on the same GPUs (the refused
 * dimensions folded into ones it supports).
 */
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "model.h"

#include <ctype.h>
#include <limits.h>

const char *engine_kv(const EngineKV *t, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(t[i].key, key) == 0) return t[i].value;
  return NULL;
}

const char *engine_flag(const EngineCaps *c, const char *term) {
  return engine_kv(c->flags, c->nflags, term);
}

const char *engine_yaml_key(const EngineCaps *c, const char *term) {
  return engine_kv(c->yaml_keys, c->nyaml_keys, term);
}

bool engine_takes(const EngineCaps *c, const char *term) {
  return engine_flag(c, term) || engine_yaml_key(c, term);
}

/* One dotted segment of a version: its leading number, then a word and
 * the number after it ("4rc1": 4, "rc", 1; "post2": 0, "post", 2; a
 * missing segment: 0 and no word). Numbers saturate rather than wrap. */
typedef struct {
  unsigned long long num, wnum;
  const char *w;
  size_t wl;
} VerSeg;

static unsigned long long ver_num(const char **s) {
  unsigned long long v = 0;
  for (; **s >= '0' && **s <= '9'; (*s)++) v = v > (ULLONG_MAX - 9) / 10 ? ULLONG_MAX : v * 10 + (unsigned)(**s - '0');
  return v;
}

static const char *ver_seg(const char *s, VerSeg *g) {
  g->num = ver_num(&s);
  g->w = s;
  while (*s && *s != '.' && !(*s >= '0' && *s <= '9')) s++;
  g->wl = (size_t)(s - g->w);
  g->wnum = ver_num(&s);
  while (*s && *s != '.') s++; /* anything after is not compared */
  return *s == '.' ? s + 1 : s;
}

/* A pre-release word sorts before the release, any other after it. */
static int ver_rank(const VerSeg *g) {
  static const char *const pre[] = {"a", "alpha", "b", "beta", "rc", "dev", "pre"};
  if (g->wl == 0) return 0;
  for (size_t i = 0; i < RP_ARRAY_LEN(pre); i++)
    if (strlen(pre[i]) == g->wl && strncmp(pre[i], g->w, g->wl) == 0) return -1;
  return 1;
}

/* Segment by segment: the number, then pre-release < none < other words
 * ("post"), then the word, then its number; a missing segment is 0
 * ("0.11" == "0.11.0", "0.4" < "0.4.7", "0.5.4rc1" < "0.5.4",
 * "0.4.10.post2" < "0.4.10.post10"). */
int engine_version_cmp(const char *a, const char *b) {
  while (*a || *b) {
    VerSeg x, y;
    a = ver_seg(a, &x);
    b = ver_seg(b, &y);
    int rx = ver_rank(&x), ry = ver_rank(&y);
    size_t n = x.wl < y.wl ? x.wl : y.wl;
    int c = n ? strncmp(x.w, y.w, n) : 0;
    if (x.num != y.num) return x.num < y.num ? -1 : 1;
    if (rx != ry) return rx < ry ? -1 : 1;
    if (c || x.wl != y.wl) return c ? (c < 0 ? -1 : 1) : (x.wl < y.wl ? -1 : 1);
    if (x.wnum != y.wnum) return x.wnum < y.wnum ? -1 : 1;
  }
  return 0;
}


/* A pool's sizes in EngineDim order (etp and ep as written; edp derived). */
typedef struct {
  int64_t v[ED__COUNT];
  int64_t edp;
} Sizes;

static Sizes pool_sizes(const PoolSpec *p) {
  Sizes z = {{p->tp.v, p->pp.v, p->dp.v, p->ep.v, p->etp.v, p->cp.v, p->dcp.v}, 1};
  int64_t ranks = 0, eg = 0;
  if (ck_mul(p->tp.v, p->cp.v, &ranks) && ck_mul(ranks, p->dp.v, &ranks) && ck_mul(p->ep.v, p->etp.v, &eg) &&
      eg > 0 && ranks % eg == 0)
    z.edp = ranks / eg;
  return z;
}

static SrcLoc dim_loc(const PoolSpec *p, EngineDim d) {
  const SInt *f[ED__COUNT] = {&p->tp, &p->pp, &p->dp, &p->ep, &p->etp, &p->cp, &p->dcp};
  return f[d]->set ? f[d]->loc : p->loc;
}

/* Folds what the engine refuses into what it runs, keeping the GPUs:
 * cp and pp into tp, attention dp into dp with tp 1, expert groups into
 * one; dcp is dropped (it reuses the tp ranks). Saturating: a message. */
static Sizes nearest(const EngineCaps *c, PoolRole role, Sizes z, bool moe) {
  int64_t *v = z.v;
  if (v[ED_CP] > 1 && !c->dim[ED_CP].roles[role]) v[ED_TP] = mul_sat(v[ED_TP], v[ED_CP]), v[ED_CP] = 1;
  if (v[ED_PP] > 1 && !c->dim[ED_PP].roles[role]) v[ED_TP] = mul_sat(v[ED_TP], v[ED_PP]), v[ED_PP] = 1;
  if (v[ED_DP] > 1 && !c->dim[ED_DP].roles[role]) v[ED_TP] = mul_sat(v[ED_TP], v[ED_DP]), v[ED_DP] = 1;
  if (v[ED_DCP] > 1 && (!c->dim[ED_DCP].roles[role] ||
                        ((c->rules & ER_DCP_DIVIDES_TP) && v[ED_TP] % v[ED_DCP] != 0)))
    v[ED_DCP] = 1;
  if (moe && (c->rules & ER_DP_NEEDS_TP1) && v[ED_DP] > 1 && v[ED_TP] > 1)
    v[ED_DP] = mul_sat(v[ED_DP], v[ED_TP]), v[ED_TP] = 1;
  int64_t ranks = mul_sat(mul_sat(v[ED_TP], v[ED_CP]), v[ED_DP]);
  if (moe && (v[ED_EP] > 1 || v[ED_ETP] > 1) && !c->dim[ED_EP].roles[role]) v[ED_EP] = 1, v[ED_ETP] = ranks;
  if (moe && (c->rules & ER_EDP_ONE) && v[ED_EP] > 1) v[ED_EP] = ranks / (v[ED_ETP] ? v[ED_ETP] : 1);
  if (moe && (c->rules & ER_EP_ALL_OR_NONE) && v[ED_EP] > 1 && v[ED_ETP] > 1) v[ED_EP] = ranks, v[ED_ETP] = 1;
  if (moe && v[ED_EP] == 1 && (c->rules & ER_EDP_ONE)) v[ED_ETP] = ranks;
  z.edp = 1;
  return z;
}

static void put_layout(StrBuf *sb, const Sizes *z, bool moe) {
  static const EngineDim order[] = {ED_TP, ED_PP, ED_DP, ED_CP, ED_DCP, ED_EP, ED_ETP};
  for (size_t i = 0; i < RP_ARRAY_LEN(order); i++) {
    if (!moe && (order[i] == ED_EP || order[i] == ED_ETP)) continue;
    sb_printf(sb, "%s%s %lld", i ? ", " : "", engine_dim_name(order[i]), (long long)z->v[order[i]]);
  }
}

static void refuse(Diags *d, const EngineCaps *c, const PoolSpec *p, EngineDim dim, const char *why,
                   Sizes z, bool moe) {
  PoolRole role = (PoolRole)p->role.v;
  /* etp left unset is the default tp*cp*dp/ep (parse.c): say so, since
   * the spec does not show it. */
  const char *dflt = dim == ED_ETP && !p->etp.set ? " (the default tp*cp*dp/ep)" : "";
  Diag *g = diag_at(d, DIAG_E0703, dim_loc(p, dim),
                    "engine `%s` %s cannot run `%s` %lld%s in pool `%s` (role %s): %s", engine_name(c->engine),
                    c->version, engine_dim_name(dim), (long long)z.v[dim], dflt, p->name.v ? p->name.v : "?",
                    role_name(role), why);
  Sizes n = nearest(c, role, z, moe);
  StrBuf sb;
  sb_init(&sb);
  put_layout(&sb, &n, moe);
  diag_help(g, "the nearest layout %s %s runs on the same %lld GPUs per instance: %s", engine_name(c->engine),
            c->version, (long long)mul_sat(mul_sat(mul_sat(z.v[ED_TP], z.v[ED_CP]), z.v[ED_DP]), z.v[ED_PP]),
            sb.buf);
  diag_note(g, "capabilities of %s %s: %s (read from %s)", engine_name(c->engine), c->version, c->file,
            c->source);
  sb_free(&sb);
}

/* A dense pool's dp under an engine whose dp is attention data
 * parallelism: the same GPUs are dp times the replicas. */
static bool dense_dp_refused(const EngineCaps *c, int64_t dp, bool moe) {
  return !moe && (c->rules & ER_DP_MOE_ONLY) && dp > 1;
}

static bool dense_dp(Diags *d, const EngineCaps *c, const PoolSpec *p, bool moe) {
  if (!dense_dp_refused(c, p->dp.v, moe)) return false;
  Diag *g = diag_at(d, DIAG_E0703, dim_loc(p, ED_DP),
                    "engine `%s` %s cannot run `dp` %lld in pool `%s` of a dense model: its data parallelism "
                    "inside an instance is attention data parallelism, for MoE models",
                    engine_name(c->engine), c->version, (long long)p->dp.v, p->name.v ? p->name.v : "?");
  diag_help(g, "the nearest layout it runs on the same GPUs: dp 1 and replicas %lld (dp x replicas)",
            (long long)mul_sat(p->dp.v, p->replicas.v));
  diag_note(g, "capabilities of %s %s: %s (read from %s)", engine_name(c->engine), c->version, c->file, c->source);
  return true;
}

/* The one statement of what an entry refuses in a pool of sizes z (MoE
 * or dense pools; the dense-dp rule is dense_dp's): the reason and, in
 * *dim, the dimension it names; NULL when the engine runs it. */
static const char *pool_refusal(const EngineCaps *c, PoolRole role, const Sizes *z, bool moe, EngineDim *dim) {
  for (int k = 0; k < ED__COUNT; k++) {
    if (z->v[k] > 1 && !c->dim[k].roles[role] && (moe || (k != ED_EP && k != ED_ETP))) {
      *dim = (EngineDim)k;
      return "the engine has no such mode for this role";
    }
  }
  if ((c->rules & ER_DCP_DIVIDES_TP) && z->v[ED_DCP] > 1 && z->v[ED_TP] % z->v[ED_DCP] != 0)
    return *dim = ED_DCP, "dcp must divide tp (it regroups the tp ranks)";
  if (moe && (c->rules & ER_DP_NEEDS_TP1) && z->v[ED_DP] > 1 && z->v[ED_TP] > 1)
    return *dim = ED_DP, "attention data parallelism runs with attention tp 1 only";
  if (moe && (c->rules & ER_EDP_ONE) && z->edp > 1)
    return *dim = ED_EP, "the engine shards experts over every rank of an instance (edp must be 1)";
  if (moe && (c->rules & ER_EP_ALL_OR_NONE) && z->v[ED_EP] > 1 && z->v[ED_ETP] > 1)
    return *dim = ED_ETP, "experts are either tp-sharded (ep 1) or expert-parallel over all ranks (etp 1)";
  return NULL;
}

static void check_pool(Diags *d, const EngineCaps *c, const PoolSpec *p, bool moe) {
  Sizes z = pool_sizes(p);
  if (dense_dp(d, c, p, moe)) return;
  EngineDim dim = ED_TP;
  const char *why = pool_refusal(c, (PoolRole)p->role.v, &z, moe, &dim);
  if (why) refuse(d, c, p, dim, why, z, moe);
}

const char *engine_layout_refusal(const EngineCaps *c, PoolRole role, const int64_t v[ED__COUNT], bool moe,
                                  EngineDim *dim) {
  Sizes z = {{0}, 1};
  for (int k = 0; k < ED__COUNT; k++) z.v[k] = v[k];
  int64_t ranks = mul_sat(mul_sat(v[ED_TP], v[ED_CP]), v[ED_DP]), eg = mul_sat(v[ED_EP], v[ED_ETP]);
  if (eg > 0 && eg != INT64_MAX && ranks % eg == 0) z.edp = ranks / eg;
  *dim = ED_DP;
  if (dense_dp_refused(c, v[ED_DP], moe))
    return "its data parallelism inside an instance is attention data parallelism, for MoE models";
  return pool_refusal(c, role, &z, moe, dim);
}

EngineCaps *engine_caps_of(const Spec *s) {
  if ((Engine)s->deployment.engine.v == ENGINE_GENERIC) return NULL;
  char *err = NULL;
  bool none = false;
  EngineCaps *c = engine_caps_load(s->catalog_dir, (Engine)s->deployment.engine.v, s->deployment.engine_version.v,
                                   &err, &none);
  free(err);
  return c;
}

bool engine_runs_expert_split(const EngineCaps *c, const PoolSpec *p, int64_t ep, int64_t etp) {
  if (!c) return true;
  Sizes z = pool_sizes(p);
  z.v[ED_EP] = ep;
  z.v[ED_ETP] = etp;
  EngineDim dim;
  return !engine_layout_refusal(c, (PoolRole)p->role.v, z.v, true, &dim);
}

static const char *pd_name(PdRule r) {
  static const char *const n[] = {"any", "equal", "decode-multiple", "unverified", "divisible"};
  return n[r];
}

/* Whether rule r lets prefill size a feed decode size b without an error
 * (an unverified pair is a warning, so it is allowed). */
static bool pd_allows(PdRule r, int64_t a, int64_t b) {
  bool mult = a > 0 && b % a == 0, div = b > 0 && a % b == 0;
  return a == b || r == PD_ANY || r == PD_UNVERIFIED || (r == PD_DECODE_MULTIPLE && mult) ||
         (r == PD_DIVISIBLE && (mult || div));
}

/* pd_allows without the benefit of the doubt an unverified rule gets */
static bool pd_established(PdRule r, int64_t a, int64_t b) {
  return r == PD_UNVERIFIED ? a == b : pd_allows(r, a, b);
}

bool engine_pd_established(const EngineCaps *c, int64_t pre_tp, int64_t dec_tp, int64_t pre_pp, int64_t dec_pp) {
  return pd_established(c->pd_tp, pre_tp, dec_tp) && pd_established(c->pd_pp, pre_pp, dec_pp);
}

/* One prefill/decode pair for one dimension (tp or pp) under rule r. */
static void check_pd_dim(Diags *d, const EngineCaps *c, const PoolSpec *pre, const PoolSpec *dec,
                         EngineDim dim, PdRule r) {
  int64_t a = dim == ED_TP ? pre->tp.v : pre->pp.v, b = dim == ED_TP ? dec->tp.v : dec->pp.v;
  if (a == b || r == PD_ANY) return;
  const char *dn = engine_dim_name(dim), *pn = pre->name.v ? pre->name.v : "?";
  const char *qn = dec->name.v ? dec->name.v : "?";
  if (r == PD_UNVERIFIED) {
    Diag *g = diag_at(d, DIAG_W0701, dim_loc(dec, dim),
                      "engine `%s` %s: no source read for its entry establishes a decode %s %lld (pool `%s`) "
                      "against a prefill %s %lld (pool `%s`)",
                      engine_name(c->engine), c->version, dn, (long long)b, qn, dn, (long long)a, pn);
    diag_help(g, "verify it on the engine before launching, or use %s %lld in pool `%s`", dn, (long long)a, qn);
    return;
  }
  if (pd_allows(r, a, b)) return;
  static const char *const needs[] = {"", "equal sizes", "a decode size that is a multiple of the prefill size", "",
                                      "one size a multiple of the other"};
  Diag *g = diag_at(d, DIAG_E0704, dim_loc(dec, dim),
                    "engine `%s` %s cannot move KV from prefill %s %lld (pool `%s`) to decode %s %lld (pool `%s`): "
                    "it needs %s",
                    engine_name(c->engine), c->version, dn, (long long)a, pn, dn, (long long)b, qn, needs[r]);
  /* the nearest decode size the rule takes, not above b where one is */
  int64_t near = r == PD_EQUAL || b < a ? a : b / a * a;
  if (r == PD_DIVISIBLE && b < a)
    for (near = b; near > 1 && a % near != 0; near--) {}
  diag_help(g, "the nearest layout it runs: %s %lld in pool `%s`%s", dn, (long long)near, qn,
            r == PD_EQUAL || b < a ? "" : " (or raise the decode size to a multiple)");
  diag_note(g, "rule `pd.%s: %s` of %s (its line names the source)", dn, pd_name(r), c->file);
}

/* Prefill and decode pools against the entry's `pd:` rules. */
static void check_pd(Diags *d, const EngineCaps *c, const DeploymentSpec *dep) {
  for (size_t i = 0; i < dep->npools; i++) {
    if (dep->pools[i].role.v != ROLE_PREFILL) continue;
    for (size_t j = 0; j < dep->npools; j++) {
      if (dep->pools[j].role.v != ROLE_DECODE) continue;
      check_pd_dim(d, c, &dep->pools[i], &dep->pools[j], ED_TP, c->pd_tp);
      check_pd_dim(d, c, &dep->pools[i], &dep->pools[j], ED_PP, c->pd_pp);
    }
  }
}

/* A help line naming the keys of t ("<what>: a, b, c<tail>"). */
static void help_keys(Diag *g, const char *what, const EngineKV *t, size_t n, const char *tail) {
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < n; i++) sb_printf(&sb, "%s%s", i ? ", " : "", t[i].key);
  diag_help(g, "%s: %s%s", what, sb.buf, tail);
  sb_free(&sb);
}

bool engine_sampler_flashinfer(const Spec *s) {
  const SStr *t = &s->serving.sampler;
  return t->set && t->v && strcmp(t->v, "flashinfer") == 0;
}

/* serving.sampler against the entry's `samplers` (E0709). */
static void check_sampler(Diags *d, const Spec *s, const EngineCaps *c) {
  const SStr *t = &s->serving.sampler;
  if (engine_sampler_flashinfer(s) && engine_gpu_is_amd(&s->hardware)) {
    Diag *g = diag_at(d, DIAG_E0709, t->loc, "the `flashinfer` sampler runs on NVIDIA GPUs only; `hardware` is an AMD GPU");
    diag_help(g, "vLLM's ROCm build samples on the PyTorch path: write `sampler: torch` or remove the key");
    return;
  }
  if (!t->set || engine_kv(c->samplers, c->nsamplers, t->v)) return;
  Diag *g = diag_at(d, DIAG_E0709, t->loc, "engine `%s` %s has no sampler `%s`", engine_name(c->engine),
                    c->version, t->v);
  if (c->nsamplers == 0) diag_help(g, "its entry names no sampler to choose; remove `serving.sampler`");
  else help_keys(g, "its samplers", c->samplers, c->nsamplers, "");
}

/* serving.overlap_schedule against the entry's flags (E0710): the flag
 * that departs from the engine's default must be in the entry, and vLLM
 * 0.19 cannot overlap an engine its launch runs under Ray. */
static void check_overlap(Diags *d, const Spec *s, const EngineCaps *c) {
  const SBool *o = &s->serving.overlap_schedule;
  const char *term = o->set ? engine_overlap_term(c->engine, c->version, o->v) : NULL;
  if (term && !engine_flag(c, term)) {
    Diag *g = diag_at(d, DIAG_E0710, o->loc, "engine `%s` %s has no flag known to turn its overlap scheduler %s",
                      engine_name(c->engine), c->version, o->v ? "on" : "off");
    diag_help(g, "its entry lists no `%s` flag; remove `serving.overlap_schedule` (the engine's default: %s), or "
                 "name an engine version whose entry lists it",
              term, engine_overlap_default(c->engine, c->version) ? "on" : "off");
    return;
  }
  for (size_t i = 0; o->set && o->v && i < s->deployment.npools; i++) {
    const PoolSpec *p = &s->deployment.pools[i];
    if (!engine_spans_nodes(engine_vllm_ray_sync_gpn(s), p->tp.v * p->cp.v, p->pp.v, p->dp.v)) continue;
    Diag *g = diag_at(d, DIAG_E0710, o->loc,
                      "engine `vllm` %s cannot overlap its scheduler in pool `%s`: a tp x pp engine of %lld GPUs "
                      "spans nodes and runs under the Ray executor, which has no async scheduling",
                      c->version, p->name.v ? p->name.v : "?", (long long)(p->tp.v * p->cp.v * p->pp.v));
    diag_help(g, "remove `serving.overlap_schedule` (vLLM then runs that pool synchronously), or fit one "
                 "engine of pool `%s` in a node",
              p->name.v ? p->name.v : "?");
    return;
  }
}

/* serving.cuda_graph_max_bs against the entry's flags (E0711). */
static void check_graph_bs(Diags *d, const Spec *s, const EngineCaps *c) {
  const SInt *b = &s->serving.cuda_graph_max_bs;
  if (!b->set || engine_takes(c, "cuda_graph_max_bs")) return;
  Diag *g = diag_at(d, DIAG_E0711, b->loc, "engine `%s` %s has no flag known to set its CUDA-graph batch",
                    engine_name(c->engine), c->version);
  diag_help(g, "its entry lists no `cuda_graph_max_bs` flag or YAML key; remove `serving.cuda_graph_max_bs`, or "
               "name an engine whose entry lists it (sglang, vllm, trtllm)");
}

static void check_kv(Diags *d, const EngineCaps *c, const Spec *s) {
  const char *dt = dtype_name((DType)s->model.dtype.kv_cache.v);
  const char *word = engine_kv(c->kv_dtypes, c->nkv_dtypes, dt);
  if (word && strcmp(word, "auto") == 0 && s->model.dtype.kv_cache.v != s->model.dtype.activations.v) {
    Diag *g = diag_at(d, DIAG_E0705, s->model.dtype.loc,
                      "engine `%s` %s keeps a `%s` KV cache only as `auto`, the model's dtype, but the "
                      "activations are `%s`",
                      engine_name(c->engine), c->version, dt,
                      dtype_name((DType)s->model.dtype.activations.v));
    diag_help(g, "use kv_cache `%s` (the activations' dtype)", dtype_name((DType)s->model.dtype.activations.v));
  } else if (!word) {
    Diag *g = diag_at(d, DIAG_E0705, s->model.dtype.loc, "engine `%s` %s has no KV cache dtype for `%s`",
                      engine_name(c->engine), c->version, dt);
    help_keys(g, "kv_cache dtypes it runs", c->kv_dtypes, c->nkv_dtypes, "");
  }
  const SStr *t = &s->serving.kv_transfer;
  if (t->set && !engine_kv(c->kv_transfer, c->nkv_transfer, t->v)) {
    Diag *g = diag_at(d, DIAG_E0706, t->loc, "engine `%s` %s has no KV transfer backend `%s`",
                      engine_name(c->engine), c->version, t->v);
    char *tail = rp_sprintf(" (default %s)", c->kv_transfer_default);
    help_keys(g, "its backends", c->kv_transfer, c->nkv_transfer, tail);
    free(tail);
  }
  check_sampler(d, s, c);
  check_overlap(d, s, c);
  check_graph_bs(d, s, c);
}

static bool block_listed(const int64_t *l, size_t n, int64_t b) {
  for (size_t i = 0; i < n; i++)
    if (l[i] == b) return true;
  return false;
}

/* deployment.memory.kv_block against the sizes the entry's block flag
 * accepts (E0716): vLLM 0.11's --block-size is a Literal of six sizes, and
 * of seven from 0.11.1 (block_sizes_from), which a spec stating
 * `version: "0.11"` does not assume. */
static void check_block_size(Diags *d, const Spec *s, const EngineCaps *c) {
  int64_t b = engine_kv_block(s);
  if (c->nblock_sizes == 0 || block_listed(c->block_sizes, c->nblock_sizes, b)) return;
  const SStr *v = &s->deployment.engine_version;
  bool added = block_listed(c->block_sizes_added, c->nblock_sizes_added, b);
  if (added && v->set && v->v && engine_version_cmp(v->v, c->block_sizes_from) >= 0) return;
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < c->nblock_sizes; i++) sb_printf(&sb, "%s%lld", i ? ", " : "", (long long)c->block_sizes[i]);
  const SInt *kb = &s->deployment.memory.kv_block;
  Diag *g = diag_at(d, DIAG_E0716, kb->set ? kb->loc : s->deployment.loc,
                    "engine `%s` %s takes KV blocks of %s tokens only, not %lld", engine_name(c->engine),
                    v->set && v->v ? v->v : c->version, sb.buf, (long long)b);
  if (added)
    diag_help(g, "release %s and later take %lld too: state `engine: { version: \"%s\" }` if that is what runs",
              c->block_sizes_from, (long long)b, c->block_sizes_from);
  else diag_help(g, "write `kv_block:` one of %s", sb.buf);
  sb_free(&sb);
}

static void check_hostnames(Diags *d, const HardwareSpec *h) {
  if (h->hostnames.set && h->hostname_pattern.set) {
    Diag *g = diag_at(d, DIAG_E0707, h->hostname_pattern.loc,
                      "`hardware.hostnames` and `hardware.hostname_pattern` are both given");
    diag_help(g, "keep one of the two");
    return;
  }
  if (h->hostnames.set && (int64_t)h->hostnames.len != h->nodes.v) {
    Diag *g = diag_at(d, DIAG_E0707, h->hostnames.loc,
                      "`hardware.hostnames` lists %zu host names, the cluster has %lld nodes", h->hostnames.len,
                      (long long)h->nodes.v);
    diag_help(g, "give one host name per node, in node order");
  }
  for (size_t i = 0; h->hostnames.set && i < h->hostnames.len; i++) {
    const char *v = h->hostnames.items[i].v;
    if (!*v || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != strlen(v)) {
      Diag *g = diag_at(d, DIAG_E0707, h->hostnames.items[i].loc, "`%s` is not a host name", v);
      diag_help(g, "host names hold letters, digits, `.` and `-` only (RFC 1123)");
    }
  }
  const char *pat = h->hostname_pattern.v;
  if (h->hostname_pattern.set) {
    const char *at = strstr(pat, "{n}");
    bool chars = at && strspn(pat, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-{}n") ==
                           strlen(pat);
    if (!at || strstr(at + 3, "{n}") || !chars || strchr(at + 3, '{') ||
        (strchr(pat, '{') != at)) {
      Diag *g = diag_at(d, DIAG_E0707, h->hostname_pattern.loc,
                        "`%s` is not a host name pattern: expected one `{n}` among letters, digits, `.` and `-`",
                        pat);
      diag_help(g, "write e.g. `gpu-{n}.cluster` (node 0 is gpu-0.cluster)");
    }
  }
}

/* serving.chunked_prefill (E0712): TensorRT-LLM's choice
 * (enable_chunked_prefill); vLLM V1 always splits prompts into its steps
 * and SGLang runs prefill batches of their own, which the key does not
 * change in the model, so it is refused rather than ignored. */
bool engine_takes_chunked_prefill(Engine e) { return e == ENGINE_TRTLLM; }

static void check_chunked(Diags *d, const Spec *s) {
  const SBool *b = &s->serving.chunked_prefill;
  Engine e = (Engine)s->deployment.engine.v;
  if (!b->set || engine_takes_chunked_prefill(e)) return;
  Diag *g = diag_at(d, DIAG_E0712, b->loc, "`serving.chunked_prefill` is read for engine `trtllm` only, not `%s`",
                    engine_name(e));
  diag_help(g, "remove it: %s", e == ENGINE_VLLM     ? "vLLM V1 always splits prompts into its steps under "
                                                       "`max_num_batched_tokens`"
                                : e == ENGINE_SGLANG ? "SGLang runs a prefill batch of its own between decode "
                                                       "steps (`max_num_batched_tokens` is its chunk)"
                                                     : "engine `generic` mixes prompt chunks into its steps when "
                                                       "`max_num_batched_tokens` is set");
}

/* The prompt budget (engine_prompt_budget) on pool p: E0713 when the
 * workload's own prompts exceed it, W0703 when only the longer prompts
 * max_model_len admits do. */
static void check_prompt_pool(Diags *d, const Spec *s, const PoolSpec *p, int64_t budget) {
  int64_t cp = p->cp.v > 1 ? p->cp.v : 1, cap = budget * cp, in = s->workload.input_tokens.v;
  const char *name = p->name.v ? p->name.v : "?", *per = cp > 1 ? " over cp" : "";
  if (in > cap) {
    Diag *g = diag_at(d, DIAG_E0713, s->workload.input_tokens.loc,
                      "pool `%s`: TensorRT-LLM refuses the workload's %lld-token prompts (HTTP 400): without chunked "
                      "prefill a prompt%s must fit max_num_tokens (%lld)",
                      name, (long long)in, per, (long long)budget);
    diag_help(g, "set `serving.chunked_prefill: true`, or raise `serving.max_num_batched_tokens` to %lld",
              (long long)rp_cdiv64(in, cp));
    return;
  }
  int64_t len = s->serving.max_model_len.v;
  if (len - 1 <= cap) return;
  SrcLoc at = s->serving.max_model_len.set ? s->serving.max_model_len.loc : p->loc;
  Diag *g = diag_at(d, DIAG_W0703, at,
                    "pool `%s`: TensorRT-LLM refuses prompts over %lld tokens (HTTP 400) that max_model_len %lld "
                    "admits: without chunked prefill a prompt%s must fit max_num_tokens (%lld)",
                    name, (long long)cap, (long long)len, per, (long long)budget);
  diag_help(g, "set `serving.chunked_prefill: true`, raise `serving.max_num_batched_tokens` to %lld, or lower "
               "`serving.max_model_len` to %lld",
            (long long)rp_cdiv64(len - 1, cp), (long long)cap);
}

int64_t engine_prompt_budget(const Spec *s) {
  if ((Engine)s->deployment.engine.v != ENGINE_TRTLLM) return 0;
  EngineSched es;
  engine_sched(s, &es);
  return es.whole_prompts && es.tokens > 0 ? es.tokens : 0;
}

int64_t engine_fp8_expert_block(const Spec *s) {
  Engine e = (Engine)s->deployment.engine.v;
  bool loads = e == ENGINE_VLLM || e == ENGINE_SGLANG;
  return loads && model_is_moe(&s->model) && (DType)s->model.dtype.weights.v == DT_FP8 ? MODEL_FP8_BLOCK : 0;
}

bool engine_prompts_admitted(Diags *d, const Spec *s, const EngineCaps *c) {
  int64_t in = s->workload.input_tokens.v, budget = engine_prompt_budget(s);
  const bool *cp = c->dim[ED_CP].roles;
  if (budget <= 0 || in <= budget || cp[ROLE_PREFILL] || cp[ROLE_BOTH]) return true;
  Diag *g = diag_at(d, DIAG_E0713, s->workload.input_tokens.loc,
                    "TensorRT-LLM %s refuses the workload's %lld-token prompts (HTTP 400) on every layout: without "
                    "chunked prefill a prompt must fit max_num_tokens (%lld), and the release runs no cp",
                    c->version, (long long)in, (long long)budget);
  diag_help(g, "set `serving.chunked_prefill: true`, or raise `serving.max_num_batched_tokens` to %lld",
            (long long)in);
  return false;
}

static void check_prompt_budget(Diags *d, const Spec *s, const EngineCaps *c) {
  int64_t budget = engine_prompt_budget(s);
  if (budget <= 0) return;
  if (s->deployment.npools == 0) engine_prompts_admitted(d, s, c);
  for (size_t i = 0; i < s->deployment.npools; i++) {
    const PoolSpec *p = &s->deployment.pools[i];
    if ((PoolRole)p->role.v != ROLE_DECODE) check_prompt_pool(d, s, p, budget);
  }
}

/* vLLM's SchedulerConfig refuses a step budget below the running
 * sequences: "max_num_batched_tokens (T) must be greater than or equal to
 * max_num_seqs (S)" (vllm/config/scheduler.py, verify_max_model_len, and
 * _verify_args before it). Checked when the spec sets both (E0714). */
static void check_vllm_budget(Diags *d, const Spec *s) {
  const SInt *t = &s->serving.max_num_batched_tokens, *q = &s->serving.max_num_seqs;
  if ((Engine)s->deployment.engine.v != ENGINE_VLLM || !t->set || !q->set || t->v >= q->v) return;
  Diag *g = diag_at(d, DIAG_E0714, t->loc,
                    "vLLM refuses `max_num_batched_tokens` %lld below `max_num_seqs` %lld: every running "
                    "sequence needs a token of the step",
                    (long long)t->v, (long long)q->v);
  diag_help(g, "raise `serving.max_num_batched_tokens` to at least %lld, or lower `serving.max_num_seqs`",
            (long long)q->v);
}

/* TensorRT-LLM builds for NVIDIA GPUs only ("TensorRT LLM supports the
 * full spectrum of NVIDIA GPU architectures": Blackwell, Hopper, Ada
 * Lovelace, Ampere; nvidia.github.io/TensorRT-LLM/supported-hardware.html),
 * so a spec on an AMD GPU is E0718; vLLM and SGLang ship ROCm builds. */
bool engine_vendor_ok(Diags *d, const Spec *s) {
  if ((Engine)s->deployment.engine.v != ENGINE_TRTLLM || !engine_gpu_is_amd(&s->hardware)) return true;
  Diag *g = diag_at(d, DIAG_E0718, s->deployment.engine.loc,
                    "engine `trtllm` runs on NVIDIA GPUs only; `hardware` is an AMD GPU (%s)",
                    s->hardware.name.v && s->hardware.name.v[0] ? s->hardware.name.v : s->hardware.preset.v);
  diag_help(g, "name `vllm` or `sglang`, whose ROCm builds run AMD Instinct GPUs, or an NVIDIA GPU");
  return false;
}

void engine_check(Diags *d, const Spec *s) {
  check_hostnames(d, &s->hardware);
  engine_vendor_ok(d, s);
  check_chunked(d, s);
  check_vllm_budget(d, s);
  engine_attn_check(d, s);
  const DeploymentSpec *dep = &s->deployment;
  Engine e = (Engine)dep->engine.v;
  if (e == ENGINE_GENERIC) {
    if (dep->engine_version.set) {
      Diag *g = diag_at(d, DIAG_E0701, dep->engine_version.loc, "engine `generic` has no versions");
      diag_help(g, "drop `version`, or name an engine: vllm, sglang or trtllm");
    }
    if (s->serving.sampler.set) {
      Diag *g = diag_at(d, DIAG_E0709, s->serving.sampler.loc, "engine `generic` has no sampler `%s`",
                        s->serving.sampler.v);
      diag_help(g, "remove `serving.sampler`, or name an engine whose entry lists samplers (vllm)");
    }
    if (s->serving.cuda_graph_max_bs.set) {
      Diag *g = diag_at(d, DIAG_E0711, s->serving.cuda_graph_max_bs.loc,
                        "engine `generic` has no CUDA-graph batch to set");
      diag_help(g, "remove `serving.cuda_graph_max_bs`, or name an engine whose entry lists it (sglang, vllm, "
                   "trtllm)");
    }
    return;
  }
  char *err = NULL;
  bool none = false;
  EngineCaps *c = engine_caps_load(s->catalog_dir, e, dep->engine_version.v, &err, &none);
  if (!c) {
    Diag *g = diag_at(d, none ? DIAG_E0701 : DIAG_E0702,
                      dep->engine_version.set ? dep->engine_version.loc : dep->engine.loc, "engine `%s`%s%s: %s",
                      engine_name(e), dep->engine_version.set ? " " : "",
                      dep->engine_version.set ? dep->engine_version.v : "", err);
    diag_help(g, none ? "name a version the catalog has, or add an entry (docs/engines.md, \"Adding an entry\")"
                      : "fix the catalog entry (docs/engines.md, \"The catalog format\")");
    free(err);
    return;
  }
  for (size_t i = 0; i < dep->npools; i++) check_pool(d, c, &dep->pools[i], s->model.moe.present);
  check_prompt_budget(d, s, c);
  check_pd(d, c, dep);
  check_kv(d, c, s);
  check_block_size(d, s, c);
  engine_caps_free(c);
}

/* Whether name holds w (lowercase), ignoring case. */
static bool names_word(const char *name, const char *w) {
  for (const char *c = name ? name : ""; *c; c++) {
    size_t i = 0;
    while (w[i] && c[i] && tolower((unsigned char)c[i]) == w[i]) i++;
    if (!w[i]) return true;
  }
  return false;
}

static bool names_a100(const char *name) { return names_word(name, "a100"); }

/* Whether the hardware's display name or preset holds one of the n words. */
static bool gpu_names_any(const HardwareSpec *h, const char *const *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (names_word(h->name.v, w[i]) || names_word(h->preset.v, w[i])) return true;
  return false;
}

bool engine_gpu_is_hopper(const HardwareSpec *h) {
  static const char *const w[] = {"h100", "h20", "h800"}; /* "h20" also names H200 and GH200 */
  return gpu_names_any(h, w, RP_ARRAY_LEN(w));
}

bool engine_gpu_is_sm100(const HardwareSpec *h) {
  static const char *const w[] = {"b200", "b300"}; /* also GB200 and GB300 */
  return gpu_names_any(h, w, RP_ARRAY_LEN(w));
}

bool engine_gpu_is_sm100_0(const HardwareSpec *h) {
  static const char *const w[] = {"b200"}; /* also GB200 */
  return gpu_names_any(h, w, RP_ARRAY_LEN(w));
}

bool engine_limits_per_dp(const Spec *s) {
  Engine e = (Engine)s->deployment.engine.v;
  return e == ENGINE_VLLM || e == ENGINE_TRTLLM || (e == ENGINE_SGLANG && !model_is_moe(&s->model));
}

bool engine_gpu_is_amd(const HardwareSpec *h) {
  return names_word(h->name.v, "amd") || names_word(h->name.v, "instinct") || names_word(h->preset.v, "mi3");
}

/* vLLM's batch defaults for `vllm serve` (the OPENAI_API_SERVER usage
 * context), EngineArgs.get_batch_defaults in vllm/engine/arg_utils.py
 * (v0.11.0): on a GPU whose total (torch's, hardware.gpu.cuda_memory when
 * the spec has it) is at least 70 GiB and whose name does not contain
 * "a100", 8192 tokens and 1024 sequences per step; otherwise 2048 and 256.
 * rankplan tests the hardware's display name and preset. */
static void vllm_defaults(const Spec *s, EngineSched *o) {
  const HardwareSpec *h = &s->hardware;
  int64_t total = h->gpu.cuda_memory.set && h->gpu.cuda_memory.v > 0 ? h->gpu.cuda_memory.v
                                                                      : h->gpu.memory.v;
  bool big = total >= (int64_t)70 << 30 && !names_a100(h->name.v) && !names_a100(h->preset.v);
  o->tokens = big ? 8192 : 2048;
  o->seqs = big ? 1024 : 256;
  o->source = "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (v0.11.0), `vllm serve`";
}

int64_t engine_vllm_graph_tokens(const Spec *s) {
  if (s->serving.cuda_graph_max_bs.set) return s->serving.cuda_graph_max_bs.v;
  EngineSched es;
  engine_sched(s, &es);
  return es.seqs > 0 && es.seqs < 256 ? 2 * es.seqs : 512; /* min(2 * seqs, 512) */
}

/* vLLM 0.19's default capture sizes up to max: 1, 2 and 4, every 8 below
 * 256, every 16 from 256 (vllm/config/vllm.py, _set_cudagraph_sizes);
 * 0.11's: 1, 2 and 4, then every 8 up to max (vllm/config/__init__.py,
 * VllmConfig._set_cudagraph_sizes, the one-value cuda_graph_sizes). */
int64_t engine_vllm_graph_sizes(const Spec *s) {
  int64_t max = engine_vllm_graph_tokens(s);
  int64_t n = (max >= 1) + (max >= 2) + (max >= 4);
  if (!engine_vllm_019(s->deployment.engine_version.v)) return n + (max >= 8 ? max / 8 : 0);
  if (max >= 8) n += ((max < 255 ? max : 255) - 8) / 8 + 1;
  if (max >= 256) n += (max - 256) / 16 + 1;
  return n;
}

/* TensorRT-LLM's decode graphs (CudaGraphConfig, TorchLlmArgs
 * validate_cuda_graph_config in tensorrt_llm/llmapi/llm_args.py, late-2025
 * main): when the YAML sets neither a maximum nor a list, sizes 1 to 31,
 * 32, 64 and 128, unpadded, so every batch up to 32 has a graph and the
 * largest is 128; serving.cuda_graph_max_bs is written padded
 * (emit_trtllm.c), so every batch up to it has one. */
int64_t engine_trtllm_graph_bs(const Spec *s) {
  return s->serving.cuda_graph_max_bs.set ? s->serving.cuda_graph_max_bs.v : 128;
}

/* The sizes, as TorchLlmArgs lists them (same file): without a maximum
 * 1 to 31, 32, 64 and 128 (34); padded, 1, 2, 4 and every 8 up to 128,
 * the powers of two from 256 below the maximum and the maximum itself. */
int64_t engine_trtllm_graph_count(const Spec *s) {
  if (!s->serving.cuda_graph_max_bs.set) return 34;
  int64_t max = s->serving.cuda_graph_max_bs.v, c = max < 128 ? max : 128;
  int64_t n = (c >= 1) + (c >= 2) + (c >= 4) + c / 8;
  for (int64_t p = 256; p < max && p <= INT64_MAX / 2; p *= 2) n++; /* no doubling past int64 */
  bool listed = max <= 128 && (max == 1 || max == 2 || max == 4 || max % 8 == 0);
  return n + !listed;
}

int64_t engine_trtllm_graph_cover(const Spec *s) {
  return s->serving.cuda_graph_max_bs.set ? s->serving.cuda_graph_max_bs.v : 32;
}

bool engine_vllm_019(const char *version) {
  return !version || !strchr(version, '.') || engine_version_cmp(version, "0.19") >= 0;
}

/* Whether dimension a comes before (inside) b in an order string such as
 * "tp-cp-ep-dp-pp"; a dimension left out is appended outermost. */
static bool order_inside(const char *order, const char *a, const char *b) {
  const char *pa = strstr(order, a), *pb = strstr(order, b);
  return pa && (!pb || pa < pb);
}

const char *engine_vllm_nodes_refusal(const int64_t v[ED__COUNT], int64_t gpn, const char *order) {
  int64_t engine = v[ED_TP] * v[ED_CP] * v[ED_PP];
  if (gpn <= 0 || v[ED_DP] <= 1 || engine * v[ED_DP] <= gpn) return NULL;
  if (engine > gpn || gpn % engine)
    return "over nodes with dp above 1, vLLM runs whole tp x cp x pp engines on each node";
  const char *o = order ? order : SPEC_ORDER_DEFAULT;
  if ((v[ED_PP] > 1 && !order_inside(o, "pp", "dp")) || (v[ED_CP] > 1 && !order_inside(o, "cp", "dp")))
    return "over nodes with dp above 1, vLLM runs consecutive dp ranks on each node, which needs pp and cp "
           "inside dp in deployment.order";
  return NULL;
}

/* SGLang: the overlap scheduler is on unless --disable-overlap-schedule
 * (python/sglang/srt/server_args.py; tests/engines/fixtures lists the flag
 * for every release from 0.4.7). TensorRT-LLM: TorchLlmArgs.
 * disable_overlap_scheduler defaults to False (tensorrt_llm/llmapi/
 * llm_args.py). vLLM 0.11: SchedulerConfig.async_scheduling defaults to
 * False (vllm/config/scheduler.py), on with --async-scheduling; 0.19: it
 * defaults to None, which VllmConfig turns on where the executor supports
 * it (vllm/config/vllm.py, "Enable async scheduling unless there is an
 * incompatible option"), off with --no-async-scheduling. */
bool engine_overlap_default(Engine e, const char *version) {
  return e == ENGINE_SGLANG || e == ENGINE_TRTLLM || (e == ENGINE_VLLM && engine_vllm_019(version));
}

const char *engine_overlap_term(Engine e, const char *version, bool on) {
  if (on == engine_overlap_default(e, version)) return NULL;
  return on ? "overlap_on" : "overlap_off";
}

/* An engine spans nodes when its tp x pp ranks outnumber a node's GPUs;
 * the launch files then run it under Ray (emit_vllm.c, dp 1). An engine
 * that fits a node but is placed across two is not detected here. */
bool engine_spans_nodes(int64_t gpus_per_node, int64_t tp, int64_t pp, int64_t dp) {
  return dp <= 1 && gpus_per_node > 0 && tp * pp > gpus_per_node;
}

int64_t engine_vllm_ray_sync_gpn(const Spec *s) {
  bool v = (Engine)s->deployment.engine.v == ENGINE_VLLM && engine_vllm_019(s->deployment.engine_version.v);
  return v ? s->hardware.gpus_per_node.v : 0;
}

void engine_sched(const Spec *s, EngineSched *out) {
  memset(out, 0, sizeof *out);
  switch ((Engine)s->deployment.engine.v) {
  case ENGINE_VLLM:
    /* V1 always schedules chunked prefills, decode requests first, prefill
     * chunks in what is left of max_num_batched_tokens (vLLM docs,
     * "Optimization and Tuning", Chunked Prefill, v0.9.1 onwards). */
    out->mixed = true;
    vllm_defaults(s, out);
    break;
  case ENGINE_TRTLLM:
    /* In-flight batching: context-phase sequences run in the same batch as
     * generation-phase ones (TensorRT-LLM docs, "Paged Attention, IFB, and
     * Request Scheduling"); max_num_tokens defaults to 8192
     * (tensorrt_llm/llmapi/llm_args.py, BaseLlmArgs). A prompt runs whole
     * in one step unless enable_chunked_prefill, default False in the same
     * class (trtllm-bench throughput turns it on: its
     * --enable_chunked_context defaults to True). Its max_batch_size
     * default comes from BuildConfig, not read here: no default limit. */
    out->mixed = s->serving.chunked_prefill.set && s->serving.chunked_prefill.v;
    out->whole_prompts = !out->mixed;
    /* The PyTorch executor's overlap loop runs scheduling, dispatch and
     * the sampler's post-processing on one thread, one step ahead, and
     * "exposes ~580 us/iter of host overhead as GPU idle" (TensorRT-LLM
     * issue #13957, May 2026: Llama-3.1-8B-Instruct-FP8 on a B200,
     * 1000/1000 tokens, 64 in flight). */
    out->overlap_exposed_s = 580e-6;
    out->tokens = 8192;
    out->source = "tensorrt_llm/llmapi/llm_args.py BaseLlmArgs.max_num_tokens";
    break;
  case ENGINE_SGLANG:
    /* A prefill (extend) batch runs alone unless --enable-mixed-chunk,
     * default off (python/sglang/srt/server_args.py); its defaults for the
     * chunk size and running requests depend on memory profiling at start
     * and are not modelled. CUDA graphs cover decode only: prefill runs
     * eagerly unless --enable-piecewise-cuda-graph (opt-in since PR #10062,
     * in the 0.5.4 and 0.5.6 parser fixtures; absent before). */
    out->eager_prefill = true;
    break;
  case ENGINE_GENERIC:
  default:
    /* A token budget in the spec is a chunked-prefill engine's. */
    out->mixed = s->serving.max_num_batched_tokens.v > 0;
    break;
  }
  Engine e = (Engine)s->deployment.engine.v;
  out->overlap = s->serving.overlap_schedule.set ? s->serving.overlap_schedule.v
                                                 : engine_overlap_default(e, s->deployment.engine_version.v);
  if (s->serving.max_num_batched_tokens.v > 0) out->tokens = s->serving.max_num_batched_tokens.v;
  if (s->serving.max_num_seqs.v > 0) out->seqs = s->serving.max_num_seqs.v;
  if (s->serving.max_num_batched_tokens.v > 0 && s->serving.max_num_seqs.v > 0) out->source = NULL;
}
