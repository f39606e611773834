/*
 * diag.h: the one diagnostics engine of the compiler.
 *
 * Every stage reports problems through diag_at() with a code from the
 * X-macro tables (codes_*.def), a source position and a message that names
 * the values involved; a help line is attached with diag_help() where a fix
 * exists. Nothing is printed while stages run: the CLI collects everything
 * and prints once, in position order, as text, JSON or SARIF 2.1.0.
 *
 * Message wording (style.md): lowercase, no full stop, problem first,
 * subject quoted with backquotes, "expected X, got Y".
 */
#ifndef RANKPLAN_DIAG_H
#define RANKPLAN_DIAG_H

#include "util.h"

/* A position in a source file, 1-based. line == 0 means "no position" (a
 * whole-file or whole-spec problem). file is interned by the Diags that
 * loaded it, or a string literal. */
typedef struct {
  const char *file;
  int line, col;
} SrcLoc;

typedef enum { SEV_ERROR, SEV_WARNING, SEV_NOTE } Severity;

/* One list of codes, split by subsystem; each .def holds
 * X(CODE, SEVERITY, "slug", "one-line summary"). docs/errors.md documents
 * every code; tests/unit/test_diag_docs.sh keeps the two in sync. */
typedef enum {
#define X(code, sev, slug, summary) DIAG_##code,
#include "codes_front.def"
#include "codes_model.def"
#include "codes_layout.def"
#include "codes_reshard.def"
#include "codes_search.def"
#include "codes_hooks.def"
#include "codes_engine.def"
#include "codes_calib.def"
#undef X
  DIAG__COUNT
} DiagCode;

typedef struct {
  const char *code;    /* "E0101" */
  Severity sev;        /* default severity */
  const char *slug;    /* "unknown-key" */
  const char *summary; /* one line */
} DiagInfo;

const DiagInfo *diag_info(DiagCode c);
/* Looks a code up by its name ("E0101"); returns DIAG__COUNT when unknown. */
DiagCode diag_lookup(const char *code);

typedef struct {
  DiagCode code;
  Severity sev;
  SrcLoc loc;
  char *msg;
  char *help;  /* may be NULL */
  char *notes; /* may be NULL; newline-separated extra lines */
  unsigned seq;
} Diag;

typedef struct {
  const char *name; /* interned */
  char *text;       /* owned copy */
  size_t len;
} SourceFile;

/* At most this many diagnostics are kept; further ones are counted (and
 * still make the run fail) but not printed, as compilers do after too many
 * errors. Keeps output, memory and time bounded on hostile input. */
#define DIAG_MAX_KEPT 200

typedef struct {
  RP_VEC(Diag *) list;
  Diag *scratch;      /* target of diag_help/diag_note once over the cap */
  size_t dropped;     /* reports not kept because of DIAG_MAX_KEPT */
  RP_VEC(SourceFile) sources;
  RP_VEC(char *) strings; /* interned strings */
  int nerrors, nwarnings, nnotes;
} Diags;

void diags_init(Diags *d);
void diags_free(Diags *d);

/* Registers a source so diagnostics in it can show the line and a caret.
 * Returns the interned name to use in SrcLoc.file. */
const char *diags_add_source(Diags *d, const char *name, const char *text,
                             size_t len);
const char *diags_intern(Diags *d, const char *s);

/* Reports a diagnostic with the code's default severity. The returned Diag
 * stays owned by d; use it only to attach help and notes. */
Diag *diag_at(Diags *d, DiagCode code, SrcLoc loc, const char *fmt, ...)
    RP_PRINTF(4, 5);
void diag_help(Diag *g, const char *fmt, ...) RP_PRINTF(2, 3);
void diag_note(Diag *g, const char *fmt, ...) RP_PRINTF(2, 3);

/* Moves every diagnostic, source and count of `from` into `into` (the file
 * names re-interned there; past DIAG_MAX_KEPT they are counted, not kept)
 * and leaves `from` empty. For commands that report several inputs, each
 * checked with its own list, as one document. */
void diags_move(Diags *into, Diags *from);

static inline bool diags_failed(const Diags *d) { return d->nerrors > 0; }

typedef enum { DIAG_FMT_TEXT, DIAG_FMT_JSON, DIAG_FMT_SARIF } DiagFormat;

/* Parses "text" | "json" | "sarif"; returns false when unknown. */
bool diag_format_parse(const char *s, DiagFormat *out);

/* Prints every diagnostic, sorted by file, line, column, then report order,
 * followed (text only) by a summary line. color adds ANSI colours. */
void diags_print(Diags *d, FILE *out, DiagFormat fmt, bool color);

/* The `--format json` object of docs/errors.md ("rankplan.diagnostics/1"),
 * for commands that add keys of their own before printing it with
 * diags_print_json_object (which does not take ownership). The caller
 * json_decref()s the result. */
struct json_t;
struct json_t *diags_to_json(Diags *d);
void diags_print_json_object(struct json_t *root, FILE *out);

/* Whether colour should be used on this stream: a TTY and NO_COLOR unset. */
bool diag_want_color(FILE *out);

/* Closest candidate by edit distance, or NULL if none is close enough
 * (distance <= max(1, len/3)). For "did you mean" help lines. */
const char *diag_closest(const char *word, const char *const *cands, size_t n);

#endif
