/*
 * opts.h: the one command-line option parser of both binaries (`rankplan`
 * and its subcommands, `rankrun`), part of the plan library.
 *
 * A command describes its options as a table (name, short alias, whether
 * it takes a value, where the value or flag goes or which handler takes
 * it); rp_opts_parse walks argv in order. Every option that takes a value
 * accepts both `--opt VALUE` and `--opt=VALUE` (and `-o VALUE`, `-o=VALUE`
 * for an alias); a flag accepts neither form of value. The two errors the
 * parser finds itself have one wording for both binaries:
 *
 *   unknown option '--bogus'
 *   option '--output' needs a value
 *
 * each passed to the command's usage_error, which adds the binary's own
 * prefix and hint. A lone `-` is an argument (standard input), not an
 * option.
 */
#ifndef RANKPLAN_OPTS_H
#define RANKPLAN_OPTS_H

#include <stdbool.h>
#include <stddef.h>

/* What a handler returns to let the parse go on; anything else is the
 * exit code the command returns at once. */
#define RP_OPT_GO (-1)

typedef struct RpOpt {
  const char *name;  /* "--output" */
  const char *alias; /* "-o", or NULL */
  bool value;        /* takes a value */
  /* Where it goes, one of: the value (the last one given wins); true for
   * a flag; or a handler, called in command-line order with the value
   * (NULL for a flag), the spec's ctx and the option itself, returning
   * RP_OPT_GO or an exit code. */
  const char **str;
  bool *flag;
  int (*fn)(void *ctx, const struct RpOpt *opt, const char *value);
  const void *data; /* the handler's, per option (ranges, messages) */
} RpOpt;

typedef struct {
  const char *cmd; /* passed to usage_error */
  const RpOpt *opts;
  size_t nopts;
  /* Prints msg as the binary's usage error and returns its exit code. */
  int (*usage_error)(const char *cmd, const char *msg);
  /* Arguments that are not options: a handler (RP_OPT_GO or an exit
   * code), or NULL for exactly one at most, stored in *arg; a second is
   * the usage error "expected one ARG_NAME, got 'A' and 'B'". */
  int (*positional)(void *ctx, const char *arg);
  const char **arg;
  const char *arg_name;
  void *ctx;
} RpOptSpec;

/* Parses argv[first .. argc). Returns RP_OPT_GO when every argument was
 * taken, else the exit code to return (a usage error was printed, or a
 * handler asked to stop, e.g. after --help). */
int rp_opts_parse(const RpOptSpec *s, int argc, char **argv, int first);

/* The option of s named by argument a ("--name" or "--name=VALUE", or the
 * alias); *eq points at the '=' of an attached value, else NULL. NULL
 * when no option of s has that name. */
const RpOpt *rp_opt_find(const RpOptSpec *s, const char *a, const char **eq);

#endif
