/*
 * procio.c: user processes' output (procio.h): pipes to the console with
 * a `[LABEL] ` prefix, log files, and the tail kept for the report.
 *
 * Invariants: the console gets whole lines only (a line of another
 * process never lands inside one), each process's stdout on stdout and
 * its stderr on stderr; a log file gets both streams unprefixed, in the
 * order the launcher read them. A log is a stream, written as the
 * process runs, not a document written at once: it is not written
 * through outfile.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procio.h"

RtResult rt_io_open(RtProcIo *io, const char *label, const char *log_dir,
                    int child[2]) {
  memset(io, 0, sizeof *io);
  io->label = label;
  io->fd[0] = io->fd[1] = io->log_fd = -1;
  sb_init(&io->part[0]);
  sb_init(&io->part[1]);
  for (int s = 0; s < 2; s++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
      return rt_err(RT_ERR_SYS, "cannot make a pipe for process %s: %s", label,
                    strerror(errno));
    io->fd[s] = p[0];
    child[s] = p[1];
  }
  if (!log_dir) return RT_OK;
  char *name = rp_sprintf("%s/%s.log", log_dir, label);
  for (char *c = name + strlen(log_dir) + 1; *c; c++)
    if (*c == '/') *c = '-';
  io->log_fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RtResult r = io->log_fd < 0 ? rt_err(RT_ERR_SYS, "cannot write log `%s`: %s",
                                       name, strerror(errno))
                              : RT_OK;
  free(name);
  return r;
}

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* One line (without its newline) of stream s. */
static void put_line(RtProcIo *io, int s, const char *line, size_t n) {
  StrBuf sb;
  sb_init(&sb);
  sb_printf(&sb, "[%s] ", io->label);
  sb_putn(&sb, line, n);
  sb_putc(&sb, '\n');
  write_all(s == 0 ? STDOUT_FILENO : STDERR_FILENO, sb.buf, sb.len);
  sb_free(&sb);
  if (io->log_fd >= 0) {
    write_all(io->log_fd, line, n);
    write_all(io->log_fd, "\n", 1);
  }
  char *copy = rp_malloc(n + 1);
  memcpy(copy, line, n);
  copy[n] = 0;
  free(io->tail[io->tail_at]);
  io->tail[io->tail_at] = copy;
  io->tail_at = (io->tail_at + 1) % RT_TAIL_LINES;
  if (io->ntail < RT_TAIL_LINES) io->ntail++;
}

/* Passes on the complete lines of stream s's buffer (all of it at eof). */
static void flush_lines(RtProcIo *io, int s, bool eof) {
  StrBuf *b = &io->part[s];
  if (b->len == 0) return;
  size_t start = 0;
  for (size_t i = 0; i < b->len; i++)
    if (b->buf[i] == '\n' || i - start + 1 >= RT_LINE_MAX) {
      put_line(io, s, b->buf + start, i - start + (b->buf[i] != '\n'));
      start = i + 1;
    }
  if (eof && start < b->len) {
    put_line(io, s, b->buf + start, b->len - start);
    start = b->len;
  }
  memmove(b->buf, b->buf + start, b->len - start);
  b->len -= start;
  b->buf[b->len] = 0;
}

/* Reads what stream s of io has; closes it at its end. */
static void read_stream(RtProcIo *io, int s) {
  char buf[8192];
  ssize_t n = read(io->fd[s], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close(io->fd[s]);
    io->fd[s] = -1;
    flush_lines(io, s, true);
    return;
  }
  sb_putn(&io->part[s], buf, (size_t)n);
  flush_lines(io, s, false);
}

void rt_io_pump(RtProcIo *io, int n, double timeout) {
  struct pollfd *p = rp_calloc((size_t)n * 2 + 1, sizeof *p);
  int np = 0;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 2; s++)
      if (io[i].fd[s] >= 0) p[np++] = (struct pollfd){io[i].fd[s], POLLIN, 0};
  int ready = np ? poll(p, (nfds_t)np, (int)(timeout * 1000)) : 0;
  if (!np) {
    struct timespec ts = {0, (long)(timeout * 1e9)};
    nanosleep(&ts, NULL);
  }
  for (int k = 0, i = 0; ready > 0 && i < n; i++)
    for (int s = 0; s < 2; s++) {
      if (io[i].fd[s] < 0) continue;
      if (p[k].revents) read_stream(&io[i], s);
      k++;
    }
  free(p);
}

void rt_io_drain(RtProcIo *io, int n, double deadline) {
  for (;;) {
    bool open = false;
    for (int i = 0; i < n; i++) open = open || io[i].fd[0] >= 0 || io[i].fd[1] >= 0;
    if (!open || rt_now() > deadline) break;
    rt_io_pump(io, n, 0.05);
  }
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 2; s++) flush_lines(&io[i], s, true);
}

char *rt_io_tail(const RtProcIo *io) {
  if (io->ntail == 0) return NULL;
  StrBuf sb;
  sb_init(&sb);
  int first = (io->tail_at - io->ntail + RT_TAIL_LINES) % RT_TAIL_LINES;
  for (int k = 0; k < io->ntail; k++) {
    char *e = rt_escape_dup(io->tail[(first + k) % RT_TAIL_LINES]);
    sb_printf(&sb, "%s\n", e);
    free(e);
  }
  return sb_take(&sb);
}

void rt_io_close(RtProcIo *io) {
  for (int s = 0; s < 2; s++) {
    if (io->fd[s] >= 0) close(io->fd[s]);
    io->fd[s] = -1;
    sb_free(&io->part[s]);
  }
  if (io->log_fd >= 0) close(io->log_fd);
  io->log_fd = -1;
  for (int k = 0; k < RT_TAIL_LINES; k++) {
    free(io->tail[k]);
    io->tail[k] = NULL;
  }
}
