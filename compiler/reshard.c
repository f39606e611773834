/*
 * reshard.c: KV-reshard maps between a prefill and a decode layout.
 *
 * Input: two RsLayout descriptors (one attention replica of the prefill
 * pool, one of the decode pool). Output: an RsMap, the transfers that move
 * one request's KV from the prefill ranks that own it to the decode ranks
 * that need it, with ranks relative to each serving attention replica.
 *
 * Algorithm (docs/reshard.md): every rank owns one box over (layers, kv
 * heads, token set). Source ranks with identical boxes are replicas of one
 * another and form a class; every cell is owned by exactly one class. For
 * each destination rank and each source class the intersection of their
 * boxes is a piece that must travel. Pieces are grouped by the candidate
 * sources that may send them (the class, restricted to the destination's
 * node when one of its members is there), and each group's layers are laid
 * end to end and cut into contiguous runs of near-equal bytes, one run per
 * candidate, least-loaded candidates first.
 *
 * Invariants of a map returned by rs_map_build (proven independently by
 * reshard_check.c in the tests and again by the plan loader): every cell a
 * decode rank owns arrives exactly once; each transfer's cells are owned by
 * its source; no transfer is empty; the output is a pure function of the
 * two descriptors.
 *
 * This file holds the map algebra only: emit.c writes the maps into the
 * plan, explain.c prints a plan's maps, reshard_plan.c has the byte counts
 * the plan library needs.
 */
#include "reshard.h"

#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "model.h"
#include "plan.h"
#include "spec.h"


static int64_t rs__heads(const RsLayout *l) { return l->mla ? 1 : l->kv_heads; }

static int64_t rs__lcm(int64_t a, int64_t b) { return a / rp_gcd64(a, b) * b; }

/* Lists the head-sharding sizes (tp / dcp) that split h heads evenly, up to
 * 64, as the help line of E0403. */
static void rs__valid_shards(int64_t h, StrBuf *sb) {
  bool first = true;
  for (int64_t e = 1; e <= 64; e++) {
    if (h % e == 0 || e % h == 0) {
      sb_printf(sb, "%s%lld", first ? "" : ", ", (long long)e);
      first = false;
    }
  }
}

/* dcp divides tp (E0407) and the kv heads split over tp / dcp ranks
 * (E0403). */
static bool rs__heads_check(Diags *d, const RsLayout *l, const char *pool) {
  if (l->tp % l->dcp != 0) {
    Diag *g = diag_at(d, DIAG_E0407, l->loc,
                      "`dcp` does not divide `tp` in pool `%s`: expected a divisor of %lld, got %lld",
                      pool, (long long)l->tp, (long long)l->dcp);
    StrBuf sb;
    sb_init(&sb);
    for (int64_t v = 1; v <= l->tp; v++)
      if (l->tp % v == 0) sb_printf(&sb, "%s%lld", v == 1 ? "" : ", ", (long long)v);
    diag_help(g, "valid dcp values for tp %lld: %s", (long long)l->tp, sb.buf);
    sb_free(&sb);
    return false;
  }
  int64_t h = rs__heads(l), e = l->tp / l->dcp;
  if (h % e != 0 && e % h != 0) {
    Diag *g = diag_at(d, DIAG_E0403, l->loc,
                      "%lld kv heads do not split over tp/dcp = %lld ranks of pool `%s`: "
                      "expected a divisor or a multiple of %lld, got %lld",
                      (long long)h, (long long)e, pool, (long long)h, (long long)e);
    StrBuf sb;
    sb_init(&sb);
    rs__valid_shards(h, &sb);
    diag_help(g, "valid tp/dcp values: %s", sb.buf);
    sb_free(&sb);
    return false;
  }
  return true;
}

/* The layer partition (E0405): every stage holds a layer and the
 * stages cover the model; without one, no more stages than layers. */
static bool rs__partition_check(Diags *d, const RsLayout *l, const char *pool) {
  bool ok = true;
  if (l->layer_partition) {
    CkState ls = {true};
    int64_t sum = 0;
    for (int64_t s = 0; s < l->pp; s++) {
      if (l->layer_partition[s] < 1) {
        diag_at(d, DIAG_E0405, l->loc,
                "pp stage %lld of pool `%s` holds no layer: expected at least 1, got %lld",
                (long long)s, pool, (long long)l->layer_partition[s]);
        return false;
      }
      sum = cka(&ls, sum, l->layer_partition[s]);
    }
    if (!ls.ok || sum != l->layers) {
      Diag *g = diag_at(d, DIAG_E0405, l->loc,
                        "layer partition of pool `%s` does not cover the model: "
                        "expected %lld layers over %lld stages, got %lld",
                        pool, (long long)l->layers, (long long)l->pp, (long long)sum);
      diag_help(g, "give %lld stage sizes that sum to %lld", (long long)l->pp,
                (long long)l->layers);
      ok = false;
    }
  } else if (l->pp > l->layers) {
    diag_at(d, DIAG_E0405, l->loc,
            "pool `%s` has more pp stages than layers: expected at most %lld, got %lld",
            pool, (long long)l->layers, (long long)l->pp);
    ok = false;
  }
  return ok;
}

