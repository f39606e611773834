/*
 * store.c: the rendezvous store (server and client) and the socket helpers
 * the host backend shares with it.
 *
 * Input: requests from TCP clients, untrusted (anyone who can reach the
 * bound address can connect). Output: answers, and a key-value map that
 * lives as long as the node-0 launcher.
 * Invariants: one thread owns every server structure; every frame is
 * length-checked before a byte of it is interpreted; no client can make the
 * store block (sockets are non-blocking and each connection has its own
 * buffers), use more than RT_STORE_MAX_FRAME per frame, or hold a slot
 * without sending a frame for longer than the idle timeout.
 */
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------
 * Errors and clock. */

static _Thread_local char rt__msg[512];

const char *rt_result_str(RtResult r) {
  switch (r) {
  case RT_OK: return "ok";
  case RT_ERR_SYS: return "system error";
  case RT_ERR_TIMEOUT: return "timeout";
  case RT_ERR_PROTO: return "protocol error";
  case RT_ERR_CLOSED: return "connection closed";
  case RT_ERR_EXISTS: return "already exists";
  case RT_ERR_NOTFOUND: return "not found";
  case RT_ERR_INVALID: return "invalid";
  case RT_ERR_INUSE: return "address in use";
  case RT_ERR_UNSUPPORTED: return "unsupported";
  case RT_ERR_CHECK: return "check failed";
  }
  return "unknown";
}

/* Bytes of the escape of s[0..] starting at s, for one character: 0 when
 * it is printed as is. */
static int ctl_len(const unsigned char *s) {
  if (s[0] < 0x20 || s[0] == 0x7f) return 1;
  if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f) return 2;
  return 0;
}

void rt_escape(char *dst, size_t n, const char *src) {
  const unsigned char *s = (const unsigned char *)(src ? src : "");
  size_t o = 0;
  if (n == 0) return;
  while (*s) {
    int c = ctl_len(s);
    if (c == 0) {
      if (o + 1 >= n) break;
      dst[o++] = (char)*s++;
      continue;
    }
    if (o + 4 * (size_t)c >= n) break;
    for (int i = 0; i < c; i++, o += 4) snprintf(dst + o, 5, "\\x%02x", s[i]);
    s += c;
  }
  dst[o] = 0;
}

char *rt_escape_dup(const char *src) {
  if (!src) return NULL;
  size_t n = strlen(src) * 4 + 1;
  char *out = rp_malloc(n);
  rt_escape(out, n, src);
  return out;
}

RtResult rt_err(RtResult r, const char *fmt, ...) {
  /* Formats into a copy first: callers often pass rt_errmsg() itself as an
   * argument, to wrap the previous message. The message may quote a plan,
   * the store or a peer: it is kept escaped (rt_escape). */
  char tmp[sizeof rt__msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  rt_escape(rt__msg, sizeof rt__msg, tmp);
  return r;
}

const char *rt_errmsg(void) { return rt__msg; }

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds left until deadline for poll(); -1 when there is none. */
static int ms_left(double deadline) {
  if (deadline < 0) return -1;
  double left = deadline - rt_now();
  if (left <= 0) return 0;
  if (left > 3600) return 3600 * 1000;
  return (int)(left * 1000.0) + 1;
}

/* ---------------------------------------------------------------------------
 * Socket helpers. */

static RtResult resolve(const char *host, int port, struct sockaddr_in *sa) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res)
    return rt_err(RT_ERR_INVALID, "cannot resolve host `%s`: %s", host,
                  gai_strerror(rc));
  memcpy(sa, res->ai_addr, sizeof *sa);
  sa->sin_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return RT_OK;
}

RtResult rt_parse_hostport(const char *s, char **host, int *port) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s)
    return rt_err(RT_ERR_INVALID, "bad address `%s`: expected HOST:PORT", s);
  char *end = NULL;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || !end || *end || end == colon + 1 || p < 0 || p > 65535)
    return rt_err(RT_ERR_INVALID,
                  "bad port in `%s`: expected 0 to 65535", s);
  *host = rp_strndup(s, (size_t)(colon - s));
  *port = (int)p;
  return RT_OK;
}

