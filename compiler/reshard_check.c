/*
 * reshard_check.c: the independent checker of KV-reshard maps.
 *
 * Input: the two RsLayout descriptors and an RsMap built from them. Output:
 * a verdict, and the first failure in words.
 *
 * The checker proves a map by brute force over cells (layer, kv head,
 * token) of one request of T tokens. It deliberately shares no code with
 * reshard.c: ownership is recomputed from each rank's coordinates with
 * formulas written the other way round (which head group serves head h,
 * rather than which heads a group serves; which chunk holds token p, rather
 * than where a chunk starts), and a transfer's token set is tested token by
 * token. A bug in the box intersection therefore cannot hide itself here.
 *
 * Invariant proven when it returns true: every cell a decode rank owns is
 * received exactly once, no transfer carries a cell its source does not own
 * or its destination does not hold, and each transfer's bytes_per_token
 * equals its layers x heads x kv_bytes_per_head_token.
 */
#include "reshard.h"

#include <stdlib.h>
#include <string.h>

/* Where a rank sits in its attention replica. */
typedef struct {
  int64_t t, c, s;
} RsCoord;

static RsCoord rc__coord(const RsLayout *l, int64_t rel) {
  RsCoord k;
  k.s = rel / (l->tp * l->cp);
  k.c = (rel - k.s * l->tp * l->cp) / l->tp;
  k.t = rel - k.s * l->tp * l->cp - k.c * l->tp;
  return k;
}

/* The pp stage that holds layer, walking the stages from the first. */
static int64_t rc__stage_of_layer(const RsLayout *l, int64_t layer) {
  int64_t end = 0;
  for (int64_t s = 0; s < l->pp; s++) {
    int64_t n;
    if (l->layer_partition) {
      n = l->layer_partition[s];
    } else {
      /* Even split, the first layers % pp stages one layer more. */
      n = l->layers / l->pp + (s < l->layers % l->pp ? 1 : 0);
    }
    end += n;
    if (layer < end) return s;
  }
  return -1;
}

/* The chunk of nchunks that holds token p of a T-token request: the largest
 * j with floor(j*T/nchunks) <= p. */
static int64_t rc__chunk_of_token(int64_t p, int64_t T, int64_t nchunks) {
  int64_t j = 0;
  while (j + 1 < nchunks && ((j + 1) * T) / nchunks <= p) j++;
  return j;
}

/* Whether tp rank t serves kv head h (dcp ranks of one group serve the same
 * heads). */
static bool rc__serves_head(const RsLayout *l, int64_t t, int64_t h) {
  int64_t heads = l->mla ? 1 : l->kv_heads;
  int64_t groups = l->tp / l->dcp, grp = t / l->dcp;
  if (groups <= heads) return (h * groups) / heads == grp;
  return (grp * heads) / groups == h;
}

static bool rc__owns(const RsLayout *l, int64_t rel, int64_t layer, int64_t h, int64_t p,
                     int64_t T) {
  RsCoord k = rc__coord(l, rel);
  if (rc__stage_of_layer(l, layer) != k.s) return false;
  if (!rc__serves_head(l, k.t, h)) return false;
  if (p % l->dcp != k.t % l->dcp) return false;
  if (l->cp > 1) {
    int64_t j = rc__chunk_of_token(p, T, 2 * l->cp);
    if (j != k.c && j != 2 * l->cp - 1 - k.c) return false;
  }
  return true;
}

static bool rc__carries(const RsTransfer *x, int64_t p, int64_t T) {
  if (x->tokens.stride < 1 || p % x->tokens.stride != x->tokens.offset) return false;
  int64_t j = rc__chunk_of_token(p, T, x->tokens.nchunks);
  for (int i = 0; i < x->tokens.nids; i++)
    if (x->tokens.ids[i] == j) return true;
  return false;
}

#define RC_FAIL(...)                          \
  do {                                        \
    if (why && whylen) snprintf(why, whylen, __VA_ARGS__); \
    goto fail;                                \
  } while (0)

/* One transfer's shape on its own: ranks in range, a non-empty box inside
 * the model, a well-formed token set, and bytes_per_token equal to its
 * layers x heads x kv_bytes_per_head_token (checked arithmetic: a plan's
 * numbers are untrusted). */
