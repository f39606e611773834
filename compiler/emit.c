/*
 * emit.c: the plan file. Layout (placed) → plan JSON (docs/plan.md).
 *
 * Input: a placed Layout, its Spec, the compilation's warnings. Output: the
 * plan text, and files written atomically.
 * Invariants: the same input gives the same bytes (keys in a fixed order,
 * no hash-ordered containers, no clock, no paths, integers printed exactly);
 * the text is valid against schemas/plan.schema.json; a file is either the
 * whole new plan or untouched (rp_write_file_atomic: temp file, fsync,
 * rename).
 *
 * The emitter writes JSON by hand into one buffer rather than through
 * Jansson objects: a 131,072-rank plan holds some 40 million values; a
 * Jansson tree of that plan (measured when the loader still used one) took
 * 2.5 GB and 20 to 30 s to build, while this whole compile takes about
 * 1 to 2 s, and since the whole plan is streamed to its file in pieces
 * (Sink below) peaks at 58 MiB (docs/benchmarks.md). Strings are escaped
 * per RFC 8259. The loader (plan_load.c) reads plans back.
 *
 * Layout of the text: top-level keys one per line, each rank and each group
 * one object per line, so that a diff of two plans reads rank by rank.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rp_config.h"
#include "layout.h"
#include "reshard.h"
#include "outfile.h"
#include "launch.h"

/* ---- JSON writing -------------------------------------------------------- */

/* The emitter's own appends on a StrBuf: a 131,072-rank plan is some 200
 * MB written in pieces of a few bytes, so these stay inline and keep the
 * buffer NUL-terminated only at the end (emit_plan) rather than after each
 * piece. sb_* functions may still be mixed in: they write at len too. */
static void fb__grow(StrBuf *sb, size_t n) {
  size_t c = sb->cap ? sb->cap : 64;
  while (c < sb->len + n + 1) c *= 2;
  sb->buf = rp_realloc(sb->buf, c);
  sb->cap = c;
}
static inline void fb_put(StrBuf *sb, const char *s, size_t n) {
  if (sb->len + n + 1 > sb->cap) fb__grow(sb, n);
  memcpy(sb->buf + sb->len, s, n);
  sb->len += n;
}
static inline void fb_putc(StrBuf *sb, char c) {
  if (sb->len + 2 > sb->cap) fb__grow(sb, 1);
  sb->buf[sb->len++] = c;
}

static inline void fb_puts(StrBuf *sb, const char *s) { fb_put(sb, s, strlen(s)); }

static void put_i64(StrBuf *sb, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) tmp[n++] = '-';
  if (sb->len + (size_t)n + 1 > sb->cap) fb__grow(sb, (size_t)n);
  char *o = sb->buf + sb->len;
  for (int i = 0; i < n; i++) o[i] = tmp[n - 1 - i];
  sb->len += (size_t)n;
}

static void put_str(StrBuf *sb, const char *s) { sb_json_str(sb, s); }

#define PUTS(lit) fb_put(sb, lit, sizeof(lit) - 1)

static void put_key(StrBuf *sb, const char *k) {
  put_str(sb, k);
  fb_putc(sb, ':');
}

static void put_range(StrBuf *sb, const int64_t r[2]) {
  fb_putc(sb, '[');
  put_i64(sb, r[0]);
  fb_putc(sb, ',');
  put_i64(sb, r[1]);
  fb_putc(sb, ']');
}

static void put_double(StrBuf *sb, double v) { sb_printf(sb, "%.6f", v); }

/* Writes a hardware figure exactly: an integral value below 2^53 as an
 * integer, any other as the shortest %g form that reads back to the same
 * double, so the plan carries the spec's figure bit for bit and the same
 * value always gives the same text. A figure the spec did not give is
 * null. */
static void put_exact(StrBuf *sb, bool set, double v) {
  if (!set || !isfinite(v)) {
    fb_puts(sb, "null");
    return;
  }
  sb_put_exact(sb, v);
}

/* The `hardware` object: the nominal figures the cost model reads
 * (cost.c's cost_model_init), on one line. */
