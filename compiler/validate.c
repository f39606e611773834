/*
 * validate.c: the model, memory and topology rules.
 *
 * Input IR: a Spec without parse errors (spec.h). Output: diagnostics only
 * (codes_model.def, plus the layout stage's E0306-E0309 for the pipeline
 * partition, which lay_partition reports). The Spec is never changed.
 *
 * Invariants: every rule reports every pool that breaks it (collect all,
 * report once); every message names the numbers and every error carries a
 * help line; divisibility errors list the valid choices within the
 * hardware (values up to gpus_per_node, or the instance's ranks for ep).
 * Model-level problems (a missing MLA or MoE dimension) stop the pool
 * rules, whose arithmetic would divide by them.
 */
#include "validate.h"

#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "layout.h"

static int64_t dimv(const SInt *v) { return v->v > 0 ? v->v : 1; }
static SrcLoc at(const SInt *v, const PoolSpec *p) { return v->set ? v->loc : p->loc; }
static const char *pname(const PoolSpec *p) { return p->name.v ? p->name.v : "?"; }
static bool is_mla(const ModelSpec *m) { return (AttnKind)m->attention.kind.v == ATTN_MLA; }

/* Whether tp is a valid tensor-parallel size for the attention heads: it
 * divides the heads and, for GQA/MHA/MQA, kv_heads and tp divide one
 * another. */
static bool tp_fits_heads(const ModelSpec *m, int64_t tp) {
  if (m->attention.heads.v % tp != 0) return false;
  if (is_mla(m)) return true;
  int64_t kv = model_kv_heads(m);
  return kv % tp == 0 || tp % kv == 0;
}

/* "1, 2, 4, 8": the values v in [1, limit] with ok(v). */
typedef bool (*FitFn)(const void *ctx, int64_t v);
static char *choices(int64_t limit, FitFn ok, const void *ctx) {
  StrBuf sb;
  sb_init(&sb);
  for (int64_t v = 1; v <= limit; v++) {
    if (!ok(ctx, v)) continue;
    if (sb.len) sb_puts(&sb, ", ");
    sb_printf(&sb, "%lld", (long long)v);
  }
  if (!sb.len) sb_puts(&sb, "none");
  return sb_take(&sb);
}

static bool fit_tp(const void *ctx, int64_t v) { return tp_fits_heads(ctx, v); }

/* An etp whose share of the expert width is whole fp8 blocks. */
typedef struct {
  int64_t width, block;
} BlockFit;
static bool fit_block(const void *ctx, int64_t v) {
  const BlockFit *f = ctx;
  return f->width % v == 0 && (f->width / v) % f->block == 0;
}
static bool fit_div(const void *ctx, int64_t v) { return *(const int64_t *)ctx % v == 0; }

/* An ep that E0206 and E0208 both accept: it divides the routed experts and
 * ep * etp divides the instance's ranks. */
typedef struct {
  int64_t experts, ranks, etp;
} EpFit;
static bool fit_ep(const void *ctx, int64_t v) {
  const EpFit *f = ctx;
  int64_t eg = mul_sat(v, f->etp);
  return f->experts % v == 0 && eg != INT64_MAX && f->ranks % eg == 0;
}

/* The "valid tp" help for a pool whose tp does not fit the heads: the list
 * within one node and, when the requested width has no valid tp, the pp
 * that keeps the instance's GPU count. */
static void tp_help(Diag *g, const Spec *s, const PoolSpec *p) {
  const ModelSpec *m = &s->model;
  int64_t tp = dimv(&p->tp), pp = dimv(&p->pp);
  int64_t gpn = s->hardware.gpus_per_node.v > 0 ? s->hardware.gpus_per_node.v : tp;
  char *list = choices(gpn, fit_tp, m);
  if (is_mla(m))
    diag_help(g, "valid tp for %lld heads on %lld GPUs per node: %s", (long long)m->attention.heads.v,
              (long long)gpn, list);
  else
    diag_help(g, "valid tp for %lld heads and %lld KV heads on %lld GPUs per node: %s",
              (long long)m->attention.heads.v, (long long)model_kv_heads(m), (long long)gpn, list);
  free(list);
  /* The largest valid tp that divides the requested one: the rest of the
   * GPUs become pipeline stages. */
  int64_t best = 1;
  for (int64_t v = 1; v < tp; v++)
    if (tp % v == 0 && tp_fits_heads(m, v)) best = v;
  int64_t pp2 = mul_sat(pp, tp / best);
  if (best < tp && m->layers.v >= pp2)
    diag_note(g, "to keep %lld GPUs per instance, use tp %lld with pp %lld (pipeline parallelism)",
              (long long)mul_sat(tp, pp), (long long)best, (long long)pp2);
}

