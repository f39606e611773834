/*
 * fuzz_spec.c: libFuzzer target for the spec front end (yaml.c, units.c,
 * parse.c). Each input is parsed as a spec with the bundled catalog, so
 * presets, merges and the structure rules run too; everything is freed, so
 * the leak checker sees any path that forgets memory. The input is copied
 * into a buffer of its exact size, so a read past the end is caught.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rp_config.h"
#include "spec.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "fuzz.yaml", text, size, RP_SOURCE_ROOT "/plans/catalog");
  /* A Spec is returned exactly when no error was reported. */
  if ((s != NULL) == diags_failed(&d)) abort();
  spec_free(s);
  diags_free(&d);
  free(text);
  return 0;
}
