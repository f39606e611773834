/*
 * calibrate.c: fits cost constants to benchmark runs (calibrate.h).
 *
 * Input: a valid spec, its benchmark runs, the constants to fit. Output:
 * fitted constants, predictions before and after, the calibration file.
 * Invariants: every prediction comes from compile_estimates (the one
 * evaluation, cost_deploy_eval); the fit works on the logarithm of each
 * constant, inside the fit ranges below; deterministic.
 */
#include "calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "lsq.h"

/* The constants a fit may move and their ranges (docs/cost-model.md,
 * "Calibration", gives the reasons). Efficiencies: from 0.05 (below it the
 * run was limited by something the model does not describe, so a fit
 * there would hide it) to 1 (no kernel beats the datasheet peak). The
 * step overhead: from 1 us (the fit works on logarithms, so the floor
 * must be positive; 500 times below the default) to 0.1 s (a tenth of the
 * table's limit). */
typedef struct {
  const char *name;
  double lo, hi;
} CalRange;
static const CalRange cal_ranges[] = {
    {"mfu_prefill", 0.05, 1.0},         {"mfu_decode", 0.05, 1.0},
    {"hbm_efficiency", 0.05, 1.0},      {"scale_up_efficiency", 0.05, 1.0},
    {"scale_out_efficiency", 0.05, 1.0}, {"step_overhead_s", 1e-6, 0.1},
    {"kernel_stall_s", 1e-8, 1e-4},     {"request_overhead_s", 1e-5, 1.0},
    {"eager_kernel_s", 1e-7, 1e-3},     {"seq_overhead_s", 1e-8, 1e-3},
};

bool calibrate_fit_range(const char *name, double *lo, double *hi) {
  for (size_t i = 0; i < RP_ARRAY_LEN(cal_ranges); i++)
    if (strcmp(cal_ranges[i].name, name) == 0) {
      *lo = cal_ranges[i].lo;
      *hi = cal_ranges[i].hi;
      return true;
    }
  return false;
}

const char *calibrate_fit_names(void) {
  return "mfu_prefill, mfu_decode, hbm_efficiency, scale_up_efficiency, "
         "scale_out_efficiency, step_overhead_s, seq_overhead_s, kernel_stall_s, "
         "request_overhead_s, eager_kernel_s";
}

/* One run: the spec with the run's workload, compiled once. */
typedef struct {
  Spec spec;
  Layout *L;
} CalPoint;

typedef struct {
  const CalibIn *in;
  CalPoint *pts;
  const CostConstInfo *ci[CALIBRATE_MAX_FIT];
  CostConsts k;
} CalCtx;

static double *cal_slot(CostConsts *k, const CostConstInfo *ci) {
  return (double *)((char *)k + ci->offset);
}

static bool cal_predict(const CalPoint *p, const CostConsts *k, CalPred *out, const char **why) {
  PlanEstimates est;
  if (!compile_estimates(&p->spec, p->L, k, &est, why)) return false;
  out->v[CAL_TTFT] = est.ttft_ms / 1e3;
  out->v[CAL_TPOT] = est.tpot_ms / 1e3;
  out->v[CAL_TOK_S] = est.throughput_tok_s;
  for (int j = 0; j < CAL__N; j++)
    if (!(out->v[j] > 0) || !isfinite(out->v[j])) {
      *why = "the cost model predicts a zero or non-finite figure";
      return false;
    }
  return true;
}

static double cal_measured(const BenchPoint *b, int j) {
  return j == CAL_TTFT ? b->ttft : j == CAL_TPOT ? b->tpot : b->tok_s;
}

/* The residuals of lsq.h: log(predicted / measured) per run and metric,
 * at the constants exp(x). */
