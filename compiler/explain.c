/*
 * explain.c: `rankplan explain`: a loaded Plan as tables for people or as
 * JSON for tools.
 *
 * Input: a Plan that plan_load() accepted (its invariants hold, so nothing
 * here re-checks). Output: text on a stream. Every number printed comes from
 * the plan; explain computes no layout of its own, so what it shows is
 * exactly what the runtime will do.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "reshard.h"

/* ---- helpers ------------------------------------------------------------- */

static const char *fmt_range(char *buf, size_t n, const int64_t r[2]) {
  snprintf(buf, n, "[%lld,%lld)", (long long)r[0], (long long)r[1]);
  return buf;
}

/* "0-7" for a contiguous ascending run, else the first few ranks. */
static void fmt_members(char *buf, size_t n, const PlanGroup *g) {
  bool run = true;
  for (int32_t j = 1; j < g->n; j++)
    if (g->ranks[j] != g->ranks[j - 1] + 1) run = false;
  if (run && g->n > 2) {
    snprintf(buf, n, "%d-%d", g->ranks[0], g->ranks[g->n - 1]);
    return;
  }
  size_t at = 0;
  buf[0] = '\0';
  for (int32_t j = 0; j < g->n && at + 16 < n; j++)
    at += (size_t)snprintf(buf + at, n - at, "%s%d", j ? "," : "", g->ranks[j]);
  if (at + 16 >= n) snprintf(buf + at, n - at, ",...");
}

static int64_t nodes_used(const Plan *p) {
  int64_t k = 0;
  for (size_t i = 0; i < p->nnodes; i++)
    if (p->nodes[i].nranks > 0) k++;
  return k;
}

/* First rank of each (pool, pp stage): the rank classes whose memory is
 * the same for every member. */
static const PlanRank *stage_rank(const Plan *p, size_t pool, int64_t stage) {
  for (int64_t i = 0; i < p->nranks; i++)
    if (p->ranks[i].pool == (int32_t)pool && p->ranks[i].coords[CO_PP] == stage) return &p->ranks[i];
  return NULL;
}

static json_t *range_json(const int64_t r[2]) { return json_pack("[II]", (json_int_t)r[0], (json_int_t)r[1]); }

static json_t *rank_json(const Plan *p, const PlanRank *R) {
  json_t *o = json_object();
  json_object_set_new(o, "rank", json_integer(R->rank));
  json_object_set_new(o, "node", json_integer(R->node));
  json_object_set_new(o, "local_rank", json_integer(R->local_rank));
  json_object_set_new(o, "device", json_integer(R->device));
  json_object_set_new(o, "pool", json_string(p->pools[R->pool].name));
  json_object_set_new(o, "instance", json_integer(R->instance));
  json_t *c = json_object();
  for (int k = 0; k < CO__COUNT; k++) json_object_set_new(c, plan_coord_name((CoordKind)k), json_integer(R->coords[k]));
  json_object_set_new(o, "coords", c);
  json_t *g = json_object();
  for (int k = 0; k < GK__COUNT; k++) {
    const PlanGroup *G = plan_rank_group(p, R, (GroupKind)k);
    if (!G) continue;
    json_t *m = json_array();
    for (int32_t j = 0; j < G->n; j++) json_array_append_new(m, json_integer(G->ranks[j]));
    json_object_set_new(g, plan_kind_name((GroupKind)k), json_pack("{s:i,s:o}", "id", G->id, "ranks", m));
  }
  json_object_set_new(o, "groups", g);
  json_t *s = json_object();
  for (int k = 0; k < SH__COUNT; k++) json_object_set_new(s, plan_shard_name((ShardKind)k), range_json(R->shard[k]));
  json_object_set_new(o, "shard", s);
  json_t *m = json_object();
  for (int k = 0; k < MEM__COUNT; k++) json_object_set_new(m, plan_mem_name((MemKind)k), json_integer(R->memory[k]));
  json_object_set_new(o, "memory", m);
  json_object_set_new(o, "kv", json_pack("{s:I,s:I,s:I}", "bytes_per_token", (json_int_t)R->kv_bytes_per_token,
                                         "block_tokens", (json_int_t)R->kv_block_tokens, "blocks",
                                         (json_int_t)R->kv_blocks));
  return o;
}