RtResult rt_listen(const char *host, int *port, int backlog, int *out) {
  struct sockaddr_in sa;
  RTCHECK(resolve(host, *port, &sa));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return rt_err(RT_ERR_SYS, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE)
      return rt_err(RT_ERR_INUSE, "address `%s:%d` is already in use", host,
                    *port);
    return rt_err(RT_ERR_SYS, "cannot bind `%s:%d`: %s", host, *port,
                  strerror(e));
  }
  if (listen(fd, backlog) != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE)
      return rt_err(RT_ERR_INUSE, "address `%s:%d` is already in use", host,
                    *port);
    return rt_err(RT_ERR_SYS, "listen on `%s:%d`: %s", host, *port,
                  strerror(e));
  }
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  *port = ntohs(sa.sin_port);
  *out = fd;
  return RT_OK;
}

static void set_nonblock(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return;
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

RtResult rt_connect(const char *host, int port, double deadline, int *out) {
  struct sockaddr_in sa;
  RTCHECK(resolve(host, port, &sa));
  int last = 0;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return rt_err(RT_ERR_SYS, "socket: %s", strerror(errno));
    set_nonblock(fd, true);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
      int left = ms_left(deadline);
      rc = poll(&p, 1, left < 0 || left > 1000 ? 1000 : left);
      if (rc > 0) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        rc = err ? -1 : 0;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      set_nonblock(fd, false);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      *out = fd;
      return RT_OK;
    }
    last = errno;
    close(fd);
    if (deadline >= 0 && rt_now() >= deadline) break;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rt_err(RT_ERR_TIMEOUT, "cannot connect to `%s:%d`: %s", host, port,
                strerror(last));
}

RtResult rt_write_all(int fd, const void *buf, size_t n, double deadline) {
  return rt_sendrecv(fd, buf, n, fd, NULL, 0, deadline);
}

RtResult rt_read_all(int fd, void *buf, size_t n, double deadline) {
  return rt_sendrecv(fd, NULL, 0, fd, buf, n, deadline);
}

