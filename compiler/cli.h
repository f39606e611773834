/*
 * cli.h: the subcommands of `rankplan` and the small option helpers they
 * share. Each subcommand lives in its own cmd_*.c file and returns an exit
 * code (util.h). Usage errors print one line and the command's usage to
 * stderr and return RP_EXIT_USAGE.
 */
#ifndef RANKPLAN_CLI_H
#define RANKPLAN_CLI_H

#include "diag.h"

int cmd_check(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_search(int argc, char **argv);

/* Prints "rankplan <cmd>: <msg>" and the hint to use --help; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) RP_PRINTF(2, 3);
/* A usage error (returns RP_EXIT_USAGE) when the output file `out` of
 * option opt is one of the n inputs (outfile.h, rp_out_is_input): writing
 * it would destroy that input. 0 otherwise. */
int cli_output_not_input(const char *cmd, const char *opt, const char *out,
                         const char *const *inputs, size_t n);

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]; on a match stores
 * the value, advances *i past it and returns 1; returns -1 when the value
 * is missing (after printing a usage error), 0 when argv[*i] is not it. */
int cli_opt_value(const char *cmd, int argc, char **argv, int *i,
                  const char *name, const char **value);

/* Parses a non-negative decimal integer option value; false when invalid. */
bool cli_parse_int(const char *s, long long lo, long long hi, long long *out);

#endif
