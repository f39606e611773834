/* parse.c: placeholder until the YAML front end lands. */
#include <stdlib.h>
#include "spec.h"

Spec *spec_parse_file(Diags *d, const char *path, const char *catalog_dir) {
  RP_UNUSED(catalog_dir);
  diag_at(d, DIAG_E0001, (SrcLoc){path, 0, 0}, "spec parsing is not built yet");
  return NULL;
}
void spec_free(Spec *s) { free(s); }