/* ---- views --------------------------------------------------------------- */

static void text_summary(FILE *out, const Plan *p) {
  fprintf(out, "plan: %s\n", p->path);
  fprintf(out, "compiler: %s, spec sha256 %.16s...\n", p->compiler, p->spec_sha256);
  fprintf(out, "world: %lld ranks on %lld of %zu nodes", (long long)p->world_size,
          (long long)nodes_used(p), p->nnodes);
  if (p->nnodes) fprintf(out, " (%d GPUs each)", p->nodes[0].gpus);
  if (p->partial) fprintf(out, "; this file holds node %d only (%lld ranks)", p->partial_node, (long long)p->nranks);
  fputc('\n', out);
  fprintf(out, "\n%-12s %-8s %8s %4s %4s %4s %4s %4s %4s %4s %4s  %-15s %s\n", "pool", "role",
          "replicas", "tp", "cp", "dp", "pp", "ep", "etp", "edp", "dcp", "ranks", "layers per stage");
  for (size_t i = 0; i < p->npools; i++) {
    const PlanPool *P = &p->pools[i];
    char rr[40];
    snprintf(rr, sizeof rr, "%lld-%lld", (long long)P->first_rank, (long long)(P->first_rank + P->nranks - 1));
    fprintf(out, "%-12s %-8s %8lld", P->name, P->role, (long long)P->replicas);
    for (int c = 0; c < CO__COUNT; c++) fprintf(out, " %4lld", (long long)P->size[c]);
    fprintf(out, "  %-15s ", rr);
    for (int64_t s = 0; s < P->size[CO_PP]; s++)
      fprintf(out, "%s%lld", s ? "," : "", (long long)P->layer_partition[s]);
    fputc('\n', out);
  }
  int64_t per_kind[GK__COUNT] = {0};
  for (int64_t g = 0; g < p->ngroups; g++) per_kind[p->groups[g].kind]++;
  fprintf(out, "\ngroups: %lld (", (long long)p->ngroups);
  bool first = true;
  for (int k = 0; k < GK__COUNT; k++) {
    if (!per_kind[k]) continue;
    fprintf(out, "%s%s %lld", first ? "" : ", ", plan_kind_name((GroupKind)k), (long long)per_kind[k]);
    first = false;
  }
  fprintf(out, ")\n");
  size_t nx = 0;
  for (size_t i = 0; i < p->nreshard; i++) nx += p->reshard[i].ntransfers;
  fprintf(out, "kv_reshard: %zu pool pair(s), %zu transfers\n", p->nreshard, nx);
  if (p->has_estimates)
    fprintf(out, "estimates: ttft %.1f ms, tpot %.2f ms, throughput %.0f tok/s, goodput %.1f tok/s/gpu\n",
            p->ttft_ms, p->tpot_ms, p->throughput_tok_s, p->goodput_tok_s_per_gpu);
  else
    fprintf(out, "estimates: none (the plan was not searched)\n");
  fprintf(out, "diagnostics: %zu\n", p->ndiags);
  for (size_t i = 0; i < p->ndiags; i++)
    fprintf(out, "  %s %s: %s\n", p->diags[i].severity, p->diags[i].code, p->diags[i].message);
}

