/*
 * json_pos.h: where a member stands in JSON text. Jansson keeps no
 * positions, so a diagnostic about a key of a config, calibration or
 * benchmark file finds the key in the text the parser accepted.
 */
#ifndef RANKPLAN_JSON_POS_H
#define RANKPLAN_JSON_POS_H

#include <stddef.h>

#include "diag.h"

/* The position of the opening quote of the member at `path`, dotted for
 * nested objects ("quantization_config.quant_method"), in the first object
 * that opens at or after text[start]; `fallback` when a part is absent, a
 * parent is not an object, or a key is written with escapes (keys are
 * compared as written). Lines and columns (1-based, in bytes) count on
 * from `base`, the position of text[start], so a caller that knows where
 * a record begins need not rescan what comes before it. The text must be
 * well-formed JSON up to the member: strings and nesting are trusted. */
SrcLoc json_pos(const char *text, size_t len, size_t start, SrcLoc base, const char *path, SrcLoc fallback);

#endif
