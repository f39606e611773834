/*
 * calibrate.h: fits the cost model's efficiency constants to measured
 * benchmark runs (`rankplan calibrate`, docs/cost-model.md, "Calibration").
 *
 * Input: a spec whose deployment is the one that was benchmarked, its runs
 * (bench.h), the names of the constants to fit and the constants to start
 * from. Output: the fitted constants and, per run, the predictions before
 * and after. Each run is the spec with its workload replaced by the run's
 * (input and output tokens, request rate or concurrency), evaluated by the
 * one evaluation `compile` and `search` use (compile_estimates, which calls
 * cost_deploy_eval). The fit minimises the squared log ratios of predicted
 * to measured mean TTFT, TPOT and output tokens/s over every run (lsq.h),
 * each constant inside its fit range (calibrate_fit_range).
 * Invariants: deterministic; the spec is not changed.
 */
#ifndef RANKPLAN_CALIBRATE_H
#define RANKPLAN_CALIBRATE_H

#include <stdio.h>

#include "bench.h"
#include "cost.h"

/* The constants fitted when --fit is not given. */
#define CALIBRATE_FIT_DEFAULT "mfu_prefill,hbm_efficiency,step_overhead_s"
#define CALIBRATE_MAX_FIT 8

/* The fit range of a constant that can be fitted (docs/cost-model.md,
 * "Calibration", gives the reasons); false when `name` cannot be fitted. */
bool calibrate_fit_range(const char *name, double *lo, double *hi);
/* The names `calibrate_fit_range` accepts, comma-separated. */
const char *calibrate_fit_names(void);

/* Metrics compared per run. */
enum { CAL_TTFT, CAL_TPOT, CAL_TOK_S, CAL__N };

typedef struct {
  double v[CAL__N]; /* s, s, tokens/s */
} CalPred;

typedef struct {
  const Spec *spec;
  const BenchPoint *pts;
  size_t npts;
  const char *fit[CALIBRATE_MAX_FIT];
  size_t nfit;
  CostConsts start;
} CalibIn;

typedef struct {
  CostConsts fitted;
  CalPred *before, *after; /* per run */
  double rms_before, rms_after; /* root mean square of the log ratios */
  int iterations;
} CalibOut;

/* Checks every run against the spec's model (E0564), compiles the spec's
 * deployment at every run's workload and evaluates it (E0566 when it
 * cannot), fits, and reports W0560/W0561 for constants at a bound or not
 * constrained. False on any error. */
bool calibrate_run(Diags *d, const CalibIn *in, CalibOut *out);
void calibrate_out_free(CalibOut *out);

/* The per-run table (measured, before, after, each error) and the
 * constants, as `rankplan calibrate` prints them. */
void calibrate_print(FILE *f, const CalibIn *in, const CalibOut *out);

/* The calibration file (`rankplan.calibration/1`, cost_calibration_load):
 * every constant of the table, with `source` naming the spec and runs. */
char *calibrate_json(const CalibIn *in, const CalibOut *out, const char *spec_path);

#endif