static json_t *json_summary(const Plan *p) {
  json_t *o = json_object();
  json_object_set_new(o, "compiler", json_string(p->compiler));
  json_object_set_new(o, "spec_sha256", json_string(p->spec_sha256));
  json_object_set_new(o, "world_size", json_integer(p->world_size));
  json_object_set_new(o, "nodes", json_integer((json_int_t)p->nnodes));
  json_object_set_new(o, "nodes_used", json_integer(nodes_used(p)));
  json_object_set_new(o, "node", p->partial ? json_integer(p->partial_node) : json_null());
  json_t *pools = json_array();
  for (size_t i = 0; i < p->npools; i++) {
    const PlanPool *P = &p->pools[i];
    json_t *q = json_pack("{s:s,s:s,s:I}", "name", P->name, "role", P->role, "replicas", (json_int_t)P->replicas);
    for (int c = 0; c < CO__COUNT; c++) json_object_set_new(q, plan_coord_name((CoordKind)c), json_integer(P->size[c]));
    int64_t r[2] = {P->first_rank, P->first_rank + P->nranks};
    json_object_set_new(q, "ranks", range_json(r));
    json_t *lp = json_array();
    for (int64_t s = 0; s < P->size[CO_PP]; s++) json_array_append_new(lp, json_integer(P->layer_partition[s]));
    json_object_set_new(q, "layer_partition", lp);
    json_array_append_new(pools, q);
  }
  json_object_set_new(o, "pools", pools);
  json_t *gk = json_object();
  int64_t per_kind[GK__COUNT] = {0};
  for (int64_t g = 0; g < p->ngroups; g++) per_kind[p->groups[g].kind]++;
  for (int k = 0; k < GK__COUNT; k++) json_object_set_new(gk, plan_kind_name((GroupKind)k), json_integer(per_kind[k]));
  json_object_set_new(o, "groups", gk);
  size_t nx = 0;
  for (size_t i = 0; i < p->nreshard; i++) nx += p->reshard[i].ntransfers;
  json_object_set_new(o, "kv_reshard_transfers", json_integer((json_int_t)nx));
  json_object_set_new(o, "diagnostics", json_integer((json_int_t)p->ndiags));
  return o;
}

/* A rank's experts: its contiguous range, or, when an expert_placement
 * hook wrote the pool's expert_map, how many map slots it holds. */
static const char *fmt_experts(char *buf, size_t n, const Plan *p, const PlanRank *R) {
  const PlanPool *P = &p->pools[R->pool];
  if (P->expert_map && P->expert_slots > 0) {
    snprintf(buf, n, "map:%lld", (long long)P->expert_slots);
    return buf;
  }
  return fmt_range(buf, n, R->shard[SH_EXPERTS]);
}

static void text_ranks(FILE *out, const Plan *p) {
  fprintf(out, "%6s %5s %6s %-12s %4s %4s %4s %4s %4s %4s %4s  %-10s %-10s %-10s\n", "rank", "node", "device",
          "pool", "inst", "tp", "cp", "dp", "pp", "ep", "edp", "layers", "kv_heads", "experts");
  for (int64_t i = 0; i < p->nranks; i++) {
    const PlanRank *R = &p->ranks[i];
    char a[32], b[32], c[32];
    fprintf(out, "%6d %5d %6d %-12s %4d %4d %4d %4d %4d %4d %4d  %-10s %-10s %-10s\n", R->rank, R->node,
            R->device, p->pools[R->pool].name, R->instance, R->coords[CO_TP], R->coords[CO_CP],
            R->coords[CO_DP], R->coords[CO_PP], R->coords[CO_EP], R->coords[CO_EDP],
            fmt_range(a, sizeof a, R->shard[SH_LAYERS]), fmt_range(b, sizeof b, R->shard[SH_KV_HEADS]),
            fmt_experts(c, sizeof c, p, R));
  }
}

