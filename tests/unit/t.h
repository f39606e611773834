/*
 * t.h: a minimal unit-test harness. Each test file defines test functions
 * and a main that calls T_RUN for each; a failed check prints
 * file:line and the values, and the process exits 1 at the end.
 */
#ifndef RANKPLAN_T_H
#define RANKPLAN_T_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures;
static int t_checks;

#define T_CHECK(c)                                                          \
  do {                                                                      \
    t_checks++;                                                             \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      t_failures++;                                                         \
    }                                                                       \
  } while (0)

#define T_EQ_INT(a, b)                                                        \
  do {                                                                        \
    long long t_a = (long long)(a), t_b = (long long)(b);                     \
    t_checks++;                                                               \
    if (t_a != t_b) {                                                         \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,     \
              __LINE__, #a, #b, t_a, t_b);                                    \
      t_failures++;                                                           \
    }                                                                         \
  } while (0)

#define T_EQ_STR(a, b)                                                        \
  do {                                                                        \
    const char *t_a = (a), *t_b = (b);                                        \
    t_checks++;                                                               \
    if (!t_a || !t_b || strcmp(t_a, t_b) != 0) {                              \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, \
              __LINE__, #a, #b, t_a ? t_a : "(null)", t_b ? t_b : "(null)");  \
      t_failures++;                                                           \
    }                                                                         \
  } while (0)

/* |a - b| <= rel * |b| */
#define T_NEAR(a, b, rel)                                                      \
  do {                                                                         \
    double t_a = (double)(a), t_b = (double)(b);                               \
    t_checks++;                                                                \
    if (!(fabs(t_a - t_b) <= (rel) * fabs(t_b))) {                             \
      fprintf(stderr, "%s:%d: %s ~ %s failed: %.6g vs %.6g (rel %.3g)\n",      \
              __FILE__, __LINE__, #a, #b, t_a, t_b, (double)(rel));           \
      t_failures++;                                                            \
    }                                                                          \
  } while (0)

#define T_RUN(fn)                                     \
  do {                                                \
    int t_before = t_failures;                        \
    fn();                                             \
    fprintf(stderr, "%s %s\n", t_failures == t_before ? "ok  " : "FAIL", #fn); \
  } while (0)

#define T_DONE()                                                         \
  do {                                                                   \
    fprintf(stderr, "%d checks, %d failed\n", t_checks, t_failures);     \
    return t_failures ? 1 : 0;                                           \
  } while (0)

#endif
