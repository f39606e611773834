/*
 * cmd_render.c: `rankplan render PLAN -o FILE`, the plan as a picture.
 *
 * Loads the plan with the shared loader (plan_load, the checks the runtime
 * applies), draws it (render.c, render_svg.c) and writes the file
 * atomically (outfile.c): an HTML page, or the SVG picture alone.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "outfile.h"
#include "render.h"

static const char render_usage[] =
    "usage: rankplan render [options] PLAN -o FILE\n"
    "\n"
    "Draws a plan written by `rankplan compile` as one self-contained HTML page\n"
    "(inline SVG, CSS and plain JavaScript; nothing is fetched): the cluster as\n"
    "nodes x GPUs, each GPU coloured by pool and instance and labelled with its\n"
    "rank, pipeline stage, coordinates and memory ledger; a selector that\n"
    "outlines the groups of one kind and marks those crossing a node or\n"
    "scale-up domain; the KV-reshard transfers as arrows; a click on a GPU\n"
    "lists its groups and transfers; the estimates and diagnostics. Plans of\n"
    "more than 4096 GPUs (--gpu-limit) are drawn per node and per instance.\n"
    "The plan is checked on load as the runtime checks it. docs/render.md.\n"
    "\n"
    "options:\n"
    "  -o FILE               the output (`-`: standard output)\n"
    "  --format html|svg     the page, or the cluster picture alone (default:\n"
    "                        svg when FILE ends in .svg, else html)\n"
    "  --title TEXT          the page's title (default: the plan's file name)\n"
    "  --gpu-limit N         draw every GPU up to N GPUs (default 4096), else\n"
    "                        per node and per instance\n"
    "  -h, --help            show this help\n"
    "\n"
    "exit: 0 ok, 1 the plan is invalid, 2 usage error or unreadable or\n"
    "unwritable file\n";

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Loads, draws and writes; returns the exit code. */
static int render_run(const char *path, const char *out, bool svg, RenderOpts *o) {
  int rc = RP_EXIT_OK;
  Plan *p = cli_plan_load("render", path, NULL, &rc);
  if (!p) return rc;
  if (p->partial) {
    fprintf(stderr, "rankplan render: %s: a --split-by-node file (node %d only); render the whole plan\n",
            path, p->partial_node);
    plan_free(p);
    return RP_EXIT_INPUT;
  }
  const char *slash = strrchr(path, '/');
  if (!o->title) o->title = slash ? slash + 1 : path;
  StrBuf sb;
  sb_init(&sb);
  if (svg) render_plan_svg(&sb, p, o);
  else render_plan_html(&sb, p, o);
  plan_free(p);
  int e = rp_write_file_atomic(out, sb.buf, sb.len);
  if (e) {
    fprintf(stderr, "rankplan render: cannot write `%s`: %s\n", out, rp_strerror(e));
    rc = RP_EXIT_USAGE;
  }
  sb_free(&sb);
  return rc;
}

int cmd_render(int argc, char **argv) {
  const char *path = NULL, *out = NULL, *fmt = NULL, *limit_s = NULL;
  RenderOpts o = {NULL, 0};
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"-o", NULL, true, &out, NULL, NULL, NULL},
      {"--format", NULL, true, &fmt, NULL, NULL, NULL},
      {"--title", NULL, true, &o.title, NULL, NULL, NULL},
      {"--gpu-limit", NULL, true, &limit_s, NULL, NULL, NULL},
  };
  int pr = cli_parse("render", render_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "PLAN");
  if (pr != RP_OPT_GO) return pr;
  if (!path) return cli_usage_error("render", "missing PLAN");
  if (!out) return cli_usage_error("render", "missing -o FILE");
  bool svg = !fmt && ends_with(out, ".svg");
  if (fmt && strcmp(fmt, "svg") == 0) svg = true;
  else if (fmt && strcmp(fmt, "html") != 0)
    return cli_usage_error("render", "unknown format '%s' (expected html or svg)", fmt);
  long long v;
  if (limit_s) {
    if (!cli_parse_int(limit_s, 1, INT32_MAX, &v))
      return cli_usage_error("render", "--gpu-limit expects a GPU count from 1, got '%s'", limit_s);
    o.gpu_limit = v;
  }
  const char *inputs[] = {path};
  if (cli_output_not_input("render", "-o", out, inputs, 1)) return RP_EXIT_USAGE;
  return render_run(path, out, svg, &o);
}
