/*
 * cmd_check.c: `rankplan check SPEC`, the dry-run validator.
 *
 * Runs parse (types, units, structure) and then the model, memory and
 * topology rules; prints every diagnostic, not just the first. Exit 0 when
 * valid (warnings allowed), 1 when any error, 2 on usage or unreadable file.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "spec.h"

static const char check_usage[] =
    "usage: rankplan check [options] SPEC\n"
    "\n"
    "Validates a deployment spec without launching anything: YAML, types and\n"
    "units, required keys, pools against the cluster, head/expert\n"
    "divisibility, memory fit per rank, KV capacity against the context and\n"
    "topology. Every problem is reported with its file:line:col.\n"
    "\n"
    "options:\n"
    "  --format text|json|sarif  diagnostics format (default text; json is\n"
    "                            documented in docs/errors.md; sarif is 2.1.0)\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "                            (default: $RANKPLAN_CATALOG or plans/catalog)\n"
    "  -q, --quiet               print diagnostics only, no summary tables\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 valid, 1 invalid, 2 usage error or unreadable file\n";

int cmd_check(int argc, char **argv) {
  const char *path = NULL, *fmt_s = "text", *catalog = NULL;
  bool quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(check_usage, stdout);
      return RP_EXIT_OK;
    }
    if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
      quiet = true;
      continue;
    }
    if ((r = cli_opt_value("check", argc, argv, &i, "--format", &fmt_s))) {
      if (r < 0) return RP_EXIT_USAGE;
      continue;
    }
    if ((r = cli_opt_value("check", argc, argv, &i, "--catalog", &catalog))) {
      if (r < 0) return RP_EXIT_USAGE;
      continue;
    }
    if (a[0] == '-' && a[1] != '\0') return cli_usage_error("check", "unknown option '%s'", a);
    if (path) return cli_usage_error("check", "expected one SPEC, got '%s' and '%s'", path, a);
    path = a;
  }
  DiagFormat fmt;
  if (!diag_format_parse(fmt_s, &fmt))
    return cli_usage_error("check", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (!path) return cli_usage_error("check", "missing SPEC");

  Diags d;
  diags_init(&d);
  Spec *spec = spec_parse_file(&d, path, catalog);
  int rc;
  bool unreadable = false;
  for (size_t i = 0; i < d.list.len; i++) {
    DiagCode c = d.list.items[i]->code;
    if (c == DIAG_E0001) unreadable = true;
  }
  /* Model, memory and topology rules run here once parse succeeded. */
  FILE *out = fmt == DIAG_FMT_TEXT ? stderr : stdout;
  diags_print(&d, out, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  if (unreadable) rc = RP_EXIT_USAGE;
  else if (diags_failed(&d) || !spec) rc = RP_EXIT_INPUT;
  else rc = RP_EXIT_OK;
  if (rc == RP_EXIT_OK && fmt == DIAG_FMT_TEXT && !quiet)
    printf("%s: ok\n", path);
  spec_free(spec);
  diags_free(&d);
  return rc;
}