/* Model-level checks: every field a pool rule divides by is there. */
static bool validate_model(Diags *d, const Spec *s) {
  const ModelSpec *m = &s->model;
  bool ok = true;
  if (is_mla(m)) {
    static const char *const names[] = {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                        "v_head_dim"};
    const SInt *f[] = {&m->attention.kv_lora_rank, &m->attention.qk_nope_head_dim,
                       &m->attention.qk_rope_head_dim, &m->attention.v_head_dim};
    for (size_t i = 0; i < RP_ARRAY_LEN(f); i++) {
      if (f[i]->v > 0) continue;
      Diag *g = diag_at(d, DIAG_E0218, m->attention.loc,
                        "MLA attention of model `%s` needs `%s`, got %s",
                        m->name.v ? m->name.v : "?", names[i], f[i]->set ? "0" : "nothing");
      diag_help(g, "set `model.attention.%s` (DeepSeek-V3: kv_lora_rank 512, qk_nope_head_dim "
                   "128, qk_rope_head_dim 64, v_head_dim 128)", names[i]);
      ok = false;
    }
  } else if (!m->attention.head_dim.set && m->attention.heads.v > 0 &&
             m->hidden_size.v % m->attention.heads.v != 0) {
    Diag *g = diag_at(d, DIAG_E0220, m->attention.loc,
                      "cannot derive `head_dim`: hidden_size %lld is not divisible by %lld heads",
                      (long long)m->hidden_size.v, (long long)m->attention.heads.v);
    diag_help(g, "set `model.attention.head_dim` from the model's config.json");
    ok = false;
  }
  if (m->moe.present) {
    const char *miss = NULL;
    if (m->moe.experts.v <= 0) miss = "experts";
    else if (m->moe.top_k.v <= 0) miss = "top_k";
    else if (m->moe.expert_intermediate_size.v <= 0) miss = "expert_intermediate_size";
    if (miss) {
      Diag *g = diag_at(d, DIAG_E0219, m->moe.loc, "MoE section of model `%s` needs `%s`",
                        m->name.v ? m->name.v : "?", miss);
      diag_help(g, "set `model.moe.%s`", miss);
      ok = false;
    } else if (m->moe.top_k.v > m->moe.experts.v) {
      Diag *g = diag_at(d, DIAG_E0219, m->moe.top_k.loc,
                        "`top_k` is larger than the routed experts: expected at most %lld, got %lld",
                        (long long)m->moe.experts.v, (long long)m->moe.top_k.v);
      diag_help(g, "a token is routed to at most every expert; lower `top_k`");
      ok = false;
    } else if (m->moe.dense_layers.v > m->layers.v) {
      Diag *g = diag_at(d, DIAG_E0219, m->moe.dense_layers.loc,
                        "`dense_layers` is larger than the layer count: expected at most %lld, got %lld",
                        (long long)m->layers.v, (long long)m->moe.dense_layers.v);
      diag_help(g, "dense_layers counts the leading dense layers; lower it");
      ok = false;
    }
  }
  if (ok) {
    ModelParams mp;
    ok = model_params(m, &mp, d);
  }
  return ok;
}