static void emit_hardware(StrBuf *sb, const Spec *s, const Layout *L) {
  const HardwareSpec *hw = &s->hardware;
  fb_puts(sb, "  \"hardware\": {\"hbm_bandwidth\":");
  put_exact(sb, hw->gpu.hbm_bandwidth.set, hw->gpu.hbm_bandwidth.v);
  fb_puts(sb, ",\"scale_up\":{\"domain\":");
  put_i64(sb, L->domain);
  fb_puts(sb, ",\"bandwidth\":");
  put_exact(sb, hw->scale_up.bandwidth.set, hw->scale_up.bandwidth.v);
  fb_puts(sb, ",\"latency_s\":");
  put_exact(sb, hw->scale_up.latency.set, hw->scale_up.latency.v);
  fb_puts(sb, "},\"scale_out\":{\"bandwidth\":");
  put_exact(sb, hw->scale_out.bandwidth.set, hw->scale_out.bandwidth.v);
  fb_puts(sb, ",\"latency_s\":");
  put_exact(sb, hw->scale_out.latency.set, hw->scale_out.latency.v);
  fb_puts(sb, "}},\n");
}

/* Names written once per rank or group (keys, group kinds, pool names)
 * are quoted and escaped once per plan rather than character by character
 * 131,072 times: at that size escaping them was 15% of the compile's
 * samples (perf). */
typedef struct {
  char *s;
  size_t n;
} Quoted;

typedef struct {
  Quoted coord_key[CO__COUNT], kind_key[GK__COUNT], kind_val[GK__COUNT];
  Quoted shard_key[SH__COUNT], mem_key[MEM__COUNT];
  Quoted *pool;  /* per pool: its quoted name */
  size_t npools;
} EmitNames;

static Quoted quote(const char *name, bool key) {
  StrBuf b;
  sb_init(&b);
  put_str(&b, name);
  if (key) fb_putc(&b, ':');
  fb_put(&b, "", 0);
  b.buf[b.len] = '\0';
  Quoted q = {NULL, b.len};
  q.s = sb_take(&b);
  return q;
}

static void emit_names_init(EmitNames *E, const Layout *L) {
  for (int c = 0; c < CO__COUNT; c++) E->coord_key[c] = quote(plan_coord_name((CoordKind)c), true);
  for (int k = 0; k < GK__COUNT; k++) {
    E->kind_key[k] = quote(plan_kind_name((GroupKind)k), true);
    E->kind_val[k] = quote(plan_kind_name((GroupKind)k), false);
  }
  for (int k = 0; k < SH__COUNT; k++) E->shard_key[k] = quote(plan_shard_name((ShardKind)k), true);
  for (int m = 0; m < MEM__COUNT; m++) E->mem_key[m] = quote(plan_mem_name((MemKind)m), true);
  E->npools = L->npools;
  E->pool = rp_calloc(L->npools ? L->npools : 1, sizeof *E->pool);
  for (size_t p = 0; p < L->npools; p++) E->pool[p] = quote(L->pools[p].name, false);
}

static void emit_names_free(EmitNames *E) {
  for (int c = 0; c < CO__COUNT; c++) free(E->coord_key[c].s);
  for (int k = 0; k < GK__COUNT; k++) {
    free(E->kind_key[k].s);
    free(E->kind_val[k].s);
  }
  for (int k = 0; k < SH__COUNT; k++) free(E->shard_key[k].s);
  for (int m = 0; m < MEM__COUNT; m++) free(E->mem_key[m].s);
  for (size_t p = 0; p < E->npools; p++) free(E->pool[p].s);
  free(E->pool);
}

static inline void put_q(StrBuf *sb, Quoted q) { fb_put(sb, q.s, q.n); }

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static const char *sev_name(Severity s) {
  return s == SEV_ERROR ? "error" : s == SEV_WARNING ? "warning" : "note";
}

