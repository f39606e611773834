/*
 * kvxfer.c: the KV-reshard executor. Moves each request's KV from the
 * prefill ranks to the decode ranks as the plan's kv_reshard says, and
 * verifies on the decode side every byte each decode rank owns.
 *
 * Input: the plan (pools, ranks with their coordinates and shards,
 * kv_reshard), this rank's world communicator and KV pool. Output: KV in
 * the decode ranks' pools, statistics, or a verification error naming
 * (request, layer, kv head, token, byte).
 * Invariants: every rank walks requests in order and, within a request,
 * the transfer list in plan order (sorted by dst); a rank acts only on the
 * transfers whose src or dst it is. One total order of sends and receives
 * on every rank makes the schedule deadlock-free: the earliest unfinished
 * transfer always has both ends ready. Ownership used to verify is
 * recomputed from the decode rank's own shard and coordinates, not taken
 * from the map, so a wrong map is caught, not trusted.
 *
 * A request's KV region in a pool is [layer][kv head][token][bytes of one
 * head and token] over the rank's shard and all T tokens (cells the rank
 * does not own stay zero). The fill pattern of cell (k, l, h, p) is a
 * splitmix64 stream seeded by those four numbers, so any cell can be
 * checked on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "kv.h"

/* Layers per message: a transfer goes out in groups of this many layers so
 * that filling and sending overlap. */
#define RT_KV_LAYER_GROUP 4

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t cell_seed(int64_t k, int64_t l, int64_t h, int64_t p) {
  return mix64((uint64_t)k * 0xD1B54A32D192ED03ull ^
               mix64(((uint64_t)l << 32) ^ (uint64_t)h) ^
               mix64((uint64_t)p + 0x632BE59BD9B4E019ull));
}

static void fill_cell(unsigned char *dst, size_t n, uint64_t seed) {
  size_t e = 0;
  for (; e + 8 <= n; e += 8) {
    uint64_t v = mix64(seed + e / 8);
    memcpy(dst + e, &v, 8);
  }
  if (e < n) {
    uint64_t v = mix64(seed + e / 8);
    memcpy(dst + e, &v, n - e);
  }
}

void rt_kv_assign(const PlanPool *P, int64_t k, int64_t *inst, int64_t *dp) {
  *inst = k % P->replicas;
  *dp = (k / P->replicas) % P->size[CO_DP];
}

static int pool_index(const Plan *pl, const char *name) {
  for (size_t i = 0; i < pl->npools; i++)
    if (strcmp(pl->pools[i].name, name) == 0) return (int)i;
  return -1;
}

/* Global rank of relative rank rel (t + tp * (c + cp * s)) of the serving
 * replica (instance inst, attention-dp rank dp) of pool pi, found from the
 * ranks' coordinates: independent of the rank order. -1 when none. */
static int64_t global_of(const Plan *pl, int pi, int64_t inst, int64_t dp,
                         int64_t rel) {
  const PlanPool *P = &pl->pools[pi];
  int64_t tp = P->size[CO_TP], cp = P->size[CO_CP];
  int64_t t = rel % tp, c = (rel / tp) % cp, s = rel / (tp * cp);
  for (int64_t r = P->first_rank; r < P->first_rank + P->nranks; r++) {
    const PlanRank *R = &pl->ranks[r];
    if (R->instance == inst && R->coords[CO_DP] == dp && R->coords[CO_TP] == t &&
        R->coords[CO_CP] == c && R->coords[CO_PP] == s)
      return R->rank;
  }
  return -1;
}

static bool xfer_has(const PlanTransfer *x, int64_t p) {
  if (x->stride > 1 && p % x->stride != x->offset) return false;
  if (x->tokens == PT_RANGES) {
    for (size_t i = 0; i < x->nranges; i++)
      if (p >= x->ranges[i][0] && p < x->ranges[i][1]) return true;
    return false;
  }
  return true;
}

/* Whether rank R of pool P owns token p of a T-token request: decode
 * context parallelism interleaves tokens (p mod dcp == tp index mod dcp);
 * context parallelism cuts 2cp zigzag chunks, cp rank c holding chunks c
 * and 2cp-1-c (docs/reshard.md). */
static bool owns_token(const PlanPool *P, const PlanRank *R, int64_t T,
                       int64_t p) {
  int64_t dcp = P->size[CO_DCP], cp = P->size[CO_CP];
  if (dcp > 1 && p % dcp != R->coords[CO_TP] % dcp) return false;
  if (cp > 1) {
    int64_t n = 2 * cp, j = ((p + 1) * n - 1) / T, c = R->coords[CO_CP];
    if (j != c && j != n - 1 - c) return false;
  }
  return true;
}

