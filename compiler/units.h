/*
 * units.h: quantities written with their unit ("141 GB", "4.8 TB/s",
 * "989 TFLOP/s", "50 ms", "20 req/s") → numbers in base units.
 *
 * Base units: bytes (memory, an exact int64), bytes per second, FLOP per
 * second, seconds, requests per second. Decimal prefixes (k, M, G, T, P) are
 * powers of 1000, binary ones (Ki, Mi, Gi, Ti, Pi) powers of 1024; a lower
 * case `b` is a bit (bandwidth only: `400 Gb/s` is 50e9 bytes/s). The full
 * table is in docs/spec.md, "Units".
 */
#ifndef RANKPLAN_UNITS_H
#define RANKPLAN_UNITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  UNIT_MEMORY,
  UNIT_BANDWIDTH,
  UNIT_COMPUTE,
  UNIT_TIME,
  UNIT_RATE,
  UNIT__COUNT
} UnitKind;

typedef enum {
  UNITS_OK,
  UNITS_MISSING_UNIT, /* a number without a unit (E0106) */
  UNITS_WRONG_KIND,   /* a known unit of another kind (E0107) */
  UNITS_UNKNOWN_UNIT, /* a unit nobody knows (E0107) */
  UNITS_BAD_NUMBER,   /* no number, or one that cannot be read (E0108) */
  UNITS_NOT_WHOLE,    /* memory that is not a whole number of bytes (E0108) */
  UNITS_OVERFLOW,     /* memory past int64, or a non-finite value (E0105) */
  UNITS_NEGATIVE      /* a minus sign (E0105) */
} UnitsStatus;

typedef struct {
  double value;       /* in base units */
  int64_t bytes;      /* UNIT_MEMORY only: exact bytes */
  UnitKind got;       /* UNITS_WRONG_KIND: the kind the unit belongs to */
  char unit[24];      /* the unit as written (truncated), for messages */
  const char *suggest;/* UNITS_UNKNOWN_UNIT: closest accepted unit or NULL */
} UnitValue;

/* Parses "NUMBER [space] UNIT" as a quantity of kind want. The number is
 * decimal digits with an optional fraction (and, except for memory, an
 * optional exponent such as 1e3); spaces around it are allowed. */
UnitsStatus units_parse(const char *s, UnitKind want, UnitValue *out);

/* "memory size", "bandwidth", ... */
const char *units_kind_name(UnitKind k);
/* The accepted units of a kind, comma separated ("B, kB, KB, KiB, ..."). */
const char *units_accepted(UnitKind k);
/* An example value of a kind ("80 GB"). */
const char *units_example(UnitKind k);

#endif