static void emit_pools(StrBuf *sb, const Layout *L) {
  PUTS("  \"pools\": [");
  for (size_t p = 0; p < L->npools; p++) {
    const LayPool *P = &L->pools[p];
    fb_puts(sb, p ? ",\n    {" : "\n    {");
    put_key(sb, "name");
    put_str(sb, P->name);
    PUTS(",\"role\":");
    put_str(sb, role_name(P->role));
    PUTS(",\"replicas\":");
    put_i64(sb, P->replicas);
    for (int c = 0; c < CO__COUNT; c++) {
      fb_putc(sb, ',');
      put_key(sb, plan_coord_name((CoordKind)c));
      put_i64(sb, P->size[c]);
    }
    PUTS(",\"instance_size\":");
    put_i64(sb, P->instance_size);
    PUTS(",\"ranks\":");
    int64_t rr[2] = {P->first_rank, P->first_rank + P->nranks};
    put_range(sb, rr);
    PUTS(",\"layer_partition\":[");
    for (int64_t i = 0; i < P->size[CO_PP]; i++) {
      if (i) fb_putc(sb, ',');
      put_i64(sb, P->layer_partition[i]);
    }
    PUTS("]");
    if (P->memory_fraction > 0) { /* the engine's memory fraction flag for this pool */
      PUTS(",\"memory_fraction\":");
      sb_put_exact(sb, P->memory_fraction);
    }
    if (P->expert_map) {
      PUTS(",\"expert_map\":{\"slots_per_rank\":");
      put_i64(sb, P->expert_slots);
      PUTS(",\"ep_ranks\":[");
      for (int64_t e = 0; e < P->size[CO_EP]; e++) {
        fb_puts(sb, e ? ",[" : "[");
        for (int64_t j = 0; j < P->expert_slots; j++) {
          if (j) fb_putc(sb, ',');
          put_i64(sb, P->expert_map[e * P->expert_slots + j]);
        }
        fb_putc(sb, ']');
      }
      PUTS("]}");
    }
    PUTS("}");
  }
  fb_puts(sb, L->npools ? "\n  ],\n" : "],\n");
}

static void emit_rank(StrBuf *sb, const Spec *s, const Layout *L, const EmitNames *E, int64_t r) {
  const LayRank *R = &L->ranks[r];
  const LayPool *P = &L->pools[R->pool];
  int st = R->coords[CO_PP];
  PUTS("{\"rank\":");
  put_i64(sb, r);
  PUTS(",\"node\":");
  put_i64(sb, R->node);
  PUTS(",\"local_rank\":");
  put_i64(sb, R->local_rank);
  PUTS(",\"device\":");
  put_i64(sb, R->device);
  PUTS(",\"pool\":");
  put_q(sb, E->pool[R->pool]);
  PUTS(",\"instance\":");
  put_i64(sb, R->instance);
  PUTS(",\"coords\":{");
  for (int c = 0; c < CO__COUNT; c++) {
    if (c) fb_putc(sb, ',');
    put_q(sb, E->coord_key[c]);
    put_i64(sb, R->coords[c]);
  }
  PUTS("},\"groups\":{");
  bool first = true;
  for (int k = 0; k < GK__COUNT; k++) {
    if (R->group[k] < 0) continue;
    if (!first) fb_putc(sb, ',');
    first = false;
    put_q(sb, E->kind_key[k]);
    put_i64(sb, R->group[k]);
  }
  PUTS("},\"shard\":{");
  int64_t sh[SH__COUNT][2];
  lay_rank_shards(L, s, r, sh);
  for (int k = 0; k < SH__COUNT; k++) {
    if (k) fb_putc(sb, ',');
    put_q(sb, E->shard_key[k]);
    put_range(sb, sh[k]);
  }
  PUTS("},\"memory\":{");
  for (int m = 0; m < MEM__COUNT; m++) {
    if (m) fb_putc(sb, ',');
    put_q(sb, E->mem_key[m]);
    put_i64(sb, P->mem ? P->mem[st][m] : 0);
  }
  PUTS("},\"kv\":{\"bytes_per_token\":");
  put_i64(sb, P->kv_bytes_per_token ? P->kv_bytes_per_token[st] : 0);
  PUTS(",\"block_tokens\":");
  put_i64(sb, P->kv_block_tokens);
  PUTS(",\"blocks\":");
  put_i64(sb, P->kv_blocks ? P->kv_blocks[st] : 0);
  if (P->kv_draft_bytes_per_token && P->kv_draft_bytes_per_token[st] > 0) {
    PUTS(",\"draft_bytes_per_token\":");
    put_i64(sb, P->kv_draft_bytes_per_token[st]);
  }
  PUTS("}}");
}

static void emit_group(StrBuf *sb, const Layout *L, const EmitNames *E, int64_t gi) {
  const LayGroup *G = &L->groups[gi];
  PUTS("{\"id\":");
  put_i64(sb, gi);
  PUTS(",\"kind\":");
  put_q(sb, E->kind_val[G->kind]);
  PUTS(",\"pool\":");
  if (G->pool < 0) PUTS("null");
  else put_q(sb, E->pool[G->pool]);
  PUTS(",\"instance\":");
  if (G->instance < 0) PUTS("null");
  else put_i64(sb, G->instance);
  const int32_t *m = L->members + G->off;
  if (G->kind == GK_WORLD) {
    /* Every rank, in order: written as a span so that node files, which
     * all carry the world group, stay small at any scale. */
    RP_ASSERT(G->n == L->nranks);
    PUTS(",\"span\":[0,");
    put_i64(sb, G->n);
    PUTS("]}");
    return;
  }
  PUTS(",\"ranks\":[");
  for (int32_t j = 0; j < G->n; j++) {
    if (j) fb_putc(sb, ',');
    put_i64(sb, m[j]);
  }
  PUTS("]}");
}