static void text_rank(FILE *out, const Plan *p, const PlanRank *R) {
  char a[64];
  fprintf(out, "rank %d: node %d, device %d, local rank %d, pool `%s` instance %d\n", R->rank, R->node,
          R->device, R->local_rank, p->pools[R->pool].name, R->instance);
  fprintf(out, "coords:");
  for (int c = 0; c < CO__COUNT; c++) fprintf(out, " %s=%d", plan_coord_name((CoordKind)c), R->coords[c]);
  fprintf(out, "\nshard:");
  for (int k = 0; k < SH__COUNT; k++)
    fprintf(out, " %s %s", plan_shard_name((ShardKind)k), fmt_range(a, sizeof a, R->shard[k]));
  const PlanPool *P = &p->pools[R->pool];
  if (P->expert_map && P->expert_slots > 0) {
    /* The hook's expert map: ep rank e holds slots [e*S, (e+1)*S). */
    fprintf(out, "\nexperts (expert_map, ep rank %d):", R->coords[CO_EP]);
    const int32_t *m = P->expert_map + (int64_t)R->coords[CO_EP] * P->expert_slots;
    for (int64_t i = 0; i < P->expert_slots; i++) fprintf(out, "%s%d", i ? ", " : " ", m[i]);
  }
  fprintf(out, "\n%-10s %8s %6s  %s\n", "group", "id", "size", "ranks");
  for (int k = 0; k < GK__COUNT; k++) {
    const PlanGroup *G = plan_rank_group(p, R, (GroupKind)k);
    if (!G) continue;
    char m[256];
    fmt_members(m, sizeof m, G);
    fprintf(out, "%-10s %8d %6d  %s\n", plan_kind_name((GroupKind)k), G->id, G->n, m);
  }
  fprintf(out, "memory:");
  for (int k = 0; k < MEM__COUNT; k++)
    fprintf(out, " %s %s%s", plan_mem_name((MemKind)k), rp_fmt_bytes(R->memory[k], a, sizeof a),
            k + 1 < MEM__COUNT ? "," : "");
  fprintf(out, "\nkv: %lld bytes/token, %lld blocks of %lld tokens (%lld tokens)\n",
          (long long)R->kv_bytes_per_token, (long long)R->kv_blocks, (long long)R->kv_block_tokens,
          (long long)(R->kv_blocks * R->kv_block_tokens));
}

static void text_groups(FILE *out, const Plan *p, GroupKind k) {
  fprintf(out, "%8s %-12s %8s %6s  %s\n", "id", "pool", "instance", "size", "ranks");
  for (int64_t g = 0; g < p->ngroups; g++) {
    const PlanGroup *G = &p->groups[g];
    if (G->kind != k) continue;
    char m[256];
    fmt_members(m, sizeof m, G);
    if (G->pool < 0)
      fprintf(out, "%8d %-12s %8s %6d  %s\n", G->id, "-", "-", G->n, m);
    else
      fprintf(out, "%8d %-12s %8d %6d  %s\n", G->id, p->pools[G->pool].name, G->instance, G->n, m);
  }
}

static void text_memory(FILE *out, const Plan *p) {
  fprintf(out, "%-12s %5s %9s  %-11s %-11s %-11s %-11s %-11s %-11s %12s %10s\n", "pool", "stage", "layers",
          "weights", "kv_cache", "activations", "workspace", "reserved", "capacity", "kv B/token", "kv blocks");
  for (size_t i = 0; i < p->npools; i++) {
    for (int64_t s = 0; s < p->pools[i].size[CO_PP]; s++) {
      const PlanRank *R = stage_rank(p, i, s);
      if (!R) continue; /* a node file without this stage */
      char l[32], b[MEM__COUNT][24];
      for (int k = 0; k < MEM__COUNT; k++) rp_fmt_bytes(R->memory[k], b[k], sizeof b[k]);
      fprintf(out, "%-12s %5lld %9s  %-11s %-11s %-11s %-11s %-11s %-11s %12lld %10lld\n", p->pools[i].name,
              (long long)s, fmt_range(l, sizeof l, R->shard[SH_LAYERS]), b[0], b[1], b[2], b[3], b[4], b[5],
              (long long)R->kv_bytes_per_token, (long long)R->kv_blocks);
    }
  }
}

static json_t *json_memory(const Plan *p) {
  json_t *a = json_array();
  for (size_t i = 0; i < p->npools; i++)
    for (int64_t s = 0; s < p->pools[i].size[CO_PP]; s++) {
      const PlanRank *R = stage_rank(p, i, s);
      if (!R) continue;
      json_t *o = json_pack("{s:s,s:I,s:o}", "pool", p->pools[i].name, "stage", (json_int_t)s, "layers",
                            range_json(R->shard[SH_LAYERS]));
      for (int k = 0; k < MEM__COUNT; k++) json_object_set_new(o, plan_mem_name((MemKind)k), json_integer(R->memory[k]));
      json_object_set_new(o, "kv_bytes_per_token", json_integer(R->kv_bytes_per_token));
      json_object_set_new(o, "kv_blocks", json_integer(R->kv_blocks));
      json_array_append_new(a, o);
    }
  return a;
}

