/*
 * fuzz_hf.c: libFuzzer target for the Hugging Face config import
 * (hf_import.c). Each input is read as a config.json; when the import
 * succeeds, the model YAML it writes is parsed as a spec's `model:` by the
 * spec front end, which must accept it (the import only writes what the
 * spec can hold, within the spec's limits). The input is copied into a
 * buffer of its exact size, so a read past the end is caught.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf_import.h"
#include "rp_config.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The YAML as the model of a small spec the parser must accept. */
static void parse_back(const char *yaml) {
  StrBuf sb;
  sb_init(&sb);
  sb_puts(&sb, "version: 1\nmodel:\n");
  for (const char *l = yaml; *l;) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l + 1) : strlen(l);
    sb_puts(&sb, "  ");
    sb_putn(&sb, l, n);
    l += n;
  }
  sb_puts(&sb, "hardware: {preset: h100-sxm, nodes: 1, gpus_per_node: 8}\n"
               "workload: {input_tokens: 1, output_tokens: 1}\n"
               "deployment: {mode: aggregated, pools: [{name: main}]}\n");
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "fuzz.yaml", sb.buf, sb.len, RP_SOURCE_ROOT "/plans/catalog");
  if (!s) abort();
  spec_free(s);
  diags_free(&d);
  sb_free(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  Diags d;
  diags_init(&d);
  const char *file = diags_add_source(&d, "config.json", text, size);
  HfModel h;
  bool ok = hf_import(&d, file, text, size, NULL, &h);
  /* The import succeeds exactly when it reported no error. */
  if (ok == diags_failed(&d)) abort();
  char *yaml = ok ? hf_model_yaml(&d, &h) : NULL;
  if (yaml) parse_back(yaml);
  free(yaml);
  hf_model_free(&h);
  diags_free(&d);
  free(text);
  return 0;
}
