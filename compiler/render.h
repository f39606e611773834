/*
 * render.h: `rankplan render`, a plan as a picture (docs/render.md).
 *
 * Input: a Plan that plan_load() accepted (render.c, render_svg.c), or the
 * results of a search (render_pareto.c). Output: text in a string buffer,
 * either one self-contained HTML document (inline SVG, CSS and a little
 * plain JavaScript; nothing is fetched) or the SVG element alone.
 * Invariants: deterministic (the same plan gives the same bytes: no time,
 * path, address or hash order enters the output); every string taken from
 * the plan is escaped for HTML (render_esc), and the JSON data block holds
 * numbers and the fixed names of plan.h only; the size is bounded by the
 * drawing mode (below).
 */
#ifndef RANKPLAN_RENDER_H
#define RANKPLAN_RENDER_H

#include "plan.h"
#include "search.h"

/* Plans of at most this many ranks (and GPU slots) are drawn one element
 * per GPU, with every group and transfer in the page's data; larger ones
 * are drawn per node and per instance with counts (docs/render.md, "At
 * scale"). At 4,096 ranks the per-GPU page is 4.5 MB, which headless
 * Chromium loads in seconds on the project's build machine; the per-node
 * page of 131,072 ranks is 8.2 MB, about 200 bytes per node and per
 * instance (docs/benchmarks.md, "render"). */
#define RENDER_GPU_LIMIT ((int64_t)4096)

typedef struct {
  const char *title;   /* shown in the page's title and heading */
  int64_t gpu_limit;   /* <= 0: RENDER_GPU_LIMIT */
} RenderOpts;

/* Appends s escaped for HTML text and attribute values (& < > " '), with
 * control characters and bytes that are not UTF-8 as plan_escape writes
 * them. NULL appends nothing. */
void render_esc(StrBuf *sb, const char *s);

/* The fill colour of pool pool's instance inst: a hue per pool, a
 * lightness per instance (CSS hsl()). */
void render_fill(char *buf, size_t n, int32_t pool, int32_t inst);

/* The whole page: heading, summary, estimates, diagnostics, the group kind
 * selector, the cluster picture and the details panel. */
void render_plan_html(StrBuf *sb, const Plan *p, const RenderOpts *o);

/* The cluster picture alone, one <svg> element (standalone: it declares
 * its namespace): per GPU when the plan has at most o->gpu_limit ranks,
 * else per node and per instance. */
void render_plan_svg(StrBuf *sb, const Plan *p, const RenderOpts *o);
/* Whether the plan is drawn per GPU under o. */
bool render_per_gpu(const Plan *p, const RenderOpts *o);

/* The JSON data block the page's script reads (render_svg.c): the group
 * kinds and, for a per-GPU drawing, every group's kind, boundary flags and
 * members, and the transfers of the first instance pair as global ranks
 * with their bytes per request (-1: the plan gives no input_tokens). */
void render_plan_data(StrBuf *sb, const Plan *p, bool per_gpu);

/* Boundary flags of a group: RENDER_CROSS_NODE when its members are on
 * more than one node, RENDER_CROSS_DOMAIN when on more than one scale-up
 * domain (docs/render.md). */
enum { RENDER_CROSS_NODE = 1, RENDER_CROSS_DOMAIN = 2 };
int render_group_cross(const Plan *p, const PlanGroup *g);

/* `rankplan search --plot` (render_pareto.c): goodput per GPU against
 * TTFT and against TPOT, every ranked deployment a point, the Pareto front
 * joined, the winner (results[0], when it meets the SLOs) marked, the SLOs
 * (out->model) as lines.
 * svg_only: the <svg> element alone, else an HTML page around it. */
void render_pareto(StrBuf *sb, const SearchOut *out, const char *title, bool svg_only);

#endif