typedef struct {
  int64_t l0, l1, h0, h1, T, bph;
} Region;

static size_t cell_off(const Region *g, int64_t l, int64_t h, int64_t p) {
  return (size_t)((((l - g->l0) * (g->h1 - g->h0) + (h - g->h0)) * g->T + p) *
                  g->bph);
}

static RtResult region_of(const PlanRank *R, int64_t T, int64_t bph,
                          const RtKvPool *pool, Region *g) {
  g->l0 = R->shard[SH_LAYERS][0];
  g->l1 = R->shard[SH_LAYERS][1];
  g->h0 = R->shard[SH_KV_HEADS][0];
  g->h1 = R->shard[SH_KV_HEADS][1];
  g->T = T;
  g->bph = bph;
  CkState st = {true};
  int64_t need = ckm(&st, ckm(&st, ckm(&st, g->l1 - g->l0, g->h1 - g->h0), T), bph);
  if (!st.ok || need > pool->kv_bytes)
    return rt_err(RT_ERR_INVALID,
                  "rank %d: one request's KV (%lld layers x %lld kv heads x %lld "
                  "tokens x %lld bytes = %lld bytes) does not fit its allocated KV "
                  "pool of %lld bytes; lower --input-tokens or raise "
                  "--host-memory-scale", R->rank, (long long)(g->l1 - g->l0),
                  (long long)(g->h1 - g->h0), (long long)T, (long long)bph,
                  (long long)need, (long long)pool->kv_bytes);
  return RT_OK;
}

static int64_t xfer_tokens(const PlanTransfer *x, int64_t T) {
  int64_t n = 0;
  for (int64_t p = 0; p < T; p++) n += xfer_has(x, p);
  return n;
}

/* Bytes of one head, one layer, one token of a transfer. */
static RtResult xfer_bph(const PlanTransfer *x, int64_t *bph) {
  int64_t cells = (x->layers[1] - x->layers[0]) * (x->kv_heads[1] - x->kv_heads[0]);
  if (cells <= 0 || x->bytes_per_token <= 0 || x->bytes_per_token % cells)
    return rt_err(RT_ERR_INVALID, "kv_reshard transfer %lld -> %lld: "
                  "bytes_per_token %lld is not a multiple of layers x kv heads "
                  "(%lld)", (long long)x->src, (long long)x->dst,
                  (long long)x->bytes_per_token, (long long)cells);
  *bph = x->bytes_per_token / cells;
  return RT_OK;
}

static bool in_region(const Region *g, const PlanTransfer *x) {
  return x->layers[0] >= g->l0 && x->layers[1] <= g->l1 &&
         x->kv_heads[0] >= g->h0 && x->kv_heads[1] <= g->h1;
}

void rt_kv_stats_free(RtKvStats *st) {
  free(st->req_bytes);
  free(st->req_secs);
  memset(st, 0, sizeof *st);
}

