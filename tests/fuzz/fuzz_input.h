/*
 * fuzz_input.h: a fuzz target's input as text. The bytes are copied into a
 * buffer of exactly their size (one byte for an empty input), so a read one
 * byte past the end is an AddressSanitizer report; NULL when out of memory.
 * The caller frees it.
 */
#ifndef RANKPLAN_FUZZ_INPUT_H
#define RANKPLAN_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1);
  if (text && size) memcpy(text, data, size);
  return text;
}

#endif
