/*
 * cmd_explain.c: `rankplan explain PLAN`, the plan as tables or JSON.
 *
 * Loads the plan with the shared loader (plan_load, the same checks the
 * runtime applies) and prints the views explain.c provides. With no view
 * option it prints the summary and the rank table.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plan.h"

static const char explain_usage[] =
    "usage: rankplan explain [options] PLAN\n"
    "\n"
    "Prints a plan written by `rankplan compile`: the pools, every rank's\n"
    "node, GPU, coordinates and shards, its process groups and memory. The\n"
    "plan is checked on load as the runtime checks it.\n"
    "\n"
    "options:\n"
    "  --summary             pools, nodes, group counts, warnings\n"
    "  --rank R              everything about global rank R (its groups' members too)\n"
    "  --groups KIND         the groups of one kind: tp, cp, dp, pp, tp-cp, dp-cp,\n"
    "                        tp-pp, tp-dp-cp, ep, etp, edp, tp-ep, dcp, embedding,\n"
    "                        instance, world\n"
    "  --memory              the memory ledger per pool and pipeline stage\n"
    "  --reshard             the kv_reshard transfers, bytes and time per link class\n"
    "  --tokens N            with --reshard: bytes for N-token requests (default:\n"
    "                        the plan's input_tokens)\n"
    "  --spec SPEC           also check the plan was compiled from SPEC\n"
    "  --format text|json    tables (default) or one JSON document for tools\n"
    "  -h, --help            show this help\n"
    "\n"
    "With no view option: --summary and the rank table.\n"
    "exit: 0 ok, 1 the plan is invalid or R is not in it, 2 usage error or\n"
    "unreadable file\n";

int cmd_explain(int argc, char **argv) {
  const char *path = NULL, *fmt = "text", *rank_s = NULL, *kind_s = NULL, *spec = NULL,
             *tokens_s = NULL;
  ExplainOpts o;
  memset(&o, 0, sizeof o);
  o.rank = -1;
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--summary", NULL, false, NULL, &o.summary, NULL, NULL},
      {"--memory", NULL, false, NULL, &o.memory, NULL, NULL},
      {"--reshard", NULL, false, NULL, &o.reshard, NULL, NULL},
      {"--rank", NULL, true, &rank_s, NULL, NULL, NULL},
      {"--groups", NULL, true, &kind_s, NULL, NULL, NULL},
      {"--format", NULL, true, &fmt, NULL, NULL, NULL},
      {"--spec", NULL, true, &spec, NULL, NULL, NULL},
      {"--tokens", NULL, true, &tokens_s, NULL, NULL, NULL},
  };
  int pr = cli_parse("explain", explain_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "PLAN");
  if (pr != RP_OPT_GO) return pr;
  if (!path) return cli_usage_error("explain", "missing PLAN");
  if (strcmp(fmt, "text") == 0) o.json = false;
  else if (strcmp(fmt, "json") == 0) o.json = true;
  else return cli_usage_error("explain", "unknown format '%s' (expected text or json)", fmt);
  long long v;
  if (rank_s) {
    if (!cli_parse_int(rank_s, 0, INT32_MAX, &v))
      return cli_usage_error("explain", "--rank expects a rank number, got '%s'", rank_s);
    o.rank = v;
  }
  if (tokens_s) {
    if (!cli_parse_int(tokens_s, 1, INT32_MAX, &v))
      return cli_usage_error("explain", "--tokens expects a token count, got '%s'", tokens_s);
    o.tokens = v;
  }
  if (kind_s) {
    if (!plan_kind_parse(kind_s, &o.kind))
      return cli_usage_error("explain", "unknown group kind '%s' (expected tp, cp, dp, pp, tp-cp, "
                                        "dp-cp, tp-pp, tp-dp-cp, ep, etp, edp, tp-ep, dcp, "
                                        "embedding, instance or world)",
                             kind_s);
    o.groups = true;
  }
  if (!o.summary && !o.memory && !o.reshard && !o.groups && o.rank < 0) o.summary = o.ranks = true;

  int rc = RP_EXIT_OK;
  Plan *p = cli_plan_load("explain", path, spec, &rc);
  if (!p) return rc;
  rc = plan_explain(stdout, stderr, p, &o) ? RP_EXIT_OK : RP_EXIT_INPUT;
  plan_free(p);
  return rc;
}