RtResult rt_kv_run(const RtBackend *be, void *state, const Plan *pl,
                   const RtPlan *rp, int rank, RtComm *world, int world_group,
                   RtKvPool *pool, const RtKvOpts *o, RtKvStats *st) {
  memset(st, 0, sizeof *st);
  st->nreq = o->requests;
  st->req_bytes = rp_calloc((size_t)o->requests + 1, sizeof *st->req_bytes);
  st->req_secs = rp_calloc((size_t)o->requests + 1, sizeof *st->req_secs);
  if (pl->nreshard == 0 || o->requests <= 0) return RT_OK;
  const PlanRank *me = &pl->ranks[rank];
  const PlanPool *MP = &pl->pools[me->pool];
  const RtGroup *wg = &rp->groups[world_group];
  int64_t T = o->input_tokens;
  bool host = strcmp(be->name, "host") == 0;
  /* The largest transfer sizes the one wire buffer. */
  int64_t maxb = 0, bph = 0;
  for (size_t i = 0; i < pl->nreshard; i++)
    for (size_t j = 0; j < pl->reshard[i].ntransfers; j++) {
      const PlanTransfer *x = &pl->reshard[i].transfers[j];
      RTCHECK(xfer_bph(x, &bph));
      int64_t b = (x->layers[1] - x->layers[0]) *
                  (x->kv_heads[1] - x->kv_heads[0]) * xfer_tokens(x, T) * bph;
      if (b > maxb) maxb = b;
    }
  /* On the host backend a request's region is the start of the KV pool;
   * on a device backend the pool is device memory, so the region is a host
   * buffer of one request's shard (made at the first request this rank
   * serves) and transfers go through a device staging buffer. */
  unsigned char *buf = rp_malloc((size_t)maxb + 1);
  /* Destination of the reference memcpy: pre-faulted (memset), as the
   * rings' pages are, and written round-robin through as many bytes as
   * one ring holds (or one message, when larger), as a ring is; a
   * destination that stayed in the core's cache would measure the cache,
   * not a copy between processes. */
  size_t ref_bytes = (size_t)maxb > RT_HOST_RING_BYTES ? (size_t)maxb
                                                        : RT_HOST_RING_BYTES;
  size_t ref_off = 0;
  unsigned char *ref = rp_malloc(ref_bytes + 1);
  memset(ref, 0, ref_bytes + 1);
  memset(buf, 0, (size_t)maxb + 1);
  void *dev = host ? NULL : be->mem_alloc(state, (size_t)maxb + 1);
  unsigned char *region = host ? pool->kv : NULL;
  RtResult r = RT_OK;
  if (!host && !dev) {
    r = rt_err(RT_ERR_SYS, "cannot allocate a %lld-byte transfer buffer",
               (long long)maxb);
    goto done;
  }
  for (int64_t k = 0; k < o->requests && r == RT_OK; k++) {
    const PlanReshard *pair = &pl->reshard[k % (int64_t)pl->nreshard];
    int pi = pool_index(pl, pair->prefill), di = pool_index(pl, pair->decode);
    if (pi < 0 || di < 0) {
      r = rt_err(RT_ERR_INVALID, "kv_reshard names pools `%s` and `%s` that "
                 "are not in the plan", pair->prefill, pair->decode);
      break;
    }
    const PlanPool *P = &pl->pools[pi], *D = &pl->pools[di];
    int64_t pinst, pdp, dinst, ddp;
    rt_kv_assign(P, k, &pinst, &pdp);
    rt_kv_assign(D, k, &dinst, &ddp);
    bool is_src = me->pool == pi && me->instance == pinst && me->coords[CO_DP] == pdp;
    bool is_dst = me->pool == di && me->instance == dinst && me->coords[CO_DP] == ddp;
    if (!is_src && !is_dst) continue;
    if (pair->ntransfers == 0) continue;
    RTCHECKGOTO(xfer_bph(&pair->transfers[0], &bph), r, done);
    Region g;
    RTCHECKGOTO(region_of(me, T, bph, pool, &g), r, done);
    size_t rbytes = cell_off(&g, g.l1, g.h0, 0);
    if (!region) region = rp_malloc(rbytes + 1);
    memset(region, 0, rbytes);
    /* Prefill ranks fill a layer when the first transfer needs it, one
     * layer group at a time, so that sending group i overlaps filling
     * group i+1 (the receiver drains group i meanwhile). */
    bool *filled = rp_calloc((size_t)(g.l1 - g.l0) + 1, sizeof *filled);
    double t_req = rt_now();
    for (size_t j = 0; j < pair->ntransfers && r == RT_OK; j++) {
      const PlanTransfer *x = &pair->transfers[j];
      int64_t sg = global_of(pl, pi, pinst, pdp, x->src);
      int64_t dg = global_of(pl, di, dinst, ddp, x->dst);
      if (sg < 0 || dg < 0) {
        r = rt_err(RT_ERR_INVALID, "kv_reshard transfer %lld -> %lld names a "
                   "rank the pools do not have", (long long)x->src,
                   (long long)x->dst);
        break;
      }
      if (sg != rank && dg != rank) continue;
      if (!in_region(&g, x)) {
        r = rt_err(RT_ERR_CHECK, "kv_reshard transfer %lld -> %lld (layers "
                   "[%lld, %lld), kv heads [%lld, %lld)) is outside rank %d's "
                   "shard", (long long)x->src, (long long)x->dst,
                   (long long)x->layers[0], (long long)x->layers[1],
                   (long long)x->kv_heads[0], (long long)x->kv_heads[1], rank);
        break;
      }
      int64_t ntok = xfer_tokens(x, T);
      for (int64_t lb = x->layers[0]; lb < x->layers[1] && r == RT_OK;
           lb += RT_KV_LAYER_GROUP) {
        int64_t le = lb + RT_KV_LAYER_GROUP < x->layers[1] ? lb + RT_KV_LAYER_GROUP
                                                          : x->layers[1];
        int64_t nb = 0;
        if (sg == rank) {
          for (int64_t l = lb; l < le; l++) {
            if (filled[l - g.l0]) continue;
            for (int64_t h = g.h0; h < g.h1; h++)
              for (int64_t p = 0; p < T; p++)
                if (owns_token(MP, me, T, p))
                  fill_cell(region + cell_off(&g, l, h, p), (size_t)bph,
                            cell_seed(k, l, h, p));
            filled[l - g.l0] = true;
          }
          for (int64_t l = lb; l < le; l++)
            for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
              for (int64_t p = 0; p < T; p++) {
                if (!xfer_has(x, p)) continue;
                memcpy(buf + nb, region + cell_off(&g, l, h, p), (size_t)bph);
                if (o->corrupt[0] == k && o->corrupt[1] == l &&
                    o->corrupt[2] == h && o->corrupt[3] == p &&
                    o->corrupt[4] >= 0 && o->corrupt[4] < bph)
                  buf[nb + o->corrupt[4]] ^= 0xA5;
                nb += bph;
              }
          if (!host) r = be->from_host(state, dev, buf, (size_t)nb);
          /* The benchmark's reference: a plain memcpy of the same message
           * between two pre-faulted host buffers, timed just before the
           * send, so that both see the same load on the machine. */
          if (ref_off + (size_t)nb > ref_bytes) ref_off = 0;
          double tm = rt_now();
          memcpy(ref + ref_off, buf, (size_t)nb);
          st->memcpy_secs += rt_now() - tm;
          ref_off += (size_t)nb;
          st->memcpy_bytes += nb;
          double t0 = rt_now();
          if (r == RT_OK)
            r = be->send(world, host ? (void *)buf : dev, (size_t)nb,
                         rt_group_index(wg, (int)dg));
          double dt = rt_now() - t0;
          if (pl->ranks[sg].node == pl->ranks[dg].node) {
            st->bytes_same_node += nb;
            st->secs_same_node += dt;
          } else {
            st->bytes_cross_node += nb;
            st->secs_cross_node += dt;
          }
        } else {
          nb = (le - lb) * (x->kv_heads[1] - x->kv_heads[0]) * ntok * bph;
          r = be->recv(world, host ? (void *)buf : dev, (size_t)nb,
                       rt_group_index(wg, (int)sg));
          if (r == RT_OK && !host) r = be->to_host(state, buf, dev, (size_t)nb);
          if (r != RT_OK) break;
          int64_t off = 0;
          for (int64_t l = lb; l < le; l++)
            for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
              for (int64_t p = 0; p < T; p++) {
                if (!xfer_has(x, p)) continue;
                memcpy(region + cell_off(&g, l, h, p), buf + off, (size_t)bph);
                off += bph;
              }
          st->bytes_recv += nb;
          st->req_bytes[k] += nb;
        }
      }
    }
    free(filled);
    if (r != RT_OK) break;
    if (is_dst) {
      st->req_secs[k] = rt_now() - t_req;
      /* Verify every cell this rank owns. */
      unsigned char *want = rp_malloc((size_t)bph);
      for (int64_t l = g.l0; l < g.l1 && r == RT_OK; l++)
        for (int64_t h = g.h0; h < g.h1 && r == RT_OK; h++)
          for (int64_t p = 0; p < T && r == RT_OK; p++) {
            if (!owns_token(MP, me, T, p)) continue;
            fill_cell(want, (size_t)bph, cell_seed(k, l, h, p));
            const unsigned char *got = region + cell_off(&g, l, h, p);
            if (memcmp(want, got, (size_t)bph) == 0) {
              st->cells_verified++;
              continue;
            }
            int64_t e = 0;
            while (want[e] == got[e]) e++;
            r = rt_err(RT_ERR_CHECK, "kv verification failed on rank %d: request "
                       "%lld, layer %lld, kv head %lld, token %lld, byte %lld: "
                       "expected 0x%02x, got 0x%02x", rank, (long long)k,
                       (long long)l, (long long)h, (long long)p, (long long)e,
                       want[e], got[e]);
          }
      free(want);
    }
  }
  if (r == RT_OK && st->memcpy_secs > 0)
    st->memcpy_gbs = (double)st->memcpy_bytes / st->memcpy_secs / 1e9;
  /* Read the reference copy back so that it cannot be optimised away. */
  volatile unsigned char sink = ref[ref_bytes / 2];
  (void)sink;
done:
  if (dev) be->mem_free(state, dev);
  if (!host) free(region);
  free(ref);
  free(buf);
  return r;
}
