/*
 * failalloc.c: an LD_PRELOAD library that makes one allocation fail, for
 * tests/failalloc/test_failalloc.py.
 *
 *   FAILALLOC_N=N       the Nth call of malloc, calloc, realloc or
 *                       aligned_alloc/posix_memalign (counted from this
 *                       library's constructor) returns NULL with errno
 *                       ENOMEM; every other call succeeds. 0: none fails.
 *   FAILALLOC_COUNT=F   at exit, write the number of calls made to F.
 *
 * It forwards to glibc's own entry points (__libc_malloc and friends), so
 * it needs no dlsym, which would itself allocate. Not for sanitizer builds,
 * whose runtimes replace malloc themselves.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static uint64_t calls, fail_at;
static const char *count_file;

static void write_count(void) {
  FILE *f = count_file ? fopen(count_file, "w") : NULL;
  uint64_t n = calls; /* fopen itself allocates: report what came before */
  if (f) {
    fprintf(f, "%llu\n", (unsigned long long)n);
    fclose(f);
  }
}

__attribute__((constructor)) static void init(void) {
  const char *n = getenv("FAILALLOC_N");
  count_file = getenv("FAILALLOC_COUNT");
  fail_at = n ? strtoull(n, NULL, 10) : 0;
  calls = 0;
  if (count_file) atexit(write_count);
}

static int fails(void) {
  calls++;
  if (fail_at && calls == fail_at) {
    errno = ENOMEM;
    return 1;
  }
  return 0;
}

void *malloc(size_t n) { return fails() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t s) { return fails() ? NULL : __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { return fails() ? NULL : __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { return fails() ? NULL : __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  if (fails()) return ENOMEM;
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
