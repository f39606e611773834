/*
 * diag.c: the diagnostics engine.
 *
 * Input: reports from every stage (code, position, message, help, notes).
 * Output: text for people (file:line:col: error[E0xxx]: message, the source
 * line, a caret, help), JSON for tools (format "rankplan.diagnostics/1",
 * documented in docs/errors.md) and SARIF 2.1.0 for code-scanning uploads.
 * Invariant: printing never loses a report and is deterministic: the order
 * is (file, line, column, report order).
 */
#include "diag.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rp_config.h"

static const DiagInfo diag_table[] = {
#define X(code, sev, slug, summary) {#code, sev, slug, summary},
#include "codes_front.def"
#include "codes_model.def"
#include "codes_layout.def"
#include "codes_reshard.def"
#include "codes_search.def"
#include "codes_hooks.def"
#include "codes_engine.def"
#include "codes_calib.def"
#undef X
};

const DiagInfo *diag_info(DiagCode c) {
  RP_ASSERT((size_t)c < RP_ARRAY_LEN(diag_table));
  return &diag_table[c];
}

DiagCode diag_lookup(const char *code) {
  for (size_t i = 0; i < RP_ARRAY_LEN(diag_table); i++)
    if (strcmp(diag_table[i].code, code) == 0) return (DiagCode)i;
  return DIAG__COUNT;
}

void diags_init(Diags *d) { memset(d, 0, sizeof *d); }

void diags_free(Diags *d) {
  for (size_t i = 0; i < d->list.len; i++) {
    Diag *g = d->list.items[i];
    free(g->msg);
    free(g->help);
    free(g->notes);
    free(g);
  }
  free(d->list.items);
  if (d->scratch) {
    free(d->scratch->msg);
    free(d->scratch->help);
    free(d->scratch->notes);
    free(d->scratch);
  }
  for (size_t i = 0; i < d->sources.len; i++) free(d->sources.items[i].text);
  free(d->sources.items);
  for (size_t i = 0; i < d->strings.len; i++) free(d->strings.items[i]);
  free(d->strings.items);
  memset(d, 0, sizeof *d);
}

const char *diags_intern(Diags *d, const char *s) {
  if (!s) return NULL;
  for (size_t i = 0; i < d->strings.len; i++)
    if (strcmp(d->strings.items[i], s) == 0) return d->strings.items[i];
  char *c = rp_strdup(s);
  rp_vec_push(&d->strings, c);
  return c;
}

const char *diags_add_source(Diags *d, const char *name, const char *text,
                             size_t len) {
  const char *iname = diags_intern(d, name);
  for (size_t i = 0; i < d->sources.len; i++)
    if (d->sources.items[i].name == iname) return iname;
  SourceFile sf = {iname, rp_strndup(text, len), len};
  rp_vec_push(&d->sources, sf);
  return iname;
}

Diag *diag_at(Diags *d, DiagCode code, SrcLoc loc, const char *fmt, ...) {
  if (d->list.len >= DIAG_MAX_KEPT) {
    /* Over the cap: count it, keep nothing. The scratch Diag absorbs
     * diag_help/diag_note calls the caller makes next. */
    Severity sev = diag_info(code)->sev;
    if (sev == SEV_ERROR) d->nerrors++;
    else if (sev == SEV_WARNING) d->nwarnings++;
    else d->nnotes++;
    d->dropped++;
    if (!d->scratch) d->scratch = rp_calloc(1, sizeof *d->scratch);
    free(d->scratch->help);
    free(d->scratch->notes);
    d->scratch->help = d->scratch->notes = NULL;
    d->scratch->code = code;
    d->scratch->sev = sev;
    return d->scratch;
  }
  Diag *g = rp_calloc(1, sizeof *g);
  g->code = code;
  g->sev = diag_info(code)->sev;
  g->loc = loc;
  va_list ap;
  va_start(ap, fmt);
  g->msg = rp_vsprintf(fmt, ap);
  va_end(ap);
  g->seq = (unsigned)d->list.len;
  rp_vec_push(&d->list, g);
  if (g->sev == SEV_ERROR) d->nerrors++;
  else if (g->sev == SEV_WARNING) d->nwarnings++;
  else d->nnotes++;
  return g;
}

void diags_move(Diags *into, Diags *from) {
  for (size_t i = 0; i < from->sources.len; i++) {
    const SourceFile *f = &from->sources.items[i];
    diags_add_source(into, f->name, f->text, f->len);
  }
  for (size_t i = 0; i < from->list.len; i++) {
    Diag *g = from->list.items[i];
    if (into->list.len >= DIAG_MAX_KEPT) {
      into->dropped++;
      free(g->msg);
      free(g->help);
      free(g->notes);
      free(g);
      continue;
    }
    g->loc.file = diags_intern(into, g->loc.file);
    g->seq = (unsigned)into->list.len;
    rp_vec_push(&into->list, g);
  }
  from->list.len = 0;
  into->dropped += from->dropped;
  into->nerrors += from->nerrors;
  into->nwarnings += from->nwarnings;
  into->nnotes += from->nnotes;
  diags_free(from);
}

