/*
 * render_pareto.c: the plot of `rankplan search --plot` (docs/render.md).
 *
 * Input: the SearchOut of a search that ran (search.h). Output: one SVG of
 * two panels, goodput per GPU (tok/s) against TTFT (ms) and against TPOT
 * (ms): every ranked deployment is a point (hollow when it misses an SLO),
 * the Pareto front (SearchResult.pareto, over goodput, TTFT and TPOT) is
 * filled and joined, the winner (results[0], when it meets the SLOs) is
 * ringed and named, the SLOs are dashed lines; optionally an HTML page
 * around it.
 * Invariants: deterministic (the results' order, fixed formatting);
 * deployments with a latency that is not a finite number are counted in
 * the caption, not drawn.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"

enum { PW = 470, PH = 340, ML = 64, MR = 16, MT = 30, MB = 46 };

typedef struct {
  double x0, x1, y0, y1; /* data range */
  int ox;                /* panel's left edge */
} Axes;

/* A step of 1, 2 or 5 times a power of ten near span / 5. */
static double nice_step(double span) {
  double raw = span / 5.0, p = pow(10.0, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * p;
}

static double px(const Axes *a, double x) { return a->ox + ML + (x - a->x0) / (a->x1 - a->x0) * (PW - ML - MR); }
static double py(const Axes *a, double y) { return MT + (1.0 - (y - a->y0) / (a->y1 - a->y0)) * (PH - MT - MB); }

static double res_x(const SearchResult *r, int panel) { return (panel ? r->tpot : r->ttft) * 1e3; }

static void axes_draw(StrBuf *sb, const Axes *a, const char *xlabel) {
  double sx = nice_step(a->x1 - a->x0), sy = nice_step(a->y1 - a->y0);
  sb_printf(sb, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            a->ox + ML, MT, PW - ML - MR, PH - MT - MB);
  for (int i = 0; i * sx <= a->x1; i++) {
    double v = i * sx;
    sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>"
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n",
              px(a, v), PH - MB + 16, v, px(a, v), px(a, v), PH - MB, PH - MB + 4);
  }
  for (int i = 0; i * sy <= a->y1; i++) {
    double v = i * sy;
    sb_printf(sb, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>"
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
              a->ox + ML - 6, py(a, v) + 4, v, a->ox + ML, a->ox + PW - MR, py(a, v), py(a, v));
  }
  sb_printf(sb, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", a->ox + (PW + ML - MR) / 2,
            PH - 8, xlabel);
  sb_printf(sb, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">goodput per GPU "
                "(tok/s)</text>\n", a->ox + 14, (PH + MT - MB) / 2);
}

static void slo_line(StrBuf *sb, const Axes *a, double slo_ms) {
  if (!(slo_ms > 0) || slo_ms > a->x1) return;
  sb_printf(sb, "<line class=\"slo\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#b00\" "
                "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%d\" fill=\"#b00\" text-anchor=\"end\">SLO %g ms"
                "</text>\n",
            px(a, slo_ms), px(a, slo_ms), MT, PH - MB, px(a, slo_ms) - 4, PH - MB - 6, slo_ms);
}

static int cmp_front(const void *x, const void *y) {
  const double *a = x, *b = y;
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1];
}

/* The line of one panel: of the Pareto deployments in x order (ties by
 * goodput), each that has more goodput than every one left of it, so the
 * best goodput the front reaches at each latency. */
