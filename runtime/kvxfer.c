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
 * is. One walk (kv_walk) gives both executors, the per-message path and
 * the grouped one, that order; each says only how it sends and receives
 * a unit of work (KvExec). One total order of sends and receives on every
 * rank makes the schedule deadlock-free: the earliest unfinished message
 * always has both ends ready. Ownership used to verify is
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
  *sg = plan_replica_rank(pl, rr->pi, rr->pinst, rr->pdp, x->src);
  *dg = plan_replica_rank(pl, rr->di, rr->dinst, rr->ddp, x->dst);
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

void rt_kv_stats_alloc(RtKvStats *st, int n) {
  st->nreq = n;
  st->req_bytes = rp_calloc((size_t)n + 1, sizeof *st->req_bytes);
  st->req_secs = rp_calloc((size_t)n + 1, sizeof *st->req_secs);
  for (int c = 0; c < 2; c++) {
    st->req_link_bytes[c] = rp_calloc((size_t)n + 1, sizeof(int64_t));
    st->req_link_secs[c] = rp_calloc((size_t)n + 1, sizeof(double));
  }
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
  rt_kv_stats_alloc(st, nreq);
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

/* ---------------------------------------------------------------------------
 * The walk over the plan's transfers, which both executors share.
 *
 * Every rank walks requests in order; within a request, layer groups of
 * RT_KV_LAYER_GROUP layers in order; within a layer group, one bucket per
 * link class (grouped path: same-node transfers, then cross-node ones) or
 * one bucket of every transfer (per-message path); within a bucket, the
 * pair's transfers in plan order, each cut to the layer group. Every
 * rank's sends and receives are a restriction of that one total order,
 * so the earliest unfinished message (or bucket) always has both ends
 * ready and the schedule cannot deadlock. Layer groups outermost: a
 * prefill rank with several receivers sends each of them layer group i
 * before any of them group i + 1, so that they drain in parallel.
 *
 * What an executor does with a unit of work is said by its KvExec. */

typedef struct KvWalk KvWalk;

typedef struct {
  /* Once per request this rank serves, before the request's timer
   * starts: points w->host at the request's region in host memory (rbytes
   * long, the fill and the verification read it) and zeroes it. */
  RtResult (*begin)(KvWalk *w);
  /* Each transfer x of the current bucket, cut to layers [a, b), with
   * global ends sg and dg; mine: this rank is one of them (x then lies in
   * its region). j is x's index in the pair. */
  RtResult (*xfer)(KvWalk *w, size_t j, const PlanTransfer *x, int64_t a,
                   int64_t b, int64_t sg, int64_t dg, bool mine);
  /* After the bucket of link class lc (NULL: nothing to do). */
  RtResult (*bucket_end)(KvWalk *w, int lc);
  /* After each layer group (NULL: nothing to do). */
  RtResult (*group_end)(KvWalk *w);
  /* On a receiving rank, before verification: brings the received
   * region into w->host (NULL: it is there already). */
  RtResult (*fetch)(KvWalk *w);
} KvExec;

struct KvWalk {
  const RtBackend *be;
  void *state;
  const Plan *pl;
  int rank;
  const PlanRank *me;
  const PlanPool *MP;
  const PlanGroup *wg; /* the world group: peers are indices in it */
  RtComm *world;
  RtKvPool *pool;       /* rankrun's check: the KV pool; NULL otherwise */
  const RtKvOpts *o;
  RtKvStats *st;
  int64_t T;
  /* rankrun's own check (rt_kv_run): the walk fills what a prefill rank
   * sends with the pattern, layer group by layer group as they go out,
   * and verifies what a decode rank received. Otherwise (rt_kv_move) the
   * region is the caller's and moves as it is. */
  bool check;
  unsigned char *region; /* the request's region in backend memory */
  int64_t si;            /* the request's index in st's arrays */
  int nclasses;        /* buckets per layer group: 2 by link class, or 1 */
  const KvExec *ex;
  void *ex_state;
  /* the current request */
  int64_t k;
  ReqRole rr;
  Region g;
  int64_t bph;
  size_t rbytes;
  unsigned char *host; /* the region in host memory (KvExec.begin) */
  bool *filled;        /* per layer of the region */
  int64_t lb, le;      /* the current layer group [lb, le) */
};

/* Link class of a transfer between global ranks a and b: 0 same node,
 * 1 cross node. */
static int link_class(const Plan *pl, int64_t a, int64_t b) {
  return pl->ranks[a].node == pl->ranks[b].node ? 0 : 1;
}

/* Whether --test-corrupt names byte `at` of cell (request k, l, h, p). */
static bool corrupt_at(const RtKvOpts *o, int64_t k, int64_t l, int64_t h,
                       int64_t p, int64_t bph) {
  const int64_t *x = o->corrupt;
  return x[0] == k && x[1] == l && x[2] == h && x[3] == p && x[4] >= 0 &&
         x[4] < bph;
}

/* Fills layer l of the current request's region at base with the pattern,
 * every cell this rank owns; corrupt: with the test corruption applied. */
static void fill_layer(const KvWalk *w, unsigned char *base, int64_t l,
                       bool corrupt) {
  const Region *g = &w->g;
  for (int64_t h = g->h0; h < g->h1; h++)
    for (int64_t p = 0; p < g->T; p++) {
      if (!owns_token(w->MP, w->me, g->T, p)) continue;
      unsigned char *c = base + cell_off(g, l, h, p);
      fill_cell(c, (size_t)g->bph, cell_seed(w->k, l, h, p));
      if (corrupt && corrupt_at(w->o, w->k, l, h, p, g->bph))
        c[w->o->corrupt[4]] ^= 0xA5;
    }
}

static RtResult walk_bucket(KvWalk *w, int lc) {
  const PlanReshard *pair = w->rr.pair;
  for (size_t j = 0; j < pair->ntransfers; j++) {
    const PlanTransfer *x = &pair->transfers[j];
    int64_t a = x->layers[0] > w->lb ? x->layers[0] : w->lb;
    int64_t b = x->layers[1] < w->le ? x->layers[1] : w->le;
    if (a >= b) continue;
    int64_t sg, dg;
    RTCHECK(xfer_ends(w->pl, &w->rr, x, &sg, &dg));
    if (w->nclasses > 1 && link_class(w->pl, sg, dg) != lc) continue;
    bool mine = sg == w->rank || dg == w->rank;
    if (mine) RTCHECK(check_in_region(&w->g, x, w->rank));
    RTCHECK(w->ex->xfer(w, j, x, a, b, sg, dg, mine));
  }
  return RT_OK;
}

static RtResult walk_layers(KvWalk *w) {
  const PlanReshard *pair = w->rr.pair;
  int64_t lmax = 0;
  for (size_t j = 0; j < pair->ntransfers; j++)
    if (pair->transfers[j].layers[1] > lmax) lmax = pair->transfers[j].layers[1];
  for (w->lb = 0; w->lb < lmax; w->lb += RT_KV_LAYER_GROUP) {
    w->le = w->lb + RT_KV_LAYER_GROUP < lmax ? w->lb + RT_KV_LAYER_GROUP : lmax;
    for (int lc = 0; lc < w->nclasses; lc++) {
      RTCHECK(walk_bucket(w, lc));
      if (w->ex->bucket_end) RTCHECK(w->ex->bucket_end(w, lc));
    }
    if (w->ex->group_end) RTCHECK(w->ex->group_end(w));
  }
  return RT_OK;
}

/* One request this rank sends or receives: its region, the layer groups,
 * then on a receiving rank the request's time and the verification. */
static RtResult walk_request(KvWalk *w) {
  RTCHECK(xfer_bph(&w->rr.pair->transfers[0], &w->bph));
  if (w->check) {
    RTCHECK(region_of(w->me, w->T, w->bph, w->pool, &w->g));
    w->region = w->pool->kv;
  } else {
    geom_of(w->me, w->T, w->bph, &w->g);
  }
  w->rbytes = cell_off(&w->g, w->g.l1, w->g.h0, 0);
  w->filled = rp_calloc((size_t)(w->g.l1 - w->g.l0) + 1, sizeof *w->filled);
  RtResult r = w->ex->begin(w);
  double t_req = rt_now();
  if (r == RT_OK) r = walk_layers(w);
  if (r == RT_OK && w->rr.is_dst) {
    w->st->req_secs[w->si] = rt_now() - t_req;
    if (!w->check) goto done;
    if (w->ex->fetch) r = w->ex->fetch(w);
    if (r == RT_OK)
      r = verify_region(w->MP, w->me, w->rank, w->k, &w->g, w->host, w->st);
  }
done:
  free(w->filled);
  w->filled = NULL;
  return r;
}

/* rankrun's check: every request in order. */
static RtResult kv_walk(KvWalk *w) {
  for (w->k = 0; w->k < w->o->requests; w->k++) {
    w->si = w->k;
    RTCHECK(req_role(w->pl, w->me, w->k, &w->rr));
    if ((!w->rr.is_src && !w->rr.is_dst) || w->rr.pair->ntransfers == 0)
      continue;
    RTCHECK(walk_request(w));
  }
  if (w->st->memcpy_secs > 0)
    w->st->memcpy_gbs = (double)w->st->memcpy_bytes / w->st->memcpy_secs / 1e9;
  return RT_OK;
}

/* rt_kv_move: the one request w->k (its role is known already). */
static RtResult kv_walk_one(KvWalk *w) { return walk_request(w); }

/* ---------------------------------------------------------------------------
 * The grouped path (p2p_post): per bucket, one group of this rank's sends
 * and receives with every peer, straight from and into the KV pool. A
 * prefill rank fills layer group i + 1 (host pattern, then one copy into
 * the pool) while group i is in flight. A decode rank copies its region
 * back to the host once the request's groups have completed and verifies
 * it there.
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

/* The operations of one bucket on this rank, with where each one ends in
 * the sender's and the receiver's region, so that a piece contiguous with
 * the previous one in both joins it instead of becoming another message,
 * and the chunk each belongs to. */
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

typedef struct {
  OpList L;
  int64_t piece;        /* index among the bucket's pieces, all ranks' */
  int64_t *runs;        /* per transfer of runs_of's pair: token runs */
  size_t runs_cap;
  const PlanReshard *runs_of;
  unsigned char *host;  /* host copy of the region: fill and verify */
  size_t host_bytes;
  unsigned char *scratch; /* the reference copy's destination */
  size_t scratch_bytes, scratch_off;
  bool next_filled;     /* the next layer group is filled already */
} Grouped;

/* Fills the layers of [lb, le) this rank holds and has not filled yet in
 * the host copy, then copies them into the pool in one from_host call
 * (they are one contiguous span: layers are filled in increasing order).
 * The test-only corruption flips its byte here, on the sending side. */
static RtResult fill_layers(KvWalk *w, int64_t lb, int64_t le) {
  const Region *g = &w->g;
  int64_t a = lb > g->l0 ? lb : g->l0, b = le < g->l1 ? le : g->l1, first = -1;
  for (int64_t l = a; l < b; l++) {
    if (w->filled[l - g->l0]) continue;
    if (first < 0) first = l;
    fill_layer(w, w->host, l, true);
    w->filled[l - g->l0] = true;
  }
  if (first < 0) return RT_OK;
  size_t off = cell_off(g, first, g->h0, 0), end = cell_off(g, b, g->h0, 0);
  return w->be->from_host(w->state, w->region + off, w->host + off, end - off);
}

static RtResult g_begin(KvWalk *w) {
  Grouped *G = w->ex_state;
  if (w->check && w->rbytes + 1 > G->host_bytes) {
    free(G->host);
    G->host_bytes = w->rbytes + 1;
    G->host = rp_malloc(G->host_bytes);
  }
  w->host = G->host;
  /* The check zeroes the pool's region, so that a cell nobody sent reads
   * as zeros, not as the previous request's bytes. */
  if (w->check) {
    memset(w->host, 0, w->rbytes);
    RTCHECK(w->be->from_host(w->state, w->region, w->host, w->rbytes));
  }
  const PlanReshard *pair = w->rr.pair;
  if (pair != G->runs_of) { /* T is the same for every request */
    if (pair->ntransfers > G->runs_cap) {
      G->runs_cap = pair->ntransfers;
      G->runs = rp_realloc(G->runs, G->runs_cap * sizeof *G->runs);
    }
    for (size_t j = 0; j < pair->ntransfers; j++)
      G->runs[j] = xfer_runs(&pair->transfers[j], w->T);
    G->runs_of = pair;
  }
  G->L.n = 0;
  G->piece = 0;
  G->next_filled = false;
  return w->check && w->rr.is_src ? fill_layers(w, 0, RT_KV_LAYER_GROUP) : RT_OK;
}

/* A transfer of the bucket: this rank's pieces (maximal token runs per
 * layer and kv head) become operations; another rank's only count. */
static RtResult g_xfer(KvWalk *w, size_t j, const PlanTransfer *x, int64_t a,
                       int64_t b, int64_t sg, int64_t dg, bool mine) {
  Grouped *G = w->ex_state;
  if (!mine) {
    G->piece += (b - a) * (x->kv_heads[1] - x->kv_heads[0]) * G->runs[j];
    return RT_OK;
  }
  bool send = sg == w->rank;
  int64_t other = send ? dg : sg, T = w->T;
  Region og;
  geom_of(&w->pl->ranks[other], T, w->bph, &og);
  const Region *gs = send ? &w->g : &og, *gd = send ? &og : &w->g;
  int peer = rt_group_index(w->wg, (int)other);
  for (int64_t l = a; l < b; l++)
    for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
      for (int64_t p = 0; p < T;) {
        if (!xfer_has(x, p)) {
          p++;
          continue;
        }
        int64_t p1 = p + 1;
        while (p1 < T && xfer_has(x, p1)) p1++;
        ops_add(&G->L, G->piece++, send, peer, w->region,
                (int64_t)cell_off(gs, l, h, p), (int64_t)cell_off(gd, l, h, p),
                (p1 - p) * w->bph);
        p = p1;
      }
  return RT_OK;
}

/* The reference of one sent operation: the same bytes copied within this
 * rank's memory (device to device on nccl), right after the transfer,
 * into a buffer of at least a host ring's size written round-robin, as
 * the per-message path's memcpy is: one small destination used over and
 * over would stay in cache and measure the cache. The buffer is written
 * once, untimed, when made, so that no first-touch page fault is timed. */
static RtResult g_reference(KvWalk *w, const RtP2p *op) {
  Grouped *G = w->ex_state;
  size_t ob = op->bytes;
  if (ob > G->scratch_bytes) {
    if (G->scratch) w->be->mem_free(w->state, G->scratch);
    G->scratch_bytes = ob > RT_HOST_RING_BYTES ? ob : RT_HOST_RING_BYTES;
    G->scratch = w->be->mem_alloc(w->state, G->scratch_bytes);
    if (!G->scratch) {
      G->scratch_bytes = 0;
      return rt_err(RT_ERR_SYS, "cannot allocate a %zu-byte buffer for the "
                    "reference copy", ob);
    }
    for (size_t off = 0; off < G->scratch_bytes; off += ob) {
      double untimed = 0;
      size_t m = G->scratch_bytes - off < ob ? G->scratch_bytes - off : ob;
      RTCHECK(w->be->copy_ref(w->state, G->scratch + off, op->buf, m, &untimed));
    }
    G->scratch_off = 0;
  }
  if (G->scratch_off + ob > G->scratch_bytes) G->scratch_off = 0;
  double cs = 0;
  RTCHECK(w->be->copy_ref(w->state, G->scratch + G->scratch_off, op->buf, ob,
                          &cs));
  G->scratch_off += ob;
  w->st->memcpy_secs += cs;
  w->st->memcpy_bytes += (int64_t)ob;
  return RT_OK;
}

/* Posts the bucket's operations chunk by chunk, each one group, and
 * counts what moved. */
static RtResult g_bucket_end(KvWalk *w, int lc) {
  Grouped *G = w->ex_state;
  OpList *L = &G->L;
  for (int i0 = 0, n = 0; i0 < L->n; i0 += n) {
    for (n = 1; i0 + n < L->n && L->chunks[i0 + n] == L->chunks[i0]; n++) {
    }
    RTCHECK(w->be->p2p_post(w->world, L->ops + i0, n));
    /* Fill the next layer group while this one is on the wire. */
    if (w->check && w->rr.is_src && !G->next_filled) {
      G->next_filled = true;
      RTCHECK(fill_layers(w, w->le, w->le + RT_KV_LAYER_GROUP));
    }
    double secs = 0;
    RTCHECK(w->be->p2p_wait(w->world, &secs));
    int64_t nb = 0;
    for (int i = i0; i < i0 + n; i++) nb += (int64_t)L->ops[i].bytes;
    if (w->rr.is_src) {
      count_sent(w->st, lc, w->si, nb, secs);
      for (int i = i0; i < i0 + n; i++) RTCHECK(g_reference(w, &L->ops[i]));
    } else {
      w->st->bytes_recv += nb;
      w->st->req_bytes[w->si] += nb;
    }
  }
  L->n = 0;
  G->piece = 0;
  return RT_OK;
}

static RtResult g_group_end(KvWalk *w) {
  Grouped *G = w->ex_state;
  bool fill = w->check && w->rr.is_src && !G->next_filled;
  G->next_filled = false;
  return fill ? fill_layers(w, w->le, w->le + RT_KV_LAYER_GROUP) : RT_OK;
}

static RtResult g_fetch(KvWalk *w) {
  return w->be->to_host(w->state, w->host, w->region, w->rbytes);
}

static const KvExec grouped_exec = {g_begin, g_xfer, g_bucket_end, g_group_end,
                                    g_fetch};

/* Pieces per chunk: RT_P2P_MAX, or RANKRUN_KV_CHUNK (tests). */
static RtResult chunk_size(int64_t *chunk) {
  *chunk = RT_P2P_MAX;
  const char *ce = getenv("RANKRUN_KV_CHUNK");
  if (!ce) return RT_OK;
  char *end = NULL;
  long v = strtol(ce, &end, 10);
  if (!end || *end || end == ce || v < 1 || v > RT_P2P_MAX)
    return rt_err(RT_ERR_INVALID, "RANKRUN_KV_CHUNK=`%s`: expected 1 to %d", ce,
                  RT_P2P_MAX);
  *chunk = v;
  return RT_OK;
}

typedef RtResult (*WalkFn)(KvWalk *w);

static RtResult kv_run_grouped(KvWalk *w, WalkFn walk) {
  w->st->grouped = true;
  Grouped G;
  memset(&G, 0, sizeof G);
  RTCHECK(chunk_size(&G.L.chunk));
  w->nclasses = 2;
  w->ex = &grouped_exec;
  w->ex_state = &G;
  RtResult r = walk(w);
  if (G.scratch) w->be->mem_free(w->state, G.scratch);
  free(G.host);
  free(G.L.ops);
  free(G.L.src_end);
  free(G.L.dst_end);
  free(G.L.chunks);
  free(G.runs);
  return r;
}

/* ---------------------------------------------------------------------------
 * The per-message path: one message per transfer and layer group, packed
 * into a wire buffer (staged through device memory on a backend whose
 * memory is not the host's). On a backend with host memory a request's
 * region is the start of the KV pool; otherwise it is a host buffer of one
 * request's shard (made at the first request this rank serves). */

typedef struct {
  bool host;            /* the backend's memory is host memory */
  unsigned char *buf;   /* the wire buffer, host memory */
  void *dev;            /* its staging copy in backend memory (!host) */
  unsigned char *region; /* the check's host copy of a request's region
                            when the backend's memory is not the host's */
  /* Destination of the reference memcpy: pre-faulted (memset), as the
   * rings' pages are, and written round-robin through as many bytes as
   * one ring holds (or one message, when larger), as a ring is; a
   * destination that stayed in the core's cache would measure the cache,
   * not a copy between processes. */
  unsigned char *ref;
  size_t ref_bytes, ref_off;
} Msgs;

static RtResult m_begin(KvWalk *w) {
  Msgs *M = w->ex_state;
  if (M->host || !w->check) {
    w->host = w->region; /* host memory (rt_kv_move checks) */
  } else {
    if (!M->region) M->region = rp_malloc(w->rbytes + 1);
    w->host = M->region;
  }
  if (w->check) memset(w->host, 0, w->rbytes);
  return RT_OK;
}

/* Prefill ranks fill a layer when the first transfer needs it, one layer
 * group at a time, so that sending group i overlaps filling group i+1
 * (the receiver drains group i meanwhile); the message is packed from the
 * region, the test-only corruption flipping its byte in the packed copy. */
static RtResult m_send(KvWalk *w, const PlanTransfer *x, int64_t lb,
                       int64_t le, int64_t sg, int64_t dg) {
  Msgs *M = w->ex_state;
  const Region *g = &w->g;
  int64_t nb = 0, bph = w->bph;
  for (int64_t l = lb; l < le && w->check; l++) {
    if (w->filled[l - g->l0]) continue;
    fill_layer(w, w->host, l, false);
    w->filled[l - g->l0] = true;
  }
  for (int64_t l = lb; l < le; l++)
    for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
      for (int64_t p = 0; p < w->T; p++) {
        if (!xfer_has(x, p)) continue;
        memcpy(M->buf + nb, w->host + cell_off(g, l, h, p), (size_t)bph);
        if (corrupt_at(w->o, w->k, l, h, p, bph))
          M->buf[nb + w->o->corrupt[4]] ^= 0xA5;
        nb += bph;
      }
  RtResult r = RT_OK;
  if (!M->host) r = w->be->from_host(w->state, M->dev, M->buf, (size_t)nb);
  /* The benchmark's reference: a plain memcpy of the same message between
   * two pre-faulted host buffers, timed just before the send, so that both
   * see the same load on the machine. */
  if (M->ref_off + (size_t)nb > M->ref_bytes) M->ref_off = 0;
  double tm = rt_now();
  memcpy(M->ref + M->ref_off, M->buf, (size_t)nb);
  w->st->memcpy_secs += rt_now() - tm;
  M->ref_off += (size_t)nb;
  w->st->memcpy_bytes += nb;
  double t0 = rt_now();
  if (r == RT_OK)
    r = w->be->send(w->world, M->host ? (void *)M->buf : M->dev, (size_t)nb,
                    rt_group_index(w->wg, (int)dg));
  count_sent(w->st, link_class(w->pl, sg, dg), w->si, nb, rt_now() - t0);
  return r;
}

static RtResult m_recv(KvWalk *w, const PlanTransfer *x, int64_t lb,
                       int64_t le, int64_t sg) {
  Msgs *M = w->ex_state;
  int64_t bph = w->bph;
  int64_t nb = (le - lb) * (x->kv_heads[1] - x->kv_heads[0]) *
               xfer_tokens(x, w->T) * bph;
  void *wire = M->host ? (void *)M->buf : M->dev;
  RTCHECK(w->be->recv(w->world, wire, (size_t)nb, rt_group_index(w->wg, (int)sg)));
  if (!M->host) RTCHECK(w->be->to_host(w->state, M->buf, M->dev, (size_t)nb));
  int64_t off = 0;
  for (int64_t l = lb; l < le; l++)
    for (int64_t h = x->kv_heads[0]; h < x->kv_heads[1]; h++)
      for (int64_t p = 0; p < w->T; p++) {
        if (!xfer_has(x, p)) continue;
        memcpy(w->host + cell_off(&w->g, l, h, p), M->buf + off, (size_t)bph);
        off += bph;
      }
  w->st->bytes_recv += nb;
  w->st->req_bytes[w->si] += nb;
  return RT_OK;
}

static RtResult m_xfer(KvWalk *w, size_t j, const PlanTransfer *x, int64_t a,
                       int64_t b, int64_t sg, int64_t dg, bool mine) {
  (void)j;
  if (!mine) return RT_OK;
  return sg == w->rank ? m_send(w, x, a, b, sg, dg) : m_recv(w, x, a, b, sg);
}

static const KvExec msgs_exec = {m_begin, m_xfer, NULL, NULL, NULL};

/* Bytes of the largest message of any transfer at T tokens: the size of
 * the one wire buffer. Every transfer of a pair has the pair's cell size
 * (check_cell_sizes), which packs it. */
static RtResult max_message(const Plan *pl, int64_t T, int64_t *maxb) {
  int64_t bph = 0;
  CkState ck = {true};
  *maxb = 0;
  for (size_t i = 0; i < pl->nreshard; i++)
    for (size_t j = 0; j < pl->reshard[i].ntransfers; j++) {
      const PlanTransfer *x = &pl->reshard[i].transfers[j];
      RTCHECK(xfer_bph(x, &bph));
      int64_t b = ckm(&ck, ckm(&ck, ckm(&ck, x->layers[1] - x->layers[0],
                                        x->kv_heads[1] - x->kv_heads[0]),
                               xfer_tokens(x, T)), bph);
      if (b > *maxb) *maxb = b;
    }
  if (!ck.ok || (uint64_t)*maxb >= SIZE_MAX / 2)
    return rt_err(RT_ERR_INVALID, "a kv_reshard transfer at %lld tokens "
                  "overflows a 64-bit byte count", (long long)T);
  return RT_OK;
}

static RtResult kv_run_msgs(KvWalk *w, WalkFn walk) {
  int64_t maxb = 0;
  RTCHECK(max_message(w->pl, w->T, &maxb));
  Msgs M;
  memset(&M, 0, sizeof M);
  M.host = w->be->host_memory;
  M.buf = rp_malloc((size_t)maxb + 1);
  M.ref_bytes = (size_t)maxb > RT_HOST_RING_BYTES ? (size_t)maxb : RT_HOST_RING_BYTES;
  M.ref = rp_malloc(M.ref_bytes + 1);
  memset(M.ref, 0, M.ref_bytes + 1);
  memset(M.buf, 0, (size_t)maxb + 1);
  M.dev = M.host ? NULL : w->be->mem_alloc(w->state, (size_t)maxb + 1);
  RtResult r = RT_OK;
  if (!M.host && !M.dev)
    r = rt_err(RT_ERR_SYS, "cannot allocate a %lld-byte transfer buffer",
               (long long)maxb);
  w->nclasses = 1;
  w->ex = &msgs_exec;
  w->ex_state = &M;
  if (r == RT_OK) r = walk(w);
  /* Read the reference copy back so that it cannot be optimised away. */
  volatile unsigned char sink = M.ref[M.ref_bytes / 2];
  (void)sink;
  if (M.dev) w->be->mem_free(w->state, M.dev);
  free(M.region);
  free(M.ref);
  free(M.buf);
  return r;
}

static RtResult kv_run(const RtBackend *be, void *state, const Plan *pl,
                       int rank, RtComm *world, int world_group,
                       RtKvPool *pool, const RtKvOpts *o, RtKvStats *st);
static RtResult kv_exec(KvWalk *w, WalkFn walk);

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
                       int rank, RtComm *world, int world_group,
                       RtKvPool *pool, const RtKvOpts *o, RtKvStats *st) {
  memset(st, 0, sizeof *st);
  rt_kv_stats_alloc(st, o->requests);
  if (pl->nreshard == 0 || o->requests <= 0) return RT_OK;
  int64_t ranges_T = -1;
  RTCHECK(rt_kv_plan_check(pl, &ranges_T));
  if (o->input_tokens < ranges_T || o->input_tokens > RT_KV_MAX_TOKENS)
    return rt_err(RT_ERR_INVALID, "%lld input tokens: expected %lld to %d (the "
                  "plan's kv_reshard token ranges end at %lld)",
                  (long long)o->input_tokens,
                  (long long)(ranges_T > 1 ? ranges_T : 1), RT_KV_MAX_TOKENS,
                  (long long)ranges_T);
  const PlanRank *me = &pl->ranks[rank];
  KvWalk w = {.be = be, .state = state, .pl = pl, .rank = rank, .me = me,
              .MP = &pl->pools[me->pool], .wg = &pl->groups[world_group],
              .world = world, .pool = pool, .o = o, .st = st,
              .T = o->input_tokens};
  w.check = true;
  return kv_exec(&w, kv_walk);
}

