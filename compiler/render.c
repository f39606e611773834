/*
 * render.c: the page of `rankplan render` (docs/render.md).
 *
 * Input: a Plan that plan_load() accepted. Output: one self-contained HTML
 * document: the plan's summary (pools, estimates, diagnostics, KV-reshard
 * pairs), a selector of group kinds, the cluster picture (render_svg.c), a
 * details panel, the data block and the script that ties them together.
 * Nothing is fetched: no link, font, image or script from elsewhere.
 * Invariants: deterministic; every plan string escaped by render_esc.
 */
#include <stdlib.h>
#include <string.h>

#include "render.h"

void render_esc(StrBuf *sb, const char *s) {
  if (!s) return;
  char *e = plan_escape(s);
  for (const char *c = e; *c; c++) {
    switch (*c) {
      case '&': sb_puts(sb, "&amp;"); break;
      case '<': sb_puts(sb, "&lt;"); break;
      case '>': sb_puts(sb, "&gt;"); break;
      case '"': sb_puts(sb, "&quot;"); break;
      case '\'': sb_puts(sb, "&#39;"); break;
      default: sb_putc(sb, *c);
    }
  }
  free(e);
}

static const char page_css[] =
    "body{font:13px/1.4 system-ui,sans-serif;margin:12px;color:#222;background:#fff}\n"
    "h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:12px 0 4px}h3{font-size:13px;margin:8px 0 2px}\n"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\n"
    "th{background:#f2f2f2}.l{text-align:left}\n"
    ".sw{display:inline-block;width:10px;height:10px;margin-right:4px;border:1px solid #888}\n"
    "#controls{margin:10px 0;padding:6px;background:#f6f6f6;border:1px solid #ddd}\n"
    "#main{display:flex;gap:12px;align-items:flex-start}\n"
    "#pic{overflow:auto;max-height:85vh;border:1px solid #ccc;flex:1}\n"
    "#details{width:360px;flex:none;border:1px solid #ccc;padding:6px;max-height:85vh;overflow:auto}\n"
    "#details pre{white-space:pre-wrap;margin:0}#details ul{margin:0;padding-left:16px}\n"
    ".node>rect{fill:#f7f7f7;stroke:#999}.idle{fill:#fff;stroke:#bbb;stroke-dasharray:3 2}\n"
    ".frame{stroke:#777;stroke-width:1}.frame.grp{stroke-width:4}\n"
    ".frame.xn{stroke-dasharray:9 4}.frame.xd{stroke-dasharray:2 3}\n"
    ".gpu{cursor:pointer}.gpu.sel .frame{fill-opacity:.55}.rk,.nl{font-weight:bold}\n"
    "#kv path{fill:none;stroke:#c0392b;stroke-width:1.5;opacity:.85}\n"
    "#kv text{fill:#c0392b;font-weight:bold;paint-order:stroke;stroke:#fff;stroke-width:3px}\n"
    "#kind-info{display:block;margin-top:4px}\n"
    "marker path{fill:#c0392b;stroke:none}.nd,.inst{cursor:pointer}.nd.hit{stroke:#d62728;stroke-width:2}\n"
    ".warning{color:#9a5b00}.error{color:#b00}\n";

/* The page's script: the kind selector outlines groups, a click on a GPU
 * (or node, or instance) fills the details panel. Plain JavaScript. */
