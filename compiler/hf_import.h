/*
 * hf_import.h: a Hugging Face config.json as a rankplan model.
 *
 * Input: the bytes of a model's config.json (untrusted). Output: a
 * ModelSpec (spec.h) whose fields hold what the config states, and the
 * model YAML of plans/catalog/models/ written from it. Both
 * `rankplan import-hf` (cmd_import.c) and a spec's `model: {hf_config:
 * PATH}` (parse.c) go through hf_import() and hf_model_yaml(), so the
 * two give the same model.
 *
 * Invariants: every key of the config (and of its `text_config`) is read,
 * known to have no bearing on memory or compute, or listed in a W0150
 * warning; a key that matters but that the spec cannot express is a W0151
 * warning naming it; wrong types, missing keys and shapes the spec cannot
 * hold are errors naming the JSON field path (docs/models.md, "Importing a
 * Hugging Face config"). Output is deterministic.
 */
#ifndef RANKPLAN_HF_IMPORT_H
#define RANKPLAN_HF_IMPORT_H

#include "spec.h"

typedef struct {
  ModelSpec m;        /* the fields the YAML holds carry .set */
  char *name;         /* m.name's text */
  char *model_type;   /* the config's model_type */
  char *architecture; /* architectures[0], NULL when the config has none */
  char *source;       /* the file name the config was read from */
  char *notes;        /* header lines: what W0151 reported, what was read, one each */
} HfModel;

/* Reads config.json text (len bytes; need not be NUL-terminated) that was
 * registered in d under the interned name file. name is the model's
 * display name (NULL: derived from the file name). Returns false when an
 * error was reported; *out is then unusable. */
bool hf_import(Diags *d, const char *file, const char *text, size_t len, const char *name,
               HfModel *out);
void hf_model_free(HfModel *h);

/* The model YAML (catalog format) of h, with a header comment naming the
 * source and rankplan's parameter counts. Returns NULL (and reports E0299
 * in d) when a count overflows. The caller frees the text. */
char *hf_model_yaml(Diags *d, const HfModel *h);

/* For a spec's `model: {hf_config: PATH}` (at `at`; `field` is the key's
 * path for diagnostics, `model.hf_config` or `model.draft.hf_config`): resolves path against
 * the directory of spec_file (as hook paths are), reads it (only a file
 * named *.json, at most SPEC_MAX_BYTES), imports it and returns the model
 * YAML, registered in d as the source *yaml_name so that positions in it
 * show. NULL after diagnostics (E0152 for an unreadable path). The caller
 * frees the text. */
char *hf_import_for_spec(Diags *d, const char *spec_file, const char *path, const char *field,
                         SrcLoc at, const char **yaml_name);

#endif