/* Ranks by node: node n holds by_node[node_first[n] .. node_first[n+1]),
 * in global rank order. Built once per compile, shared by the whole plan
 * and every node file. */
typedef struct {
  int64_t *node_first;
  int32_t *by_node;
} NodeIndex;

static void node_index(const Layout *L, NodeIndex *x) {
  x->node_first = rp_calloc((size_t)L->nodes + 1, sizeof *x->node_first);
  for (int64_t r = 0; r < L->nranks; r++) x->node_first[L->ranks[r].node + 1]++;
  for (int64_t n = 0; n < L->nodes; n++) x->node_first[n + 1] += x->node_first[n];
  x->by_node = rp_malloc((size_t)(L->nranks ? L->nranks : 1) * sizeof *x->by_node);
  int64_t *fill = rp_malloc((size_t)(L->nodes ? L->nodes : 1) * sizeof *fill);
  memcpy(fill, x->node_first, (size_t)L->nodes * sizeof *fill);
  for (int64_t r = 0; r < L->nranks; r++) x->by_node[fill[L->ranks[r].node]++] = (int32_t)r;
  free(fill);
}

static void node_index_free(NodeIndex *x) {
  free(x->node_first);
  free(x->by_node);
}

static bool pool_on_node(const Layout *L, size_t p, int32_t node) {
  const LayPool *P = &L->pools[p];
  for (int64_t r = P->first_rank; r < P->first_rank + P->nranks; r++)
    if (L->ranks[r].node == node) return true;
  return false;
}

/* The kv_reshard key: the maps between the plan's prefill and decode pools
 * (reshard.c builds them), all of them or those with a pool on node. */
static void emit_kv_reshard(StrBuf *sb, const Spec *s, const Layout *L, int32_t node) {
  Diags scratch;
  diags_init(&scratch);
  RsPlan P;
  bool ok = rs_plan_build(&scratch, s, L, &P);
  diags_free(&scratch);
  sb_puts(sb, "  \"kv_reshard\": [");
  int64_t T = s->workload.input_tokens.set ? s->workload.input_tokens.v : 0;
  bool first = true;
  for (size_t i = 0; ok && i < P.npairs; i++) {
    const RsPair *q = &P.pairs[i];
    if (node >= 0 && !pool_on_node(L, q->prefill, node) && !pool_on_node(L, q->decode, node))
      continue;
    sb_puts(sb, first ? "\n    {\"prefill\":" : ",\n    {\"prefill\":");
    first = false;
    put_str(sb, L->pools[q->prefill].name);
    sb_puts(sb, ",\"decode\":");
    put_str(sb, L->pools[q->decode].name);
    sb_puts(sb, ",\"transfers\":[");
    for (size_t k = 0; k < q->map.xfers.len; k++) {
      const RsTransfer *x = &q->map.xfers.items[k];
      sb_printf(sb, "%s\n      {\"src\":%lld,\"dst\":%lld,\"layers\":[%lld,%lld],\"kv_heads\":[%lld,%lld],\"tokens\":",
                k ? "," : "", (long long)x->src, (long long)x->dst, (long long)x->layer_begin,
                (long long)x->layer_end, (long long)x->head_begin, (long long)x->head_end);
      bool chunked = x->tokens.nchunks > 1, strided = x->tokens.stride > 1;
      if (!chunked && !strided) {
        sb_puts(sb, "\"all\"");
      } else {
        sb_putc(sb, '{');
        if (chunked) {
          RsTokens c = x->tokens;
          c.stride = 1;
          c.offset = 0;
          int64_t *rg = NULL;
          size_t n = rs_tokens_ranges(&c, T, &rg);
          sb_puts(sb, "\"ranges\":[");
          for (size_t j = 0; j < n; j++)
            sb_printf(sb, "%s[%lld,%lld]", j ? "," : "", (long long)rg[2 * j], (long long)rg[2 * j + 1]);
          sb_putc(sb, ']');
          free(rg);
        }
        if (strided)
          sb_printf(sb, "%s\"stride\":%lld,\"offset\":%lld", chunked ? "," : "",
                    (long long)x->tokens.stride, (long long)x->tokens.offset);
        sb_putc(sb, '}');
      }
      sb_printf(sb, ",\"bytes_per_token\":%lld}", (long long)x->bytes_per_token);
    }
    sb_putc(sb, ']');
    /* One request's figures at the workload's input_tokens, so that a
     * reader sees the transfer's size and time per link class without
     * redoing the placement arithmetic. */
    if (q->has_cost)
      sb_printf(sb, ",\n     \"request\":{\"input_tokens\":%lld,\"bytes\":%lld,\"bytes_scale_up\":%lld,"
                    "\"bytes_scale_out\":%lld,\"time_scale_up_ms\":%.6f,\"time_scale_out_ms\":%.6f,"
                    "\"time_ms\":%.6f}",
                (long long)T, (long long)q->cost.bytes_total, (long long)q->cost.bytes_scale_up,
                (long long)q->cost.bytes_scale_out, q->cost.time_scale_up_s * 1e3,
                q->cost.time_scale_out_s * 1e3, q->cost.time_s * 1e3);
    sb_putc(sb, '}');
  }
  sb_puts(sb, first ? "],\n" : "\n  ],\n");
  if (ok) rs_plan_free(&P);
}


