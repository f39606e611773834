/* test_yaml.c: not written yet. */
#include "t.h"

int main(void) { T_DONE(); }
