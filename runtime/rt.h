/*
 * rt.h: the runtime's error values and the one CHECK macro family.
 *
 * Every runtime call that can fail returns an RtResult; RT_OK is zero. The
 * failing call also records a one-line message (lowercase, problem first,
 * subject quoted) with rt_err(), which the caller prints or puts in the
 * report. Cleanup goes through goto labels, as in NCCL's checks.h:
 *
 *   RtResult res = RT_OK;
 *   RTCHECKGOTO(rt_store_get(st, key, &v, &n), res, fail);
 *   ...
 * fail:
 *   free(v);
 *   return res;
 *
 * Internal invariant failures are not errors: they use RP_ASSERT (exit 70).
 */
#ifndef RANKRUN_RT_H
#define RANKRUN_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum {
  RT_OK = 0,
  RT_ERR_SYS,         /* a system call failed (errno in the message) */
  RT_ERR_TIMEOUT,     /* a deadline passed (join, operation, collective) */
  RT_ERR_PROTO,       /* malformed bytes from the network */
  RT_ERR_CLOSED,      /* the peer closed the connection or died */
  RT_ERR_EXISTS,      /* a create-only key exists (duplicate rank or node) */
  RT_ERR_NOTFOUND,    /* a key is not in the store */
  RT_ERR_INVALID,     /* bad argument or bad plan content */
  RT_ERR_INUSE,       /* the address to bind is already in use */
  RT_ERR_UNSUPPORTED, /* the backend cannot do this */
  RT_ERR_CHECK        /* a collective returned a wrong result */
} RtResult;

/* Short name of a result ("timeout"). */
const char *rt_result_str(RtResult r);

/* Records the message of the current failure (per thread; the newest one
 * wins). Returns r so that `return rt_err(RT_ERR_SYS, "...")` reads well. */
RtResult rt_err(RtResult r, const char *fmt, ...) RP_PRINTF(2, 3);
/* The last recorded message, or "" when none. */
const char *rt_errmsg(void);

#define RTCHECK(call)                                                        \
  do {                                                                       \
    RtResult rt__r = (call);                                                 \
    if (rt__r != RT_OK) return rt__r;                                        \
  } while (0)

#define RTCHECKGOTO(call, res, label)                                        \
  do {                                                                       \
    (res) = (call);                                                          \
    if ((res) != RT_OK) goto label;                                          \
  } while (0)

/* Text that came from a plan, the store or a peer is printed only
 * through these: control characters (bytes 0x00-0x1f and 0x7f, and the
 * C1 controls U+0080-U+009F in UTF-8) become \xNN, so that such text can
 * move no cursor, clear no screen and forge no line on a terminal or in a
 * log. Idempotent (the output has no control characters), so a message
 * escaped twice reads the same. rt_err() escapes every message it records.
 * rt_escape writes at most n bytes, NUL included, and cuts at a whole
 * escape; rt_escape_dup returns a malloc'd copy (NULL for NULL). */
void rt_escape(char *dst, size_t n, const char *src);
char *rt_escape_dup(const char *src);

/* Monotonic clock in seconds. */
double rt_now(void);

/* Socket helpers shared by the store and the host backend. Every call takes
 * an absolute deadline on rt_now()'s clock; a negative deadline means none. */

/* Parses "HOST:PORT" (IPv4 dotted or a name resolvable without the
 * network, e.g. localhost). port 0 is allowed. */
RtResult rt_parse_hostport(const char *s, char **host, int *port);
/* Binds and listens on host:port (host must be a local address). *port is
 * updated with the bound port when it was 0. */
RtResult rt_listen(const char *host, int *port, int backlog, int *fd);
/* Connects to host:port, retrying refused connections until deadline. */
RtResult rt_connect(const char *host, int port, double deadline, int *fd);
/* Writes / reads exactly n bytes on a blocking fd, polling with deadline. */
RtResult rt_write_all(int fd, const void *buf, size_t n, double deadline);
RtResult rt_read_all(int fd, void *buf, size_t n, double deadline);
/* Sends sn bytes on sfd while receiving rn bytes on rfd (possibly the same
 * fd), so that two peers exchanging large buffers never deadlock on full
 * socket buffers. */
RtResult rt_sendrecv(int sfd, const void *sbuf, size_t sn, int rfd,
                     void *rbuf, size_t rn, double deadline);
/* The local IPv4 address of a connected socket, as dotted text in buf. */
RtResult rt_local_addr(int fd, char *buf, size_t n);

#endif
