/*
 * fuzz_engine_entry.c: libFuzzer target for an engine catalog entry
 * (plans/catalog/engines/NAME.yaml, or a user's own with --catalog DIR;
 * engine_catalog.c, engine_caps_parse). Each input is read as the entry of
 * each engine in turn; its `engine:` key matches at most one of them. The
 * reader must give an entry or an error naming the file, never both; an
 * entry it accepts is then asked what check, search and emit ask it (its
 * flags and YAML keys, the layout filter, the prefill/decode rules), and a
 * YAML key must have the section.field form emit_trtllm.c writes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ask(const EngineCaps *c) {
  static const char *const terms[] = {"model", "port", "config", "cuda_graph_max_bs", "memory_fraction"};
  for (size_t i = 0; i < sizeof terms / sizeof *terms; i++) {
    const char *k = engine_yaml_key(c, terms[i]);
    if (k && (!strchr(k, '.') || engine_flag(c, terms[i]))) abort();
    (void)engine_takes(c, terms[i]);
  }
  if (!c->file || !c->version || !c->command || !c->layer_split) abort();
  for (int role = ROLE_PREFILL; role <= ROLE_BOTH; role++)
    for (int64_t s = 1; s <= 8; s *= 2) {
      int64_t v[ED__COUNT] = {s, 1, s > 2 ? 2 : 1, s, 1, 1, 1};
      EngineDim d;
      const char *why = engine_layout_refusal(c, (PoolRole)role, v, s > 1, &d);
      if (why && (d < 0 || d >= ED__COUNT)) abort();
    }
  (void)engine_pd_established(c, 2, 4, 1, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  static const Engine engines[] = {ENGINE_VLLM, ENGINE_SGLANG, ENGINE_TRTLLM};
  for (size_t i = 0; i < sizeof engines / sizeof *engines; i++) {
    char *err = (char *)"unset";
    EngineCaps *c = engine_caps_parse("fuzz-entry", text, size, engines[i], &err);
    if (!c == !err) abort();
    if (err && strncmp(err, "fuzz-entry", 10) != 0) abort();
    if (c) ask(c);
    engine_caps_free(c);
    free(err);
  }
  free(text);
  return 0;
}
