/*
 * lsq.h: bounded nonlinear least squares, for `rankplan calibrate`
 * (docs/cost-model.md, "Calibration").
 *
 * Minimises sum_j r_j(x)^2 over a box lo <= x <= hi by Levenberg-Marquardt
 * with projection: each step solves (J'J + lambda diag(J'J)) dx = -J'r over
 * the free variables (those not held at a bound by the gradient), clips the
 * result into the box, and is kept only when it lowers the sum; lambda
 * shrinks tenfold after a kept step and grows tenfold after a rejected one.
 * J comes from forward differences of step LSQ_DIFF_STEP (backward at the
 * upper bound). It stops when a kept step lowers the sum by less than a
 * relative 1e-15, when ten rejected steps in a row leave it unchanged, or
 * after LSQ_MAX_ITER steps.
 *
 * Input: n <= LSQ_MAX_VARS variables, m residuals, a residual function.
 * Output: x at the minimum found and its sum of squares. Invariants:
 * deterministic (no randomness); x stays inside the box.
 */
#ifndef RANKPLAN_LSQ_H
#define RANKPLAN_LSQ_H

#include <stdbool.h>
#include <stddef.h>

#define LSQ_MAX_VARS 8
#define LSQ_MAX_ITER 200
#define LSQ_DIFF_STEP 1e-6

/* Fills r[0 .. m) at x; false when the point cannot be evaluated (the
 * step that reached it is rejected; at the start the fit fails). */
typedef bool (*LsqResidual)(void *ctx, const double *x, double *r);

typedef struct {
  double cost;        /* sum of squares at x */
  int iterations;     /* steps kept */
  bool moved[LSQ_MAX_VARS]; /* the variable changed some residual (a column of J not zero) */
} LsqResult;

/* Minimises from x (inside [lo, hi], updated in place). False when the
 * residuals cannot be evaluated at the start. */
bool lsq_fit_box(LsqResidual f, void *ctx, size_t n, size_t m, double *x, const double *lo,
                 const double *hi, LsqResult *out);

#endif
