/*
 * ytree.h: the YAML reader of the front end. It turns the bytes of one spec
 * (or catalog) file into a small tree of nodes that keep their source
 * positions; compiler/parse.c then types that tree into the Spec IR.
 *
 * Only ytree.c and parse.c include this header, and only ytree.c includes
 * libyaml: every later stage sees the Spec IR, never YAML.
 *
 * The reader is defensive: the input is pre-scanned for NUL bytes and
 * invalid UTF-8, nesting is capped while events stream in (so no input can
 * make it recurse or allocate without bound), aliases are resolved by
 * sharing nodes and their expansion is counted against a cap, and duplicate
 * keys, tags and non-scalar keys are rejected.
 */
#ifndef RANKPLAN_YTREE_H
#define RANKPLAN_YTREE_H

#include "diag.h"

/* Deepest nesting of collections accepted (the root mapping is depth 1). */
#define YAML_MAX_DEPTH 64
/* Most nodes that aliases may add to the tree, counted as if every alias
 * were copied out (the defence against "billion laughs"). */
#define YAML_MAX_ALIAS_NODES 10000

typedef enum { YN_SCALAR, YN_SEQ, YN_MAP } YNodeKind;
/* How a scalar was written: plain scalars are typed by the schema
 * (numbers, booleans); quoted and block scalars are always strings. */
typedef enum { YS_PLAIN, YS_SINGLE, YS_DOUBLE, YS_BLOCK } YScalarStyle;

typedef struct YNode YNode;
typedef struct {
  YNode *key; /* always a scalar */
  YNode *val;
} YPair;

struct YNode {
  YNodeKind kind;
  SrcLoc loc;          /* start of the node (1-based line and column) */
  /* scalar */
  const char *str;     /* NUL-terminated; len excludes the NUL */
  size_t len;
  YScalarStyle style;
  /* sequence: items[0..n); mapping: pairs[0..n) */
  size_t n;
  YNode **items;
  YPair *pairs;
  /* internal bookkeeping: nodes below this one (itself included, aliases
   * expanded) and the height of the subtree */
  int64_t weight;
  int height;
};

/* Owns every node and string of one or more loaded documents. */
typedef struct YArena YArena;
YArena *yaml_arena_new(void);
void yaml_arena_free(YArena *a);
/* Allocations that live as long as the arena (used by parse.c to build
 * merged preset mappings). */
void *yaml_arena_alloc(YArena *a, size_t n);

/* Loads one YAML document from text[0..len). file is the interned name
 * used in SrcLoc (the caller registered the source with the Diags).
 * Returns NULL when the text cannot be read as one document (syntax, encoding,
 * caps, aliases, E0003-E0012). Problems that leave the tree whole (a
 * duplicate key: both pairs stay and lookups find the first; a tag: it is
 * ignored; a non-scalar key: the pair is dropped; E0013-E0015) are reported
 * and the root is still returned, so the caller can go on and report the spec's own errors too:
 * compare d->nerrors before and after. Never reads past len; text need not
 * be NUL-terminated. */
YNode *yaml_load(Diags *d, YArena *a, const char *file, const char *text,
                 size_t len);

/* Looks key up in a mapping (NULL when absent or m is not a mapping). */
YNode *yaml_map_get(const YNode *m, const char *key);
/* "mapping", "sequence", "string", "integer", "number", "boolean", "null":
 * the type a node reads as, for "expected X, got Y" messages. */
const char *yaml_node_type_name(const YNode *n);

#endif