static bool rc__shape(const RsLayout *src, const RsTransfer *x, size_t i, int64_t ns, int64_t nd,
                      int64_t L, int64_t H, char *why, size_t whylen) {
  int64_t want;
  if (x->src < 0 || x->src >= ns || x->dst < 0 || x->dst >= nd)
    RC_FAIL("transfer %zu: rank %lld -> %lld out of range", i, (long long)x->src, (long long)x->dst);
  if (x->layer_begin < 0 || x->layer_end > L || x->layer_begin >= x->layer_end || x->head_begin < 0 ||
      x->head_end > H || x->head_begin >= x->head_end)
    RC_FAIL("transfer %zu: empty or out-of-range box", i);
  if (x->tokens.nchunks < 1 || x->tokens.nids < 1 || x->tokens.nids > RS_MAX_CHUNK_IDS ||
      x->tokens.stride < 1 || x->tokens.offset < 0 || x->tokens.offset >= x->tokens.stride)
    RC_FAIL("transfer %zu: malformed token set", i);
  if (!ck_mul(x->layer_end - x->layer_begin, x->head_end - x->head_begin, &want) ||
      !ck_mul(want, src->kv_bytes_per_head_token, &want))
    want = -1;
  if (x->bytes_per_token != want)
    RC_FAIL("transfer %zu: bytes_per_token %lld, expected %lld", i, (long long)x->bytes_per_token,
            (long long)want);
  return true;
fail:
  return false;
}

/* A transfer's destination and index, to visit transfers by destination. */
typedef struct {
  int64_t dst;
  size_t i;
} RcOrder;

static int rc__by_dst(const void *a, const void *b) {
  const RcOrder *x = a, *y = b;
  if (x->dst != y->dst) return (x->dst > y->dst) - (x->dst < y->dst);
  return (x->i > y->i) - (x->i < y->i);
}

/* Every cell transfer i carries is owned by its source and held by its
 * destination. */
static bool rc__owned(const RsLayout *src, const RsLayout *dst, const RsTransfer *x, size_t i, int64_t T,
                      char *why, size_t whylen) {
  for (int64_t p = 0; p < T; p++) {
    if (!rc__carries(x, p, T)) continue;
    for (int64_t layer = x->layer_begin; layer < x->layer_end; layer++)
      for (int64_t h = x->head_begin; h < x->head_end; h++) {
        if (!rc__owns(src, x->src, layer, h, p, T))
          RC_FAIL("transfer %zu: source rank %lld sends layer %lld head %lld token %lld "
                  "(T=%lld), which it does not own",
                  i, (long long)x->src, (long long)layer, (long long)h, (long long)p, (long long)T);
        if (!rc__owns(dst, x->dst, layer, h, p, T))
          RC_FAIL("transfer %zu: destination rank %lld receives layer %lld head %lld token "
                  "%lld (T=%lld), which it does not hold",
                  i, (long long)x->dst, (long long)layer, (long long)h, (long long)p, (long long)T);
      }
  }
  return true;
fail:
  return false;
}

/* Marks the cells transfer x carries in count (its destination's cells,
 * layer-major); fails on a cell that arrives twice. */
static bool rc__count(const RsTransfer *x, int64_t T, int64_t H, uint8_t *count, char *why, size_t whylen) {
  for (int64_t p = 0; p < T; p++) {
    if (!rc__carries(x, p, T)) continue;
    for (int64_t layer = x->layer_begin; layer < x->layer_end; layer++)
      for (int64_t h = x->head_begin; h < x->head_end; h++) {
        uint8_t *c = &count[(layer * H + h) * T + p];
        if (*c)
          RC_FAIL("destination rank %lld receives layer %lld head %lld token %lld "
                  "(T=%lld) twice",
                  (long long)x->dst, (long long)layer, (long long)h, (long long)p, (long long)T);
        *c = 1;
      }
  }
  return true;
fail:
  return false;
}

