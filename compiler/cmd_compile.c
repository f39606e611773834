/*
 * cmd_compile.c: `rankplan compile SPEC -o PLAN`: its arguments and
 * output; the pipeline itself is compile.c (compile.h).
 *
 * Input: a spec file. Output: the plan file (docs/plan.md), or diagnostics.
 * Invariants: nothing is written unless every stage succeeded: with any
 * error the command prints the diagnostics and exits 1, and an existing
 * plan at PLAN stays as it was. Files are written atomically. The same
 * stages run for `rankplan search -o` through compile_spec_to_plan().
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compile.h"
#include "hooks.h"
#include "launch.h"
#include "spec.h"

static const char compile_usage[] =
    "usage: rankplan compile [options] SPEC -o PLAN\n"
    "       rankplan compile [options] SPEC --emit TARGET -o DIR\n"
    "\n"
    "Compiles a deployment spec to its plan: every rank's node, GPU,\n"
    "coordinates, process groups, shards and memory (docs/plan.md). The plan\n"
    "is written atomically (temp file, then rename); with any error nothing\n"
    "is written. A device or FIFO is written through; `-o -` writes the plan\n"
    "to standard output (diagnostics then all go to standard error); an\n"
    "output that is the spec itself is refused.\n"
    "\n"
    "options:\n"
    "  -o, --output PLAN         where to write the plan (required; - for stdout)\n"
    "  --emit vllm|sglang|trtllm|shell|slurm|k8s|dynamo\n"
    "                            write DIR/plan.json and the launch files of that\n"
    "                            target (as `rankplan emit`, docs/engines.md) into\n"
    "                            DIR, at once\n"
    "  --split-by-node DIR       also write DIR/node-<N>.plan.json per node,\n"
    "                            each holding only what that node's ranks need\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "  --calibration FILE        cost constants for the plan's estimates (the file\n"
    "                            `rankplan calibrate` or `rankrun --probe` writes)\n"
    "  --format text|json|sarif  diagnostics format (default text)\n"
    "  -h, --help                show this help\n"
    "\n"
    "Lua hooks named in the spec run in a sandbox with these limits\n"
    "(environment, docs/hooks.md):\n"
    HOOK_ENV_HELP
    "\n"
    "exit: 0 written, 1 the spec is wrong, 2 usage error or unreadable or\n"
    "unwritable file, 70 internal error\n";

int cmd_compile(int argc, char **argv) {
  const char *path = NULL, *out = NULL, *split = NULL, *fmt_s = "text", *catalog = NULL, *emit = NULL;
  const char *calib = NULL;
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--output", "-o", true, &out, NULL, NULL, NULL},
      {"--split-by-node", NULL, true, &split, NULL, NULL, NULL},
      {"--format", NULL, true, &fmt_s, NULL, NULL, NULL},
      {"--catalog", NULL, true, &catalog, NULL, NULL, NULL},
      {"--emit", NULL, true, &emit, NULL, NULL, NULL},
      {"--calibration", NULL, true, &calib, NULL, NULL, NULL},
  };
  int pr = cli_parse("compile", compile_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "SPEC");
  if (pr != RP_OPT_GO) return pr;
  DiagFormat fmt;
  if (!diag_format_parse(fmt_s, &fmt))
    return cli_usage_error("compile", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (!path) return cli_usage_error("compile", "missing SPEC");
  if (!out) return cli_usage_error("compile", "missing '-o PLAN' (where to write the plan)");
  LaunchTarget lt;
  if (emit && (!launch_target_parse(emit, &lt)))
    return cli_usage_error("compile", "unknown --emit target '%s' (expected %s)", emit, launch_target_list());
  if (emit && strcmp(out, "-") == 0) return cli_usage_error("compile", "--emit writes a directory; `-o -` is refused");
  const char *inputs[] = {path, calib};
  if (cli_output_not_input("compile", "-o", out, inputs, calib ? 2 : 1)) return RP_EXIT_USAGE;
  /* With `-o -` the plan is standard output, so every diagnostic goes to
   * standard error, whatever its format. */
  bool plan_on_stdout = strcmp(out, "-") == 0;

  Diags d;
  diags_init(&d);
  CostConsts k;
  cost_consts_default(&k);
  bool unreadable = false;
  Spec *spec = calib && !cost_calibration_load(&d, calib, &k, &unreadable) ? NULL
                                                                            : spec_parse_file(&d, path, catalog);
  for (size_t i = 0; i < d.list.len; i++)
    if (d.list.items[i]->code == DIAG_E0001) unreadable = true;
  int rc = RP_EXIT_INPUT;
  char *what = NULL;
  int werr = 0;
  if (spec && !diags_failed(&d)) {
    CompileOpts o = {out, split, &k};
    rc = emit ? compile_emit(spec, emit, out, split, catalog, &k, &d, &what, &werr)
              : compile_spec_to_plan(spec, &o, &d, &what, &werr);
  }
  if (unreadable) rc = RP_EXIT_USAGE;
  FILE *dout = fmt == DIAG_FMT_TEXT || plan_on_stdout ? stderr : stdout;
  if (fmt != DIAG_FMT_TEXT || d.list.len > 0)
    diags_print(&d, dout, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  if (werr) fprintf(stderr, "rankplan compile: cannot write `%s`: %s\n", what ? what : out, rp_strerror(werr));
  free(what);
  spec_free(spec);
  diags_free(&d);
  return rc;
}