void diag_help(Diag *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rp_vsprintf(fmt, ap);
  va_end(ap);
  free(g->help);
  g->help = s;
}

void diag_note(Diag *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rp_vsprintf(fmt, ap);
  va_end(ap);
  if (!g->notes) {
    g->notes = s;
    return;
  }
  char *j = rp_sprintf("%s\n%s", g->notes, s);
  free(g->notes);
  free(s);
  g->notes = j;
}

bool diag_format_parse(const char *s, DiagFormat *out) {
  if (strcmp(s, "text") == 0) *out = DIAG_FMT_TEXT;
  else if (strcmp(s, "json") == 0) *out = DIAG_FMT_JSON;
  else if (strcmp(s, "sarif") == 0) *out = DIAG_FMT_SARIF;
  else return false;
  return true;
}

bool diag_want_color(FILE *out) {
  const char *nc = getenv("NO_COLOR");
  if (nc && nc[0]) return false;
  return isatty(fileno(out)) != 0;
}

static int cmp_diag(const void *a, const void *b) {
  const Diag *x = *(const Diag *const *)a, *y = *(const Diag *const *)b;
  const char *fx = x->loc.file ? x->loc.file : "", *fy = y->loc.file ? y->loc.file : "";
  int c = strcmp(fx, fy);
  if (c) return c;
  if (x->loc.line != y->loc.line) return x->loc.line < y->loc.line ? -1 : 1;
  if (x->loc.col != y->loc.col) return x->loc.col < y->loc.col ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const char *sev_word(Severity s) {
  return s == SEV_ERROR ? "error" : s == SEV_WARNING ? "warning" : "note";
}

/* Finds line `line` (1-based) of a registered source; returns its start and
 * length (without the newline), or NULL. */
static const char *source_line(Diags *d, const char *file, int line, size_t *len) {
  if (!file || line <= 0) return NULL;
  for (size_t i = 0; i < d->sources.len; i++) {
    SourceFile *sf = &d->sources.items[i];
    if (strcmp(sf->name, file) != 0) continue;
    const char *p = sf->text, *end = sf->text + sf->len;
    for (int l = 1; l < line && p < end; l++) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      if (!nl) return NULL;
      p = nl + 1;
    }
    if (p >= end && line > 1) return NULL;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (n && p[n - 1] == '\r') n--;
    *len = n;
    return p;
  }
  return NULL;
}

/* Writes a source line safely: control bytes and NULs become '?', so a
 * hostile spec cannot drive the terminal. Invalid UTF-8 is also replaced. */
static void put_sanitized(StrBuf *sb, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '\t') sb_putc(sb, ' ');
    else if (c < 0x20 || c == 0x7f) sb_putc(sb, '?');
    else if (c < 0x80) sb_putc(sb, (char)c);
    else {
      /* validate a UTF-8 sequence */
      size_t need = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : 0;
      if (c >= 0xf5) need = 0;
      bool ok = need > 0 && i + need < n;
      for (size_t k = 1; ok && k <= need; k++)
        if (i + k >= n || ((unsigned char)p[i + k] & 0xc0) != 0x80) ok = false;
      if (ok) {
        sb_putn(sb, p + i, need + 1);
        i += need;
      } else {
        sb_putc(sb, '?');
      }
    }
  }
}

static void print_text(Diags *d, Diag *g, StrBuf *sb, bool color) {
  const char *bold = color ? "\033[1m" : "", *reset = color ? "\033[0m" : "";
  const char *sevc = !color ? "" : g->sev == SEV_ERROR ? "\033[1;31m"
                                  : g->sev == SEV_WARNING ? "\033[1;33m" : "\033[1;36m";
  const char *blue = color ? "\033[1;34m" : "";
  const char *green = color ? "\033[1;32m" : "";
  if (g->loc.file && g->loc.line > 0)
    sb_printf(sb, "%s%s:%d:%d:%s ", bold, g->loc.file, g->loc.line, g->loc.col, reset);
  else if (g->loc.file)
    sb_printf(sb, "%s%s:%s ", bold, g->loc.file, reset);
  sb_printf(sb, "%s%s[%s]%s: %s%s%s\n", sevc, sev_word(g->sev), diag_info(g->code)->code,
            reset, bold, g->msg, reset);
  size_t n;
  const char *line = source_line(d, g->loc.file, g->loc.line, &n);
  if (line) {
    char num[16];
    int w = snprintf(num, sizeof num, "%d", g->loc.line);
    sb_printf(sb, "%s%*s |%s\n", blue, w, "", reset);
    sb_printf(sb, "%s%s |%s ", blue, num, reset);
    put_sanitized(sb, line, n);
    sb_putc(sb, '\n');
    sb_printf(sb, "%s%*s |%s ", blue, w, "", reset);
    /* caret under column col (columns count characters, tabs as 1) */
    for (int c = 1; c < g->loc.col; c++) sb_putc(sb, ' ');
    sb_printf(sb, "%s^%s\n", sevc, reset);
  }
  if (g->notes) {
    const char *p = g->notes;
    while (*p) {
      const char *nl = strchr(p, '\n');
      size_t len = nl ? (size_t)(nl - p) : strlen(p);
      sb_printf(sb, "  %s= note:%s ", blue, reset);
      sb_putn(sb, p, len);
      sb_putc(sb, '\n');
      p += len + (nl ? 1 : 0);
    }
  }
  if (g->help) sb_printf(sb, "  %s= help:%s %s\n", green, reset, g->help);
}

