/*
 * plan_load.c: reads a plan file back into a Plan (plan.h), for `rankplan
 * explain` and the runtime.
 *
 * Input: plan JSON bytes (docs/plan.md). Output: a Plan whose invariants
 * plan.h lists, or an error message naming the place ("plan.json:
 * ranks[12].node: expected an integer, got a string").
 *
 * Nothing in a plan is trusted: a truncated or hand-edited file must fail
 * here, with the JSON path of the first problem, rather than start a rank
 * on the wrong GPU. The checks are, in order (docs/plan.md, "Loader
 * checks" and "Loader caps"): the file (regular, capped in size); JSON
 * syntax; the format version; every key's type and range; the spec digest
 * when the caller names the spec; the consistency between ranks, groups,
 * pools and nodes (each rank in exactly one group of each kind, membership
 * agreeing with coordinates, devices within their node, no GPU used twice);
 * and the compiler's guarantees about the one model the plan holds (shards,
 * KV bytes, pool sizes, expert maps, coordinates) and its kv_reshard maps,
 * each proven an exact cover by the independent checker.
 *
 * Every count that sizes an allocation is checked against the values the
 * document holds, or against a cap of plan.h, before the allocation.
 *
 * Depends on util.c, reshard_check.c and libc only (its own small JSON
 * reader, below): the runtime links it without libyaml, Lua or Jansson.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "reshard.h"

/* ---- a small JSON reader ----------------------------------------------------
 *
 * The loader reads plans with its own reader rather than Jansson: a
 * 131,072-rank plan holds some 40 million values, and a tree of separately
 * allocated, hashed objects for it took 20 to 30 s and 2.5 GB, where this
 * flat array of 24-byte values takes a few seconds and a third of the memory.
 * It reads RFC 8259 JSON: objects (duplicate keys refused, as the plan's
 * writer never makes them), arrays, strings (escapes decoded to UTF-8, NUL
 * refused, other bytes well-formed UTF-8), integers (int64, out of range
 * refused), numbers with a fraction or exponent, true, false, null;
 * nesting is capped.
 *
 * Values are stored in document order (a container, then its children), so
 * a container's children follow it and `skip` jumps over a whole subtree.
 * An object's children are key, value, key, value, ...
 */
typedef enum { PJ_NULL, PJ_FALSE, PJ_TRUE, PJ_INTEGER, PJ_REAL, PJ_STRING, PJ_ARRAY, PJ_OBJECT } PjType;

typedef struct PjV {
  uint8_t type;
  uint32_t skip; /* values in this subtree, itself included */
  uint32_t n;    /* array: elements; object: members; string: bytes */
  union {
    int64_t i;
    double d;
    const char *s;                 /* NUL-terminated, inside the document */
    struct { uint32_t at, off; } a; /* array: the last element reached, to walk on from */
  } u;
} PjV;

typedef struct {
  PjV *v;
  size_t n, cap;
  char *str;   /* decoded strings; never longer than the text */
  size_t slen;
  const char *p, *end, *text;
  int depth;
  char err[160];
  int line, col;
} PjDoc;

enum { PJ_MAX_DEPTH = 64, PJ_MAX_MEMBERS = 1024 };

static bool pj_fail(PjDoc *d, const char *what) {
  if (d->err[0]) return false;
  int line = 1, col = 1;
  for (const char *q = d->text; q < d->p && q < d->end; q++) {
    if (*q == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  d->line = line;
  d->col = col;
  snprintf(d->err, sizeof d->err, "%s", what);
  return false;
}

static void pj_ws(PjDoc *d) {
  while (d->p < d->end && (*d->p == ' ' || *d->p == '\n' || *d->p == '\t' || *d->p == '\r')) d->p++;
}

static size_t pj_new(PjDoc *d, PjType t) {
  if (d->n == d->cap) {
    d->cap = d->cap ? d->cap * 2 : 1024;
    d->v = rp_realloc(d->v, d->cap * sizeof *d->v);
  }
  memset(&d->v[d->n], 0, sizeof d->v[d->n]);
  d->v[d->n].type = (uint8_t)t;
  d->v[d->n].skip = 1;
  return d->n++;
}

static int pj_hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool pj_u4(PjDoc *d, unsigned *out) {
  if (d->end - d->p < 4) return pj_fail(d, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = pj_hex(d->p[i]);
    if (h < 0) return pj_fail(d, "invalid \\u escape");
    v = v * 16 + (unsigned)h;
  }
  d->p += 4;
  *out = v;
  return true;
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or 0. */
static size_t pj_utf8(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || (size_t)(end - p) < n) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0) || (c == 0xF0 && p[1] < 0x90) ||
      (c == 0xF4 && p[1] >= 0x90))
    return 0;
  return n;
}

/* A \u escape after its `\u` (a surrogate pair's second half included)
 * as UTF-8 at *o, never longer than the escape it replaces (6 or 12
 * bytes). */
static bool pj_unicode_escape(PjDoc *d, char **o) {
  unsigned cp;
  if (!pj_u4(d, &cp)) return false;
  if (cp >= 0xD800 && cp < 0xDC00) {
    unsigned lo;
    if (d->end - d->p < 2 || d->p[0] != '\\' || d->p[1] != 'u')
      return pj_fail(d, "unpaired surrogate in a \\u escape");
    d->p += 2;
    if (!pj_u4(d, &lo)) return false;
    if (lo < 0xDC00 || lo > 0xDFFF) return pj_fail(d, "unpaired surrogate in a \\u escape");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return pj_fail(d, "unpaired surrogate in a \\u escape");
  }
  if (cp == 0) return pj_fail(d, "\\u0000 in a string");
  char *q = *o;
  if (cp < 0x80) {
    *q++ = (char)cp;
  } else if (cp < 0x800) {
    *q++ = (char)(0xC0 | (cp >> 6));
    *q++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *q++ = (char)(0xE0 | (cp >> 12));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *q++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *q++ = (char)(0xF0 | (cp >> 18));
    *q++ = (char)(0x80 | ((cp >> 12) & 0x3F));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *q++ = (char)(0x80 | (cp & 0x3F));
  }
  *o = q;
  return true;
}

/* The escape after a backslash, written at *o. */
static bool pj_escape(PjDoc *d, char **o) {
  if (d->p >= d->end) return pj_fail(d, "unexpected end of input in a string");
  char e = *d->p++;
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  const char *k = e ? strchr(from, e) : NULL;
  if (k) {
    *(*o)++ = to[k - from];
    return true;
  }
  if (e == 'u') return pj_unicode_escape(d, o);
  return pj_fail(d, "invalid escape in a string");
}

static bool pj_string(PjDoc *d, size_t *idx) {
  d->p++; /* the opening quote */
  char *o = d->str + d->slen, *start = o;
  for (;;) {
    if (d->p >= d->end) return pj_fail(d, "unexpected end of input in a string");
    unsigned char c = (unsigned char)*d->p;
    if (c == '"') {
      d->p++;
      break;
    }
    if (c < 0x20) return pj_fail(d, "control character in a string");
    if (c >= 0x80) {
      /* RFC 8259 8.1: JSON text is UTF-8; a compiled plan's strings come
       * from a UTF-8 spec. */
      size_t n = pj_utf8((const unsigned char *)d->p, (const unsigned char *)d->end);
      if (n == 0) return pj_fail(d, "invalid UTF-8 in a string");
      memcpy(o, d->p, n);
      o += n;
      d->p += n;
    } else if (c != '\\') {
      *o++ = (char)c;
      d->p++;
    } else {
      d->p++;
      if (!pj_escape(d, &o)) return false;
    }
  }
  *o++ = '\0';
  size_t i = pj_new(d, PJ_STRING);
  d->v[i].u.s = start;
  d->v[i].n = (uint32_t)(o - start - 1);
  d->slen = (size_t)(o - d->str);
  *idx = i;
  return true;
}

static bool pj_number(PjDoc *d) {
  const char *s = d->p;
  bool real = false;
  if (d->p < d->end && *d->p == '-') d->p++;
  if (d->p >= d->end || !(*d->p >= '0' && *d->p <= '9')) return pj_fail(d, "invalid number");
  if (*d->p == '0') {
    d->p++;
  } else {
    while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
  }
  if (d->p < d->end && *d->p == '.') {
    real = true;
    d->p++;
    if (d->p >= d->end || !(*d->p >= '0' && *d->p <= '9')) return pj_fail(d, "invalid number");
    while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
  }
  if (d->p < d->end && (*d->p == 'e' || *d->p == 'E')) {
    real = true;
    d->p++;
    if (d->p < d->end && (*d->p == '+' || *d->p == '-')) d->p++;
    if (d->p >= d->end || !(*d->p >= '0' && *d->p <= '9')) return pj_fail(d, "invalid number");
    while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
  }
  char buf[64];
  size_t n = (size_t)(d->p - s);
  if (n >= sizeof buf) return pj_fail(d, "number too long");
  memcpy(buf, s, n);
  buf[n] = '\0';
  errno = 0;
  if (real) {
    size_t i = pj_new(d, PJ_REAL);
    d->v[i].u.d = strtod(buf, NULL);
  } else {
    long long x = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return pj_fail(d, "integer out of range");
    size_t i = pj_new(d, PJ_INTEGER);
    d->v[i].u.i = x;
  }
  return true;
}

static bool pj_value(PjDoc *d);

static bool pj_word(PjDoc *d, const char *w, PjType t) {
  size_t n = strlen(w);
  if ((size_t)(d->end - d->p) < n || memcmp(d->p, w, n) != 0) return pj_fail(d, "invalid token");
  d->p += n;
  pj_new(d, t);
  return true;
}

