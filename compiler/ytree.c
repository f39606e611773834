/*
 * ytree.c: YAML bytes → a small node tree (ytree.h), the first half of the
 * parse stage.
 *
 * Input: the bytes of one file. Output: a YNode tree whose every node keeps
 * its 1-based line:col, or NULL with diagnostics. Invariants of a returned
 * tree: exactly one document; the root is not an empty scalar; no node is
 * tagged; every mapping key is a scalar and unique within its mapping; no
 * collection is nested deeper than YAML_MAX_DEPTH, aliases included; the
 * nodes that aliases add, counted as if copied, stay under
 * YAML_MAX_ALIAS_NODES. Aliases share the node they name, so the tree is a
 * DAG whose nodes all live in one arena.
 *
 * The builder consumes libyaml's event API with an explicit stack, never
 * recursion, and stops at the first event that would break a cap: an input
 * 200,000 collections deep costs 65 stack frames. The input is pre-scanned
 * for NUL bytes and invalid UTF-8 first, because libyaml reports those with
 * a byte offset (or not at all for NUL, which ends its input) and the user
 * deserves a line and a column.
 */
#include <stdlib.h>
#include <string.h>

#include <yaml.h> /* libyaml's */

#include "ytree.h"

/* ---------------------------------------------------------------------- */
/* Arena: every node, array and string of a load lives here and goes at once,
 * which is what makes shared (aliased) nodes safe to free. */

typedef struct Chunk {
  struct Chunk *next;
  size_t used, cap;
  max_align_t data[];
} Chunk;

struct YArena {
  Chunk *head;
};

YArena *yaml_arena_new(void) { return rp_calloc(1, sizeof(YArena)); }

void yaml_arena_free(YArena *a) {
  if (!a) return;
  Chunk *c = a->head;
  while (c) {
    Chunk *n = c->next;
    free(c);
    c = n;
  }
  free(a);
}