static json_t *loc_json(const Diag *g) {
  json_t *o = json_object();
  json_object_set_new(o, "file", g->loc.file ? json_string(g->loc.file) : json_null());
  json_object_set_new(o, "line", json_integer(g->loc.line));
  json_object_set_new(o, "column", json_integer(g->loc.col));
  return o;
}

/* json_string requires valid UTF-8; messages quote user input, so
 * sanitise first. */
static json_t *safe_string(const char *s) {
  StrBuf sb;
  sb_init(&sb);
  put_sanitized(&sb, s, strlen(s));
  json_t *j = json_string(sb.buf);
  sb_free(&sb);
  return j ? j : json_string("?");
}

static json_t *notes_json(const Diag *g) {
  json_t *a = json_array();
  if (!g->notes) return a;
  const char *p = g->notes;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char *s = rp_strndup(p, len);
    json_array_append_new(a, safe_string(s));
    free(s);
    p += len + (nl ? 1 : 0);
  }
  return a;
}

static json_t *diags_json_sorted(Diags *d, Diag **v, size_t n) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("rankplan.diagnostics/1"));
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    Diag *g = v[i];
    json_t *o = json_object();
    json_object_set_new(o, "code", json_string(diag_info(g->code)->code));
    json_object_set_new(o, "slug", json_string(diag_info(g->code)->slug));
    json_object_set_new(o, "severity", json_string(sev_word(g->sev)));
    json_object_set_new(o, "message", safe_string(g->msg));
    json_object_set_new(o, "location", loc_json(g));
    json_object_set_new(o, "help", g->help ? safe_string(g->help) : json_null());
    json_object_set_new(o, "notes", notes_json(g));
    json_array_append_new(arr, o);
  }
  json_object_set_new(root, "diagnostics", arr);
  json_object_set_new(root, "errors", json_integer(d->nerrors));
  json_object_set_new(root, "not_shown", json_integer((json_int_t)d->dropped));
  json_object_set_new(root, "warnings", json_integer(d->nwarnings));
  return root;
}

/* The SARIF rules: one per diagnostic code, with its default level. */
static json_t *sarif_rules(void) {
  json_t *rules = json_array();
  for (size_t i = 0; i < RP_ARRAY_LEN(diag_table); i++) {
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(diag_table[i].code));
    json_object_set_new(r, "name", json_string(diag_table[i].slug));
    json_t *sd = json_object();
    json_object_set_new(sd, "text", json_string(diag_table[i].summary));
    json_object_set_new(r, "shortDescription", sd);
    json_t *dc = json_object();
    json_object_set_new(dc, "level", json_string(diag_table[i].sev == SEV_ERROR ? "error"
                                             : diag_table[i].sev == SEV_WARNING ? "warning" : "note"));
    json_object_set_new(r, "defaultConfiguration", dc);
    json_array_append_new(rules, r);
  }
  return rules;
}

/* One diagnostic as a SARIF result. */
static json_t *sarif_result(const Diag *g) {
  json_t *r = json_object();
  json_object_set_new(r, "ruleId", json_string(diag_info(g->code)->code));
  json_object_set_new(r, "ruleIndex", json_integer((json_int_t)g->code));
  json_object_set_new(r, "level", json_string(g->sev == SEV_ERROR ? "error"
                                            : g->sev == SEV_WARNING ? "warning" : "note"));
  StrBuf sb;
  sb_init(&sb);
  sb_puts(&sb, g->msg);
  if (g->help) sb_printf(&sb, "\nhelp: %s", g->help);
  json_t *m = json_object();
  json_object_set_new(m, "text", safe_string(sb.buf));
  sb_free(&sb);
  json_object_set_new(r, "message", m);
  json_t *locs = json_array();
  if (g->loc.file) {
    json_t *pl = json_object();
    json_t *al = json_object();
    json_object_set_new(al, "uri", safe_string(g->loc.file));
    json_object_set_new(pl, "artifactLocation", al);
    if (g->loc.line > 0) {
      json_t *reg = json_object();
      json_object_set_new(reg, "startLine", json_integer(g->loc.line));
      json_object_set_new(reg, "startColumn", json_integer(g->loc.col > 0 ? g->loc.col : 1));
      json_object_set_new(pl, "region", reg);
    }
    json_t *l = json_object();
    json_object_set_new(l, "physicalLocation", pl);
    json_array_append_new(locs, l);
  }
  json_object_set_new(r, "locations", locs);
  return r;
}

