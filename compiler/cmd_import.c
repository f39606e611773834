/*
 * cmd_import.c: `rankplan import-hf CONFIG.json [-o model.yaml]`.
 *
 * Input: a Hugging Face config.json. Output: the model YAML of the
 * catalog (plans/catalog/models/), written atomically to -o or printed
 * to standard output, and the import's diagnostics on standard error.
 * The conversion is hf_import.c's, the same a spec's `model: {hf_config:
 * PATH}` goes through. Exit 0 written (warnings allowed), 1 the config is
 * wrong, 2 usage error or unreadable or unwritable file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hf_import.h"
#include "outfile.h"

static const char import_usage[] =
    "usage: rankplan import-hf [options] CONFIG.json\n"
    "\n"
    "Reads a Hugging Face model config.json (Llama, Mistral, Mixtral, Qwen2,\n"
    "Qwen2-MoE, Qwen3, Qwen3-MoE, DeepSeek-V2/V3, Kimi-K2, GLM-4.5, gpt-oss,\n"
    "Gemma 3, Llama 4) and writes the model as a catalog entry (the\n"
    "`model:` mapping of a spec). Keys the import does not read and features\n"
    "rankplan does not model are listed as warnings (docs/models.md).\n"
    "\n"
    "options:\n"
    "  -o, --output FILE         where to write the YAML (default: standard output)\n"
    "  --name NAME               the model's display name (default: the file\n"
    "                            name, or its directory's for config.json)\n"
    "  --source ID               the Hugging Face id (or path) the engines load,\n"
    "                            written as the entry's `source` (a spec that\n"
    "                            names the entry as its preset inherits it)\n"
    "  --format text|json|sarif  diagnostics format (default text); diagnostics\n"
    "                            go to standard error in every format\n"
    "  -h, --help                show this help\n"
    "\n"
    "exit: 0 written, 1 the config is wrong, 2 usage error or unreadable or\n"
    "unwritable file, 70 internal error\n";

/* Reads path into d's sources; NULL (and a message) when unreadable. */
static const char *read_config(const char *path, Diags *d, char **text, size_t *len) {
  int err = rp_read_file(path, SPEC_MAX_BYTES, text, len);
  if (err) {
    fprintf(stderr, "rankplan import-hf: cannot read `%s`: %s\n", path,
            err == RP_ENOTREG ? "not a regular file"
            : err == EFBIG    ? "over the size cap of 1 MiB"
                              : rp_strerror(err));
    return NULL;
  }
  return diags_add_source(d, path, *text, *len);
}

int cmd_import(int argc, char **argv) {
  const char *path = NULL, *out = "-", *name = NULL, *source = NULL, *fmt_s = "text";
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--output", "-o", true, &out, NULL, NULL, NULL},
      {"--name", NULL, true, &name, NULL, NULL, NULL},
      {"--source", NULL, true, &source, NULL, NULL, NULL},
      {"--format", NULL, true, &fmt_s, NULL, NULL, NULL},
  };
  int pr = cli_parse("import-hf", import_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "CONFIG");
  if (pr != RP_OPT_GO) return pr;
  DiagFormat fmt;
  if (!diag_format_parse(fmt_s, &fmt))
    return cli_usage_error("import-hf", "unknown format '%s' (expected text, json or sarif)", fmt_s);
  if (!path) return cli_usage_error("import-hf", "missing CONFIG (a model's config.json)");
  const char *inputs[] = {path};
  if (cli_output_not_input("import-hf", "-o", out, inputs, 1)) return RP_EXIT_USAGE;
  Diags d;
  diags_init(&d);
  char *text = NULL, *yaml = NULL;
  size_t len = 0;
  int rc = RP_EXIT_USAGE, werr = 0;
  const char *file = read_config(path, &d, &text, &len);
  HfModel h;
  if (file) {
    rc = RP_EXIT_INPUT;
    bool ok = hf_import(&d, file, text, len, name, &h);
    if (ok && source) h.m.source = (SStr){.v = source, .set = true};
    if (ok && (yaml = hf_model_yaml(&d, &h)) != NULL) {
      werr = rp_write_file_atomic(out, yaml, strlen(yaml));
      rc = werr ? RP_EXIT_USAGE : RP_EXIT_OK;
    }
    hf_model_free(&h);
  }
  if (fmt != DIAG_FMT_TEXT || d.list.len > 0)
    diags_print(&d, stderr, fmt, fmt == DIAG_FMT_TEXT && diag_want_color(stderr));
  if (werr) fprintf(stderr, "rankplan import-hf: cannot write `%s`: %s\n", out, rp_strerror(werr));
  free(yaml);
  free(text);
  diags_free(&d);
  return rc;
}