RtResult rt_sendrecv(int sfd, const void *sbuf, size_t sn, int rfd,
                     void *rbuf, size_t rn, double deadline) {
  const char *sp = sbuf;
  char *rp = rbuf;
  size_t so = 0, ro = 0;
  while (so < sn || ro < rn) {
    struct pollfd p[2];
    int np = 0, si = -1, ri = -1;
    if (sfd == rfd) {
      p[0].fd = sfd;
      p[0].events = (short)((so < sn ? POLLOUT : 0) | (ro < rn ? POLLIN : 0));
      p[0].revents = 0;
      si = ri = 0;
      np = 1;
    } else {
      if (so < sn) {
        p[np] = (struct pollfd){.fd = sfd, .events = POLLOUT, .revents = 0};
        si = np++;
      }
      if (ro < rn) {
        p[np] = (struct pollfd){.fd = rfd, .events = POLLIN, .revents = 0};
        ri = np++;
      }
    }
    int rc = poll(p, (nfds_t)np, ms_left(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return rt_err(RT_ERR_SYS, "poll: %s", strerror(errno));
    }
    if (rc == 0)
      return rt_err(RT_ERR_TIMEOUT,
                    "peer did not answer in time (%zu of %zu bytes sent, %zu "
                    "of %zu received)", so, sn, ro, rn);
    if (si >= 0 && so < sn && (p[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = send(sfd, sp + so, sn - so, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        if (errno == EPIPE || errno == ECONNRESET)
          return rt_err(RT_ERR_CLOSED, "peer closed the connection");
        return rt_err(RT_ERR_SYS, "send: %s", strerror(errno));
      }
      if (w > 0) so += (size_t)w;
    }
    if (ri >= 0 && ro < rn && (p[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
      ssize_t r = recv(rfd, rp + ro, rn - ro, MSG_DONTWAIT);
      if (r == 0) return rt_err(RT_ERR_CLOSED, "peer closed the connection");
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        if (errno == ECONNRESET)
          return rt_err(RT_ERR_CLOSED, "peer closed the connection");
        return rt_err(RT_ERR_SYS, "recv: %s", strerror(errno));
      }
      if (r > 0) ro += (size_t)r;
    }
  }
  return RT_OK;
}

RtResult rt_local_addr(int fd, char *buf, size_t n) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
    return rt_err(RT_ERR_SYS, "getsockname: %s", strerror(errno));
  if (!inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)n))
    return rt_err(RT_ERR_SYS, "inet_ntop: %s", strerror(errno));
  return RT_OK;
}

/* ---------------------------------------------------------------------------
 * Big-endian helpers. */

static uint32_t get_be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint64_t get_be64(const unsigned char *p) {
  return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}
static void put_be64(unsigned char *p, uint64_t v) {
  put_be32(p, (uint32_t)(v >> 32));
  put_be32(p + 4, (uint32_t)v);
}

/* ---------------------------------------------------------------------------
 * Request frames. The one place that interprets a client's bytes: it is
 * pure, so that the fuzz target (tests/fuzz/fuzz_store.c) and the tests
 * reach it without a socket. */

RtFrameStatus rt_store_frame_decode(const void *buf, size_t n, RtStoreFrame *f,
                                    size_t *used) {
  const unsigned char *p = buf;
  if (n < 4) return RT_FRAME_MORE;
  uint32_t len = get_be32(p);
  if (len > RT_STORE_MAX_FRAME || len < 3) return RT_FRAME_BAD;
  if (n - 4 < (size_t)len) return RT_FRAME_MORE;
  const unsigned char *b = p + 4;
  size_t kl = ((size_t)b[1] << 8) | b[2];
  if (kl == 0 || kl > RT_STORE_MAX_KEY || 3 + kl > len) return RT_FRAME_BAD;
  size_t vl = len - 3 - kl;
  switch (b[0]) {
  case RT_STORE_OP_SET:
  case RT_STORE_OP_CREATE:
  case RT_STORE_OP_GET:
    break;
  case RT_STORE_OP_WAIT:
    if (vl != 4) return RT_FRAME_BAD;
    break;
  case RT_STORE_OP_ADD:
    if (vl != 8) return RT_FRAME_BAD;
    break;
  default:
    return RT_FRAME_BAD;
  }
  f->op = b[0];
  f->key = (const char *)b + 3;
  f->klen = kl;
  f->val = (const char *)b + 3 + kl;
  f->vlen = vl;
  *used = 4 + (size_t)len;
  return RT_FRAME_OK;
}

/* ---------------------------------------------------------------------------
 * Server. */

typedef struct {
  char *key;
  size_t klen;
  char *val;
  size_t vlen;
} Entry;

typedef struct {
  int fd;
  char addr[64]; /* the peer's address, for the log */
  unsigned char *rbuf;
  size_t rlen, rcap;
  unsigned char *wbuf;
  size_t wlen, woff, wcap;
  double t_connect, t_partial;
  double t_active; /* connect or the last complete frame: eviction order */
  double t_wprogress; /* the pending answer's last progress */
  bool seen_frame;
  bool waiting;
  char *wkey;
  size_t wklen;
  double wdeadline;
  bool dead;
} Client;

struct RtStoreServer {
  int lfd;
  int wake[2];
  int port;
  double idle;
  pthread_t th;
  RP_VEC(Entry) kv;
  int64_t bytes;
  Client *cl[RT_STORE_MAX_CLIENTS];
  int ncl;
  double listen_pause; /* the listen socket is not polled until then */
  pthread_mutex_t mu; /* guards the counters below only */
  RtStoreStats stats;
};

static Entry *kv_find(RtStoreServer *s, const char *k, size_t kl) {
  for (size_t i = 0; i < s->kv.len; i++)
    if (s->kv.items[i].klen == kl && memcmp(s->kv.items[i].key, k, kl) == 0)
      return &s->kv.items[i];
  return NULL;
}

/* Stores a copy; false when the store's total byte cap would be passed. */
static bool kv_put(RtStoreServer *s, const char *k, size_t kl, const char *v,
                   size_t vl) {
  Entry *e = kv_find(s, k, kl);
  int64_t nb = s->bytes + (int64_t)vl - (e ? (int64_t)e->vlen : 0) +
               (e ? 0 : (int64_t)kl);
  if (nb > RT_STORE_MAX_BYTES) return false;
  char *copy = rp_malloc(vl + 1);
  memcpy(copy, v, vl);
  copy[vl] = 0;
  if (e) {
    free(e->val);
  } else {
    Entry ne = {rp_strndup(k, kl), kl, NULL, 0};
    rp_vec_push(&s->kv, ne);
    e = &s->kv.items[s->kv.len - 1];
  }
  e->val = copy;
  e->vlen = vl;
  s->bytes = nb;
  return true;
}

typedef enum { DROP_BAD, DROP_IDLE, DROP_PENDING, DROP_EVICT } DropWhy;

/* Closes c at the end of this round of the loop, counts it and logs it
 * (the address is the peer's, as the kernel gave it). */
static void drop(RtStoreServer *s, Client *c, DropWhy why, const char *what) {
  if (c->dead) return;
  c->dead = true;
  pthread_mutex_lock(&s->mu);
  switch (why) {
  case DROP_BAD: s->stats.dropped_bad++; break;
  case DROP_IDLE: s->stats.dropped_idle++; break;
  case DROP_PENDING: s->stats.dropped_pending++; break;
  case DROP_EVICT: s->stats.evicted++; break;
  }
  pthread_mutex_unlock(&s->mu);
  fprintf(stderr, "rankrun: store: dropped client %s: %s\n", c->addr, what);
}

/* Queues one answer. A client whose unsent answers would pass
 * RT_STORE_MAX_PENDING is not reading them: it is dropped instead. */
static void reply(RtStoreServer *s, Client *c, int st, const void *v,
                  size_t vl, double now) {
  size_t pend = c->wlen - c->woff;
  if (pend + 5 + vl > RT_STORE_MAX_PENDING) {
    drop(s, c, DROP_PENDING, "sends requests without reading the answers "
         "(more than RT_STORE_MAX_PENDING bytes of answers pending)");
    return;
  }
  if (c->woff) {
    memmove(c->wbuf, c->wbuf + c->woff, pend);
    c->wlen = pend;
    c->woff = 0;
  }
  size_t need = c->wlen + 5 + vl;
  if (need > c->wcap) {
    c->wcap = need * 2 < RT_STORE_MAX_PENDING ? need * 2 : RT_STORE_MAX_PENDING;
    c->wbuf = rp_realloc(c->wbuf, c->wcap);
  }
  put_be32(c->wbuf + c->wlen, (uint32_t)(1 + vl));
  c->wbuf[c->wlen + 4] = (unsigned char)st;
  if (vl) memcpy(c->wbuf + c->wlen + 5, v, vl);
  c->wlen += 5 + vl;
  if (pend == 0) c->t_wprogress = now;
  pthread_mutex_lock(&s->mu);
  if ((int64_t)c->wlen > s->stats.max_pending)
    s->stats.max_pending = (int64_t)c->wlen;
  pthread_mutex_unlock(&s->mu);
}

/* Handles one decoded frame (rt_store_frame_decode). Returns false when
 * the client must be dropped: the store's byte cap would be passed. */
static bool handle(RtStoreServer *s, Client *c, const RtStoreFrame *f,
                   double now) {
  const char *k = f->key, *v = f->val;
  size_t kl = f->klen, vl = f->vlen;
  Entry *e;
  switch (f->op) {
  case RT_STORE_OP_SET:
    if (!kv_put(s, k, kl, v, vl)) return false;
    reply(s, c, RT_STORE_ST_OK, NULL, 0, now);
    return true;
  case RT_STORE_OP_CREATE:
    if (kv_find(s, k, kl)) {
      reply(s, c, RT_STORE_ST_EXISTS, NULL, 0, now);
      return true;
    }
    if (!kv_put(s, k, kl, v, vl)) return false;
    reply(s, c, RT_STORE_ST_OK, NULL, 0, now);
    return true;
  case RT_STORE_OP_GET:
    e = kv_find(s, k, kl);
    if (e)
      reply(s, c, RT_STORE_ST_OK, e->val, e->vlen, now);
    else
      reply(s, c, RT_STORE_ST_NOTFOUND, NULL, 0, now);
    return true;
  case RT_STORE_OP_WAIT:
    c->waiting = true;
    c->wkey = rp_strndup(k, kl);
    c->wklen = kl;
    c->wdeadline = now + get_be32((const unsigned char *)v) / 1000.0;
    return true;
  case RT_STORE_OP_ADD: {
    int64_t delta = (int64_t)get_be64((const unsigned char *)v), cur = 0, sum;
    e = kv_find(s, k, kl);
    if (e) {
      char *end = NULL;
      errno = 0;
      long long x = strtoll(e->val, &end, 10);
      if (errno || !end || *end || end == e->val) {
        reply(s, c, RT_STORE_ST_BAD, NULL, 0, now);
        return true;
      }
      cur = x;
    }
    if (!ck_add(cur, delta, &sum)) {
      reply(s, c, RT_STORE_ST_BAD, NULL, 0, now);
      return true;
    }
    char num[32];
    int nl = snprintf(num, sizeof num, "%lld", (long long)sum);
    if (!kv_put(s, k, kl, num, (size_t)nl)) return false;
    unsigned char be[8];
    put_be64(be, (uint64_t)sum);
    reply(s, c, RT_STORE_ST_OK, be, 8, now);
    return true;
  }
  default:
    return false;
  }
}

/* Interprets every complete frame in c's buffer (none while a WAIT is
 * pending: answers go out in request order). */
static void process(RtStoreServer *s, Client *c, double now) {
  size_t off = 0;
  while (!c->dead && !c->waiting && c->rlen - off >= 4) {
    RtStoreFrame f;
    size_t used = 0;
    RtFrameStatus st = rt_store_frame_decode(c->rbuf + off, c->rlen - off, &f, &used);
    if (st == RT_FRAME_MORE) break;
    if (st == RT_FRAME_BAD) {
      drop(s, c, DROP_BAD, "malformed frame");
      return;
    }
    if (!handle(s, c, &f, now)) {
      drop(s, c, DROP_BAD, "the store's value bytes would pass "
           "RT_STORE_MAX_BYTES");
      return;
    }
    c->seen_frame = true;
    c->t_active = now;
    off += used;
  }
  if (off) {
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
    c->t_partial = now;
  }
  /* An oversized length is refused as soon as its 4 bytes arrive, before
   * the body is read. */
  if (!c->dead && c->rlen >= 4 && get_be32(c->rbuf) > RT_STORE_MAX_FRAME)
    drop(s, c, DROP_BAD, "frame length over RT_STORE_MAX_FRAME");
}

static void client_free(Client *c) {
  close(c->fd);
  free(c->rbuf);
  free(c->wbuf);
  free(c->wkey);
  free(c);
}

static void accept_one(RtStoreServer *s, double now) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  int fd = accept4(s->lfd, (struct sockaddr *)&sa, &sl,
                   SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    /* Out of descriptors: the waiting client stays queued; look again
     * after one poll period instead of spinning on the listen socket. */
    if (errno == EMFILE || errno == ENFILE) s->listen_pause = now + 0.05;
    return;
  }
  Client *c = rp_calloc(1, sizeof *c);
  c->fd = fd;
  char ip[INET_ADDRSTRLEN] = "?";
  if (sl == sizeof sa) inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  snprintf(c->addr, sizeof c->addr, "%s:%d", ip, (int)ntohs(sa.sin_port));
  c->t_connect = c->t_partial = c->t_active = now;
  s->cl[s->ncl++] = c;
}