static bool pj_container(PjDoc *d, bool object) {
  if (++d->depth > PJ_MAX_DEPTH) return pj_fail(d, "nesting too deep");
  size_t me = pj_new(d, object ? PJ_OBJECT : PJ_ARRAY);
  d->p++;
  pj_ws(d);
  uint32_t count = 0;
  char close = object ? '}' : ']';
  if (d->p < d->end && *d->p == close) {
    d->p++;
  } else {
    for (;;) {
      pj_ws(d);
      if (object) {
        if (d->p >= d->end || *d->p != '"') return pj_fail(d, "expected a string key");
        size_t k;
        if (count >= PJ_MAX_MEMBERS) return pj_fail(d, "object with too many members");
        if (!pj_string(d, &k)) return false;
        /* duplicate keys: members are few, compare with the earlier keys */
        size_t at = me + 1;
        for (uint32_t m = 0; m < count; m++) {
          if (strcmp(d->v[at].u.s, d->v[k].u.s) == 0) return pj_fail(d, "duplicate object key");
          at += 1 + d->v[at + 1].skip;
        }
        pj_ws(d);
        if (d->p >= d->end || *d->p != ':') return pj_fail(d, "expected ':'");
        d->p++;
        pj_ws(d);
      }
      if (!pj_value(d)) return false;
      count++;
      pj_ws(d);
      if (d->p < d->end && *d->p == ',') {
        d->p++;
        continue;
      }
      if (d->p < d->end && *d->p == close) {
        d->p++;
        break;
      }
      return pj_fail(d, d->p >= d->end ? "unexpected end of input" : object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  if (d->n - me > UINT32_MAX) return pj_fail(d, "document too large");
  d->v[me].skip = (uint32_t)(d->n - me);
  d->v[me].n = count;
  d->depth--;
  return true;
}

static bool pj_value(PjDoc *d) {
  pj_ws(d);
  if (d->p >= d->end) return pj_fail(d, "unexpected end of input");
  switch (*d->p) {
  case '{': return pj_container(d, true);
  case '[': return pj_container(d, false);
  case '"': {
    size_t i;
    return pj_string(d, &i);
  }
  case 't': return pj_word(d, "true", PJ_TRUE);
  case 'f': return pj_word(d, "false", PJ_FALSE);
  case 'n': return pj_word(d, "null", PJ_NULL);
  default: return pj_number(d);
  }
}

/* Parses text; on failure returns false with d->err, d->line, d->col. */
static bool pj_parse(PjDoc *d, const char *text, size_t len) {
  memset(d, 0, sizeof *d);
  d->text = d->p = text;
  d->end = text + len;
  d->str = rp_malloc(len + 1);
  if (!pj_value(d)) return false;
  pj_ws(d);
  if (d->p != d->end) return pj_fail(d, "end of file expected");
  return true;
}

static void pj_free(PjDoc *d) {
  free(d->v);
  free(d->str);
}

static bool pj_is_object(const PjV *v) { return v && v->type == PJ_OBJECT; }
static bool pj_is_array(const PjV *v) { return v && v->type == PJ_ARRAY; }
static bool pj_is_string(const PjV *v) { return v && v->type == PJ_STRING; }
static bool pj_is_integer(const PjV *v) { return v && v->type == PJ_INTEGER; }
static bool pj_is_real(const PjV *v) { return v && v->type == PJ_REAL; }
static bool pj_is_number(const PjV *v) { return pj_is_integer(v) || pj_is_real(v); }
static bool pj_is_boolean(const PjV *v) { return v && (v->type == PJ_TRUE || v->type == PJ_FALSE); }
static bool pj_is_null(const PjV *v) { return v && v->type == PJ_NULL; }
static int64_t pj_integer_value(const PjV *v) { return pj_is_integer(v) ? v->u.i : 0; }
static double pj_number_value(const PjV *v) {
  return pj_is_integer(v) ? (double)v->u.i : pj_is_real(v) ? v->u.d : 0.0;
}
static const char *pj_string_value(const PjV *v) { return pj_is_string(v) ? v->u.s : NULL; }
static size_t pj_array_size(const PjV *v) { return pj_is_array(v) ? v->n : 0; }

/* Element i of an array. Walks from the last element reached when i is at
 * or past it, so reading an array in order costs O(1) per element. */
static PjV *pj_array_get(PjV *a, size_t i) {
  if (!pj_is_array(a) || i >= a->n) return NULL;
  uint32_t at = 0, off = 1;
  if (a->u.a.off && a->u.a.at <= i) {
    at = a->u.a.at;
    off = a->u.a.off;
  }
  while (at < i) {
    off += a[off].skip;
    at++;
  }
  a->u.a.at = at;
  a->u.a.off = off;
  return &a[off];
}

/* Member `key` of an object, or NULL. */
static PjV *pj_object_get(PjV *o, const char *key) {
  if (!pj_is_object(o)) return NULL;
  uint32_t off = 1;
  for (uint32_t m = 0; m < o->n; m++) {
    PjV *k = &o[off], *v = &o[off + 1];
    if (strcmp(k->u.s, key) == 0) return v;
    off += 1 + v->skip;
  }
  return NULL;
}

/* Iterates an object's members: *it starts at 0. */
static bool pj_object_next(PjV *o, uint32_t *it, uint32_t *off, const char **key, PjV **val) {
  if (!pj_is_object(o) || *it >= o->n) return false;
  if (*it == 0) *off = 1;
  *key = o[*off].u.s;
  *val = &o[*off + 1];
  *off += 1 + (*val)->skip;
  (*it)++;
  return true;
}

/* ---- names ------------------------------------------------------------- */

static const char *const kind_names[GK__COUNT] = {
    [GK_TP] = "tp",         [GK_CP] = "cp",         [GK_DP] = "dp",
    [GK_PP] = "pp",         [GK_TP_CP] = "tp-cp",   [GK_DP_CP] = "dp-cp",
    [GK_TP_PP] = "tp-pp",   [GK_TP_DP_CP] = "tp-dp-cp",
    [GK_EP] = "ep",         [GK_ETP] = "etp",       [GK_EDP] = "edp",
    [GK_TP_EP] = "tp-ep",   [GK_DCP] = "dcp",       [GK_EMBEDDING] = "embedding",
    [GK_INSTANCE] = "instance", [GK_WORLD] = "world",
};
static const char *const coord_names[CO__COUNT] = {"tp", "cp", "dp", "pp", "ep", "etp", "edp", "dcp"};
static const char *const shard_names[SH__COUNT] = {"layers", "q_heads", "kv_heads", "experts", "vocab"};
static const char *const mem_names[MEM__COUNT] = {"weights", "kv_cache", "activations",
                                                  "workspace", "reserved", "capacity"};

const char *plan_kind_name(GroupKind k) { return (unsigned)k < GK__COUNT ? kind_names[k] : "?"; }
const char *plan_coord_name(CoordKind c) { return (unsigned)c < CO__COUNT ? coord_names[c] : "?"; }
const char *plan_shard_name(ShardKind s) { return (unsigned)s < SH__COUNT ? shard_names[s] : "?"; }
const char *plan_mem_name(MemKind m) { return (unsigned)m < MEM__COUNT ? mem_names[m] : "?"; }

static const char *const est_comm_names[PEC__COUNT] = {"tp", "cp", "ep", "pp"};
const char *plan_est_comm_name(PlanEstComm k) {
  return (unsigned)k < PEC__COUNT ? est_comm_names[k] : "?";
}

bool plan_kind_parse(const char *s, GroupKind *out) {
  for (int k = 0; k < GK__COUNT; k++)
    if (strcmp(s, kind_names[k]) == 0) {
      *out = (GroupKind)k;
      return true;
    }
  return false;
}

bool plan_kind_fixes(GroupKind k, CoordKind c) {
  bool dense_c = c == CO_TP || c == CO_CP || c == CO_DP || c == CO_PP;
  bool expert_c = c == CO_ETP || c == CO_EP || c == CO_EDP || c == CO_PP;
  switch (k) {
  case GK_TP: return dense_c && c != CO_TP;
  case GK_CP: return dense_c && c != CO_CP;
  case GK_DP: return dense_c && c != CO_DP;
  case GK_PP: return dense_c && c != CO_PP;
  case GK_TP_CP: return dense_c && c != CO_TP && c != CO_CP;
  case GK_DP_CP: return dense_c && c != CO_DP && c != CO_CP;
  case GK_TP_PP: return dense_c && c != CO_TP && c != CO_PP;
  case GK_TP_DP_CP: return c == CO_PP;
  case GK_EP: return expert_c && c != CO_EP;
  case GK_ETP: return expert_c && c != CO_ETP;
  case GK_EDP: return expert_c && c != CO_EDP;
  case GK_TP_EP: return expert_c && c != CO_ETP && c != CO_EP;
  case GK_DCP: return c == CO_CP || c == CO_DP || c == CO_PP;
  case GK_EMBEDDING: return c == CO_TP || c == CO_CP || c == CO_DP;
  case GK_INSTANCE:
  case GK_WORLD:
  case GK__COUNT: return false;
  }
  return false;
}

/* ---- escaping --------------------------------------------------------------- */

char *plan_escape(const char *s) {
  StrBuf sb;
  sb_init(&sb);
  const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
  while (*p) {
    /* printable ASCII, or UTF-8 other than a C1 control (U+0080..U+009F) */
    size_t n = *p >= 0x80 ? pj_utf8(p, end) : *p >= 0x20 && *p != 0x7F ? 1 : 0;
    if (n == 2 && p[0] == 0xC2 && p[1] < 0xA0) n = 0;
    if (n) {
      sb_putn(&sb, (const char *)p, n);
      p += n;
    } else {
      sb_printf(&sb, "\\x%02x", *p++);
    }
  }
  return sb_take(&sb);
}

/* ---- error reporting ----------------------------------------------------- */

typedef struct {
  const char *name;
  char *err;
} Ld;

static bool fail(Ld *ld, const char *fmt, ...) RP_PRINTF(2, 3);
static bool fail(Ld *ld, const char *fmt, ...) {
  if (ld->err) return false; /* keep the first problem */
  va_list ap;
  va_start(ap, fmt);
  char *m = rp_vsprintf(fmt, ap);
  va_end(ap);
  char *e = plan_escape(m);
  ld->err = rp_sprintf("%s: %s", ld->name, e);
  free(e);
  free(m);
  return false;
}

static const char *jtype(const PjV *v) {
  if (pj_is_object(v)) return "an object";
  if (pj_is_array(v)) return "an array";
  if (pj_is_string(v)) return "a string";
  if (pj_is_integer(v)) return "an integer";
  if (pj_is_real(v)) return "a number with a fraction";
  if (pj_is_boolean(v)) return "a boolean";
  if (pj_is_null(v)) return "null";
  return "nothing";
}

/* Fetches obj[key] with the expected type; path is the object's JSON path
 * ("ranks[12]"; "" for the top level). */
static PjV *field(Ld *ld, PjV *obj, const char *path, const char *key, PjType t) {
  PjV *v = pj_object_get(obj, key);
  const char *dot = *path ? "." : "";
  if (!v) {
    fail(ld, "%s%s%s: missing", path, dot, key);
    return NULL;
  }
  if ((PjType)v->type != t) {
    const char *want = t == PJ_OBJECT ? "an object" : t == PJ_ARRAY ? "an array"
                     : t == PJ_STRING ? "a string" : t == PJ_INTEGER ? "an integer" : "?";
    fail(ld, "%s%s%s: expected %s, got %s", path, dot, key, want, jtype(v));
    return NULL;
  }
  return v;
}

static bool get_int(Ld *ld, PjV *obj, const char *path, const char *key, int64_t lo,
                    int64_t hi, int64_t *out) {
  PjV *v = field(ld, obj, path, key, PJ_INTEGER);
  if (!v) return false;
  int64_t x = (int64_t)pj_integer_value(v);
  if (x < lo || x > hi)
    return fail(ld, "%s%s%s: expected %lld..%lld, got %lld", path, *path ? "." : "", key,
                (long long)lo, (long long)hi, (long long)x);
  *out = x;
  return true;
}

static bool get_str(Ld *ld, PjV *obj, const char *path, const char *key, const char **out) {
  PjV *v = field(ld, obj, path, key, PJ_STRING);
  if (!v) return false;
  *out = pj_string_value(v);
  return true;
}

/* v as [start, end) with 0 <= start <= end; where is its JSON path. */
static bool range_value(Ld *ld, PjV *v, const char *where, int64_t out[2]) {
  if (!pj_is_array(v)) return fail(ld, "%s: expected [start, end], got %s", where, jtype(v));
  if (pj_array_size(v) != 2)
    return fail(ld, "%s: expected [start, end], got %zu entries", where, pj_array_size(v));
  for (size_t i = 0; i < 2; i++) {
    PjV *e = pj_array_get(v, i);
    if (!pj_is_integer(e)) return fail(ld, "%s[%zu]: expected an integer, got %s", where, i, jtype(e));
    out[i] = pj_integer_value(e);
  }
  if (out[0] < 0 || out[1] < out[0])
    return fail(ld, "%s: expected 0 <= start <= end, got [%lld, %lld]", where, (long long)out[0],
                (long long)out[1]);
  return true;
}

/* obj[key] as [start, end). */
static bool get_range(Ld *ld, PjV *obj, const char *path, const char *key, int64_t out[2]) {
  PjV *v = field(ld, obj, path, key, PJ_ARRAY);
  if (!v) return false;
  char where[256];
  snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
  return range_value(ld, v, where, out);
}

/* ---- sections -------------------------------------------------------------- */

static int find_pool(const Plan *p, const char *name) {
  for (size_t i = 0; i < p->npools; i++)
    if (strcmp(p->pools[i].name, name) == 0) return (int)i;
  return -1;
}

static int find_node(const Plan *p, int64_t node) {
  for (size_t i = 0; i < p->nnodes; i++)
    if (p->nodes[i].node == node) return (int)i;
  return -1;
}

static bool load_nodes(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "nodes", PJ_ARRAY);
  if (!a) return false;
  p->nnodes = pj_array_size(a);
  p->nodes = rp_calloc(p->nnodes ? p->nnodes : 1, sizeof *p->nodes);
  size_t total = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    PjV *n = pj_array_get(a, i);
    char path[48];
    snprintf(path, sizeof path, "nodes[%zu]", i);
    if (!pj_is_object(n)) return fail(ld, "%s: expected an object, got %s", path, jtype(n));
    int64_t id = 0, gpus = 0;
    if (!get_int(ld, n, path, "node", 0, INT32_MAX, &id)) return false;
    if (!p->partial && id != (int64_t)i)
      return fail(ld, "%s.node: expected %zu (nodes are listed in order), got %lld", path, i,
                  (long long)id);
    if (p->partial && (p->nnodes != 1 || id != p->partial_node))
      return fail(ld, "%s.node: a node file lists only its node %d, got node %lld of %zu", path,
                  p->partial_node, (long long)id, p->nnodes);
    if (!get_int(ld, n, path, "gpus", 1, INT32_MAX, &gpus)) return false;
    if (i > 0 && gpus != p->nodes[0].gpus)
      return fail(ld, "%s.gpus: expected %d (every node has hardware.gpus_per_node GPUs, as nodes[0]), got %lld",
                  path, p->nodes[0].gpus, (long long)gpus);
    PjV *r = field(ld, n, path, "ranks", PJ_ARRAY);
    if (!r) return false;
    p->nodes[i].node = (int32_t)id;
    p->nodes[i].gpus = (int32_t)gpus;
    p->nodes[i].nranks = (int32_t)pj_array_size(r);
    total += pj_array_size(r);
  }
  p->node_ranks = rp_malloc((total ? total : 1) * sizeof *p->node_ranks);
  size_t at = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    PjV *r = pj_object_get(pj_array_get(a, i), "ranks");
    p->nodes[i].first_rank = (int32_t)at;
    for (size_t j = 0; j < pj_array_size(r); j++) {
      PjV *e = pj_array_get(r, j);
      if (!pj_is_integer(e) || pj_integer_value(e) < 0 ||
          pj_integer_value(e) >= p->world_size)
        return fail(ld, "nodes[%zu].ranks[%zu]: expected a rank 0..%lld, got %s", i, j,
                    (long long)(p->world_size - 1), pj_is_integer(e) ? "one out of range" : jtype(e));
      p->node_ranks[at++] = (int32_t)pj_integer_value(e);
    }
  }
  return true;
}

/* A pool's optional expert_map: {"slots_per_rank": S, "ep_ranks": [...]},
 * one list of S distinct, ascending expert ids >= 0 per ep rank. */
static bool load_expert_map(Ld *ld, PjV *o, const char *path, PlanPool *P) {
  PjV *m = pj_object_get(o, "expert_map");
  if (!m) return true;
  char sub[64];
  snprintf(sub, sizeof sub, "%s.expert_map", path);
  if (!pj_is_object(m)) return fail(ld, "%s: expected an object, got %s", sub, jtype(m));
  int64_t slots;
  if (!get_int(ld, m, sub, "slots_per_rank", 1, INT32_MAX, &slots)) return false;
  PjV *a = field(ld, m, sub, "ep_ranks", PJ_ARRAY);
  if (!a) return false;
  int64_t ep = P->size[CO_EP];
  if ((int64_t)pj_array_size(a) != ep)
    return fail(ld, "%s.ep_ranks: expected %lld lists (ep), got %zu", sub, (long long)ep,
                pj_array_size(a));
  /* Every list's length first: the map is allocated only once the
   * document is known to hold its slots * ep values. */
  for (int64_t r = 0; r < ep; r++) {
    PjV *l = pj_array_get(a, (size_t)r);
    if (!pj_is_array(l) || (int64_t)pj_array_size(l) != slots)
      return fail(ld, "%s.ep_ranks[%lld]: expected a list of %lld experts (slots_per_rank), got %s",
                  sub, (long long)r, (long long)slots,
                  pj_is_array(l) ? "a list of another length" : jtype(l));
  }
  P->expert_map = rp_malloc((size_t)(slots * ep) * sizeof *P->expert_map);
  P->expert_slots = slots;
  for (int64_t r = 0; r < ep; r++) {
    PjV *l = pj_array_get(a, (size_t)r);
    for (int64_t j = 0; j < slots; j++) {
      PjV *e = pj_array_get(l, (size_t)j);
      int64_t v = pj_integer_value(e);
      if (!pj_is_integer(e) || v < 0 || v > INT32_MAX)
        return fail(ld, "%s.ep_ranks[%lld][%lld]: expected an expert id >= 0, got %s", sub,
                    (long long)r, (long long)j, pj_is_integer(e) ? "one out of range" : jtype(e));
      if (j > 0 && v <= P->expert_map[r * slots + j - 1])
        return fail(ld, "%s.ep_ranks[%lld]: expected ascending expert ids without repeats, got %lld after %lld",
                    sub, (long long)r, (long long)v, (long long)P->expert_map[r * slots + j - 1]);
      P->expert_map[r * slots + j] = (int32_t)v;
    }
  }
  return true;
}

