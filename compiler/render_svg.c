/*
 * render_svg.c: the cluster picture of `rankplan render` (docs/render.md).
 *
 * Input: a Plan that plan_load() accepted. Output: one <svg> element and the
 * JSON data block the page's script reads. Up to the GPU limit (render.h)
 * every GPU is one element: its node and device place it, its pool and
 * instance colour it, its rank, pipeline stage and coordinates label it,
 * and its memory ledger is a stacked bar; the first instance pair's
 * kv_reshard transfers are arrows. Past the limit each node is one square
 * and each instance one square, with counts in their titles.
 * Invariants: deterministic; plan strings escaped (render_esc); the data
 * block holds numbers and plan.h's fixed names only.
 */
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "reshard.h"

/* Geometry of the per-GPU drawing, in SVG user units (pixels). */
enum {
  LEGEND_H = 44,    /* pool and memory legend above the nodes */
  LABEL_W = 70,     /* node label column */
  CELL_W = 150,     /* one GPU */
  CELL_H = 76,
  GAP = 6,          /* between GPUs */
  PAD = 6,          /* inside a node's box */
  ROW_GAP = 8,      /* between nodes */
  BAR_H = 10,       /* the memory bar */
};
/* The per-node drawing: squares of SQ units, NODES_PER_ROW to a row. */
enum { SQ = 10, SQ_GAP = 2, NODES_PER_ROW = 128 };

/* Pool hues (degrees): distinct at a glance; instances vary lightness. */
static const int pool_hue[] = {210, 28, 130, 280, 50, 340, 180, 95};

void render_fill(char *buf, size_t n, int32_t pool, int32_t inst) {
  int hue = pool_hue[(size_t)pool % RP_ARRAY_LEN(pool_hue)];
  snprintf(buf, n, "hsl(%d,55%%,%d%%)", hue, 80 - (int)(inst % 4) * 7);
}

/* Memory segments drawn, in order, with their colours and labels; the
 * sixth, free, is capacity less the others. */
static const MemKind mem_seg[] = {MEM_WEIGHTS, MEM_KV_CACHE, MEM_ACTIVATIONS, MEM_WORKSPACE,
                                  MEM_RESERVED};
static const char *const mem_label[] = {"weights", "KV cache", "activations", "buffers",
                                        "reserve", "free"};
static const char *const mem_colour[] = {"#4e79a7", "#59a14f", "#f28e2b", "#b07aa1",
                                         "#9c755f", "#e6e6e6"};

bool render_per_gpu(const Plan *p, const RenderOpts *o) {
  int64_t lim = o && o->gpu_limit > 0 ? o->gpu_limit : RENDER_GPU_LIMIT, slots = 0;
  if (p->nranks > lim) return false;
  for (size_t i = 0; i < p->nnodes; i++)
    if (!ck_add(slots, p->nodes[i].gpus, &slots) || slots > lim) return false;
  return true;
}

/* The scale-up domain of a GPU, by placement's rule (rp_scaleup_domain). */
static int64_t domain_of(const Plan *p, const PlanRank *R) {
  return rp_scaleup_domain(p->hardware.scale_up_domain, p->nodes[R->node].gpus, R->node, R->device);
}

int render_group_cross(const Plan *p, const PlanGroup *g) {
  int f = 0;
  const PlanRank *a = g->n > 0 ? plan_find_rank(p, g->ranks[0]) : NULL;
  for (int32_t j = 1; a && j < g->n && f != (RENDER_CROSS_NODE | RENDER_CROSS_DOMAIN); j++) {
    const PlanRank *b = plan_find_rank(p, g->ranks[j]);
    if (!b) continue;
    if (b->node != a->node) f |= RENDER_CROSS_NODE;
    if (domain_of(p, b) != domain_of(p, a)) f |= RENDER_CROSS_DOMAIN;
  }
  return f;
}

