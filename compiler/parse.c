/*
 * parse.c: YAML node tree (ytree.h) → typed Spec IR (spec.h), the second
 * half of the parse stage.
 *
 * Input: the bytes of a spec file, plus the catalog directory for
 * `preset:` entries. Output: a Spec whose every field carries its value in
 * base units, .set, and .loc (the YAML position of the value, possibly in a
 * catalog file), or NULL with diagnostics. Invariants: every error in the
 * file is reported, not just the first (readers record the problem, keep the
 * documented default and carry on); unset optional fields hold their default
 * with .loc at the enclosing section; after spec_parse returns, nothing
 * refers to libyaml (strings live in the Spec's arena).
 *
 * A preset is merged at the tree level before typing: the catalog file is
 * loaded by the same reader, and the keys written beside `preset:` replace
 * the entry's key by key (recursively for nested mappings), so positions
 * stay true for both files and the typing code has a single path.
 *
 * The structural rules that need the whole Spec (version, required
 * sections, pool names and roles, the order string, pools against the
 * cluster) live at the end of this file in spec_check_structure(). Model,
 * memory and topology rules belong to compiler/validate.c.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "datadir.h"
#include "hf_import.h"
#include "rp_config.h"
#include "spec.h"
#include "units.h"
#include "ytree.h"

/* ---------------------------------------------------------------------- */
/* Name tables. */

static const char *const dtype_names[] = {"fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4"};
static const char *const attn_names[] = {"mha", "gqa", "mqa", "mla"};
static const char *const mode_names[] = {"aggregated", "disaggregated", "search"};
static const char *const engine_names[] = {"generic", "vllm", "sglang", "trtllm"};
static const char *const role_names[] = {"prefill", "decode", "both"};
static const char *const layer_attn_names[] = {"full", "sliding", "chunked"};
static const char *const shared_placement_names[] = {"tp", "replicated"};
static const char *const rope_scaling_names[] = {"none", "linear", "dynamic", "yarn", "llama3"};

const char *rope_scaling_name(RopeScaling r) {
  return (unsigned)r < RP_ARRAY_LEN(rope_scaling_names) ? rope_scaling_names[r] : "?";
}
const char *dtype_name(DType t) {
  return (unsigned)t < RP_ARRAY_LEN(dtype_names) ? dtype_names[t] : "?";
}
const char *attn_kind_name(AttnKind k) {
  return (unsigned)k < RP_ARRAY_LEN(attn_names) ? attn_names[k] : "?";
}
const char *mode_name(DeployMode m) {
  return (unsigned)m < RP_ARRAY_LEN(mode_names) ? mode_names[m] : "?";
}
const char *engine_name(Engine e) {
  return (unsigned)e < RP_ARRAY_LEN(engine_names) ? engine_names[e] : "?";
}
const char *role_name(PoolRole r) {
  return (unsigned)r < RP_ARRAY_LEN(role_names) ? role_names[r] : "?";
}
const char *layer_attn_name(LayerAttn t) {
  return (unsigned)t < RP_ARRAY_LEN(layer_attn_names) ? layer_attn_names[t] : "?";
}

/* ---------------------------------------------------------------------- */
/* Parser state and small helpers. */

typedef struct {
  Diags *d;
  YArena *a;
  Spec *s;
  const char *catalog_dir;
  bool quiet_missing; /* a preset failed: its keys' absence is no news */
  const char *hw_preset; /* spec_parse_file_hw: the hardware entry to use instead */
} P;

/* Upper bounds on the spec's sizes that drive a loop or an allocation
 * somewhere in the compiler or the runtime (docs/spec.md, "Limits"). A value
 * over its bound is E0105 with the bound and its reason as the help line.
 * Each bound is far above every real deployment or model, so the only
 * specs it refuses are mistakes; with them, every product of two or three
 * spec integers fits 64 bits (byte and FLOP counts still use checked
 * arithmetic, as the larger products can overflow). */
typedef struct {
  int64_t max;
  const char *why;
} Limit;

/* GPUs of the cluster (nodes x gpus_per_node), and any one count of GPUs,
 * ranks or nodes: the largest single cluster publicly documented (xAI's
 * Colossus, about 200,000 GPUs) fits, and 2^18 is twice the 131,072 ranks
 * the compile is benchmarked at (docs/benchmarks.md: a 200 MB plan that
 * the runtime's loader reads in 6 s and 1.1 GB). */
static const Limit LIM_GPUS = {
    262144, "the largest cluster rankplan plans for has 262,144 GPUs (2^18; docs/spec.md, \"Limits\")"};
/* GPUs per node: the largest scale-up domain announced (NVIDIA Rubin Ultra
 * NVL576, 576 GPUs) fits when it is written as one node. */
static const Limit LIM_GPUS_PER_NODE = {
    1024, "a node holds at most 1,024 GPUs (docs/spec.md, \"Limits\")"};
/* Layers: 8x the deepest published model (Llama 3.1 405B, 126 layers);
 * the search keeps a table of (layers+1)^2 x 4 stage verdicts. */
static const Limit LIM_LAYERS = {
    1024, "a model has at most 1,024 layers (docs/spec.md, \"Limits\")"};
/* Tokens of one request or context: 2^30 is 100x the longest published
 * context window (Llama 4 Scout, 10M tokens). */
static const Limit LIM_TOKENS = {
    1073741824, "a context holds at most 2^30 tokens (docs/spec.md, \"Limits\")"};
/* Model widths and counts (hidden, vocabulary, heads, head and FFN widths,
 * experts): 2^24 is 64x the largest published vocabulary (Gemma 3,
 * 262,144), the largest of these dimensions in public models. */
static const Limit LIM_DIM = {
    16777216, "model dimensions are at most 2^24 (docs/spec.md, \"Limits\")"};

#define KEYS(...) (const char *const[]){__VA_ARGS__}, RP_ARRAY_LEN(((const char *const[]){__VA_ARGS__}))

static char *arena_strdup(P *p, const char *s) {
  size_t n = strlen(s);
  char *r = yaml_arena_alloc(p->a, n + 1);
  memcpy(r, s, n + 1);
  return r;
}

static char *join_path(P *p, const char *path, const char *key) {
  char *t = rp_sprintf("%s%s%s", path, path[0] ? "." : "", key);
  char *r = arena_strdup(p, t);
  free(t);
  return r;
}

/* Reports keys of m that are not in keys[] (E0101), with "did you mean" or
 * the list of valid keys. */
static void check_keys(P *p, const YNode *m, const char *path, const char *const *keys, size_t nk) {
  if (!m || m->kind != YN_MAP) return;
  for (size_t i = 0; i < m->n; i++) {
    const YNode *k = m->pairs[i].key;
    bool ok = false;
    for (size_t j = 0; j < nk && !ok; j++) ok = strcmp(k->str, keys[j]) == 0;
    if (ok) continue;
    Diag *g = path[0] ? diag_at(p->d, DIAG_E0101, k->loc, "unknown key `%s` in `%s`", k->str, path)
                      : diag_at(p->d, DIAG_E0101, k->loc, "unknown key `%s` at the top level", k->str);
    const char *c = diag_closest(k->str, keys, nk);
    if (c) {
      diag_help(g, "did you mean `%s`?", c);
    } else {
      StrBuf sb;
      sb_init(&sb);
      for (size_t j = 0; j < nk; j++) sb_printf(&sb, "%s`%s`", j ? ", " : "", keys[j]);
      diag_help(g, "valid keys here: %s", sb.buf);
      sb_free(&sb);
    }
  }
}

/* A section: returns the mapping (or NULL when absent or not a mapping,
 * after E0103) and sets *loc to the mapping's position, or to the parent's
 * when absent. */
static const YNode *section(P *p, const YNode *parent, const char *key, const char *path,
                            SrcLoc parent_loc, SrcLoc *loc) {
  const YNode *n = yaml_map_get(parent, key);
  *loc = parent_loc;
  if (!n) return NULL;
  *loc = n->loc;
  if (n->kind != YN_MAP) {
    diag_at(p->d, DIAG_E0103, n->loc, "expected a mapping for `%s`, got a %s", path,
            yaml_node_type_name(n));
    return NULL;
  }
  return n;
}

static Diag *missing(P *p, const YNode *m, const char *path, const char *key) {
  /* an absent section is reported once, as such, not key by key */
  if (p->quiet_missing || !m) return NULL;
  SrcLoc l = m->loc;
  Diag *g = path[0] ? diag_at(p->d, DIAG_E0102, l, "missing required key `%s` in `%s`", key, path)
                    : diag_at(p->d, DIAG_E0102, l, "missing required key `%s`", key);
  diag_help(g, "add `%s:` (see docs/spec.md for its meaning and unit)", key);
  return g;
}

static bool is_yaml11_bool(const char *s) {
  static const char *const w[] = {"yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON",
                                  "off", "Off", "OFF", "y", "Y", "n", "N", "True", "TRUE",
                                  "False", "FALSE"};
  for (size_t i = 0; i < RP_ARRAY_LEN(w); i++)
    if (strcmp(s, w[i]) == 0) return true;
  return false;
}

static bool has_nul(const YNode *n) { return strlen(n->str) != n->len; }

/* Type check common to every scalar reader: returns false after E0103. */
static bool want_scalar(P *p, const YNode *v, const char *path, const char *what) {
  if (v->kind != YN_SCALAR) {
    diag_at(p->d, DIAG_E0103, v->loc, "expected %s for `%s`, got a %s", what, path,
            yaml_node_type_name(v));
    return false;
  }
  if (has_nul(v)) {
    diag_at(p->d, DIAG_E0004, v->loc, "the value of `%s` contains a NUL character", path);
    return false;
  }
  return true;
}

/* E0104 for a count written with a leading zero, which YAML 1.1 reads
 * as octal; the help gives the decimal meant. */
static void octal_error(P *p, const YNode *v, const char *path, bool neg, const char *digits) {
  const char *s = v->str;
  /* YAML 1.1 reads this as octal; nobody means that in a spec */
  char *end;
  unsigned long long oct = strtoull(digits, &end, 8);
  Diag *g = diag_at(p->d, DIAG_E0104, v->loc,
                    "`%s` has a leading zero, which YAML 1.1 reads as octal, for `%s`", s, path);
  const char *dec = digits + strspn(digits, "0");
  if (!*dec) dec = "0";
  if (*end == '\0' && strcmp(dec, "0") != 0)
    diag_help(g, "write %s%s or %s%llu", neg ? "-" : "", dec, neg ? "-" : "", oct);
  else
    diag_help(g, "write %s%s", neg ? "-" : "", dec);
}

/* E0104 for a count that is not decimal digits: the help gives the
 * decimal a hexadecimal, octal, binary, underscored or whole-valued
 * real literal means, else what a count is. */
static void not_decimal_error(P *p, const YNode *v, const char *path, int64_t lo, int64_t hi, bool neg) {
  const char *s = v->str, *type = yaml_node_type_name(v);
  Diag *g = diag_at(p->d, DIAG_E0104, v->loc, "expected a decimal integer for `%s`, got `%s`",
                    path, s);
  const char *b = neg || s[0] == '+' ? s + 1 : s;
  char *end;
  errno = 0;
  if ((b[0] == '0' && (b[1] == 'x' || b[1] == 'X')) || (b[0] == '0' && b[1] == 'o') ||
      (b[0] == '0' && b[1] == 'b')) {
    int base = b[1] == 'o' ? 8 : b[1] == 'b' ? 2 : 16;
    unsigned long long x = strtoull(b + 2, &end, base);
    if (*end == '\0' && end != b + 2 && errno == 0)
      diag_help(g, "write %s%llu", neg ? "-" : "", x);
    else
      diag_help(g, "write the number in decimal digits");
  } else if (strchr(s, '_')) {
    StrBuf sb;
    sb_init(&sb);
    for (const char *c = s; *c; c++)
      if (*c != '_') sb_putc(&sb, *c);
    diag_help(g, "write %s (no underscores)", sb.buf ? sb.buf : "");
    sb_free(&sb);
  } else {
    double x = strtod(s, &end);
    if (*end == '\0' && isfinite(x) && x == floor(x) && fabs(x) < 1e15)
      diag_help(g, "write %.0f", x);
    else if (strcmp(type, "number") == 0 || strstr(s, "inf") || strstr(s, "nan") ||
             strstr(s, "Inf") || strstr(s, "NaN"))
      diag_help(g, "a count is a whole number from %lld to %lld", (long long)lo, (long long)hi);
    else
      diag_help(g, "a count is written as plain digits, e.g. 8");
  }
}

/* Integer literal of a count. Accepted: decimal digits, with a leading
 * minus (so that negatives get a range error, not a syntax error). YAML 1.1
 * forms (0x10, 010, 1_000, 0o17, 0b101) and anything non-integral are
 * rejected with the decimal the writer probably meant. */