static bool load_pools(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "pools", PJ_ARRAY);
  if (!a) return false;
  p->npools = pj_array_size(a);
  p->pools = rp_calloc(p->npools ? p->npools : 1, sizeof *p->pools);
  int64_t next = 0;
  for (size_t i = 0; i < p->npools; i++) {
    PjV *o = pj_array_get(a, i);
    PlanPool *P = &p->pools[i];
    char path[48];
    snprintf(path, sizeof path, "pools[%zu]", i);
    if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *name, *role;
    if (!get_str(ld, o, path, "name", &name) || !get_str(ld, o, path, "role", &role)) return false;
    P->name = rp_strdup(name);
    P->role = rp_strdup(role);
    if (find_pool(p, name) != (int)i) return fail(ld, "%s.name: pool `%s` is listed twice", path, name);
    if (strcmp(role, "prefill") && strcmp(role, "decode") && strcmp(role, "both"))
      return fail(ld, "%s.role: expected prefill, decode or both, got `%s`", path, role);
    if (!get_int(ld, o, path, "replicas", 1, INT32_MAX, &P->replicas)) return false;
    for (int c = 0; c < CO__COUNT; c++)
      if (!get_int(ld, o, path, coord_names[c], 1, INT32_MAX, &P->size[c])) return false;
    if (!get_int(ld, o, path, "instance_size", 1, INT32_MAX, &P->instance_size)) return false;
    CkState st = {true};
    int64_t want = ckm(&st, ckm(&st, P->size[CO_TP], P->size[CO_CP]),
                       ckm(&st, P->size[CO_DP], P->size[CO_PP]));
    if (!st.ok || want != P->instance_size)
      return fail(ld, "%s.instance_size: expected tp * cp * dp * pp = %lld, got %lld", path,
                  (long long)want, (long long)P->instance_size);
    int64_t r[2];
    if (!get_range(ld, o, path, "ranks", r)) return false;
    P->first_rank = r[0];
    P->nranks = r[1] - r[0];
    if (r[0] != next || ckm(&st, P->replicas, P->instance_size) != P->nranks || !st.ok)
      return fail(ld, "%s.ranks: expected [%lld, %lld] (replicas * instance_size after the "
                      "previous pool), got [%lld, %lld]",
                  path, (long long)next, (long long)(next + P->replicas * P->instance_size),
                  (long long)r[0], (long long)r[1]);
    next = r[1];
    PjV *lp = field(ld, o, path, "layer_partition", PJ_ARRAY);
    if (!lp) return false;
    if ((int64_t)pj_array_size(lp) != P->size[CO_PP])
      return fail(ld, "%s.layer_partition: expected %lld entries (pp), got %zu", path,
                  (long long)P->size[CO_PP], pj_array_size(lp));
    P->layer_partition = rp_calloc((size_t)P->size[CO_PP], sizeof(int64_t));
    for (size_t j = 0; j < pj_array_size(lp); j++) {
      PjV *e = pj_array_get(lp, j);
      if (!pj_is_integer(e) || pj_integer_value(e) < 1)
        return fail(ld, "%s.layer_partition[%zu]: expected an integer >= 1, got %s", path, j,
                    pj_is_integer(e) ? "one below 1" : jtype(e));
      P->layer_partition[j] = (int64_t)pj_integer_value(e);
    }
    PjV *mf = pj_object_get(o, "memory_fraction");
    if (mf && (!pj_is_number(mf) || !(pj_number_value(mf) > 0 && pj_number_value(mf) <= 1)))
      return fail(ld, "%s.memory_fraction: expected a number in (0, 1], got %s", path,
                  pj_is_number(mf) ? "one outside it" : jtype(mf));
    P->memory_fraction = mf ? pj_number_value(mf) : 0;
    if (!load_expert_map(ld, o, path, P)) return false;
  }
  if (next != p->world_size)
    return fail(ld, "pools: the pools hold %lld ranks, expected world_size %lld", (long long)next,
                (long long)p->world_size);
  return true;
}

/* ranks[i].groups (path): a group id per kind, every kind but the
 * embedding present. */
static bool load_rank_groups(Ld *ld, PjV *o, const char *path, PlanRank *R) {
  char sub[64];
  PjV *g = field(ld, o, path, "groups", PJ_OBJECT);
  if (!g) return false;
  snprintf(sub, sizeof sub, "%s.groups", path);
  for (int k = 0; k < GK__COUNT; k++) R->groups[k] = -1;
  const char *key;
  PjV *val;
  uint32_t it = 0, off = 0;
  while (pj_object_next(g, &it, &off, &key, &val)) {
    GroupKind k;
    if (!plan_kind_parse(key, &k)) return fail(ld, "%s.%s: unknown group kind", sub, key);
    if (!pj_is_integer(val) || pj_integer_value(val) < 0 || pj_integer_value(val) > INT32_MAX)
      return fail(ld, "%s.%s: expected a group id, got %s", sub, key,
                  pj_is_integer(val) ? "one out of range" : jtype(val));
    R->groups[k] = (int32_t)pj_integer_value(val);
  }
  for (int k = 0; k < GK__COUNT; k++)
    if (k != GK_EMBEDDING && R->groups[k] < 0)
      return fail(ld, "%s.groups.%s: missing (every rank is in one group of each kind)", sub,
                  kind_names[k]);
  return true;
}

/* ranks[i].shard, .memory and .kv (path). */
static bool load_rank_memory(Ld *ld, PjV *o, const char *path, PlanRank *R) {
  char sub[64];
  PjV *s = field(ld, o, path, "shard", PJ_OBJECT);
  if (!s) return false;
  snprintf(sub, sizeof sub, "%s.shard", path);
  for (int k = 0; k < SH__COUNT; k++)
    if (!get_range(ld, s, sub, shard_names[k], R->shard[k])) return false;
  PjV *m = field(ld, o, path, "memory", PJ_OBJECT);
  if (!m) return false;
  snprintf(sub, sizeof sub, "%s.memory", path);
  for (int k = 0; k < MEM__COUNT; k++)
    if (!get_int(ld, m, sub, mem_names[k], 0, INT64_MAX, &R->memory[k])) return false;
  PjV *kv = field(ld, o, path, "kv", PJ_OBJECT);
  if (!kv) return false;
  snprintf(sub, sizeof sub, "%s.kv", path);
  if (!get_int(ld, kv, sub, "bytes_per_token", 0, INT64_MAX, &R->kv_bytes_per_token) ||
      !get_int(ld, kv, sub, "block_tokens", 1, INT64_MAX, &R->kv_block_tokens) ||
      !get_int(ld, kv, sub, "blocks", 0, INT64_MAX, &R->kv_blocks))
    return false;
  /* Optional: the share of the MTP modules and the draft model. */
  R->kv_draft_bytes_per_token = 0;
  return !pj_object_get(kv, "draft_bytes_per_token") ||
         get_int(ld, kv, sub, "draft_bytes_per_token", 1, R->kv_bytes_per_token, &R->kv_draft_bytes_per_token);
}

static bool load_rank(Ld *ld, Plan *p, PjV *o, size_t i, PlanRank *R) {
  char path[48];
  snprintf(path, sizeof path, "ranks[%zu]", i);
  if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
  int64_t v;
  if (!get_int(ld, o, path, "rank", 0, p->world_size - 1, &v)) return false;
  R->rank = (int32_t)v;
  if (!get_int(ld, o, path, "node", 0, INT32_MAX, &v)) return false;
  int ni = find_node(p, v);
  if (ni < 0) return fail(ld, "%s.node: node %lld is not in nodes[]", path, (long long)v);
  R->node = (int32_t)v;
  if (!get_int(ld, o, path, "device", 0, p->nodes[ni].gpus - 1, &v)) return false;
  R->device = (int32_t)v;
  if (!get_int(ld, o, path, "local_rank", 0, p->nodes[ni].gpus - 1, &v)) return false;
  R->local_rank = (int32_t)v;
  const char *pool;
  if (!get_str(ld, o, path, "pool", &pool)) return false;
  int pi = find_pool(p, pool);
  if (pi < 0) return fail(ld, "%s.pool: pool `%s` is not in pools[]", path, pool);
  R->pool = pi;
  const PlanPool *P = &p->pools[pi];
  if (R->rank < P->first_rank || R->rank >= P->first_rank + P->nranks)
    return fail(ld, "%s.pool: rank %d is outside pool `%s`'s ranks [%lld, %lld)", path, R->rank,
                pool, (long long)P->first_rank, (long long)(P->first_rank + P->nranks));
  if (!get_int(ld, o, path, "instance", 0, P->replicas - 1, &v)) return false;
  R->instance = (int32_t)v;
  if ((R->rank - P->first_rank) / P->instance_size != R->instance)
    return fail(ld, "%s.instance: rank %d belongs to instance %lld of pool `%s`, got %d", path,
                R->rank, (long long)((R->rank - P->first_rank) / P->instance_size), pool,
                R->instance);
  char sub[64];
  PjV *c = field(ld, o, path, "coords", PJ_OBJECT);
  if (!c) return false;
  snprintf(sub, sizeof sub, "%s.coords", path);
  for (int k = 0; k < CO__COUNT; k++) {
    if (!get_int(ld, c, sub, coord_names[k], 0, P->size[k] - 1, &v)) return false;
    R->coords[k] = (int32_t)v;
  }
  if (!load_rank_groups(ld, o, path, R)) return false;
  return load_rank_memory(ld, o, path, R);
}

static bool load_ranks(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "ranks", PJ_ARRAY);
  if (!a) return false;
  p->nranks = (int64_t)pj_array_size(a);
  if (!p->partial && p->nranks != p->world_size)
    return fail(ld, "ranks: expected world_size = %lld entries, got %lld",
                (long long)p->world_size, (long long)p->nranks);
  p->ranks = rp_calloc((size_t)(p->nranks ? p->nranks : 1), sizeof *p->ranks);
  for (int64_t i = 0; i < p->nranks; i++) {
    if (!load_rank(ld, p, pj_array_get(a, (size_t)i), (size_t)i, &p->ranks[i])) return false;
    if (!p->partial && p->ranks[i].rank != i)
      return fail(ld, "ranks[%lld].rank: expected %lld (ranks are listed in order), got %d",
                  (long long)i, (long long)i, p->ranks[i].rank);
    if (p->partial && i > 0 && p->ranks[i].rank <= p->ranks[i - 1].rank)
      return fail(ld, "ranks[%lld].rank: expected ranks in ascending order, got %d after %d",
                  (long long)i, p->ranks[i].rank, p->ranks[i - 1].rank);
  }
  return true;
}

static bool load_groups(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "groups", PJ_ARRAY);
  if (!a) return false;
  p->ngroups = (int64_t)pj_array_size(a);
  p->groups = rp_calloc((size_t)(p->ngroups ? p->ngroups : 1), sizeof *p->groups);
  int world_spans = 0;
  for (int64_t i = 0; i < p->ngroups; i++) {
    PjV *o = pj_array_get(a, (size_t)i);
    PlanGroup *G = &p->groups[i];
    char path[48];
    snprintf(path, sizeof path, "groups[%lld]", (long long)i);
    if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    int64_t v;
    if (!get_int(ld, o, path, "id", 0, INT32_MAX, &v)) return false;
    G->id = (int32_t)v;
    if (!p->partial && G->id != i)
      return fail(ld, "%s.id: expected %lld (groups are listed by id), got %d", path, (long long)i, G->id);
    if (p->partial && i > 0 && G->id <= p->groups[i - 1].id)
      return fail(ld, "%s.id: expected ids in ascending order, got %d after %d", path, G->id,
                  p->groups[i - 1].id);
    const char *kind;
    if (!get_str(ld, o, path, "kind", &kind)) return false;
    if (!plan_kind_parse(kind, &G->kind)) return fail(ld, "%s.kind: unknown group kind `%s`", path, kind);
    PjV *pool = pj_object_get(o, "pool"), *inst = pj_object_get(o, "instance");
    if (G->kind == GK_WORLD) {
      if (!pj_is_null(pool) || !pj_is_null(inst))
        return fail(ld, "%s: the world group has pool and instance null", path);
      G->pool = G->instance = -1;
    } else {
      const char *pn;
      if (!get_str(ld, o, path, "pool", &pn)) return false;
      G->pool = find_pool(p, pn);
      if (G->pool < 0) return fail(ld, "%s.pool: pool `%s` is not in pools[]", path, pn);
      if (!get_int(ld, o, path, "instance", 0, p->pools[G->pool].replicas - 1, &v)) return false;
      G->instance = (int32_t)v;
    }
    if (pj_object_get(o, "span") && !pj_object_get(o, "ranks")) {
      /* [start, end): every rank of the run, in order (the world group).
       * Expanded, a span takes world_size entries that the document does
       * not hold, so only the one world group may be written so. */
      int64_t sp[2];
      if (G->kind != GK_WORLD || world_spans++)
        return fail(ld, "%s.span: only the one world group is written as a span, got %s", path,
                    G->kind != GK_WORLD ? "a group of another kind" : "a second world group");
      if (!get_range(ld, o, path, "span", sp)) return false;
      if (sp[1] <= sp[0] || sp[1] > p->world_size)
        return fail(ld, "%s.span: expected a non-empty range within [0, %lld), got [%lld, %lld]", path,
                    (long long)p->world_size, (long long)sp[0], (long long)sp[1]);
      G->n = (int32_t)(sp[1] - sp[0]);
      G->ranks = rp_malloc((size_t)G->n * sizeof *G->ranks);
      for (int32_t j = 0; j < G->n; j++) G->ranks[j] = (int32_t)(sp[0] + j);
      continue;
    }
    PjV *r = field(ld, o, path, "ranks", PJ_ARRAY);
    if (!r) return false;
    G->n = (int32_t)pj_array_size(r);
    if (G->n < 1) return fail(ld, "%s.ranks: expected at least one rank, got none", path);
    G->ranks = rp_malloc((size_t)G->n * sizeof *G->ranks);
    for (int32_t j = 0; j < G->n; j++) {
      PjV *e = pj_array_get(r, (size_t)j);
      if (!pj_is_integer(e) || pj_integer_value(e) < 0 || pj_integer_value(e) >= p->world_size)
        return fail(ld, "%s.ranks[%d]: expected a rank 0..%lld, got %s", path, j,
                    (long long)(p->world_size - 1), pj_is_integer(e) ? "one out of range" : jtype(e));
      G->ranks[j] = (int32_t)pj_integer_value(e);
    }
  }
  return true;
}