/* Attention, FFN and vocabulary divisibility under tp. */
static void rules_tp(Diags *d, const Spec *s, const PoolSpec *p) {
  const ModelSpec *m = &s->model;
  int64_t tp = dimv(&p->tp);
  SrcLoc loc = at(&p->tp, p);
  bool heads_ok = m->attention.heads.v % tp == 0;
  if (!heads_ok) {
    Diag *g = diag_at(d, DIAG_E0201, loc,
                      "attention heads are not divisible by `tp` in pool `%s`: %lld heads over tp "
                      "%lld leaves %lld",
                      pname(p), (long long)m->attention.heads.v, (long long)tp,
                      (long long)(m->attention.heads.v % tp));
    tp_help(g, s, p);
  }
  if (!is_mla(m)) {
    int64_t kv = model_kv_heads(m);
    if (kv % tp != 0 && tp % kv != 0) {
      Diag *g = diag_at(d, DIAG_E0202, loc,
                        "`kv_heads` and `tp` do not divide one another in pool `%s`: %lld KV heads, "
                        "tp %lld",
                        pname(p), (long long)kv, (long long)tp);
      if (heads_ok) tp_help(g, s, p);
      else diag_help(g, "pick a tp that divides or is a multiple of %lld", (long long)kv);
    } else if (tp > kv) {
      Diag *g = diag_at(d, DIAG_W0201, loc,
                        "`tp` %lld is larger than %lld KV heads in pool `%s`: each KV head is stored "
                        "%lld times, the KV cache of one instance grows %lldx",
                        (long long)tp, (long long)kv, pname(p), (long long)(tp / kv),
                        (long long)(tp / kv));
      diag_help(g, "tp %lld keeps one copy of each KV head; use attention dp for more GPUs",
                (long long)kv);
    }
  }
  if (m->hidden_size.v % tp != 0) {
    Diag *g = diag_at(d, DIAG_E0203, loc,
                      "`hidden_size` is not divisible by `tp` in pool `%s`: %lld over tp %lld",
                      pname(p), (long long)m->hidden_size.v, (long long)tp);
    int64_t gpn = s->hardware.gpus_per_node.v > 0 ? s->hardware.gpus_per_node.v : tp;
    char *list = choices(gpn, fit_div, &m->hidden_size.v);
    diag_help(g, "valid tp for hidden_size %lld on %lld GPUs per node: %s",
              (long long)m->hidden_size.v, (long long)gpn, list);
    free(list);
  }
  bool has_dense = !model_is_moe(m) || m->moe.dense_layers.v > 0;
  int64_t inter = m->ffn.intermediate_size.v;
  if (has_dense && inter > 0 && inter % tp != 0) {
    Diag *g = diag_at(d, DIAG_E0204, loc,
                      "dense FFN `intermediate_size` is not divisible by `tp` in pool `%s`: %lld "
                      "over tp %lld",
                      pname(p), (long long)inter, (long long)tp);
    int64_t gpn = s->hardware.gpus_per_node.v > 0 ? s->hardware.gpus_per_node.v : tp;
    char *list = choices(gpn, fit_div, &inter);
    diag_help(g, "valid tp for intermediate_size %lld on %lld GPUs per node: %s", (long long)inter,
              (long long)gpn, list);
    free(list);
  }
  int64_t V = m->vocab_size.v;
  if (V % tp != 0) {
    int64_t pad = (tp - V % tp) % tp;
    Diag *g = diag_at(d, DIAG_W0202, loc,
                      "`vocab_size` %lld is not divisible by tp %lld in pool `%s`: %lld padding rows "
                      "are added to the embedding and lm_head",
                      (long long)V, (long long)tp, pname(p), (long long)pad);
    diag_help(g, "harmless; a tp dividing %lld avoids the padding", (long long)V);
  }
}


/* E0221: the engine loads block-fp8 experts only in whole blocks
 * (engine_fp8_expert_block). True when reported. */
