/*
 * opts.c: the table-driven option parser of both binaries (opts.h).
 *
 * Input: argv and a command's option table. Output: values stored where
 * the table says, handlers called in command-line order. Invariants: an
 * option is matched by its whole name (`--format` never matches
 * `--formats`); a usage error is reported through the command's own
 * usage_error, with one wording for both binaries.
 */
#include "opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Whether argument a names n, alone or followed by "=VALUE". */
static bool names(const char *a, const char *n, const char **eq) {
  size_t len = n ? strlen(n) : 0;
  if (!n || strncmp(a, n, len) != 0 || (a[len] != '\0' && a[len] != '='))
    return false;
  *eq = a[len] == '=' ? a + len : NULL;
  return true;
}

const RpOpt *rp_opt_find(const RpOptSpec *s, const char *a, const char **eq) {
  for (size_t i = 0; i < s->nopts; i++)
    if (names(a, s->opts[i].name, eq) || names(a, s->opts[i].alias, eq))
      return &s->opts[i];
  return NULL;
}

/* Passes msg (malloc'd) to the command's usage_error. */
static int report(const RpOptSpec *s, char *msg) {
  int r = s->usage_error(s->cmd, msg);
  free(msg);
  return r;
}

static int take(const RpOptSpec *s, const RpOpt *o, const char *value) {
  if (o->fn) return o->fn(s->ctx, o, value);
  if (o->str) *o->str = value;
  if (o->flag) *o->flag = true;
  return RP_OPT_GO;
}

static int positional(const RpOptSpec *s, const char *a) {
  if (s->positional) return s->positional(s->ctx, a);
  if (*s->arg)
    return report(s, rp_sprintf("expected one %s, got '%s' and '%s'", s->arg_name, *s->arg, a));
  *s->arg = a;
  return RP_OPT_GO;
}

/* The parser's own two usage errors, worded alike for both binaries. */
static int opt_error(const RpOptSpec *s, bool missing, const char *a) {
  return report(s, missing ? rp_sprintf("option '%s' needs a value", a)
                           : rp_sprintf("unknown option '%s'", a));
}

int rp_opts_parse(const RpOptSpec *s, int argc, char **argv, int first) {
  for (int i = first; i < argc; i++) {
    const char *a = argv[i], *eq = NULL;
    if (a[0] != '-' || a[1] == '\0') {
      int r = positional(s, a);
      if (r != RP_OPT_GO) return r;
      continue;
    }
    const RpOpt *o = rp_opt_find(s, a, &eq);
    if (!o || (eq && !o->value)) return opt_error(s, false, a);
    const char *value = NULL;
    if (o->value && eq) {
      value = eq + 1;
    } else if (o->value) {
      if (i + 1 >= argc) return opt_error(s, true, a);
      value = argv[++i];
    }
    int r = take(s, o, value);
    if (r != RP_OPT_GO) return r;
  }
  return RP_OPT_GO;
}
