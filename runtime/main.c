/* main.c: rankrun, not written yet. */
#include <stdio.h>
int main(void) {
  fputs("rankrun: not implemented in this build\n", stderr);
  return 70;
}