static const char page_js[] =
    "(function () {\n'use strict';\n"
    "var D = JSON.parse(document.getElementById('plan-data').textContent);\n"
    "var sel = document.getElementById('kind'), info = document.getElementById('kind-info');\n"
    "var det = document.getElementById('details-body');\n"
    "var PAL = ['#d62728','#1f77b4','#2ca02c','#9467bd','#8c564b','#e377c2','#17becf','#bcbd22','#ff7f0e'];\n"
    "var byRank = {};\n"
    "D.groups.forEach(function (g, i) { for (var j = 2; j < g.length; j++) "
    "(byRank[g[j]] = byRank[g[j]] || []).push(i); });\n"
    "function el(tag, text) { var e = document.createElement(tag); "
    "if (text !== undefined) e.textContent = text; return e; }\n"
    "function fmt(b) { var u = ['B','KiB','MiB','GiB','TiB','PiB'], i = 0; "
    "while (b >= 1024 && i < 5) { b /= 1024; i++; } return i ? b.toFixed(2) + ' ' + u[i] : b + ' B'; }\n"
    "function frame(r) { var e = document.getElementById('gpu-' + r); "
    "return e ? e.querySelector('.frame') : null; }\n"
    "function clear() {\n"
    "  document.querySelectorAll('.frame.grp').forEach(function (f) { "
    "f.classList.remove('grp', 'xn', 'xd'); f.style.stroke = ''; });\n"
    "  document.querySelectorAll('.nd.hit').forEach(function (n) { n.classList.remove('hit'); });\n}\n"
    "function perNode(k, name) {\n  var n = 0;\n"
    "  document.querySelectorAll('.nd').forEach(function (e) {\n"
    "    if (parseInt(e.getAttribute('data-cross'), 16) & (1 << k)) { e.classList.add('hit'); n++; } });\n"
    "  info.textContent = n + ' nodes hold a ' + name + ' group that crosses a node or scale-up domain';\n}\n"
    "function showKind(name) {\n  clear();\n  var k = D.kinds.indexOf(name);\n"
    "  if (k < 0) { info.textContent = ''; return; }\n"
    "  if (!D.per_gpu) { perNode(k, name); return; }\n"
    "  var groups = 0, cross = 0, gpus = 0;\n"
    "  D.groups.forEach(function (g) {\n    if (g[0] !== k) return;\n"
    "    var col = PAL[groups % PAL.length]; groups++; if (g[1]) cross++;\n"
    "    for (var j = 2; j < g.length; j++) {\n      var f = frame(g[j]); if (!f) continue; gpus++;\n"
    "      f.classList.add('grp'); f.style.stroke = col;\n"
    "      if (g[1] & 1) f.classList.add('xn'); else if (g[1] & 2) f.classList.add('xd');\n    }\n  });\n"
    "  info.textContent = groups + ' ' + name + ' groups on ' + gpus + ' GPUs; ' + cross + "
    "' cross a node or scale-up domain boundary (dashed: node, dotted: domain)';\n}\n"
    "sel.addEventListener('change', function () { showKind(sel.value); });\n"
    "var kv = document.getElementById('show-kv');\n"
    "if (kv) kv.addEventListener('change', function () { var l = document.getElementById('kv'); "
    "if (l) l.style.display = kv.checked ? '' : 'none'; });\n"
    "function groupLine(i) {\n  var G = D.groups[i], m = G.slice(2);\n"
    "  return D.kinds[G[0]] + ' group ' + i + ' (' + m.length + ' ranks' + (G[1] & 1 ? ', crosses nodes' : "
    "G[1] & 2 ? ', crosses scale-up domains' : '') + '): ' + "
    "(m.length > 32 ? m.slice(0, 32).join(' ') + ' ...' : m.join(' '));\n}\n"
    "function showRank(g) {\n  var r = parseInt(g.getAttribute('data-rank'), 10), t = g.querySelector('title');\n"
    "  det.textContent = '';\n  det.appendChild(el('pre', t ? t.textContent : 'rank ' + r));\n"
    "  det.appendChild(el('h3', 'groups'));\n  var ul = el('ul');\n"
    "  (byRank[r] || []).forEach(function (i) { ul.appendChild(el('li', groupLine(i))); });\n"
    "  det.appendChild(ul);\n  det.appendChild(el('h3', 'KV transfers (first instance pair)'));\n"
    "  var xl = el('ul'), nx = 0;\n"
    "  D.xfers.forEach(function (x) {\n    if (x[1] !== r && x[2] !== r) return; nx++;\n"
    "    xl.appendChild(el('li', (x[1] === r ? 'sends to rank ' + x[2] : 'receives from rank ' + x[1]) + "
    "': ' + (x[3] >= 0 ? fmt(x[3]) : 'bytes unknown') + ' per request'));\n  });\n"
    "  if (!nx) xl.appendChild(el('li', 'none'));\n  det.appendChild(xl);\n"
    "  document.querySelectorAll('.gpu.sel').forEach(function (e) { e.classList.remove('sel'); });\n"
    "  g.classList.add('sel');\n}\n"
    "document.getElementById('cluster').addEventListener('click', function (ev) {\n"
    "  var g = ev.target.closest('.gpu');\n  if (g) { showRank(g); return; }\n"
    "  var n = ev.target.closest('.nd, .inst');\n"
    "  if (n) { var t = n.querySelector('title'); det.textContent = ''; "
    "det.appendChild(el('pre', t ? t.textContent : '')); }\n});\n"
    "})();\n";