static void front_line(StrBuf *sb, const SearchOut *out, const Axes *a, int panel) {
  double(*pt)[2] = rp_malloc((out->results.len + 1) * sizeof *pt);
  size_t n = 0;
  for (size_t i = 0; i < out->results.len; i++) {
    const SearchResult *r = &out->results.items[i];
    if (r->pareto && isfinite(res_x(r, panel)))
      pt[n][0] = res_x(r, panel), pt[n][1] = r->goodput_gpu, n++;
  }
  qsort(pt, n, sizeof *pt, cmp_front);
  sb_puts(sb, "<polyline class=\"front\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
  double best = -1;
  for (size_t i = 0; i < n; i++) {
    if (pt[i][1] <= best) continue;
    sb_printf(sb, "%s%.1f,%.1f", best >= 0 ? " " : "", px(a, pt[i][0]), py(a, pt[i][1]));
    best = pt[i][1];
  }
  sb_puts(sb, "\"/>\n");
  free(pt);
}

static void point(StrBuf *sb, const SearchResult *r, const Axes *a, int panel, size_t rank) {
  double x = res_x(r, panel);
  const char *cls = r->pareto ? "pareto" : r->feasible ? "ok" : "miss";
  const char *fill = r->pareto ? "#1f77b4" : r->feasible ? "#9ecae1" : "none";
  sb_printf(sb, "<circle class=\"pt %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\" stroke=\"#1f77b4\">",
            cls, px(a, x), py(a, r->goodput_gpu), fill);
  char *lay = search_layout_str(r);
  sb_printf(sb, "<title>#%zu ", rank + 1);
  render_esc(sb, lay);
  sb_printf(sb, ": %lld GPUs, TTFT %.1f ms, TPOT %.2f ms, goodput %.1f tok/s per GPU%s</title></circle>\n",
            (long long)r->gpus, r->ttft * 1e3, r->tpot * 1e3, r->goodput_gpu,
            r->feasible ? "" : " (misses an SLO)");
  free(lay);
}

static void winner(StrBuf *sb, const SearchOut *out, const Axes *a, int panel) {
  const SearchResult *r = &out->results.items[0];
  double x = res_x(r, panel);
  if (!isfinite(x)) return;
  char *lay = search_layout_str(r);
  sb_printf(sb, "<g class=\"winner\"><circle cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"#d62728\" "
                "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\" text-anchor=\"end\">winner ",
            px(a, x), py(a, r->goodput_gpu), px(a, x) - 10, py(a, r->goodput_gpu) + 20);
  render_esc(sb, lay);
  sb_puts(sb, "</text></g>\n");
  free(lay);
}

/* One panel; returns how many results it could not draw. */
static size_t panel_draw(StrBuf *sb, const SearchOut *out, int panel) {
  Axes a = {0, 0, 0, 0, panel * PW};
  double slo = (panel ? out->model.slo_tpot : out->model.slo_ttft) * 1e3;
  a.x1 = slo > 0 ? slo : 0;
  size_t skipped = 0;
  for (size_t i = 0; i < out->results.len; i++) {
    const SearchResult *r = &out->results.items[i];
    if (!isfinite(res_x(r, panel)) || !isfinite(r->goodput_gpu)) continue;
    if (res_x(r, panel) > a.x1) a.x1 = res_x(r, panel);
    if (r->goodput_gpu > a.y1) a.y1 = r->goodput_gpu;
  }
  a.x1 = a.x1 > 0 ? a.x1 * 1.08 : 1;
  a.y1 = a.y1 > 0 ? a.y1 * 1.1 : 1;
  axes_draw(sb, &a, panel ? "TPOT (ms)" : "TTFT (ms)");
  slo_line(sb, &a, slo);
  front_line(sb, out, &a, panel);
  for (size_t i = out->results.len; i-- > 0;) {
    const SearchResult *r = &out->results.items[i];
    if (!isfinite(res_x(r, panel)) || !isfinite(r->goodput_gpu) || r->goodput_gpu < 0) skipped++;
    else point(sb, r, &a, panel, i);
  }
  if (out->results.len && out->results.items[0].feasible) winner(sb, out, &a, panel);
  return skipped;
}

void render_pareto(StrBuf *sb, const SearchOut *out, const char *title, bool svg_only) {
  if (!svg_only) {
    sb_puts(sb, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>rankplan search: ");
    render_esc(sb, title);
    sb_puts(sb, "</title>\n<style>body{font:13px system-ui,sans-serif;margin:12px;background:#fff}</style>"
                "</head>\n<body>\n<h1>");
    render_esc(sb, title);
    sb_puts(sb, "</h1>\n");
  }
  sb_printf(sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"pareto\" width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            2 * PW, PH + 24, 2 * PW, PH + 24);
  sb_puts(sb, "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n<text x=\"8\" y=\"18\" font-size=\"13\">");
  render_esc(sb, title);
  sb_printf(sb, ": %zu deployments; filled: Pareto front; line: its best goodput per latency; hollow: misses an SLO</text>\n",
            out->results.len);
  size_t skipped = panel_draw(sb, out, 0);
  skipped += panel_draw(sb, out, 1);
  if (skipped)
    sb_printf(sb, "<text x=\"8\" y=\"%d\">%zu points with a latency that is not a finite number are not "
                  "drawn</text>\n", PH + 18, skipped);
  sb_puts(sb, "</svg>\n");
  if (!svg_only) sb_puts(sb, "</body></html>\n");
}
