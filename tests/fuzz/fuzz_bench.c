/*
 * fuzz_bench.c: libFuzzer target for the benchmark result files `rankplan
 * calibrate` reads (bench.c: vLLM's --save-result JSON, SGLang's
 * bench_serving JSON Lines, AIPerf's profile_export_aiperf.json). Each
 * input is read as one result file. The reader must report an error
 * exactly when it fails, and every run it accepts must hold what bench.h
 * promises (finite, in range, a steady load). Accepted runs are then fitted
 * against plans/examples/llama-3.1-8b-agg.yaml as `calibrate` does, and the
 * calibration file the fit writes is read back by the calibration loader,
 * which must accept it: a file `calibrate` writes and `--calibration`
 * refuses is a finding as much as a crash is.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "calibrate.h"
#include "rp_config.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const Spec *the_spec(void) {
  static Spec *spec;
  if (!spec) {
    Diags d;
    diags_init(&d);
    spec = spec_parse_file(&d, RP_SOURCE_ROOT "/plans/examples/llama-3.1-8b-agg.yaml",
                           RP_SOURCE_ROOT "/plans/catalog");
    if (!spec || diags_failed(&d)) abort();
    diags_free(&d);
  }
  return spec;
}

static bool pos_finite(double x) { return isfinite(x) && x > 0; }

/* What bench.h promises of a run it returns. */
static void check_point(const BenchPoint *p) {
  bool load = (p->rate > 0 && isfinite(p->rate)) || p->concurrency > 0;
  if (!load || p->rate < 0 || p->concurrency < 0 || p->completed < 1 || p->tin < 0 || p->tout < 0 ||
      !pos_finite(p->duration) || !pos_finite(p->ttft) || !pos_finite(p->tpot) || !pos_finite(p->tok_s))
    abort();
}

/* The fit on the accepted runs, its file read back. */
static void fit_and_reload(const BenchPoint *pts, size_t n) {
  CalibIn in = {.spec = the_spec(), .pts = pts, .npts = n,
                .fit = {"mfu_prefill", "hbm_efficiency", "step_overhead_s"}, .nfit = 3};
  cost_consts_default(&in.start);
  Diags d;
  diags_init(&d);
  CalibOut out;
  if (calibrate_run(&d, &in, &out)) {
    static FILE *sink; /* opened once: the table is printed for every fit */
    if (!sink) sink = fopen("/dev/null", "w");
    if (sink) calibrate_print(sink, &in, &out);
    char *text = calibrate_json(&in, &out, "spec.yaml");
    CostConsts back;
    cost_consts_default(&back);
    Diags d2;
    diags_init(&d2);
    if (!cost_calibration_parse(&d2, "cal.json", text, strlen(text), &back)) abort();
    diags_free(&d2);
    free(text);
  } else if (!diags_failed(&d)) {
    abort(); /* a failed fit names its error */
  }
  calibrate_out_free(&out);
  diags_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  Diags d;
  diags_init(&d);
  BenchPoints pts = {0};
  bool ok = bench_read_text(&d, "result.json", text, size, &pts);
  if (ok == diags_failed(&d)) abort();
  if (ok) {
    for (size_t i = 0; i < pts.len; i++) check_point(&pts.items[i]);
    fit_and_reload(pts.items, pts.len);
  }
  bench_points_free(&pts);
  diags_free(&d);
  free(text);
  return 0;
}
