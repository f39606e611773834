/*
 * util.h: small helpers shared by every stage of the compiler and by the
 * runtime: allocation that never returns NULL (out of memory is an internal
 * error, exit 70), a growable string buffer, and 64-bit checked arithmetic.
 *
 * Every byte and FLOP count in rankplan goes through ck_add/ck_mul (or the
 * saturating variants when a caller reports the overflow as a diagnostic):
 * an overflow is reported, never wrapped.
 */
#ifndef RANKPLAN_UTIL_H
#define RANKPLAN_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes shared by both binaries (architecture.md). */
enum {
  RP_EXIT_OK = 0,
  RP_EXIT_INPUT = 1,    /* the input is wrong; diagnostics printed */
  RP_EXIT_USAGE = 2,    /* usage error or unreadable file */
  RP_EXIT_RUNTIME = 3,  /* a rank died, a peer never came, a transfer failed */
  RP_EXIT_SLO = 4,      /* the spec is valid, but no layout meets its SLOs */
  RP_EXIT_INTERNAL = 70 /* a bug in rankplan */
};

#define RP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define RP_UNUSED(x) ((void)(x))

#if defined(__GNUC__)
#define RP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RP_NORETURN __attribute__((noreturn))
#else
#define RP_PRINTF(f, a)
#define RP_NORETURN
#endif

/* Prints "rankplan: internal error: ..." and exits 70. For broken invariants
 * and allocation failure only, never for bad input. */
RP_NORETURN void rp_internal(const char *fmt, ...) RP_PRINTF(1, 2);
#define RP_ASSERT(c)                                                         \
  do {                                                                       \
    if (!(c)) rp_internal("%s:%d: assertion '%s' failed", __FILE__,          \
                          __LINE__, #c);                                     \
  } while (0)

void *rp_malloc(size_t n);
void *rp_calloc(size_t n, size_t size);
void *rp_realloc(void *p, size_t n);
char *rp_strdup(const char *s);
char *rp_strndup(const char *s, size_t n);
char *rp_sprintf(const char *fmt, ...) RP_PRINTF(1, 2);
char *rp_vsprintf(const char *fmt, va_list ap) RP_PRINTF(1, 0);

/* Growable array: RP_VEC(T) v = {0}; rp_vec_push(&v, x); */
#define RP_VEC(T) struct { T *items; size_t len, cap; }
#define rp_vec_push(v, x)                                                    \
  do {                                                                       \
    if ((v)->len == (v)->cap) {                                              \
      (v)->cap = (v)->cap ? (v)->cap * 2 : 8;                                \
      (v)->items = rp_realloc((v)->items, (v)->cap * sizeof(*(v)->items));   \
    }                                                                        \
    (v)->items[(v)->len++] = (x);                                            \
  } while (0)

/* String buffer. */
typedef struct {
  char *buf;
  size_t len, cap;
} StrBuf;
void sb_init(StrBuf *sb);
void sb_free(StrBuf *sb);
void sb_putc(StrBuf *sb, char c);
void sb_puts(StrBuf *sb, const char *s);
void sb_putn(StrBuf *sb, const char *s, size_t n);
void sb_printf(StrBuf *sb, const char *fmt, ...) RP_PRINTF(2, 3);
void sb_vprintf(StrBuf *sb, const char *fmt, va_list ap) RP_PRINTF(2, 0);
char *sb_take(StrBuf *sb); /* returns the buffer (NUL-terminated), resets sb */
/* Appends s as a JSON string: quotes, `\"`, `\\`, `\n`, `\t` and `\u00XX`
 * for the other control bytes; other bytes as they are. The one JSON
 * string writer of both binaries (NULL writes ""). */
void sb_json_str(StrBuf *sb, const char *s);
/* Appends v exactly: an integral value below 2^53 as an integer, any other
 * as the shortest %g form that reads back to the same double (v finite). */
void sb_put_exact(StrBuf *sb, double v);

/* The greatest common divisor of two non-negative counts (0 when both
 * are 0). */
static inline int64_t rp_gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Whether s is a non-empty identifier ([A-Za-z_][A-Za-z0-9_]*, ASCII), as
 * a Hugging Face model class name is. */
static inline bool rp_is_identifier(const char *s) {
  if (!s || !*s || (*s >= '0' && *s <= '9')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
  return true;
}

/* a / b rounded up for a >= 0; 0 when b <= 0. */
static inline int64_t rp_cdiv64(int64_t a, int64_t b) { return b > 0 ? a / b + (a % b > 0) : 0; }

/* Checked 64-bit arithmetic: return false on overflow, *out untouched. */
static inline bool ck_add(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool ck_sub(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_sub_overflow(a, b, out);
}
static inline bool ck_mul(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* a * b, or INT64_MAX past 64 bits: for products that are only shown or
 * compared (a message, a minimum), never stored as a size. */
static inline int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r;
  return ck_mul(a, b, &r) ? r : INT64_MAX;
}
/* Sticky-overflow accumulator: compute a long expression, test ok once. */
typedef struct {
  bool ok;
} CkState;
/* Marks st as overflowed and returns the saturated value sat. */
static inline int64_t ck_fail(CkState *st, int64_t sat) {
  st->ok = false;
  return sat;
}
/* a*b, a+b, a-b; on overflow st->ok becomes false and the result saturates.
 * Inline: the cost model's inner loops call them millions of times. */
static inline int64_t ckm(CkState *st, int64_t a, int64_t b) {
  int64_t r;
  return ck_mul(a, b, &r) ? r : ck_fail(st, INT64_MAX);
}
static inline int64_t cka(CkState *st, int64_t a, int64_t b) {
  int64_t r;
  return ck_add(a, b, &r) ? r : ck_fail(st, INT64_MAX);
}
static inline int64_t cks(CkState *st, int64_t a, int64_t b) {
  int64_t r;
  return ck_sub(a, b, &r) ? r : ck_fail(st, INT64_MIN);
}

/* rp_read_file's own error besides errno values: the path names something
 * other than a regular file (a FIFO, a device, a directory, a socket),
 * which could block the reader forever (a FIFO nobody writes) or never end
 * (/dev/zero). */
#define RP_ENOTREG (-1)

/* Reads a whole file, refusing more than max bytes and anything but a
 * regular file; "-" reads standard input (whatever it is). Returns 0, or
 * an errno value (EFBIG when the file is over max) or RP_ENOTREG. *out is
 * NUL-terminated. */
int rp_read_file(const char *path, size_t max, char **out, size_t *len);

/* strerror() that also knows RP_ENOTREG. */
const char *rp_strerror(int e);
/* What path is, for a message after RP_ENOTREG: "a FIFO", "a directory",
 * "a character device", ... */
const char *rp_file_kind(const char *path);


/* Hex SHA-256 of data (65 bytes incl. NUL written to hex). */
void rp_sha256_hex(const void *data, size_t len, char hex[65]);

/* Formats bytes as "12.34 GiB" into buf. */
const char *rp_fmt_bytes(int64_t bytes, char *buf, size_t n);

/* The scale-up domain of GPU `gpu` of node `node`, for domains of `domain`
 * GPUs on nodes of `gpus_per_node`. A domain at least as large as a node
 * spans whole nodes (an NVL72 rack: domain 72, 4 GPUs per node), so it is
 * counted over the global GPU index; a smaller one splits each node. The
 * one rule of placement and of every reader of a plan. */
int64_t rp_scaleup_domain(int64_t domain, int64_t gpus_per_node, int64_t node, int64_t gpu);

#endif