static void pools_table(StrBuf *sb, const Plan *p) {
  sb_puts(sb, "<h2>pools</h2>\n<table><tr><th class=\"l\">pool</th><th class=\"l\">role</th>"
              "<th>replicas</th>");
  for (int c = 0; c < CO__COUNT; c++) sb_printf(sb, "<th>%s</th>", plan_coord_name((CoordKind)c));
  sb_puts(sb, "<th>ranks</th><th class=\"l\">layers per stage</th></tr>\n");
  for (size_t i = 0; i < p->npools; i++) {
    const PlanPool *P = &p->pools[i];
    char f[40];
    render_fill(f, sizeof f, (int32_t)i, 0);
    sb_printf(sb, "<tr><td class=\"l\"><span class=\"sw\" style=\"background:%s\"></span>", f);
    render_esc(sb, P->name);
    sb_puts(sb, "</td><td class=\"l\">");
    render_esc(sb, P->role);
    sb_printf(sb, "</td><td>%lld</td>", (long long)P->replicas);
    for (int c = 0; c < CO__COUNT; c++) sb_printf(sb, "<td>%lld</td>", (long long)P->size[c]);
    sb_printf(sb, "<td>%lld-%lld</td><td class=\"l\">", (long long)P->first_rank,
              (long long)(P->first_rank + P->nranks - 1));
    for (int64_t s = 0; s < P->size[CO_PP]; s++)
      sb_printf(sb, "%s%lld", s ? "," : "", (long long)P->layer_partition[s]);
    sb_puts(sb, "</td></tr>\n");
  }
  sb_puts(sb, "</table>\n");
}

static void estimates(StrBuf *sb, const Plan *p) {
  sb_puts(sb, "<h2>estimates</h2>\n<p id=\"estimates\">");
  if (p->has_estimates)
    sb_printf(sb, "TTFT %.1f ms, TPOT %.2f ms, throughput %.0f tok/s, goodput %.1f tok/s per GPU",
              p->ttft_ms, p->tpot_ms, p->throughput_tok_s, p->goodput_tok_s_per_gpu);
  else
    sb_puts(sb, "none (the spec gives no workload and SLOs, or the cost model lacks a figure)");
  sb_printf(sb, "</p>\n<h2>diagnostics (%zu)</h2>\n<ul id=\"diagnostics\">", p->ndiags);
  for (size_t i = 0; i < p->ndiags; i++) {
    sb_puts(sb, "<li class=\"");
    render_esc(sb, p->diags[i].severity);
    sb_puts(sb, "\">");
    render_esc(sb, p->diags[i].severity);
    sb_putc(sb, ' ');
    render_esc(sb, p->diags[i].code);
    sb_puts(sb, ": ");
    render_esc(sb, p->diags[i].message);
    sb_puts(sb, "</li>");
  }
  sb_puts(sb, "</ul>\n");
}

static void reshard_table(StrBuf *sb, const Plan *p, bool per_gpu) {
  if (!p->nreshard) return;
  sb_puts(sb, "<h2>KV reshard</h2>\n<table id=\"reshard\"><tr><th class=\"l\">prefill</th>"
              "<th class=\"l\">decode</th><th>transfers</th><th>input tokens</th><th>bytes per request</th>"
              "<th>scale-up</th><th>scale-out</th><th>time ms</th></tr>\n");
  for (size_t i = 0; i < p->nreshard; i++) {
    const PlanReshard *R = &p->reshard[i];
    sb_puts(sb, "<tr><td class=\"l\">");
    render_esc(sb, R->prefill);
    sb_puts(sb, "</td><td class=\"l\">");
    render_esc(sb, R->decode);
    sb_printf(sb, "</td><td>%zu</td>", R->ntransfers);
    if (R->has_request) {
      char a[32], b[32], c[32];
      sb_printf(sb, "<td>%lld</td><td>%s</td><td>%s</td><td>%s</td><td>%.3f</td>", (long long)R->input_tokens,
                rp_fmt_bytes(R->bytes, a, sizeof a), rp_fmt_bytes(R->bytes_scale_up, b, sizeof b),
                rp_fmt_bytes(R->bytes_scale_out, c, sizeof c), R->time_ms);
    } else {
      sb_puts(sb, "<td colspan=\"5\" class=\"l\">the spec gives no input_tokens</td>");
    }
    sb_puts(sb, "</tr>\n");
  }
  sb_puts(sb, "</table>\n");
  if (per_gpu)
    sb_puts(sb, "<p>Arrows: the transfers of the first prefill and the first decode instance, ranks of "
                "their first attention replica; every instance pair moves the same cells.</p>\n");
}