/* Every slot is taken and a client waits to connect: the least recently
 * active connection that sits between two requests (no partial frame, no
 * pending answer, no WAIT) is closed, so that a node can always join; a
 * client of this project reconnects on its next request
 * (RT_STORE_RECONNECT_S). */
static void make_room(RtStoreServer *s, double now) {
  Client *victim = NULL;
  for (int i = 0; i < s->ncl; i++) {
    Client *c = s->cl[i];
    if (c->dead) return; /* a slot frees at the end of this round */
    if (c->waiting || c->rlen || c->wlen > c->woff) continue;
    if (!victim || c->t_active < victim->t_active) victim = c;
  }
  if (victim)
    drop(s, victim, DROP_EVICT, "least recently active connection closed to "
         "make room (every slot taken)");
  else /* every client is mid-request: look again after one poll period */
    s->listen_pause = now + 0.05;
}

/* One client's socket events: send what is pending, read what came, and
 * interpret complete frames. */
static void client_io(RtStoreServer *s, Client *c, short re, double now) {
  if (re & POLLOUT) {
    ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c->woff += (size_t)w;
      c->t_wprogress = now;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) c->dead = true;
    if (c->woff == c->wlen) c->woff = c->wlen = 0;
  }
  if (re & (POLLIN | POLLHUP | POLLERR)) {
    size_t room = 4 + RT_STORE_MAX_FRAME - c->rlen;
    if (room > 65536) room = 65536;
    if (room == 0) {
      drop(s, c, DROP_BAD, "read buffer full");
      return;
    }
    if (c->rlen + room > c->rcap) {
      c->rcap = c->rlen + room;
      c->rbuf = rp_realloc(c->rbuf, c->rcap);
    }
    ssize_t r = recv(c->fd, c->rbuf + c->rlen, room, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      c->dead = true; /* a plain disconnect is not a drop */
      return;
    }
    if (r > 0) {
      if (c->rlen == 0) c->t_partial = now;
      c->rlen += (size_t)r;
    }
  }
  process(s, c, now);
}

