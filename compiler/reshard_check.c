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

bool rs_check_map_at(const RsLayout *src, const RsLayout *dst, const RsMap *m, int64_t T,
                     char *why, size_t whylen) {
  int64_t ns = src->tp * src->cp * src->pp, nd = dst->tp * dst->cp * dst->pp;
  int64_t L = dst->layers, H = dst->mla ? 1 : dst->kv_heads;
  int64_t cells = nd * L * H * T;
  uint8_t *count = NULL;
  if (why && whylen) why[0] = 0;
  if (m->src_ranks != ns || m->dst_ranks != nd)
    RC_FAIL("map is for %lld -> %lld ranks, layouts have %lld -> %lld",
            (long long)m->src_ranks, (long long)m->dst_ranks, (long long)ns, (long long)nd);
  if (cells > ((int64_t)1 << 30)) RC_FAIL("%lld cells are too many to check", (long long)cells);
  count = calloc((size_t)cells, 1);
  if (!count) RC_FAIL("out of memory for %lld cells", (long long)cells);
  for (size_t i = 0; i < m->xfers.len; i++) {
    const RsTransfer *x = &m->xfers.items[i];
    if (x->src < 0 || x->src >= ns || x->dst < 0 || x->dst >= nd)
      RC_FAIL("transfer %zu: rank %lld -> %lld out of range", i, (long long)x->src,
              (long long)x->dst);
    if (x->layer_begin < 0 || x->layer_end > L || x->layer_begin >= x->layer_end ||
        x->head_begin < 0 || x->head_end > H || x->head_begin >= x->head_end)
      RC_FAIL("transfer %zu: empty or out-of-range box", i);
    if (x->tokens.nchunks < 1 || x->tokens.nids < 1 || x->tokens.nids > RS_MAX_CHUNK_IDS ||
        x->tokens.stride < 1 || x->tokens.offset < 0 || x->tokens.offset >= x->tokens.stride)
      RC_FAIL("transfer %zu: malformed token set", i);
    if (x->bytes_per_token != (x->layer_end - x->layer_begin) * (x->head_end - x->head_begin) *
                                  src->kv_bytes_per_head_token)
      RC_FAIL("transfer %zu: bytes_per_token %lld, expected %lld", i,
              (long long)x->bytes_per_token,
              (long long)((x->layer_end - x->layer_begin) * (x->head_end - x->head_begin) *
                          src->kv_bytes_per_head_token));
    for (int64_t p = 0; p < T; p++) {
      if (!rc__carries(x, p, T)) continue;
      for (int64_t layer = x->layer_begin; layer < x->layer_end; layer++)
        for (int64_t h = x->head_begin; h < x->head_end; h++) {
          if (!rc__owns(src, x->src, layer, h, p, T))
            RC_FAIL("transfer %zu: source rank %lld sends layer %lld head %lld token %lld "
                    "(T=%lld), which it does not own",
                    i, (long long)x->src, (long long)layer, (long long)h, (long long)p,
                    (long long)T);
          if (!rc__owns(dst, x->dst, layer, h, p, T))
            RC_FAIL("transfer %zu: destination rank %lld receives layer %lld head %lld token "
                    "%lld (T=%lld), which it does not hold",
                    i, (long long)x->dst, (long long)layer, (long long)h, (long long)p,
                    (long long)T);
          uint8_t *c = &count[((x->dst * L + layer) * H + h) * T + p];
          if (*c) RC_FAIL("destination rank %lld receives layer %lld head %lld token %lld "
                          "(T=%lld) twice",
                          (long long)x->dst, (long long)layer, (long long)h, (long long)p,
                          (long long)T);
          *c = 1;
        }
    }
  }
  for (int64_t r = 0; r < nd; r++)
    for (int64_t layer = 0; layer < L; layer++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t p = 0; p < T; p++)
          if (rc__owns(dst, r, layer, h, p, T) && !count[((r * L + layer) * H + h) * T + p])
            RC_FAIL("destination rank %lld never receives layer %lld head %lld token %lld "
                    "(T=%lld)",
                    (long long)r, (long long)layer, (long long)h, (long long)p, (long long)T);
  free(count);
  return true;
fail:
  free(count);
  return false;
}

static int64_t rc__lcm(int64_t a, int64_t b) {
  int64_t x = a, y = b;
  while (y) {
    int64_t t = x % y;
    x = y;
    y = t;
  }
  return a / x * b;
}

bool rs_check_map(const RsLayout *src, const RsLayout *dst, const RsMap *m, char *why,
                  size_t whylen) {
  int64_t l = 1;
  l = rc__lcm(l, src->cp > 1 ? 2 * src->cp : 1);
  l = rc__lcm(l, dst->cp > 1 ? 2 * dst->cp : 1);
  l = rc__lcm(l, src->dcp);
  l = rc__lcm(l, dst->dcp);
  return rs_check_map_at(src, dst, m, 2 * l, why, whylen) &&
         rs_check_map_at(src, dst, m, 2 * l + 1, why, whylen);
}