/* The kv_reshard line (the reshard stage writes it, reshard.h) for the
 * whole plan (node < 0) or one node. */
static char *kv_reshard_text(const Spec *s, const Layout *L, int32_t node) {
  StrBuf sb;
  sb_init(&sb);
  emit_kv_reshard(&sb, s, L, node);
  return sb_take(&sb);
}

/* Where emit_doc's text goes: the StrBuf alone (no Sink), or a file in
 * pieces of EMIT_CHUNK bytes written as the ranks and groups are
 * formatted. A 131,072-rank plan is some 200 MB: built whole, its buffer
 * costs as much kernel time in page faults and zeroed pages as the copy
 * to the file itself (perf), and as much memory again as the layout. */
typedef struct {
  RpOut *out;   /* its err is the first write error */
  size_t total; /* bytes written */
} Sink;

enum { EMIT_CHUNK = 4 << 20 };

static void sink_flush(StrBuf *sb, Sink *k) {
  if (!k) return;
  if (sb->len) rp_out_write(k->out, sb->buf, sb->len);
  k->total += sb->len;
  sb->len = 0;
}

static inline void sink_maybe(StrBuf *sb, Sink *k) {
  if (k && sb->len >= EMIT_CHUNK) sink_flush(sb, k);
}

/* The document's opening keys, through the hardware section. */
static void emit_head(StrBuf *sb, const Spec *s, const Layout *L, int32_t node) {
  PUTS("{\n  \"format\": \"" PLAN_FORMAT "\",\n  \"compiler\": \"rankplan " RP_VERSION "\",\n");
  PUTS("  \"spec_sha256\": ");
  put_str(sb, s->sha256);
  PUTS(",\n  \"name\": ");
  put_str(sb, s->name.set ? s->name.v : "");
  PUTS(",\n  \"engine\": ");
  put_str(sb, engine_name(L->engine));
  if (node >= 0) {
    PUTS(",\n  \"node\": ");
    put_i64(sb, node);
  }
  PUTS(",\n  \"world_size\": ");
  put_i64(sb, L->world_size);
  PUTS(",\n  \"scale_up_domain\": ");
  put_i64(sb, L->domain);
  PUTS(",\n");
  emit_hardware(sb, s, L);
  launch_key_emit(sb, s, L);
}

/* nodes: every node of the cluster with the ranks placed on it; a node
 * file lists only its own node. */
static void emit_nodes(StrBuf *sb, const Layout *L, int32_t node, const NodeIndex *x) {
  PUTS("  \"nodes\": [");
  int64_t n0 = node < 0 ? 0 : node, n1 = node < 0 ? L->nodes : node + 1;
  for (int64_t n = n0; n < n1; n++) {
    fb_puts(sb, n > n0 ? ",\n    {\"node\":" : "\n    {\"node\":");
    put_i64(sb, n);
    PUTS(",\"gpus\":");
    put_i64(sb, L->gpus_per_node);
    PUTS(",\"ranks\":[");
    for (int64_t i = x->node_first[n]; i < x->node_first[n + 1]; i++) {
      if (i > x->node_first[n]) fb_putc(sb, ',');
      put_i64(sb, x->by_node[i]);
    }
    PUTS("]}");
  }
  fb_puts(sb, n1 > n0 ? "\n  ],\n" : "],\n");
}