/* The group kind selector: each kind the plan has, with its group count
 * and how many cross a node or scale-up domain boundary. */
static void controls(StrBuf *sb, const Plan *p, bool per_gpu) {
  int64_t n[GK__COUNT] = {0}, xn[GK__COUNT] = {0}, xd[GK__COUNT] = {0};
  for (int64_t g = 0; g < p->ngroups; g++) {
    int f = render_group_cross(p, &p->groups[g]);
    GroupKind k = p->groups[g].kind;
    n[k]++;
    if (f & RENDER_CROSS_NODE) xn[k]++;
    if (f & RENDER_CROSS_DOMAIN) xd[k]++;
  }
  sb_puts(sb, "<div id=\"controls\"><label>group kind <select id=\"kind\"><option value=\"\">(none)</option>");
  for (int k = 0; k < GK__COUNT; k++) {
    if (!n[k]) continue;
    const char *name = plan_kind_name((GroupKind)k);
    sb_printf(sb, "<option value=\"%s\">%s: %lld groups, %lld cross nodes, %lld cross scale-up domains</option>",
              name, name, (long long)n[k], (long long)xn[k], (long long)xd[k]);
  }
  sb_puts(sb, "</select></label> ");
  if (per_gpu && p->nreshard)
    sb_puts(sb, "<label><input type=\"checkbox\" id=\"show-kv\" checked> KV transfers</label> ");
  sb_puts(sb, "<span id=\"kind-info\"></span></div>\n");
}

static void heading(StrBuf *sb, const Plan *p, const char *title, bool per_gpu, int64_t limit) {
  sb_puts(sb, "<h1>");
  render_esc(sb, title);
  sb_puts(sb, "</h1>\n<p id=\"world\">");
  int64_t used = 0;
  for (size_t i = 0; i < p->nnodes; i++) used += p->nodes[i].nranks > 0;
  sb_printf(sb, "%lld ranks on %lld of %zu nodes (%d GPUs each), scale-up domain %lld GPUs; compiler ",
            (long long)p->world_size, (long long)used, p->nnodes, p->nnodes ? p->nodes[0].gpus : 0,
            (long long)p->hardware.scale_up_domain);
  render_esc(sb, p->compiler);
  sb_printf(sb, ", spec sha256 %.16s...</p>\n", p->spec_sha256);
  if (!per_gpu)
    sb_printf(sb, "<p>Over %lld GPUs: drawn per node (a square each, coloured by its first rank's "
                  "instance) and per instance; hover or click a square for its counts.</p>\n",
              (long long)limit);
}

void render_plan_html(StrBuf *sb, const Plan *p, const RenderOpts *o) {
  bool per_gpu = render_per_gpu(p, o);
  int64_t limit = o->gpu_limit > 0 ? o->gpu_limit : RENDER_GPU_LIMIT;
  sb_puts(sb, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>rankplan: ");
  render_esc(sb, o->title);
  sb_printf(sb, "</title>\n<style>\n%s</style></head>\n<body>\n", page_css);
  heading(sb, p, o->title, per_gpu, limit);
  pools_table(sb, p);
  estimates(sb, p);
  reshard_table(sb, p, per_gpu);
  controls(sb, p, per_gpu);
  sb_puts(sb, "<div id=\"main\"><div id=\"pic\">\n");
  render_plan_svg(sb, p, o);
  sb_printf(sb, "</div><aside id=\"details\"><h2>details</h2><div id=\"details-body\">%s</div></aside></div>\n"
                "<script type=\"application/json\" id=\"plan-data\">",
            per_gpu ? "Click a GPU to list its groups and KV transfers."
                    : "Click a node or an instance for its counts.");
  render_plan_data(sb, p, per_gpu);
  sb_printf(sb, "</script>\n<script>\n%s</script>\n</body></html>\n", page_js);
}
