/*
 * test_lsq.c: the bounded least squares of `rankplan calibrate` (lsq.h).
 * An exponential decay y = a exp(-b t) is recovered from exact samples; a
 * bound that excludes the answer holds the variable at the bound with the
 * other fitted to the rest; a variable no residual depends on is reported
 * as not moved; a residual function that fails at the start fails the fit.
 */
#include <math.h>

#include "lsq.h"
#include "t.h"

#define NT 8

typedef struct {
  double a, b; /* the truth */
} Decay;

static bool decay_res(void *ctx, const double *x, double *r) {
  const Decay *d = ctx;
  for (int i = 0; i < NT; i++) {
    double t = 0.5 * i;
    r[i] = x[0] * exp(-x[1] * t) - d->a * exp(-d->b * t);
  }
  return true;
}

static void test_recovers(void) {
  Decay d = {2.5, 0.7};
  double x[2] = {1.0, 0.1}, lo[2] = {0.1, 0.01}, hi[2] = {10, 5};
  LsqResult res;
  T_CHECK(lsq_fit_box(decay_res, &d, 2, NT, x, lo, hi, &res));
  T_NEAR(x[0], 2.5, 1e-6);
  T_NEAR(x[1], 0.7, 1e-6);
  T_CHECK(res.cost < 1e-12);
  T_CHECK(res.moved[0] && res.moved[1]);
}

static void test_bound_holds(void) {
  Decay d = {2.5, 0.7};
  double x[2] = {1.0, 0.1}, lo[2] = {0.1, 0.01}, hi[2] = {2.0, 5};
  LsqResult res;
  T_CHECK(lsq_fit_box(decay_res, &d, 2, NT, x, lo, hi, &res));
  T_CHECK(x[0] == 2.0);            /* held at its upper bound */
  T_CHECK(x[1] > 0.01 && x[1] < 0.7); /* a slower decay makes up part of the rest */
  T_CHECK(res.cost > 0);
}

static bool one_var_res(void *ctx, const double *x, double *r) {
  (void)ctx;
  r[0] = x[0] - 3;
  r[1] = 2 * (x[0] - 3);
  return true;
}

static void test_not_moved(void) {
  double x[2] = {1, 0.5}, lo[2] = {0, 0}, hi[2] = {10, 1};
  LsqResult res;
  T_CHECK(lsq_fit_box(one_var_res, NULL, 2, 2, x, lo, hi, &res));
  T_NEAR(x[0], 3, 1e-9);
  T_CHECK(x[1] == 0.5);
  T_CHECK(res.moved[0] && !res.moved[1]);
}

static bool fails(void *ctx, const double *x, double *r) {
  (void)ctx, (void)x, (void)r;
  return false;
}

static void test_start_fails(void) {
  double x[1] = {1}, lo[1] = {0}, hi[1] = {2};
  LsqResult res;
  T_CHECK(!lsq_fit_box(fails, NULL, 1, 1, x, lo, hi, &res));
}

int main(void) {
  T_RUN(test_recovers);
  T_RUN(test_bound_holds);
  T_RUN(test_not_moved);
  T_RUN(test_start_fails);
  T_DONE();
}