static void print_sarif(Diag **v, size_t n, FILE *out) {
  json_t *root = json_object();
  json_object_set_new(root, "$schema", json_string("https://json.schemastore.org/sarif-2.1.0.json"));
  json_object_set_new(root, "version", json_string("2.1.0"));
  json_t *run = json_object();
  json_t *driver = json_object();
  json_object_set_new(driver, "name", json_string("rankplan"));
  json_object_set_new(driver, "version", json_string(RP_VERSION));
  json_object_set_new(driver, "informationUri", json_string("docs/errors.md"));
  json_object_set_new(driver, "rules", sarif_rules());
  json_t *tool = json_object();
  json_object_set_new(tool, "driver", driver);
  json_object_set_new(run, "tool", tool);
  json_t *results = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(results, sarif_result(v[i]));
  json_object_set_new(run, "results", results);
  json_t *runs = json_array();
  json_array_append_new(runs, run);
  json_object_set_new(root, "runs", runs);
  char *s = json_dumps(root, JSON_INDENT(2));
  if (!s) rp_internal("cannot serialise SARIF");
  fprintf(out, "%s\n", s);
  free(s);
  json_decref(root);
}

/* The diagnostics in print order: (file, line, column, report order). The
 * caller frees the array (not the Diags in it). */
static Diag **diags_sorted(Diags *d) {
  size_t n = d->list.len;
  Diag **v = rp_malloc((n ? n : 1) * sizeof *v);
  if (n) memcpy(v, d->list.items, n * sizeof *v);
  qsort(v, n, sizeof *v, cmp_diag);
  return v;
}

json_t *diags_to_json(Diags *d) {
  Diag **v = diags_sorted(d);
  json_t *root = diags_json_sorted(d, v, d->list.len);
  free(v);
  return root;
}

void diags_print_json_object(json_t *root, FILE *out) {
  char *s = json_dumps(root, JSON_INDENT(2));
  if (!s) rp_internal("cannot serialise diagnostics");
  fprintf(out, "%s\n", s);
  free(s);
}

void diags_print(Diags *d, FILE *out, DiagFormat fmt, bool color) {
  size_t n = d->list.len;
  Diag **v = diags_sorted(d);
  if (fmt == DIAG_FMT_JSON) {
    json_t *root = diags_json_sorted(d, v, n);
    diags_print_json_object(root, out);
    json_decref(root);
  }
  else if (fmt == DIAG_FMT_SARIF) print_sarif(v, n, out);
  else {
    StrBuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < n; i++) {
      print_text(d, v[i], &sb, color);
      sb_putc(&sb, '\n');
    }
    if (d->dropped)
      sb_printf(&sb, "%zu more diagnostic%s not shown (at most %d are kept)\n", d->dropped,
                d->dropped == 1 ? "" : "s", DIAG_MAX_KEPT);
    if (d->nerrors || d->nwarnings || d->nnotes) {
      sb_printf(&sb, "%d error%s, %d warning%s", d->nerrors, d->nerrors == 1 ? "" : "s",
                d->nwarnings, d->nwarnings == 1 ? "" : "s");
      if (d->nnotes) sb_printf(&sb, ", %d note%s", d->nnotes, d->nnotes == 1 ? "" : "s");
      sb_putc(&sb, '\n');
    }
    fputs(sb.buf, out);
    sb_free(&sb);
  }
  free(v);
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return SIZE_MAX;
  size_t prev[65], cur[65];
  for (size_t j = 0; j <= lb; j++) prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (lb + 1) * sizeof(size_t));
  }
  return prev[lb];
}

const char *diag_closest(const char *word, const char *const *cands, size_t n) {
  const char *best = NULL;
  size_t bestd = SIZE_MAX;
  size_t wl = strlen(word);
  size_t limit = wl / 3 > 1 ? wl / 3 : 1;
  if (limit < 2 && wl >= 4) limit = 2;
  for (size_t i = 0; i < n; i++) {
    size_t dd = edit_distance(word, cands[i]);
    if (dd < bestd) {
      bestd = dd;
      best = cands[i];
    }
  }
  return bestd <= limit ? best : NULL;
}