bool rs_check_map_at(const RsLayout *src, const RsLayout *dst, const RsMap *m, int64_t T,
                     char *why, size_t whylen) {
  CkState st = {true};
  int64_t ns = ckm(&st, ckm(&st, src->tp, src->cp), src->pp);
  int64_t nd = ckm(&st, ckm(&st, dst->tp, dst->cp), dst->pp);
  int64_t L = dst->layers, H = dst->mla ? 1 : dst->kv_heads;
  int64_t per_rank = ckm(&st, ckm(&st, L, H), T), cells = ckm(&st, nd, per_rank);
  uint8_t *count = NULL;
  RcOrder *order = NULL;
  if (why && whylen) why[0] = 0;
  if (!st.ok || cells > RS_CHECK_MAX_CELLS)
    RC_FAIL("%lld ranks x %lld layers x %lld heads x %lld tokens are too many cells to check "
            "(at most %lld)",
            (long long)nd, (long long)L, (long long)H, (long long)T, (long long)RS_CHECK_MAX_CELLS);
  if (m->src_ranks != ns || m->dst_ranks != nd)
    RC_FAIL("map is for %lld -> %lld ranks, layouts have %lld -> %lld",
            (long long)m->src_ranks, (long long)m->dst_ranks, (long long)ns, (long long)nd);
  for (size_t i = 0; i < m->xfers.len; i++)
    if (!rc__shape(src, &m->xfers.items[i], i, ns, nd, L, H, why, whylen)) goto fail;
  for (size_t i = 0; i < m->xfers.len; i++)
    if (!rc__owned(src, dst, &m->xfers.items[i], i, T, why, whylen)) goto fail;
  /* One destination rank at a time: the cell counts take L x H x T bytes,
   * not nd times that. */
  /* At most RS_CHECK_MAX_CELLS bytes: out of memory here is an internal
   * error (rp_malloc), not a flaw of the map. */
  order = rp_malloc((m->xfers.len ? m->xfers.len : 1) * sizeof *order);
  count = rp_malloc((size_t)(per_rank ? per_rank : 1));
  for (size_t i = 0; i < m->xfers.len; i++) order[i] = (RcOrder){m->xfers.items[i].dst, i};
  qsort(order, m->xfers.len, sizeof *order, rc__by_dst);
  size_t k = 0;
  for (int64_t r = 0; r < nd; r++) {
    memset(count, 0, (size_t)per_rank);
    for (; k < m->xfers.len && order[k].dst == r; k++)
      if (!rc__count(&m->xfers.items[order[k].i], T, H, count, why, whylen))
        goto fail;
    for (int64_t layer = 0; layer < L; layer++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t p = 0; p < T; p++)
          if (rc__owns(dst, r, layer, h, p, T) && !count[(layer * H + h) * T + p])
            RC_FAIL("destination rank %lld never receives layer %lld head %lld token %lld "
                    "(T=%lld)",
                    (long long)r, (long long)layer, (long long)h, (long long)p, (long long)T);
  }
  free(order);
  free(count);
  return true;
fail:
  free(order);
  free(count);
  return false;
}

/* lcm(a, b) for a, b >= 1; 0 on overflow. */
static int64_t rc__lcm(int64_t a, int64_t b) {
  int64_t x = a, y = b, out;
  while (y) {
    int64_t t = x % y;
    x = y;
    y = t;
  }
  return ck_mul(a / x, b, &out) ? out : 0;
}

bool rs_check_map(const RsLayout *src, const RsLayout *dst, const RsMap *m, char *why,
                  size_t whylen) {
  int64_t parts[4] = {src->cp > 1 ? 2 * src->cp : 1, dst->cp > 1 ? 2 * dst->cp : 1, src->dcp, dst->dcp};
  int64_t l = 1;
  for (int i = 0; i < 4 && l > 0; i++) l = parts[i] >= 1 ? rc__lcm(l, parts[i]) : 0;
  if (l <= 0 || l > RS_CHECK_MAX_CELLS) {
    if (why && whylen)
      snprintf(why, whylen, "the chunk counts and dcp strides (%lld, %lld, %lld, %lld) have no usable lcm",
               (long long)parts[0], (long long)parts[1], (long long)parts[2], (long long)parts[3]);
    return false;
  }
  return rs_check_map_at(src, dst, m, 2 * l, why, whylen) &&
         rs_check_map_at(src, dst, m, 2 * l + 1, why, whylen);
}
