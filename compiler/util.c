/*
 * util.c: allocation, string buffers, checked arithmetic, file I/O and
 * SHA-256 (FIPS 180-4) for the spec digest in plans. Shared by rankplan
 * and rankrun; depends on libc only.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void rp_internal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("rankplan: internal error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\nthis is a bug in rankplan; please report it with the input that caused it\n", stderr);
  va_end(ap);
  exit(RP_EXIT_INTERNAL);
}

void *rp_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) rp_internal("out of memory allocating %zu bytes", n);
  return p;
}

void *rp_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) rp_internal("out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

void *rp_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) rp_internal("out of memory reallocating %zu bytes", n);
  return q;
}

char *rp_strdup(const char *s) { return rp_strndup(s, strlen(s)); }

char *rp_strndup(const char *s, size_t n) {
  char *p = rp_malloc(n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *rp_vsprintf(const char *fmt, va_list ap) {
  StrBuf sb;
  sb_init(&sb);
  sb_vprintf(&sb, fmt, ap);
  return sb_take(&sb);
}

char *rp_sprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rp_vsprintf(fmt, ap);
  va_end(ap);
  return s;
}

void sb_init(StrBuf *sb) {
  sb->cap = 64;
  sb->len = 0;
  sb->buf = rp_malloc(sb->cap);
  sb->buf[0] = '\0';
}

void sb_free(StrBuf *sb) {
  free(sb->buf);
  sb->buf = NULL;
  sb->len = sb->cap = 0;
}

static void sb_reserve(StrBuf *sb, size_t extra) {
  if (!sb->buf) sb_init(sb);
  if (sb->len + extra + 1 <= sb->cap) return;
  while (sb->len + extra + 1 > sb->cap) sb->cap *= 2;
  sb->buf = rp_realloc(sb->buf, sb->cap);
}

void sb_putn(StrBuf *sb, const char *s, size_t n) {
  sb_reserve(sb, n);
  memcpy(sb->buf + sb->len, s, n);
  sb->len += n;
  sb->buf[sb->len] = '\0';
}

void sb_putc(StrBuf *sb, char c) { sb_putn(sb, &c, 1); }
void sb_puts(StrBuf *sb, const char *s) { sb_putn(sb, s, strlen(s)); }

void sb_vprintf(StrBuf *sb, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) rp_internal("vsnprintf failed for format '%s'", fmt);
  sb_reserve(sb, (size_t)n);
  vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void sb_printf(StrBuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(sb, fmt, ap);
  va_end(ap);
}

void sb_json_str(StrBuf *sb, const char *s) {
  static const char hex[] = "0123456789abcdef";
  sb_putc(sb, '"');
  const unsigned char *p = (const unsigned char *)(s ? s : ""), *run = p;
  for (; *p; p++) {
    unsigned char c = *p;
    if (c != '"' && c != '\\' && c >= 0x20) continue;
    sb_putn(sb, (const char *)run, (size_t)(p - run));
    run = p + 1;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      sb_putn(sb, e, 2);
    } else if (c == '\n' || c == '\t') {
      sb_putn(sb, c == '\n' ? "\\n" : "\\t", 2);
    } else {
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      sb_putn(sb, e, 6);
    }
  }
  sb_putn(sb, (const char *)run, (size_t)(p - run));
  sb_putc(sb, '"');
}

char *sb_take(StrBuf *sb) {
  if (!sb->buf) sb_init(sb);
  char *p = sb->buf;
  sb->buf = NULL;
  sb->len = sb->cap = 0;
  return p;
}

const char *rp_strerror(int e) {
  return e == RP_ENOTREG ? "not a regular file" : strerror(e);
}

const char *rp_file_kind(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return "not a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return S_ISREG(st.st_mode) ? "a regular file" : "not a regular file";
}

/* Opens path for reading without blocking on a FIFO (O_NONBLOCK), refusing
 * what is not a regular file, or a file already over max bytes, before any
 * read. */
static FILE *open_regular(const char *path, size_t max, int *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    *err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    *err = RP_ENOTREG;
  } else if ((uint64_t)st.st_size > max) {
    *err = EFBIG;
  } else {
    FILE *f = fdopen(fd, "rb");
    if (f) return f;
    *err = errno;
  }
  if (fd >= 0) close(fd);
  return NULL;
}

int rp_read_file(const char *path, size_t max, char **out, size_t *len) {
  int err = 0;
  FILE *f = strcmp(path, "-") == 0 ? stdin : open_regular(path, max, &err);
  /* Out of memory is not a problem of the file: an internal error. */
  if (err == ENOMEM) rp_internal("out of memory opening `%s`", path);
  if (!f) return err;
  StrBuf sb;
  sb_init(&sb);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (sb.len + n > max) {
      err = EFBIG;
      break;
    }
    sb_putn(&sb, chunk, n);
  }
  if (!err && ferror(f)) err = errno ? errno : EIO;
  if (err == ENOMEM) rp_internal("out of memory reading `%s`", path);
  if (f != stdin) fclose(f);
  if (err) {
    sb_free(&sb);
    return err;
  }
  *len = sb.len;
  *out = sb_take(&sb);
  return 0;
}

/* SHA-256, straight from FIPS 180-4 section 6.2. */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5],
           g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t S1 = ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = hh + S1 + ch + K256[i] + w[i];
    uint32_t S0 = ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22);
    uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + mj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void rp_sha256_hex(const void *data, size_t len, char hex[65]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const uint8_t *p = data;
  size_t full = len / 64;
  for (size_t i = 0; i < full; i++) sha256_block(h, p + 64 * i);
  uint8_t tail[128] = {0};
  size_t rem = len - full * 64;
  memcpy(tail, p + full * 64, rem);
  tail[rem] = 0x80;
  size_t tl = rem + 9 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
  sha256_block(h, tail);
  if (tl == 128) sha256_block(h, tail + 64);
  for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", h[i]);
}

const char *rp_fmt_bytes(int64_t bytes, char *buf, size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, n, "%lld B", (long long)bytes);
  else
    snprintf(buf, n, "%.2f %s", v, units[u]);
  return buf;
}

int64_t rp_scaleup_domain(int64_t domain, int64_t gpus_per_node, int64_t node, int64_t gpu) {
  if (domain >= gpus_per_node) return (node * gpus_per_node + gpu) / domain;
  return node * ((gpus_per_node + domain - 1) / domain) + gpu / domain;
}

void sb_put_exact(StrBuf *sb, double v) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    sb_printf(sb, "%.0f", v);
    return;
  }
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  sb_puts(sb, buf);
}