/* Answers WAITs whose key came or whose time is up; drops the silent, the
 * half-sent and those that do not read their answers. */
static void check_clients(RtStoreServer *s, double now) {
  for (int i = 0; i < s->ncl; i++) {
    Client *c = s->cl[i];
    if (c->dead) continue;
    if (c->wlen > c->woff && now - c->t_wprogress > s->idle) {
      drop(s, c, DROP_IDLE, "does not read its answer (idle timeout)");
      continue;
    }
    if (c->waiting) {
      Entry *e = kv_find(s, c->wkey, c->wklen);
      if (e || now >= c->wdeadline) {
        if (e)
          reply(s, c, RT_STORE_ST_OK, e->val, e->vlen, now);
        else
          reply(s, c, RT_STORE_ST_TIMEOUT, NULL, 0, now);
        c->waiting = false;
        free(c->wkey);
        c->wkey = NULL;
        c->seen_frame = true;
        c->t_active = now;
        process(s, c, now);
      }
      continue;
    }
    if (!c->seen_frame && now - c->t_connect > s->idle)
      drop(s, c, DROP_IDLE, "no request within the idle timeout");
    else if (c->rlen > 0 && now - c->t_partial > s->idle)
      drop(s, c, DROP_IDLE, "a frame left half-sent for the idle timeout");
  }
}

