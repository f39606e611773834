/*
 * units.c: quantity strings → base units (see units.h for the contract).
 *
 * Input: one scalar's text. Output: a value in base units or a status the
 * caller turns into a diagnostic. Invariants: memory is exact (an int64
 * number of bytes, computed in integers so "1.5 GiB" is 1610612736 and not
 * a rounded double); nothing here allocates or reports, so the unit tests
 * can call it directly.
 *
 * One table lists every unit with its kind and factor, so a unit of the
 * wrong kind ("50 GB" where a bandwidth is wanted) is told apart from a
 * unit nobody knows ("50 GBs"), and the list of accepted units printed in
 * help lines comes from the same table as the parser.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "diag.h"
#include "units.h"

typedef struct {
  const char *name;
  UnitKind kind;
  int64_t ifactor; /* memory: bytes per unit (exact) */
  double factor;   /* base units per unit */
} Unit;

#define MEMU(n, f) {n, UNIT_MEMORY, (int64_t)(f), (double)(f)}
#define BWU(n, f) {n, UNIT_BANDWIDTH, 0, (double)(f)}
static const Unit units[] = {
    MEMU("B", 1),
    MEMU("kB", 1000LL), MEMU("KB", 1000LL), MEMU("KiB", 1LL << 10),
    MEMU("MB", 1000000LL), MEMU("MiB", 1LL << 20),
    MEMU("GB", 1000000000LL), MEMU("GiB", 1LL << 30),
    MEMU("TB", 1000000000000LL), MEMU("TiB", 1LL << 40),
    MEMU("PB", 1000000000000000LL), MEMU("PiB", 1LL << 50),
    /* bandwidth: bytes per second */
    BWU("B/s", 1), BWU("kB/s", 1e3), BWU("KB/s", 1e3), BWU("KiB/s", 1024.0),
    BWU("MB/s", 1e6), BWU("MiB/s", 1048576.0), BWU("GB/s", 1e9), BWU("GiB/s", 1073741824.0),
    BWU("TB/s", 1e12), BWU("TiB/s", 1099511627776.0),
    /* bandwidth in bits per second: divided by 8 */
    BWU("b/s", 1 / 8.0), BWU("kb/s", 1e3 / 8), BWU("Kb/s", 1e3 / 8), BWU("Mb/s", 1e6 / 8),
    BWU("Gb/s", 1e9 / 8), BWU("Tb/s", 1e12 / 8),
    BWU("Gbps", 1e9 / 8), BWU("Mbps", 1e6 / 8), BWU("Tbps", 1e12 / 8),
    /* compute: FLOP/s (for integer formats: OP/s) */
    {"FLOP/s", UNIT_COMPUTE, 0, 1}, {"GFLOP/s", UNIT_COMPUTE, 0, 1e9},
    {"TFLOP/s", UNIT_COMPUTE, 0, 1e12}, {"PFLOP/s", UNIT_COMPUTE, 0, 1e15},
    {"FLOPS", UNIT_COMPUTE, 0, 1}, {"GFLOPS", UNIT_COMPUTE, 0, 1e9},
    {"TFLOPS", UNIT_COMPUTE, 0, 1e12}, {"PFLOPS", UNIT_COMPUTE, 0, 1e15},
    {"OP/s", UNIT_COMPUTE, 0, 1}, {"GOP/s", UNIT_COMPUTE, 0, 1e9},
    {"TOP/s", UNIT_COMPUTE, 0, 1e12}, {"POP/s", UNIT_COMPUTE, 0, 1e15},
    {"TOPS", UNIT_COMPUTE, 0, 1e12}, {"POPS", UNIT_COMPUTE, 0, 1e15},
    /* time: seconds */
    {"ns", UNIT_TIME, 0, 1e-9}, {"us", UNIT_TIME, 0, 1e-6}, {"\xc2\xb5s", UNIT_TIME, 0, 1e-6},
    {"ms", UNIT_TIME, 0, 1e-3}, {"s", UNIT_TIME, 0, 1}, {"min", UNIT_TIME, 0, 60},
    /* rate: requests per second */
    {"req/s", UNIT_RATE, 0, 1}, {"req/min", UNIT_RATE, 0, 1 / 60.0},
};

static const char *const kind_names[UNIT__COUNT] = {
    "memory size", "bandwidth", "compute rate", "duration", "request rate"};
static const char *const examples[UNIT__COUNT] = {
    "80 GB", "4.8 TB/s", "989 TFLOP/s", "50 ms", "20 req/s"};

const char *units_kind_name(UnitKind k) {
  RP_ASSERT(k < UNIT__COUNT);
  return kind_names[k];
}

const char *units_example(UnitKind k) {
  RP_ASSERT(k < UNIT__COUNT);
  return examples[k];
}