/* Pool colours; with mem, the memory bar's segments too. */
static void legend(StrBuf *sb, const Plan *p, bool mem) {
  sb_puts(sb, "<g class=\"legend\">");
  int x = 0;
  for (size_t i = 0; i < p->npools; i++) {
    char f[40];
    render_fill(f, sizeof f, (int32_t)i, 0);
    sb_printf(sb, "<rect x=\"%d\" y=\"4\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, f);
    sb_printf(sb, "<text x=\"%d\" y=\"14\">", x + 16);
    render_esc(sb, p->pools[i].name);
    sb_puts(sb, " (");
    render_esc(sb, p->pools[i].role);
    sb_puts(sb, ")</text>");
    /* About 7 units a character; a name longer than a screen is capped
     * (the legend only places the next entry). */
    size_t chars = strlen(p->pools[i].name) + strlen(p->pools[i].role);
    x += 40 + 7 * (int)(chars < 400 ? chars : 400);
  }
  x = 0;
  for (size_t i = 0; mem && i < RP_ARRAY_LEN(mem_label); i++) {
    sb_printf(sb, "<rect x=\"%d\" y=\"26\" width=\"12\" height=\"10\" fill=\"%s\"/>", x, mem_colour[i]);
    sb_printf(sb, "<text x=\"%d\" y=\"35\">%s</text>", x + 16, mem_label[i]);
    x += 30 + 7 * (int)strlen(mem_label[i]);
  }
  sb_puts(sb, "</g>\n");
}

/* The memory ledger as a stacked bar of width w at (x, y): capacity is the
 * whole bar; when the entries add up to more (a plan without a KV pool is
 * not held to the sum), their sum is. */
static void mem_bar(StrBuf *sb, const PlanRank *R, double x, double y, double w) {
  CkState st = {true};
  int64_t sum = 0;
  for (size_t i = 0; i < RP_ARRAY_LEN(mem_seg); i++) sum = cka(&st, sum, R->memory[mem_seg[i]]);
  int64_t cap = R->memory[MEM_CAPACITY];
  if (!st.ok || cap <= 0) return;
  double whole = (double)(sum > cap ? sum : cap), at = x;
  sb_printf(sb, "<g class=\"mem\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>",
            x, y, w, BAR_H, mem_colour[5]);
  for (size_t i = 0; i < RP_ARRAY_LEN(mem_seg); i++) {
    double seg = w * (double)R->memory[mem_seg[i]] / whole;
    if (seg >= 0.05)
      sb_printf(sb, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>", at, y, seg,
                BAR_H, mem_colour[i]);
    at += seg;
  }
  sb_puts(sb, "</g>");
}

/* The GPU's tooltip: where it is, what it runs, its ledger. */
static void gpu_title(StrBuf *sb, const Plan *p, const PlanRank *R) {
  const PlanPool *P = &p->pools[R->pool];
  sb_printf(sb, "<title>rank %d: node %d gpu %d, pool ", R->rank, R->node, R->device);
  render_esc(sb, P->name);
  sb_printf(sb, " instance %d, layers [%lld,%lld)", R->instance, (long long)R->shard[SH_LAYERS][0],
            (long long)R->shard[SH_LAYERS][1]);
  for (size_t i = 0; i < RP_ARRAY_LEN(mem_seg); i++) {
    char b[32];
    sb_printf(sb, "\n%s %s", mem_label[i], rp_fmt_bytes(R->memory[mem_seg[i]], b, sizeof b));
  }
  char b[32];
  sb_printf(sb, "\ncapacity %s</title>", rp_fmt_bytes(R->memory[MEM_CAPACITY], b, sizeof b));
}

static void gpu_xy(int32_t node, int32_t dev, int *x, int *y) {
  *x = LABEL_W + dev * (CELL_W + GAP);
  *y = LEGEND_H + node * (CELL_H + 2 * PAD + ROW_GAP) + PAD;
}

static void gpu_cell(StrBuf *sb, const Plan *p, const PlanRank *R) {
  int x, y;
  gpu_xy(R->node, R->device, &x, &y);
  char f[40];
  render_fill(f, sizeof f, R->pool, R->instance);
  sb_printf(sb,
            "<g class=\"gpu\" id=\"gpu-%d\" data-rank=\"%d\" data-node=\"%d\" data-pool=\"%d\" "
            "data-instance=\"%d\" transform=\"translate(%d,%d)\">",
            R->rank, R->rank, R->node, R->pool, R->instance, x, y);
  sb_printf(sb, "<rect class=\"frame\" width=\"%d\" height=\"%d\" rx=\"3\" fill=\"%s\"/>", CELL_W, CELL_H, f);
  gpu_title(sb, p, R);
  const int32_t *c = R->coords;
  sb_printf(sb, "<text x=\"5\" y=\"14\" class=\"rk\">r%d  i%d  pp%d</text>", R->rank, R->instance,
            c[CO_PP]);
  sb_printf(sb, "<text x=\"5\" y=\"29\">tp%d cp%d dp%d dcp%d</text>", c[CO_TP], c[CO_CP], c[CO_DP],
            c[CO_DCP]);
  sb_printf(sb, "<text x=\"5\" y=\"43\">ep%d etp%d edp%d</text>", c[CO_EP], c[CO_ETP], c[CO_EDP]);
  sb_printf(sb, "<text x=\"5\" y=\"57\">layers %lld-%lld</text>", (long long)R->shard[SH_LAYERS][0],
            (long long)R->shard[SH_LAYERS][1] - 1);
  mem_bar(sb, R, 5, CELL_H - BAR_H - 5, CELL_W - 10);
  sb_puts(sb, "</g>\n");
}

static void node_box(StrBuf *sb, const Plan *p, const PlanNode *N) {
  int x, y;
  gpu_xy(N->node, 0, &x, &y);
  int w = LABEL_W + N->gpus * (CELL_W + GAP) + PAD, h = CELL_H + 2 * PAD;
  sb_printf(sb, "<g class=\"node\" id=\"node-%d\"><rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\"/>",
            N->node, y - PAD, w, h);
  sb_printf(sb, "<text x=\"6\" y=\"%d\" class=\"nl\">node %d</text>", y + 14, N->node);
  sb_printf(sb, "<text x=\"6\" y=\"%d\">%d/%d GPUs</text>", y + 30, N->nranks, N->gpus);
  /* Devices without a rank: idle slots, not GPUs of the plan. */
  bool *used = rp_calloc((size_t)N->gpus + 1, sizeof *used);
  for (int32_t j = 0; j < N->nranks; j++) {
    const PlanRank *R = plan_find_rank(p, p->node_ranks[N->first_rank + j]);
    if (R) used[R->device] = true;
  }
  for (int32_t d = 0; d < N->gpus; d++) {
    if (used[d]) continue;
    int gx, gy;
    gpu_xy(N->node, d, &gx, &gy);
    sb_printf(sb, "<rect class=\"idle\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"3\"/>", gx, gy,
              CELL_W, CELL_H);
  }
  free(used);
  for (int32_t j = 0; j < N->nranks; j++) {
    const PlanRank *R = plan_find_rank(p, p->node_ranks[N->first_rank + j]);
    if (R) gpu_cell(sb, p, R);
  }
  sb_puts(sb, "</g>\n");
}

static int pool_index(const Plan *p, const char *name) {
  for (size_t i = 0; i < p->npools; i++)
    if (strcmp(p->pools[i].name, name) == 0) return (int)i;
  return -1;
}

/* Bytes of one request through transfer x of pair P at the pair's
 * input_tokens; -1 when the plan gives no length and x needs one. */
static int64_t xfer_bytes(const PlanTransfer *x, const PlanReshard *P) {
  return rs_plan_xfer_bytes(x, P->has_request ? P->input_tokens : 0);
}

/* One transfer of pair pr between global ranks sg and dg as an arrow with
 * its bytes per request (the pair's input_tokens; none without them). */
static void kv_arrow(StrBuf *sb, const Plan *p, size_t pr, const PlanTransfer *x, int64_t sg,
                     int64_t dg) {
  const PlanRank *S = plan_find_rank(p, sg), *D = plan_find_rank(p, dg);
  if (!S || !D) return;
  int sx, sy, dx, dy;
  gpu_xy(S->node, S->device, &sx, &sy);
  gpu_xy(D->node, D->device, &dx, &dy);
  double x1 = sx + CELL_W / 2.0, y1 = sy + CELL_H / 2.0, x2 = dx + CELL_W / 2.0, y2 = dy + CELL_H / 2.0;
  const PlanReshard *P = &p->reshard[pr];
  int64_t bytes = xfer_bytes(x, P);
  char b[32] = "";
  if (bytes >= 0) rp_fmt_bytes(bytes, b, sizeof b);
  /* A curve bowed to one side by a sixth of its length, so that arrows
   * along one row of GPUs stay apart; the label sits on its middle. */
  double cx = (x1 + x2) / 2 - (y2 - y1) / 6, cy = (y1 + y2) / 2 + (x2 - x1) / 6;
  sb_printf(sb,
            "<g class=\"xfer\" data-pair=\"%zu\" data-src=\"%lld\" data-dst=\"%lld\"><path d=\"M%.1f,%.1f "
            "Q%.1f,%.1f %.1f,%.1f\" marker-end=\"url(#arrow)\"/>",
            pr, (long long)sg, (long long)dg, x1, y1, cx, cy, x2, y2);
  sb_printf(sb, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", (x1 + 2 * cx + x2) / 4, (y1 + 2 * cy + y2) / 4, b);
  sb_printf(sb, "<title>rank %lld -> rank %lld: %s per request</title></g>\n", (long long)sg,
            (long long)dg, bytes >= 0 ? b : "bytes unknown (no input_tokens)");
}

static void kv_layer(StrBuf *sb, const Plan *p) {
  sb_puts(sb, "<g id=\"kv\">\n");
  for (size_t i = 0; i < p->nreshard; i++) {
    int pi = pool_index(p, p->reshard[i].prefill), di = pool_index(p, p->reshard[i].decode);
    if (pi < 0 || di < 0) continue;
    for (size_t t = 0; t < p->reshard[i].ntransfers; t++) {
      const PlanTransfer *x = &p->reshard[i].transfers[t];
      kv_arrow(sb, p, i, x, plan_replica_rank(p, pi, 0, 0, x->src), plan_replica_rank(p, di, 0, 0, x->dst));
    }
  }
  sb_puts(sb, "</g>\n");
}

static void svg_open(StrBuf *sb, int w, int h) {
  sb_printf(sb,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"cluster\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"monospace\" font-size=\"10\">\n",
            w, h, w, h);
  sb_puts(sb, "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
              "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\"/></marker>"
              "</defs>\n");
}

static void svg_per_gpu(StrBuf *sb, const Plan *p) {
  int32_t gmax = 1;
  for (size_t i = 0; i < p->nnodes; i++)
    if (p->nodes[i].gpus > gmax) gmax = p->nodes[i].gpus;
  int w = LABEL_W + gmax * (CELL_W + GAP) + PAD + 4;
  int h = LEGEND_H + (int)p->nnodes * (CELL_H + 2 * PAD + ROW_GAP) + 4;
  svg_open(sb, w, h);
  legend(sb, p, true);
  for (size_t i = 0; i < p->nnodes; i++) node_box(sb, p, &p->nodes[i]);
  kv_layer(sb, p);
  sb_puts(sb, "</svg>\n");
}

/* ---- per node and per instance, past the GPU limit ------------------------ */

/* Per node, bit k: a group of kind k with a member here crosses a node or
 * scale-up domain boundary. */
static uint32_t *node_cross_masks(const Plan *p) {
  uint32_t *m = rp_calloc(p->nnodes + 1, sizeof *m);
  for (int64_t g = 0; g < p->ngroups; g++) {
    const PlanGroup *G = &p->groups[g];
    if (!render_group_cross(p, G)) continue;
    for (int32_t j = 0; j < G->n; j++) {
      const PlanRank *R = plan_find_rank(p, G->ranks[j]);
      if (R) m[R->node] |= (uint32_t)1 << G->kind;
    }
  }
  return m;
}

/* "node N: K of G GPUs; pool i3 x4, ..." (the first three pool/instance
 * runs of the node's ranks, then how many more). */
static void node_title(StrBuf *sb, const Plan *p, const PlanNode *N) {
  sb_printf(sb, "<title>node %d: %d of %d GPUs", N->node, N->nranks, N->gpus);
  int runs = 0, more = 0;
  for (int32_t j = 0; j < N->nranks;) {
    const PlanRank *R = plan_find_rank(p, p->node_ranks[N->first_rank + j]);
    int32_t k = j + 1;
    while (R && k < N->nranks) {
      const PlanRank *Q = plan_find_rank(p, p->node_ranks[N->first_rank + k]);
      if (!Q || Q->pool != R->pool || Q->instance != R->instance) break;
      k++;
    }
    if (R && runs < 3) {
      sb_puts(sb, runs ? ", " : "; ");
      render_esc(sb, p->pools[R->pool].name);
      sb_printf(sb, " instance %d x%d", R->instance, k - j);
      runs++;
    } else {
      more++;
    }
    j = k;
  }
  if (more) sb_printf(sb, ", %d more", more);
  sb_puts(sb, "</title>");
}

static int node_rows(const Plan *p) { return (int)((p->nnodes + NODES_PER_ROW - 1) / NODES_PER_ROW); }

static void nodes_grid(StrBuf *sb, const Plan *p, int y0) {
  uint32_t *mask = node_cross_masks(p);
  sb_printf(sb, "<text x=\"0\" y=\"%d\" class=\"nl\">%zu nodes of %d GPUs, %lld ranks</text>\n", y0 - 6,
            p->nnodes, p->nnodes ? p->nodes[0].gpus : 0, (long long)p->world_size);
  for (size_t i = 0; i < p->nnodes; i++) {
    const PlanNode *N = &p->nodes[i];
    int x = (int)(i % NODES_PER_ROW) * (SQ + SQ_GAP), y = y0 + (int)(i / NODES_PER_ROW) * (SQ + SQ_GAP);
    char f[40] = "#dddddd";
    const PlanRank *R = N->nranks ? plan_find_rank(p, p->node_ranks[N->first_rank]) : NULL;
    if (R) render_fill(f, sizeof f, R->pool, R->instance);
    sb_printf(sb,
              "<rect class=\"nd\" id=\"node-%d\" data-node=\"%d\" data-ranks=\"%d\" data-cross=\"%x\" "
              "x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">",
              N->node, N->node, N->nranks, mask[i], x, y, SQ, SQ, f);
    node_title(sb, p, N);
    sb_puts(sb, "</rect>\n");
  }
  free(mask);
}

/* Each instance's first node and last node, from its ranks. */
static void instance_nodes(const Plan *p, const PlanPool *P, int pi, int32_t *lo, int32_t *hi) {
  for (int64_t i = 0; i < P->replicas; i++) lo[i] = INT32_MAX, hi[i] = -1;
  for (int64_t r = 0; r < p->nranks; r++) {
    const PlanRank *R = &p->ranks[r];
    if (R->pool != pi || R->instance < 0 || R->instance >= P->replicas) continue;
    if (R->node < lo[R->instance]) lo[R->instance] = R->node;
    if (R->node > hi[R->instance]) hi[R->instance] = R->node;
  }
}

/* One pool's instances, one square each; returns the y below them. */
static int pool_instances(StrBuf *sb, const Plan *p, int pi, int y) {
  const PlanPool *P = &p->pools[pi];
  sb_printf(sb, "<text x=\"0\" y=\"%d\" class=\"nl\">", y + 12);
  render_esc(sb, P->name);
  sb_printf(sb, " (");
  render_esc(sb, P->role);
  sb_printf(sb, "): %lld instances of %lld GPUs, ranks %lld-%lld</text>\n", (long long)P->replicas,
            (long long)P->instance_size, (long long)P->first_rank,
            (long long)(P->first_rank + P->nranks - 1));
  y += 18;
  int32_t *lo = rp_malloc(((size_t)P->replicas + 1) * sizeof *lo);
  int32_t *hi = rp_malloc(((size_t)P->replicas + 1) * sizeof *hi);
  instance_nodes(p, P, pi, lo, hi);
  for (int64_t i = 0; i < P->replicas; i++) {
    char f[40];
    render_fill(f, sizeof f, pi, (int32_t)i);
    int x = (int)(i % NODES_PER_ROW) * (SQ + SQ_GAP), iy = y + (int)(i / NODES_PER_ROW) * (SQ + SQ_GAP);
    sb_printf(sb,
              "<rect class=\"inst\" data-pool=\"%d\" data-instance=\"%lld\" x=\"%d\" y=\"%d\" width=\"%d\" "
              "height=\"%d\" fill=\"%s\"><title>instance %lld: %lld GPUs, nodes %d-%d</title></rect>\n",
              pi, (long long)i, x, iy, SQ, SQ, f, (long long)i, (long long)P->instance_size, lo[i], hi[i]);
  }
  free(lo);
  free(hi);
  return y + (int)((P->replicas + NODES_PER_ROW - 1) / NODES_PER_ROW) * (SQ + SQ_GAP) + 12;
}

static void svg_per_node(StrBuf *sb, const Plan *p) {
  int w = NODES_PER_ROW * (SQ + SQ_GAP);
  int y_inst = LEGEND_H + 20 + node_rows(p) * (SQ + SQ_GAP) + 16, h = y_inst;
  for (size_t i = 0; i < p->npools; i++)
    h += 30 + (int)((p->pools[i].replicas + NODES_PER_ROW - 1) / NODES_PER_ROW) * (SQ + SQ_GAP);
  svg_open(sb, w < 900 ? 900 : w, h + 4);
  legend(sb, p, false);
  nodes_grid(sb, p, LEGEND_H + 20);
  int y = y_inst;
  for (size_t i = 0; i < p->npools; i++) y = pool_instances(sb, p, (int)i, y);
  sb_puts(sb, "</svg>\n");
}

void render_plan_svg(StrBuf *sb, const Plan *p, const RenderOpts *o) {
  if (render_per_gpu(p, o)) svg_per_gpu(sb, p);
  else svg_per_node(sb, p);
}

/* ---- the data block -------------------------------------------------------- */

void render_plan_data(StrBuf *sb, const Plan *p, bool per_gpu) {
  sb_printf(sb, "{\"per_gpu\":%s,\"kinds\":[", per_gpu ? "true" : "false");
  for (int k = 0; k < GK__COUNT; k++) sb_printf(sb, "%s\"%s\"", k ? "," : "", plan_kind_name((GroupKind)k));
  sb_puts(sb, "],\n\"groups\":[");
  for (int64_t g = 0; per_gpu && g < p->ngroups; g++) {
    const PlanGroup *G = &p->groups[g];
    sb_printf(sb, "%s[%d,%d", g ? ",\n" : "", (int)G->kind, render_group_cross(p, G));
    for (int32_t j = 0; j < G->n; j++) sb_printf(sb, ",%d", G->ranks[j]);
    sb_putc(sb, ']');
  }
  sb_puts(sb, "],\n\"xfers\":[");
  bool first = true;
  for (size_t i = 0; per_gpu && i < p->nreshard; i++) {
    int pi = pool_index(p, p->reshard[i].prefill), di = pool_index(p, p->reshard[i].decode);
    for (size_t t = 0; pi >= 0 && di >= 0 && t < p->reshard[i].ntransfers; t++) {
      const PlanTransfer *x = &p->reshard[i].transfers[t];
      sb_printf(sb, "%s[%zu,%lld,%lld,%lld]", first ? "" : ",", i,
                (long long)plan_replica_rank(p, pi, 0, 0, x->src),
                (long long)plan_replica_rank(p, di, 0, 0, x->dst), (long long)xfer_bytes(x, &p->reshard[i]));
      first = false;
    }
  }
  sb_puts(sb, "]}");
}