static void free_dead(RtStoreServer *s) {
  int j = 0;
  for (int i = 0; i < s->ncl; i++) {
    if (s->cl[i]->dead)
      client_free(s->cl[i]);
    else
      s->cl[j++] = s->cl[i];
  }
  s->ncl = j;
  pthread_mutex_lock(&s->mu);
  s->stats.clients = j;
  pthread_mutex_unlock(&s->mu);
}

static void *server_main(void *arg) {
  RtStoreServer *s = arg;
  struct pollfd *p = rp_calloc(RT_STORE_MAX_CLIENTS + 2, sizeof *p);
  for (;;) {
    int np = 0;
    p[np++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN, .revents = 0};
    p[np++] = (struct pollfd){.fd = rt_now() < s->listen_pause ? -1 : s->lfd,
                              .events = POLLIN, .revents = 0};
    for (int i = 0; i < s->ncl; i++) {
      Client *c = s->cl[i];
      short ev = POLLIN;
      if (c->wlen > c->woff) ev |= POLLOUT;
      p[np++] = (struct pollfd){.fd = c->fd, .events = ev, .revents = 0};
    }
    int rc = poll(p, (nfds_t)np, 50);
    if (rc < 0 && errno != EINTR) break;
    if (p[0].revents & POLLIN) break;
    double now = rt_now();
    bool pending_join = rc > 0 && (p[1].revents & POLLIN);
    int nold = s->ncl;
    if (pending_join && s->ncl < RT_STORE_MAX_CLIENTS) accept_one(s, now);
    for (int i = 0; i < nold; i++)
      if (!s->cl[i]->dead) client_io(s, s->cl[i], p[i + 2].revents, now);
    check_clients(s, now);
    if (pending_join && nold == RT_STORE_MAX_CLIENTS) make_room(s, now);
    free_dead(s);
  }
  free(p);
  return NULL;
}

/* The store keeps one descriptor per client: raise the soft limit on open
 * files to what RT_STORE_MAX_CLIENTS needs (within the hard limit), so that
 * accept does not fail with EMFILE before the slots are used. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  rlim_t want = RT_STORE_MAX_CLIENTS + 256; /* + the launcher's own files */
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max
                                                                   : want;
  setrlimit(RLIMIT_NOFILE, &rl);
}