bool rs_layout_check(Diags *d, const RsLayout *l) {
  const char *pool = l->pool ? l->pool : "?";
  struct { const char *name; int64_t v; } sizes[] = {
      {"tp", l->tp}, {"pp", l->pp}, {"cp", l->cp}, {"dcp", l->dcp},
      {"dp", l->dp}, {"layers", l->layers},
      {"kv_heads", rs__heads(l)},
      {"kv bytes per head and token", l->kv_bytes_per_head_token}};
  for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) {
    if (sizes[i].v < 1) {
      diag_at(d, DIAG_E0409, l->loc,
              "`%s` of pool `%s` is not positive: expected at least 1, got %lld",
              sizes[i].name, pool, (long long)sizes[i].v);
      return false;
    }
  }
  CkState st = {true};
  ckm(&st, ckm(&st, l->tp, l->cp), l->pp);
  if (!st.ok) {
    diag_at(d, DIAG_E0406, l->loc, "ranks of one replica of pool `%s` overflow 64 bits", pool);
    return false;
  }
  bool ok = rs__heads_check(d, l, pool);
  return rs__partition_check(d, l, pool) && ok;
}

/* First layer of stage s and its layer count. */
static void rs__stage_layers(const RsLayout *l, int64_t s, int64_t *begin, int64_t *count) {
  if (l->layer_partition) {
    int64_t b = 0;
    for (int64_t i = 0; i < s; i++) b += l->layer_partition[i];
    *begin = b;
    *count = l->layer_partition[s];
    return;
  }
  int64_t q = l->layers / l->pp, r = l->layers % l->pp;
  *begin = s * q + (s < r ? s : r);
  *count = q + (s < r ? 1 : 0);
}

RsBox rs_rank_box(const RsLayout *l, int64_t rel) {
  RP_ASSERT(rel >= 0 && rel < rs_replica_ranks(l));
  int64_t t = rel % l->tp, c = (rel / l->tp) % l->cp, s = rel / (l->tp * l->cp);
  RsBox b;
  memset(&b, 0, sizeof b);
  int64_t n;
  rs__stage_layers(l, s, &b.layer_begin, &n);
  b.layer_end = b.layer_begin + n;
  /* dcp groups consecutive tp ranks: tp rank t is dcp rank t % dcp of head
   * group t / dcp, and tp / dcp groups shard the heads. */
  int64_t h = rs__heads(l), e = l->tp / l->dcp, grp = t / l->dcp;
  if (e <= h) {
    b.head_begin = grp * (h / e);
    b.head_end = b.head_begin + h / e;
  } else {
    b.head_begin = grp / (e / h);
    b.head_end = b.head_begin + 1;
  }
  b.tokens.stride = l->dcp;
  b.tokens.offset = t % l->dcp;
  if (l->cp > 1) {
    b.tokens.nchunks = 2 * l->cp;
    b.tokens.nids = 2;
    b.tokens.ids[0] = c;
    b.tokens.ids[1] = 2 * l->cp - 1 - c;
  } else {
    b.tokens.nchunks = 1;
    b.tokens.nids = 1;
    b.tokens.ids[0] = 0;
  }
  return b;
}

static bool rs__box_eq(const RsBox *a, const RsBox *b) {
  if (a->layer_begin != b->layer_begin || a->layer_end != b->layer_end ||
      a->head_begin != b->head_begin || a->head_end != b->head_end ||
      a->tokens.nchunks != b->tokens.nchunks || a->tokens.nids != b->tokens.nids ||
      a->tokens.stride != b->tokens.stride || a->tokens.offset != b->tokens.offset)
    return false;
  for (int i = 0; i < a->tokens.nids; i++)
    if (a->tokens.ids[i] != b->tokens.ids[i]) return false;
  return true;
}

/* Intersects two token sets; false when the result is empty. The chunk
 * counts must agree or one side must be unchunked (rs_map_build checks). */
