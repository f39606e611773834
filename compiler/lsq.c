/*
 * lsq.c: projected Levenberg-Marquardt with box bounds (lsq.h).
 *
 * Input: a residual function and a box. Output: the minimising point.
 * Invariants: x never leaves the box; the sum of squares never grows from
 * one kept step to the next; no allocation depends on anything but n and m.
 */
#include "lsq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
  LsqResidual f;
  void *ctx;
  size_t n, m;
  const double *lo, *hi;
  double *r, *rt, *J; /* residuals at x, at a trial point; m x n Jacobian */
} Lsq;

static double sumsq(const double *r, size_t m) {
  double s = 0;
  for (size_t i = 0; i < m; i++) s += r[i] * r[i];
  return s;
}

/* J at x by forward differences (backward where x + h leaves the box);
 * s->r holds the residuals at x. */
static bool lsq_jacobian(Lsq *s, const double *x) {
  double xt[LSQ_MAX_VARS];
  for (size_t j = 0; j < s->n; j++) {
    memcpy(xt, x, s->n * sizeof *x);
    double h = LSQ_DIFF_STEP * fmax(1.0, fabs(x[j]));
    if (x[j] + h > s->hi[j]) h = -h;
    xt[j] += h;
    if (!s->f(s->ctx, xt, s->rt)) return false;
    for (size_t i = 0; i < s->m; i++) s->J[i * s->n + j] = (s->rt[i] - s->r[i]) / h;
  }
  return true;
}

/* Solves the k x k system a y = b in place by Gaussian elimination with
 * partial pivoting (y replaces b); false when it is singular. */
static bool lsq_solve(double *a, double *b, size_t k) {
  for (size_t c = 0; c < k; c++) {
    size_t p = c;
    for (size_t i = c + 1; i < k; i++)
      if (fabs(a[i * k + c]) > fabs(a[p * k + c])) p = i;
    if (!(fabs(a[p * k + c]) > 0)) return false;
    for (size_t j = 0; j < k && p != c; j++) {
      double t = a[c * k + j];
      a[c * k + j] = a[p * k + j];
      a[p * k + j] = t;
    }
    double t = b[c];
    b[c] = b[p];
    b[p] = t;
    for (size_t i = c + 1; i < k; i++) {
      double f = a[i * k + c] / a[c * k + c];
      for (size_t j = c; j < k; j++) a[i * k + j] -= f * a[c * k + j];
      b[i] -= f * b[c];
    }
  }
  for (size_t c = k; c-- > 0;) {
    for (size_t j = c + 1; j < k; j++) b[c] -= a[c * k + j] * b[j];
    b[c] /= a[c * k + c];
  }
  return true;
}

/* One damped step from x into xn over the free variables: those with a
 * non-zero column of J that the gradient does not push out of the box. */
static void lsq_step(const Lsq *s, const double *x, double lambda, double *xn) {
  size_t n = s->n, k = 0, idx[LSQ_MAX_VARS];
  double g[LSQ_MAX_VARS] = {0}, A[LSQ_MAX_VARS * LSQ_MAX_VARS] = {0};
  for (size_t i = 0; i < s->m; i++)
    for (size_t a = 0; a < n; a++) {
      g[a] += s->J[i * n + a] * s->r[i];
      for (size_t b = 0; b < n; b++) A[a * n + b] += s->J[i * n + a] * s->J[i * n + b];
    }
  for (size_t a = 0; a < n; a++) {
    bool held = (x[a] <= s->lo[a] && g[a] > 0) || (x[a] >= s->hi[a] && g[a] < 0);
    if (A[a * n + a] > 0 && !held) idx[k++] = a;
  }
  double red[LSQ_MAX_VARS * LSQ_MAX_VARS], y[LSQ_MAX_VARS];
  for (size_t a = 0; a < k; a++) {
    y[a] = -g[idx[a]];
    for (size_t b = 0; b < k; b++) red[a * k + b] = A[idx[a] * n + idx[b]];
    red[a * k + a] *= 1.0 + lambda;
  }
  memcpy(xn, x, n * sizeof *x);
  if (k == 0 || !lsq_solve(red, y, k)) return;
  for (size_t a = 0; a < k; a++) {
    size_t v = idx[a];
    xn[v] = fmin(s->hi[v], fmax(s->lo[v], x[v] + y[a]));
  }
}

/* Tries damped steps, raising lambda tenfold after each that does not
 * lower the sum; true with xn, s->rt and *cost updated when one does. */
static bool lsq_try(Lsq *s, const double *x, double *lambda, double *xn, double *cost) {
  for (int tries = 0; tries < 10; tries++) {
    lsq_step(s, x, *lambda, xn);
    double c;
    if (s->f(s->ctx, xn, s->rt) && (c = sumsq(s->rt, s->m)) < *cost) {
      *cost = c;
      *lambda = fmax(*lambda / 10, 1e-12);
      return true;
    }
    *lambda *= 10;
  }
  return false;
}

bool lsq_fit_box(LsqResidual f, void *ctx, size_t n, size_t m, double *x, const double *lo,
                 const double *hi, LsqResult *out) {
  if (n == 0 || n > LSQ_MAX_VARS) rp_internal("lsq_fit_box: %zu variables", n);
  memset(out, 0, sizeof *out);
  Lsq s = {f, ctx, n, m, lo, hi, rp_calloc(m, sizeof(double)), rp_calloc(m, sizeof(double)),
           rp_calloc(m * n, sizeof(double))};
  bool ok = f(ctx, x, s.r);
  double cost = ok ? sumsq(s.r, m) : 0, lambda = 1e-3, xn[LSQ_MAX_VARS];
  for (int it = 0; ok && it < LSQ_MAX_ITER && lsq_jacobian(&s, x); it++) {
    for (size_t j = 0; j < n; j++)
      for (size_t i = 0; i < m; i++) out->moved[j] |= s.J[i * n + j] != 0;
    double before = cost;
    if (cost == 0) break;
    if (!lsq_try(&s, x, &lambda, xn, &cost)) break;
    memcpy(x, xn, n * sizeof *x);
    memcpy(s.r, s.rt, m * sizeof *s.r);
    out->iterations++;
    if ((before - cost) <= 1e-15 * before) break;
  }
  out->cost = cost;
  free(s.r);
  free(s.rt);
  free(s.J);
  return ok;
}