static bool read_int_literal(P *p, const YNode *v, const char *path, int64_t lo, int64_t hi,
                             const char *why, int64_t *out) {
  const char *s = v->str;
  if (v->style != YS_PLAIN) {
    Diag *g = diag_at(p->d, DIAG_E0103, v->loc, "expected an integer for `%s`, got a string", path);
    diag_help(g, "remove the quotes: write %s", s);
    return false;
  }
  if (is_yaml11_bool(s)) {
    Diag *g = diag_at(p->d, DIAG_E0110, v->loc,
                      "`%s` is a YAML 1.1 boolean, expected an integer for `%s`", s, path);
    diag_help(g, "write true/false for a boolean, or a number");
    return false;
  }
  const char *type = yaml_node_type_name(v);
  if (strcmp(type, "null") == 0 || strcmp(type, "boolean") == 0) {
    diag_at(p->d, DIAG_E0103, v->loc, "expected an integer for `%s`, got %s", path,
            strcmp(type, "null") == 0 ? "nothing (null)" : "a boolean");
    return false;
  }
  bool neg = s[0] == '-';
  const char *digits = neg ? s + 1 : s;
  size_t nd = strlen(digits);
  bool all = nd > 0;
  for (size_t i = 0; i < nd && all; i++) all = digits[i] >= '0' && digits[i] <= '9';
  if (all && nd > 1 && digits[0] == '0') {
    octal_error(p, v, path, neg, digits);
    return false;
  }
  if (!all) {
    not_decimal_error(p, v, path, lo, hi, neg);
    return false;
  }
  errno = 0;
  char *end;
  long long x = strtoll(s, &end, 10);
  bool below = neg && errno == ERANGE; /* past -2^63: read before diag_at can change errno */
  if (errno == ERANGE || x > hi) {
    Diag *g = diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`: expected at most %lld%s", s,
                      path, (long long)hi, hi == INT64_MAX ? " (2^63 - 1)" : "");
    if (below) {
      free(g->msg);
      g->msg = rp_sprintf("`%s` is out of range for `%s`: expected at least %lld", s, path, (long long)lo);
    }
    /* the limit's reason only where the value is over the limit */
    diag_help(g, "%s", why && !below ? why : "counts are 64-bit integers; check the value");
    return false;
  }
  if (x < lo) {
    Diag *g = diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`: expected at least %lld", s, path,
                      (long long)lo);
    if (lo == 1) diag_help(g, "`%s` is a positive count", path);
    else if (lo == 0) diag_help(g, "`%s` cannot be negative", path);
    return false;
  }
  *out = x;
  return true;
}

/* The common head of every field reader: finds the value; when absent,
 * reports E0102 if required and fills in the default position. */
static const YNode *field(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key,
                          bool required, SrcLoc *loc, bool *set, char **fpath) {
  *loc = m ? m->loc : sec;
  *set = false;
  *fpath = join_path(p, path, key);
  const YNode *v = yaml_map_get(m, key);
  if (!v) {
    if (required) missing(p, m, path, key);
    return NULL;
  }
  *loc = v->loc;
  return v;
}

static void rd_int_why(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key,
                       SInt *o, bool required, int64_t def, int64_t lo, int64_t hi,
                       const char *why) {
  char *fp;
  o->v = def;
  const YNode *v = field(p, m, sec, path, key, required, &o->loc, &o->set, &fp);
  if (!v || !want_scalar(p, v, fp, "an integer")) return;
  if (read_int_literal(p, v, fp, lo, hi, why, &o->v)) o->set = true;
  else o->v = def;
}

static void rd_int(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SInt *o,
                   bool required, int64_t def, int64_t lo, int64_t hi) {
  rd_int_why(p, m, sec, path, key, o, required, def, lo, hi, NULL);
}

/* A count bounded by one of the limits above. */
static void rd_lim(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SInt *o,
                   bool required, int64_t def, int64_t lo, const Limit *lim) {
  rd_int_why(p, m, sec, path, key, o, required, def, lo, lim->max, lim->why);
}

static void rd_bool(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SBool *o,
                    bool def) {
  char *fp;
  o->v = def;
  const YNode *v = field(p, m, sec, path, key, false, &o->loc, &o->set, &fp);
  if (!v || !want_scalar(p, v, fp, "true or false")) return;
  if (v->style == YS_PLAIN && strcmp(v->str, "true") == 0) {
    o->v = true;
    o->set = true;
  } else if (v->style == YS_PLAIN && strcmp(v->str, "false") == 0) {
    o->v = false;
    o->set = true;
  } else if (v->style == YS_PLAIN && is_yaml11_bool(v->str)) {
    Diag *g = diag_at(p->d, DIAG_E0110, v->loc, "`%s` is a YAML 1.1 boolean word for `%s`", v->str, fp);
    diag_help(g, "write true or false");
  } else {
    Diag *g = diag_at(p->d, DIAG_E0103, v->loc, "expected true or false for `%s`, got the %s `%s`", fp,
                      yaml_node_type_name(v), v->str);
    diag_help(g, "write true or false");
  }
}

static void rd_str(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SStr *o,
                   bool required, const char *def) {
  char *fp;
  o->v = def;
  const YNode *v = field(p, m, sec, path, key, required, &o->loc, &o->set, &fp);
  if (!v || !want_scalar(p, v, fp, "a string")) return;
  if (v->style == YS_PLAIN && strcmp(yaml_node_type_name(v), "null") == 0) {
    diag_at(p->d, DIAG_E0103, v->loc, "expected a string for `%s`, got nothing (null)", fp);
    return;
  }
  o->v = v->str;
  o->set = true;
}

static bool enum_word(P *p, const YNode *v, const char *fp, const char *const *words, size_t nw, int *out);
static void rd_enum(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SEnum *o,
                    bool required, int def, const char *const *words, size_t nw) {
  char *fp;
  o->v = def;
  const YNode *v = field(p, m, sec, path, key, required, &o->loc, &o->set, &fp);
  if (v && enum_word(p, v, fp, words, nw, &o->v)) o->set = true;
}

/* The index of scalar v in words[] (E0103 for a non-scalar, E0109 naming
 * fp for another word). */
static bool enum_word(P *p, const YNode *v, const char *fp, const char *const *words, size_t nw, int *out) {
  if (!want_scalar(p, v, fp, "a word")) return false;
  for (size_t i = 0; i < nw; i++)
    if (strcmp(v->str, words[i]) == 0) {
      *out = (int)i;
      return true;
    }
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < nw; i++) sb_printf(&sb, "%s%s", i ? (i + 1 == nw ? " or " : ", ") : "", words[i]);
  Diag *g = diag_at(p->d, DIAG_E0109, v->loc, "unknown value `%s` for `%s`: expected %s", v->str, fp,
                    sb.buf);
  const char *c = diag_closest(v->str, words, nw);
  if (c) diag_help(g, "did you mean `%s`?", c);
  sb_free(&sb);
  return false;
}

/* A quantity with a unit. Memory goes to an SInt (exact bytes), the other
 * kinds to an SNum; pass the one that applies. min_zero allows 0. */
