/*
 * cmd_explain.c: `rankplan explain`. Not built yet: reports so and exits 70 rather
 * than pretending to work.
 */
#include "cli.h"

int cmd_explain(int argc, char **argv) {
  RP_UNUSED(argc);
  RP_UNUSED(argv);
  fputs("rankplan explain: not implemented in this build\n", stderr);
  return RP_EXIT_INTERNAL;
}