static bool cal_residuals(void *ctx, const double *x, double *r) {
  CalCtx *c = ctx;
  for (size_t i = 0; i < c->in->nfit; i++) *cal_slot(&c->k, c->ci[i]) = exp(x[i]);
  for (size_t p = 0; p < c->in->npts; p++) {
    CalPred pr;
    const char *why;
    if (!cal_predict(&c->pts[p], &c->k, &pr, &why)) return false;
    for (int j = 0; j < CAL__N; j++) r[p * CAL__N + j] = log(pr.v[j] / cal_measured(&c->in->pts[p], j));
  }
  return true;
}

static bool cal_model_check(Diags *d, const CalibIn *in) {
  bool ok = true;
  for (size_t p = 0; p < in->npts; p++) {
    const BenchPoint *b = &in->pts[p];
    if (bench_model_matches(b, &in->spec->model)) continue;
    const ModelSpec *ms = &in->spec->model;
    const char *mine = ms->source.set ? ms->source.v : ms->name.set ? ms->name.v : ms->preset.v;
    Diag *g = diag_at(d, DIAG_E0564, b->loc,
                      "benchmark file `%s`, run %d: field `%s` is \"%s\", not the spec's model (%s)",
                      b->loc.file, b->record, b->model_field, b->model, mine ? mine : "unnamed");
    diag_help(g, "pass the runs of the spec's model, or set `model.source` in the spec to the id "
                 "the benchmark served (\"%s\")", b->model);
    ok = false;
  }
  return ok;
}

/* The spec at run b's workload, compiled (E0566 when it does not). */
static bool cal_point_init(Diags *d, const Spec *spec, const BenchPoint *b, CalPoint *p) {
  p->spec = *spec;
  WorkloadSpec *w = &p->spec.workload;
  w->input_tokens.v = b->tin, w->input_tokens.set = true;
  w->output_tokens.v = b->tout, w->output_tokens.set = true;
  bool open = b->rate > 0;
  w->rate.v = open ? b->rate : 0, w->rate.set = open;
  w->concurrency.v = open ? 0 : b->concurrency, w->concurrency.set = !open;
  /* A closed-loop run's length: its drain is in the measured rate. */
  w->requests.v = open ? 0 : b->completed, w->requests.set = !open;
  Diags scratch;
  diags_init(&scratch);
  p->L = compile_layout(&p->spec, &scratch);
  if (!p->L || diags_failed(&scratch)) {
    const char *first = NULL;
    for (size_t i = 0; i < scratch.list.len && !first; i++)
      if (scratch.list.items[i]->sev == SEV_ERROR) first = scratch.list.items[i]->msg;
    Diag *g = diag_at(d, DIAG_E0566, b->loc,
                      "benchmark file `%s`, run %d: the spec's deployment does not compile at the "
                      "run's workload (%lld input, %lld output tokens)", b->loc.file, b->record,
                      (long long)b->tin, (long long)b->tout);
    if (first) diag_note(g, "%s", first);
    diags_free(&scratch);
    return false;
  }
  diags_free(&scratch);
  return true;
}

static bool cal_predict_all(Diags *d, const CalibIn *in, const CalPoint *pts, const CostConsts *k,
                            CalPred *out) {
  for (size_t p = 0; p < in->npts; p++) {
    const char *why = NULL;
    if (cal_predict(&pts[p], k, &out[p], &why)) continue;
    const BenchPoint *b = &in->pts[p];
    diag_at(d, DIAG_E0566, b->loc, "benchmark file `%s`, run %d: the cost model cannot evaluate the "
                                   "spec's deployment at the run's load: %s",
            b->loc.file, b->record, why ? why : "no figure");
    return false;
  }
  return true;
}

static double cal_rms(const CalibIn *in, const CalPred *pr) {
  double s = 0;
  for (size_t p = 0; p < in->npts; p++)
    for (int j = 0; j < CAL__N; j++) {
      double e = log(pr[p].v[j] / cal_measured(&in->pts[p], j));
      s += e * e;
    }
  return sqrt(s / (double)(in->npts * CAL__N));
}

/* W0560 for a constant the fit left at a bound, W0561 for one no run
 * depends on. */
