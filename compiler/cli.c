/*
 * cli.c: option helpers shared by the rankplan subcommands.
 */
#include "cli.h"

#include "outfile.h"
#include "plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rankplan %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nrun 'rankplan %s --help' for usage\n", cmd);
  va_end(ap);
  return RP_EXIT_USAGE;
}

int cli_output_not_input(const char *cmd, const char *opt, const char *out,
                         const char *const *inputs, size_t n) {
  const char *which;
  if (!rp_out_is_input(out, inputs, n, &which)) return 0;
  return cli_usage_error(cmd, "%s `%s` is the input `%s`; writing it would destroy the input", opt,
                         out, which);
}

int cli_usage_msg(const char *cmd, const char *msg) {
  return cli_usage_error(cmd, "%s", msg);
}

int cli_help(void *usage_text, const RpOpt *opt, const char *value) {
  (void)opt;
  (void)value;
  fputs(usage_text, stdout);
  return RP_EXIT_OK;
}

int cli_parse(const char *cmd, const char *usage_text, const RpOpt *opts,
              size_t nopts, int argc, char **argv, const char **arg,
              const char *arg_name) {
  RpOptSpec s = {cmd, opts, nopts, cli_usage_msg, NULL, arg, arg_name,
                 (void *)usage_text};
  return rp_opts_parse(&s, argc, argv, 1);
}

bool cli_slo_only(const Diags *d) {
  if (!diags_failed(d) || d->dropped) return false;
  for (size_t i = 0; i < d->list.len; i++) {
    const Diag *g = d->list.items[i];
    if (g->sev == SEV_ERROR && g->code != DIAG_E0500 && g->code != DIAG_E0508) return false;
  }
  return true;
}

bool cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
  if (!s || !*s) return false;
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

struct Plan *cli_plan_load(const char *cmd, const char *path, const char *spec, int *rc) {
  char *err = NULL;
  Plan *p = plan_load(path, spec, &err);
  if (p) return p;
  fprintf(stderr, "rankplan %s: %s\n", cmd, err);
  *rc = strstr(err, "cannot read") != NULL ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  free(err);
  return NULL;
}
