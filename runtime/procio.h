/*
 * procio.h: the output of the user processes a launcher runs (launcher.c):
 * each process's stdout and stderr come through pipes, line by line, to
 * the launcher's stdout and stderr with a `[LABEL] ` prefix, to the
 * process's log file under --log-dir, and into a tail of its last lines
 * for the report.
 */
#ifndef RANKRUN_PROCIO_H
#define RANKRUN_PROCIO_H

#include "rt.h"

/* Lines kept per process for the report. */
#define RT_TAIL_LINES 20
/* A line longer than this is passed on in pieces of this size. */
#define RT_LINE_MAX 4096

typedef struct {
  int fd[2];      /* read ends of the stdout and stderr pipes; -1: closed */
  int log_fd;     /* the log file, -1 without --log-dir */
  const char *label;
  StrBuf part[2]; /* a line begun, per stream */
  char *tail[RT_TAIL_LINES];
  int ntail, tail_at;
} RtProcIo;

/* Before the fork: pipes for stdout and stderr (*child gets the write
 * ends, close-on-exec off in the child only after dup2) and, with a log
 * directory, DIR/LABEL.log (a '/' of the label becomes '-'). */
RtResult rt_io_open(RtProcIo *io, const char *label, const char *log_dir,
                    int child[2]);
/* Waits up to timeout seconds for output of any of the n processes and
 * passes on every complete line that came. */
void rt_io_pump(RtProcIo *io, int n, double timeout);
/* After the processes ended: passes on what is left, until every pipe is
 * at its end or the deadline (a grandchild may hold a pipe open). */
void rt_io_drain(RtProcIo *io, int n, double deadline);
/* The tail, oldest line first, escaped (rt_escape), one per line; NULL
 * when the process wrote nothing. The caller frees it. */
char *rt_io_tail(const RtProcIo *io);
void rt_io_close(RtProcIo *io);

#endif
