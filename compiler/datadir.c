/*
 * datadir.c: the data directory from the executable's location (datadir.h).
 */
#include "datadir.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rp_config.h"
#include "util.h"

/* The directory of the running executable, or NULL when /proc/self/exe
 * cannot be read. */
static char *exe_dir(void) {
  size_t cap = 256;
  char *buf = NULL;
  for (;;) {
    buf = rp_realloc(buf, cap);
    ssize_t n = readlink("/proc/self/exe", buf, cap);
    if (n >= 0 && (size_t)n < cap) {
      buf[n] = '\0';
      break;
    }
    if (n < 0 || cap >= PATH_MAX) {
      free(buf);
      return NULL;
    }
    cap *= 2;
  }
  char *slash = strrchr(buf, '/');
  if (!slash) {
    free(buf);
    return NULL;
  }
  if (slash == buf) slash++; /* the root directory keeps its '/' */
  *slash = '\0';
  return buf;
}

/* True when dir is the build directory this executable was built in, or
 * one below it (the test programs of tests/). */
static bool in_build_dir(const char *dir) {
  char *b = realpath(RP_BUILD_ROOT, NULL);
  size_t n = b ? strlen(b) : 0;
  bool in = b && strncmp(b, dir, n) == 0 && (dir[n] == '\0' || dir[n] == '/');
  free(b);
  return in;
}

static char *find_data_dir(void) {
  char *dir = exe_dir();
  if (!dir) return rp_strdup(RP_DATADIR);
  if (in_build_dir(dir)) {
    free(dir);
    return rp_strdup(RP_SOURCE_ROOT);
  }
  const char *rel = RP_DATADIR_FROM_BINDIR;
  char *joined = rel[0] == '/' ? rp_strdup(rel) : rp_sprintf("%s/%s", dir, rel);
  free(dir);
  char *real = realpath(joined, NULL);
  if (!real) return joined; /* missing: diagnostics name the path looked at */
  free(joined);
  char *kept = rp_strdup(real);
  free(real);
  return kept;
}

const char *rp_data_dir(void) {
  static char *dir;
  if (!dir) dir = find_data_dir();
  return dir;
}

const char *rp_data_catalog(void) {
  static char *cat;
  if (!cat) cat = rp_sprintf("%s/plans/catalog", rp_data_dir());
  return cat;
}