/* The kv_reshard view for tools: every pair's transfers with the bytes of
 * a request of n_tokens (the plan's own input_tokens when 0), and the
 * request's figures per link class as the plan holds them. */
static json_t *json_reshard(const Plan *p, int64_t n_tokens_opt) {
  json_t *a = json_array();
  for (size_t i = 0; i < p->nreshard; i++) {
    const PlanReshard *R = &p->reshard[i];
    int64_t n = n_tokens_opt > 0 ? n_tokens_opt : R->has_request ? R->input_tokens : 0;
    json_t *xs = json_array();
    for (size_t k = 0; k < R->ntransfers; k++) {
      const PlanTransfer *x = &R->transfers[k];
      json_t *tok;
      if (x->tokens == PT_ALL) {
        tok = json_string("all");
      } else {
        tok = json_object();
        if (x->tokens == PT_RANGES) {
          json_t *rg = json_array();
          for (size_t j = 0; j < x->nranges; j++)
            json_array_append_new(rg, json_pack("[I,I]", (json_int_t)x->ranges[j][0], (json_int_t)x->ranges[j][1]));
          json_object_set_new(tok, "ranges", rg);
        }
        if (x->stride > 1 || x->tokens == PT_STRIDE) {
          json_object_set_new(tok, "stride", json_integer(x->stride));
          json_object_set_new(tok, "offset", json_integer(x->offset));
        }
      }
      int64_t b = rs_plan_xfer_bytes(x, n);
      json_array_append_new(
          xs, json_pack("{s:I,s:I,s:[I,I],s:[I,I],s:o,s:I,s:o}", "src", (json_int_t)x->src, "dst",
                        (json_int_t)x->dst, "layers", (json_int_t)x->layers[0], (json_int_t)x->layers[1],
                        "kv_heads", (json_int_t)x->kv_heads[0], (json_int_t)x->kv_heads[1], "tokens", tok,
                        "bytes_per_token", (json_int_t)x->bytes_per_token, "bytes",
                        b >= 0 ? json_integer(b) : json_null()));
    }
    json_t *q = json_null();
    if (R->has_request)
      q = json_pack("{s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "input_tokens", (json_int_t)R->input_tokens, "bytes",
                    (json_int_t)R->bytes, "bytes_scale_up", (json_int_t)R->bytes_scale_up, "bytes_scale_out",
                    (json_int_t)R->bytes_scale_out, "time_scale_up_ms", R->time_scale_up_ms,
                    "time_scale_out_ms", R->time_scale_out_ms, "time_ms", R->time_ms);
    json_array_append_new(a, json_pack("{s:s,s:s,s:o,s:o,s:o}", "prefill", R->prefill, "decode", R->decode,
                                       "tokens", n > 0 ? json_integer(n) : json_null(), "transfers", xs,
                                       "request", q));
  }
  return a;
}