static bool fp8_block_refused(Diags *d, const Spec *s, const PoolSpec *p, int64_t ie, int64_t etp) {
  int64_t block = engine_fp8_expert_block(s);
  if (block <= 0 || (ie / etp) % block == 0) return false;
  Diag *g = diag_at(d, DIAG_E0221, at(&p->etp, p),
                    "%s refuses to load pool `%s`'s fp8 experts: expert_intermediate_size %lld over etp %lld is "
                    "%lld columns, not whole %lld-wide fp8 blocks",
                    engine_name((Engine)s->deployment.engine.v), pname(p), (long long)ie, (long long)etp,
                    (long long)(ie / etp), (long long)block);
  int64_t ranks = mul_sat(mul_sat(dimv(&p->tp), dimv(&p->cp)), dimv(&p->dp));
  BlockFit f = {ie, block};
  EngineCaps *c = engine_caps_of(s); /* only the splits the engine runs */
  StrBuf sb;
  sb_init(&sb);
  for (int64_t v = 1; v <= ranks; v++)
    if (ranks % v == 0 && fit_block(&f, v) && engine_runs_expert_split(c, p, ranks / v, v))
      sb_printf(&sb, "%sep %lld x etp %lld", sb.len ? ", " : "", (long long)(ranks / v), (long long)v);
  diag_help(g, "shard the experts by ep over the %lld ranks: %s", (long long)ranks, sb.len ? sb.buf : "none fits");
  engine_caps_free(c);
  sb_free(&sb);
  return true;
}
/* Expert parallelism. */
static void rules_moe(Diags *d, const Spec *s, const PoolSpec *p) {
  const ModelSpec *m = &s->model;
  int64_t ep = dimv(&p->ep), etp = dimv(&p->etp);
  int64_t tp = dimv(&p->tp), cp = dimv(&p->cp), dp = dimv(&p->dp);
  if (!model_is_moe(m)) {
    if (ep > 1 || etp > 1) {
      Diag *g = diag_at(d, DIAG_W0204, ep > 1 ? at(&p->ep, p) : at(&p->etp, p),
                        "pool `%s` sets ep %lld and etp %lld but model `%s` has no MoE layers",
                        pname(p), (long long)ep, (long long)etp, m->name.v ? m->name.v : "?");
      diag_help(g, "remove `ep` and `etp`: they have no effect on a dense model");
    }
    return;
  }
  /* E counts expert slots: the routed experts plus any redundant ones */
  int64_t E = model_expert_slots(m), R = m->moe.redundant_experts.v;
  int64_t ranks = mul_sat(mul_sat(tp, cp), dp), eg = mul_sat(ep, etp);
  const char *what = R > 0 ? "expert slots (routed plus redundant experts)" : "routed experts";
  if (ep > E) {
    Diag *g = diag_at(d, DIAG_E0207, at(&p->ep, p),
                      "`ep` is larger than the %s in pool `%s`: expected at most %lld, got %lld", what,
                      pname(p), (long long)E, (long long)ep);
    diag_help(g, "each expert-parallel rank needs at least one expert; use ep <= %lld", (long long)E);
  } else if (E % ep != 0) {
    Diag *g = diag_at(d, DIAG_E0206, at(&p->ep, p),
                      "%s are not divisible by `ep` in pool `%s`: %lld over ep %lld leaves %lld", what,
                      pname(p), (long long)E, (long long)ep, (long long)(E % ep));
    int64_t lim = ranks < E ? ranks : E;
    EpFit fit = {E, ranks, etp};
    char *list = choices(lim, fit_ep, &fit);
    diag_help(g, "valid ep for %lld %s on the instance's %lld ranks at etp %lld: %s%s", (long long)E, what,
              (long long)ranks, (long long)etp, list,
              R > 0 ? "" : "; or add slots with `model.moe.redundant_experts` so that ep divides them");
    free(list);
  } else if (R > 0 && E / ep > m->moe.experts.v) {
    Diag *g = diag_at(d, DIAG_E0206, at(&p->ep, p),
                      "each ep rank of pool `%s` would hold %lld expert slots, more than the %lld routed "
                      "experts, so a rank would hold the same expert twice",
                      pname(p), (long long)(E / ep), (long long)m->moe.experts.v);
    diag_help(g, "redundant experts replicate experts across ep ranks: raise ep, or lower "
                 "model.moe.redundant_experts");
  }
  if (eg == INT64_MAX || ranks % eg != 0) {
    Diag *g = diag_at(d, DIAG_E0208, at(&p->ep, p),
                      "`ep * etp` does not divide the instance's tp*cp*dp ranks in pool `%s`: ep %lld "
                      "x etp %lld = %lld, ranks %lld",
                      pname(p), (long long)ep, (long long)etp, (long long)eg,
                      (long long)ranks);
    diag_help(g, "expert groups regroup the same %lld ranks (edp = ranks / (ep*etp)); pick ep*etp "
                 "dividing %lld",
              (long long)ranks, (long long)ranks);
  }
  int64_t ie = m->moe.expert_intermediate_size.v;
  if (ie % etp != 0) {
    Diag *g = diag_at(d, DIAG_E0205, at(&p->etp, p),
                      "`expert_intermediate_size` is not divisible by `etp` in pool `%s`: %lld over "
                      "etp %lld",
                      pname(p), (long long)ie, (long long)etp);
    int64_t lim = s->hardware.gpus_per_node.v > 0 ? s->hardware.gpus_per_node.v : etp;
    char *list = choices(lim, fit_div, &ie);
    diag_help(g, "valid etp for expert_intermediate_size %lld: %s", (long long)ie, list);
    free(list);
  } else if (!fp8_block_refused(d, s, p, ie, etp) && ie / etp < 128) {
    Diag *g = diag_at(d, DIAG_W0203, at(&p->etp, p),
                      "expert GEMMs are narrow in pool `%s`: expert_intermediate_size %lld over etp "
                      "%lld is %lld columns, under one 128-wide tile",
                      pname(p), (long long)ie, (long long)etp, (long long)(ie / etp));
    diag_help(g, "lower etp (at most %lld keeps 128 columns) and raise ep instead",
              (long long)(ie / 128 > 0 ? ie / 128 : 1));
  }
}

