/*
 * fuzz_calibration.c: libFuzzer target for the calibration file that
 * `search`, `compile` and `calibrate` take with --calibration (cost.c,
 * cost_calibration_parse: `rankplan.calibration/1`, as `rankrun --probe`
 * and `rankplan calibrate` write it). Each input is read as one such file.
 * The loader must report an error exactly when it fails, and when it
 * accepts a file every constant must be finite and inside its table range
 * (cost.h, COST_CONSTANTS): the cost model divides by some of them.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  Diags d;
  diags_init(&d);
  CostConsts c;
  cost_consts_default(&c);
  bool ok = cost_calibration_parse(&d, "cal.json", text, size, &c);
  if (ok == diags_failed(&d)) abort();
  if (ok) {
    size_t n = 0;
    const CostConstInfo *t = cost_const_table(&n);
    for (size_t i = 0; i < n; i++) {
      double v = *(const double *)((const char *)&c + t[i].offset);
      if (!isfinite(v) || v < t[i].lo || v > t[i].hi) abort();
    }
  }
  diags_free(&d);
  free(text);
  return 0;
}