/* One executor for both callers: the grouped path where the backend
 * takes it by default or RANKRUN_KV_GROUPED=1 asks for it, else one
 * message at a time. */
static bool kv_grouped_path(const RtBackend *be) {
  const char *ge = getenv("RANKRUN_KV_GROUPED");
  return be->p2p_post && be->p2p_wait && be->copy_ref &&
         (be->kv_grouped || (ge && strcmp(ge, "1") == 0));
}

static RtResult kv_exec(KvWalk *w, WalkFn walk) {
  return kv_grouped_path(w->be) ? kv_run_grouped(w, walk) : kv_run_msgs(w, walk);
}

RtResult rt_kv_role(const Plan *pl, int rank, int64_t k, RtKvRole *role) {
  *role = RT_KV_NONE;
  if (pl->nreshard == 0) return RT_OK;
  ReqRole rr;
  RTCHECK(req_role(pl, &pl->ranks[rank], k, &rr));
  if (rr.pair->ntransfers == 0) return RT_OK;
  *role = rr.is_src ? RT_KV_SEND : rr.is_dst ? RT_KV_RECV : RT_KV_NONE;
  return RT_OK;
}

RtResult rt_kv_region_bytes(const Plan *pl, int rank, int64_t k, int64_t T,
                            int64_t *bytes) {
  *bytes = 0;
  if (pl->nreshard == 0) return RT_OK;
  int64_t bph = 0;
  const PlanReshard *pair = &pl->reshard[k % (int64_t)pl->nreshard];
  if (pair->ntransfers == 0) return RT_OK;
  RTCHECK(xfer_bph(&pair->transfers[0], &bph));
  const PlanRank *R = &pl->ranks[rank];
  CkState ck = {true};
  *bytes = ckm(&ck, ckm(&ck, ckm(&ck, R->shard[SH_LAYERS][1] - R->shard[SH_LAYERS][0],
                                 R->shard[SH_KV_HEADS][1] - R->shard[SH_KV_HEADS][0]),
                         T), bph);
  if (!ck.ok) return rt_err(RT_ERR_INVALID, "one request's KV region at %lld "
                            "tokens overflows a 64-bit byte count", (long long)T);
  return RT_OK;
}

