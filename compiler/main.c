/*
 * main.c: the `rankplan` command line. Dispatches to one subcommand per
 * pipeline entry point (check, compile, search, explain, emit, render) and to
 * the model import (import-hf); each lives in its own cmd_*.c. Exit codes: 0 ok, 1 input wrong, 2 usage, 70 internal.
 */
#include <stdlib.h>
#include <jansson.h>
#include <string.h>

#include "cli.h"
#include "datadir.h"
#include "rp_config.h"
#include "version.h"

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
    "  calibrate SPEC --bench FILE... -o CAL\n"
    "                        fit the cost constants to benchmark results\n"
    "  explain PLAN          print a plan as tables (ranks, groups, memory, reshard)\n"
    "  emit PLAN -t T -o DIR write the plan's launch files (vllm, sglang, trtllm, shell, slurm,\n"
    "                        k8s, dynamo)\n"
    "  import-hf CONFIG      write a Hugging Face config.json as a model entry (YAML)\n"
    "  render PLAN -o FILE   draw a plan as a self-contained HTML page (or SVG)\n"
    "  help [COMMAND]        show this help, or the command's\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help (and `rankplan <command> --help`)\n"
    "  -V, --version         print the version, the git revision, the features\n"
    "                        built in and the data directory\n"
    "\n"
    "exit codes: 0 ok, 1 the input is wrong, 2 usage error or unreadable file,\n"
    "70 internal error. docs/spec.md describes the spec, docs/errors.md every\n"
    "diagnostic code.\n";

/* The subcommands, in the order of the usage text. */
typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
} Command;
static const Command commands[] = {
    {"check", cmd_check},
    {"compile", cmd_compile},
    {"search", cmd_search},
    {"calibrate", cmd_calibrate},
    {"explain", cmd_explain},
    {"emit", cmd_emit},
    {"import-hf", cmd_import},
    {"render", cmd_render},
};

static const Command *find_command(const char *name) {
  for (size_t i = 0; i < RP_ARRAY_LEN(commands); i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static int unknown_command(const char *cmd) {
  fprintf(stderr, "rankplan: unknown command '%s'\n", cmd);
  const char *names[RP_ARRAY_LEN(commands)];
  for (size_t i = 0; i < RP_ARRAY_LEN(commands); i++) names[i] = commands[i].name;
  const char *near = diag_closest(cmd, names, RP_ARRAY_LEN(names));
  if (near) fprintf(stderr, "help: did you mean 'rankplan %s'?\n", near);
  fputs("run 'rankplan --help' for the list of commands\n", stderr);
  return RP_EXIT_USAGE;
}

/* `rankplan help [COMMAND]`: the usage, or that command's --help. */
static int help(int argc, char **argv) {
  if (argc > 3) {
    fprintf(stderr, "rankplan help: expected one COMMAND, got '%s' and '%s'\n", argv[2], argv[3]);
    return RP_EXIT_USAGE;
  }
  if (argc < 3 || strcmp(argv[2], "help") == 0) {
    fputs(usage, stdout);
    return RP_EXIT_OK;
  }
  const Command *c = find_command(argv[2]);
  if (!c) return unknown_command(argv[2]);
  char *args[] = {argv[2], (char *)"--help", NULL};
  return c->run(2, args);
}

static int version(void) {
  rp_version_print(stdout, "rankplan", RP_HAVE_NCCL);
  printf("data: %s\n", rp_data_dir());
  return RP_EXIT_OK;
}

int main(int argc, char **argv) {
  /* Jansson's allocations fail the way ours do (exit 70), not by leaving
   * a key out of a document. */
  json_set_alloc_funcs(rp_malloc, free);
  if (argc < 2) {
    fputs(usage, stderr);
    return RP_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "help") == 0) return help(argc, argv);
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
    fputs(usage, stdout);
    return RP_EXIT_OK;
  }
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) return version();
  const Command *c = find_command(cmd);
  return c ? c->run(argc - 1, argv + 1) : unknown_command(cmd);
}