/* Context parallelism (cp, head-split) and decode context parallelism. */
static void rules_cp(Diags *d, const Spec *s, const PoolSpec *p) {
  const ModelSpec *m = &s->model;
  int64_t tp = dimv(&p->tp), cp = dimv(&p->cp), dcp = dimv(&p->dcp);
  int64_t heads = m->attention.heads.v;
  if (cp > 1) {
    if (is_mla(m)) {
      Diag *g = diag_at(d, DIAG_E0212, at(&p->cp, p),
                        "MLA attention cannot use head-split `cp` in pool `%s`: cp %lld, but the "
                        "latent KV is one head",
                        pname(p), (long long)cp);
      diag_help(g, "use cp 1; on decode pools `dcp` splits the context instead");
    } else if (heads % tp == 0 && heads % mul_sat(tp, cp) != 0) {
      Diag *g = diag_at(d, DIAG_E0211, at(&p->cp, p),
                        "attention heads are not divisible by `tp * cp` in pool `%s`: %lld heads "
                        "over tp %lld x cp %lld = %lld",
                        pname(p), (long long)heads, (long long)tp, (long long)cp,
                        (long long)mul_sat(tp, cp));
      int64_t per = heads / tp;
      char *list = choices(per, fit_div, &per);
      diag_help(g, "valid cp at tp %lld: %s", (long long)tp, list);
      free(list);
    }
  }
  if (dcp > 1) {
    if (tp % dcp != 0 || heads % dcp != 0) {
      Diag *g = diag_at(d, DIAG_E0214, at(&p->dcp, p),
                        "`dcp` must divide tp and the attention heads in pool `%s`: dcp %lld, tp "
                        "%lld, %lld heads",
                        pname(p), (long long)dcp, (long long)tp, (long long)heads);
      int64_t g2 = tp;
      char *list = choices(tp, fit_div, &g2);
      diag_help(g, "valid dcp at tp %lld: %s", (long long)tp, list);
      free(list);
    }
    int64_t max = is_mla(m) ? tp : (tp / model_kv_heads(m) > 1 ? tp / model_kv_heads(m) : 1);
    if (dcp > max) {
      Diag *g;
      if (is_mla(m))
        g = diag_at(d, DIAG_E0213, at(&p->dcp, p),
                    "`dcp` is larger than `tp` in pool `%s`: expected at most %lld, got %lld",
                    pname(p), (long long)max, (long long)dcp);
      else
        g = diag_at(d, DIAG_E0213, at(&p->dcp, p),
                    "`dcp` is larger than tp / kv_heads in pool `%s`: tp %lld over %lld KV heads "
                    "allows at most %lld, got %lld",
                    pname(p), (long long)tp, (long long)model_kv_heads(m), (long long)max,
                    (long long)dcp);
      diag_help(g, "dcp reuses the tp ranks that hold copies of one KV head; use dcp <= %lld",
                (long long)max);
    }
  }
  if (is_mla(m) && tp > 1 && dimv(&p->dp) == 1) {
    Diag *g = diag_at(d, DIAG_W0205, at(&p->tp, p),
                      "MLA attention at tp %lld without attention dp in pool `%s`: the latent KV "
                      "is stored %lld times",
                      (long long)tp, pname(p), (long long)tp);
    diag_help(g, "use attention data parallelism: tp 1 with dp %lld keeps one copy per request",
              (long long)tp);
  }
}