const char *units_accepted(UnitKind k) {
  static char lists[UNIT__COUNT][256];
  RP_ASSERT(k < UNIT__COUNT);
  if (!lists[k][0]) {
    size_t off = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(units); i++) {
      if (units[i].kind != k) continue;
      int w = snprintf(lists[k] + off, sizeof lists[k] - off, "%s%s", off ? ", " : "",
                       units[i].name);
      if (w < 0 || (size_t)w >= sizeof lists[k] - off) break;
      off += (size_t)w;
    }
  }
  return lists[k];
}

static const Unit *find_unit(const char *u) {
  for (size_t i = 0; i < RP_ARRAY_LEN(units); i++)
    if (strcmp(units[i].name, u) == 0) return &units[i];
  return NULL;
}

/* Exact bytes from the decimal digits of the number (integer part ip,
 * fraction fp of nf digits) times an integer factor. */
static UnitsStatus exact_bytes(const char *ip, size_t ni, const char *fp, size_t nf,
                               int64_t factor, int64_t *out) {
  while (nf > 0 && fp[nf - 1] == '0') nf--; /* 1.50 is 1.5 */
  int64_t m = 0, scale = 1;
  for (size_t i = 0; i < ni; i++)
    if (!ck_mul(m, 10, &m) || !ck_add(m, ip[i] - '0', &m)) return UNITS_OVERFLOW;
  for (size_t i = 0; i < nf; i++) {
    if (!ck_mul(m, 10, &m) || !ck_add(m, fp[i] - '0', &m)) return UNITS_OVERFLOW;
    if (!ck_mul(scale, 10, &scale)) return UNITS_NOT_WHOLE;
  }
  int64_t p;
  if (!ck_mul(m, factor, &p)) return UNITS_OVERFLOW;
  if (p % scale != 0) return UNITS_NOT_WHOLE;
  *out = p / scale;
  return UNITS_OK;
}

UnitsStatus units_parse(const char *s, UnitKind want, UnitValue *out) {
  memset(out, 0, sizeof *out);
  const char *p = s;
  while (*p == ' ') p++;
  if (*p == '-') return UNITS_NEGATIVE;
  if (*p == '+') p++;
  const char *ip = p;
  while (isdigit((unsigned char)*p)) p++;
  size_t ni = (size_t)(p - ip);
  const char *fp = p;
  size_t nf = 0;
  if (*p == '.') {
    p++;
    fp = p;
    while (isdigit((unsigned char)*p)) p++;
    nf = (size_t)(p - fp);
  }
  if (ni + nf == 0) return UNITS_BAD_NUMBER;
  const char *num_end = p;
  bool has_exp = false;
  if ((*p == 'e' || *p == 'E') &&
      (isdigit((unsigned char)p[1]) ||
       ((p[1] == '-' || p[1] == '+') && isdigit((unsigned char)p[2])))) {
    has_exp = true;
    p += 2;
    while (isdigit((unsigned char)*p)) p++;
    num_end = p;
  }
  while (*p == ' ') p++;
  size_t ul = strlen(p);
  while (ul > 0 && p[ul - 1] == ' ') ul--;
  snprintf(out->unit, sizeof out->unit, "%.*s", (int)(ul < 23 ? ul : 23), p);
  if (ul == 0) return UNITS_MISSING_UNIT;
  if (ul >= sizeof out->unit) return UNITS_UNKNOWN_UNIT;
  const Unit *u = find_unit(out->unit);
  if (!u) {
    const char *cands[RP_ARRAY_LEN(units)];
    size_t n = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(units); i++)
      if (units[i].kind == want) cands[n++] = units[i].name;
    /* a wrong case ("gb/s") is the usual slip: the same letters first */
    for (size_t i = 0; i < n && !out->suggest; i++)
      if (strcasecmp(cands[i], out->unit) == 0) out->suggest = cands[i];
    if (!out->suggest) out->suggest = diag_closest(out->unit, cands, n);
    return UNITS_UNKNOWN_UNIT;
  }
  if (u->kind != want) {
    out->got = u->kind;
    return UNITS_WRONG_KIND;
  }
  /* the number itself, as a double for every kind */
  char buf[64];
  size_t nl = (size_t)(num_end - ip);
  if (nl >= sizeof buf) {
    if (want == UNIT_MEMORY) return UNITS_OVERFLOW;
    return UNITS_BAD_NUMBER;
  }
  memcpy(buf, ip, nl);
  buf[nl] = '\0';
  double v = strtod(buf, NULL) * u->factor;
  if (!isfinite(v)) return UNITS_OVERFLOW;
  out->value = v;
  if (want == UNIT_MEMORY) {
    if (has_exp) return UNITS_BAD_NUMBER;
    UnitsStatus st = exact_bytes(ip, ni, fp, nf, u->ifactor, &out->bytes);
    if (st != UNITS_OK) return st;
    out->value = (double)out->bytes;
  }
  return UNITS_OK;
}