/* ranks: all of them, or the node's. */
static void emit_ranks(StrBuf *sb, const Spec *s, const Layout *L, const EmitNames *E,
                       int32_t node, const NodeIndex *x, Sink *sink) {
  PUTS("  \"ranks\": [");
  int64_t i0 = node < 0 ? 0 : x->node_first[node], i1 = node < 0 ? L->nranks : x->node_first[node + 1];
  for (int64_t i = i0; i < i1; i++) {
    fb_puts(sb, i > i0 ? ",\n    " : "\n    ");
    emit_rank(sb, s, L, E, node < 0 ? i : x->by_node[i]);
    sink_maybe(sb, sink);
  }
  fb_puts(sb, i1 > i0 ? "\n  ],\n" : "],\n");
}

/* groups: all, or those a rank of the node belongs to, by id. */
static void emit_groups(StrBuf *sb, const Layout *L, const EmitNames *E, int32_t node,
                        const NodeIndex *x, Sink *sink) {
  PUTS("  \"groups\": [");
  bool first = true;
  if (node < 0) {
    for (int64_t g = 0; g < L->ngroups; g++) {
      fb_puts(sb, first ? "\n    " : ",\n    ");
      first = false;
      emit_group(sb, L, E, g);
      sink_maybe(sb, sink);
    }
  } else {
    /* The node's groups: collect, sort, drop repeats. */
    RP_VEC(int32_t) ids = {0};
    for (int64_t i = x->node_first[node]; i < x->node_first[node + 1]; i++)
      for (int k = 0; k < GK__COUNT; k++) {
        int32_t g = L->ranks[x->by_node[i]].group[k];
        if (g >= 0) rp_vec_push(&ids, g);
      }
    if (ids.len) qsort(ids.items, ids.len, sizeof *ids.items, cmp_i32);
    for (size_t i = 0; i < ids.len; i++) {
      if (i && ids.items[i] == ids.items[i - 1]) continue;
      fb_puts(sb, first ? "\n    " : ",\n    ");
      first = false;
      emit_group(sb, L, E, ids.items[i]);
    }
    free(ids.items);
  }
  fb_puts(sb, first ? "],\n" : "\n  ],\n");
}

/* `key` (the JSON text up to the value, e.g. ",\"tpot_ms\":") and a
 * double with six decimals. */
static void put_num_field(StrBuf *sb, const char *key, double v) {
  fb_puts(sb, key);
  put_double(sb, v);
}

/* One phase of a pool's estimates (docs/plan.md, "estimates"). */
static void emit_phase(StrBuf *sb, const PlanPhaseEst *p, bool decode, const PlanPoolEst *e) {
  if (decode) {
    PUTS("{\"batch\":");
    put_i64(sb, e->batch);
    PUTS(",\"step_ms\":");
  } else {
    PUTS("{\"time_ms\":");
  }
  put_double(sb, p->time_ms);
  put_num_field(sb, decode ? ",\"output_tok_s_per_gpu\":" : ",\"input_tok_s_per_gpu\":",
                p->tok_s_per_gpu);
  put_num_field(sb, ",\"compute_ms\":", p->compute_ms);
  put_num_field(sb, ",\"hbm_ms\":", p->hbm_ms);
  put_num_field(sb, ",\"overhead_ms\":", p->overhead_ms);
  PUTS(",\"comm_ms\":{");
  for (int k = 0; k < PEC__COUNT; k++) {
    sb_printf(sb, "%s\"%s\":", k ? "," : "", plan_est_comm_name((PlanEstComm)k));
    put_double(sb, p->comm_ms[k]);
  }
  PUTS("}}");
}

/* estimates.pools[]: per pool, its phases and the batch to configure. */
static void emit_est_pools(StrBuf *sb, const Layout *L, const PlanEstimates *est) {
  PUTS(",\"pools\":[");
  for (size_t i = 0; i < est->npools; i++) {
    const PlanPoolEst *e = &est->pools[i];
    fb_puts(sb, i ? ",{\"pool\":" : "{\"pool\":");
    put_str(sb, L->pools[e->pool].name);
    PUTS(",\"prefill\":");
    if (e->has_prefill) emit_phase(sb, &e->prefill, false, e);
    else PUTS("null");
    PUTS(",\"decode\":");
    if (e->has_decode) emit_phase(sb, &e->decode, true, e);
    else PUTS("null");
    PUTS(",\"max_batch\":");
    if (e->has_decode) put_i64(sb, e->max_batch);
    else PUTS("null");
    PUTS("}");
  }
  PUTS("]");
}

