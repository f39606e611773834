/*
 * outfile.c: atomic output files (outfile.h). Depends on util.c and libc.
 *
 * Every temporary in use is listed in a registry that a signal handler and
 * an exit handler walk to remove them. The registry only changes with the
 * handled signals blocked, so a handler never sees it half-changed; a slot
 * is cleared rather than removed (a compile may hold one temporary per node
 * file), and the list is reset once every slot is clear.
 */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT};

static struct {
  char **tmp;     /* NULL where the temporary is gone */
  size_t n, cap, live;
  pid_t owner;    /* a forked child does not remove its parent's files */
  bool installed;
  char *made_dir; /* rp_out_dir's, until kept */
} reg;

void rp_out_cleanup(void) {
  if (reg.owner != getpid()) return;
  for (size_t i = 0; i < reg.n; i++)
    if (reg.tmp[i]) unlink(reg.tmp[i]);
  if (reg.made_dir) rmdir(reg.made_dir);
}

static void on_signal(int sig) {
  rp_out_cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Takes over the handled signals a process left at their default action,
 * and exit(); once. */
static void install(void) {
  if (reg.installed) return;
  reg.installed = true;
  atexit(rp_out_cleanup);
  for (size_t i = 0; i < RP_ARRAY_LEN(handled); i++) {
    struct sigaction old;
    if (sigaction(handled[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(handled[i], &sa, NULL);
  }
}

static void block(sigset_t *old) {
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < RP_ARRAY_LEN(handled); i++) sigaddset(&set, handled[i]);
  sigprocmask(SIG_BLOCK, &set, old);
}

static void unblock(const sigset_t *old) { sigprocmask(SIG_SETMASK, old, NULL); }

/* Creates a new temporary next to target and lists it; signals stay blocked
 * from creation to listing, so no temporary exists unlisted. */
static int create_temp(RpOut *o) {
  const char *slash = strrchr(o->target, '/');
  int dlen = slash ? (int)(slash - o->target) + 1 : 0;
  const char *base = slash ? slash + 1 : o->target;
  install();
  for (int tries = 0; tries < 64; tries++) {
    uint64_t r;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) return errno ? errno : EIO;
    char *tmp = rp_sprintf("%.*s.%s.%016llx.tmp", dlen, o->target, base, (unsigned long long)r);
    sigset_t old;
    block(&old);
    /* Room first: an allocation that fails (exit 70) must not strand a
     * file created but not listed. */
    if (reg.n == reg.cap) {
      reg.cap = reg.cap ? 2 * reg.cap : 16;
      reg.tmp = rp_realloc(reg.tmp, reg.cap * sizeof *reg.tmp);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    int e = errno;
    if (fd >= 0) {
      reg.owner = getpid();
      reg.tmp[reg.n++] = tmp;
      reg.live++;
      o->fd = fd;
      o->tmp = tmp;
    }
    unblock(&old);
    if (fd >= 0) return 0;
    free(tmp);
    if (e != EEXIST) return e;
  }
  return EEXIST;
}

/* Takes the temporary off the list, removing the file when unlink_it. */
static void drop_temp(RpOut *o, bool unlink_it) {
  if (!o->tmp) return;
  sigset_t old;
  block(&old);
  if (unlink_it) unlink(o->tmp);
  for (size_t i = reg.n; i-- > 0;)
    if (reg.tmp[i] == o->tmp) {
      reg.tmp[i] = NULL;
      reg.live--;
      break;
    }
  if (reg.live == 0) reg.n = 0;
  unblock(&old);
  free(o->tmp);
  o->tmp = NULL;
}

int rp_out_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  install();
  char *copy = rp_strdup(dir); /* before mkdir: a failure here strands nothing */
  sigset_t old;
  block(&old);
  int e = mkdir(dir, 0777) == 0 ? 0 : errno;
  if (!e) {
    RP_ASSERT(!reg.made_dir);
    reg.owner = getpid();
    reg.made_dir = copy;
    copy = NULL;
  }
  unblock(&old);
  free(copy);
  return e == EEXIST ? rp_out_dir(dir) : e;
}

void rp_out_dir_keep(void) {
  sigset_t old;
  block(&old);
  char *d = reg.made_dir;
  reg.made_dir = NULL;
  unblock(&old);
  free(d);
}

/* The file a symlink names, when path is one that resolves; else path. */
static char *resolve(const char *path) {
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    char *real = realpath(path, NULL);
    if (real) {
      char *r = rp_strdup(real);
      free(real);
      return r;
    }
  }
  return rp_strdup(path);
}

int rp_out_open(RpOut *o, const char *path) {
  memset(o, 0, sizeof *o);
  o->fd = -1;
  struct stat st;
  if (strcmp(path, "-") == 0) {
    fflush(stdout);
    o->fd = STDOUT_FILENO;
    o->through = true;
  } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    return EISDIR;
  } else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    o->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (o->fd < 0) return errno;
    o->through = true;
  }
  o->target = o->through ? rp_strdup(path) : resolve(path);
  if (o->through) return 0;
  int e = create_temp(o);
  if (e) {
    free(o->target);
    o->target = NULL;
  }
  return e;
}

int rp_out_write(RpOut *o, const void *data, size_t n) {
  const char *p = data;
  while (!o->err && n > 0) {
    ssize_t w = write(o->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      o->err = w < 0 ? errno : EIO;
      break;
    }
    p += w;
    n -= (size_t)w;
  }
  return o->err;
}

int rp_out_close(RpOut *o, bool sync) {
  if (o->fd >= 0) {
    if (!o->err && sync && !o->through && fsync(o->fd) != 0) o->err = errno;
    if (o->fd != STDOUT_FILENO && close(o->fd) != 0 && !o->err) o->err = errno;
    o->fd = -1;
  }
  if (o->err) drop_temp(o, true);
  return o->err;
}

int rp_out_publish(RpOut *o) {
  int e = rp_out_close(o, false);
  if (!e && o->tmp && rename(o->tmp, o->target) != 0) e = errno;
  drop_temp(o, e != 0);
  free(o->target);
  o->target = NULL;
  return e;
}

int rp_out_commit(RpOut *o) {
  int e = rp_out_close(o, true);
  if (e) {
    rp_out_abort(o);
    return e;
  }
  return rp_out_publish(o);
}

void rp_out_abort(RpOut *o) {
  if (o->fd >= 0 && o->fd != STDOUT_FILENO) close(o->fd);
  o->fd = -1;
  drop_temp(o, true);
  free(o->target);
  o->target = NULL;
}

int rp_write_file_atomic(const char *path, const char *data, size_t len) {
  RpOut o;
  int e = rp_out_open(&o, path);
  if (e) return e;
  rp_out_write(&o, data, len);
  return rp_out_commit(&o);
}

bool rp_out_is_input(const char *out, const char *const *inputs, size_t n, const char **which) {
  struct stat so, si;
  if (strcmp(out, "-") == 0 || stat(out, &so) != 0 || !S_ISREG(so.st_mode)) return false;
  for (size_t i = 0; i < n; i++) {
    if (!inputs[i] || strcmp(inputs[i], "-") == 0 || stat(inputs[i], &si) != 0) continue;
    if (si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
      *which = inputs[i];
      return true;
    }
  }
  return false;
}
