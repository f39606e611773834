/*
 * fuzz_plan.c: libFuzzer target for the plan loader (plan_load.c). A plan
 * file reaches rankrun from wherever the operator copied it, so the loader
 * treats it as untrusted: any bytes must give either a Plan whose documented
 * invariants hold (plan.h) or one error message, never both, never a crash
 * or a leak. The input is copied into a buffer of its exact size, so a read
 * past the end is caught.
 *
 * A plan that loads is then checked against the invariants plan.h promises
 * (an assertion failure is a finding: the loader accepted a plan the
 * runtime would misread) and printed by every `rankplan explain` view, text
 * and JSON, since explain trusts what the loader accepted.
 */
#include "plan_invariants.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  if (!devnull) abort();
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  load_and_check("fuzz.plan.json", text, size, devnull);
  free(text);
  return 0;
}
