/*
 * json_pos.c: finds a member's position in JSON text (json_pos.h).
 *
 * Input: text Jansson parsed (bare NaN and Infinity words, as Python
 * writes them, are skipped like any other value). Output: a SrcLoc.
 * Invariant: reads within [0, len) only, whatever the text holds.
 */
#include "json_pos.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The index after the string whose quote is at t[i]. */
static size_t skip_str(const char *t, size_t n, size_t i) {
  for (i++; i < n && t[i] != '"'; i++)
    if (t[i] == '\\') i++;
  return i + 1;
}

/* The opening quote of member `key` in the object opening at t[i] == '{',
 * or n. */
static size_t member(const char *t, size_t n, size_t i, const char *key) {
  size_t klen = strlen(key);
  int depth = 0;
  bool want_key = true;
  for (i++; i < n; i++) {
    char c = t[i];
    if (c == '"') {
      size_t e = skip_str(t, n, i);
      if (depth == 0 && want_key && e - i == klen + 2 && e <= n && memcmp(t + i + 1, key, klen) == 0) return i;
      if (depth == 0) want_key = false;
      i = e - 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth-- == 0) return n;
    } else if (c == ',' && depth == 0) {
      want_key = true;
    }
  }
  return n;
}

/* The first character of the value of the member whose quote is at t[i]. */
static size_t value(const char *t, size_t n, size_t i) {
  i = skip_str(t, n, i);
  while (i < n && (t[i] == ':' || t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) i++;
  return i;
}

SrcLoc json_pos(const char *text, size_t len, size_t start, SrcLoc base, const char *path, SrcLoc fallback) {
  size_t i = start;
  while (i < len && text[i] != '{') i++;
  char *p = rp_strdup(path);
  for (char *seg = p, *dot; i < len && seg; seg = dot ? dot + 1 : NULL) {
    dot = strchr(seg, '.');
    if (dot) *dot = '\0';
    i = member(text, len, i, seg);
    if (dot && i < len) i = value(text, len, i);
    if (dot && (i >= len || text[i] != '{')) i = len;
  }
  free(p);
  if (i >= len) return fallback;
  SrcLoc at = base;
  for (size_t k = start; k < i; k++) {
    if (text[k] == '\n') at.line++, at.col = 1;
    else at.col++;
  }
  return at;
}