static void rd_qty(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key,
                   UnitKind kind, SInt *oi, SNum *on, bool required, double def, bool min_zero) {
  char *fp;
  SrcLoc loc;
  bool set;
  if (oi) oi->v = (int64_t)def;
  if (on) on->v = def;
  const YNode *v = field(p, m, sec, path, key, required, &loc, &set, &fp);
  if (oi) oi->loc = loc, oi->set = false;
  if (on) on->loc = loc, on->set = false;
  if (!v || !want_scalar(p, v, fp, units_kind_name(kind))) return;
  const char *type = yaml_node_type_name(v);
  UnitValue u;
  UnitsStatus st = strcmp(type, "null") == 0 ? UNITS_BAD_NUMBER : units_parse(v->str, kind, &u);
  Diag *g = NULL;
  switch (st) {
  case UNITS_OK:
    if (u.value < 0 || (!min_zero && u.value <= 0)) {
      g = diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`: expected a %s %s",
                  v->str, fp, min_zero ? "non-negative" : "positive", units_kind_name(kind));
      break;
    }
    if (oi) oi->v = u.bytes, oi->set = true;
    if (on) on->v = u.value, on->set = true;
    return;
  case UNITS_MISSING_UNIT:
    g = diag_at(p->d, DIAG_E0106, v->loc, "`%s` is a bare number, expected a %s with its unit for `%s`",
                v->str, units_kind_name(kind), fp);
    diag_help(g, "write it with a unit, e.g. `%s`; accepted units: %s", units_example(kind),
              units_accepted(kind));
    return;
  case UNITS_WRONG_KIND:
    g = diag_at(p->d, DIAG_E0107, v->loc, "`%s` is a %s, expected a %s for `%s`", v->str,
                units_kind_name(u.got), units_kind_name(kind), fp);
    diag_help(g, "write a %s, e.g. `%s`; accepted units: %s", units_kind_name(kind),
              units_example(kind), units_accepted(kind));
    return;
  case UNITS_UNKNOWN_UNIT:
    g = diag_at(p->d, DIAG_E0107, v->loc, "unknown unit `%s` in `%s` for `%s`", u.unit, v->str, fp);
    if (u.suggest)
      diag_help(g, "did you mean `%s`?%s", u.suggest,
                kind == UNIT_MEMORY && strchr(u.unit, 'b') ? " (a lower-case b is a bit; memory is written in bytes)" : "");
    else
      diag_help(g, "accepted units for a %s: %s", units_kind_name(kind), units_accepted(kind));
    return;
  case UNITS_BAD_NUMBER:
    g = diag_at(p->d, DIAG_E0108, v->loc, "cannot read a number in `%s` for `%s`", v->str, fp);
    diag_help(g, "write decimal digits and a unit, e.g. `%s`", units_example(kind));
    return;
  case UNITS_NOT_WHOLE:
    g = diag_at(p->d, DIAG_E0108, v->loc, "`%s` is not a whole number of bytes for `%s`", v->str, fp);
    diag_help(g, "use a smaller unit, e.g. MiB instead of GiB");
    return;
  case UNITS_OVERFLOW:
    g = diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`", v->str, fp);
    diag_help(g, "%s", kind == UNIT_MEMORY ? "memory must fit in 2^63-1 bytes" : "use a finite value");
    return;
  case UNITS_NEGATIVE:
    g = diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`: expected a %s %s", v->str,
                fp, min_zero ? "non-negative" : "positive", units_kind_name(kind));
    return;
  }
}

/* A plain number without unit (fractions such as memory.utilization):
 * accepted range (lo, hi]. */
static void rd_frac(P *p, const YNode *m, SrcLoc sec, const char *path, const char *key, SNum *o,
                    double def, double lo, double hi) {
  char *fp;
  o->v = def;
  const YNode *v = field(p, m, sec, path, key, false, &o->loc, &o->set, &fp);
  if (!v || !want_scalar(p, v, fp, "a number")) return;
  const char *type = yaml_node_type_name(v);
  if (v->style != YS_PLAIN || (strcmp(type, "integer") != 0 && strcmp(type, "number") != 0)) {
    Diag *g = diag_at(p->d, DIAG_E0103, v->loc, "expected a number for `%s`, got `%s`", fp, v->str);
    diag_help(g, "write a plain number, e.g. 0.9");
    return;
  }
  double x = strtod(v->str, NULL);
  if (!isfinite(x) || x <= lo || x > hi) {
    diag_at(p->d, DIAG_E0105, v->loc, "`%s` is out of range for `%s`: expected more than %g and at most %g",
            v->str, fp, lo, hi);
    return;
  }
  o->v = x;
  o->set = true;
}

/* ---------------------------------------------------------------------- */
/* Presets: catalog lookup and key-by-key merge. */

const char *spec_catalog_dir(void) {
  const char *e = getenv("RANKPLAN_CATALOG");
  if (e && *e) return e;
  return rp_data_catalog();
}

static bool preset_name_ok(const char *s) {
  if (!*s || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'))) return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '.' || *c == '-'))
      return false;
  return strlen(s) <= 64;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names of the entries of one catalog kind, sorted (caller frees). */
static size_t catalog_names(const char *dir, char ***out) {
  RP_VEC(char *) v = {0};
  DIR *dp = opendir(dir);
  if (dp) {
    struct dirent *e;
    while ((e = readdir(dp))) {
      size_t n = strlen(e->d_name);
      if (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) rp_vec_push(&v, rp_strndup(e->d_name, n - 5));
    }
    closedir(dp);
  }
  if (v.len) qsort(v.items, v.len, sizeof *v.items, cmp_str);
  *out = v.items;
  return v.len;
}

/* The path shown in diagnostics for a catalog file: relative to the project
 * when the catalog is the bundled one, so messages do not depend on where
 * the source tree lives. */
char *spec_catalog_display(const char *dir, const char *kind, const char *name) {
  char *a = realpath(dir, NULL), *b = realpath(RP_SOURCE_ROOT "/plans/catalog", NULL);
  bool bundled = a && b && strcmp(a, b) == 0;
  free(a);
  free(b);
  return bundled ? rp_sprintf("plans/catalog/%s/%s.yaml", kind, name)
                 : rp_sprintf("%s/%s/%s.yaml", dir, kind, name);
}

static YNode *merge(P *p, const YNode *base, const YNode *over, const char *skip) {
  YNode *r = yaml_arena_alloc(p->a, sizeof *r);
  *r = *over;
  r->pairs = yaml_arena_alloc(p->a, (base->n + over->n + 1) * sizeof(YPair));
  r->n = 0;
  for (size_t i = 0; i < base->n; i++) {
    YPair bp = base->pairs[i];
    YNode *ov = yaml_map_get(over, bp.key->str);
    if (ov && bp.val->kind == YN_MAP && ov->kind == YN_MAP) {
      bp.val = merge(p, bp.val, ov, NULL);
    } else if (ov) {
      for (size_t j = 0; j < over->n; j++)
        if (over->pairs[j].val == ov) bp = over->pairs[j];
    }
    r->pairs[r->n++] = bp;
  }
  for (size_t j = 0; j < over->n; j++) {
    const char *k = over->pairs[j].key->str;
    if ((skip && strcmp(k, skip) == 0) || yaml_map_get(base, k)) continue;
    r->pairs[r->n++] = over->pairs[j];
  }
  return r;
}

/* The entries that are word in another case, or extend it by whole
 * dash-separated parts ("h100" -> h100-nvl, h100-pcie, h100-sxm),
 * listed in sb; how many.
 * Catalog names carry the variant after the family, so a family name is
 * nearer to them than an edit-distance neighbour ("h100" -> b200). */
static size_t preset_extensions(const char *word, const char *const *names, size_t nn, StrBuf *sb) {
  size_t wl = strlen(word), n = 0;
  for (size_t i = 0; i < nn; i++) {
    if (strlen(names[i]) < wl || (names[i][wl] != '-' && names[i][wl] != '\0') ||
        strncasecmp(names[i], word, wl) != 0)
      continue;
    sb_printf(sb, "%s`%s`", n ? ", " : "", names[i]);
    n++;
  }
  return n;
}

/* E0111 for a preset name with no catalog file: the entries that extend
 * it, or the closest entry, or the list of entries, or where the empty
 * catalog is. */
static Diag *preset_unknown(P *p, const YNode *v, const char *kind, const char *path,
                            const char *dir, const char *const *names, size_t nn) {
  Diag *g = diag_at(p->d, DIAG_E0111, v->loc, "unknown %s preset `%s`", path, v->str);
  StrBuf ext;
  sb_init(&ext);
  size_t ne = preset_extensions(v->str, names, nn, &ext);
  const char *c = ne ? NULL : diag_closest(v->str, names, nn);
  if (ne) {
    diag_help(g, "did you mean %s%s?", ne > 1 ? "one of " : "", ext.buf);
  } else if (c) {
    diag_help(g, "did you mean `%s`?", c);
  } else if (nn) {
    StrBuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < nn; i++) sb_printf(&sb, "%s%s", i ? ", " : "", names[i]);
    char *shown = spec_catalog_display(p->catalog_dir, kind, "");
    shown[strlen(shown) - strlen("/.yaml")] = '\0';
    diag_help(g, "catalog entries in %s: %s", shown, sb.buf);
    free(shown);
    sb_free(&sb);
  } else {
    diag_help(g, "the catalog directory %s has no entries; set RANKPLAN_CATALOG or --catalog", dir);
    diag_note(g, "catalog: %s", p->catalog_dir);
  }
  sb_free(&ext);
  return g;
}

/* Resolves `preset:` in a model or hardware mapping: returns the merged
 * mapping (or m itself when there is no preset, or on error), and the
 * catalog entry's own mapping in *entry (NULL without one). */
static const YNode *apply_preset(P *p, const YNode *m, const char *kind, const char *path, SStr *preset,
                                 const YNode **entry) {
  *entry = NULL;
  preset->loc = m->loc;
  preset->set = false;
  preset->v = NULL;
  const YNode *v = yaml_map_get(m, "preset");
  if (!v) return m;
  char *fp = join_path(p, path, "preset");
  if (!want_scalar(p, v, fp, "a catalog entry name")) return m;
  preset->loc = v->loc;
  char *dir = rp_sprintf("%s/%s", p->catalog_dir, kind);
  char **names;
  size_t nn = catalog_names(dir, &names);
  const YNode *result = m;
  char *file = rp_sprintf("%s/%s.yaml", dir, v->str);
  char *text = NULL;
  size_t len = 0;
  int err = preset_name_ok(v->str) ? rp_read_file(file, SPEC_MAX_BYTES, &text, &len) : ENOENT;
  if (err == RP_ENOTREG) {
    Diag *g = diag_at(p->d, DIAG_E0111, v->loc, "unknown %s preset `%s`", path, v->str);
    diag_note(g, "%s is %s, not a regular file; it was not read", file, rp_file_kind(file));
    diag_help(g, "a catalog entry is a YAML file: replace it, or pick another entry");
    goto out;
  }
  if (err) {
    Diag *g = preset_unknown(p, v, kind, path, dir, (const char *const *)names, nn);
    if (err != ENOENT && preset_name_ok(v->str)) diag_note(g, "%s: %s", file, strerror(err));
    goto out;
  }
  char *shown = spec_catalog_display(p->catalog_dir, kind, v->str);
  const char *iname = diags_add_source(p->d, shown, text, len);
  free(shown);
  int before = p->d->nerrors;
  YNode *root = yaml_load(p->d, p->a, iname, text, len);
  if (!root || p->d->nerrors > before) {
    Diag *g = diag_at(p->d, DIAG_E0118, v->loc, "catalog entry `%s` cannot be read", v->str);
    diag_note(g, "see the errors reported in %s", iname);
    goto out;
  }
  if (root->kind != YN_MAP || yaml_map_get(root, "preset")) {
    Diag *g = diag_at(p->d, DIAG_E0118, v->loc, "catalog entry `%s` is invalid", v->str);
    diag_note(g, "%s must be a mapping of %s keys without `preset:`", iname, path);
    goto out;
  }
  preset->v = v->str;
  preset->set = true;
  *entry = root;
  result = merge(p, root, m, "preset");
out:
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
  free(text);
  free(file);
  free(dir);
  return result;
}

/* Resolves `hf_config:` in the model mapping: the config is imported
 * (hf_import.c) and its YAML merged under the keys written beside it, as
 * a preset's is. Returns m itself when absent or on error. */
static const YNode *apply_hf_config(P *p, const YNode *m, const char *path, SStr *out) {
  out->loc = m->loc;
  const YNode *v = yaml_map_get(m, "hf_config");
  const char *field = join_path(p, path, "hf_config");
  if (!v || !want_scalar(p, v, field, "a path to a config.json")) return m;
  if (yaml_map_get(m, "preset")) {
    Diag *g = diag_at(p->d, DIAG_E0152, v->loc, "`%s.hf_config` and `%s.preset` both give the model", path,
                      path);
    diag_help(g, "keep one of them; keys written beside it override its values");
    return m;
  }
  const char *yname = NULL;
  char *yaml = hf_import_for_spec(p->d, p->s->file, v->str, field, v->loc, &yname);
  if (!yaml) return m;
  YNode *root = yaml_load(p->d, p->a, yname, yaml, strlen(yaml));
  free(yaml);
  RP_ASSERT(root && root->kind == YN_MAP); /* the import writes a mapping */
  out->v = arena_strdup(p, v->str);
  out->loc = v->loc;
  out->set = true;
  return merge(p, root, m, "hf_config");
}

/* ---------------------------------------------------------------------- */
/* Sections. */

#define I64MAX INT64_MAX

/* model.moe's group-limited routing and dispatch/combine dtypes
 * (docs/spec.md, "model.moe"; docs/cost-model.md, "MoE dispatch and
 * combine"). */
static void parse_moe_routing(P *p, const YNode *moe, SrcLoc ms, const char *pm, ModelSpec *mo) {
  rd_lim(p, moe, ms, pm, "groups", &mo->moe.groups, false, 0, 1, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "group_top_k", &mo->moe.group_top_k, false, 0, 1, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "redundant_experts", &mo->moe.redundant_experts, false, 0, 0, &LIM_DIM);
  rd_enum(p, moe, ms, pm, "dispatch_dtype", &mo->moe.dispatch_dtype, false, DT_BF16,
          dtype_names, RP_ARRAY_LEN(dtype_names));
  rd_enum(p, moe, ms, pm, "combine_dtype", &mo->moe.combine_dtype, false, DT_BF16,
          dtype_names, RP_ARRAY_LEN(dtype_names));
  rd_enum(p, moe, ms, pm, "shared_placement", &mo->moe.shared_placement, false, SHARED_TP,
          shared_placement_names, RP_ARRAY_LEN(shared_placement_names));
  SInt *g = &mo->moe.groups, *gk = &mo->moe.group_top_k;
  if (gk->set && !g->set) {
    Diag *d = diag_at(p->d, DIAG_E0102, gk->loc, "`%s.group_top_k` needs `%s.groups`", pm, pm);
    diag_help(d, "give both (the model's config.json: n_group and topk_group), or neither");
  } else if (g->set && gk->set && gk->v > g->v) {
    diag_at(p->d, DIAG_E0105, gk->loc,
            "`%lld` is out of range for `%s.group_top_k`: expected at most `groups` (%lld)",
            (long long)gk->v, pm, (long long)g->v);
  } else if (g->set && mo->moe.experts.set && mo->moe.experts.v % g->v != 0) {
    diag_at(p->d, DIAG_E0105, g->loc,
            "`%lld` is out of range for `%s.groups`: it must divide the %lld experts",
            (long long)g->v, pm, (long long)mo->moe.experts.v);
  }
}

/* model.attention's per-layer types: sliding_window, chunk_size and
 * layer_types (one word per layer). A list of another length than
 * `layers`, an unknown word, or a type whose size is not given is an error
 * naming the item. */
static void parse_layer_types(P *p, const YNode *a, SrcLoc as, const char *pa, ModelSpec *mo) {
  rd_lim(p, a, as, pa, "sliding_window", &mo->attention.sliding_window, false, 0, 1, &LIM_TOKENS);
  rd_lim(p, a, as, pa, "chunk_size", &mo->attention.chunk_size, false, 0, 1, &LIM_TOKENS);
  const YNode *l = yaml_map_get(a, "layer_types");
  mo->attention.layer_types.loc = l ? l->loc : as;
  if (!l && mo->attention.sliding_window.set && mo->attention.chunk_size.set) {
    Diag *g = diag_at(p->d, DIAG_E0102, mo->attention.chunk_size.loc,
                      "`%s` gives both sliding_window and chunk_size: `layer_types` must say which layers use which",
                      pa);
    diag_help(g, "list one of full, sliding or chunked per layer in `%s.layer_types`", pa);
  }
  if (!l) return;
  char *fp = join_path(p, pa, "layer_types");
  if (l->kind != YN_SEQ) {
    Diag *g = diag_at(p->d, DIAG_E0103, l->loc, "expected a sequence of layer types for `%s`, got a %s", fp,
                      yaml_node_type_name(l));
    diag_help(g, "write one of full, sliding or chunked per layer, e.g. [sliding, full]");
    return;
  }
  if (mo->layers.set && l->n != (size_t)mo->layers.v) {
    Diag *g = diag_at(p->d, DIAG_E0105, l->loc, "`%s` has %zu entries: expected one per layer (%lld)", fp,
                      l->n, (long long)mo->layers.v);
    diag_help(g, "list the type of every layer, in order");
    return;
  }
  SEnum *it = yaml_arena_alloc(p->a, (l->n ? l->n : 1) * sizeof *it);
  bool ok = true;
  /* a size given but out of range was reported at its place already */
  bool told[3] = {false, yaml_map_get(a, "sliding_window") != NULL, yaml_map_get(a, "chunk_size") != NULL};
  for (size_t i = 0; i < l->n; i++) {
    char *ip = rp_sprintf("%s[%zu]", fp, i);
    it[i] = (SEnum){LAYER_FULL, l->items[i]->loc, true};
    ok = enum_word(p, l->items[i], ip, layer_attn_names, RP_ARRAY_LEN(layer_attn_names), &it[i].v) && ok;
    free(ip);
    const SInt *need = it[i].v == LAYER_SLIDING ? &mo->attention.sliding_window
                       : it[i].v == LAYER_CHUNKED ? &mo->attention.chunk_size : NULL;
    if (need && !need->set && !told[it[i].v]) {
      told[it[i].v] = true;
      Diag *g = diag_at(p->d, DIAG_E0102, l->items[i]->loc, "`%s[%zu]` is %s, but `%s.%s` is not given", fp, i,
                        layer_attn_names[it[i].v], pa, it[i].v == LAYER_SLIDING ? "sliding_window" : "chunk_size");
      diag_help(g, "give the window (or chunk) in tokens beside the layer types");
      ok = false;
    }
  }
  mo->attention.layer_types.items = it;
  mo->attention.layer_types.len = l->n;
  mo->attention.layer_types.set = ok;
}

/* model.dtype: a mapping, or one word for weights, kv_cache and
 * activations alike (attention_weights follows weights unless set). */
static void parse_model_dtype(P *p, const YNode *m, SrcLoc sec, const char *path, ModelSpec *mo) {
  const char *pd = join_path(p, path, "dtype");
  const YNode *dt = yaml_map_get(m, "dtype");
  mo->dtype.loc = dt ? dt->loc : sec;
  if (dt && dt->kind == YN_SCALAR) {
    rd_enum(p, m, sec, path, "dtype", &mo->dtype.weights, false, DT_BF16, dtype_names,
            RP_ARRAY_LEN(dtype_names));
    mo->dtype.kv_cache = mo->dtype.weights;
    mo->dtype.activations = mo->dtype.weights;
  } else {
    SrcLoc ds;
    const YNode *dm = section(p, m, "dtype", pd, sec, &ds);
    check_keys(p, dm, pd, KEYS("weights", "kv_cache", "activations", "attention_weights"));
    rd_enum(p, dm, ds, pd, "weights", &mo->dtype.weights, false, DT_BF16, dtype_names,
            RP_ARRAY_LEN(dtype_names));
    rd_enum(p, dm, ds, pd, "attention_weights", &mo->dtype.attention_weights, false, DT_BF16,
            dtype_names, RP_ARRAY_LEN(dtype_names));
    rd_enum(p, dm, ds, pd, "kv_cache", &mo->dtype.kv_cache, false, DT_BF16, dtype_names,
            RP_ARRAY_LEN(dtype_names));
    rd_enum(p, dm, ds, pd, "activations", &mo->dtype.activations, false, DT_BF16,
            dtype_names, RP_ARRAY_LEN(dtype_names));
  }
}

/* The `attention` section of the model mapping m at `path`; returns it
 * (NULL when absent) and its place in *as. */
static const YNode *parse_model_attention(P *p, const YNode *m, SrcLoc sec, const char *path,
                                          const char *pa, ModelSpec *mo, SrcLoc *as) {
  const YNode *a = section(p, m, "attention", pa, sec, as);
  mo->attention.loc = *as;
  if (m && !yaml_map_get(m, "attention")) missing(p, m, path, "attention");
  rd_enum(p, a, *as, pa, "kind", &mo->attention.kind, a != NULL, ATTN_GQA, attn_names,
          RP_ARRAY_LEN(attn_names));
  bool mla = mo->attention.kind.v == ATTN_MLA;
  if (mla)
    check_keys(p, a, pa, KEYS("kind", "heads", "kv_heads", "head_dim", "qk_norm", "qkv_bias",
                              "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                              "v_head_dim", "sliding_window", "chunk_size", "layer_types"));
  else
    check_keys(p, a, pa, KEYS("kind", "heads", "kv_heads", "head_dim", "qk_norm", "qkv_bias",
                              "sliding_window", "chunk_size", "layer_types"));
  rd_lim(p, a, *as, pa, "heads", &mo->attention.heads, a != NULL, 1, 1, &LIM_DIM);
  int64_t kv_def = mo->attention.kind.v == ATTN_GQA ? 1
                   : mo->attention.kind.v == ATTN_MHA ? mo->attention.heads.v : 1;
  rd_lim(p, a, *as, pa, "kv_heads", &mo->attention.kv_heads,
         a != NULL && mo->attention.kind.v == ATTN_GQA, kv_def, 1, &LIM_DIM);
  rd_bool(p, a, *as, pa, "qk_norm", &mo->attention.qk_norm, false);
  rd_bool(p, a, *as, pa, "qkv_bias", &mo->attention.qkv_bias, false);
  if (mla) {
    rd_lim(p, a, *as, pa, "q_lora_rank", &mo->attention.q_lora_rank, false, 0, 0, &LIM_DIM);
    rd_lim(p, a, *as, pa, "kv_lora_rank", &mo->attention.kv_lora_rank, true, 1, 1, &LIM_DIM);
    rd_lim(p, a, *as, pa, "qk_nope_head_dim", &mo->attention.qk_nope_head_dim, true, 1, 1, &LIM_DIM);
    rd_lim(p, a, *as, pa, "qk_rope_head_dim", &mo->attention.qk_rope_head_dim, true, 1, 1, &LIM_DIM);
    rd_lim(p, a, *as, pa, "v_head_dim", &mo->attention.v_head_dim, true, 1, 1, &LIM_DIM);
    int64_t hd = 0;
    if (!ck_add(mo->attention.qk_nope_head_dim.v, mo->attention.qk_rope_head_dim.v, &hd)) hd = 1;
    rd_lim(p, a, *as, pa, "head_dim", &mo->attention.head_dim, false, hd, 1, &LIM_DIM);
  } else {
    rd_lim(p, a, *as, pa, "head_dim", &mo->attention.head_dim, a != NULL, 1, 1, &LIM_DIM);
  }
  return a;
}

/* The `moe` (optional) and `ffn` sections of the model mapping m. */
static void parse_model_moe_ffn(P *p, const YNode *m, SrcLoc sec, const char *path, ModelSpec *mo) {
  const char *pm = join_path(p, path, "moe"), *pf = join_path(p, path, "ffn");
  /* moe (optional) */
  SrcLoc ms;
  const YNode *moe = section(p, m, "moe", pm, sec, &ms);
  mo->moe.loc = ms;
  mo->moe.present = moe != NULL;
  check_keys(p, moe, pm, KEYS("experts", "top_k", "shared_experts", "expert_intermediate_size",
                                       "dense_layers", "router_bias", "groups", "group_top_k",
                                       "dispatch_dtype", "combine_dtype", "redundant_experts",
                                  "shared_placement"));
  rd_lim(p, moe, ms, pm, "experts", &mo->moe.experts, moe != NULL, 0, 1, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "top_k", &mo->moe.top_k, moe != NULL, 0, 1, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "shared_experts", &mo->moe.shared_experts, false, 0, 0, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "expert_intermediate_size", &mo->moe.expert_intermediate_size,
         moe != NULL, 0, 1, &LIM_DIM);
  rd_lim(p, moe, ms, pm, "dense_layers", &mo->moe.dense_layers, false, 0, 0, &LIM_LAYERS);
  rd_bool(p, moe, ms, pm, "router_bias", &mo->moe.router_bias, false);
  parse_moe_routing(p, moe, ms, pm, mo);

  /* ffn: required when some layer is dense */
  bool dense = !mo->moe.present || mo->moe.dense_layers.v > 0;
  SrcLoc fs;
  const YNode *f = section(p, m, "ffn", pf, sec, &fs);
  mo->ffn.loc = fs;
  if (m && dense && !yaml_map_get(m, "ffn")) missing(p, m, path, "ffn");
  check_keys(p, f, pf, KEYS("intermediate_size"));
  rd_lim(p, f, fs, pf, "intermediate_size", &mo->ffn.intermediate_size, f != NULL, 0, 1, &LIM_DIM);
}

/* model.rope's keys against the model's shape and each other. */
static void parse_rope_shape(P *p, const YNode *r, const char *path, const char *pr, const ModelSpec *mo) {
  const SInt *rd = &mo->rope.rotary_dim;
  RopeScaling sc = (RopeScaling)mo->rope.scaling.v;
  if (rd->set && mo->attention.kind.v == ATTN_MLA)
    diag_help(diag_at(p->d, DIAG_E0101, rd->loc, "`%s.rotary_dim` does not apply to MLA attention", pr),
              "an MLA model rotates `qk_rope_head_dim` dimensions of each head; remove `rotary_dim`");
  else if (rd->set && mo->attention.head_dim.v > 0 && rd->v > mo->attention.head_dim.v)
    diag_at(p->d, DIAG_E0105, rd->loc, "`%lld` is out of range for `%s.rotary_dim`: expected at most head_dim (%lld)",
            (long long)rd->v, pr, (long long)mo->attention.head_dim.v);
  if (mo->rope.factor.set && sc == ROPE_NONE && !yaml_map_get(r, "scaling"))
    diag_help(diag_at(p->d, DIAG_E0102, mo->rope.factor.loc, "`%s.factor` needs `%s.scaling`", pr, pr),
              "name the scaling rope_scaling.rope_type gives (linear, dynamic, yarn or llama3)");
  if (mo->rope.original_max_position_embeddings.set && sc != ROPE_YARN)
    diag_help(diag_at(p->d, DIAG_E0102, mo->rope.original_max_position_embeddings.loc,
                      "`%s.original_max_position_embeddings` is read only with `%s.scaling: yarn`", pr, pr),
              "remove it, or set the scaling the model's config.json gives");
  if (mo->rope.local_base.v && !mo->attention.sliding_window.set)
    diag_help(diag_at(p->d, DIAG_E0102, mo->rope.local_base.loc,
                      "`%s.local_base` needs sliding-window layers (`%s.attention.sliding_window`)", pr, path),
              "a second RoPE base applies to the sliding layers only (Gemma 3's rope_local_base_freq)");
}

/* model.rope (optional): the rotated head dimensions, the context
 * scaling (Hugging Face rope_scaling) and a second base for the sliding
 * layers. factor is required with a scaling, original_max_position_
 * embeddings with yarn; rotary_dim is at most the head dim and not set on
 * MLA models (they rotate qk_rope_head_dim); local_base needs sliding
 * layers. */
static void parse_model_rope(P *p, const YNode *m, SrcLoc sec, const char *path, ModelSpec *mo) {
  const char *pr = join_path(p, path, "rope");
  SrcLoc rs;
  const YNode *r = section(p, m, "rope", pr, sec, &rs);
  mo->rope.loc = rs;
  check_keys(p, r, pr, KEYS("rotary_dim", "scaling", "factor", "original_max_position_embeddings", "local_base"));
  rd_lim(p, r, rs, pr, "rotary_dim", &mo->rope.rotary_dim, false, 0, 1, &LIM_DIM);
  rd_enum(p, r, rs, pr, "scaling", &mo->rope.scaling, false, ROPE_NONE, rope_scaling_names,
          RP_ARRAY_LEN(rope_scaling_names));
  RopeScaling sc = (RopeScaling)mo->rope.scaling.v;
  rd_frac(p, r, rs, pr, "factor", &mo->rope.factor, 1.0, 0.0, 1024.0);
  rd_lim(p, r, rs, pr, "original_max_position_embeddings", &mo->rope.original_max_position_embeddings, false, 0,
         1, &LIM_TOKENS);
  rd_bool(p, r, rs, pr, "local_base", &mo->rope.local_base, false);
  if (!r) return;
  if (sc != ROPE_NONE && !mo->rope.factor.set && !yaml_map_get(r, "factor"))
    diag_help(diag_at(p->d, DIAG_E0102, mo->rope.scaling.loc, "`%s.scaling: %s` needs `%s.factor`", pr,
                      rope_scaling_names[sc], pr),
              "copy rope_scaling.factor from the model's config.json");
  if (sc == ROPE_YARN && !yaml_map_get(r, "original_max_position_embeddings"))
    diag_help(diag_at(p->d, DIAG_E0102, mo->rope.scaling.loc,
                      "`%s.scaling: yarn` needs `%s.original_max_position_embeddings`", pr, pr),
              "copy rope_scaling.original_max_position_embeddings from the model's config.json");
  parse_rope_shape(p, r, path, pr, mo);
}

/* The weights dtype word a model mapping writes (`dtype: W` or
 * `dtype: {weights: W}`), or NULL. */
static const YNode *weights_word(const YNode *m) {
  const YNode *dt = m ? yaml_map_get(m, "dtype") : NULL;
  if (dt && dt->kind == YN_MAP) dt = yaml_map_get(dt, "weights");
  return dt && dt->kind == YN_SCALAR ? dt : NULL;
}

static bool is_word(const char *w, const char *const *words, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(w, words[i]) == 0) return true;
  return false;
}

static bool half_word(const char *w) { return strcmp(w, "bf16") == 0 || strcmp(w, "fp16") == 0; }

/* W0122: the spec takes the preset's checkpoint (its `source`) but writes
 * weights of another dtype than the entry's; the engines load the
 * checkpoint as it is stored, so the launch files would not run the
 * weights the ledger counts. */
static void check_preset_source(P *p, const YNode *written, const YNode *entry, const char *path,
                                const ModelSpec *mo) {
  if (!mo->source_preset) return;
  const YNode *w = weights_word(written), *e = weights_word(entry);
  const char *ew = e ? e->str : "bf16"; /* parse_model_dtype's default */
  if (!w || strcmp(w->str, ew) == 0 || !is_word(w->str, dtype_names, RP_ARRAY_LEN(dtype_names))) return;
  if (half_word(w->str) && half_word(ew)) return; /* same bytes; the engines cast on load */
  Diag *g = diag_at(p->d, DIAG_W0122, w->loc, "the preset's checkpoint `%s` holds %s weights, not %s",
                    mo->source.v, ew, w->str);
  diag_note(g, "the engines load the checkpoint `%s.source` names as it is stored; the plan counts %s weights",
            path, w->str);
  diag_help(g, "set `%s.source` to a checkpoint of the model with %s weights", path, w->str);
}

/* `architecture`: a Hugging Face model class name (architectures[0]), a
 * Python identifier, since the engines compare it as such. */
static void rd_architecture(P *p, const YNode *m, SrcLoc sec, const char *path, SStr *o) {
  rd_str(p, m, sec, path, "architecture", o, false, NULL);
  if (!o->set || rp_is_identifier(o->v)) return;
  Diag *g = diag_at(p->d, DIAG_E0103, o->loc, "`%s.architecture` `%s` is not a model class name", path, o->v);
  diag_help(g, "write the first entry of the config.json's `architectures`, e.g. `DeepseekV3ForCausalLM`");
  o->set = false;
  o->v = NULL;
}

/* One model mapping at `path` (`model`, or `model.draft` for the draft
 * model, which has no draft of its own). */
static void parse_model_map(P *p, const YNode *parent, const char *key, const char *path,
                            ModelSpec *mo) {
  SrcLoc sec;
  const YNode *m = section(p, parent, key, path, parent->loc, &sec);
  mo->loc = sec;
  const YNode *written = m, *entry = NULL;
  if (m) m = apply_hf_config(p, m, path, &mo->hf_config);
  if (m) m = apply_preset(p, m, "models", path, &mo->preset, &entry);
  else mo->preset.loc = sec;
  bool quiet = p->quiet_missing;
  p->quiet_missing = (yaml_map_get(m, "preset") && !mo->preset.set) ||
                     (yaml_map_get(m, "hf_config") && !mo->hf_config.set);
  bool top = strcmp(path, "model") == 0;
  if (top)
    check_keys(p, m, path, KEYS("preset", "hf_config", "name", "layers", "hidden_size", "vocab_size",
                                "tie_embeddings", "attention", "ffn", "moe", "dtype", "max_context",
                                "max_position_embeddings", "rope", "mtp_layers", "source", "revision",
                                "architecture", "draft"));
  else
    check_keys(p, m, path, KEYS("preset", "hf_config", "name", "layers", "hidden_size", "vocab_size",
                                "tie_embeddings", "attention", "ffn", "moe", "dtype", "max_context",
                                "max_position_embeddings", "rope", "mtp_layers", "source", "revision",
                                "architecture"));
  const char *pa = join_path(p, path, "attention");
  rd_str(p, m, sec, path, "name", &mo->name, false, mo->preset.v ? mo->preset.v : "");
  rd_lim(p, m, sec, path, "layers", &mo->layers, true, 1, 1, &LIM_LAYERS);
  rd_lim(p, m, sec, path, "hidden_size", &mo->hidden_size, true, 1, 1, &LIM_DIM);
  rd_lim(p, m, sec, path, "vocab_size", &mo->vocab_size, true, 1, 1, &LIM_DIM);
  rd_bool(p, m, sec, path, "tie_embeddings", &mo->tie_embeddings, false);
  rd_lim(p, m, sec, path, "max_context", &mo->max_context, true, 1, 1, &LIM_TOKENS);
  rd_lim(p, m, sec, path, "max_position_embeddings", &mo->max_position_embeddings, false, 1, 1, &LIM_TOKENS);
  rd_lim(p, m, sec, path, "mtp_layers", &mo->mtp_layers, false, 0, 0, &LIM_LAYERS);
  rd_str(p, m, sec, path, "source", &mo->source, false, NULL);
  rd_str(p, m, sec, path, "revision", &mo->revision, false, NULL);
  rd_architecture(p, m, sec, path, &mo->architecture);

  SrcLoc as;
  const YNode *a = parse_model_attention(p, m, sec, path, pa, mo, &as);
  parse_model_moe_ffn(p, m, sec, path, mo);
  parse_model_dtype(p, m, sec, path, mo);
  parse_layer_types(p, a, as, pa, mo);
  parse_model_rope(p, m, sec, path, mo);
  mo->source_preset = entry && mo->source.set && !yaml_map_get(written, "source");
  check_preset_source(p, written, entry, path, mo);
  p->quiet_missing = quiet;
  if (top && m && yaml_map_get(m, "draft")) {
    mo->draft = yaml_arena_alloc(p->a, sizeof *mo->draft);
    memset(mo->draft, 0, sizeof *mo->draft);
    parse_model_map(p, m, "draft", "model.draft", mo->draft);
  }
}

static void parse_model(P *p, const YNode *root) {
  parse_model_map(p, root, "model", "model", &p->s->model);
}

/* `hardware.hostnames` (one string per node, at most LIM_GPUS of them) or
 * `hardware.hostname_pattern`; their agreement with `nodes` is checked in
 * spec_check_structure. */
static void parse_hostnames(P *p, const YNode *m, SrcLoc sec) {
  HardwareSpec *h = &p->s->hardware;
  rd_str(p, m, sec, "hardware", "hostname_pattern", &h->hostname_pattern, false, NULL);
  const YNode *l = yaml_map_get(m, "hostnames");
  h->hostnames.loc = l ? l->loc : sec;
  if (!l) return;
  if (l->kind != YN_SEQ) {
    Diag *g = diag_at(p->d, DIAG_E0103, l->loc, "expected a sequence of host names for `hardware.hostnames`, got a %s",
                      yaml_node_type_name(l));
    diag_help(g, "write one host name per node, e.g. [gpu-0, gpu-1]");
    return;
  }
  if (l->n > (size_t)LIM_GPUS.max) {
    Diag *g = diag_at(p->d, DIAG_E0105, l->loc, "`hardware.hostnames` has %zu entries: expected at most %lld", l->n,
                      (long long)LIM_GPUS.max);
    diag_help(g, "%s", LIM_GPUS.why);
    return;
  }
  h->hostnames.items = yaml_arena_alloc(p->a, (l->n ? l->n : 1) * sizeof(SStr));
  bool ok = true;
  for (size_t i = 0; i < l->n; i++) {
    const YNode *v = l->items[i];
    char *ip = rp_sprintf("hardware.hostnames[%zu]", i);
    SStr *it = &h->hostnames.items[i];
    it->loc = v->loc;
    if (want_scalar(p, v, ip, "a host name")) {
      it->v = v->str;
      it->set = true;
    } else {
      ok = false;
    }
    free(ip);
  }
  h->hostnames.len = l->n;
  h->hostnames.set = ok;
}

/* spec_parse_file_hw: the hardware mapping as `{preset: NAME}` plus the
 * spec's own `nodes` and `nodes_per_rack` (the cluster's size), every
 * other figure from the catalog entry. */
static const YNode *hw_what_if(P *p, const YNode *m) {
  static const char *const keep[] = {"nodes", "nodes_per_rack"};
  YNode *out = yaml_arena_alloc(p->a, sizeof *out);
  memset(out, 0, sizeof *out);
  out->kind = YN_MAP;
  out->loc = m->loc;
  out->pairs = yaml_arena_alloc(p->a, 3 * sizeof *out->pairs);
  YNode *k = yaml_arena_alloc(p->a, 2 * sizeof *k);
  memset(k, 0, 2 * sizeof *k);
  k[0] = (YNode){.kind = YN_SCALAR, .loc = m->loc, .str = "preset", .len = 6, .style = YS_PLAIN};
  k[1] = (YNode){.kind = YN_SCALAR, .loc = m->loc, .str = p->hw_preset, .len = strlen(p->hw_preset),
                 .style = YS_PLAIN};
  out->pairs[out->n++] = (YPair){&k[0], &k[1]};
  for (size_t i = 0; i < m->n; i++)
    for (size_t j = 0; j < RP_ARRAY_LEN(keep); j++)
      if (strcmp(m->pairs[i].key->str, keep[j]) == 0) out->pairs[out->n++] = m->pairs[i];
  return out;
}

/* Under --what-if gpu=ENTRY, an entry that states no scale_out (h20 and
 * the AMD platforms leave the NICs to the spec) plans with the spec's own
 * `scale_out`, the cluster's network; an entry that states one keeps it. */
static const YNode *hw_what_if_nic(P *p, const YNode *merged, const YNode *own) {
  if (!p->hw_preset || !merged || yaml_map_get(merged, "scale_out")) return merged;
  for (size_t i = 0; own && i < own->n; i++)
    if (strcmp(own->pairs[i].key->str, "scale_out") == 0) {
      YNode *one = yaml_arena_alloc(p->a, sizeof *one);
      *one = (YNode){.kind = YN_MAP, .loc = own->loc, .n = 1};
      one->pairs = yaml_arena_alloc(p->a, sizeof *one->pairs);
      one->pairs[0] = own->pairs[i];
      return merge(p, merged, one, NULL);
    }
  return merged;
}

/* E0102 for a missing `scale_out`; under --what-if it names the entry. */
static void hw_missing_nic(P *p, const YNode *m) {
  Diag *g = missing(p, m, "hardware", "scale_out");
  if (g && p->hw_preset)
    diag_note(g, "`--what-if gpu=%s`: the entry states no scale_out (its platform has no NIC figure) "
                 "and the spec writes none; write `hardware.scale_out` with the cluster's NIC rate",
              p->hw_preset);
}

static void parse_hardware(P *p, const YNode *root) {
  HardwareSpec *h = &p->s->hardware;
  SrcLoc sec;
  const YNode *m = section(p, root, "hardware", "hardware", root->loc, &sec);
  h->loc = sec;
  const YNode *entry = NULL, *own = m;
  if (m && p->hw_preset) m = hw_what_if(p, m);
  if (m) m = hw_what_if_nic(p, apply_preset(p, m, "hardware", "hardware", &h->preset, &entry), own);
  else h->preset.loc = sec;
  p->quiet_missing = yaml_map_get(m, "preset") && !h->preset.set;
  check_keys(p, m, "hardware", KEYS("preset", "name", "gpu", "nodes", "gpus_per_node", "nodes_per_rack",
                                     "scale_up", "scale_out", "hostnames", "hostname_pattern"));
  rd_str(p, m, sec, "hardware", "name", &h->name, false, h->preset.v ? h->preset.v : "");
  rd_lim(p, m, sec, "hardware", "nodes", &h->nodes, m != NULL, 1, 1, &LIM_GPUS);
  rd_lim(p, m, sec, "hardware", "gpus_per_node", &h->gpus_per_node, m != NULL, 1, 1, &LIM_GPUS_PER_NODE);
  rd_lim(p, m, sec, "hardware", "nodes_per_rack", &h->nodes_per_rack, false, 0, 1, &LIM_GPUS);

  SrcLoc gs;
  const YNode *g = section(p, m, "gpu", "hardware.gpu", sec, &gs);
  h->gpu.loc = gs;
  if (m && !yaml_map_get(m, "gpu")) missing(p, m, "hardware", "gpu");
  check_keys(p, g, "hardware.gpu", KEYS("memory", "cuda_memory", "hbm_bandwidth", "bf16", "fp16", "fp8", "fp4",
                                             "int8"));
  rd_qty(p, g, gs, "hardware.gpu", "memory", UNIT_MEMORY, &h->gpu.memory, NULL, g != NULL, 0, false);
  rd_qty(p, g, gs, "hardware.gpu", "cuda_memory", UNIT_MEMORY, &h->gpu.cuda_memory, NULL, false, 0, false);
  /* A spec that writes its own `memory` over a preset's plans with it:
   * the preset's cuda_memory was measured on the preset's part. */
  const SrcLoc *ml = &h->gpu.memory.loc, *cl = &h->gpu.cuda_memory.loc;
  if (h->gpu.cuda_memory.set && ml->file && cl->file && strcmp(ml->file, cl->file) != 0) {
    h->gpu.cuda_memory.set = false;
    h->gpu.cuda_memory.v = 0;
  }
  if (h->gpu.cuda_memory.set && h->gpu.memory.set && h->gpu.cuda_memory.v > h->gpu.memory.v)
    diag_help(diag_at(p->d, DIAG_E0105, h->gpu.cuda_memory.loc,
                      "`hardware.gpu.cuda_memory` (%lld bytes) is out of range: expected at most "
                      "`hardware.gpu.memory` (%lld bytes)",
                      (long long)h->gpu.cuda_memory.v, (long long)h->gpu.memory.v),
              "CUDA reports less than nvidia-smi's total: write `cuda_memory` at most `memory`, "
              "or leave it out to plan with `memory`");
  rd_qty(p, g, gs, "hardware.gpu", "hbm_bandwidth", UNIT_BANDWIDTH, NULL, &h->gpu.hbm_bandwidth, g != NULL, 0, false);
  rd_qty(p, g, gs, "hardware.gpu", "bf16", UNIT_COMPUTE, NULL, &h->gpu.bf16, g != NULL, 0, false);
  rd_qty(p, g, gs, "hardware.gpu", "fp16", UNIT_COMPUTE, NULL, &h->gpu.fp16, false, h->gpu.bf16.v, false);
  rd_qty(p, g, gs, "hardware.gpu", "fp8", UNIT_COMPUTE, NULL, &h->gpu.fp8, false, 0, false);
  rd_qty(p, g, gs, "hardware.gpu", "int8", UNIT_COMPUTE, NULL, &h->gpu.int8, false, 0, false);
  rd_qty(p, g, gs, "hardware.gpu", "fp4", UNIT_COMPUTE, NULL, &h->gpu.fp4, false, 0, false);

  SrcLoc us;
  const YNode *u = section(p, m, "scale_up", "hardware.scale_up", sec, &us);
  h->scale_up.loc = us;
  if (m && !yaml_map_get(m, "scale_up")) missing(p, m, "hardware", "scale_up");
  check_keys(p, u, "hardware.scale_up", KEYS("domain", "bandwidth", "latency", "nvls_ratio"));
  rd_lim(p, u, us, "hardware.scale_up", "domain", &h->scale_up.domain, false, h->gpus_per_node.v, 1, &LIM_GPUS);
  rd_qty(p, u, us, "hardware.scale_up", "bandwidth", UNIT_BANDWIDTH, NULL, &h->scale_up.bandwidth, u != NULL, 0, false);
  rd_qty(p, u, us, "hardware.scale_up", "latency", UNIT_TIME, NULL, &h->scale_up.latency, false, 0, true);
  /* NVLS moves at most twice the line rate's bus bandwidth (each GPU sends
   * its data once and receives the reduced result once): (0, 2] */
  rd_frac(p, u, us, "hardware.scale_up", "nvls_ratio", &h->scale_up.nvls_ratio, 0.0, 0.0, 2.0);

  SrcLoc os;
  const YNode *o = section(p, m, "scale_out", "hardware.scale_out", sec, &os);
  h->scale_out.loc = os;
  if (m && !yaml_map_get(m, "scale_out")) hw_missing_nic(p, m);
  check_keys(p, o, "hardware.scale_out", KEYS("bandwidth", "latency"));
  rd_qty(p, o, os, "hardware.scale_out", "bandwidth", UNIT_BANDWIDTH, NULL, &h->scale_out.bandwidth, o != NULL, 0, false);
  rd_qty(p, o, os, "hardware.scale_out", "latency", UNIT_TIME, NULL, &h->scale_out.latency, false, 0, true);
  parse_hostnames(p, m, sec);
  p->quiet_missing = false;
}

/* workload's prefix-cache hit rate and speculative decoding
 * (docs/cost-model.md, "Prefix cache" and "Speculative decoding"). */
static void parse_workload_reuse(P *p, const YNode *m, SrcLoc sec, WorkloadSpec *w) {
  rd_frac(p, m, sec, "workload", "prefix_cache_hit_rate", &w->prefix_cache_hit_rate, 0.0, 0.0, 1.0);
  if (w->prefix_cache_hit_rate.set && w->prefix_cache_hit_rate.v >= 1.0) {
    Diag *g = diag_at(p->d, DIAG_E0105, w->prefix_cache_hit_rate.loc,
                      "`%g` is out of range for `workload.prefix_cache_hit_rate`: expected below 1",
                      w->prefix_cache_hit_rate.v);
    diag_help(g, "the last prompt token is always computed; write the share of cached tokens");
    w->prefix_cache_hit_rate.set = false;
  }
  rd_lim(p, m, sec, "workload", "draft_tokens", &w->draft_tokens, false, 0, 1, &LIM_DIM);
  rd_frac(p, m, sec, "workload", "accepted_tokens", &w->accepted_tokens, 1.0, 0.0,
         1.0 + (double)LIM_DIM.max);
  if (!w->accepted_tokens.set) return;
  double hi = 1.0 + (double)(w->draft_tokens.set ? w->draft_tokens.v : 0);
  if (w->accepted_tokens.v < 1.0 || w->accepted_tokens.v > hi) {
    Diag *g = diag_at(p->d, DIAG_E0105, w->accepted_tokens.loc,
                      "`%g` is out of range for `workload.accepted_tokens`: expected 1 to %g "
                      "(1 + draft_tokens)", w->accepted_tokens.v, hi);
    diag_help(g, "tokens emitted per decode step and request: 1 plus the accepted drafts");
    w->accepted_tokens.set = false;
  }
}

static void parse_workload(P *p, const YNode *root) {
  WorkloadSpec *w = &p->s->workload;
  SrcLoc sec;
  const YNode *m = section(p, root, "workload", "workload", root->loc, &sec);
  w->loc = sec;
  check_keys(p, m, "workload", KEYS("input_tokens", "output_tokens", "rate", "concurrency",
                                     "requests", "prefix_cache_hit_rate", "draft_tokens",
                                     "accepted_tokens"));
  rd_lim(p, m, sec, "workload", "input_tokens", &w->input_tokens, m != NULL, 1, 1, &LIM_TOKENS);
  rd_lim(p, m, sec, "workload", "output_tokens", &w->output_tokens, m != NULL, 1, 1, &LIM_TOKENS);
  rd_qty(p, m, sec, "workload", "rate", UNIT_RATE, NULL, &w->rate, false, 0, false);
  rd_int(p, m, sec, "workload", "concurrency", &w->concurrency, false, 0, 1, I64MAX);
  rd_int(p, m, sec, "workload", "requests", &w->requests, false, 0, 1, I64MAX);
  parse_workload_reuse(p, m, sec, w);
  if (w->rate.set && w->concurrency.set) {
    Diag *g = diag_at(p->d, DIAG_E0119, w->concurrency.loc,
                      "`workload` gives both `rate` and `concurrency`");
    diag_help(g, "an open loop (`rate`, Poisson arrivals) or a closed loop (`concurrency`, "
                 "N requests in flight): keep one");
  }
  if (w->requests.set && !w->concurrency.set) {
    Diag *g = diag_at(p->d, DIAG_E0119, w->requests.loc,
                      "`workload.requests` is given without `concurrency`");
    diag_help(g, "`requests` is the length of a closed-loop run (a benchmark's --num-prompts); "
                 "set `concurrency` too, or remove `requests`");
  }
}

static void parse_slo(P *p, const YNode *root) {
  SloSpec *o = &p->s->slo;
  SrcLoc sec;
  const YNode *m = section(p, root, "slo", "slo", root->loc, &sec);
  o->loc = sec;
  check_keys(p, m, "slo", KEYS("ttft", "tpot"));
  rd_qty(p, m, sec, "slo", "ttft", UNIT_TIME, NULL, &o->ttft, m != NULL, 0, false);
  rd_qty(p, m, sec, "slo", "tpot", UNIT_TIME, NULL, &o->tpot, m != NULL, 0, false);
}

static void parse_pool(P *p, const YNode *m, const char *path, PoolSpec *pl, DeployMode mode) {
  SrcLoc sec = m->loc;
  pl->loc = sec;
  check_keys(p, m, path, KEYS("name", "role", "replicas", "tp", "pp", "cp", "dp", "ep", "etp", "dcp",
                              "layer_partition"));
  rd_str(p, m, sec, path, "name", &pl->name, true, "");
  rd_enum(p, m, sec, path, "role", &pl->role, mode == MODE_DISAGGREGATED, ROLE_BOTH, role_names,
          RP_ARRAY_LEN(role_names));
  rd_int(p, m, sec, path, "replicas", &pl->replicas, false, 1, 1, I64MAX);
  rd_int(p, m, sec, path, "tp", &pl->tp, false, 1, 1, I64MAX);
  rd_int(p, m, sec, path, "pp", &pl->pp, false, 1, 1, I64MAX);
  rd_int(p, m, sec, path, "cp", &pl->cp, false, 1, 1, I64MAX);
  rd_int(p, m, sec, path, "dp", &pl->dp, false, 1, 1, I64MAX);
  rd_lim(p, m, sec, path, "ep", &pl->ep, false, 1, 1, &LIM_GPUS);
  rd_lim(p, m, sec, path, "etp", &pl->etp, false, 1, 1, &LIM_GPUS);
  rd_lim(p, m, sec, path, "dcp", &pl->dcp, false, 1, 1, &LIM_GPUS);
  const YNode *lp = yaml_map_get(m, "layer_partition");
  pl->layer_partition.loc = sec;
  if (lp) {
    char *fp = join_path(p, path, "layer_partition");
    pl->layer_partition.loc = lp->loc;
    if (lp->kind != YN_SEQ) {
      Diag *g = diag_at(p->d, DIAG_E0103, lp->loc, "expected a sequence of layer counts for `%s`, got a %s",
                        fp, yaml_node_type_name(lp));
      diag_help(g, "write one count per pipeline stage, e.g. [40, 40]");
      return;
    }
    pl->layer_partition.items = yaml_arena_alloc(p->a, (lp->n ? lp->n : 1) * sizeof(SInt));
    pl->layer_partition.len = lp->n;
    bool ok = true;
    for (size_t i = 0; i < lp->n; i++) {
      SInt *it = &pl->layer_partition.items[i];
      const YNode *v = lp->items[i];
      it->loc = v->loc;
      char *ip = rp_sprintf("%s[%zu]", fp, i);
      if (want_scalar(p, v, ip, "an integer") && read_int_literal(p, v, ip, 1, LIM_LAYERS.max, LIM_LAYERS.why, &it->v))
        it->set = true;
      else
        ok = false;
      free(ip);
    }
    pl->layer_partition.set = ok;
  }
}

/* `deployment.engine`: a name, or `{name, version}` naming one entry of
 * the engine catalog (plans/catalog/engines/, compiler/engines.c). */
static void parse_engine(P *p, const YNode *m, SrcLoc sec) {
  DeploymentSpec *dp = &p->s->deployment;
  const YNode *e = yaml_map_get(m, "engine");
  if (e && e->kind == YN_MAP) {
    check_keys(p, e, "deployment.engine", KEYS("name", "version"));
    rd_enum(p, e, e->loc, "deployment.engine", "name", &dp->engine, true, ENGINE_GENERIC, engine_names,
            RP_ARRAY_LEN(engine_names));
    rd_str(p, e, e->loc, "deployment.engine", "version", &dp->engine_version, false, NULL);
    return;
  }
  rd_enum(p, m, sec, "deployment", "engine", &dp->engine, false, ENGINE_GENERIC, engine_names,
          RP_ARRAY_LEN(engine_names));
  dp->engine_version.loc = dp->engine.loc;
}

/* deployment.pools: required unless mode: search, a sequence of pool
 * mappings. */
static void parse_pools(P *p, const YNode *m, DeploymentSpec *dp) {
  const YNode *pools = yaml_map_get(m, "pools");
  if (!pools && m && dp->mode.v != MODE_SEARCH) {
    Diag *g = missing(p, m, "deployment", "pools");
    if (g)
      diag_note(g, "a spec for `rankplan search` alone can say `mode: search` instead and leave the pools to it "
                   "(`search.disaggregated: false` keeps the search to aggregated pools)");
  }
  if (pools && pools->kind != YN_SEQ) {
    Diag *g = diag_at(p->d, DIAG_E0103, pools->loc, "expected a sequence of pools for `deployment.pools`, got a %s",
                      yaml_node_type_name(pools));
    diag_help(g, "write each pool as a list item starting with `- name: ...`");
  } else if (pools) {
    if (pools->n == 0 && dp->mode.v != MODE_SEARCH) {
      Diag *g = diag_at(p->d, DIAG_E0105, pools->loc, "`deployment.pools` is empty, expected at least one pool");
      diag_help(g, "add a pool, e.g. `- { name: main, tp: 8 }`");
    }
    dp->pools = yaml_arena_alloc(p->a, (pools->n ? pools->n : 1) * sizeof(PoolSpec));
    for (size_t i = 0; i < pools->n; i++) {
      char *path = rp_sprintf("deployment.pools[%zu]", i);
      const YNode *pm = pools->items[i];
      if (pm->kind != YN_MAP) {
        diag_at(p->d, DIAG_E0103, pm->loc, "expected a mapping for `%s`, got a %s", path, yaml_node_type_name(pm));
      } else {
        parse_pool(p, pm, arena_strdup(p, path), &dp->pools[dp->npools++], (DeployMode)dp->mode.v);
      }
      free(path);
    }
  }
}

static void parse_deployment(P *p, const YNode *root) {
  DeploymentSpec *dp = &p->s->deployment;
  SrcLoc sec;
  const YNode *m = section(p, root, "deployment", "deployment", root->loc, &sec);
  dp->loc = sec;
  check_keys(p, m, "deployment", KEYS("mode", "engine", "order", "allow_tp_across_domain", "pools",
                                       "memory", "hooks", "placement", "image"));
  rd_enum(p, m, sec, "deployment", "mode", &dp->mode, m != NULL, MODE_AGGREGATED, mode_names,
          RP_ARRAY_LEN(mode_names));
  parse_engine(p, m, sec);
  rd_str(p, m, sec, "deployment", "image", &dp->image, false, NULL);
  rd_str(p, m, sec, "deployment", "order", &dp->order, false, SPEC_ORDER_DEFAULT);
  rd_bool(p, m, sec, "deployment", "allow_tp_across_domain", &dp->allow_tp_across_domain, false);

  parse_pools(p, m, dp);

  SrcLoc ms;
  const YNode *mem = section(p, m, "memory", "deployment.memory", sec, &ms);
  dp->memory.loc = ms;
  check_keys(p, mem, "deployment.memory", KEYS("utilization", "reserve", "kv_block"));
  rd_frac(p, mem, ms, "deployment.memory", "utilization", &dp->memory.utilization, 0.90, 0.0, 1.0);
  rd_qty(p, mem, ms, "deployment.memory", "reserve", UNIT_MEMORY, &dp->memory.reserve, NULL, false,
         (double)(2LL << 30), true);
  rd_lim(p, mem, ms, "deployment.memory", "kv_block", &dp->memory.kv_block, false, 16, 1, &LIM_TOKENS);

  SrcLoc hs;
  const YNode *hk = section(p, m, "hooks", "deployment.hooks", sec, &hs);
  dp->hooks.loc = hs;
  check_keys(p, hk, "deployment.hooks", KEYS("placement", "layer_partition", "expert_placement", "objective", "filter"));
  rd_str(p, hk, hs, "deployment.hooks", "placement", &dp->hooks.placement, false, NULL);
  rd_str(p, hk, hs, "deployment.hooks", "layer_partition", &dp->hooks.layer_partition, false, NULL);
  rd_str(p, hk, hs, "deployment.hooks", "expert_placement", &dp->hooks.expert_placement, false, NULL);
  rd_str(p, hk, hs, "deployment.hooks", "objective", &dp->hooks.objective, false, NULL);
  rd_str(p, hk, hs, "deployment.hooks", "filter", &dp->hooks.filter, false, NULL);
  /* `deployment.placement` is the shorthand spec.md shows for hooks.placement */
  const YNode *pl = yaml_map_get(m, "placement");
  if (pl) {
    if (dp->hooks.placement.set) {
      Diag *g = diag_at(p->d, DIAG_E0013, pl->loc,
                        "placement hook given twice, as `deployment.placement` and `deployment.hooks.placement`");
      diag_note(g, "the other one is at %s:%d:%d", dp->hooks.placement.loc.file,
                dp->hooks.placement.loc.line, dp->hooks.placement.loc.col);
      diag_help(g, "keep one of the two");
    } else {
      rd_str(p, m, sec, "deployment", "placement", &dp->hooks.placement, false, NULL);
    }
  }
}

/* E0121: a served length the model does not support. vLLM refuses it
 * ("User-specified max_model_len (N) is greater than the derived
 * max_model_len (max_position_embeddings=M ...)", vllm/config/model.py,
 * _get_and_verify_max_len) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and
 * SGLang likewise unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1. */
static void check_served_len(P *p, const ServingSpec *sv) {
  int64_t ctx = p->s->model.max_context.v;
  if (!sv->max_model_len.set || ctx <= 0 || sv->max_model_len.v <= ctx) return;
  Diag *g = diag_at(p->d, DIAG_E0121, sv->max_model_len.loc,
                    "`serving.max_model_len` %lld is longer than the model supports: `model.max_context` is %lld",
                    (long long)sv->max_model_len.v, (long long)ctx);
  diag_help(g, "lower it to at most %lld; raise `model.max_context` only for a model whose config serves longer "
               "(rope scaling)", (long long)ctx);
}

static void parse_serving(P *p, const YNode *root) {
  ServingSpec *sv = &p->s->serving;
  SrcLoc sec;
  const YNode *m = section(p, root, "serving", "serving", root->loc, &sec);
  sv->loc = sec;
  check_keys(p, m, "serving", KEYS("port", "served_model_name", "max_model_len", "max_num_seqs",
                                    "max_num_batched_tokens", "kv_transfer", "sampler", "overlap_schedule",
                                    "cuda_graph_max_bs", "chunked_prefill"));
  /* ports above 1023 need no privilege; each node's instances count up
   * from `port` (docs/engines.md, "Ports"), so leave room below 65535 */
  rd_int(p, m, sec, "serving", "port", &sv->port, false, 8000, 1024, 65535);
  rd_str(p, m, sec, "serving", "served_model_name", &sv->served_model_name, false, NULL);
  rd_lim(p, m, sec, "serving", "max_model_len", &sv->max_model_len, false, p->s->model.max_context.v, 1,
         &LIM_TOKENS);
  check_served_len(p, sv);
  rd_lim(p, m, sec, "serving", "max_num_seqs", &sv->max_num_seqs, false, 0, 1, &LIM_TOKENS);
  rd_lim(p, m, sec, "serving", "max_num_batched_tokens", &sv->max_num_batched_tokens, false, 0, 1, &LIM_TOKENS);
  rd_str(p, m, sec, "serving", "kv_transfer", &sv->kv_transfer, false, NULL);
  rd_str(p, m, sec, "serving", "sampler", &sv->sampler, false, NULL);
  rd_bool(p, m, sec, "serving", "overlap_schedule", &sv->overlap_schedule, false);
  rd_bool(p, m, sec, "serving", "chunked_prefill", &sv->chunked_prefill, false);
  rd_lim(p, m, sec, "serving", "cuda_graph_max_bs", &sv->cuda_graph_max_bs, false, 0, 1, &LIM_TOKENS);
}

/* ---------------------------------------------------------------------- */
/* Search constraints (docs/spec.md, "Search constraints"). */

static const char *const sdim_names[SDIM__COUNT] = {"tp", "pp", "cp", "dp", "ep", "etp", "dcp", "gpus"};

int64_t spec_max_model_len(const Spec *s) {
  return s->serving.max_model_len.v > 0 ? s->serving.max_model_len.v : s->model.max_context.v;
}

const char *search_dim_name(SearchDim d) {
  return (unsigned)d < SDIM__COUNT ? sdim_names[d] : "?";
}

bool search_dim_allows(const SearchDimSet *s, int64_t v) {
  if (!s->set) return true;
  if (s->n == 0) return v >= s->lo && v <= s->hi;
  for (size_t i = 0; i < s->n; i++)
    if (s->vals[i] == v) return true;
  return false;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* A list of allowed values: sorted, distinct (a repeat is E0120). */
static void rd_dim_list(P *p, const YNode *v, const char *fp, SearchDimSet *o) {
  if (v->n == 0) {
    Diag *g = diag_at(p->d, DIAG_E0120, v->loc, "`%s` is an empty list: it allows no layout", fp);
    diag_help(g, "list the allowed values, e.g. [1, 2, 4, 8], or remove the key to allow any");
    return;
  }
  int64_t *vals = yaml_arena_alloc(p->a, v->n * sizeof *vals);
  size_t n = 0;
  for (size_t i = 0; i < v->n; i++) {
    const YNode *it = v->items[i];
    if (want_scalar(p, it, fp, "an integer") &&
        read_int_literal(p, it, fp, 1, LIM_GPUS.max, LIM_GPUS.why, &vals[n]))
      n++;
  }
  if (n != v->n) return;
  qsort(vals, n, sizeof *vals, cmp_i64);
  for (size_t i = 1; i < n; i++)
    if (vals[i] == vals[i - 1]) {
      Diag *g = diag_at(p->d, DIAG_E0120, v->loc, "`%s` lists %lld twice", fp, (long long)vals[i]);
      diag_help(g, "list each allowed value once");
      return;
    }
  o->vals = vals;
  o->n = n;
  o->set = true;
}

/* A range {min, max}, either bound optional (not both). */
static void rd_dim_range(P *p, const YNode *v, SrcLoc at, const char *fp, SearchDimSet *o) {
  check_keys(p, v, fp, KEYS("min", "max"));
  SInt lo, hi;
  rd_lim(p, v, at, fp, "min", &lo, false, 1, 1, &LIM_GPUS);
  rd_lim(p, v, at, fp, "max", &hi, false, LIM_GPUS.max, 1, &LIM_GPUS);
  if (!lo.set && !hi.set) {
    Diag *g = diag_at(p->d, DIAG_E0120, at, "`%s` gives neither `min` nor `max`", fp);
    diag_help(g, "write `{min: 2, max: 8}`, a list such as [2, 4, 8], or remove the key");
    return;
  }
  if (lo.v > hi.v) {
    Diag *g = diag_at(p->d, DIAG_E0120, at, "`%s` allows no value: min %lld is above max %lld", fp,
                      (long long)lo.v, (long long)hi.v);
    diag_help(g, "swap the bounds, or widen the range");
    return;
  }
  o->lo = lo.v;
  o->hi = hi.v;
  o->set = true;
}

/* One dimension's allowed values: an integer, a list or a range. */
static void rd_dim(P *p, const YNode *m, const char *path, SearchDim dim, SearchDimSet *o) {
  const YNode *v = yaml_map_get(m, sdim_names[dim]);
  if (!v) return;
  char *fp = join_path(p, path, sdim_names[dim]);
  o->loc = v->loc;
  if (v->kind == YN_SEQ) {
    rd_dim_list(p, v, fp, o);
  } else if (v->kind == YN_MAP) {
    rd_dim_range(p, v, v->loc, fp, o);
  } else if (want_scalar(p, v, fp, "an integer, a list or {min, max}")) {
    int64_t *one = yaml_arena_alloc(p->a, sizeof *one);
    if (!read_int_literal(p, v, fp, 1, LIM_GPUS.max, LIM_GPUS.why, one)) return;
    o->vals = one;
    o->n = 1;
    o->set = true;
  }
}

/* A constraint that no layout of its role can meet: cp off (search.cp:
 * false, or any decode/both pool) or pp off with a set that excludes 1,
 * dcp on a prefill pool. */
static void check_dim_one(P *p, const SearchDimSet *o, const char *fp, bool forced, const char *why) {
  if (!o->set || !forced || search_dim_allows(o, 1)) return;
  Diag *g = diag_at(p->d, DIAG_E0120, o->loc, "`%s` excludes 1, but %s: no layout is left", fp, why);
  diag_help(g, "allow 1 in `%s`, or remove the other constraint", fp);
}

static void parse_search_role(P *p, const YNode *m, SrcLoc sec, PoolRole role) {
  SearchSpec *se = &p->s->search;
  char *path = join_path(p, "search", role_names[role]);
  SrcLoc at;
  const YNode *r = section(p, m, role_names[role], path, sec, &at);
  se->role_loc[role] = at;
  if (!r) return;
  check_keys(p, r, path, sdim_names, SDIM__COUNT);
  for (int d = 0; d < SDIM__COUNT; d++) {
    SearchDimSet *o = &se->dims[role][d];
    rd_dim(p, r, path, (SearchDim)d, o);
    char *fp = join_path(p, path, sdim_names[d]);
    if (d == SDIM_PP) check_dim_one(p, o, fp, se->pp.set && !se->pp.v, "`search.pp: false` turns pipeline parallelism off");
    if (d == SDIM_CP) check_dim_one(p, o, fp, (se->cp.set && !se->cp.v) || role != ROLE_PREFILL,
                                    role == ROLE_PREFILL ? "`search.cp: false` turns context parallelism off"
                                                         : "context parallelism is for prefill pools");
    if (d == SDIM_DCP) check_dim_one(p, o, fp, role == ROLE_PREFILL, "decode context parallelism is for decode pools");
  }
}

/* search.aggregated / search.disaggregated: E0120 when, with the spec's
 * mode, neither serving mode is left to search. */
static void check_search_modes(P *p) {
  const SearchSpec *se = &p->s->search;
  DeployMode dm = (DeployMode)p->s->deployment.mode.v;
  bool agg = se->aggregated.v && dm != MODE_DISAGGREGATED;
  bool dis = se->disaggregated.v && dm != MODE_AGGREGATED;
  if (agg || dis) return;
  const SBool *off = !se->aggregated.v && dm != MODE_DISAGGREGATED ? &se->aggregated : &se->disaggregated;
  const char *key = off == &se->aggregated ? "aggregated" : "disaggregated";
  Diag *g = diag_at(p->d, DIAG_E0120, off->loc, "`search.%s: false` leaves no serving mode to search", key);
  if (dm == MODE_SEARCH) diag_note(g, "`search.aggregated` and `search.disaggregated` are both false");
  else diag_note(g, "`deployment.mode: %s` searches that mode only", dm == MODE_AGGREGATED ? "aggregated" : "disaggregated");
  diag_help(g, "remove `search.%s: false`", key);
}

static void parse_search(P *p, const YNode *root) {
  SearchSpec *se = &p->s->search;
  SrcLoc sec;
  const YNode *m = section(p, root, "search", "search", root->loc, &sec);
  se->loc = sec;
  check_keys(p, m, "search", KEYS("gpu_budget", "top", "headroom", "cp", "pp", "whole_nodes",
                                   "separate_nodes", "aggregated", "disaggregated", "prefill", "decode",
                                   "both"));
  int64_t all = 0;
  if (!ck_mul(p->s->hardware.nodes.v, p->s->hardware.gpus_per_node.v, &all)) all = I64MAX;
  rd_int(p, m, sec, "search", "gpu_budget", &se->gpu_budget, false, all, 1, I64MAX);
  rd_int(p, m, sec, "search", "top", &se->top, false, 10, 1, I64MAX);
  rd_frac(p, m, sec, "search", "headroom", &se->headroom, 0.9, 0.0, 1.0);
  rd_bool(p, m, sec, "search", "cp", &se->cp, true);
  rd_bool(p, m, sec, "search", "pp", &se->pp, true);
  rd_bool(p, m, sec, "search", "whole_nodes", &se->whole_nodes, false);
  rd_bool(p, m, sec, "search", "separate_nodes", &se->separate_nodes, false);
  rd_bool(p, m, sec, "search", "aggregated", &se->aggregated, true);
  rd_bool(p, m, sec, "search", "disaggregated", &se->disaggregated, true);
  check_search_modes(p);
  for (int r = 0; r < 3; r++) parse_search_role(p, m, sec, (PoolRole)r);
}

/* The expert tensor-parallel size of an MoE pool that leaves `etp` unset
 * (`set` stays false, so diagnostics can say it is the default):
 *  - under a named engine, every expert is sharded over all the ranks its
 *    expert-parallel group leaves, etp = tp * cp * dp / ep (expert data
 *    parallelism 1), as vLLM, SGLang and TensorRT-LLM do (their catalog
 *    rule `edp-1`);
 *  - under `generic`, Megatron-Core's default etp = tp when no ep is
 *    given (experts sharded like the dense FFN), and 1 when ep is.
 * When ep does not divide the ranks, etp stays 1 and the layout rules
 * report it. docs/memory.md, "Experts and tp". */
static void default_expert_tp(Spec *s) {
  if (!s->model.moe.present) return;
  bool generic = (Engine)s->deployment.engine.v == ENGINE_GENERIC;
  for (size_t i = 0; i < s->deployment.npools; i++) {
    PoolSpec *pl = &s->deployment.pools[i];
    int64_t tc, tcd, ep = pl->ep.v > 0 ? pl->ep.v : 1;
    if (pl->etp.set || !ck_mul(pl->tp.v, pl->cp.v, &tc) || !ck_mul(tc, pl->dp.v, &tcd)) continue;
    if (generic) pl->etp.v = ep == 1 && pl->tp.v > 0 ? pl->tp.v : 1;
    else if (tcd > 0 && tcd % ep == 0) pl->etp.v = tcd / ep;
    pl->etp.loc = pl->loc;
  }
}

/* ---------------------------------------------------------------------- */
/* Entry points. */

static Spec *parse_tree(P *p, const YNode *root, const char *name) {
  Spec *s = p->s;
  if (root->kind != YN_MAP) {
    Diag *g = diag_at(p->d, DIAG_E0103, root->loc, "expected a mapping at the top of the spec, got a %s",
                      yaml_node_type_name(root));
    diag_help(g, "a spec starts with `version: 1` followed by its sections; see docs/spec.md");
    return NULL;
  }
  check_keys(p, root, "", KEYS("version", "name", "model", "hardware", "workload", "slo", "deployment", "search",
                                "serving"));
  rd_int(p, root, root->loc, "", "version", &s->version, true, 1, INT64_MIN, I64MAX);
  /* the spec's name defaults to the file name without directory and .yaml */
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  size_t bl = strlen(base);
  if (bl > 5 && strcmp(base + bl - 5, ".yaml") == 0) bl -= 5;
  else if (bl > 4 && strcmp(base + bl - 4, ".yml") == 0) bl -= 4;
  char *stem = yaml_arena_alloc(p->a, bl + 1);
  memcpy(stem, base, bl);
  rd_str(p, root, root->loc, "", "name", &s->name, false, stem);
  parse_model(p, root);
  parse_hardware(p, root);
  parse_workload(p, root);
  parse_slo(p, root);
  parse_deployment(p, root);
  default_expert_tp(s);
  parse_search(p, root);
  parse_serving(p, root);
  return s;
}

static Spec *spec_parse_ex(Diags *d, const char *name, const char *text, size_t len,
                          const char *catalog_dir, const char *hw_preset);

Spec *spec_parse(Diags *d, const char *name, const char *text, size_t len, const char *catalog_dir) {
  return spec_parse_ex(d, name, text, len, catalog_dir, NULL);
}

static Spec *spec_parse_ex(Diags *d, const char *name, const char *text, size_t len,
                          const char *catalog_dir, const char *hw_preset) {
  const char *file = diags_add_source(d, name, text, len);
  int before = d->nerrors;
  if (len > SPEC_MAX_BYTES) {
    Diag *g = diag_at(d, DIAG_E0002, (SrcLoc){file, 0, 0}, "the spec is %zu bytes, over the cap of %u bytes",
                      len, SPEC_MAX_BYTES);
    diag_help(g, "a spec is a few kilobytes; check that the right file was given");
    return NULL;
  }
  Spec *s = rp_calloc(1, sizeof *s);
  YArena *a = yaml_arena_new();
  s->arena = a;
  s->file = file;
  rp_sha256_hex(text, len, s->sha256);
  P p = {d, a, s, catalog_dir ? catalog_dir : spec_catalog_dir(), false, hw_preset};
  s->catalog_dir = arena_strdup(&p, p.catalog_dir);
  const YNode *root = yaml_load(d, a, file, text, len);
  if (root) {
    parse_tree(&p, root, name);
    if (root->kind == YN_MAP) {
      SrcLoc top = root->loc;
      static const char *const req[] = {"model", "hardware", "workload", "deployment"};
      for (size_t i = 0; i < RP_ARRAY_LEN(req); i++)
        if (!yaml_map_get(root, req[i])) {
          Diag *g = diag_at(d, DIAG_E0116, top, "missing section `%s`", req[i]);
          diag_help(g, "add a `%s:` section (see docs/spec.md)", req[i]);
        }
      if (s->deployment.mode.v == MODE_SEARCH && s->deployment.mode.set && !yaml_map_get(root, "slo")) {
        Diag *g = diag_at(d, DIAG_E0116, s->deployment.mode.loc, "missing section `slo`, which `mode: search` needs");
        diag_help(g, "add `slo: { ttft: 600 ms, tpot: 40 ms }` with your targets");
      }
      spec_check_structure(d, s);
    }
  }
  if (d->nerrors > before) {
    spec_free(s);
    return NULL;
  }
  return s;
}

Spec *spec_parse_file(Diags *d, const char *path, const char *catalog_dir) {
  return spec_parse_file_hw(d, path, catalog_dir, NULL);
}

Spec *spec_parse_file_hw(Diags *d, const char *path, const char *catalog_dir, const char *hw_preset) {
  char *text = NULL;
  size_t len = 0;
  int err = rp_read_file(path, SPEC_MAX_BYTES, &text, &len);
  if (err == RP_ENOTREG) {
    Diag *g = diag_at(d, DIAG_E0001, (SrcLoc){diags_intern(d, path), 0, 0},
                      "cannot read the spec: it is %s, not a regular file", rp_file_kind(path));
    diag_help(g, "give the path of a spec file, or `-` to read the spec from standard input");
    return NULL;
  }
  if (err == EFBIG) {
    Diag *g = diag_at(d, DIAG_E0002, (SrcLoc){diags_intern(d, path), 0, 0},
                      "the spec is over the size cap of %u bytes", SPEC_MAX_BYTES);
    diag_help(g, "a spec is a few kilobytes; check that the right file was given");
    return NULL;
  }
  if (err) {
    diag_at(d, DIAG_E0001, (SrcLoc){diags_intern(d, path), 0, 0}, "cannot read the spec: %s",
            rp_strerror(err));
    return NULL;
  }
  Spec *s = spec_parse_ex(d, path, text, len, catalog_dir, hw_preset);
  free(text);
  return s;
}

void spec_free(Spec *s) {
  if (!s) return;
  yaml_arena_free(s->arena);
  free(s);
}

/* ---------------------------------------------------------------------- */
/* Structure rules. */

/* Returns -1 when the product overflows int64. */
int64_t pool_gpus(const PoolSpec *pl) {
  CkState st = {true};
  int64_t n = ckm(&st, ckm(&st, ckm(&st, ckm(&st, pl->replicas.v, pl->tp.v), pl->cp.v), pl->dp.v), pl->pp.v);
  return st.ok ? n : -1;
}

/* A rank order as Megatron-Core's RankGenerator takes it: some of tp, cp,
 * ep, dp and pp, each at most once, joined by '-', innermost first. A
 * dimension left out is appended (outermost) when its size is 1 and is an
 * error otherwise; the layout stage checks that against the pools (E0301). */
static bool order_ok(const char *o) {
  static const char *const dims[] = {"tp", "cp", "ep", "dp", "pp"};
  bool seen[5] = {false};
  size_t n = strlen(o);
  if (n < 2 || n > 14 || (n + 1) % 3 != 0) return false;
  for (size_t i = 0; 3 * i < n; i++) {
    if (3 * i + 2 < n && o[3 * i + 2] != '-') return false;
    size_t k = 0;
    while (k < 5 && strncmp(o + 3 * i, dims[k], 2) != 0) k++;
    if (k == 5 || seen[k]) return false;
    seen[k] = true;
  }
  return true;
}

/* qsort has no context argument in C11; the structure check is not
 * re-entrant anyway (it runs once per spec, on one thread). */
static const PoolSpec *pools_for_sort;

/* Pool indices by name, then by index, so the first use stays first. */
static int cmp_pool_name(const void *x, const void *y) {
  size_t i = *(const size_t *)x, j = *(const size_t *)y;
  int c = strcmp(pools_for_sort[i].name.v, pools_for_sort[j].name.v);
  if (c) return c;
  return i < j ? -1 : i > j;
}

/* The cluster's GPU count against LIM_GPUS. Each factor is bounded on its
 * own (LIM_GPUS, LIM_GPUS_PER_NODE), so the product cannot overflow; it is
 * checked all the same. */
static void check_cluster_size(Diags *d, const HardwareSpec *h) {
  if (!h->nodes.set || !h->gpus_per_node.set) return;
  int64_t gpus = 0;
  bool ok = ck_mul(h->nodes.v, h->gpus_per_node.v, &gpus);
  if (ok && gpus <= LIM_GPUS.max) return;
  char total[32];
  if (ok) snprintf(total, sizeof total, "%lld", (long long)gpus);
  else snprintf(total, sizeof total, "over 2^63");
  Diag *g = diag_at(d, DIAG_E0105, h->nodes.loc,
                    "the cluster is out of range: %lld nodes x %lld GPUs per node = %s GPUs, "
                    "expected at most %lld",
                    (long long)h->nodes.v, (long long)h->gpus_per_node.v, total,
                    (long long)LIM_GPUS.max);
  diag_note(g, "gpus_per_node is at %s:%d:%d", h->gpus_per_node.loc.file,
            h->gpus_per_node.loc.line, h->gpus_per_node.loc.col);
  diag_help(g, "%s", LIM_GPUS.why);
}

/* A scale-up domain tiles the nodes: a divisor of gpus_per_node (NVLink
 * bridges, one node's NVSwitch) or a whole number of nodes (an NVL72
 * rack). One that does neither would count GPUs of two nodes, joined only
 * by their NICs, as one NVLink domain (a preset's 4-way bridge over nodes
 * of 6 GPUs, say). */
static void check_domain_tiles(Diags *d, const HardwareSpec *h) {
  int64_t dom = h->scale_up.domain.v, gpn = h->gpus_per_node.v;
  if (!h->scale_up.domain.set || !h->gpus_per_node.set || dom <= 0 || gpn <= 0) return;
  if (dom <= gpn ? gpn % dom == 0 : dom % gpn == 0) return;
  Diag *g = diag_at(d, DIAG_E0105, h->scale_up.domain.loc,
                    "`%lld` is out of range for `hardware.scale_up.domain`: expected a divisor of "
                    "`gpus_per_node` (%lld) or a whole number of nodes",
                    (long long)dom, (long long)gpn);
  diag_note(g, "gpus_per_node is at %s:%d:%d", h->gpus_per_node.loc.file,
            h->gpus_per_node.loc.line, h->gpus_per_node.loc.col);
  diag_help(g, "a domain is the GPUs one NVLink fabric joins; write `scale_up: { domain: N }` with the "
               "GPUs of one bridge group or switch, or the GPUs per node that match the preset");
}

/* Pool names unique (E0114): sorted, so a hostile spec with many pools
 * stays O(n log n). */
static void check_pool_names(Diags *d, const DeploymentSpec *dp) {
  if (dp->npools < 2) return;
  size_t *ix = rp_malloc(dp->npools * sizeof *ix);
  size_t n = 0;
  for (size_t i = 0; i < dp->npools; i++)
    if (dp->pools[i].name.set) ix[n++] = i;
  pools_for_sort = dp->pools;
  qsort(ix, n, sizeof *ix, cmp_pool_name);
  for (size_t i = 1, first = 0; i < n; i++) {
    const PoolSpec *a = &dp->pools[ix[first]], *b = &dp->pools[ix[i]];
    if (strcmp(a->name.v, b->name.v) != 0) {
      first = i;
      continue;
    }
    Diag *g = diag_at(d, DIAG_E0114, b->name.loc, "duplicate pool name `%s`", b->name.v);
    diag_note(g, "first used at %s:%d:%d", a->name.loc.file, a->name.loc.line, a->name.loc.col);
    diag_help(g, "give every pool its own name");
  }
  free(ix);
}

/* The pools' roles against the mode (E0117). */
static void check_pool_roles(Diags *d, const DeploymentSpec *dp) {
  if (dp->mode.set && dp->mode.v == MODE_AGGREGATED) {
    for (size_t i = 0; i < dp->npools; i++)
      if (dp->pools[i].role.v != ROLE_BOTH) {
        Diag *g = diag_at(d, DIAG_E0117, dp->pools[i].role.loc,
                          "pool `%s` has role `%s`, but `mode: aggregated` pools serve both phases",
                          dp->pools[i].name.v ? dp->pools[i].name.v : "?", role_name((PoolRole)dp->pools[i].role.v));
        diag_help(g, "write `role: both` (or omit it), or use `mode: disaggregated`");
      }
    return;
  }
  if (!dp->mode.set || dp->mode.v != MODE_DISAGGREGATED || dp->npools == 0) return;
  bool pre = false, dec = false, all_roles = true;
  for (size_t i = 0; i < dp->npools; i++) {
    if (dp->pools[i].role.v == ROLE_PREFILL) pre = true;
    if (dp->pools[i].role.v == ROLE_DECODE) dec = true;
    all_roles = all_roles && dp->pools[i].role.set;
    if (dp->pools[i].role.v == ROLE_BOTH && dp->pools[i].role.set) {
      Diag *g = diag_at(d, DIAG_E0117, dp->pools[i].role.loc,
                        "pool `%s` has role `both`, but `mode: disaggregated` separates prefill and decode",
                        dp->pools[i].name.v ? dp->pools[i].name.v : "?");
      diag_help(g, "write `role: prefill` or `role: decode`, or use `mode: aggregated`");
    }
  }
  if (all_roles && (!pre || !dec)) {
    Diag *g = diag_at(d, DIAG_E0117, dp->mode.loc,
                      "`mode: disaggregated` needs a prefill pool and a decode pool, got no %s pool",
                      !pre ? "prefill" : "decode");
    diag_help(g, "add a pool with `role: %s`, or use `mode: aggregated`", !pre ? "prefill" : "decode");
  }
}

/* The pools fit the cluster (E0113; E0105 when their GPU count
 * overflows), the first 16 pools' sizes in the note. */
static void check_pools_fit(Diags *d, const Spec *s) {
  const DeploymentSpec *dp = &s->deployment;
  if (dp->npools == 0 || !s->hardware.nodes.set || !s->hardware.gpus_per_node.set) return;
  CkState st = {true};
  int64_t have = ckm(&st, s->hardware.nodes.v, s->hardware.gpus_per_node.v);
  int64_t need = 0;
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < dp->npools; i++) {
    const PoolSpec *pl = &dp->pools[i];
    int64_t g = pool_gpus(pl);
    if (g < 0) st.ok = false;
    else need = cka(&st, need, g);
    if (i == 16) sb_printf(&sb, "\n... and %zu more pools", dp->npools - 16);
    if (i >= 16) continue;
    sb_printf(&sb, "%spool `%s`: %lld replicas x tp %lld x cp %lld x dp %lld x pp %lld = %lld GPUs", i ? "\n" : "",
              pl->name.set ? pl->name.v : "(unnamed)", (long long)pl->replicas.v, (long long)pl->tp.v,
              (long long)pl->cp.v, (long long)pl->dp.v, (long long)pl->pp.v, (long long)g);
  }
  SrcLoc at = dp->pools[0].loc;
  if (!st.ok) {
    Diag *g = diag_at(d, DIAG_E0105, at, "the pools' GPU count overflows a 64-bit integer");
    diag_help(g, "use realistic replica and parallel sizes");
  } else if (need > have) {
    Diag *g = diag_at(d, DIAG_E0113, at,
                      "the pools need %lld GPUs, the cluster has %lld (%lld node%s x %lld GPUs per node)",
                      (long long)need, (long long)have, (long long)s->hardware.nodes.v,
                      s->hardware.nodes.v == 1 ? "" : "s",
                      (long long)s->hardware.gpus_per_node.v);
    diag_note(g, "%s", sb.buf);
    int64_t gpn = s->hardware.gpus_per_node.v;
    if (need > LIM_GPUS.max)
      diag_help(g, "reduce replicas or parallel sizes: no cluster rankplan plans for has "
                   "%lld GPUs (at most %lld; docs/spec.md, \"Limits\")",
                (long long)need, (long long)LIM_GPUS.max);
    else
      diag_help(g, "reduce replicas or parallel sizes, or raise `hardware.nodes` to %lld",
                (long long)(need / gpn + (need % gpn != 0)));
  }
  sb_free(&sb);
}

void spec_check_structure(Diags *d, Spec *s) {
  if (s->version.set && s->version.v != 1) {
    Diag *g = diag_at(d, DIAG_E0112, s->version.loc, "unsupported spec version %lld, expected 1",
                      (long long)s->version.v);
    diag_help(g, "this rankplan reads version 1 specs (docs/spec.md)");
  }
  DeploymentSpec *dp = &s->deployment;
  if (dp->order.set && !order_ok(dp->order.v)) {
    Diag *g = diag_at(d, DIAG_E0115, dp->order.loc,
                      "`%s` is not a rank order: expected some of tp, cp, ep, dp and pp, each at most "
                      "once, joined by `-`", dp->order.v);
    diag_help(g, "innermost first, e.g. `tp-cp-ep-dp-pp` (the default) or `tp-pp-dp`; a dimension "
                 "left out must have size 1");
  }
  check_pool_names(d, dp);
  check_pool_roles(d, dp);
  check_cluster_size(d, &s->hardware);
  check_domain_tiles(d, &s->hardware);
  check_pools_fit(d, s);
}
