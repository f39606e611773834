/*
 * cmd_compile.c: `rankplan compile`. Not built yet: reports so and exits 70 rather
 * than pretending to work.
 */
#include "cli.h"

int cmd_compile(int argc, char **argv) {
  RP_UNUSED(argc);
  RP_UNUSED(argv);
  fputs("rankplan compile: not implemented in this build\n", stderr);
  return RP_EXIT_INTERNAL;
}