void plan_explain_reshard(FILE *out, const Plan *p, int64_t n_tokens_opt) {
  if (p->nreshard == 0) {
    fprintf(out, "kv_reshard: none (no prefill -> decode pool pair)\n");
    return;
  }
  for (size_t i = 0; i < p->nreshard; i++) {
    const PlanReshard *R = &p->reshard[i];
    /* Without --tokens, the bytes are those of the plan's own request. */
    int64_t n_tokens = n_tokens_opt > 0 ? n_tokens_opt : R->has_request ? R->input_tokens : 0;
    fprintf(out, "kv_reshard %s -> %s: %zu transfers (ranks relative to the serving attention replica)\n",
            R->prefill, R->decode, R->ntransfers);
    fprintf(out, "  %5s    %-5s %-11s %-10s %-24s %12s %14s\n", "src", "dst", "layers", "kv_heads",
            "tokens", "bytes/token", "bytes");
    int64_t total = 0;
    bool known = true;
    for (size_t k = 0; k < R->ntransfers; k++) {
      const PlanTransfer *x = &R->transfers[k];
      char layers[32], heads[32], tok[64], bytes[32];
      snprintf(layers, sizeof layers, "[%lld,%lld)", (long long)x->layers[0], (long long)x->layers[1]);
      snprintf(heads, sizeof heads, "[%lld,%lld)", (long long)x->kv_heads[0], (long long)x->kv_heads[1]);
      if (x->tokens == PT_ALL) {
        snprintf(tok, sizeof tok, "all");
      } else if (x->tokens == PT_STRIDE) {
        snprintf(tok, sizeof tok, "p%%%lld==%lld", (long long)x->stride, (long long)x->offset);
      } else {
        /* A range list, possibly intersected with a stride class. */
        int64_t st = x->stride > 0 ? x->stride : 1, off = x->stride > 0 ? x->offset : 0;
        size_t n = 0;
        for (size_t j = 0; j < x->nranges; j++)
          if (n < sizeof tok)
            n += (size_t)snprintf(tok + n, sizeof tok - n, "%s[%lld,%lld)", j ? "," : "",
                                  (long long)x->ranges[j][0], (long long)x->ranges[j][1]);
        if (n < sizeof tok && st > 1)
          n += (size_t)snprintf(tok + n, sizeof tok - n, " & p%%%lld==%lld", (long long)st,
                                (long long)off);
        if (n >= sizeof tok) snprintf(tok + sizeof tok - 4, 4, "...");
      }
      int64_t b = rs_plan_xfer_bytes(x, n_tokens);
      if (b >= 0) {
        snprintf(bytes, sizeof bytes, "%lld", (long long)b);
        if (!ck_add(total, b, &total)) known = false;
      } else {
        snprintf(bytes, sizeof bytes, "-");
        known = false;
      }
      fprintf(out, "  %5lld -> %-5lld %-11s %-10s %-24s %12lld %14s\n", (long long)x->src,
              (long long)x->dst, layers, heads, tok, (long long)x->bytes_per_token, bytes);
    }
    if (known) {
      char hb[32];
      fprintf(out, "  total %lld bytes (%s) per request of %lld tokens\n", (long long)total,
              rp_fmt_bytes(total, hb, sizeof hb), (long long)n_tokens);
    }
    if (R->has_request) {
      char hu[32], ho[32];
      fprintf(out,
              "  at input_tokens %lld: scale-up %s in %.3f ms, scale-out %s in %.3f ms; "
              "transfer %.3f ms\n",
              (long long)R->input_tokens, rp_fmt_bytes(R->bytes_scale_up, hu, sizeof hu),
              R->time_scale_up_ms, rp_fmt_bytes(R->bytes_scale_out, ho, sizeof ho),
              R->time_scale_out_ms, R->time_ms);
    }
  }
}

/* A shallow copy of p for the text views, with every string that comes from
 * the plan (its path, compiler, pool names and roles, kv_reshard pool names,
 * diagnostics) escaped by plan_escape(): a plan cannot write terminal
 * control sequences through explain. JSON output needs none of this: the
 * JSON writer escapes control characters itself. */
static Plan *text_view(const Plan *p) {
  Plan *q = rp_malloc(sizeof *q);
  *q = *p;
  q->path = plan_escape(p->path);
  q->compiler = plan_escape(p->compiler);
  q->pools = rp_calloc(p->npools ? p->npools : 1, sizeof *q->pools);
  for (size_t i = 0; i < p->npools; i++) {
    q->pools[i] = p->pools[i];
    q->pools[i].name = plan_escape(p->pools[i].name);
    q->pools[i].role = plan_escape(p->pools[i].role);
  }
  q->reshard = rp_calloc(p->nreshard ? p->nreshard : 1, sizeof *q->reshard);
  for (size_t i = 0; i < p->nreshard; i++) {
    q->reshard[i] = p->reshard[i];
    q->reshard[i].prefill = plan_escape(p->reshard[i].prefill);
    q->reshard[i].decode = plan_escape(p->reshard[i].decode);
  }
  q->diags = rp_calloc(p->ndiags ? p->ndiags : 1, sizeof *q->diags);
  for (size_t i = 0; i < p->ndiags; i++) {
    q->diags[i].code = plan_escape(p->diags[i].code);
    q->diags[i].severity = plan_escape(p->diags[i].severity);
    q->diags[i].message = plan_escape(p->diags[i].message);
  }
  return q;
}