/* The optional per-request figures of one kv_reshard pair. The byte counts
 * must agree with each other (the two link classes add up to the total),
 * so a hand-edited plan cannot show a transfer smaller than its parts. */
static bool load_request(Ld *ld, PlanReshard *R, PjV *o, const char *path) {
  PjV *q = pj_object_get(o, "request");
  if (!q) return true;
  char rp[64];
  snprintf(rp, sizeof rp, "%s.request", path);
  if (!pj_is_object(q)) return fail(ld, "%s: expected an object, got %s", rp, jtype(q));
  if (!get_int(ld, q, rp, "input_tokens", 1, INT64_MAX, &R->input_tokens) ||
      !get_int(ld, q, rp, "bytes", 0, INT64_MAX, &R->bytes) ||
      !get_int(ld, q, rp, "bytes_scale_up", 0, INT64_MAX, &R->bytes_scale_up) ||
      !get_int(ld, q, rp, "bytes_scale_out", 0, INT64_MAX, &R->bytes_scale_out))
    return false;
  int64_t sum;
  if (!ck_add(R->bytes_scale_up, R->bytes_scale_out, &sum) || sum != R->bytes)
    return fail(ld, "%s.bytes: expected bytes_scale_up + bytes_scale_out = %lld + %lld, got %lld", rp,
                (long long)R->bytes_scale_up, (long long)R->bytes_scale_out, (long long)R->bytes);
  static const char *const keys[3] = {"time_scale_up_ms", "time_scale_out_ms", "time_ms"};
  double *dst[3] = {&R->time_scale_up_ms, &R->time_scale_out_ms, &R->time_ms};
  for (int i = 0; i < 3; i++) {
    PjV *v = pj_object_get(q, keys[i]);
    if (!pj_is_number(v))
      return fail(ld, "%s.%s: expected a number, got %s", rp, keys[i], v ? jtype(v) : "nothing");
    *dst[i] = pj_number_value(v);
    if (!(*dst[i] >= 0))
      return fail(ld, "%s.%s: expected a time of 0 ms or more, got %g", rp, keys[i], *dst[i]);
  }
  R->has_request = true;
  return true;
}

/* A kv_reshard pair must name a prefill pool and a decode pool of the plan,
 * and each transfer must stay inside what the two serving attention
 * replicas hold: src and dst below tp * cp * pp of their pool (ranks are
 * relative to the replica, docs/reshard.md), layers inside the model's
 * layers (the pool's layer partition), kv heads inside the KV heads the
 * pool's ranks hold. The runtime indexes ranks and KV pools with these
 * numbers, so a plan that breaks them is refused here, not at run time. */
static bool check_reshard(Ld *ld, const Plan *p, const PlanReshard *R, const char *path) {
  const char *names[2] = {R->prefill, R->decode}, *keys[2] = {"prefill", "decode"};
  int64_t relsize[2], layers[2], heads[2] = {-1, -1};
  for (int side = 0; side < 2; side++) {
    int pi = find_pool(p, names[side]);
    if (pi < 0) return fail(ld, "%s.%s: pool `%s` is not in pools[]", path, keys[side], names[side]);
    const PlanPool *P = &p->pools[pi];
    if (strcmp(P->role, keys[side]) != 0)
      return fail(ld, "%s.%s: expected a pool of role %s, got pool `%s` of role %s", path, keys[side],
                  keys[side], P->name, P->role);
    CkState st = {true};
    relsize[side] = ckm(&st, ckm(&st, P->size[CO_TP], P->size[CO_CP]), P->size[CO_PP]);
    layers[side] = 0;
    for (int64_t s = 0; s < P->size[CO_PP]; s++) layers[side] = cka(&st, layers[side], P->layer_partition[s]);
    if (!st.ok) return fail(ld, "%s: pool `%s` sizes overflow", path, P->name);
    for (int64_t r = 0; r < p->nranks; r++)
      if (p->ranks[r].pool == pi && p->ranks[r].shard[SH_KV_HEADS][1] > heads[side])
        heads[side] = p->ranks[r].shard[SH_KV_HEADS][1];
  }
  if (layers[0] != layers[1])
    return fail(ld, "%s: pools `%s` and `%s` hold different models: %lld and %lld layers", path, R->prefill,
                R->decode, (long long)layers[0], (long long)layers[1]);
  for (size_t j = 0; j < R->ntransfers; j++) {
    const PlanTransfer *X = &R->transfers[j];
    if (X->src >= relsize[0])
      return fail(ld, "%s.transfers[%zu].src: expected 0..%lld (tp * cp * pp of pool `%s`), got %lld", path, j,
                  (long long)(relsize[0] - 1), R->prefill, (long long)X->src);
    if (X->dst >= relsize[1])
      return fail(ld, "%s.transfers[%zu].dst: expected 0..%lld (tp * cp * pp of pool `%s`), got %lld", path, j,
                  (long long)(relsize[1] - 1), R->decode, (long long)X->dst);
    if (X->layers[1] > layers[0])
      return fail(ld, "%s.transfers[%zu].layers: expected inside [0, %lld), got [%lld, %lld)", path, j,
                  (long long)layers[0], (long long)X->layers[0], (long long)X->layers[1]);
    /* A node file may lack one side's ranks: then the heads are unknown. */
    for (int side = 0; side < 2; side++)
      if (heads[side] >= 0 && X->kv_heads[1] > heads[side])
        return fail(ld, "%s.transfers[%zu].kv_heads: expected inside [0, %lld) (pool `%s`), got [%lld, %lld)",
                    path, j, (long long)heads[side], names[side], (long long)X->kv_heads[0],
                    (long long)X->kv_heads[1]);
  }
  return true;
}

/* A transfer's `tokens` (xp): "all", {"stride", "offset"} or
 * {"ranges": [...]}. */
static bool load_transfer_tokens(Ld *ld, PjV *x, const char *xp, PlanTransfer *X) {
  PjV *tok = pj_object_get(x, "tokens");
  X->stride = 1;
  X->offset = 0;
  if (pj_is_string(tok) && strcmp(pj_string_value(tok), "all") == 0) {
    X->tokens = PT_ALL;
  } else if (pj_is_object(tok) &&
             (pj_object_get(tok, "stride") || pj_object_get(tok, "ranges"))) {
    char tp[160];
    snprintf(tp, sizeof tp, "%s.tokens", xp);
    X->tokens = pj_object_get(tok, "ranges") ? PT_RANGES : PT_STRIDE;
    if (pj_object_get(tok, "stride")) {
      if (!get_int(ld, tok, tp, "stride", 1, INT64_MAX, &X->stride) ||
          !get_int(ld, tok, tp, "offset", 0, INT64_MAX, &X->offset))
        return false;
      if (X->offset >= X->stride)
        return fail(ld, "%s.offset: expected below stride %lld, got %lld", tp,
                    (long long)X->stride, (long long)X->offset);
    }
    if (X->tokens == PT_RANGES) {
      PjV *rs = field(ld, tok, tp, "ranges", PJ_ARRAY);
      if (!rs) return false;
      X->nranges = pj_array_size(rs);
      X->ranges = rp_calloc(X->nranges ? X->nranges : 1, sizeof *X->ranges);
      for (size_t k = 0; k < X->nranges; k++) {
        char rp[224];
        snprintf(rp, sizeof rp, "%s.ranges[%zu]", tp, k);
        if (!range_value(ld, pj_array_get(rs, k), rp, X->ranges[k])) return false;
      }
    }
  } else {
    return fail(ld, "%s.tokens: expected \"all\", {\"ranges\": ...} or {\"stride\", "
                    "\"offset\"}, got %s",
                xp, tok ? jtype(tok) : "nothing");
  }
  return true;
}

static bool load_reshard(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "kv_reshard", PJ_ARRAY);
  if (!a) return false;
  p->nreshard = pj_array_size(a);
  p->reshard = rp_calloc(p->nreshard ? p->nreshard : 1, sizeof *p->reshard);
  for (size_t i = 0; i < p->nreshard; i++) {
    PjV *o = pj_array_get(a, i);
    PlanReshard *R = &p->reshard[i];
    char path[48];
    snprintf(path, sizeof path, "kv_reshard[%zu]", i);
    if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *pre, *dec;
    if (!get_str(ld, o, path, "prefill", &pre) || !get_str(ld, o, path, "decode", &dec)) return false;
    R->prefill = rp_strdup(pre);
    R->decode = rp_strdup(dec);
    PjV *t = field(ld, o, path, "transfers", PJ_ARRAY);
    if (!t) return false;
    R->ntransfers = pj_array_size(t);
    R->transfers = rp_calloc(R->ntransfers ? R->ntransfers : 1, sizeof *R->transfers);
    for (size_t j = 0; j < R->ntransfers; j++) {
      PjV *x = pj_array_get(t, j);
      PlanTransfer *X = &R->transfers[j];
      char xp[128];
      snprintf(xp, sizeof xp, "%s.transfers[%zu]", path, j);
      if (!pj_is_object(x)) return fail(ld, "%s: expected an object, got %s", xp, jtype(x));
      if (!get_int(ld, x, xp, "src", 0, INT32_MAX, &X->src) ||
          !get_int(ld, x, xp, "dst", 0, INT32_MAX, &X->dst) ||
          !get_range(ld, x, xp, "layers", X->layers) ||
          !get_range(ld, x, xp, "kv_heads", X->kv_heads) ||
          !get_int(ld, x, xp, "bytes_per_token", 0, INT64_MAX, &X->bytes_per_token))
        return false;
      if (!load_transfer_tokens(ld, x, xp, X)) return false;
    }
    if (!load_request(ld, R, o, path)) return false;
    if (!check_reshard(ld, p, R, path)) return false;
  }
  return true;
}

/* o[key] as a hardware figure: a finite number >= 0 (0 < x when positive),
 * or null when nullable (then *set is false). path names o. */
static bool hw_num(Ld *ld, PjV *o, const char *path, const char *key, bool positive,
                   double *out, bool *set) {
  PjV *v = pj_object_get(o, key);
  if (!v) return fail(ld, "%s.%s: missing", path, key);
  if (pj_is_null(v)) {
    *out = 0;
    *set = false;
    return true;
  }
  if (!pj_is_number(v))
    return fail(ld, "%s.%s: expected a number or null, got %s", path, key, jtype(v));
  double x = pj_number_value(v);
  if (!isfinite(x) || x < 0 || (positive && x == 0))
    return fail(ld, "%s.%s: expected a finite number %s 0, got %g", path, key,
                positive ? ">" : ">=", x);
  *out = x;
  *set = true;
  return true;
}

/* hardware: the nominal figures the cost model used. Every key is
 * required; a figure the spec did not give is null. */
static bool load_hardware(Ld *ld, Plan *p, PjV *root) {
  PjV *h = field(ld, root, "", "hardware", PJ_OBJECT);
  if (!h) return false;
  PlanHardware *H = &p->hardware;
  bool set;
  if (!hw_num(ld, h, "hardware", "hbm_bandwidth", true, &H->hbm_bandwidth, &set)) return false;
  PjV *up = field(ld, h, "hardware", "scale_up", PJ_OBJECT);
  if (!up) return false;
  int64_t top;
  if (!get_int(ld, root, "", "scale_up_domain", 1, INT32_MAX, &top) ||
      !get_int(ld, up, "hardware.scale_up", "domain", 1, INT32_MAX, &H->scale_up_domain))
    return false;
  if (top != H->scale_up_domain)
    return fail(ld, "scale_up_domain: expected %lld (hardware.scale_up.domain), got %lld",
                (long long)H->scale_up_domain, (long long)top);
  if (!hw_num(ld, up, "hardware.scale_up", "bandwidth", true, &H->scale_up_bandwidth, &set) ||
      !hw_num(ld, up, "hardware.scale_up", "latency_s", false, &H->scale_up_latency_s,
              &H->has_scale_up_latency))
    return false;
  PjV *out = field(ld, h, "hardware", "scale_out", PJ_OBJECT);
  if (!out) return false;
  return hw_num(ld, out, "hardware.scale_out", "bandwidth", true, &H->scale_out_bandwidth, &set) &&
         hw_num(ld, out, "hardware.scale_out", "latency_s", false, &H->scale_out_latency_s,
                &H->has_scale_out_latency);
}

/* ---- launch ------------------------------------------------------------- */

/* A launch string: NULL for null when nullable; no control characters,
 * at most 4096 bytes (the strings end up on command lines). */
static bool launch_str(Ld *ld, PjV *o, const char *key, bool nullable, char **out) {
  PjV *v = pj_object_get(o, key);
  if (!v) return fail(ld, "launch.%s: missing", key);
  if (nullable && pj_is_null(v)) return true;
  if (!pj_is_string(v)) return fail(ld, "launch.%s: expected a string%s, got %s", key, nullable ? " or null" : "", jtype(v));
  const char *t = pj_string_value(v);
  size_t n = strlen(t);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
      return fail(ld, "launch.%s: holds a control character at byte %zu", key, i);
  if (n == 0 || n > 4096) return fail(ld, "launch.%s: expected 1 to 4096 bytes, got %zu", key, n);
  *out = rp_strdup(t);
  return true;
}

static bool word_in(const char *w, const char *const *set, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(w, set[i]) == 0) return true;
  return false;
}

static bool host_ok(const char *h) {
  return *h && strlen(h) <= 253 &&
         strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == strlen(h);
}

static bool launch_int(Ld *ld, PjV *o, const char *key, int64_t lo, int64_t hi, bool nullable, int64_t *out) {
  PjV *v = pj_object_get(o, key);
  if (nullable && v && pj_is_null(v)) return true;
  return get_int(ld, o, "launch", key, lo, hi, out);
}