RtResult rt_store_server_start(const char *host, int port, double idle_timeout,
                               RtStoreServer **out) {
  int fd;
  raise_fd_limit();
  RTCHECK(rt_listen(host, &port, 128, &fd));
  RtStoreServer *s = rp_calloc(1, sizeof *s);
  s->lfd = fd;
  s->port = port;
  s->idle = idle_timeout;
  pthread_mutex_init(&s->mu, NULL);
  if (pipe2(s->wake, O_CLOEXEC) != 0) {
    close(fd);
    free(s);
    return rt_err(RT_ERR_SYS, "pipe: %s", strerror(errno));
  }
  set_nonblock(fd, true);
  if (pthread_create(&s->th, NULL, server_main, s) != 0) {
    close(fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
    return rt_err(RT_ERR_SYS, "cannot start the store thread");
  }
  *out = s;
  return RT_OK;
}

int rt_store_server_port(const RtStoreServer *s) { return s->port; }

void rt_store_server_stats(RtStoreServer *s, RtStoreStats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->stats;
  pthread_mutex_unlock(&s->mu);
}

void rt_store_server_stop(RtStoreServer *s) {
  if (!s) return;
  ssize_t w = write(s->wake[1], "x", 1);
  (void)w;
  pthread_join(s->th, NULL);
  for (int i = 0; i < s->ncl; i++) client_free(s->cl[i]);
  for (size_t i = 0; i < s->kv.len; i++) {
    free(s->kv.items[i].key);
    free(s->kv.items[i].val);
  }
  free(s->kv.items);
  close(s->lfd);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ---------------------------------------------------------------------------
 * Client. */

/* Where each open client connection of this process reconnects: its
 * store's host and port, by descriptor. A process has a few (a launcher
 * one, a rank one), so a list does. */
typedef struct {
  int fd;
  char *host;
  int port;
} Peer;
static RP_VEC(Peer) peers;
static pthread_mutex_t peers_mu = PTHREAD_MUTEX_INITIALIZER;

static void peer_set(int fd, const char *host, int port) {
  pthread_mutex_lock(&peers_mu);
  Peer pe = {fd, rp_strdup(host), port};
  size_t i = 0;
  while (i < peers.len && peers.items[i].fd != fd) i++;
  if (i < peers.len) { /* a descriptor closed without rt_store_close */
    free(peers.items[i].host);
    peers.items[i] = pe;
  } else {
    rp_vec_push(&peers, pe);
  }
  pthread_mutex_unlock(&peers_mu);
}

/* Removes fd's entry; with host, hands its host (caller frees) and port. */
static bool peer_take(int fd, char **host, int *port) {
  bool found = false;
  pthread_mutex_lock(&peers_mu);
  for (size_t i = 0; i < peers.len && !found; i++) {
    if (peers.items[i].fd != fd) continue;
    found = true;
    if (host) {
      *host = peers.items[i].host;
      *port = peers.items[i].port;
    } else {
      free(peers.items[i].host);
    }
    peers.items[i] = peers.items[--peers.len];
  }
  if (peers.len == 0) {
    free(peers.items);
    memset(&peers, 0, sizeof peers);
  }
  pthread_mutex_unlock(&peers_mu);
  return found;
}

RtResult rt_store_connect(RtStore *st, const char *host, int port,
                          double join_timeout, double op_timeout) {
  st->fd = -1;
  st->op_timeout = op_timeout;
  RtResult r = rt_connect(host, port, rt_now() + join_timeout, &st->fd);
  if (r != RT_OK)
    return rt_err(r, "rendezvous store `%s:%d` not reachable within %.1f s: %s",
                  host, port, join_timeout, rt_errmsg());
  peer_set(st->fd, host, port);
  return RT_OK;
}

void rt_store_close(RtStore *st) {
  if (st->fd >= 0) {
    peer_take(st->fd, NULL, NULL);
    close(st->fd);
  }
  st->fd = -1;
}

/* Sends frame f (n bytes) and reads the answer's 5-byte header. */
static RtResult send_frame(RtStore *st, const unsigned char *f, size_t n,
                           double deadline, unsigned char h[5]) {
  RtResult r = rt_write_all(st->fd, f, n, deadline);
  if (r == RT_OK) r = rt_read_all(st->fd, h, 5, deadline);
  return r;
}

/* Sends frame f and reads the answer's header; when the store closed the
 * connection before answering (it makes room that way when every slot is
 * taken, between two requests only, so the request was not run),
 * connects again once and resends. */
static RtResult send_frame_retry(RtStore *st, const unsigned char *f,
                                 size_t n, double deadline, unsigned char h[5]) {
  RtResult r = send_frame(st, f, n, deadline, h);
  char *host = NULL;
  int port = 0;
  if (r != RT_ERR_CLOSED || !peer_take(st->fd, &host, &port)) return r;
  char why[256];
  snprintf(why, sizeof why, "%s", rt_errmsg());
  close(st->fd);
  st->fd = -1;
  double until = rt_now() + RT_STORE_RECONNECT_S;
  if (rt_connect(host, port, until < deadline ? until : deadline, &st->fd) !=
      RT_OK) {
    free(host);
    return rt_err(RT_ERR_CLOSED, "%s", why);
  }
  peer_set(st->fd, host, port);
  free(host);
  return send_frame(st, f, n, deadline, h);
}

/* One request/response round trip. *val (if val) gets the answer's value. */
static RtResult request(RtStore *st, int op, const char *key, const void *v,
                        size_t vl, double extra, int *status, char **val,
                        size_t *n) {
  size_t kl = strlen(key);
  if (kl == 0 || kl > RT_STORE_MAX_KEY)
    return rt_err(RT_ERR_INVALID, "store key `%s` has %zu bytes, expected 1 "
                  "to %d", key, kl, RT_STORE_MAX_KEY);
  if (3 + kl + vl > RT_STORE_MAX_FRAME)
    return rt_err(RT_ERR_INVALID, "store value for `%s` has %zu bytes, over "
                  "the %u-byte frame cap", key, vl, RT_STORE_MAX_FRAME);
  if (st->fd < 0) return rt_err(RT_ERR_CLOSED, "store connection is closed");
  size_t len = 3 + kl + vl;
  unsigned char *f = rp_malloc(4 + len);
  put_be32(f, (uint32_t)len);
  f[4] = (unsigned char)op;
  f[5] = (unsigned char)(kl >> 8);
  f[6] = (unsigned char)kl;
  memcpy(f + 7, key, kl);
  if (vl) memcpy(f + 7 + kl, v, vl);
  double deadline = rt_now() + st->op_timeout + extra;
  unsigned char h[5];
  RtResult r = send_frame_retry(st, f, 4 + len, deadline, h);
  free(f);
  if (r != RT_OK)
    return rt_err(r, "rendezvous store did not answer for key `%s`: %s", key,
                  rt_errmsg());
  uint32_t rl = get_be32(h);
  if (rl < 1 || rl > RT_STORE_MAX_FRAME)
    return rt_err(RT_ERR_PROTO, "rendezvous store sent a %u-byte frame", rl);
  char *body = rp_malloc(rl);
  r = rt_read_all(st->fd, body, rl - 1, deadline);
  if (r != RT_OK) {
    free(body);
    return rt_err(r, "rendezvous store answer for `%s` cut short: %s", key,
                  rt_errmsg());
  }
  body[rl - 1] = 0;
  *status = h[4];
  if (val) {
    *val = body;
    if (n) *n = rl - 1;
  } else {
    free(body);
  }
  return RT_OK;
}

static RtResult status_result(int s, const char *key) {
  switch (s) {
  case RT_STORE_ST_OK: return RT_OK;
  case RT_STORE_ST_NOTFOUND:
    return rt_err(RT_ERR_NOTFOUND, "key `%s` is not in the store", key);
  case RT_STORE_ST_EXISTS:
    return rt_err(RT_ERR_EXISTS, "key `%s` is already claimed", key);
  case RT_STORE_ST_TIMEOUT:
    return rt_err(RT_ERR_TIMEOUT, "key `%s` did not appear in time", key);
  default:
    return rt_err(RT_ERR_PROTO, "store refused the request for `%s`", key);
  }
}

RtResult rt_store_set(RtStore *st, const char *key, const void *val,
                      size_t n) {
  int s = RT_STORE_ST_OK;
  RTCHECK(request(st, RT_STORE_OP_SET, key, val, n, 0, &s, NULL, NULL));
  return status_result(s, key);
}

RtResult rt_store_create(RtStore *st, const char *key, const void *val,
                         size_t n) {
  int s = RT_STORE_ST_OK;
  RTCHECK(request(st, RT_STORE_OP_CREATE, key, val, n, 0, &s, NULL, NULL));
  return status_result(s, key);
}

RtResult rt_store_get(RtStore *st, const char *key, char **val, size_t *n) {
  int s = RT_STORE_ST_OK;
  char *v = NULL;
  RTCHECK(request(st, RT_STORE_OP_GET, key, NULL, 0, 0, &s, &v, n));
  if (s != RT_STORE_ST_OK) {
    free(v);
    return status_result(s, key);
  }
  *val = v;
  return RT_OK;
}

RtResult rt_store_wait(RtStore *st, const char *key, double timeout,
                       char **val, size_t *n) {
  if (timeout < 0) timeout = 0;
  if (timeout > 86400) timeout = 86400;
  unsigned char ms[4];
  put_be32(ms, (uint32_t)(timeout * 1000.0));
  int s = RT_STORE_ST_OK;
  char *v = NULL;
  RTCHECK(request(st, RT_STORE_OP_WAIT, key, ms, 4, timeout, &s, &v, n));
  if (s != RT_STORE_ST_OK) {
    free(v);
    return status_result(s, key);
  }
  *val = v;
  return RT_OK;
}

RtResult rt_store_add(RtStore *st, const char *key, int64_t delta,
                      int64_t *out) {
  unsigned char be[8];
  put_be64(be, (uint64_t)delta);
  int s = RT_STORE_ST_OK;
  char *v = NULL;
  size_t n = 0;
  RTCHECK(request(st, RT_STORE_OP_ADD, key, be, 8, 0, &s, &v, &n));
  RtResult r = status_result(s, key);
  if (r == RT_OK && n != 8)
    r = rt_err(RT_ERR_PROTO, "store answered %zu bytes for add, expected 8", n);
  if (r == RT_OK && out) *out = (int64_t)get_be64((unsigned char *)v);
  free(v);
  return r;
}