static bool rs__tokens_meet(const RsTokens *a, const RsTokens *b, RsTokens *out) {
  RsTokens r;
  memset(&r, 0, sizeof r);
  if (a->nchunks == 1) {
    r.nchunks = b->nchunks;
    r.nids = b->nids;
    memcpy(r.ids, b->ids, sizeof r.ids);
  } else if (b->nchunks == 1) {
    r.nchunks = a->nchunks;
    r.nids = a->nids;
    memcpy(r.ids, a->ids, sizeof r.ids);
  } else {
    RP_ASSERT(a->nchunks == b->nchunks);
    r.nchunks = a->nchunks;
    for (int i = 0; i < a->nids; i++)
      for (int j = 0; j < b->nids; j++)
        if (a->ids[i] == b->ids[j]) r.ids[r.nids++] = a->ids[i];
  }
  if (r.nids == 0) return false;
  /* Residue classes: x = oa (mod sa) and x = ob (mod sb) meet iff
   * oa = ob (mod gcd); the meet is one class modulo lcm. */
  int64_t g = rp_gcd64(a->stride, b->stride);
  if ((a->offset - b->offset) % g != 0) return false;
  r.stride = rs__lcm(a->stride, b->stride);
  r.offset = -1;
  for (int64_t x = a->offset; x < r.stride; x += a->stride)
    if (x % b->stride == b->offset) {
      r.offset = x;
      break;
    }
  RP_ASSERT(r.offset >= 0);
  *out = r;
  return true;
}

static bool rs__box_meet(const RsBox *a, const RsBox *b, RsBox *out) {
  RsBox r;
  memset(&r, 0, sizeof r);
  r.layer_begin = a->layer_begin > b->layer_begin ? a->layer_begin : b->layer_begin;
  r.layer_end = a->layer_end < b->layer_end ? a->layer_end : b->layer_end;
  r.head_begin = a->head_begin > b->head_begin ? a->head_begin : b->head_begin;
  r.head_end = a->head_end < b->head_end ? a->head_end : b->head_end;
  if (r.layer_begin >= r.layer_end || r.head_begin >= r.head_end) return false;
  if (!rs__tokens_meet(&a->tokens, &b->tokens, &r.tokens)) return false;
  *out = r;
  return true;
}

/* Tokens p < x with p = o (mod s). */

static int64_t rs__chunk_start(int64_t j, int64_t T, int64_t k) {
  int64_t jt;
  if (!ck_mul(j, T, &jt)) rp_internal("reshard: chunk bound %lld * %lld overflows", (long long)j, (long long)T);
  return jt / k;
}

int64_t rs_tokens_count(const RsTokens *t, int64_t T) {
  int64_t n = 0;
  for (int i = 0; i < t->nids; i++) {
    int64_t a = rs__chunk_start(t->ids[i], T, t->nchunks);
    int64_t b = rs__chunk_start(t->ids[i] + 1, T, t->nchunks);
    n += rs_below(b, t->stride, t->offset) - rs_below(a, t->stride, t->offset);
  }
  return n;
}

bool rs_tokens_has(const RsTokens *t, int64_t T, int64_t p) {
  if (p < 0 || p >= T || p % t->stride != t->offset) return false;
  for (int i = 0; i < t->nids; i++)
    if (p >= rs__chunk_start(t->ids[i], T, t->nchunks) &&
        p < rs__chunk_start(t->ids[i] + 1, T, t->nchunks))
      return true;
  return false;
}

void rs_tokens_format(const RsTokens *t, StrBuf *sb) {
  bool chunked = t->nchunks > 1, strided = t->stride > 1;
  if (!chunked && !strided) {
    sb_puts(sb, "all");
    return;
  }
  if (chunked) {
    sb_puts(sb, "chunks ");
    for (int i = 0; i < t->nids; i++)
      sb_printf(sb, "%s%lld", i ? "," : "", (long long)t->ids[i]);
    sb_printf(sb, "/%lld", (long long)t->nchunks);
  }
  if (strided)
    sb_printf(sb, "%sp%%%lld==%lld", chunked ? " & " : "", (long long)t->stride,
              (long long)t->offset);
}

size_t rs_tokens_ranges(const RsTokens *t, int64_t T, int64_t **ranges) {
  RP_VEC(int64_t) v = {0};
  for (int i = 0; i < t->nids; i++) {
    int64_t a = rs__chunk_start(t->ids[i], T, t->nchunks);
    int64_t b = rs__chunk_start(t->ids[i] + 1, T, t->nchunks);
    if (t->stride == 1) {
      /* Adjacent chunks (the middle pair of a zigzag) make one range. */
      if (a < b && v.len && v.items[v.len - 1] == a) {
        v.items[v.len - 1] = b;
      } else if (a < b) {
        rp_vec_push(&v, a);
        rp_vec_push(&v, b);
      }
      continue;
    }
    int64_t p = a + ((t->offset - a % t->stride) + t->stride) % t->stride;
    for (; p < b; p += t->stride) {
      rp_vec_push(&v, p);
      rp_vec_push(&v, p + 1);
    }
  }
  *ranges = v.items;
  return v.len / 2;
}

bool rs_xfer_bytes(const RsTransfer *x, int64_t T, int64_t *out) {
  return ck_mul(x->bytes_per_token, rs_tokens_count(&x->tokens, T), out);
}

/* DType names as the spec spells them (spec.h order); kept here so that
 * this stage links without the front end. */
