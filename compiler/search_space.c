/*
 * search_space.c: the spec's search constraints applied to one candidate
 * layout, and the tally of rejections (search_space.h).
 */
#include "search_space.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *search_space_reject(const SearchSpec *se, PoolRole role, const CostLayout *l,
                                int64_t gpus, int64_t gpn, char *buf, size_t n) {
  if (se->pp.set && !se->pp.v && l->pp > 1) {
    snprintf(buf, n, "pipeline parallelism is off (`search.pp: false`)");
    return buf;
  }
  if (se->cp.set && !se->cp.v && l->cp > 1) {
    snprintf(buf, n, "context parallelism is off (`search.cp: false`)");
    return buf;
  }
  int64_t v[SDIM__COUNT] = {l->tp, l->pp, l->cp, l->dp, l->ep, l->etp, l->dcp, gpus};
  for (int d = 0; d < SDIM__COUNT; d++)
    if (!search_dim_allows(&se->dims[role][d], v[d])) {
      snprintf(buf, n, "%s %lld is outside `search.%s.%s`", search_dim_name((SearchDim)d),
               (long long)v[d], role_name(role), search_dim_name((SearchDim)d));
      return buf;
    }
  if (se->whole_nodes.v && gpn > 0 && gpus % gpn) {
    snprintf(buf, n, "an instance of %lld GPUs is not whole %lld-GPU nodes (`search.whole_nodes`)",
             (long long)gpus, (long long)gpn);
    return buf;
  }
  return NULL;
}

const char *search_pack_reject(const SearchPack *pk, const char *engine, int64_t gpus, char *buf, size_t n) {
  if (!pk || pk->nodes <= 0 || pk->gpn <= 0 || gpus <= pk->gpn || gpus % pk->gpn == 0) return NULL;
  snprintf(buf, n, "engine %s: an instance larger than one node (%lld GPUs) spans whole nodes, as the "
           "launcher puts as many ranks on each of its nodes", engine, (long long)pk->gpn);
  return buf;
}

/* Nodes that n instances of g GPUs take, each whole on its nodes, in
 * order as the placement's cursor puts them; *tail: the GPUs the last
 * node keeps free (those of earlier nodes stay so, the cursor having
 * passed them). */
static int64_t pack_nodes(int64_t g, int64_t n, int64_t gpn, int64_t *tail) {
  *tail = 0;
  if (n <= 0) return 0;
  if (g > gpn) return n * ((g + gpn - 1) / gpn);
  int64_t k = gpn / g, r = n % k;
  *tail = gpn - (r ? r : k) * g;
  return n / k + (r > 0);
}

int64_t search_pack_max(const SearchPack *pk, int64_t gp, int64_t x, int64_t gd) {
  if (!pk || pk->nodes <= 0 || pk->gpn <= 0 || gd <= 0) return INT64_MAX;
  int64_t tail, used = pack_nodes(gp, x, pk->gpn, &tail);
  if (used > pk->nodes) return -1;
  int64_t left = pk->nodes - used;
  if (gd > pk->gpn) return left / ((gd + pk->gpn - 1) / pk->gpn);
  return tail / gd + left * (pk->gpn / gd);
}

int64_t search_space_xstep(const SearchSpec *se, int64_t gp, int64_t gpn) {
  if (!se->separate_nodes.v || gpn < 1 || gp < 1) return 1;
  return gpn / rp_gcd64(gp, gpn);
}

void search_rejects_add(SearchRejects *v, const char *why, PoolRole role, const CostLayout *l) {
  for (size_t i = 0; i < v->len; i++)
    if (v->items[i].role == role && strcmp(v->items[i].why, why) == 0) {
      v->items[i].n++;
      return;
    }
  if (v->len >= SEARCH_REJECT_MAX) {
    v->items[v->len - 1].n++;
    return;
  }
  SearchReject r = {rp_strdup(why), role, 1, *l};
  if (v->len == SEARCH_REJECT_MAX - 1) {
    free(r.why);
    r.why = rp_strdup("other reasons (the list is capped)");
  }
  rp_vec_push(v, r);
}

void search_rejects_free(SearchRejects *v) {
  for (size_t i = 0; i < v->len; i++) free(v->items[i].why);
  free(v->items);
  memset(v, 0, sizeof *v);
}

void search_layout_put(StrBuf *sb, const CostLayout *l) {
  sb_printf(sb, "tp%lld", (long long)l->tp);
  if (l->pp > 1) sb_printf(sb, ",pp%lld", (long long)l->pp);
  if (l->cp > 1) sb_printf(sb, ",cp%lld", (long long)l->cp);
  if (l->dp > 1) sb_printf(sb, ",dp%lld", (long long)l->dp);
  if (l->ep > 1) sb_printf(sb, ",ep%lld", (long long)l->ep);
  if (l->etp > 1) sb_printf(sb, ",etp%lld", (long long)l->etp);
  if (l->dcp > 1) sb_printf(sb, ",dcp%lld", (long long)l->dcp);
}

void search_rejects_text(StrBuf *sb, const SearchRejects *v) {
  if (v->len == 0) return;
  sb_puts(sb, "\nrejected before ranking (pool role, candidates, what decided it, first one):\n");
  for (size_t i = 0; i < v->len; i++) {
    const SearchReject *r = &v->items[i];
    sb_printf(sb, "  %-8s %9lld  %s (first: ", role_name(r->role), (long long)r->n, r->why);
    search_layout_put(sb, &r->first);
    sb_puts(sb, ")\n");
  }
}

json_t *search_rejects_json(const SearchRejects *v) {
  json_t *a = json_array();
  for (size_t i = 0; i < v->len; i++) {
    const SearchReject *r = &v->items[i];
    StrBuf sb;
    sb_init(&sb);
    search_layout_put(&sb, &r->first);
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(role_name(r->role)));
    json_object_set_new(o, "reason", json_string(r->why));
    json_object_set_new(o, "candidates", json_integer(r->n));
    json_object_set_new(o, "first", json_string(sb.buf ? sb.buf : ""));
    sb_free(&sb);
    json_array_append_new(a, o);
  }
  return a;
}