void *yaml_arena_alloc(YArena *a, size_t n) {
  size_t al = sizeof(max_align_t);
  n = (n + al - 1) / al * al;
  if (n == 0) n = al;
  Chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 16384 ? n : 16384;
    c = rp_malloc(sizeof(Chunk) + cap);
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

static char *arena_strndup(YArena *a, const char *s, size_t n) {
  char *p = yaml_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

/* ---------------------------------------------------------------------- */
/* Pre-scan: NUL bytes and UTF-8 validity, with line:col of the culprit
 * (columns count characters, as libyaml's marks and the caret do). */

static bool prescan(Diags *d, const char *file, const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  int line = 1, col = 1;
  size_t i = 0;
  /* a UTF-8 byte order mark takes no column */
  if (len >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF) i = 3;
  while (i < len) {
    unsigned char c = s[i];
    if (c == 0) {
      Diag *g = diag_at(d, DIAG_E0004, (SrcLoc){file, line, col},
                        "the spec contains a NUL byte at byte offset %zu", i);
      diag_help(g, "a spec is a UTF-8 text file; check that the right file was given");
      return false;
    }
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      n = 1;
      cp = c;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      cp = c & 0x07;
    } else {
      n = 0;
      cp = 0;
    }
    bool ok = n > 0 && i + n <= len;
    for (size_t k = 1; ok && k < n; k++) {
      if ((s[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    /* overlong forms, surrogates and values past U+10FFFF */
    if (ok && ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
               (cp >= 0xD800 && cp <= 0xDFFF)))
      ok = false;
    if (!ok) {
      Diag *g = diag_at(d, DIAG_E0003, (SrcLoc){file, line, col},
                        "invalid UTF-8 byte 0x%02X at byte offset %zu", c, i);
      diag_help(g, "save the file as UTF-8");
      return false;
    }
    if (c == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
    i += n;
  }
  return true;
}

/* Line and column (1-based, columns in characters) of a byte offset. */
static SrcLoc loc_of_offset(const char *file, const char *text, size_t len, size_t off) {
  SrcLoc l = {file, 1, 1};
  for (size_t i = 0; i < off && i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n') {
      l.line++;
      l.col = 1;
    } else if ((c & 0xC0) != 0x80) {
      l.col++;
    }
  }
  return l;
}

/* The byte at a libyaml mark (0-based line and character column), or -1. */
static int byte_at_mark(const char *text, size_t len, yaml_mark_t m) {
  size_t i = 0, line = 0;
  while (i < len && line < m.line) {
    if (text[i] == '\n') line++;
    i++;
  }
  size_t col = 0;
  while (i < len && col < m.column && text[i] != '\n') {
    i++;
    while (i < len && ((unsigned char)text[i] & 0xC0) == 0x80) i++;
    col++;
  }
  return i < len ? (unsigned char)text[i] : -1;
}

/* ---------------------------------------------------------------------- */
/* The builder. */

typedef struct {
  YNode *node;
  RP_VEC(YNode *) kids; /* sequence items, or key, value, key, value ... */
  char *anchor;         /* anchor name defined on this collection, if any */
} Frame;

typedef struct {
  char *name;
  YNode *node; /* NULL while the anchored collection is still open */
} Anchor;

typedef struct {
  Diags *d;
  YArena *a;
  const char *file;
  const char *text;
  size_t len;
  RP_VEC(Frame) stack;
  RP_VEC(Anchor) anchors;
  int64_t alias_nodes;
  YNode *root;
  bool failed; /* a non-fatal error was reported: the tree is still whole */
  bool stop;   /* a fatal error: stop reading events */
} Builder;

static SrcLoc mark_loc(Builder *b, yaml_mark_t m) {
  return (SrcLoc){b->file, (int)m.line + 1, (int)m.column + 1};
}

static const char *tag_display(const char *tag, char *buf, size_t n) {
  static const char core[] = "tag:yaml.org,2002:";
  if (strncmp(tag, core, sizeof core - 1) == 0)
    snprintf(buf, n, "!!%s", tag + sizeof core - 1);
  else
    snprintf(buf, n, "%s", tag);
  return buf;
}

static void reject_tag(Builder *b, const yaml_char_t *tag, yaml_mark_t m) {
  if (!tag) return;
  char buf[128];
  Diag *g = diag_at(b->d, DIAG_E0014, mark_loc(b, m), "unknown tag `%s`",
                    tag_display((const char *)tag, buf, sizeof buf));
  diag_help(g, "rankplan does not use YAML tags: remove the tag (each key's type comes from the spec reference, docs/spec.md)");
  b->failed = true;
}

static void define_anchor(Builder *b, const yaml_char_t *name, YNode *node) {
  if (!name) return;
  Anchor an = {rp_strdup((const char *)name), node};
  rp_vec_push(&b->anchors, an);
}

/* Anchors are looked up newest first: YAML lets a later anchor of the same
 * name shadow an earlier one. */
static Anchor *find_anchor(Builder *b, const char *name) {
  for (size_t i = b->anchors.len; i-- > 0;)
    if (strcmp(b->anchors.items[i].name, name) == 0) return &b->anchors.items[i];
  return NULL;
}

static void sat_add(int64_t *acc, int64_t v) {
  if (!ck_add(*acc, v, acc)) *acc = INT64_MAX;
}

/* Attaches a finished node to the open collection (or makes it the root). */
static void attach(Builder *b, YNode *n) {
  if (b->stack.len == 0) {
    b->root = n;
    return;
  }
  Frame *f = &b->stack.items[b->stack.len - 1];
  rp_vec_push(&f->kids, n);
}

static int cmp_pair_key(const void *x, const void *y) {
  const YPair *p = x, *q = y;
  size_t n = p->key->len < q->key->len ? p->key->len : q->key->len;
  int c = memcmp(p->key->str, q->key->str, n);
  if (c) return c;
  if (p->key->len != q->key->len) return p->key->len < q->key->len ? -1 : 1;
  /* equal keys: source order, so the first one is reported as "first" */
  if (p->key->loc.line != q->key->loc.line) return p->key->loc.line < q->key->loc.line ? -1 : 1;
  return p->key->loc.col < q->key->loc.col ? -1 : p->key->loc.col > q->key->loc.col;
}

static void report_dup(Builder *b, const YPair *first, const YPair *again) {
  Diag *g = diag_at(b->d, DIAG_E0013, again->key->loc, "duplicate key `%s`", again->key->str);
  diag_note(g, "first defined at %s:%d:%d", first->key->loc.file, first->key->loc.line,
            first->key->loc.col);
  diag_help(g, "keep one of the two; YAML does not define which one wins");
  b->failed = true;
}

/* Duplicate keys: quadratic for the small mappings specs have, sorted for
 * big ones so a hostile file cannot make this slow. */
static void check_dups(Builder *b, YNode *m) {
  if (m->n <= 32) {
    for (size_t i = 1; i < m->n; i++)
      for (size_t j = 0; j < i; j++)
        if (m->pairs[i].key->len == m->pairs[j].key->len &&
            memcmp(m->pairs[i].key->str, m->pairs[j].key->str, m->pairs[i].key->len) == 0) {
          report_dup(b, &m->pairs[j], &m->pairs[i]);
          break;
        }
    return;
  }
  YPair *s = rp_malloc(m->n * sizeof *s);
  memcpy(s, m->pairs, m->n * sizeof *s);
  qsort(s, m->n, sizeof *s, cmp_pair_key);
  size_t first = 0;
  for (size_t i = 1; i < m->n; i++) {
    if (s[i].key->len == s[first].key->len &&
        memcmp(s[i].key->str, s[first].key->str, s[i].key->len) == 0)
      report_dup(b, &s[first], &s[i]);
    else
      first = i;
  }
  free(s);
}

static void open_collection(Builder *b, YNodeKind kind, yaml_mark_t m, const yaml_char_t *anchor,
                            const yaml_char_t *tag) {
  if (b->stack.len + 1 > YAML_MAX_DEPTH) {
    Diag *g = diag_at(b->d, DIAG_E0012, mark_loc(b, m),
                      "collections nested deeper than %d levels", YAML_MAX_DEPTH);
    diag_help(g, "a spec needs a handful of levels; flatten the structure");
    b->stop = true;
    return;
  }
  reject_tag(b, tag, m);
  YNode *n = yaml_arena_alloc(b->a, sizeof *n);
  n->kind = kind;
  n->loc = mark_loc(b, m);
  Frame f = {n, {0}, NULL};
  if (anchor) {
    f.anchor = rp_strdup((const char *)anchor);
    define_anchor(b, anchor, NULL); /* open: an alias to it now is recursive */
  }
  rp_vec_push(&b->stack, f);
}

static void close_collection(Builder *b) {
  RP_ASSERT(b->stack.len > 0);
  Frame f = b->stack.items[--b->stack.len];
  YNode *n = f.node;
  n->weight = 1;
  n->height = 1;
  if (n->kind == YN_SEQ) {
    n->n = f.kids.len;
    n->items = yaml_arena_alloc(b->a, (n->n ? n->n : 1) * sizeof(YNode *));
    for (size_t i = 0; i < n->n; i++) n->items[i] = f.kids.items[i];
  } else {
    RP_ASSERT(f.kids.len % 2 == 0);
    n->n = f.kids.len / 2;
    n->pairs = yaml_arena_alloc(b->a, (n->n ? n->n : 1) * sizeof(YPair));
    size_t k = 0;
    for (size_t i = 0; i < n->n; i++) {
      YNode *key = f.kids.items[2 * i], *val = f.kids.items[2 * i + 1];
      if (key->kind != YN_SCALAR) {
        Diag *g = diag_at(b->d, DIAG_E0015, key->loc, "mapping key is a %s, expected a plain word",
                          key->kind == YN_MAP ? "mapping" : "sequence");
        diag_help(g, "spec keys are names such as `layers`");
        b->failed = true;
        continue;
      }
      n->pairs[k].key = key;
      n->pairs[k].val = val;
      k++;
    }
    n->n = k;
    check_dups(b, n);
  }
  for (size_t i = 0; i < f.kids.len; i++) {
    sat_add(&n->weight, f.kids.items[i]->weight);
    if (f.kids.items[i]->height + 1 > n->height) n->height = f.kids.items[i]->height + 1;
  }
  free(f.kids.items);
  if (f.anchor) {
    /* the anchor defined when this collection opened is the newest open
     * one of that name */
    for (size_t i = b->anchors.len; i-- > 0;)
      if (!b->anchors.items[i].node && strcmp(b->anchors.items[i].name, f.anchor) == 0) {
        b->anchors.items[i].node = n;
        break;
      }
    free(f.anchor);
  }
  attach(b, n);
}

static void add_scalar(Builder *b, const yaml_event_t *ev) {
  reject_tag(b, ev->data.scalar.tag, ev->start_mark);
  YNode *n = yaml_arena_alloc(b->a, sizeof *n);
  n->kind = YN_SCALAR;
  n->loc = mark_loc(b, ev->start_mark);
  n->len = ev->data.scalar.length;
  n->str = arena_strndup(b->a, (const char *)ev->data.scalar.value, n->len);
  switch (ev->data.scalar.style) {
  case YAML_SINGLE_QUOTED_SCALAR_STYLE: n->style = YS_SINGLE; break;
  case YAML_DOUBLE_QUOTED_SCALAR_STYLE: n->style = YS_DOUBLE; break;
  case YAML_LITERAL_SCALAR_STYLE:
  case YAML_FOLDED_SCALAR_STYLE: n->style = YS_BLOCK; break;
  case YAML_ANY_SCALAR_STYLE:
  case YAML_PLAIN_SCALAR_STYLE:
  default: n->style = YS_PLAIN; break;
  }
  n->weight = 1;
  n->height = 0;
  define_anchor(b, ev->data.scalar.anchor, n);
  attach(b, n);
}

static void add_alias(Builder *b, const yaml_event_t *ev) {
  const char *name = (const char *)ev->data.alias.anchor;
  SrcLoc loc = mark_loc(b, ev->start_mark);
  Anchor *an = find_anchor(b, name);
  if (!an) {
    Diag *g = diag_at(b->d, DIAG_E0011, loc, "undefined alias `*%s`", name);
    diag_help(g, "define the anchor `&%s` on a node before this alias", name);
    b->stop = true;
    return;
  }
  if (!an->node) {
    Diag *g = diag_at(b->d, DIAG_E0010, loc, "alias `*%s` refers to a node that contains it", name);
    diag_help(g, "an alias must name a node that is complete before the alias");
    b->stop = true;
    return;
  }
  YNode *t = an->node;
  sat_add(&b->alias_nodes, t->weight);
  if (b->alias_nodes > YAML_MAX_ALIAS_NODES) {
    Diag *g = diag_at(b->d, DIAG_E0009, loc,
                      "aliases expand to more than %d nodes", YAML_MAX_ALIAS_NODES);
    diag_help(g, "aliases that nest other aliases grow exponentially; write the values out");
    b->stop = true;
    return;
  }
  if ((int64_t)b->stack.len + t->height > YAML_MAX_DEPTH) {
    Diag *g = diag_at(b->d, DIAG_E0012, loc,
                      "alias `*%s` nests collections deeper than %d levels", name, YAML_MAX_DEPTH);
    diag_help(g, "a spec needs a handful of levels; flatten the structure");
    b->stop = true;
    return;
  }
  attach(b, t);
}

static void parser_error(Builder *b, yaml_parser_t *p) {
  const char *problem = p->problem ? p->problem : "unknown problem";
  SrcLoc loc;
  if (p->error == YAML_READER_ERROR) {
    loc = loc_of_offset(b->file, b->text, b->len, p->problem_offset);
    diag_at(b->d, DIAG_E0005, loc, "cannot read the spec: %s", problem);
    return;
  }
  if (p->error == YAML_MEMORY_ERROR) rp_internal("libyaml ran out of memory");
  loc = mark_loc(b, p->problem_mark);
  int c = byte_at_mark(b->text, b->len, p->problem_mark);
  if (p->error == YAML_SCANNER_ERROR && (c == '\t' || strstr(problem, "tab"))) {
    Diag *g = diag_at(b->d, DIAG_E0006, loc, "tab character used for indentation");
    diag_help(g, "YAML indents with spaces only; replace the tab with spaces");
    return;
  }
  Diag *g;
  if (c < 0 && p->context) {
    /* The file ended inside a construct: point at where it opened, which is
     * where the missing bracket or quote belongs. */
    g = diag_at(b->d, DIAG_E0005, mark_loc(b, p->context_mark), "unexpected end of file %s: %s",
                p->context, problem);
    diag_note(g, "the file ends at %d:%d", loc.line, loc.col);
    diag_help(g, "the file looks truncated: close every bracket and quote");
    return;
  }
  g = diag_at(b->d, DIAG_E0005, loc, "invalid YAML: %s", problem);
  if (p->context)
    diag_note(g, "%s, which started at %d:%d", p->context, (int)p->context_mark.line + 1,
              (int)p->context_mark.column + 1);
  if (c < 0) diag_help(g, "the file looks truncated: close every bracket and quote");
}

YNode *yaml_load(Diags *d, YArena *a, const char *file, const char *text, size_t len) {
  if (!prescan(d, file, text, len)) return NULL;
  Builder b = {.d = d, .a = a, .file = file, .text = text, .len = len};
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) rp_internal("libyaml: cannot initialise the parser");
  /* No yaml_parser_set_encoding: libyaml's own detection consumes a UTF-8
   * byte order mark (which an explicit encoding would not), and UTF-16
   * input never gets here, the pre-scan has refused it as invalid UTF-8. */
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int docs = 0;
  bool done = false;
  while (!done && !b.stop) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      parser_error(&b, &p);
      b.stop = true;
      break;
    }
    switch (ev.type) {
    case YAML_STREAM_END_EVENT: done = true; break;
    case YAML_DOCUMENT_START_EVENT:
      if (++docs > 1) {
        Diag *g = diag_at(d, DIAG_E0008, mark_loc(&b, ev.start_mark),
                          "a second YAML document starts here");
        diag_help(g, "a spec is one document: remove this `---` and what follows, or split the file");
        b.stop = true;
      }
      break;
    case YAML_SCALAR_EVENT: add_scalar(&b, &ev); break;
    case YAML_SEQUENCE_START_EVENT:
      open_collection(&b, YN_SEQ, ev.start_mark, ev.data.sequence_start.anchor,
                      ev.data.sequence_start.tag);
      break;
    case YAML_MAPPING_START_EVENT:
      open_collection(&b, YN_MAP, ev.start_mark, ev.data.mapping_start.anchor,
                      ev.data.mapping_start.tag);
      break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: close_collection(&b); break;
    case YAML_ALIAS_EVENT: add_alias(&b, &ev); break;
    case YAML_NO_EVENT:
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
    default: break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  for (size_t i = 0; i < b.stack.len; i++) {
    free(b.stack.items[i].kids.items);
    free(b.stack.items[i].anchor);
  }
  free(b.stack.items);
  for (size_t i = 0; i < b.anchors.len; i++) free(b.anchors.items[i].name);
  free(b.anchors.items);
  if (b.stop) return NULL;
  if (docs == 0 || !b.root) {
    Diag *g = diag_at(d, DIAG_E0007, (SrcLoc){file, 0, 0}, "the spec holds no YAML document");
    diag_help(g, "a spec starts with `version: 1`; see docs/spec.md");
    return NULL;
  }
  if (b.root->kind == YN_SCALAR && b.root->style == YS_PLAIN &&
      (b.root->len == 0 || strcmp(b.root->str, "~") == 0 || strcmp(b.root->str, "null") == 0)) {
    Diag *g = diag_at(d, DIAG_E0007, b.root->loc, "the spec's document is empty");
    diag_help(g, "a spec starts with `version: 1`; see docs/spec.md");
    return NULL;
  }
  return b.root;
}

YNode *yaml_map_get(const YNode *m, const char *key) {
  if (!m || m->kind != YN_MAP) return NULL;
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->pairs[i].key->str, key) == 0 && m->pairs[i].key->len == strlen(key))
      return m->pairs[i].val;
  return NULL;
}

static bool all_digits(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

const char *yaml_node_type_name(const YNode *n) {
  if (n->kind == YN_MAP) return "mapping";
  if (n->kind == YN_SEQ) return "sequence";
  if (n->style != YS_PLAIN) return "string";
  const char *s = n->str;
  size_t len = n->len;
  if (len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
      strcmp(s, "NULL") == 0)
    return "null";
  if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) return "boolean";
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (all_digits(s + i, len - i)) return "integer";
  char *end;
  (void)strtod(s, &end);
  if (end == s + len && len > i && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) return "number";
  return "string";
}