static const char *rs__dtype_name(int t) {
  static const char *const names[DT__COUNT] = {"fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4"};
  return t >= 0 && t < DT__COUNT ? names[t] : "?";
}

/* Checks that the two sides hold the same KV and can be intersected. */
static bool rs__compatible(Diags *d, const RsLayout *s, const RsLayout *t) {
  const char *sp = s->pool ? s->pool : "?", *tp = t->pool ? t->pool : "?";
  const char *sm = s->model_id ? s->model_id : "?", *tm = t->model_id ? t->model_id : "?";
  if (strcmp(sm, tm) != 0) {
    Diag *g = diag_at(d, DIAG_E0401, t->loc,
                      "pool `%s` serves model `%s` but pool `%s` serves model `%s`",
                      sp, sm, tp, tm);
    diag_help(g, "a request's KV can only move between pools of the same model");
    return false;
  }
  if (s->dtype != t->dtype) {
    const char *sd = rs__dtype_name(s->dtype), *td = rs__dtype_name(t->dtype);
    Diag *g = diag_at(d, DIAG_E0402, t->loc,
                      "pool `%s` stores KV as `%s` but pool `%s` stores KV as `%s`",
                      sp, sd, tp, td);
    diag_help(g, "use one kv_cache dtype for both pools");
    return false;
  }
  if (s->layers != t->layers || s->mla != t->mla || rs__heads(s) != rs__heads(t) ||
      s->kv_bytes_per_head_token != t->kv_bytes_per_head_token) {
    diag_at(d, DIAG_E0408, t->loc,
            "pools `%s` and `%s` disagree on the KV shape of `%s`: expected %lld layers, "
            "%lld kv heads, %lld bytes per head and token, got %lld, %lld, %lld",
            sp, tp, sm, (long long)s->layers, (long long)rs__heads(s),
            (long long)s->kv_bytes_per_head_token, (long long)t->layers,
            (long long)rs__heads(t), (long long)t->kv_bytes_per_head_token);
    return false;
  }
  if (s->cp > 1 && t->cp > 1 && s->cp != t->cp) {
    Diag *g = diag_at(d, DIAG_E0404, t->loc,
                      "pools `%s` and `%s` both chunk tokens for context parallelism: "
                      "expected equal cp, got %lld and %lld",
                      sp, tp, (long long)s->cp, (long long)t->cp);
    diag_help(g, "use cp 1 on the decode pool (dcp interleaves tokens instead) or the same cp on both");
    return false;
  }
  return true;
}

typedef struct {
  int64_t dst, cls; /* destination rank, source class (its smallest rank) */
  int64_t key_node; /* node the candidates were restricted to, or -1 */
  RsBox box;
} RsPiece;

