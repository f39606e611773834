/*
 * cmd_calibrate.c: `rankplan calibrate SPEC --bench FILE... -o CAL`: fits
 * the cost model's efficiency constants to benchmark results and writes
 * the calibration file `search` and `compile` read with --calibration.
 *
 * Input: a spec (the deployment that was benchmarked), result files of
 * vLLM, SGLang or AIPerf (bench.h). Output: the per-run table on standard
 * output and the calibration file, written atomically; diagnostics on
 * standard error. Invariants: nothing is written unless every run was read
 * and the fit ran; the fit is calibrate.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "cli.h"
#include "outfile.h"

static const char calibrate_usage[] =
    "usage: rankplan calibrate [options] SPEC --bench FILE [FILE...] -o CAL\n"
    "\n"
    "Fits the cost model's efficiency constants to measured benchmark runs of\n"
    "the deployment SPEC describes, and writes them as a calibration file for\n"
    "`rankplan search --calibration CAL` and `rankplan compile --calibration CAL`.\n"
    "Each run is evaluated at its own load (request rate or concurrency, mean\n"
    "input and output tokens); the fit minimises the squared log error of the\n"
    "predicted mean TTFT, TPOT and output tokens/s over every run (bounded\n"
    "least squares, docs/cost-model.md \"Calibration\"). The table shows each\n"
    "run's figures before and after the fit.\n"
    "\n"
    "options:\n"
    "  --bench FILE              a benchmark result file (repeatable; arguments\n"
    "                            after SPEC are result files too): `vllm bench serve\n"
    "                            --save-result` JSON, `python -m sglang.bench_serving\n"
    "                            --output-file` JSON Lines (a run per line), or\n"
    "                            AIPerf's profile_export_aiperf.json\n"
    "  -o, --output FILE         where to write the calibration file (required)\n"
    "  --fit NAME,...            the constants to fit (default " CALIBRATE_FIT_DEFAULT ");\n"
    "                            any of mfu_prefill, mfu_decode, hbm_efficiency,\n"
    "                            scale_up_efficiency, scale_out_efficiency,\n"
    "                            step_overhead_s, seq_overhead_s, kernel_stall_s,\n"
    "                            request_overhead_s, eager_kernel_s\n"
    "  --calibration FILE        constants to start from (default: the built-in ones)\n"
    "  --catalog DIR             where `preset:` entries are looked up\n"
    "  --format text|json|sarif  diagnostics format (default text), on standard error\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 written, 1 a spec or benchmark file is wrong, 2 usage error or\n"
    "unreadable or unwritable file, 70 internal error\n";

typedef struct {
  const char *spec;
  RP_VEC(const char *) bench;
} CalArgs;

static int cal_help(void *ctx, const RpOpt *opt, const char *value) {
  (void)ctx;
  return cli_help((void *)calibrate_usage, opt, value);
}

static int cal_bench(void *ctx, const RpOpt *opt, const char *value) {
  (void)opt;
  CalArgs *a = ctx;
  rp_vec_push(&a->bench, value);
  return RP_OPT_GO;
}

/* The first argument is SPEC, every further one a result file. */
static int cal_positional(void *ctx, const char *arg) {
  CalArgs *a = ctx;
  if (!a->spec) a->spec = arg;
  else rp_vec_push(&a->bench, arg);
  return RP_OPT_GO;
}

/* Splits --fit into in->fit; a usage error for an unknown or repeated name. */
static int cal_fit_list(const char *list, CalibIn *in, char *buf, size_t cap) {
  if (strlen(list) >= cap) return cli_usage_error("calibrate", "--fit: list too long");
  strcpy(buf, list);
  in->nfit = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    double lo, hi;
    if (!calibrate_fit_range(t, &lo, &hi))
      return cli_usage_error("calibrate", "--fit: `%s` cannot be fitted (expected %s)", t,
                             calibrate_fit_names());
    for (size_t i = 0; i < in->nfit; i++)
      if (strcmp(in->fit[i], t) == 0) return cli_usage_error("calibrate", "--fit names `%s` twice", t);
    if (in->nfit == CALIBRATE_MAX_FIT) return cli_usage_error("calibrate", "--fit: too many names");
    in->fit[in->nfit++] = t;
  }
  if (in->nfit == 0) return cli_usage_error("calibrate", "--fit needs at least one constant");
  return RP_OPT_GO;
}

/* Reads the constants, the spec and every result file into in and pts.
 * Returns the exit code when something is wrong, else RP_OPT_GO. */