static bool load_launch_hosts(Ld *ld, PlanLaunch *L, PjV *o, size_t nnodes, bool partial) {
  PjV *h = pj_object_get(o, "hostnames");
  if (!h) return fail(ld, "launch.hostnames: missing");
  if (!pj_is_null(h)) {
    if (!pj_is_array(h)) return fail(ld, "launch.hostnames: expected an array or null, got %s", jtype(h));
    size_t n = pj_array_size(h);
    if (!partial && n != nnodes)
      return fail(ld, "launch.hostnames: expected one per node (%zu), got %zu", nnodes, n);
    L->hostnames = rp_calloc(n ? n : 1, sizeof *L->hostnames);
    L->nhostnames = n;
    for (size_t i = 0; i < n; i++) {
      const char *t = pj_string_value(pj_array_get(h, i));
      if (!t || !host_ok(t)) return fail(ld, "launch.hostnames[%zu]: expected a host name (letters, digits, `.`, `-`)", i);
      L->hostnames[i] = rp_strdup(t);
    }
  }
  if (!launch_str(ld, o, "hostname_pattern", true, &L->hostname_pattern)) return false;
  const char *pat = L->hostname_pattern, *at = pat ? strstr(pat, "{n}") : NULL;
  if (pat && (!at || strstr(at + 3, "{n}") || strchr(pat, '{') != at || strchr(at + 3, '{') ||
              strspn(pat, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-{}n") != strlen(pat)))
    return fail(ld, "launch.hostname_pattern: expected one `{n}` among letters, digits, `.` and `-`");
  if (pat && L->hostnames) return fail(ld, "launch: hostnames and hostname_pattern both given");
  return true;
}

/* launch: optional; checked key by key (docs/plan.md, "launch"). */
static bool load_launch(Ld *ld, Plan *p, PjV *root) {
  PjV *o = pj_object_get(root, "launch");
  if (!o) return true;
  if (!pj_is_object(o)) return fail(ld, "launch: expected an object, got %s", jtype(o));
  PlanLaunch *L = &p->launch;
  L->present = true;
  static const char *const engines[] = {"vllm", "sglang", "trtllm"};
  static const char *const dtypes[] = {"fp32", "bf16", "fp16", "fp8", "int8", "int4"};
  if (!launch_str(ld, o, "engine", false, &L->engine) || !launch_str(ld, o, "engine_version", false, &L->engine_version) ||
      !launch_str(ld, o, "source", true, &L->source) || !launch_str(ld, o, "revision", true, &L->revision) ||
      !launch_str(ld, o, "served_model_name", true, &L->served_model_name) ||
      !launch_str(ld, o, "kv_cache_dtype", false, &L->kv_cache_dtype) ||
      !launch_str(ld, o, "activations_dtype", false, &L->activations_dtype) ||
      !launch_str(ld, o, "kv_transfer", false, &L->kv_transfer) || !launch_str(ld, o, "image", true, &L->image) ||
      (pj_object_get(o, "sampler") && !launch_str(ld, o, "sampler", false, &L->sampler)) ||
      (pj_object_get(o, "attention_backend") && !launch_str(ld, o, "attention_backend", false, &L->attention_backend)))
    return false;
  if (!word_in(L->engine, engines, RP_ARRAY_LEN(engines)))
    return fail(ld, "launch.engine: expected vllm, sglang or trtllm, got \"%s\"", L->engine);
  if (!word_in(L->kv_cache_dtype, dtypes, RP_ARRAY_LEN(dtypes)) || !word_in(L->activations_dtype, dtypes, RP_ARRAY_LEN(dtypes)))
    return fail(ld, "launch: kv_cache_dtype and activations_dtype must be dtype names");
  if (strspn(L->kv_transfer, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(L->kv_transfer) ||
      strspn(L->engine_version, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(L->engine_version))
    return fail(ld, "launch: kv_transfer and engine_version are lowercase words");
  if (L->sampler && (!L->sampler[0] || strspn(L->sampler, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(L->sampler)))
    return fail(ld, "launch.sampler: expected a lowercase word, got \"%s\"", L->sampler);
  PjV *vendor = pj_object_get(o, "gpu_vendor");
  if (vendor && (!pj_is_string(vendor) || strcmp(pj_string_value(vendor), "amd") != 0))
    return fail(ld, "launch.gpu_vendor: expected \"amd\" (absent: NVIDIA)");
  L->amd = vendor != NULL;
  if (L->attention_backend && strcmp(L->attention_backend, "trtllm_mla") != 0 &&
      strcmp(L->attention_backend, "trtllm_mha") != 0)
    return fail(ld, "launch.attention_backend: expected trtllm_mla or trtllm_mha, got \"%s\"", L->attention_backend);
  if (!launch_int(ld, o, "port", 1024, 65535, false, &L->port) ||
      !launch_int(ld, o, "max_model_len", 1, (int64_t)1 << 30, false, &L->max_model_len) ||
      !launch_int(ld, o, "max_num_seqs", 1, (int64_t)1 << 30, true, &L->max_num_seqs) ||
      !launch_int(ld, o, "max_num_batched_tokens", 1, (int64_t)1 << 30, true, &L->max_num_batched_tokens) ||
      !launch_int(ld, o, "kv_block", 1, (int64_t)1 << 30, false, &L->kv_block))
    return false;
  if (pj_object_get(o, "cuda_graph_max_bs") &&
      !launch_int(ld, o, "cuda_graph_max_bs", 1, (int64_t)1 << 30, false, &L->cuda_graph_max_bs))
    return false;
  if (p->nranks > 0 && p->ranks[0].kv_block_tokens != L->kv_block)
    return fail(ld, "launch.kv_block: expected the ranks' kv.block_tokens %lld, got %lld",
                (long long)p->ranks[0].kv_block_tokens, (long long)L->kv_block);
  PjV *u = pj_object_get(o, "gpu_memory_utilization"), *m = pj_object_get(o, "moe");
  if (!pj_is_number(u) || !(pj_number_value(u) > 0 && pj_number_value(u) <= 1))
    return fail(ld, "launch.gpu_memory_utilization: expected a number in (0, 1]");
  L->gpu_memory_utilization = pj_number_value(u);
  if (!pj_is_boolean(m)) return fail(ld, "launch.moe: expected a boolean, got %s", m ? jtype(m) : "nothing");
  L->moe = m->type == PJ_TRUE;
  PjV *ov = pj_object_get(o, "overlap_schedule");
  L->overlap_schedule = -1;
  if (ov && !pj_is_boolean(ov)) return fail(ld, "launch.overlap_schedule: expected a boolean, got %s", jtype(ov));
  if (ov) L->overlap_schedule = ov->type == PJ_TRUE;
  PjV *cv = pj_object_get(o, "chunked_prefill");
  L->chunked_prefill = -1;
  if (cv && !pj_is_boolean(cv)) return fail(ld, "launch.chunked_prefill: expected a boolean, got %s", jtype(cv));
  if (cv) L->chunked_prefill = cv->type == PJ_TRUE;
  return load_launch_hosts(ld, L, o, p->nnodes, p->partial);
}

/* A non-negative finite number at obj[key]; path names obj. */
static bool get_est_num(Ld *ld, PjV *obj, const char *path, const char *key, double *out) {
  PjV *v = pj_object_get(obj, key);
  if (!pj_is_number(v))
    return fail(ld, "%s.%s: expected a number, got %s", path, key, v ? jtype(v) : "nothing");
  *out = pj_number_value(v);
  if (!(*out >= 0) || !isfinite(*out))
    return fail(ld, "%s.%s: expected a finite number >= 0, got %g", path, key, *out);
  return true;
}

/* One phase of estimates.pools[i] (null: the pool has no such phase). */
static bool load_est_phase(Ld *ld, PjV *v, const char *path, bool decode, PlanPoolEst *e,
                           bool *has) {
  *has = false;
  if (pj_is_null(v)) return true;
  if (!pj_is_object(v)) return fail(ld, "%s: expected an object or null, got %s", path, jtype(v));
  PlanPhaseEst *ph = decode ? &e->decode : &e->prefill;
  if (decode && !get_int(ld, v, path, "batch", 1, INT64_MAX, &e->batch)) return false;
  const char *keys[5] = {decode ? "step_ms" : "time_ms",
                         decode ? "output_tok_s_per_gpu" : "input_tok_s_per_gpu",
                         "compute_ms", "hbm_ms", "overhead_ms"};
  double *dst[5] = {&ph->time_ms, &ph->tok_s_per_gpu, &ph->compute_ms, &ph->hbm_ms,
                    &ph->overhead_ms};
  for (int i = 0; i < 5; i++)
    if (!get_est_num(ld, v, path, keys[i], dst[i])) return false;
  char cp[160];
  snprintf(cp, sizeof cp, "%s.comm_ms", path);
  PjV *c = field(ld, v, path, "comm_ms", PJ_OBJECT);
  if (!c) return false;
  for (int k = 0; k < PEC__COUNT; k++)
    if (!get_est_num(ld, c, cp, est_comm_names[k], &ph->comm_ms[k])) return false;
  *has = true;
  return true;
}

/* estimates.pools[]: at most PLAN_EST_POOLS entries naming plan pools. */
static bool load_est_pools(Ld *ld, Plan *p, PjV *e) {
  PjV *a = field(ld, e, "estimates", "pools", PJ_ARRAY);
  if (!a) return false;
  size_t n = pj_array_size(a);
  if (n < 1 || n > PLAN_EST_POOLS)
    return fail(ld, "estimates.pools: expected 1 to %d entries, got %zu", PLAN_EST_POOLS, n);
  for (size_t i = 0; i < n; i++) {
    char path[64];
    snprintf(path, sizeof path, "estimates.pools[%zu]", i);
    PjV *o = pj_array_get(a, i);
    if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    PlanPoolEst *pe = &p->est_pools[i];
    const char *name;
    if (!get_str(ld, o, path, "pool", &name)) return false;
    int k = find_pool(p, name);
    if (k < 0) return fail(ld, "%s.pool: no pool named `%s`", path, name);
    pe->pool = (size_t)k;
    char sub[96];
    snprintf(sub, sizeof sub, "%s.prefill", path);
    if (!load_est_phase(ld, pj_object_get(o, "prefill"), sub, false, pe, &pe->has_prefill))
      return false;
    snprintf(sub, sizeof sub, "%s.decode", path);
    if (!load_est_phase(ld, pj_object_get(o, "decode"), sub, true, pe, &pe->has_decode))
      return false;
    if (pe->has_decode && !get_int(ld, o, path, "max_batch", 1, INT64_MAX, &pe->max_batch))
      return false;
  }
  p->nest_pools = n;
  return true;
}

static bool load_estimates(Ld *ld, Plan *p, PjV *root) {
  PjV *e = pj_object_get(root, "estimates");
  if (!e) return fail(ld, "estimates: missing");
  if (pj_is_null(e)) return true;
  if (!pj_is_object(e)) return fail(ld, "estimates: expected an object or null, got %s", jtype(e));
  static const char *const keys[4] = {"ttft_ms", "tpot_ms", "throughput_tok_s",
                                      "goodput_tok_s_per_gpu"};
  double *dst[4] = {&p->ttft_ms, &p->tpot_ms, &p->throughput_tok_s, &p->goodput_tok_s_per_gpu};
  for (int i = 0; i < 4; i++) {
    PjV *v = pj_object_get(e, keys[i]);
    if (!pj_is_number(v))
      return fail(ld, "estimates.%s: expected a number, got %s", keys[i], v ? jtype(v) : "nothing");
    *dst[i] = pj_number_value(v);
  }
  if (!load_est_pools(ld, p, e)) return false;
  p->has_estimates = true;
  return true;
}

static bool load_diags(Ld *ld, Plan *p, PjV *root) {
  PjV *a = field(ld, root, "", "diagnostics", PJ_ARRAY);
  if (!a) return false;
  p->ndiags = pj_array_size(a);
  p->diags = rp_calloc(p->ndiags ? p->ndiags : 1, sizeof *p->diags);
  for (size_t i = 0; i < p->ndiags; i++) {
    PjV *o = pj_array_get(a, i);
    char path[48];
    snprintf(path, sizeof path, "diagnostics[%zu]", i);
    if (!pj_is_object(o)) return fail(ld, "%s: expected an object, got %s", path, jtype(o));
    const char *c, *s, *m;
    if (!get_str(ld, o, path, "code", &c) || !get_str(ld, o, path, "severity", &s) ||
        !get_str(ld, o, path, "message", &m))
      return false;
    p->diags[i].code = rp_strdup(c);
    p->diags[i].severity = rp_strdup(s);
    p->diags[i].message = rp_strdup(m);
  }
  return true;
}

/* ---- consistency ----------------------------------------------------------- */

static int cmp_group_id(const void *key, const void *elem) {
  int32_t k = *(const int32_t *)key, id = ((const PlanGroup *)elem)->id;
  return (k > id) - (k < id);
}
static int cmp_rank(const void *key, const void *elem) {
  int32_t k = *(const int32_t *)key, r = ((const PlanRank *)elem)->rank;
  return (k > r) - (k < r);
}

const PlanRank *plan_find_rank(const Plan *p, int64_t r) {
  if (r < 0 || r > INT32_MAX) return NULL;
  if (!p->partial) return r < p->nranks ? &p->ranks[r] : NULL;
  int32_t k = (int32_t)r;
  return bsearch(&k, p->ranks, (size_t)p->nranks, sizeof *p->ranks, cmp_rank);
}

static const PlanGroup *find_group(const Plan *p, int32_t id) {
  if (id < 0) return NULL;
  if (!p->partial) return id < p->ngroups ? &p->groups[id] : NULL;
  return bsearch(&id, p->groups, (size_t)p->ngroups, sizeof *p->groups, cmp_group_id);
}

const PlanGroup *plan_rank_group(const Plan *p, const PlanRank *r, GroupKind k) {
  return find_group(p, r->groups[k]);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* One node's ranks: each on this node, listed in ascending rank order with
 * local_rank their index there (docs/plan.md), and no GPU used twice. The
 * devices are sorted rather than marked in a table of `gpus` entries, so
 * the memory is that of the ranks the file lists, whatever `gpus` says. */
static bool check_node(Ld *ld, const Plan *p, size_t n) {
  const PlanNode *N = &p->nodes[n];
  int64_t *dev = rp_malloc((size_t)(N->nranks ? N->nranks : 1) * sizeof *dev);
  bool ok = true;
  for (int32_t j = 0; j < N->nranks && ok; j++) {
    int32_t r = p->node_ranks[N->first_rank + j];
    const PlanRank *R = plan_find_rank(p, r);
    if (!R)
      ok = fail(ld, "nodes[%zu].ranks[%d]: rank %d is not in ranks[]", n, j, r);
    else if (R->node != N->node)
      ok = fail(ld, "nodes[%zu].ranks[%d]: rank %d is listed on node %d but ranks[].node is %d", n, j, r,
                N->node, R->node);
    else if (j > 0 && r <= p->node_ranks[N->first_rank + j - 1])
      ok = fail(ld, "nodes[%zu].ranks[%d]: expected ranks in ascending order, got %d after %d", n, j, r,
                p->node_ranks[N->first_rank + j - 1]);
    else if (R->local_rank != j)
      ok = fail(ld, "ranks[%d].local_rank: expected %d (its index among node %d's ranks), got %d", r, j,
                N->node, R->local_rank);
    else
      dev[j] = (int64_t)R->device << 32 | r;
  }
  if (ok) qsort(dev, (size_t)N->nranks, sizeof *dev, cmp_i64);
  for (int32_t j = 1; j < N->nranks && ok; j++)
    if (dev[j] >> 32 == dev[j - 1] >> 32)
      ok = fail(ld, "ranks[%d].device: node %d device %d is used by rank %d too", (int)(dev[j] & 0xffffffff),
                N->node, (int)(dev[j] >> 32), (int)(dev[j - 1] & 0xffffffff));
  free(dev);
  return ok;
}

/* Member j (rank R) of group gi: its groups entry names the group, it is
 * listed once, it is in the group's pool instance and it shares the
 * coordinates the group's kind fixes with the first member. */
static bool check_group_member(Ld *ld, const Plan *p, int64_t gi, int32_t j, const PlanRank *R,
                               const PlanRank *first, uint32_t *seen) {
  const PlanGroup *G = &p->groups[gi];
  if (R->groups[G->kind] != G->id)
    return fail(ld, "groups[%lld].ranks[%d]: rank %d is listed in %s group %d but its "
                    "groups.%s is %d",
                (long long)gi, j, R->rank, kind_names[G->kind], G->id, kind_names[G->kind],
                R->groups[G->kind]);
  size_t ri = (size_t)(R - p->ranks);
  if (seen[ri] & (1u << G->kind))
    return fail(ld, "groups[%lld].ranks[%d]: rank %d is listed twice", (long long)gi, j, R->rank);
  seen[ri] |= 1u << G->kind;
  if (G->kind != GK_WORLD && (R->pool != G->pool || R->instance != G->instance))
    return fail(ld, "groups[%lld].ranks[%d]: rank %d is in pool `%s` instance %d, the group in "
                    "pool `%s` instance %d",
                (long long)gi, j, R->rank, p->pools[R->pool].name, R->instance,
                p->pools[G->pool].name, G->instance);
  for (int c = 0; first && c < CO__COUNT; c++)
    if (plan_kind_fixes(G->kind, (CoordKind)c) && R->coords[c] != first->coords[c])
      return fail(ld, "groups[%lld]: members of a %s group share coords.%s, but rank %d has %d "
                      "and rank %d has %d",
                  (long long)gi, kind_names[G->kind], coord_names[c], first->rank,
                  first->coords[c], R->rank, R->coords[c]);
  return true;
}

/* Group gi's members (seen marks each rank's kinds) and, for the kinds
 * that span whole dimensions, its size. */
static bool check_group(Ld *ld, const Plan *p, int64_t gi, uint32_t *seen) {
  const PlanGroup *G = &p->groups[gi];
  const PlanRank *first = NULL;
  for (int32_t j = 0; j < G->n; j++) {
    const PlanRank *R = plan_find_rank(p, G->ranks[j]);
    if (!R) continue; /* a rank of another node in a split plan */
    if (!check_group_member(ld, p, gi, j, R, first, seen)) return false;
    if (!first) first = R;
  }
  if (G->kind == GK_TP && G->n != p->pools[G->pool].size[CO_TP])
    return fail(ld, "groups[%lld].ranks: a tp group of pool `%s` has tp = %lld ranks, got %d",
                (long long)gi, p->pools[G->pool].name, (long long)p->pools[G->pool].size[CO_TP], G->n);
  if (G->kind == GK_WORLD && G->n != p->world_size)
    return fail(ld, "groups[%lld].ranks: the world group has world_size = %lld ranks, got %d",
                (long long)gi, (long long)p->world_size, G->n);
  return true;
}

/* Rank i's groups exist, have the right kind and list the rank (seen);
 * it has an embedding group exactly on the first and last pp stage. */
static bool check_rank_groups(Ld *ld, const Plan *p, int64_t i, const uint32_t *seen) {
  const PlanRank *R = &p->ranks[i];
  for (int k = 0; k < GK__COUNT; k++) {
    if (R->groups[k] < 0) continue;
    const PlanGroup *G = find_group(p, R->groups[k]);
    if (!G)
      return fail(ld, "ranks[%lld].groups.%s: group %d is not in groups[]", (long long)i,
                  kind_names[k], R->groups[k]);
    if (G->kind != (GroupKind)k)
      return fail(ld, "ranks[%lld].groups.%s: group %d is a %s group", (long long)i, kind_names[k],
                  R->groups[k], kind_names[G->kind]);
    if (!(seen[i] & (1u << k)))
      return fail(ld, "ranks[%lld].groups.%s: group %d does not list rank %d", (long long)i,
                  kind_names[k], R->groups[k], R->rank);
  }
  int64_t pp = p->pools[R->pool].size[CO_PP];
  bool want = R->coords[CO_PP] == 0 || R->coords[CO_PP] == pp - 1;
  if (want != (R->groups[GK_EMBEDDING] >= 0))
    return fail(ld, "ranks[%lld].groups.embedding: expected %s (pp stage %d of %lld)",
                (long long)i, want ? "a group" : "none", R->coords[CO_PP], (long long)pp);
  return true;
}

static bool check_consistency(Ld *ld, Plan *p) {
  /* Each rank's groups exist, have the right kind and list the rank. */
  uint32_t *seen = rp_calloc((size_t)(p->nranks ? p->nranks : 1), sizeof *seen);
  bool ok = true;
  for (int64_t gi = 0; gi < p->ngroups && ok; gi++) ok = check_group(ld, p, gi, seen);
  for (int64_t i = 0; i < p->nranks && ok; i++) ok = check_rank_groups(ld, p, i, seen);
  free(seen);
  if (!ok) return false;
  /* Every rank the file holds is listed under its node. */
  int64_t listed = 0;
  for (size_t n = 0; n < p->nnodes; n++) listed += p->nodes[n].nranks;
  if (listed != p->nranks)
    return fail(ld, "nodes: the nodes list %lld ranks, expected the %lld of ranks[]", (long long)listed,
                (long long)p->nranks);
  for (size_t n = 0; n < p->nnodes; n++)
    if (!check_node(ld, p, n)) return false;
  return true;
}

/* ---- the compiler's guarantees ----------------------------------------------
 *
 * A plan holds one model, but not the model's figures: they are derived here
 * from the pools and ranks, and every rank, pool and kv_reshard map must then
 * agree with them as `rankplan compile` makes them agree. */

/* The model as the plan shows it; -1 for a figure no rank of the file
 * shows. A whole plan shows every figure; a node file only through the
 * ranks of its node: the KV heads when it holds the last tp rank of a pool
 * (that rank's kv_heads end is the model's), the routed experts when it
 * holds the last ep rank of a pool without an expert_map. */
typedef struct {
  int64_t layers;    /* every pool's layer_partition sums to it */
  int64_t kv_heads;  /* KV heads (1: MLA's latent); -1: unknown */
  int64_t head_bytes; /* KV bytes of one head, one layer, one token */
  int64_t experts;   /* routed experts; 0: none, or unknown */
  bool moe;          /* a rank holds experts or a pool has an expert_map */
  bool moe_known;    /* the file holds a rank or an expert_map */
} PlanModel;

/* Layers, KV heads and experts; derive_head_bytes and the rank checks
 * below hold every rank to them. */
static bool derive_model(Ld *ld, const Plan *p, PlanModel *M) {
  M->layers = M->kv_heads = M->head_bytes = -1;
  M->experts = 0;
  M->moe = false;
  M->moe_known = p->nranks > 0;
  for (size_t i = 0; i < p->npools; i++) {
    CkState st = {true};
    int64_t sum = 0;
    for (int64_t s = 0; s < p->pools[i].size[CO_PP]; s++) sum = cka(&st, sum, p->pools[i].layer_partition[s]);
    if (!st.ok) return fail(ld, "pools[%zu].layer_partition: the sum overflows", i);
    if (i > 0 && sum != M->layers)
      return fail(ld, "pools[%zu].layer_partition: sums to %lld layers, pools[0]'s to %lld (the pools hold one model)",
                  i, (long long)sum, (long long)M->layers);
    M->layers = sum;
    M->moe |= p->pools[i].expert_map != NULL;
    M->moe_known |= p->pools[i].expert_map != NULL;
  }
  for (int64_t r = 0; r < p->nranks; r++) {
    const PlanRank *R = &p->ranks[r];
    const PlanPool *P = &p->pools[R->pool];
    M->moe |= R->shard[SH_EXPERTS][1] > R->shard[SH_EXPERTS][0];
    if (R->coords[CO_TP] == P->size[CO_TP] - 1 && R->shard[SH_KV_HEADS][1] < 1)
      return fail(ld, "ranks[%lld].shard.kv_heads: expected the model's last KV head (tp rank %d of %lld), got none",
                  (long long)r, R->coords[CO_TP], (long long)P->size[CO_TP]);
    if (R->coords[CO_TP] == P->size[CO_TP] - 1 && R->shard[SH_KV_HEADS][1] > M->kv_heads)
      M->kv_heads = R->shard[SH_KV_HEADS][1];
    if (!P->expert_map && R->coords[CO_EP] == P->size[CO_EP] - 1 && R->shard[SH_EXPERTS][1] > M->experts)
      M->experts = R->shard[SH_EXPERTS][1];
  }
  return true;
}

/* KV bytes of one head, one layer, one token, from ranks[0] (whose shards
 * check_rank_shards has held to the model); every other rank is held to
 * it by check_rank_kv. */
static bool derive_head_bytes(Ld *ld, const Plan *p, PlanModel *M) {
  if (p->nranks == 0) return true;
  const PlanRank *R = &p->ranks[0];
  int64_t cells, own = R->kv_bytes_per_token - R->kv_draft_bytes_per_token;
  if (!ck_mul(R->shard[SH_LAYERS][1] - R->shard[SH_LAYERS][0], R->shard[SH_KV_HEADS][1] - R->shard[SH_KV_HEADS][0],
              &cells) || cells < 1 || own % cells != 0 || own == 0)
    return fail(ld, "ranks[0].kv.bytes_per_token: expected a positive multiple of its %lld layers x kv heads "
                    "besides draft_bytes_per_token %lld, got %lld",
                (long long)cells, (long long)R->kv_draft_bytes_per_token, (long long)R->kv_bytes_per_token);
  M->head_bytes = own / cells;
  return true;
}

/* The KV heads tp rank t of a pool of tp ranks holds (docs/plan.md,
 * "Shards"): split over tp while tp <= kv_heads, else each head held by
 * tp / kv_heads consecutive tp ranks. False on overflow. */
static bool kv_heads_of(int64_t kv_heads, int64_t tp, int64_t t, int64_t out[2]) {
  int64_t a, b;
  if (tp <= kv_heads) {
    if (!ck_mul(kv_heads, t, &a) || !ck_mul(kv_heads, t + 1, &b)) return false;
    out[0] = a / tp;
    out[1] = b / tp;
  } else {
    out[0] = t * kv_heads / tp; /* t < tp <= INT32_MAX, kv_heads < tp */
    out[1] = out[0] + 1;
  }
  return true;
}

/* The layers of R's pp stage, in out. */
static void stage_layers(const Plan *p, const PlanRank *R, int64_t out[2]) {
  const PlanPool *P = &p->pools[R->pool];
  int64_t start = 0;
  for (int64_t k = 0; k < R->coords[CO_PP]; k++) start += P->layer_partition[k];
  out[0] = start;
  out[1] = start + P->layer_partition[R->coords[CO_PP]];
}

/* Rank i's layers and KV heads against its pool and the model: the layers
 * of its pp stage and the heads of its tp index. */
static bool check_rank_shards(Ld *ld, const Plan *p, const PlanModel *M, int64_t i) {
  const PlanRank *R = &p->ranks[i];
  const PlanPool *P = &p->pools[R->pool];
  int64_t want[2], heads[2] = {-1, -1};
  stage_layers(p, R, want);
  if (R->shard[SH_LAYERS][0] != want[0] || R->shard[SH_LAYERS][1] != want[1])
    return fail(ld, "ranks[%lld].shard.layers: expected [%lld, %lld] (pp stage %d of pool `%s`, %lld layers), "
                    "got [%lld, %lld]",
                (long long)i, (long long)want[0], (long long)want[1], R->coords[CO_PP], P->name, (long long)M->layers,
                (long long)R->shard[SH_LAYERS][0], (long long)R->shard[SH_LAYERS][1]);
  if (M->kv_heads < 0) return true; /* a node file without a last tp rank */
  if (!kv_heads_of(M->kv_heads, P->size[CO_TP], R->coords[CO_TP], heads) || R->shard[SH_KV_HEADS][0] != heads[0] ||
      R->shard[SH_KV_HEADS][1] != heads[1])
    return fail(ld, "ranks[%lld].shard.kv_heads: expected [%lld, %lld] (tp rank %d of %lld over %lld KV heads), "
                    "got [%lld, %lld]",
                (long long)i, (long long)heads[0], (long long)heads[1], R->coords[CO_TP],
                (long long)P->size[CO_TP], (long long)M->kv_heads, (long long)R->shard[SH_KV_HEADS][0],
                (long long)R->shard[SH_KV_HEADS][1]);
  return true;
}

/* Rank i's KV bytes: bytes per token of exactly its layers and heads, and
 * as many KV blocks as its kv_cache holds (memory.c: kv_cache / (block
 * tokens x bytes per token)). */
static bool check_rank_kv(Ld *ld, const Plan *p, const PlanModel *M, int64_t i) {
  const PlanRank *R = &p->ranks[i];
  int64_t layers = R->shard[SH_LAYERS][1] - R->shard[SH_LAYERS][0];
  int64_t heads = R->shard[SH_KV_HEADS][1] - R->shard[SH_KV_HEADS][0];
  CkState st = {true};
  int64_t bpt = cka(&st, ckm(&st, ckm(&st, layers, heads), M->head_bytes), R->kv_draft_bytes_per_token);
  char draft[64] = "";
  if (R->kv_draft_bytes_per_token > 0)
    snprintf(draft, sizeof draft, ", plus draft_bytes_per_token %lld", (long long)R->kv_draft_bytes_per_token);
  if (!st.ok || R->kv_bytes_per_token != bpt)
    return fail(ld, "ranks[%lld].kv.bytes_per_token: expected %lld (%lld layers x %lld kv heads x %lld bytes, "
                    "as ranks[0] holds%s), got %lld",
                (long long)i, (long long)bpt, (long long)layers, (long long)heads, (long long)M->head_bytes, draft,
                (long long)R->kv_bytes_per_token);
  int64_t block = ckm(&st, R->kv_block_tokens, bpt);
  int64_t blocks = st.ok ? R->memory[MEM_KV_CACHE] / block : -1;
  if (R->kv_blocks != blocks)
    return fail(ld, "ranks[%lld].kv.blocks: expected %lld (memory.kv_cache %lld over blocks of %lld tokens x %lld "
                    "bytes), got %lld",
                (long long)i, (long long)blocks, (long long)R->memory[MEM_KV_CACHE], (long long)R->kv_block_tokens,
                (long long)bpt, (long long)R->kv_blocks);
  return true;
}

/* Rank i's memory ledger (docs/plan.md, "ranks[]"): the same for every
 * rank of one pool and pp stage (the ledger is per pool and stage, so
 * explain --memory shows one rank for all), the same capacity on every rank
 * (one GPU), and, with a KV pool, the five other entries adding up to
 * capacity. first[] holds each stage's first rank of the pool, -1 before. */
static bool check_rank_memory(Ld *ld, const Plan *p, int64_t i, int64_t *first) {
  const PlanRank *R = &p->ranks[i];
  const int64_t *m = R->memory;
  int64_t sum = 0;
  bool ok = true;
  for (int k = 0; k < MEM__COUNT && ok; k++)
    if (k != MEM_CAPACITY) ok = ck_add(sum, m[k], &sum);
  if (m[MEM_KV_CACHE] > 0 && (!ok || sum != m[MEM_CAPACITY]))
    return fail(ld, "ranks[%lld].memory: expected weights + kv_cache + activations + workspace + reserved = "
                    "capacity %lld, got %s%lld",
                (long long)i, (long long)m[MEM_CAPACITY], ok ? "" : "more than ", (long long)(ok ? sum : INT64_MAX));
  if (m[MEM_CAPACITY] != p->ranks[0].memory[MEM_CAPACITY])
    return fail(ld, "ranks[%lld].memory.capacity: expected %lld (every GPU of the plan, as ranks[0]), got %lld",
                (long long)i, (long long)p->ranks[0].memory[MEM_CAPACITY], (long long)m[MEM_CAPACITY]);
  int64_t *f = &first[R->coords[CO_PP]];
  if (*f < 0) {
    *f = i;
    return true;
  }
  const PlanRank *F = &p->ranks[*f];
  for (int k = 0; k < MEM__COUNT; k++)
    if (m[k] != F->memory[k])
      return fail(ld, "ranks[%lld].memory.%s: expected %lld (as ranks[%lld]: pool `%s` pp stage %d has one ledger), "
                      "got %lld",
                  (long long)i, mem_names[k], (long long)F->memory[k], (long long)*f, p->pools[R->pool].name,
                  R->coords[CO_PP], (long long)m[k]);
  if (R->kv_block_tokens != F->kv_block_tokens || R->kv_blocks != F->kv_blocks)
    return fail(ld, "ranks[%lld].kv: expected %lld blocks of %lld tokens (as ranks[%lld]), got %lld of %lld",
                (long long)i, (long long)F->kv_blocks, (long long)F->kv_block_tokens, (long long)*f,
                (long long)R->kv_blocks, (long long)R->kv_block_tokens);
  return true;
}

/* check_rank_memory for every rank, with one first-rank table per pool
 * (pp entries: as many as the pool's layer_partition holds). */
static bool check_memory(Ld *ld, const Plan *p) {
  int64_t **first = rp_calloc(p->npools ? p->npools : 1, sizeof *first);
  for (size_t i = 0; i < p->npools; i++) {
    first[i] = rp_malloc((size_t)p->pools[i].size[CO_PP] * sizeof **first);
    for (int64_t s = 0; s < p->pools[i].size[CO_PP]; s++) first[i][s] = -1;
  }
  bool ok = true;
  for (int64_t r = 0; r < p->nranks && ok; r++) ok = check_rank_memory(ld, p, r, first[p->ranks[r].pool]);
  for (size_t i = 0; i < p->npools; i++) free(first[i]);
  free(first);
  return ok;
}

/* A pool's sizes as the compiler resolves them: etp * ep * edp = tp * cp *
 * dp (the expert groups regroup the same ranks), dcp dividing tp and no
 * larger than the copies of one KV head (tp / kv_heads), and on a model
 * without experts ep = 1 and etp = tp (the expert groups mirror the dense
 * ones). */
static bool check_pool_sizes(Ld *ld, const Plan *p, const PlanModel *M, size_t i) {
  const PlanPool *P = &p->pools[i];
  const int64_t *z = P->size;
  CkState st = {true};
  int64_t dense = ckm(&st, ckm(&st, z[CO_TP], z[CO_CP]), z[CO_DP]);
  int64_t expert = ckm(&st, ckm(&st, z[CO_ETP], z[CO_EP]), z[CO_EDP]);
  if (!st.ok || dense != expert)
    return fail(ld, "pools[%zu].edp: expected etp * ep * edp = tp * cp * dp = %lld, got %lld * %lld * %lld", i,
                (long long)dense, (long long)z[CO_ETP], (long long)z[CO_EP], (long long)z[CO_EDP]);
  int64_t copies = M->kv_heads > 0 && z[CO_TP] > M->kv_heads ? z[CO_TP] / M->kv_heads : 1;
  if (z[CO_TP] % z[CO_DCP] != 0 || (M->kv_heads > 0 && z[CO_DCP] > copies))
    return fail(ld, "pools[%zu].dcp: expected a divisor of tp %lld of at most %lld (tp / kv_heads: the tp ranks "
                    "that hold copies of one KV head), got %lld",
                i, (long long)z[CO_TP], (long long)copies, (long long)z[CO_DCP]);
  if (M->moe_known && !M->moe && (z[CO_EP] != 1 || z[CO_ETP] != z[CO_TP]))
    return fail(ld, "pools[%zu].%s: expected %lld on a model without experts (no rank holds one), got %lld", i,
                z[CO_EP] != 1 ? "ep" : "etp", z[CO_EP] != 1 ? 1LL : (long long)z[CO_TP],
                (long long)(z[CO_EP] != 1 ? z[CO_EP] : z[CO_ETP]));
  return true;
}

/* A rank's coordinates name one place of its instance: (tp, cp, dp, pp)
 * once per instance, (etp, ep, edp) once per instance and pp stage (the
 * expert groups regroup the same tp * cp * dp ranks), and dcp = tp mod dcp
 * (docs/plan.md). Two ranks with the same coordinates would take one
 * rank's shards and KV twice and leave another's to nobody. */
static int64_t dense_slot(const PlanPool *P, const PlanRank *R) {
  const int64_t *z = P->size;
  const int32_t *c = R->coords;
  int64_t idx = c[CO_TP] + z[CO_TP] * (c[CO_CP] + z[CO_CP] * (c[CO_DP] + z[CO_DP] * (int64_t)c[CO_PP]));
  return P->first_rank + R->instance * P->instance_size + idx;
}

static int64_t expert_slot(const PlanPool *P, const PlanRank *R) {
  const int64_t *z = P->size;
  const int32_t *c = R->coords;
  int64_t tcd = z[CO_TP] * z[CO_CP] * z[CO_DP];
  int64_t idx = c[CO_ETP] + z[CO_ETP] * (c[CO_EP] + z[CO_EP] * (int64_t)c[CO_EDP]);
  return P->first_rank + R->instance * P->instance_size + c[CO_PP] * tcd + idx;
}

static bool check_coords(Ld *ld, const Plan *p) {
  uint8_t *seen = rp_calloc((size_t)p->world_size, 1);
  bool ok = true;
  for (int64_t i = 0; i < p->nranks && ok; i++) {
    const PlanRank *R = &p->ranks[i];
    const PlanPool *P = &p->pools[R->pool];
    int64_t d = dense_slot(P, R), e = expert_slot(P, R);
    if (R->coords[CO_DCP] != R->coords[CO_TP] % P->size[CO_DCP])
      ok = fail(ld, "ranks[%lld].coords.dcp: expected tp mod dcp = %lld, got %d", (long long)i,
                (long long)(R->coords[CO_TP] % P->size[CO_DCP]), R->coords[CO_DCP]);
    else if (seen[d] & 1)
      ok = fail(ld, "ranks[%lld].coords: (tp, cp, dp, pp) = (%d, %d, %d, %d) is another rank's of instance %d of "
                    "pool `%s`", (long long)i, R->coords[CO_TP], R->coords[CO_CP], R->coords[CO_DP],
                R->coords[CO_PP], R->instance, P->name);
    else if (seen[e] & 2)
      ok = fail(ld, "ranks[%lld].coords: (etp, ep, edp) = (%d, %d, %d) is another rank's of pp stage %d of "
                    "instance %d of pool `%s`", (long long)i, R->coords[CO_ETP], R->coords[CO_EP],
                R->coords[CO_EDP], R->coords[CO_PP], R->instance, P->name);
    seen[d] |= 1;
    seen[e] |= 2;
  }
  free(seen);
  return ok;
}

/* An expert_map holds expert ids 0 .. E-1, each on at least one ep rank:
 * E is the routed experts the other pools' shards show, else the map's
 * largest id + 1. */
static bool check_expert_map(Ld *ld, const Plan *p, const PlanModel *M, size_t i) {
  const PlanPool *P = &p->pools[i];
  if (!P->expert_map) return true;
  int64_t n = P->expert_slots * P->size[CO_EP], E = M->experts;
  if (E == 0)
    for (int64_t k = 0; k < n; k++)
      if (P->expert_map[k] >= E) E = (int64_t)P->expert_map[k] + 1;
  if (E > n)
    return fail(ld, "pools[%zu].expert_map: %lld slots cannot hold %lld experts", i, (long long)n, (long long)E);
  uint8_t *held = rp_calloc((size_t)E, 1);
  bool ok = true;
  for (int64_t k = 0; k < n && ok; k++) {
    if (P->expert_map[k] >= E)
      ok = fail(ld, "pools[%zu].expert_map.ep_ranks[%lld][%lld]: expected an expert id below %lld, got %d", i,
                (long long)(k / P->expert_slots), (long long)(k % P->expert_slots), (long long)E, P->expert_map[k]);
    else
      held[P->expert_map[k]] = 1;
  }
  for (int64_t e = 0; e < E && ok; e++)
    if (!held[e]) ok = fail(ld, "pools[%zu].expert_map: expert %lld of %lld is on no ep rank", i, (long long)e, (long long)E);
  free(held);
  return ok;
}

/* kv_reshard holds the pairs `rankplan compile` writes: one per (prefill
 * pool, decode pool), prefill pools outer, in pool order, each with at least
 * one transfer (a decode rank always holds KV); a node file keeps the pairs
 * with a pool that has a rank on its node. */
static bool pool_here(const Plan *p, size_t pi) {
  if (!p->partial) return true;
  for (int64_t r = 0; r < p->nranks; r++)
    if (p->ranks[r].pool == (int32_t)pi) return true;
  return false;
}

static bool check_pairs(Ld *ld, const Plan *p) {
  size_t k = 0;
  for (size_t a = 0; a < p->npools; a++) {
    if (strcmp(p->pools[a].role, "prefill") != 0) continue;
    for (size_t b = 0; b < p->npools; b++) {
      if (strcmp(p->pools[b].role, "decode") != 0 || !(pool_here(p, a) || pool_here(p, b))) continue;
      if (k >= p->nreshard)
        return fail(ld, "kv_reshard: expected a pair `%s` -> `%s` (a prefill and a decode pool), got %zu pair(s)",
                    p->pools[a].name, p->pools[b].name, p->nreshard);
      const PlanReshard *R = &p->reshard[k];
      if (strcmp(R->prefill, p->pools[a].name) != 0 || strcmp(R->decode, p->pools[b].name) != 0)
        return fail(ld, "kv_reshard[%zu]: expected the pair `%s` -> `%s` (pairs in pool order, prefill outer)", k,
                    p->pools[a].name, p->pools[b].name);
      if (R->ntransfers == 0)
        return fail(ld, "kv_reshard[%zu].transfers: expected the transfers that fill pool `%s`'s KV, got none", k,
                    R->decode);
      k++;
    }
  }
  if (k != p->nreshard)
    return fail(ld, "kv_reshard[%zu]: expected %zu pair(s) (one per prefill and decode pool%s), got %zu", k, k,
                p->partial ? " with a rank on this node" : "", p->nreshard);
  return true;
}

/* One side of a pair as the independent checker sees it. The heads rule
 * (tp / dcp head groups and the KV heads divide one another) and equal cp
 * on both chunked sides are what the compiler's map builder requires. */
static bool side_layout(Ld *ld, const Plan *p, const PlanModel *M, const char *name, const char *path,
                        RsLayout *l) {
  const PlanPool *P = &p->pools[find_pool(p, name)];
  memset(l, 0, sizeof *l);
  l->pool = P->name;
  l->model_id = "plan";
  l->tp = P->size[CO_TP];
  l->pp = P->size[CO_PP];
  l->cp = P->size[CO_CP];
  l->dp = P->size[CO_DP];
  l->dcp = P->size[CO_DCP];
  l->layers = M->layers;
  l->layer_partition = P->layer_partition;
  l->kv_heads = M->kv_heads;
  l->kv_bytes_per_head_token = M->head_bytes;
  int64_t e = l->tp / l->dcp;
  if (l->kv_heads % e != 0 && e % l->kv_heads != 0)
    return fail(ld, "%s: pool `%s` has tp / dcp = %lld head groups for %lld KV heads; neither divides the other",
                path, P->name, (long long)e, (long long)l->kv_heads);
  return true;
}

/* The chunk ids of a range list at the pair's input_tokens T: each range
 * must start and end on a boundary of the nchunks zigzag chunks
 * ([floor(j*T/n), floor((j+1)*T/n))), and at most RS_MAX_CHUNK_IDS chunks
 * in all. T >= nchunks, so no chunk is empty and the ids are unique. */
static bool range_chunks(Ld *ld, const PlanTransfer *X, int64_t T, int64_t n, const char *path, RsTokens *t) {
  int64_t prev = -1;
  for (size_t k = 0; k < X->nranges; k++) {
    int64_t a = X->ranges[k][0], b = X->ranges[k][1], ja, jb, sa, sb;
    /* the chunk holding token a: floor(((a + 1) * n - 1) / T) */
    bool ok = b <= T && a < b && ck_mul(a + 1, n, &ja) && ck_mul(b, n, &jb);
    if (ok) {
      ja = (ja - 1) / T;
      jb = (jb - 1) / T + 1;
      ok = ck_mul(ja, T, &sa) && ck_mul(jb, T, &sb) && sa / n == a && sb / n == b && ja >= prev;
    }
    if (!ok)
      return fail(ld, "%s.tokens.ranges[%zu]: expected whole chunks of %lld tokens' %lld zigzag chunks, in order, "
                      "got [%lld, %lld]",
                  path, k, (long long)T, (long long)n, (long long)a, (long long)b);
    for (int64_t j = ja; j < jb; j++) {
      if (t->nids == RS_MAX_CHUNK_IDS)
        return fail(ld, "%s.tokens.ranges: expected at most %d chunks, got more", path, RS_MAX_CHUNK_IDS);
      t->ids[t->nids++] = j;
    }
    prev = jb;
  }
  if (t->nids == 0) return fail(ld, "%s.tokens.ranges: expected at least one range, got none", path);
  return true;
}

/* A plan transfer as the checker's RsTransfer. */
static bool to_rs(Ld *ld, const PlanReshard *R, const PlanTransfer *X, int64_t nchunks, const char *path,
                  RsTransfer *x) {
  memset(x, 0, sizeof *x);
  x->src = X->src;
  x->dst = X->dst;
  x->layer_begin = X->layers[0];
  x->layer_end = X->layers[1];
  x->head_begin = X->kv_heads[0];
  x->head_end = X->kv_heads[1];
  x->bytes_per_token = X->bytes_per_token;
  x->tokens.nchunks = 1;
  x->tokens.nids = 1;
  x->tokens.stride = X->stride;
  x->tokens.offset = X->offset;
  if (X->tokens != PT_RANGES) return true;
  if (nchunks < 2) return fail(ld, "%s.tokens: expected \"all\" or a stride (no pool of the pair has cp > 1), got ranges", path);
  if (!R->has_request || R->input_tokens < nchunks)
    return fail(ld, "%s.tokens: ranges need the pair's request.input_tokens, at least the %lld chunks", path,
                (long long)nchunks);
  x->tokens.nchunks = nchunks;
  x->tokens.nids = 0;
  return range_chunks(ld, X, R->input_tokens, nchunks, path, &x->tokens);
}

/* Proves pair i with the independent checker (reshard_check.c): every cell
 * each decode rank holds arrives exactly once, from a prefill rank that owns
 * it, with bytes_per_token that of its layers and heads; and the pair's
 * request bytes are its transfers' bytes at input_tokens. */
static bool prove_pair(Ld *ld, const Plan *p, const PlanModel *M, size_t i) {
  const PlanReshard *R = &p->reshard[i];
  char path[48], why[256];
  snprintf(path, sizeof path, "kv_reshard[%zu]", i);
  RsLayout src, dst;
  if (!side_layout(ld, p, M, R->prefill, path, &src) || !side_layout(ld, p, M, R->decode, path, &dst)) return false;
  if (src.cp > 1 && dst.cp > 1 && src.cp != dst.cp)
    return fail(ld, "%s: pools `%s` and `%s` cut tokens into different zigzag chunks (cp %lld and %lld)", path,
                R->prefill, R->decode, (long long)src.cp, (long long)dst.cp);
  int64_t nchunks = 2 * (src.cp > dst.cp ? src.cp : dst.cp);
  RsMap m;
  memset(&m, 0, sizeof m);
  m.src_ranks = rs_replica_ranks(&src);
  m.dst_ranks = rs_replica_ranks(&dst);
  m.xfers.items = rp_calloc(R->ntransfers ? R->ntransfers : 1, sizeof *m.xfers.items);
  m.xfers.len = m.xfers.cap = R->ntransfers;
  bool ok = true;
  for (size_t k = 0; k < R->ntransfers && ok; k++) {
    char xp[96];
    snprintf(xp, sizeof xp, "%s.transfers[%zu]", path, k);
    ok = to_rs(ld, R, &R->transfers[k], nchunks > 2 ? nchunks : 1, xp, &m.xfers.items[k]);
  }
  if (ok && !rs_check_map(&src, &dst, &m, why, sizeof why))
    ok = fail(ld, "%s.transfers: not an exact cover of pool `%s`'s KV from pool `%s`: %s", path, R->decode,
              R->prefill, why);
  int64_t bytes = 0;
  for (size_t k = 0; k < R->ntransfers && ok && R->has_request; k++) {
    int64_t b = rs_plan_xfer_bytes(&R->transfers[k], R->input_tokens);
    if (b < 0 || !ck_add(bytes, b, &bytes))
      ok = fail(ld, "%s.request.bytes: the transfers' bytes at %lld tokens overflow", path,
                (long long)R->input_tokens);
  }
  if (ok && R->has_request && bytes != R->bytes)
    ok = fail(ld, "%s.request.bytes: expected %lld (the transfers' bytes at %lld tokens), got %lld", path,
              (long long)bytes, (long long)R->input_tokens, (long long)R->bytes);
  free(m.xfers.items);
  return ok;
}

/* Everything above, after the structural checks. */
static bool check_model(Ld *ld, Plan *p) {
  PlanModel M;
  if (!derive_model(ld, p, &M)) return false;
  for (size_t i = 0; i < p->npools; i++)
    if (!check_pool_sizes(ld, p, &M, i) || !check_expert_map(ld, p, &M, i)) return false;
  if (!check_coords(ld, p)) return false;
  for (int64_t r = 0; r < p->nranks; r++)
    if (!check_rank_shards(ld, p, &M, r)) return false;
  if (!derive_head_bytes(ld, p, &M)) return false;
  for (int64_t r = 0; r < p->nranks; r++)
    if (!check_rank_kv(ld, p, &M, r)) return false;
  if (!check_memory(ld, p)) return false;
  if (!check_pairs(ld, p)) return false;
  /* A node file that does not show the KV heads cannot be proven; the
   * whole plan it was split from can. */
  for (size_t i = 0; i < p->nreshard && M.kv_heads > 0; i++)
    if (!prove_pair(ld, p, &M, i)) return false;
  return true;
}

/* The plan's head: format, compiler, spec digest, node (a split plan)
 * and world size. */
static bool load_head(Ld *ld, Plan *p, PjV *root) {
  const char *fmt, *comp, *sha;
  if (!pj_is_object(root))
    return fail(ld, "expected a JSON object at the top, got %s", jtype(root));
  if (!get_str(ld, root, "", "format", &fmt)) return false;
  if (strcmp(fmt, PLAN_FORMAT) != 0)
    return fail(ld, "format: expected \"%s\", got \"%s\" (a plan from another rankplan version; "
                    "compile the spec again)",
                PLAN_FORMAT, fmt);
  if (!get_str(ld, root, "", "compiler", &comp) || !get_str(ld, root, "", "spec_sha256", &sha))
    return false;
  p->compiler = rp_strdup(comp);
  if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
    return fail(ld, "spec_sha256: expected 64 lowercase hex digits, got \"%s\"", sha);
  memcpy(p->spec_sha256, sha, 65);
  PjV *node = pj_object_get(root, "node");
  if (node) {
    if (!pj_is_integer(node) || pj_integer_value(node) < 0)
      return fail(ld, "node: expected a node number, got %s", jtype(node));
    p->partial = true;
    p->partial_node = (int32_t)pj_integer_value(node);
  }
  return get_int(ld, root, "", "world_size", 1, p->partial ? PLAN_MAX_WORLD_SPLIT : INT32_MAX,
                 &p->world_size);
}

/* The spec at spec_path is the one the plan was compiled from. */
static bool check_spec_digest(Ld *ld, const Plan *p, const char *spec_path) {
  char *spec;
  size_t slen;
  int e = rp_read_file(spec_path, (size_t)1 << 30, &spec, &slen);
  if (e) return fail(ld, "cannot read the spec `%s`: %s", spec_path, strerror(e));
  char hex[65];
  rp_sha256_hex(spec, slen, hex);
  free(spec);
  if (strcmp(hex, p->spec_sha256) == 0) return true;
  return fail(ld, "spec_sha256: the plan was compiled from another spec: expected %s (the digest "
                  "of `%s`), got %s; compile the spec again",
              hex, spec_path, p->spec_sha256);
}

/* ---- entry points ------------------------------------------------------------- */

Plan *plan_load_mem(const char *name, const char *text, size_t len, const char *spec_path,
                    char **err) {
  Ld ld = {name, NULL};
  PjDoc doc;
  *err = NULL;
  if (!pj_parse(&doc, text, len)) {
    fail(&ld, "line %d column %d: not a valid plan (JSON: %s)%s", doc.line, doc.col, doc.err,
         len == 0 ? "; the file is empty" : "");
    pj_free(&doc);
    *err = ld.err;
    return NULL;
  }
  PjV *root = &doc.v[0];
  Plan *p = rp_calloc(1, sizeof *p);
  p->path = rp_strdup(name);
  bool ok = false;
  if (!load_head(&ld, p, root)) goto done;
  if (!load_hardware(&ld, p, root) || !load_nodes(&ld, p, root) || !load_pools(&ld, p, root) || !load_ranks(&ld, p, root) ||
      !load_groups(&ld, p, root) || !load_reshard(&ld, p, root) ||
      !load_estimates(&ld, p, root) || !load_diags(&ld, p, root) || !load_launch(&ld, p, root))
    goto done;
  if (spec_path && !check_spec_digest(&ld, p, spec_path)) goto done;
  ok = check_consistency(&ld, p) && check_model(&ld, p);
done:
  pj_free(&doc);
  if (!ok) {
    plan_free(p);
    *err = ld.err ? ld.err : rp_sprintf("%s: invalid plan", name);
    return NULL;
  }
  return p;
}

/* A plan file: a regular file of at most PLAN_MAX_BYTES (rp_read_file
 * refuses a FIFO, which would block, and a device, which may never end),
 * or standard input for "-". */
Plan *plan_load(const char *path, const char *spec_path, char **err) {
  char *text;
  size_t len;
  int e = rp_read_file(path, PLAN_MAX_BYTES, &text, &len);
  if (e) {
    if (e == RP_ENOTREG)
      *err = rp_sprintf("%s: cannot read the plan: not a regular file (%s)", path, rp_file_kind(path));
    else if (e == EFBIG)
      *err = rp_sprintf("%s: cannot read the plan: over %zu bytes, the largest plan the loader reads "
                        "(docs/plan.md, \"Loader caps\")", path, (size_t)PLAN_MAX_BYTES);
    else
      *err = rp_sprintf("%s: cannot read the plan: %s", path, rp_strerror(e));
    return NULL;
  }
  Plan *p = plan_load_mem(path, text, len, spec_path, err);
  free(text);
  return p;
}

void plan_free(Plan *p) {
  if (!p) return;
  free(p->path);
  free(p->compiler);
  free(p->nodes);
  free(p->node_ranks);
  for (size_t i = 0; i < p->npools; i++) {
    free(p->pools[i].name);
    free(p->pools[i].role);
    free(p->pools[i].layer_partition);
    free(p->pools[i].expert_map);
  }
  free(p->pools);
  free(p->ranks);
  for (int64_t i = 0; i < p->ngroups; i++) free(p->groups[i].ranks);
  free(p->groups);
  for (size_t i = 0; i < p->nreshard; i++) {
    free(p->reshard[i].prefill);
    free(p->reshard[i].decode);
    for (size_t j = 0; j < p->reshard[i].ntransfers; j++) free(p->reshard[i].transfers[j].ranges);
    free(p->reshard[i].transfers);
  }
  free(p->reshard);
  for (size_t i = 0; i < p->ndiags; i++) {
    free(p->diags[i].code);
    free(p->diags[i].severity);
    free(p->diags[i].message);
  }
  free(p->diags);
  PlanLaunch *L = &p->launch;
  char *ls[] = {L->engine, L->engine_version, L->source, L->revision, L->served_model_name, L->kv_cache_dtype,
                L->activations_dtype, L->kv_transfer, L->hostname_pattern, L->image, L->sampler,
                L->attention_backend};
  for (size_t i = 0; i < RP_ARRAY_LEN(ls); i++) free(ls[i]);
  for (size_t i = 0; i < L->nhostnames; i++) free(L->hostnames[i]);
  free(L->hostnames);
  free(p);
}