static int rs__xfer_cmp(const void *pa, const void *pb) {
  const RsTransfer *a = pa, *b = pb;
  int64_t ka[] = {a->dst, a->layer_begin, a->head_begin, a->tokens.ids[0], a->tokens.offset, a->src};
  int64_t kb[] = {b->dst, b->layer_begin, b->head_begin, b->tokens.ids[0], b->tokens.offset, b->src};
  for (size_t i = 0; i < RP_ARRAY_LEN(ka); i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

void rs_map_free(RsMap *m) {
  free(m->xfers.items);
  memset(m, 0, sizeof *m);
}

/* The working state of one rs_map_build. */
typedef struct {
  const RsLayout *src, *dst;
  int64_t ns, nd; /* ranks of one replica, source and destination */
  RsBox *sb, *db; /* each rank's box */
  int64_t *rep;   /* source replica class: the smallest rank with the box */
  int64_t *load;  /* cells assigned to each source rank so far */
  int64_t *cand, *bound;
  bool *done;
  RP_VEC(RsPiece) pieces;
  int64_t tw; /* the request length weights are counted at */
  CkState st;
  RsMap *out;
} RsBuild;

/* Boxes, replica classes, and the pieces: each destination box met with
 * each source class box, keyed by the destination's node when a rank of
 * the class shares it. */
static void build_pieces(RsBuild *b) {
  const RsLayout *src = b->src, *dst = b->dst;
  for (int64_t r = 0; r < b->ns; r++) b->sb[r] = rs_rank_box(src, r);
  for (int64_t r = 0; r < b->nd; r++) b->db[r] = rs_rank_box(dst, r);
  for (int64_t r = 0; r < b->ns; r++) {
    b->rep[r] = r;
    for (int64_t q = 0; q < r; q++)
      if (b->rep[q] == q && rs__box_eq(&b->sb[q], &b->sb[r])) {
        b->rep[r] = q;
        break;
      }
  }
  for (int64_t t = 0; t < b->nd; t++)
    for (int64_t r = 0; r < b->ns; r++) {
      RsPiece p;
      if (b->rep[r] != r || !rs__box_meet(&b->db[t], &b->sb[r], &p.box)) continue;
      p.dst = t;
      p.cls = r;
      p.key_node = -1;
      if (src->node_of_rank && dst->node_of_rank) {
        for (int64_t q = r; q < b->ns; q++)
          if (b->rep[q] == r && src->node_of_rank[q] == dst->node_of_rank[t]) {
            p.key_node = dst->node_of_rank[t];
            break;
          }
      }
      rp_vec_push(&b->pieces, p);
    }
}

/* Candidates for the group of pieces of class cls keyed kn: the class's
 * ranks, on node kn when kn >= 0; least-loaded first. Returns how many. */
static size_t candidates(RsBuild *b, int64_t cls, int64_t kn) {
  size_t nc = 0;
  for (int64_t q = cls; q < b->ns; q++)
    if (b->rep[q] == cls && (kn < 0 || b->src->node_of_rank[q] == kn)) b->cand[nc++] = q;
  for (size_t i = 1; i < nc; i++)
    for (size_t j = i; j > 0 && b->load[b->cand[j]] < b->load[b->cand[j - 1]]; j--) {
      int64_t tmp = b->cand[j];
      b->cand[j] = b->cand[j - 1];
      b->cand[j - 1] = tmp;
    }
  return nc;
}

/* Water filling over the nc candidates for a group of `total` cells: the k
 * least-loaded are raised to one level, k the largest count whose highest
 * load is still at or under that level; bound[j] is the sum of the shares
 * of candidates 0..j. Returns k. */
static size_t water_fill(RsBuild *b, size_t nc, int64_t total) {
  CkState *st = &b->st;
  size_t k = 1;
  int64_t prefix = 0;
  for (size_t i = 0; i < nc; i++) {
    prefix = cka(st, prefix, b->load[b->cand[i]]);
    if (ckm(st, b->load[b->cand[i]], (int64_t)(i + 1)) <= cka(st, total, prefix)) k = i + 1;
  }
  int64_t level_sum = total;
  for (size_t i = 0; i < k; i++) level_sum = cka(st, level_sum, b->load[b->cand[i]]);
  for (size_t i = 0; i < k; i++) {
    int64_t target = level_sum / (int64_t)k + ((int64_t)i < level_sum % (int64_t)k ? 1 : 0);
    b->bound[i] = cka(st, i ? b->bound[i - 1] : 0, target - b->load[b->cand[i]]);
  }
  return k;
}

/* A piece's cells per layer at the weighting length. */
static int64_t piece_weight(RsBuild *b, const RsPiece *p) {
  return ckm(&b->st, p->box.head_end - p->box.head_begin, rs_tokens_count(&p->box.tokens, b->tw));
}

/* Piece p layer by layer to the candidates in order (a contiguous cut):
 * candidate *j takes layers until the running sum *cum reaches its bound.
 * Consecutive layers to one source make one transfer. */
static void cut_piece(RsBuild *b, const RsPiece *p, size_t k, size_t *j, int64_t *cum) {
  int64_t w = piece_weight(b, p);
  RsTransfer cur;
  bool open = false;
  for (int64_t layer = p->box.layer_begin; layer < p->box.layer_end; layer++) {
    int64_t s = b->cand[*j];
    if (open && cur.src == s) {
      cur.layer_end = layer + 1;
    } else {
      if (open) rp_vec_push(&b->out->xfers, cur);
      memset(&cur, 0, sizeof cur);
      cur.src = s;
      cur.dst = p->dst;
      cur.layer_begin = layer;
      cur.layer_end = layer + 1;
      cur.head_begin = p->box.head_begin;
      cur.head_end = p->box.head_end;
      cur.tokens = p->box.tokens;
      open = true;
    }
    b->load[s] = cka(&b->st, b->load[s], w);
    *cum = cka(&b->st, *cum, w);
    while (*j + 1 < k && *cum >= b->bound[*j]) (*j)++;
  }
  if (open) rp_vec_push(&b->out->xfers, cur);
}

/* The group of pieces starting at gi (same class and key): shared over
 * the candidates by water filling, then cut. */
static void assign_group(RsBuild *b, size_t gi) {
  int64_t cls = b->pieces.items[gi].cls, kn = b->pieces.items[gi].key_node;
  size_t nc = candidates(b, cls, kn);
  int64_t total = 0;
  for (size_t pi = gi; pi < b->pieces.len; pi++) {
    const RsPiece *p = &b->pieces.items[pi];
    if (b->done[pi] || p->cls != cls || p->key_node != kn) continue;
    total = cka(&b->st, total, ckm(&b->st, piece_weight(b, p), p->box.layer_end - p->box.layer_begin));
  }
  size_t k = water_fill(b, nc, total), j = 0;
  int64_t cum = 0;
  for (size_t pi = gi; pi < b->pieces.len && b->st.ok; pi++) {
    const RsPiece *p = &b->pieces.items[pi];
    if (b->done[pi] || p->cls != cls || p->key_node != kn) continue;
    b->done[pi] = true;
    cut_piece(b, p, k, &j, &cum);
  }
}

/* Sizes and link classes of the transfers, in their canonical order. */
static void finish_transfers(RsBuild *b) {
  RsMap *out = b->out;
  const RsLayout *src = b->src, *dst = b->dst;
  for (size_t i = 0; i < out->xfers.len && b->st.ok; i++) {
    RsTransfer *x = &out->xfers.items[i];
    x->bytes_per_token = ckm(&b->st, ckm(&b->st, x->layer_end - x->layer_begin, x->head_end - x->head_begin),
                             src->kv_bytes_per_head_token);
    x->same_node = src->node_of_rank && dst->node_of_rank &&
                   src->node_of_rank[x->src] == dst->node_of_rank[x->dst];
    x->scale_up = src->domain_of_rank && dst->domain_of_rank &&
                  src->domain_of_rank[x->src] == dst->domain_of_rank[x->dst];
  }
  if (out->xfers.len)
    qsort(out->xfers.items, out->xfers.len, sizeof *out->xfers.items, rs__xfer_cmp);
  out->src_ranks = b->ns;
  out->dst_ranks = b->nd;
}

bool rs_map_build(Diags *d, const RsLayout *src, const RsLayout *dst, RsMap *out) {
  memset(out, 0, sizeof *out);
  bool ok = rs_layout_check(d, src);
  ok = rs_layout_check(d, dst) && ok;
  if (!ok || !rs__compatible(d, src, dst)) return false;
  RsBuild b = {.src = src, .dst = dst, .st = {true}, .out = out};
  b.ns = rs_replica_ranks(src);
  b.nd = rs_replica_ranks(dst);
  b.sb = rp_calloc((size_t)b.ns, sizeof *b.sb);
  b.db = rp_calloc((size_t)b.nd, sizeof *b.db);
  b.rep = rp_calloc((size_t)b.ns, sizeof *b.rep);
  b.load = rp_calloc((size_t)b.ns, sizeof *b.load);
  b.cand = rp_calloc((size_t)b.ns, sizeof *b.cand);
  b.bound = rp_calloc((size_t)b.ns, sizeof *b.bound);
  build_pieces(&b);
  /* Weights are cells at a request length tw where every chunk holds the
   * same number of tokens of every residue class, so weight is exactly
   * proportional to bytes for any request length that is a multiple of tw. */
  int64_t kch = rs__lcm(src->cp > 1 ? 2 * src->cp : 1, dst->cp > 1 ? 2 * dst->cp : 1);
  b.tw = kch * rs__lcm(src->dcp, dst->dcp);
  b.done = rp_calloc(b.pieces.len ? b.pieces.len : 1, sizeof *b.done);
  for (size_t gi = 0; gi < b.pieces.len; gi++)
    if (!b.done[gi]) assign_group(&b, gi);
  finish_transfers(&b);
  free(b.sb);
  free(b.db);
  free(b.rep);
  free(b.load);
  free(b.done);
  free(b.cand);
  free(b.bound);
  free(b.pieces.items);
  if (!b.st.ok) {
    diag_at(d, DIAG_E0406, dst->loc,
            "KV transfer sizes from pool `%s` to pool `%s` overflow 64 bits",
            src->pool ? src->pool : "?", dst->pool ? dst->pool : "?");
    rs_map_free(out);
    return false;
  }
  return true;
}

bool rs_map_cost(Diags *d, const RsMap *m, int64_t T, double bw_up, double bw_out,
                 double lat_up, double lat_out, RsCost *out) {
  memset(out, 0, sizeof *out);
  /* Per rank and link class: [rank][0] scale-up, [rank][1] scale-out. */
  int64_t (*eg)[2] = rp_calloc((size_t)(m->src_ranks ? m->src_ranks : 1), sizeof *eg);
  int64_t (*in)[2] = rp_calloc((size_t)(m->dst_ranks ? m->dst_ranks : 1), sizeof *in);
  CkState st = {true};
  for (size_t i = 0; i < m->xfers.len; i++) {
    const RsTransfer *x = &m->xfers.items[i];
    int64_t b = ckm(&st, x->bytes_per_token, rs_tokens_count(&x->tokens, T));
    int c = x->scale_up ? 0 : 1;
    eg[x->src][c] = cka(&st, eg[x->src][c], b);
    in[x->dst][c] = cka(&st, in[x->dst][c], b);
    out->bytes_total = cka(&st, out->bytes_total, b);
    if (c == 0) out->bytes_scale_up = cka(&st, out->bytes_scale_up, b);
    else out->bytes_scale_out = cka(&st, out->bytes_scale_out, b);
  }
  int64_t maxb[2] = {0, 0};
  for (int64_t r = 0; r < m->src_ranks; r++) {
    int64_t tot = cka(&st, eg[r][0], eg[r][1]);
    if (tot > out->max_bytes_per_src) out->max_bytes_per_src = tot;
    for (int c = 0; c < 2; c++)
      if (eg[r][c] > maxb[c]) maxb[c] = eg[r][c];
  }
  for (int64_t r = 0; r < m->dst_ranks; r++)
    for (int c = 0; c < 2; c++)
      if (in[r][c] > maxb[c]) maxb[c] = in[r][c];
  free(eg);
  free(in);
  if (!st.ok) {
    if (d) diag_at(d, DIAG_E0406, (SrcLoc){0},
                   "KV bytes of one %lld-token request overflow 64 bits", (long long)T);
    return false;
  }
  if (maxb[0] > 0) out->time_scale_up_s = (double)maxb[0] / bw_up + lat_up;
  if (maxb[1] > 0) out->time_scale_out_s = (double)maxb[1] / bw_out + lat_out;
  out->time_s = out->time_scale_up_s > out->time_scale_out_s ? out->time_scale_up_s
                                                             : out->time_scale_out_s;
  return true;
}

bool rs_warn_slo(Diags *d, SrcLoc loc, const RsLayout *src, const RsLayout *dst,
                 const RsCost *cost, double ttft_s) {
  if (!(ttft_s > 0) || cost->time_s <= RS_SLO_SHARE * ttft_s) return false;
  char b[32], b2[32];
  Diag *g = diag_at(d, DIAG_W0401, loc,
                    "KV transfer from pool `%s` to pool `%s` takes %.1f ms, over %.0f%% of the "
                    "%.1f ms TTFT SLO (%.1f ms)",
                    src->pool ? src->pool : "?", dst->pool ? dst->pool : "?", cost->time_s * 1e3,
                    RS_SLO_SHARE * 100, ttft_s * 1e3, RS_SLO_SHARE * ttft_s * 1e3);
  diag_note(g, "%s per request, busiest source rank sends %s",
            rp_fmt_bytes(cost->bytes_total, b, sizeof b),
            rp_fmt_bytes(cost->max_bytes_per_src, b2, sizeof b2));
  diag_help(g, "place prefill and decode in one scale-up domain, or use fewer prefill ranks per "
               "decode rank so the transfer spreads over more links");
  return true;
}

bool rs_global_rank(const char *order, const RsLayout *l, int64_t instance_base,
                    int64_t dp_rank, int64_t rel, int64_t *out) {
  if (!order || rel < 0 || rel >= rs_replica_ranks(l) || dp_rank < 0 || dp_rank >= l->dp)
    return false;
  int64_t coord[4] = {rel % l->tp, (rel / l->tp) % l->cp, dp_rank, rel / (l->tp * l->cp)};
  int64_t size[4] = {l->tp, l->cp, l->dp, l->pp};
  static const char *const names[4] = {"tp", "cp", "dp", "pp"};
  bool seen[4] = {false, false, false, false};
  CkState st = {true};
  int64_t stride = 1, g = instance_base;
  const char *p = order;
  while (*p) {
    const char *e = strchr(p, '-');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    int k = -1;
    for (int i = 0; i < 4; i++)
      if (n == strlen(names[i]) && strncmp(p, names[i], n) == 0) k = i;
    if (k < 0) {
      if (!(n == 2 && strncmp(p, "ep", 2) == 0)) return false;
    } else {
      if (seen[k]) return false;
      seen[k] = true;
      g = cka(&st, g, ckm(&st, coord[k], stride));
      stride = ckm(&st, stride, size[k]);
    }
    p += n;
    if (*p == '-') p++;
  }
  for (int i = 0; i < 4; i++)
    if (!seen[i]) return false;
  if (!st.ok) return false;
  *out = g;
  return true;
}

/* ---- the compile pipeline ----------------------------------------------- */

/* Fills one side's descriptor from pool p of a placed Layout; node and
 * domain ids are those of the pool's instance 0, attention-dp rank 0. */
static void rs__side(const Spec *s, const Layout *L, size_t p, RsLayout *l, int64_t **node,
                     int64_t **dom) {
  const LayPool *P = &L->pools[p];
  const ModelSpec *m = &s->model;
  memset(l, 0, sizeof *l);
  l->pool = P->name;
  l->loc = P->loc;
  l->model_id = m->name.set ? m->name.v : m->preset.set ? m->preset.v : "model";
  l->dtype = m->dtype.kv_cache.v;
  l->tp = P->size[CO_TP];
  l->pp = P->size[CO_PP];
  l->cp = P->size[CO_CP];
  l->dp = P->size[CO_DP];
  l->dcp = P->size[CO_DCP] > 0 ? P->size[CO_DCP] : 1;
  l->layers = m->layers.v;
  l->layer_partition = P->layer_partition;
  l->mla = m->attention.kind.v == ATTN_MLA;
  l->kv_heads = l->mla ? 1 : model_kv_heads(m);
  int64_t per_token = model_kv_bytes_per_token(m);
  int64_t h = l->kv_heads > 0 ? l->kv_heads : 1;
  l->kv_bytes_per_head_token = per_token > 0 && l->layers > 0 ? per_token / l->layers / h : -1;
  int64_t n = rs_replica_ranks(l);
  *node = NULL;
  *dom = NULL;
  if (!L->placed || n < 1 || n > L->nranks) return;
  *node = rp_calloc((size_t)n, sizeof **node);
  *dom = rp_calloc((size_t)n, sizeof **dom);
  const char *order = s->deployment.order.set ? s->deployment.order.v : SPEC_ORDER_DEFAULT;
  for (int64_t r = 0; r < n; r++) {
    int64_t g;
    if (!rs_global_rank(order, l, P->first_rank, 0, r, &g) || g < 0 || g >= L->nranks) {
      free(*node);
      free(*dom);
      *node = *dom = NULL;
      return;
    }
    const LayRank *R = &L->ranks[g];
    (*node)[r] = R->node;
    int64_t gpu = (int64_t)R->node * L->gpus_per_node + R->device;
    (*dom)[r] = L->domain > 0 ? gpu / L->domain : R->node;
  }
  l->node_of_rank = *node;
  l->domain_of_rank = *dom;
}

void rs_plan_free(RsPlan *p) {
  for (size_t i = 0; i < p->npairs; i++) {
    RsPair *q = &p->pairs[i];
    rs_map_free(&q->map);
    free(q->src_node);
    free(q->src_dom);
    free(q->dst_node);
    free(q->dst_dom);
  }
  free(p->pairs);
  memset(p, 0, sizeof *p);
}

/* Zigzag context parallelism cuts a request into 2 x cp chunks; with
 * fewer input tokens than chunks some chunks are empty, and the plan's
 * token ranges (written at input_tokens) could not say which chunk each
 * is, so the loader could not prove the map. */
static bool rs__enough_tokens(Diags *d, const RsPair *q, int64_t T) {
  int64_t cp = q->src.cp > q->dst.cp ? q->src.cp : q->dst.cp;
  if (cp <= 1 || T <= 0 || T >= 2 * cp) return true;
  const RsLayout *side = q->src.cp >= q->dst.cp ? &q->src : &q->dst;
  Diag *g = diag_at(d, DIAG_E0410, side->loc,
                    "pool `%s` splits each request into %lld zigzag chunks (cp %lld), but "
                    "workload.input_tokens is %lld",
                    side->pool ? side->pool : "?", (long long)(2 * cp), (long long)cp, (long long)T);
  diag_help(g, "use cp of at most %lld, or describe requests of at least %lld input tokens",
            (long long)(T / 2 > 0 ? T / 2 : 1), (long long)(2 * cp));
  return false;
}

bool rs_plan_build(Diags *d, const Spec *s, const Layout *L, RsPlan *out) {
  memset(out, 0, sizeof *out);
  RP_VEC(RsPair) v = {0};
  bool ok = true;
  for (size_t a = 0; a < L->npools; a++) {
    if (L->pools[a].role != ROLE_PREFILL) continue;
    for (size_t b = 0; b < L->npools; b++) {
      if (L->pools[b].role != ROLE_DECODE) continue;
      RsPair q;
      memset(&q, 0, sizeof q);
      q.prefill = a;
      q.decode = b;
      rs__side(s, L, a, &q.src, &q.src_node, &q.src_dom);
      rs__side(s, L, b, &q.dst, &q.dst_node, &q.dst_dom);
      int64_t T = s->workload.input_tokens.set ? s->workload.input_tokens.v : 0;
      if (!rs_map_build(d, &q.src, &q.dst, &q.map) || !rs__enough_tokens(d, &q, T)) {
        ok = false;
      } else {
        const HardwareSpec *h = &s->hardware;
        double up = h->scale_up.bandwidth.v > 0 ? h->scale_up.bandwidth.v : 1;
        double so = h->scale_out.bandwidth.v > 0 ? h->scale_out.bandwidth.v : 1;
        if (T > 0 && rs_map_cost(d, &q.map, T, up, so,
                                 h->scale_up.latency.set ? h->scale_up.latency.v : 0,
                                 h->scale_out.latency.set ? h->scale_out.latency.v : 0, &q.cost)) {
          q.has_cost = true;
          if (s->slo.ttft.set)
            rs_warn_slo(d, q.dst.loc, &q.src, &q.dst, &q.cost, s->slo.ttft.v);
        }
      }
      rp_vec_push(&v, q);
    }
  }
  out->pairs = v.items;
  out->npairs = v.len;
  if (!ok) rs_plan_free(out);
  return ok;
}
