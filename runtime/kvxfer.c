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
 * layer groups in order and in each the transfer list in plan order
 * (sorted by dst); a rank acts only on the transfers whose src or dst it
 * is. One total order of sends and receives on every rank makes the
 * schedule deadlock-free: the earliest unfinished message always has both
 * ends ready. Ownership used to verify is
 * recomputed from the decode rank's own shard and coordinates, not taken
 * from the map, so a wrong map is caught, not trusted.
 *
 * A request's KV region in a pool is [layer][kv head][token][bytes of one
 * head and token] over the rank's shard and all T tokens (cells the rank
 * does not own stay zero). The fill pattern of cell (k, l, h, p) starts
 * from a splitmix64 hash of those four numbers and steps by an odd
 * constant per 8-byte element (fill_cell), so any cell can be checked on
 * its own.
 */
#include <math.h>
#include <stdio.h>
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

/* Word e of a cell seeded `seed`: the cell's own value plus e times an odd
 * constant, so that every word of a cell differs from its neighbours and
 * from every word of any other cell (seeds are mixed from all four cell
 * numbers). One add per 8 bytes: filling and checking run at memory speed,
 * not at the speed of a hash, so they do not crowd the transfer out of the
 * cores (docs/benchmarks.md). */
#define RT_KV_STEP 0x9E3779B97F4A7C15ull

static void fill_cell(unsigned char *dst, size_t n, uint64_t seed) {
  uint64_t v = mix64(seed);
  size_t e = 0;
  for (; e + 8 <= n; e += 8, v += RT_KV_STEP) memcpy(dst + e, &v, 8);
  if (e < n) memcpy(dst + e, &v, n - e);
}

/* Whether the n bytes at got are the cell seeded `seed`; else *at is the
 * first byte that differs and *want the byte the pattern has there. */