/* Topology: the TP group within one scale-up domain. */
static void rules_topology(Diags *d, const Spec *s, const PoolSpec *p) {
  int64_t tp = dimv(&p->tp);
  int64_t dom = s->hardware.scale_up.domain.v > 0 ? s->hardware.scale_up.domain.v
                                                   : s->hardware.gpus_per_node.v;
  if (dom <= 0 || tp <= dom || s->deployment.allow_tp_across_domain.v) return;
  Diag *g = diag_at(d, DIAG_E0215, at(&p->tp, p),
                    "TP group of pool `%s` is wider than the scale-up domain: tp %lld over a "
                    "domain of %lld GPUs",
                    pname(p), (long long)tp, (long long)dom);
  diag_help(g, "use tp <= %lld and add pp %lld for the rest, or set "
               "`deployment.allow_tp_across_domain: true`",
            (long long)dom, (long long)(tp / dom + (tp % dom != 0)));
}

/* E0216: the weights of stage st do not fit next to the rest of the
 * ledger. When activations, workspace, reserve and buffers alone exceed
 * the usable memory (a prompt of 2^30 tokens), the message says that
 * rather than printing a negative room for the weights. */
static void weights_error(Diags *d, const PoolSpec *p, int64_t st, const MemLedger *L) {
  char b1[32], b2[32], b3[32], b4[32];
  int64_t fixed = L->activations + L->workspace + L->reserve + L->comm;
  int64_t room = L->usable - fixed;
  Diag *g;
  if (room <= 0) {
    g = diag_at(d, DIAG_E0216, p->loc,
                "weights do not fit pool `%s` stage %lld: %s of activations, workspace, reserve "
                "and buffers alone exceed the %s usable, before %s of weights per GPU",
                pname(p), (long long)st, rp_fmt_bytes(fixed, b1, sizeof b1),
                rp_fmt_bytes(L->usable, b2, sizeof b2), rp_fmt_bytes(L->weights, b3, sizeof b3));
    diag_help(g, "activations grow with workload.input_tokens over cp (prefill) or the decode "
                 "batch: lower them, or raise cp");
    return;
  }
  g = diag_at(d, DIAG_E0216, p->loc,
              "weights do not fit pool `%s` stage %lld: %s per GPU, but %s is left of %s "
              "usable after %s of activations, workspace, reserve and buffers",
              pname(p), (long long)st, rp_fmt_bytes(L->weights, b1, sizeof b1),
              rp_fmt_bytes(room, b2, sizeof b2), rp_fmt_bytes(L->usable, b3, sizeof b3),
              rp_fmt_bytes(fixed, b4, sizeof b4));
  int64_t factor = L->weights / room + (L->weights % room != 0);
  char wider[48] = "over more GPUs";
  if (factor > 1) snprintf(wider, sizeof wider, "at least %lldx wider", (long long)factor);
  if (L->w_experts > L->weights / 2) {
    /* The routed experts dominate: tp alone does not shrink them below
     * what ep * etp already does; more expert-parallel ranks do. */
    diag_help(g, "the routed experts are %s of it (ep %lld x etp %lld shard them): spread them %s with "
                 "ep (more ranks per instance: dp or tp with ep), pp, or quantise them",
              rp_fmt_bytes(L->w_experts, b1, sizeof b1), (long long)dimv(&p->ep), (long long)dimv(&p->etp), wider);
    return;
  }
  diag_help(g, "spread the weights %s (tp or pp), or quantise them", wider);
}

/* E0217: the KV pool of stage st cannot hold one request of the served
 * length (spec_max_model_len). */