/* estimates and the warnings and notes (errors stop the compile). */
static void emit_tail(StrBuf *sb, const Diags *d, const Layout *L, const PlanEstimates *est) {
  PUTS("  \"estimates\": ");
  if (est && est->has) {
    put_num_field(sb, "{\"ttft_ms\":", est->ttft_ms);
    put_num_field(sb, ",\"tpot_ms\":", est->tpot_ms);
    put_num_field(sb, ",\"throughput_tok_s\":", est->throughput_tok_s);
    put_num_field(sb, ",\"goodput_tok_s_per_gpu\":", est->goodput_tok_s_per_gpu);
    emit_est_pools(sb, L, est);
    PUTS("}");
  } else {
    PUTS("null");
  }
  PUTS(",\n  \"diagnostics\": [");
  bool first = true;
  for (size_t i = 0; d && i < d->list.len; i++) {
    const Diag *g = d->list.items[i];
    if (g->sev == SEV_ERROR) continue;
    fb_puts(sb, first ? "\n    {\"code\":" : ",\n    {\"code\":");
    first = false;
    put_str(sb, diag_info(g->code)->code);
    PUTS(",\"slug\":");
    put_str(sb, diag_info(g->code)->slug);
    PUTS(",\"severity\":");
    put_str(sb, sev_name(g->sev));
    PUTS(",\"message\":");
    put_str(sb, g->msg);
    PUTS(",\"line\":");
    put_i64(sb, g->loc.line);
    PUTS(",\"column\":");
    put_i64(sb, g->loc.col);
    PUTS("}");
  }
  fb_puts(sb, first ? "]\n}\n" : "\n  ]\n}\n");
}

/* Writes the plan document; kv is the kv_reshard line. Without a sink the
 * text is returned (malloc'd) with its length in *len; with one, the text
 * goes to the sink's file, NULL is returned and *len is the bytes
 * written (the sink's err says whether they all were). */
static char *emit_doc(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                      int32_t node, const NodeIndex *x, const char *kv, Sink *sink, size_t *len) {
  RP_ASSERT(L->placed);
  StrBuf sbv;
  StrBuf *sb = &sbv;
  sb_init(sb);
  EmitNames E;
  emit_names_init(&E, L);
  /* Reserve about what a whole plan takes (measured: some 700 bytes per
   * rank line, 8 per group member, 60 per group), so the buffer is not
   * copied over and over while it grows. */
  if (sink) fb__grow(sb, (size_t)EMIT_CHUNK + 4096);
  else if (node < 0) fb__grow(sb, (size_t)(L->nranks * 700 + L->nmembers * 8 + L->ngroups * 60));
  emit_head(sb, s, L, node);
  emit_nodes(sb, L, node, x);
  emit_pools(sb, L);
  emit_ranks(sb, s, L, &E, node, x, sink);
  emit_groups(sb, L, &E, node, x, sink);
  fb_puts(sb, kv);
  emit_tail(sb, d, L, est);
  emit_names_free(&E);
  if (sink) {
    sink_flush(sb, sink);
    sb_free(sb);
    *len = sink->total;
    return NULL;
  }
  fb_put(sb, "", 0);
  sb->buf[sb->len] = '\0';
  *len = sb->len;
  return sb_take(sb);
}

char *emit_plan(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                int32_t node, size_t *len) {
  NodeIndex x;
  node_index(L, &x);
  char *kv = kv_reshard_text(s, L, node);
  char *text = emit_doc(d, s, L, est, node, &x, kv, NULL, len);
  free(kv);
  node_index_free(&x);
  return text;
}

/* Creates dir (one level) when missing. */
/* The kv_reshard lines already made, by the set of pools on a node. */
typedef RP_VEC(struct KvLine { unsigned char *pools; char *kv; }) KvCache;

static const char *kv_for_node(KvCache *c, const Layout *L, const Spec *s, const NodeIndex *x,
                               int64_t n) {
  size_t np = L->npools ? (size_t)L->npools : 1;
  unsigned char *mask = rp_calloc(np, 1);
  for (int64_t i = x->node_first[n]; i < x->node_first[n + 1]; i++)
    mask[L->ranks[x->by_node[i]].pool] = 1;
  for (size_t k = 0; k < c->len; k++)
    if (memcmp(c->items[k].pools, mask, np) == 0) {
      free(mask);
      return c->items[k].kv;
    }
  struct KvLine e = {mask, kv_reshard_text(s, L, (int32_t)n)};
  rp_vec_push(c, e);
  return e.kv;
}