static bool cell_ok(const unsigned char *got, size_t n, uint64_t seed,
                    size_t *at, unsigned char *want) {
  uint64_t v = mix64(seed), w;
  size_t e = 0;
  for (; e + 8 <= n; e += 8, v += RT_KV_STEP) {
    memcpy(&w, got + e, 8);
    if (w != v) break;
  }
  if (e >= n) return true;
  unsigned char ref[8];
  memcpy(ref, &v, 8);
  for (size_t i = 0; e + i < n; i++)
    if (got[e + i] != ref[i]) {
      *at = e + i;
      *want = ref[i];
      return false;
    }
  return true;
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

/* Request k's roles: which kv_reshard pair moves it (requests take the
 * pairs in turn), the prefill and decode pools, the serving instance and
 * attention-dp rank on each side (rt_kv_assign's policy), and whether rank
 * me sends, receives or sits this request out. */
typedef struct {
  const PlanReshard *pair;
  int pi, di;
  int64_t pinst, pdp, dinst, ddp;
  bool is_src, is_dst;
} ReqRole;

static RtResult req_role(const Plan *pl, const PlanRank *me, int64_t k, ReqRole *o) {
  o->pair = &pl->reshard[k % (int64_t)pl->nreshard];
  o->pi = pool_index(pl, o->pair->prefill);
  o->di = pool_index(pl, o->pair->decode);
  if (o->pi < 0 || o->di < 0)
    return rt_err(RT_ERR_INVALID, "kv_reshard names pools `%s` and `%s` that "
                  "are not in the plan", o->pair->prefill, o->pair->decode);
  rt_kv_assign(&pl->pools[o->pi], k, &o->pinst, &o->pdp);
  rt_kv_assign(&pl->pools[o->di], k, &o->dinst, &o->ddp);
  o->is_src = me->pool == o->pi && me->instance == o->pinst && me->coords[CO_DP] == o->pdp;
  o->is_dst = me->pool == o->di && me->instance == o->dinst && me->coords[CO_DP] == o->ddp;
  return RT_OK;
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

/* Maximal runs of consecutive tokens of a transfer in [0, T): its pieces
 * per (layer, kv head) in the grouped path. */
static int64_t xfer_runs(const PlanTransfer *x, int64_t T) {
  int64_t n = 0;
  bool in = false;
  for (int64_t p = 0; p < T; p++) {
    bool has = xfer_has(x, p);
    n += has && !in;
    in = has;
  }
  return n;
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

/* Every transfer of a pair moves cells of one size, the model's KV bytes
 * per layer, kv head and token (docs/reshard.md: a transfer's
 * bytes_per_token is layers x heads x kv_bytes_per_head_token, one figure
 * for both pools, E0408), and that size lays out every rank's region and
 * every message. A transfer whose bytes_per_token gives another cell size
 * has no meaning, so the plan is refused naming it, before any buffer is
 * sized from it. */
static RtResult check_cell_sizes(const Plan *pl) {
  for (size_t i = 0; i < pl->nreshard; i++) {
    const PlanReshard *pr = &pl->reshard[i];
    int64_t first = 0, bph = 0;
    for (size_t j = 0; j < pr->ntransfers; j++) {
      const PlanTransfer *x = &pr->transfers[j];
      if (xfer_bph(x, &bph) != RT_OK)
        return rt_err(RT_ERR_INVALID, "kv_reshard[%zu].transfers[%zu]: %s", i,
                      j, rt_errmsg());
      if (j == 0) first = bph;
      if (bph != first)
        return rt_err(RT_ERR_INVALID, "kv_reshard[%zu].transfers[%zu] (%lld "
                      "-> %lld): bytes_per_token %lld over %lld layers x %lld "
                      "kv heads is %lld bytes per layer, kv head and token, "
                      "but transfers[0] of the pair moves %lld: one pair's "
                      "transfers move cells of one size", i, j,
                      (long long)x->src, (long long)x->dst,
                      (long long)x->bytes_per_token,
                      (long long)(x->layers[1] - x->layers[0]),
                      (long long)(x->kv_heads[1] - x->kv_heads[0]),
                      (long long)bph, (long long)first);
    }
  }
  return RT_OK;
}

/* Token ranges lie in [0, RT_KV_MAX_TOKENS], the bound of --input-tokens
 * (kv.h), so that the request length they imply is one rankrun can run. */
static RtResult check_token_ranges(const Plan *pl) {
  for (size_t i = 0; i < pl->nreshard; i++)
    for (size_t j = 0; j < pl->reshard[i].ntransfers; j++) {
      const PlanTransfer *x = &pl->reshard[i].transfers[j];
      for (size_t k = 0; x->tokens == PT_RANGES && k < x->nranges; k++)
        if (x->ranges[k][0] < 0 || x->ranges[k][1] > RT_KV_MAX_TOKENS ||
            x->ranges[k][0] >= x->ranges[k][1])
          return rt_err(RT_ERR_INVALID, "kv_reshard[%zu].transfers[%zu] (%lld "
                        "-> %lld): token range [%lld, %lld) is outside [0, %d] "
                        "or empty: rankrun runs requests of at most %d tokens",
                        i, j, (long long)x->src, (long long)x->dst,
                        (long long)x->ranges[k][0], (long long)x->ranges[k][1],
                        RT_KV_MAX_TOKENS, RT_KV_MAX_TOKENS);
    }
  return RT_OK;
}

RtResult rt_kv_plan_check(const Plan *pl, int64_t *ranges_T) {
  RTCHECK(check_cell_sizes(pl));
  RTCHECK(check_token_ranges(pl));
  *ranges_T = -1;
  for (size_t i = 0; i < pl->nreshard; i++)
    for (size_t j = 0; j < pl->reshard[i].ntransfers; j++) {
      const PlanTransfer *x = &pl->reshard[i].transfers[j];
      for (size_t k = 0; x->tokens == PT_RANGES && k < x->nranges; k++)
        if (x->ranges[k][1] > *ranges_T) *ranges_T = x->ranges[k][1];
    }
  return RT_OK;
}

static bool in_region(const Region *g, const PlanTransfer *x) {
  return x->layers[0] >= g->l0 && x->layers[1] <= g->l1 &&
         x->kv_heads[0] >= g->h0 && x->kv_heads[1] <= g->h1;
}

/* Global ranks of transfer x's ends for request role rr, or an error when
 * the map names a rank the pools do not have. */
static RtResult xfer_ends(const Plan *pl, const ReqRole *rr,
                          const PlanTransfer *x, int64_t *sg, int64_t *dg) {
  *sg = global_of(pl, rr->pi, rr->pinst, rr->pdp, x->src);
  *dg = global_of(pl, rr->di, rr->dinst, rr->ddp, x->dst);
  if (*sg < 0 || *dg < 0)
    return rt_err(RT_ERR_INVALID, "kv_reshard transfer %lld -> %lld names a "
                  "rank the pools do not have", (long long)x->src,
                  (long long)x->dst);
  return RT_OK;
}

/* Transfer x must lie inside rank `rank`'s region g: the map is checked,
 * not trusted. */
static RtResult check_in_region(const Region *g, const PlanTransfer *x,
                                int rank) {
  if (in_region(g, x)) return RT_OK;
  return rt_err(RT_ERR_CHECK, "kv_reshard transfer %lld -> %lld (layers "
                "[%lld, %lld), kv heads [%lld, %lld)) is outside rank %d's "
                "shard", (long long)x->src, (long long)x->dst,
                (long long)x->layers[0], (long long)x->layers[1],
                (long long)x->kv_heads[0], (long long)x->kv_heads[1], rank);
}

/* A sender's nb bytes of request k sent in secs over link class lc
 * (0 same node, 1 cross node). */
static void count_sent(RtKvStats *st, int lc, int64_t k, int64_t nb,
                       double secs) {
  if (lc == 0) {
    st->bytes_same_node += nb;
    st->secs_same_node += secs;
  } else {
    st->bytes_cross_node += nb;
    st->secs_cross_node += secs;
  }
  st->req_link_bytes[lc][k] += nb;
  st->req_link_secs[lc][k] += secs;
}

/* Checks every cell rank `rank` (PlanRank me of pool MP) owns in its
 * host copy of request k's region against the fill pattern; the first
 * mismatch is an RT_ERR_CHECK naming (request, layer, kv head, token,
 * byte) with the expected and the found byte. */
static RtResult verify_region(const PlanPool *MP, const PlanRank *me, int rank,
                              int64_t k, const Region *g,
                              const unsigned char *region, RtKvStats *st) {
  int64_t T = g->T, bph = g->bph;
  for (int64_t l = g->l0; l < g->l1; l++)
    for (int64_t h = g->h0; h < g->h1; h++)
      for (int64_t p = 0; p < T; p++) {
        if (!owns_token(MP, me, T, p)) continue;
        const unsigned char *got = region + cell_off(g, l, h, p);
        size_t e = 0;
        unsigned char want = 0;
        if (cell_ok(got, (size_t)bph, cell_seed(k, l, h, p), &e, &want)) {
          st->cells_verified++;
          continue;
        }
        return rt_err(RT_ERR_CHECK, "kv verification failed on rank %d: "
                      "request %lld, layer %lld, kv head %lld, token %lld, byte "
                      "%zu: expected 0x%02x, got 0x%02x", rank, (long long)k,
                      (long long)l, (long long)h, (long long)p, e, want, got[e]);
      }
  return RT_OK;
}

void rt_kv_stats_free(RtKvStats *st) {
  free(st->req_bytes);
  free(st->req_secs);
  for (int c = 0; c < 2; c++) {
    free(st->req_link_bytes[c]);
    free(st->req_link_secs[c]);
  }
  memset(st, 0, sizeof *st);
}

/* Geometry of rank R's region for a T-token request (the peer's side of a
 * transfer: no pool to check it against). */
static void geom_of(const PlanRank *R, int64_t T, int64_t bph, Region *g) {
  g->l0 = R->shard[SH_LAYERS][0];
  g->l1 = R->shard[SH_LAYERS][1];
  g->h0 = R->shard[SH_KV_HEADS][0];
  g->h1 = R->shard[SH_KV_HEADS][1];
  g->T = T;
  g->bph = bph;
}

/* The operations of one (request, layer group, link class) bucket on this
 * rank, with where each one ends in the sender's and the receiver's
 * region, so that a piece contiguous with the previous one in both joins
 * it instead of becoming another message, and the chunk each belongs to.
 *
 * Chunks: a bucket can hold more pieces than one p2p_post takes
 * (RT_P2P_MAX), so it is posted in chunks, and every rank must cut at the
 * same places: a group on one rank whose matching operations sit in two
 * groups on a peer, one of them also waiting on a third rank, can
 * deadlock (NCCL runs a group's operations together and promises no
 * progress across groups). So a piece's chunk is its index among all the
 * bucket's pieces, every rank's included, over the chunk size (RT_P2P_MAX;
 * RANKRUN_KV_CHUNK sets a smaller one, for tests): the same on both ends
 * of the piece. Pieces join only within a chunk, so both ends also join
 * the same pieces, and a rank has at most a chunk's worth of operations in
 * one group. An operation's tag packs its chunk (high 24 bits) and its
 * first piece's index (low 40 bits), so a backend that checks tags (host)
 * also catches two ranks cutting the same bucket differently. */
typedef struct {
  RtP2p *ops;
  int64_t *src_end, *dst_end, *chunks;
  int n, cap;
  int64_t chunk; /* pieces per chunk */
} OpList;

static int64_t op_tag(int64_t chunk, int64_t piece) {
  return (int64_t)((((uint64_t)chunk << 40) | ((uint64_t)piece & ((UINT64_C(1) << 40) - 1))) &
                   INT64_MAX);
}

static void ops_add(OpList *L, int64_t piece, bool send, int peer,
                    unsigned char *base, int64_t soff, int64_t doff,
                    int64_t bytes) {
  int64_t chunk = piece / L->chunk;
  if (L->n > 0) {
    RtP2p *q = &L->ops[L->n - 1];
    if (L->chunks[L->n - 1] == chunk && q->send == send && q->peer == peer &&
        L->src_end[L->n - 1] == soff && L->dst_end[L->n - 1] == doff) {
      q->bytes += (size_t)bytes;
      L->src_end[L->n - 1] += bytes;
      L->dst_end[L->n - 1] += bytes;
      return;
    }
  }
  if (L->n == L->cap) {
    L->cap = L->cap ? 2 * L->cap : 64;
    L->ops = rp_realloc(L->ops, (size_t)L->cap * sizeof *L->ops);
    L->src_end = rp_realloc(L->src_end, (size_t)L->cap * sizeof *L->src_end);
    L->dst_end = rp_realloc(L->dst_end, (size_t)L->cap * sizeof *L->dst_end);
    L->chunks = rp_realloc(L->chunks, (size_t)L->cap * sizeof *L->chunks);
  }
  L->chunks[L->n] = chunk;
  L->ops[L->n] = (RtP2p){send, peer, base + (send ? soff : doff), (size_t)bytes,
                         op_tag(chunk, piece)};
  L->src_end[L->n] = soff + bytes;
  L->dst_end[L->n] = doff + bytes;
  L->n++;
}

/* State of one request on this rank in the grouped path. */
typedef struct {
  const RtBackend *be;
  void *state;
  const PlanPool *MP;
  const PlanRank *me;
  const RtKvOpts *o;
  int64_t k;
  Region g;
  unsigned char *host;  /* host copy of the region: fill and verify */
  unsigned char *kv;    /* the region in the pool (backend memory) */
  bool *filled;         /* per layer of the region */
} GReq;

/* Fills the layers of [lb, le) this rank holds and has not filled yet in
 * the host copy, then copies them into the pool in one from_host call
 * (they are one contiguous span: layers are filled in increasing order).
 * The test-only corruption flips its byte here, on the sending side. */
static RtResult fill_layers(GReq *q, int64_t lb, int64_t le) {
  const Region *g = &q->g;
  int64_t a = lb > g->l0 ? lb : g->l0, b = le < g->l1 ? le : g->l1, first = -1;
  for (int64_t l = a; l < b; l++) {
    if (q->filled[l - g->l0]) continue;
    if (first < 0) first = l;
    for (int64_t h = g->h0; h < g->h1; h++)
      for (int64_t p = 0; p < g->T; p++) {
        if (!owns_token(q->MP, q->me, g->T, p)) continue;
        unsigned char *c = q->host + cell_off(g, l, h, p);
        fill_cell(c, (size_t)g->bph, cell_seed(q->k, l, h, p));
        const int64_t *x = q->o->corrupt;
        if (x[0] == q->k && x[1] == l && x[2] == h && x[3] == p && x[4] >= 0 &&
            x[4] < g->bph)
          c[x[4]] ^= 0xA5;
      }
    q->filled[l - g->l0] = true;
  }
  if (first < 0) return RT_OK;
  size_t off = cell_off(g, first, g->h0, 0), end = cell_off(g, b, g->h0, 0);
  return q->be->from_host(q->state, q->kv + off, q->host + off, end - off);
}

/* The grouped path (see rt_kv_run): requests in order; within a request,
 * layer groups of RT_KV_LAYER_GROUP layers in order; within a layer
 * group, the same-node operations, then the cross-node ones, each posted
 * as one group (p2p_post) of this rank's sends or receives with every
 * peer, in plan transfer order, straight from and into the KV pool. Every
 * rank's operation list is a restriction of that one total order, so the
 * earliest unfinished bucket always has all its operations posted and
 * the schedule cannot deadlock. A prefill rank fills layer group i + 1
 * (host pattern, then one copy into the pool) while group i is in flight.
 * A decode rank copies its region back to the host once the request's
 * groups have completed and verifies it there. */
static RtResult kv_run_grouped(const RtBackend *be, void *state, const Plan *pl,
                               int rank, RtComm *world,
                               int world_group, RtKvPool *pool,
                               const RtKvOpts *o, RtKvStats *st) {
  st->grouped = true;
  const PlanRank *me = &pl->ranks[rank];
  const PlanGroup *wg = &pl->groups[world_group];
  int64_t T = o->input_tokens;
  RtResult r = RT_OK;
  OpList L = {0};
  L.chunk = RT_P2P_MAX;
  const char *ce = getenv("RANKRUN_KV_CHUNK");
  if (ce) {
    char *end = NULL;
    long v = strtol(ce, &end, 10);
    if (!end || *end || end == ce || v < 1 || v > RT_P2P_MAX)
      return rt_err(RT_ERR_INVALID, "RANKRUN_KV_CHUNK=`%s`: expected 1 to %d",
                    ce, RT_P2P_MAX);
    L.chunk = v;
  }
  int64_t *runs = NULL; /* per transfer of runs_of's pair: token runs */
  size_t runs_cap = 0;
  const PlanReshard *runs_of = NULL;
  unsigned char *host = NULL, *scratch = NULL;
  size_t host_bytes = 0, scratch_bytes = 0, scratch_off = 0;
  for (int64_t k = 0; k < o->requests && r == RT_OK; k++) {
    ReqRole rr;
    if ((r = req_role(pl, me, k, &rr)) != RT_OK) break;
    const PlanReshard *pair = rr.pair;
    bool is_src = rr.is_src, is_dst = rr.is_dst;
    if ((!is_src && !is_dst) || pair->ntransfers == 0) continue;
    GReq q = {be, state, &pl->pools[me->pool], me, o, k, {0}, NULL,
              pool->kv, NULL};
    int64_t bph = 0;
    RTCHECKGOTO(xfer_bph(&pair->transfers[0], &bph), r, done);
    RTCHECKGOTO(region_of(me, T, bph, pool, &q.g), r, done);
    size_t rbytes = cell_off(&q.g, q.g.l1, q.g.h0, 0);
    if (rbytes + 1 > host_bytes) {
      free(host);
      host_bytes = rbytes + 1;
      host = rp_malloc(host_bytes);
    }
    q.host = host;
    memset(host, 0, rbytes);
    /* Zero the pool's region, so that a cell nobody sent reads as zeros,
     * not as the previous request's bytes. */
    RTCHECKGOTO(be->from_host(state, q.kv, host, rbytes), r, done);
    q.filled = rp_calloc((size_t)(q.g.l1 - q.g.l0) + 1, sizeof *q.filled);
    if (pair != runs_of) { /* T is the same for every request */
      if (pair->ntransfers > runs_cap) {
        runs_cap = pair->ntransfers;
        runs = rp_realloc(runs, runs_cap * sizeof *runs);
      }
      for (size_t j = 0; j < pair->ntransfers; j++)
        runs[j] = xfer_runs(&pair->transfers[j], T);
      runs_of = pair;
    }
    int64_t lmax = 0;
    for (size_t j = 0; j < pair->ntransfers; j++)
      if (pair->transfers[j].layers[1] > lmax) lmax = pair->transfers[j].layers[1];
    double t_req = rt_now();
    if (is_src) r = fill_layers(&q, 0, RT_KV_LAYER_GROUP);
    for (int64_t lb = 0; lb < lmax && r == RT_OK; lb += RT_KV_LAYER_GROUP) {
      int64_t le = lb + RT_KV_LAYER_GROUP < lmax ? lb + RT_KV_LAYER_GROUP : lmax;
      bool next_filled = false;
      for (int lc = 0; lc < 2 && r == RT_OK; lc++) {
        L.n = 0;
        int64_t piece = 0; /* index among the bucket's pieces, all ranks' */
        for (size_t j = 0; j < pair->ntransfers && r == RT_OK; j++) {
          const PlanTransfer *x = &pair->transfers[j];
          int64_t a = x->layers[0] > lb ? x->layers[0] : lb;
          int64_t b = x->layers[1] < le ? x->layers[1] : le;
          if (a >= b) continue;
          int64_t sg, dg;
          if ((r = xfer_ends(pl, &rr, x, &sg, &dg)) != RT_OK) break;
          if ((pl->ranks[sg].node == pl->ranks[dg].node ? 0 : 1) != lc) continue;
          if (sg != rank && dg != rank) {
            piece += (b - a) * (x->kv_heads[1] - x->kv_heads[0]) * runs[j];
            continue;
          }
          if ((r = check_in_region(&q.g, x, rank)) != RT_OK) break;
          bool send = sg == rank;
          int64_t other = send ? dg : sg;
          Region og;
          geom_of(&pl->ranks[other], T, bph, &og);
          const Region *gs = send ? &q.g : &og, *gd = send ? &og : &q.g;
          int peer = rt_group_index(wg, (int)other);
          for (int64_t l = a; l < b; l++)
            for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
              for (int64_t p = 0; p < T;) {
                if (!xfer_has(x, p)) {
                  p++;
                  continue;
                }
                int64_t p1 = p + 1;
                while (p1 < T && xfer_has(x, p1)) p1++;
                ops_add(&L, piece++, send, peer, q.kv,
                        (int64_t)cell_off(gs, l, h, p),
                        (int64_t)cell_off(gd, l, h, p), (p1 - p) * bph);
                p = p1;
              }
        }
        for (int i0 = 0, n = 0; i0 < L.n && r == RT_OK; i0 += n) {
          for (n = 1; i0 + n < L.n && L.chunks[i0 + n] == L.chunks[i0]; n++) {
          }
          RTCHECKGOTO(be->p2p_post(world, L.ops + i0, n), r, req_done);
          /* Fill the next layer group while this one is on the wire. */
          if (is_src && !next_filled) {
            next_filled = true;
            RTCHECKGOTO(fill_layers(&q, le, le + RT_KV_LAYER_GROUP), r, req_done);
          }
          double secs = 0;
          RTCHECKGOTO(be->p2p_wait(world, &secs), r, req_done);
          int64_t nb = 0;
          for (int i = i0; i < i0 + n; i++) nb += (int64_t)L.ops[i].bytes;
          if (is_src) {
            count_sent(st, lc, k, nb, secs);
            /* The reference: the same messages copied within this rank's
             * memory (device to device on nccl), right after the transfer,
             * into a buffer of at least a host ring's size written
             * round-robin, as the per-message path's memcpy is: one small
             * destination used over and over would stay in cache and
             * measure the cache. The buffer is written once, untimed,
             * when made, so that no first-touch page fault is timed. */
            for (int i = i0; i < i0 + n; i++) {
              size_t ob = L.ops[i].bytes;
              if (ob > scratch_bytes) {
                if (scratch) be->mem_free(state, scratch);
                scratch_bytes = ob > RT_HOST_RING_BYTES ? ob : RT_HOST_RING_BYTES;
                scratch = be->mem_alloc(state, scratch_bytes);
                if (!scratch) {
                  scratch_bytes = 0;
                  r = rt_err(RT_ERR_SYS, "cannot allocate a %zu-byte buffer for "
                             "the reference copy", ob);
                  goto req_done;
                }
                for (size_t off = 0; off < scratch_bytes; off += ob) {
                  double untimed = 0;
                  size_t m = scratch_bytes - off < ob ? scratch_bytes - off : ob;
                  RTCHECKGOTO(be->copy_ref(state, scratch + off, L.ops[i].buf,
                                           m, &untimed), r, req_done);
                }
                scratch_off = 0;
              }
              if (scratch_off + ob > scratch_bytes) scratch_off = 0;
              double cs = 0;
              RTCHECKGOTO(be->copy_ref(state, scratch + scratch_off,
                                       L.ops[i].buf, ob, &cs), r, req_done);
              scratch_off += ob;
              st->memcpy_secs += cs;
              st->memcpy_bytes += (int64_t)ob;
            }
          } else {
            st->bytes_recv += nb;
            st->req_bytes[k] += nb;
          }
        }
      }
      if (r == RT_OK && is_src && !next_filled)
        r = fill_layers(&q, le, le + RT_KV_LAYER_GROUP);
    }
    if (r == RT_OK && is_dst) {
      st->req_secs[k] = rt_now() - t_req;
      r = be->to_host(state, host, q.kv, rbytes);
      if (r == RT_OK) r = verify_region(q.MP, me, rank, k, &q.g, host, st);
    }
  req_done:
    free(q.filled);
  }
  if (r == RT_OK && st->memcpy_secs > 0)
    st->memcpy_gbs = (double)st->memcpy_bytes / st->memcpy_secs / 1e9;
done:
  if (scratch) be->mem_free(state, scratch);
  free(host);
  free(L.ops);
  free(L.src_end);
  free(L.dst_end);
  free(L.chunks);
  free(runs);
  return r;
}

void rt_kv_stats_encode(const RtKvStats *st, StrBuf *sb) {
  sb_printf(sb, "%lld %lld %lld %.9f %.9f %lld %.9f %d %.9f %.9f %d",
            (long long)st->bytes_recv, (long long)st->bytes_same_node,
            (long long)st->bytes_cross_node, st->secs_same_node,
            st->secs_cross_node, (long long)st->cells_verified,
            st->memcpy_secs, st->grouped ? 1 : 0, st->cpu_run_secs,
            st->cpu_wait_secs, st->nreq);
  for (int k = 0; k < st->nreq; k++)
    sb_printf(sb, " %lld %.9f %lld %.9f %lld %.9f", (long long)st->req_bytes[k],
              st->req_secs[k], (long long)st->req_link_bytes[0][k],
              st->req_link_secs[0][k], (long long)st->req_link_bytes[1][k],
              st->req_link_secs[1][k]);
}

/* A byte or cell count one rank's figures can hold (well below overflow
 * when summed over ranks), and a time in seconds. */
static bool fig_bytes(long long v) { return v >= 0 && v <= (1LL << 53); }
static bool fig_secs(double v) { return isfinite(v) && v >= 0 && v <= 1e9; }

bool rt_kv_stats_decode(const char *text, int requests, RtKvStats *st) {
  memset(st, 0, sizeof *st);
  long long br, bs, bc, cells;
  int grouped = 0, nreq = -1, off = 0;
  bool ok = sscanf(text, "%lld %lld %lld %lf %lf %lld %lf %d %lf %lf %d%n", &br,
                   &bs, &bc, &st->secs_same_node, &st->secs_cross_node, &cells,
                   &st->memcpy_secs, &grouped, &st->cpu_run_secs,
                   &st->cpu_wait_secs, &nreq, &off) == 11 &&
            fig_bytes(br) && fig_bytes(bs) && fig_bytes(bc) &&
            fig_bytes(cells) && fig_secs(st->secs_same_node) &&
            fig_secs(st->secs_cross_node) && fig_secs(st->memcpy_secs) &&
            (grouped == 0 || grouped == 1) &&
            (st->cpu_run_secs == -1 || fig_secs(st->cpu_run_secs)) &&
            (st->cpu_wait_secs == -1 || fig_secs(st->cpu_wait_secs)) &&
            requests >= 0 && nreq == requests;
  if (!ok) {
    memset(st, 0, sizeof *st);
    return false;
  }
  st->bytes_recv = br;
  st->bytes_same_node = bs;
  st->bytes_cross_node = bc;
  st->cells_verified = cells;
  st->grouped = grouped == 1;
  st->nreq = nreq;
  st->req_bytes = rp_calloc((size_t)nreq + 1, sizeof *st->req_bytes);
  st->req_secs = rp_calloc((size_t)nreq + 1, sizeof *st->req_secs);
  for (int c = 0; c < 2; c++) {
    st->req_link_bytes[c] = rp_calloc((size_t)nreq + 1, sizeof(int64_t));
    st->req_link_secs[c] = rp_calloc((size_t)nreq + 1, sizeof(double));
  }
  const char *q = text + off;
  for (int i = 0; ok && i < nreq; i++) {
    long long rb, b0, b1;
    int n = 0;
    ok = sscanf(q, " %lld %lf %lld %lf %lld %lf%n", &rb, &st->req_secs[i], &b0,
                &st->req_link_secs[0][i], &b1, &st->req_link_secs[1][i],
                &n) == 6 &&
         fig_bytes(rb) && fig_bytes(b0) && fig_bytes(b1) &&
         fig_secs(st->req_secs[i]) && fig_secs(st->req_link_secs[0][i]) &&
         fig_secs(st->req_link_secs[1][i]);
    st->req_bytes[i] = rb;
    st->req_link_bytes[0][i] = b0;
    st->req_link_bytes[1][i] = b1;
    q += n;
  }
  while (ok && (*q == ' ' || *q == '\n')) q++;
  if (!ok || *q) {
    rt_kv_stats_free(st);
    return false;
  }
  return true;
}

bool rt_sched_times(double *run, double *wait) {
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  if (!f) return false;
  unsigned long long a = 0, b = 0;
  bool ok = fscanf(f, "%llu %llu", &a, &b) == 2;
  fclose(f);
  *run = ok ? (double)a * 1e-9 : 0;
  *wait = ok ? (double)b * 1e-9 : 0;
  return ok;
}

static RtResult kv_run(const RtBackend *be, void *state, const Plan *pl,
                       int rank, RtComm *world,
                       int world_group, RtKvPool *pool, const RtKvOpts *o,
                       RtKvStats *st);

RtResult rt_kv_run(const RtBackend *be, void *state, const Plan *pl,
                   int rank, RtComm *world, int world_group,
                   RtKvPool *pool, const RtKvOpts *o, RtKvStats *st) {
  double r0 = 0, w0 = 0, r1 = 0, w1 = 0;
  bool have = rt_sched_times(&r0, &w0);
  RtResult r = kv_run(be, state, pl, rank, world, world_group, pool, o, st);
  if (have && rt_sched_times(&r1, &w1)) {
    st->cpu_run_secs = r1 - r0;
    st->cpu_wait_secs = w1 - w0;
  } else {
    st->cpu_run_secs = st->cpu_wait_secs = -1;
  }
  return r;
}

static RtResult kv_run(const RtBackend *be, void *state, const Plan *pl,
                       int rank, RtComm *world,
                       int world_group, RtKvPool *pool, const RtKvOpts *o,
                       RtKvStats *st) {
  memset(st, 0, sizeof *st);
  st->nreq = o->requests;
  st->req_bytes = rp_calloc((size_t)o->requests + 1, sizeof *st->req_bytes);
  st->req_secs = rp_calloc((size_t)o->requests + 1, sizeof *st->req_secs);
  for (int c = 0; c < 2; c++) {
    st->req_link_bytes[c] = rp_calloc((size_t)o->requests + 1, sizeof(int64_t));
    st->req_link_secs[c] = rp_calloc((size_t)o->requests + 1, sizeof(double));
  }
  if (pl->nreshard == 0 || o->requests <= 0) return RT_OK;
  int64_t ranges_T = -1;
  RTCHECK(rt_kv_plan_check(pl, &ranges_T));
  if (o->input_tokens < ranges_T || o->input_tokens > RT_KV_MAX_TOKENS)
    return rt_err(RT_ERR_INVALID, "%lld input tokens: expected %lld to %d (the "
                  "plan's kv_reshard token ranges end at %lld)",
                  (long long)o->input_tokens,
                  (long long)(ranges_T > 1 ? ranges_T : 1), RT_KV_MAX_TOKENS,
                  (long long)ranges_T);
  const char *ge = getenv("RANKRUN_KV_GROUPED");
  if (be->p2p_post && be->p2p_wait && be->copy_ref &&
      (be->kv_grouped || (ge && strcmp(ge, "1") == 0)))
    return kv_run_grouped(be, state, pl, rank, world, world_group, pool, o,
                          st);
  const PlanRank *me = &pl->ranks[rank];
  const PlanPool *MP = &pl->pools[me->pool];
  const PlanGroup *wg = &pl->groups[world_group];
  int64_t T = o->input_tokens;
  bool host = be->host_memory;
  /* The largest transfer sizes the one wire buffer; every transfer of a
   * pair has the pair's cell size (check_cell_sizes), which packs it. */
  int64_t maxb = 0, bph = 0;
  CkState ck = {true};
  for (size_t i = 0; i < pl->nreshard; i++)
    for (size_t j = 0; j < pl->reshard[i].ntransfers; j++) {
      const PlanTransfer *x = &pl->reshard[i].transfers[j];
      RTCHECK(xfer_bph(x, &bph));
      int64_t b = ckm(&ck, ckm(&ck, ckm(&ck, x->layers[1] - x->layers[0],
                                        x->kv_heads[1] - x->kv_heads[0]),
                               xfer_tokens(x, T)), bph);
      if (b > maxb) maxb = b;
    }
  if (!ck.ok || (uint64_t)maxb >= SIZE_MAX / 2)
    return rt_err(RT_ERR_INVALID, "a kv_reshard transfer at %lld tokens "
                  "overflows a 64-bit byte count", (long long)T);
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
    ReqRole rr;
    if ((r = req_role(pl, me, k, &rr)) != RT_OK) break;
    const PlanReshard *pair = rr.pair;
    bool is_src = rr.is_src, is_dst = rr.is_dst;
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
    /* Layer groups outermost, transfers in plan order inside: a prefill
     * rank with several receivers sends each of them layer group i before
     * any of them group i + 1, so that they drain in parallel instead of
     * one waiting for the others' whole transfers; every rank walks the
     * same (layer group, transfer) order, which keeps the schedule
     * deadlock-free. */
    int64_t lmax = 0;
    for (size_t j = 0; j < pair->ntransfers; j++)
      if (pair->transfers[j].layers[1] > lmax) lmax = pair->transfers[j].layers[1];
    for (int64_t wb = 0; wb < lmax && r == RT_OK; wb += RT_KV_LAYER_GROUP) {
      int64_t we = wb + RT_KV_LAYER_GROUP;
      for (size_t j = 0; j < pair->ntransfers && r == RT_OK; j++) {
        const PlanTransfer *x = &pair->transfers[j];
        if (x->layers[1] <= wb || x->layers[0] >= we) continue;
        int64_t sg, dg;
        if ((r = xfer_ends(pl, &rr, x, &sg, &dg)) != RT_OK) break;
        if (sg != rank && dg != rank) continue;
        if ((r = check_in_region(&g, x, rank)) != RT_OK) break;
        int64_t ntok = xfer_tokens(x, T);
        /* This transfer's layers in the window [wb, we): one message. */
        for (int64_t lb = x->layers[0] > wb ? x->layers[0] : wb;
             lb < x->layers[1] && lb < we && r == RT_OK; lb = we) {
          int64_t le = x->layers[1] < we ? x->layers[1] : we;
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
            count_sent(st, pl->ranks[sg].node == pl->ranks[dg].node ? 0 : 1, k,
                       nb, dt);
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
    }
    free(filled);
    if (r != RT_OK) break;
    if (is_dst) {
      st->req_secs[k] = rt_now() - t_req;
      r = verify_region(MP, me, rank, k, &g, region, st);
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