static void kv_error(Diags *d, const Spec *s, const PoolSpec *p, int64_t st, const MemLedger *L) {
  char b1[32];
  int64_t tokens = mul_sat(L->kv_blocks, L->kv_block_tokens);
  int64_t split = mul_sat(dimv(&p->cp), dimv(&p->dcp));
  Diag *g = diag_at(d, DIAG_E0217, p->loc,
                    "KV cache of pool `%s` stage %lld holds %lld tokens per GPU (%s in %lld "
                    "blocks), but one request of max_model_len %lld needs %lld",
                    pname(p), (long long)st, (long long)tokens,
                    rp_fmt_bytes(L->kv_pool, b1, sizeof b1), (long long)L->kv_blocks,
                    (long long)spec_max_model_len(s),
                    (long long)mul_sat(L->max_context_blocks, L->kv_block_tokens));
  if (split > 1) diag_note(g, "cp x dcp = %lld splits each request's tokens", (long long)split);
  diag_help(g, "lower `serving.max_model_len` (default `model.max_context`) to at most %lld, use an fp8 KV "
               "cache, or add GPUs",
            (long long)mul_sat(tokens, split));
}

/* Memory: every pp stage of the pool; each rule reported once per pool. */
static void rules_memory(Diags *d, const Spec *s, const PoolSpec *p, const int64_t *part) {
  int64_t pp = dimv(&p->pp);
  bool weights_reported = false, kv_reported = false;
  for (int64_t st = 0; st < pp; st++) {
    MemLedger L;
    if (!mem_ledger(s, p, st, part, &L, d)) return;
    if (L.kv_pool < 0 && !weights_reported) {
      weights_reported = true;
      weights_error(d, p, st, &L);
    } else if (L.kv_pool >= 0 && !L.max_context_fits && !kv_reported) {
      kv_reported = true;
      kv_error(d, s, p, st, &L);
    }
  }
}

/* The layer partition the pool uses, reported through lay_partition
 * (E0306-E0309) when invalid. out has pp entries. */
static bool pool_partition(Diags *d, const Spec *s, const PoolSpec *p, int64_t *out) {
  LayWeights w = lay_default_weights(s);
  return lay_partition(d, (Engine)s->deployment.engine.v, s->model.layers.v, dimv(&p->pp), p, &w,
                       out);
}

void validate_pool(Diags *d, const Spec *s, const PoolSpec *p) {
  rules_tp(d, s, p);
  rules_moe(d, s, p);
  rules_cp(d, s, p);
  rules_topology(d, s, p);
  int64_t pp = dimv(&p->pp);
  int64_t *part = rp_calloc((size_t)pp, sizeof *part);
  if (pool_partition(d, s, p, part)) rules_memory(d, s, p, part);
  free(part);
}

/* W0206: a draft model is counted only when the workload drafts tokens. */
static void check_draft(Diags *d, const Spec *s) {
  const ModelSpec *dm = s->model.draft;
  if (!dm || s->workload.draft_tokens.v > 0) return;
  Diag *g = diag_at(d, DIAG_W0206, dm->loc,
                    "draft model `%s` is not counted: `workload.draft_tokens` is not set",
                    dm->name.v && dm->name.v[0] ? dm->name.v : "?");
  diag_help(g, "set `workload.draft_tokens` to the tokens the draft proposes per step, or remove `model.draft`");
}

void validate_spec(Diags *d, const Spec *s) {
  engine_check(d, s);
  check_draft(d, s);
  if (!validate_model(d, s)) return;
  const DeploymentSpec *dep = &s->deployment;
  const PoolSpec *prefill = NULL;
  for (size_t i = 0; i < dep->npools; i++) {
    validate_pool(d, s, &dep->pools[i]);
    if (!prefill && (PoolRole)dep->pools[i].role.v == ROLE_PREFILL) prefill = &dep->pools[i];
  }
  if (!prefill) return;
  int64_t ppp = dimv(&prefill->pp);
  for (size_t i = 0; i < dep->npools; i++) {
    const PoolSpec *p = &dep->pools[i];
    if ((PoolRole)p->role.v != ROLE_DECODE) continue;
    int64_t pp = dimv(&p->pp);
    if (pp == 1 || pp == ppp) continue;
    Diag *g = diag_at(d, DIAG_N0201, at(&p->pp, p),
                      "decode pool `%s` has pp %lld, neither 1 nor prefill pool `%s`'s pp %lld: "
                      "KV transfers cross unequal stage boundaries",
                      pname(p), (long long)pp, pname(prefill), (long long)ppp);
    diag_help(g, "pp 1 or pp %lld on the decode pool keeps one transfer per stage", (long long)ppp);
  }
}