/* Frees what text_view() made, not what it shares with the plan. */
static void text_view_free(Plan *q) {
  free(q->path);
  free(q->compiler);
  for (size_t i = 0; i < q->npools; i++) {
    free(q->pools[i].name);
    free(q->pools[i].role);
  }
  for (size_t i = 0; i < q->nreshard; i++) {
    free(q->reshard[i].prefill);
    free(q->reshard[i].decode);
  }
  for (size_t i = 0; i < q->ndiags; i++) {
    free(q->diags[i].code);
    free(q->diags[i].severity);
    free(q->diags[i].message);
  }
  free(q->pools);
  free(q->reshard);
  free(q->diags);
  free(q);
}

static void text_views(FILE *out, const Plan *p, const PlanRank *R, const ExplainOpts *o) {
  bool sep = false;
#define SEP() do { if (sep) fputc('\n', out); sep = true; } while (0)
  if (o->summary) { SEP(); text_summary(out, p); }
  if (o->ranks) { SEP(); text_ranks(out, p); }
  if (R) { SEP(); text_rank(out, p, R); }
  if (o->groups) { SEP(); text_groups(out, p, o->kind); }
  if (o->memory) { SEP(); text_memory(out, p); }
  if (o->reshard) { SEP(); plan_explain_reshard(out, p, o->tokens); }
  if (o->costs) { SEP(); plan_explain_costs(out, p); }
#undef SEP
}

bool plan_explain(FILE *out, FILE *err, const Plan *p, const ExplainOpts *o) {
  const PlanRank *R = NULL;
  if (o->rank >= 0) {
    R = plan_find_rank(p, o->rank);
    if (!R) {
      fprintf(err, "rankplan explain: rank %lld is not in the plan: expected 0..%lld%s\n", (long long)o->rank,
              (long long)(p->world_size - 1), p->partial ? " and on this file's node" : "");
      return false;
    }
  }
  if (o->json) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("rankplan.explain/1"));
    if (o->summary) json_object_set_new(root, "summary", json_summary(p));
    if (o->ranks) {
      json_t *a = json_array();
      for (int64_t i = 0; i < p->nranks; i++) json_array_append_new(a, rank_json(p, &p->ranks[i]));
      json_object_set_new(root, "ranks", a);
    }
    if (R) json_object_set_new(root, "rank", rank_json(p, R));
    if (o->groups) {
      json_t *a = json_array();
      for (int64_t g = 0; g < p->ngroups; g++) {
        const PlanGroup *G = &p->groups[g];
        if (G->kind != o->kind) continue;
        json_t *m = json_array();
        for (int32_t j = 0; j < G->n; j++) json_array_append_new(m, json_integer(G->ranks[j]));
        json_array_append_new(a, json_pack("{s:i,s:s,s:o,s:o,s:o}", "id", G->id, "kind", plan_kind_name(G->kind),
                                           "pool", G->pool < 0 ? json_null() : json_string(p->pools[G->pool].name),
                                           "instance", G->instance < 0 ? json_null() : json_integer(G->instance),
                                           "ranks", m));
      }
      json_object_set_new(root, "groups", a);
    }
    if (o->memory) json_object_set_new(root, "memory", json_memory(p));
    if (o->reshard) json_object_set_new(root, "kv_reshard", json_reshard(p, o->tokens));
    if (o->costs) json_object_set_new(root, "costs", plan_explain_costs_json(p));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fprintf(out, "%s\n", s);
    free(s);
    json_decref(root);
    return true;
  }
  /* The rank is found in p; the view shares p's ranks. */
  Plan *q = text_view(p);
  text_views(out, q, R, o);
  text_view_free(q);
  return true;
}
