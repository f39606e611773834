/*
 * cli.c: option helpers shared by the rankplan subcommands.
 */
#include "cli.h"

#include "outfile.h"

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

int cli_opt_value(const char *cmd, int argc, char **argv, int *i,
                  const char *name, const char **value) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    cli_usage_error(cmd, "option '%s' needs a value", name);
    return -1;
  }
  *value = argv[++*i];
  return 1;
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