RtResult rt_kv_move(const RtKvMove *m, RtKvStats *st) {
  const Plan *pl = m->pl;
  int64_t ranges_T = -1, need = 0;
  RtKvRole role;
  RTCHECK(rt_kv_plan_check(pl, &ranges_T));
  if (m->tokens < ranges_T || m->tokens < 1 || m->tokens > RT_KV_MAX_TOKENS || m->request < 0)
    return rt_err(RT_ERR_INVALID, "request %lld of %lld tokens: expected a "
                  "request >= 0 and %lld to %d tokens", (long long)m->request,
                  (long long)m->tokens, (long long)(ranges_T > 1 ? ranges_T : 1),
                  RT_KV_MAX_TOKENS);
  RTCHECK(rt_kv_role(pl, m->rank, m->request, &role));
  if (role == RT_KV_NONE)
    return rt_err(RT_ERR_INVALID, "rank %d neither sends nor receives request "
                  "%lld", m->rank, (long long)m->request);
  RTCHECK(rt_kv_region_bytes(pl, m->rank, m->request, m->tokens, &need));
  if ((int64_t)m->bytes != need)
    return rt_err(RT_ERR_INVALID, "rank %d's KV buffer for request %lld has %zu "
                  "bytes; its region (layers x kv heads x tokens x bytes per "
                  "cell) has %lld", m->rank, (long long)m->request, m->bytes,
                  (long long)need);
  if (!m->be->host_memory && !kv_grouped_path(m->be))
    return rt_err(RT_ERR_UNSUPPORTED, "backend %s moves KV from its own memory "
                  "only by grouped send and receive, which it lacks", m->be->name);
  const PlanRank *me = &pl->ranks[m->rank];
  RtKvOpts o = {1, m->tokens, {-1, 0, 0, 0, 0}};
  KvWalk w = {.be = m->be, .state = m->state, .pl = pl, .rank = m->rank, .me = me,
              .MP = &pl->pools[me->pool], .wg = &pl->groups[m->world_group],
              .world = m->world, .o = &o, .st = st, .T = m->tokens,
              .region = m->region, .k = m->request, .si = 0};
  RTCHECK(req_role(pl, me, m->request, &w.rr));
  return kv_exec(&w, kv_walk_one);
}