static void cal_warn(Diags *d, const CalibIn *in, const CalCtx *c, const LsqResult *res,
                     const double *lo, const double *hi, const double *x) {
  SrcLoc whole = {in->spec->file, 0, 0};
  for (size_t i = 0; i < in->nfit; i++) {
    const char *name = c->ci[i]->name;
    if (!res->moved[i]) {
      Diag *g = diag_at(d, DIAG_W0561, whole, "no benchmark run's prediction depends on `%s`; it "
                                              "keeps its value %g", name, exp(x[i]));
      diag_help(g, "drop it from --fit, or add runs where it matters (%s)", c->ci[i]->doc);
    } else if (x[i] <= lo[i] + 1e-9 || x[i] >= hi[i] - 1e-9) {
      Diag *g = diag_at(d, DIAG_W0560, whole, "fitted `%s` is at the %s end of its fit range (%g)",
                        name, x[i] <= lo[i] + 1e-9 ? "lower" : "upper", exp(x[i]));
      diag_help(g, "the runs ask for a value the model does not allow: check the spec's hardware "
                   "figures and deployment against what was benchmarked");
    }
  }
}

/* The fit itself, on the logarithms of the constants. */
static bool cal_fit(Diags *d, const CalibIn *in, CalCtx *c, CalibOut *out) {
  double x[CALIBRATE_MAX_FIT], lo[CALIBRATE_MAX_FIT], hi[CALIBRATE_MAX_FIT];
  size_t n;
  const CostConstInfo *tab = cost_const_table(&n);
  for (size_t i = 0; i < in->nfit; i++) {
    c->ci[i] = NULL;
    for (size_t t = 0; t < n; t++)
      if (strcmp(tab[t].name, in->fit[i]) == 0) c->ci[i] = &tab[t];
    double a, b;
    if (!c->ci[i] || !calibrate_fit_range(in->fit[i], &a, &b))
      rp_internal("calibrate: `%s` cannot be fitted", in->fit[i]);
    lo[i] = log(a), hi[i] = log(b);
    x[i] = fmin(hi[i], fmax(lo[i], log(fmax(*cal_slot(&c->k, c->ci[i]), a))));
  }
  LsqResult res;
  if (!lsq_fit_box(cal_residuals, c, in->nfit, in->npts * CAL__N, x, lo, hi, &res)) return false;
  for (size_t i = 0; i < in->nfit; i++) *cal_slot(&c->k, c->ci[i]) = exp(x[i]);
  out->fitted = c->k;
  out->iterations = res.iterations;
  cal_warn(d, in, c, &res, lo, hi, x);
  return true;
}

bool calibrate_run(Diags *d, const CalibIn *in, CalibOut *out) {
  memset(out, 0, sizeof *out);
  if (in->spec->deployment.npools == 0) {
    Diag *g = diag_at(d, DIAG_E0566, in->spec->deployment.loc,
                      "the spec has no pools: calibrate evaluates the deployment that was benchmarked");
    diag_help(g, "write the benchmarked pools under `deployment:` (`rankplan search --emit-spec` "
                 "writes a winner's)");
    return false;
  }
  if (!cal_model_check(d, in)) return false;
  CalCtx c = {in, rp_calloc(in->npts, sizeof(CalPoint)), {0}, in->start};
  out->before = rp_calloc(in->npts, sizeof(CalPred));
  out->after = rp_calloc(in->npts, sizeof(CalPred));
  bool ok = true;
  for (size_t p = 0; p < in->npts; p++) ok &= cal_point_init(d, in->spec, &in->pts[p], &c.pts[p]);
  ok = ok && cal_predict_all(d, in, c.pts, &in->start, out->before);
  ok = ok && cal_fit(d, in, &c, out);
  ok = ok && cal_predict_all(d, in, c.pts, &out->fitted, out->after);
  if (ok) {
    out->rms_before = cal_rms(in, out->before);
    out->rms_after = cal_rms(in, out->after);
  }
  for (size_t p = 0; p < in->npts; p++)
    if (c.pts[p].L) lay_free(c.pts[p].L);
  free(c.pts);
  return ok;
}

