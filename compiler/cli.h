/*
 * cli.h: the subcommands of `rankplan` and the small option helpers they
 * share. Each subcommand lives in its own cmd_*.c file and returns an exit
 * code (util.h). Usage errors print one line and the command's usage to
 * stderr and return RP_EXIT_USAGE.
 */
#ifndef RANKPLAN_CLI_H
#define RANKPLAN_CLI_H

#include "diag.h"
#include "opts.h"

int cmd_calibrate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_emit(int argc, char **argv);
/* `compile --emit`: compiles spec and writes the plan and the launch files
 * of target into dir (cmd_emit.c), the plan's estimates at the cost
 * constants consts (NULL: the defaults). Returns an exit code; E0708 in d
 * when the spec cannot give the target; *what and *werr name an unwritable
 * file (as compile_spec_to_plan). */
struct Spec;
struct CostConsts;
int compile_emit(const struct Spec *spec, const char *target, const char *dir, const char *split_dir,
                 const char *catalog, const struct CostConsts *consts, Diags *d, char **what,
                 int *werr);

/* Prints "rankplan <cmd>: <msg>" and the hint to use --help; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) RP_PRINTF(2, 3);
/* A usage error (returns RP_EXIT_USAGE) when the output file `out` of
 * option opt is one of the n inputs (outfile.h, rp_out_is_input): writing
 * it would destroy that input. 0 otherwise. */
int cli_output_not_input(const char *cmd, const char *opt, const char *out,
                         const char *const *inputs, size_t n);

/* The options of every subcommand go through the plan library's parser
 * (opts.h). cli_usage_msg is its usage_error for rankplan (msg as
 * cli_usage_error prints it); cli_help its --help handler, with the usage
 * text as the spec's ctx: prints it to stdout and stops with exit 0. */
int cli_usage_msg(const char *cmd, const char *msg);
int cli_help(void *usage_text, const RpOpt *opt, const char *value);
/* Parses argv[1 ..] of subcommand cmd with its options; the one SPEC or
 * PLAN argument (arg_name) lands in *arg. Returns RP_OPT_GO or the exit
 * code to return. */
int cli_parse(const char *cmd, const char *usage_text, const RpOpt *opts,
              size_t nopts, int argc, char **argv, const char **arg,
              const char *arg_name);

/* Whether d failed only because no layout meets the SLOs: it has errors,
 * and every one kept is E0500 or E0508 (the spec is valid; `check` and
 * `search` exit RP_EXIT_SLO then). */
bool cli_slo_only(const Diags *d);
/* Loads plan `path` with the shared loader (plan_load, plan.h), checked
 * against spec when not NULL. On failure prints "rankplan <cmd>: <the
 * loader's message>", sets *rc (2 when the file cannot be read, else 1)
 * and returns NULL. */
struct Plan;
struct Plan *cli_plan_load(const char *cmd, const char *path, const char *spec, int *rc);

/* Parses a non-negative decimal integer option value; false when invalid. */
bool cli_parse_int(const char *s, long long lo, long long hi, long long *out);

#endif
