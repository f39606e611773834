/*
 * main.c: the `rankplan` command line. Dispatches to one subcommand per
 * pipeline entry point (check, compile, search, explain, render) and to the
 * model import (import-hf); each lives in its own cmd_*.c. Exit codes: 0 ok, 1 input wrong, 2 usage, 70 internal.
 */
#include <stdlib.h>
#include <jansson.h>
#include <string.h>

#include "rp_config.h"
#include "cli.h"

static const char usage[] =
    "usage: rankplan <command> [options]\n"
    "\n"
    "A deployment compiler for LLM inference: validates a deployment spec,\n"
    "compiles it to explicit per-rank launch plans, and searches layouts.\n"
    "\n"
    "commands:\n"
    "  check SPEC            validate a spec (dry run); exit 0 valid, 1 invalid\n"
    "  compile SPEC -o PLAN  write the per-rank launch plan (JSON)\n"
    "  search SPEC           find the layout and xPyD pool sizes with the best goodput\n"
    "  explain PLAN          print a plan as tables (ranks, groups, memory, reshard)\n"
    "  import-hf CONFIG      write a Hugging Face config.json as a model entry (YAML)\n"
    "  render PLAN -o FILE   draw a plan as a self-contained HTML page (or SVG)\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help (and `rankplan <command> --help`)\n"
    "  -V, --version         print the version\n"
    "\n"
    "exit codes: 0 ok, 1 the input is wrong, 2 usage error or unreadable file,\n"
    "70 internal error. docs/spec.md describes the spec, docs/errors.md every\n"
    "diagnostic code.\n";

int main(int argc, char **argv) {
  /* Jansson's allocations fail the way ours do (exit 70), not by leaving
   * a key out of a document. */
  json_set_alloc_funcs(rp_malloc, free);
  if (argc < 2) {
    fputs(usage, stderr);
    return RP_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    fputs(usage, stdout);
    return RP_EXIT_OK;
  }
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
    printf("rankplan %s\n", RP_VERSION);
    return RP_EXIT_OK;
  }
  if (strcmp(cmd, "check") == 0) return cmd_check(argc - 1, argv + 1);
  if (strcmp(cmd, "compile") == 0) return cmd_compile(argc - 1, argv + 1);
  if (strcmp(cmd, "search") == 0) return cmd_search(argc - 1, argv + 1);
  if (strcmp(cmd, "explain") == 0) return cmd_explain(argc - 1, argv + 1);
  if (strcmp(cmd, "import-hf") == 0) return cmd_import(argc - 1, argv + 1);
  if (strcmp(cmd, "render") == 0) return cmd_render(argc - 1, argv + 1);
  fprintf(stderr, "rankplan: unknown command '%s'\n", cmd);
  static const char *const cmds[] = {"check", "compile", "search", "explain", "import-hf", "render"};
  const char *near = diag_closest(cmd, cmds, RP_ARRAY_LEN(cmds));
  if (near) fprintf(stderr, "help: did you mean 'rankplan %s'?\n", near);
  fputs("run 'rankplan --help' for the list of commands\n", stderr);
  return RP_EXIT_USAGE;
}