void calibrate_out_free(CalibOut *out) {
  free(out->before);
  free(out->after);
  out->before = out->after = NULL;
}

static void cal_print_load(FILE *f, const BenchPoint *b) {
  if (b->rate > 0) fprintf(f, "rate %g req/s", b->rate);
  else fprintf(f, "concurrency %lld", (long long)b->concurrency);
  fprintf(f, ", %lld input and %lld output tokens, %lld requests in %.1f s\n", (long long)b->tin,
          (long long)b->tout, (long long)b->completed, b->duration);
}

void calibrate_print(FILE *f, const CalibIn *in, const CalibOut *out) {
  static const char *const label[CAL__N] = {"TTFT ms", "TPOT ms", "output tok/s"};
  static const double scale[CAL__N] = {1e3, 1e3, 1};
  for (size_t p = 0; p < in->npts; p++) {
    const BenchPoint *b = &in->pts[p];
    fprintf(f, "run %zu: %s #%d (%s): ", p + 1, b->loc.file, b->record, bench_tool_name(b->tool));
    cal_print_load(f, b);
    for (int j = 0; j < CAL__N; j++) {
      double m = cal_measured(b, j), e0 = out->before[p].v[j] / m - 1, e1 = out->after[p].v[j] / m - 1;
      fprintf(f, "  %-13s measured %10.4g  before %10.4g (%+6.1f%%)  after %10.4g (%+6.1f%%)\n",
              label[j], m * scale[j], out->before[p].v[j] * scale[j], 100 * e0,
              out->after[p].v[j] * scale[j], 100 * e1);
    }
  }
  fprintf(f, "\n%-22s %12s %12s   %s\n", "constant", "start", "fitted", "fit range");
  size_t n;
  const CostConstInfo *tab = cost_const_table(&n);
  for (size_t i = 0; i < in->nfit; i++)
    for (size_t t = 0; t < n; t++) {
      if (strcmp(tab[t].name, in->fit[i]) != 0) continue;
      double lo, hi;
      calibrate_fit_range(tab[t].name, &lo, &hi);
      fprintf(f, "%-22s %12.6g %12.6g   [%g, %g]\n", tab[t].name,
              *(const double *)((const char *)&in->start + tab[t].offset),
              *(const double *)((const char *)&out->fitted + tab[t].offset), lo, hi);
    }
  fprintf(f, "\nrms log error %.4f before, %.4f after (%zu run%s, %d iteration%s)\n", out->rms_before,
          out->rms_after, in->npts, in->npts == 1 ? "" : "s", out->iterations,
          out->iterations == 1 ? "" : "s");
}

char *calibrate_json(const CalibIn *in, const CalibOut *out, const char *spec_path) {
  StrBuf src, sb;
  sb_init(&src);
  sb_init(&sb);
  sb_printf(&src, "rankplan calibrate %s: %zu benchmark runs (", spec_path, in->npts);
  for (size_t p = 0; p < in->npts; p++)
    if (p == 0 || strcmp(in->pts[p].loc.file, in->pts[p - 1].loc.file) != 0)
      sb_printf(&src, "%s%s", p ? ", " : "", in->pts[p].loc.file);
  sb_puts(&src, "); fitted ");
  for (size_t i = 0; i < in->nfit; i++) sb_printf(&src, "%s%s", i ? ", " : "", in->fit[i]);
  char *source = sb_take(&src);
  sb_puts(&sb, "{\n  \"format\": \"rankplan.calibration/1\",\n  \"source\": ");
  sb_json_str(&sb, source);
  free(source);
  size_t n;
  const CostConstInfo *tab = cost_const_table(&n);
  for (size_t t = 0; t < n; t++) {
    sb_printf(&sb, ",\n  \"%s\": ", tab[t].name);
    sb_put_exact(&sb, *(const double *)((const char *)&out->fitted + tab[t].offset));
  }
  sb_puts(&sb, "\n}\n");
  return sb_take(&sb);
}