static int cal_load(Diags *d, const CalArgs *a, const char *calib, const char *catalog,
                    CalibIn *in, BenchPoints *pts, Spec **spec) {
  bool unreadable = false;
  cost_consts_default(&in->start);
  if (calib && !cost_calibration_load(d, calib, &in->start, &unreadable))
    return unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  *spec = spec_parse_file(d, a->spec, catalog);
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == DIAG_E0001) unreadable = true;
  if (!*spec || diags_failed(d)) return unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  bool ok = true;
  for (size_t i = 0; i < a->bench.len; i++) {
    bool u = false;
    ok &= bench_read_file(d, a->bench.items[i], pts, &u);
    unreadable |= u;
  }
  if (!ok) return unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  in->spec = *spec;
  in->pts = pts->items;
  in->npts = pts->len;
  return RP_OPT_GO;
}

/* Fits, prints the table and writes the file. */
static int cal_go(Diags *d, const CalibIn *in, const char *spec_path, const char *out) {
  CalibOut co;
  int rc = RP_EXIT_INPUT;
  if (calibrate_run(d, in, &co)) {
    calibrate_print(stdout, in, &co);
    char *text = calibrate_json(in, &co, spec_path);
    int werr = rp_write_file_atomic(out, text, strlen(text));
    free(text);
    if (werr) {
      fprintf(stderr, "rankplan calibrate: cannot write `%s`: %s\n", out, rp_strerror(werr));
      rc = RP_EXIT_USAGE;
    } else {
      printf("wrote %s\n", out);
      rc = RP_EXIT_OK;
    }
  }
  calibrate_out_free(&co);
  return rc;
}

/* Usage checks after parsing; RP_OPT_GO when the arguments are complete. */
static int cal_check_args(const CalArgs *a, const char *out, const char *calib) {
  if (!a->spec) return cli_usage_error("calibrate", "missing SPEC");
  if (a->bench.len == 0) return cli_usage_error("calibrate", "missing '--bench FILE' (the benchmark results)");
  if (!out) return cli_usage_error("calibrate", "missing '-o CAL' (where to write the calibration file)");
  if (strcmp(out, "-") == 0) return cli_usage_error("calibrate", "-o names a file; the table goes to standard output");
  const char **inputs = rp_calloc(a->bench.len + 2, sizeof *inputs);
  size_t n = 0;
  inputs[n++] = a->spec;
  if (calib) inputs[n++] = calib;
  for (size_t i = 0; i < a->bench.len; i++) inputs[n++] = a->bench.items[i];
  int rc = cli_output_not_input("calibrate", "-o", out, inputs, n) ? RP_EXIT_USAGE : RP_OPT_GO;
  free(inputs);
  return rc;
}

int cmd_calibrate(int argc, char **argv) {
  const char *out = NULL, *fit = CALIBRATE_FIT_DEFAULT, *calib = NULL, *catalog = NULL, *fmt_s = "text";
  CalArgs a = {0};
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cal_help, NULL},
      {"--bench", NULL, true, NULL, NULL, cal_bench, NULL},
      {"--output", "-o", true, &out, NULL, NULL, NULL},
      {"--fit", NULL, true, &fit, NULL, NULL, NULL},
      {"--calibration", NULL, true, &calib, NULL, NULL, NULL},
      {"--catalog", NULL, true, &catalog, NULL, NULL, NULL},
      {"--format", NULL, true, &fmt_s, NULL, NULL, NULL},
  };
  RpOptSpec s = {"calibrate", opts, RP_ARRAY_LEN(opts), cli_usage_msg, cal_positional, NULL, "SPEC", &a};
  int rc = rp_opts_parse(&s, argc, argv, 1);
  char fitbuf[512];
  CalibIn in = {0};
  DiagFormat fmt;
  if (rc == RP_OPT_GO && !diag_format_parse(fmt_s, &fmt))
    rc = cli_usage_error("calibrate", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (rc == RP_OPT_GO) rc = cal_check_args(&a, out, calib);
  if (rc == RP_OPT_GO) rc = cal_fit_list(fit, &in, fitbuf, sizeof fitbuf);
  if (rc != RP_OPT_GO) {
    free(a.bench.items);
    return rc;
  }
  Diags d;
  diags_init(&d);
  BenchPoints pts = {0};
  Spec *spec = NULL;
  rc = cal_load(&d, &a, calib, catalog, &in, &pts, &spec);
  if (rc == RP_OPT_GO) rc = cal_go(&d, &in, a.spec, out);
  if (fmt != DIAG_FMT_TEXT || d.list.len > 0)
    diags_print(&d, stderr, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  bench_points_free(&pts);
  spec_free(spec);
  diags_free(&d);
  free(a.bench.items);
  return rc;
}