static void kv_cache_free(KvCache *c) {
  for (size_t k = 0; k < c->len; k++) {
    free(c->items[k].pools);
    free(c->items[k].kv);
  }
  free(c->items);
}

/* The files of one compile: every node file and the whole plan, each in
 * its own temporary (outfile.h) until all are written. */
typedef struct {
  RpOut *node;    /* [nodes] */
  int64_t staged; /* node files written to their temporaries */
  RpOut whole;
  bool have_whole;
  int dfd;        /* the node files' directory, or -1 */
} Staged;

/* Writes every node file to its temporary, without an fsync each: the
 * directory's file system is flushed once (syncfs) before the renames; at
 * 16,384 nodes that is the difference between seconds and minutes. The
 * kv_reshard line depends only on which pools have ranks on the node, so
 * it is computed once per distinct set of pools. */
static int stage_node_files(const Diags *d, const Spec *s, const Layout *L,
                            const PlanEstimates *est, const NodeIndex *x, const char *dir,
                            Staged *st, char **what) {
  int err = rp_out_dir(dir);
  if (!err && (st->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) err = errno;
  if (err) {
    *what = rp_strdup(dir);
    return err;
  }
  KvCache cache = {0};
  st->node = rp_calloc((size_t)L->nodes, sizeof *st->node);
  for (int64_t n = 0; n < L->nodes && !err; n++) {
    char *dst = rp_sprintf("%s/node-%lld.plan.json", dir, (long long)n);
    err = rp_out_open(&st->node[n], dst);
    if (!err) {
      st->staged = n + 1;
      size_t len;
      char *text = emit_doc(d, s, L, est, (int32_t)n, x, kv_for_node(&cache, L, s, x, n), NULL, &len);
      rp_out_write(&st->node[n], text, len);
      free(text);
      err = rp_out_close(&st->node[n], false);
    }
    if (err) *what = dst;
    else free(dst);
  }
  kv_cache_free(&cache);
  return err;
}

/* Writes the whole plan to its temporary, streamed as it is formatted. */
static int stage_whole(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                       const NodeIndex *x, const char *path, Staged *st) {
  int err = rp_out_open(&st->whole, path);
  if (err) return err;
  st->have_whole = true;
  Sink k = {&st->whole, 0};
  size_t len;
  char *kv = kv_reshard_text(s, L, -1);
  free(emit_doc(d, s, L, est, -1, x, kv, &k, &len));
  free(kv);
  return rp_out_close(&st->whole, true);
}

/* Renames every staged file over its target (the node files first), or
 * with err set removes them all; then frees st. */
static int publish(Staged *st, int err, const char *path, const char *dir, char **what) {
  if (!err && st->dfd >= 0 && syncfs(st->dfd) != 0) {
    err = errno;
    *what = rp_strdup(dir);
  }
  for (int64_t n = 0; n < st->staged; n++) {
    if (err) rp_out_abort(&st->node[n]);
    else if ((err = rp_out_publish(&st->node[n])) != 0)
      *what = rp_sprintf("%s/node-%lld.plan.json", dir, (long long)n);
  }
  if (st->have_whole && err) rp_out_abort(&st->whole);
  else if (st->have_whole && (err = rp_out_publish(&st->whole)) != 0) *what = rp_strdup(path);
  if (!err && st->dfd >= 0 && fsync(st->dfd) != 0) {
    err = errno;
    *what = rp_strdup(dir);
  }
  if (st->dfd >= 0) close(st->dfd);
  free(st->node);
  return err;
}

int emit_plan_files(const Diags *d, const Spec *s, const Layout *L, const PlanEstimates *est,
                    const char *path, const char *split_dir, char **what) {
  *what = NULL;
  NodeIndex x;
  node_index(L, &x);
  /* Every file is written before any is renamed: a run that fails
   * half-way (a write error, exit 70, a signal) leaves the old files as
   * they were and no new file. */
  Staged st = {NULL, 0, {0}, false, -1};
  int err = 0;
  if (split_dir) err = stage_node_files(d, s, L, est, &x, split_dir, &st, what);
  if (!err && path && (err = stage_whole(d, s, L, est, &x, path, &st)) != 0) *what = rp_strdup(path);
  err = publish(&st, err, path, split_dir, what);
  if (!err) rp_out_dir_keep();
  node_index_free(&x);
  return err;
}
