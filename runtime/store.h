/*
 * store.h: the rendezvous store, a small TCP key-value store run by the
 * node-0 launcher. Ranks and launchers use it to find each other (their
 * listening addresses), to claim their rank or node exactly once, to share
 * NCCL unique ids, to publish the first failure, and to post preflight
 * results. docs/runtime.md holds its threat model.
 *
 * Wire format (all integers big-endian):
 *   request  = u32 len | u8 op | u16 keylen | key | value     (len counts
 *              everything after itself; len <= RT_STORE_MAX_FRAME)
 *   response = u32 len | u8 status | value
 * ops: SET, CREATE (set only when absent: claims), GET (never blocks), WAIT
 * (value: u32 milliseconds; answers when the key exists or the time is up),
 * ADD (value: i64 delta; the key holds a decimal counter; answers the sum).
 * A frame over the cap, a short frame, an unknown op, or a key over
 * RT_STORE_MAX_KEY closes the connection: the store never guesses.
 */
#ifndef RANKRUN_STORE_H
#define RANKRUN_STORE_H

#include "rt.h"

#define RT_STORE_MAX_FRAME (1u << 20) /* 1 MiB per frame */
#define RT_STORE_MAX_KEY 256
#define RT_STORE_MAX_CLIENTS 1024
#define RT_STORE_MAX_BYTES (64ll << 20) /* all values together */
/* Answer bytes one connection may have waiting to be sent. A client that
 * follows the protocol reads each answer before its next request, so it
 * never has more than one pending, and an answer is at most 4 +
 * RT_STORE_MAX_FRAME bytes (a value came in one frame). A client with more
 * sends requests without reading the answers (which would grow the
 * store's memory without bound) and is dropped. */
#define RT_STORE_MAX_PENDING (4u + RT_STORE_MAX_FRAME)
/* A client whose store connection was closed between two requests (the
 * store drops the least recently active idle connection when all
 * RT_STORE_MAX_CLIENTS slots are taken and another client is waiting)
 * connects again once, for up to this many seconds, and resends. One
 * second: a connection to a listening store takes one round trip, and
 * Linux retransmits a lost SYN after 1 s; a store that is gone costs a
 * launcher at most this much more to notice. */
#define RT_STORE_RECONNECT_S 1.0

enum {
  RT_STORE_OP_SET = 1,
  RT_STORE_OP_CREATE = 2,
  RT_STORE_OP_GET = 3,
  RT_STORE_OP_WAIT = 4,
  RT_STORE_OP_ADD = 5
};
enum {
  RT_STORE_ST_OK = 0,
  RT_STORE_ST_NOTFOUND = 1,
  RT_STORE_ST_EXISTS = 2,
  RT_STORE_ST_TIMEOUT = 3,
  RT_STORE_ST_BAD = 4
};

/* ---- request frame decoding (pure: no socket, no state) ---- */

/* One request, decoded in place: key and val point into the bytes given to
 * rt_store_frame_decode and are not NUL-terminated. */
typedef struct {
  int op;          /* one of RT_STORE_OP_* */
  const char *key; /* klen bytes, 1 to RT_STORE_MAX_KEY */
  size_t klen;
  const char *val; /* vlen bytes: 4 for WAIT, 8 for ADD */
  size_t vlen;
} RtStoreFrame;

typedef enum {
  RT_FRAME_OK,   /* *f holds the frame; *used is its size, header included */
  RT_FRAME_MORE, /* the bytes are a prefix of a frame that may still be good */
  RT_FRAME_BAD   /* the connection must be closed (see the wire format) */
} RtFrameStatus;

/* Decodes the request frame at the start of buf[0..n), as the server does
 * with every frame a client sends. A length over RT_STORE_MAX_FRAME or under
 * 3 is RT_FRAME_BAD as soon as its 4 bytes are there, before any body byte;
 * so are a key of 0 or over RT_STORE_MAX_KEY bytes or past the body, an
 * unknown op, and a WAIT or ADD value of the wrong size. Reads no byte
 * outside buf[0..n). */
RtFrameStatus rt_store_frame_decode(const void *buf, size_t n, RtStoreFrame *f,
                                    size_t *used);

typedef struct RtStoreServer RtStoreServer;

/* Starts the store on host:port in its own thread. host must be a local
 * address; the store binds to it only (never the wildcard). port 0 picks a
 * free port (tests). idle_timeout: a client that has sent no complete frame
 * for this long after connecting, that leaves a frame half-sent for this
 * long, or whose pending answer makes no progress for this long (it does
 * not read), is dropped. A client whose pending answers would pass
 * RT_STORE_MAX_PENDING is dropped at once. When every slot is taken and
 * another client is waiting to connect, the least recently active
 * connection that sits between two requests is closed to make room (its
 * client reconnects, RT_STORE_RECONNECT_S). Every drop is logged on
 * stderr with the client's address and the reason. Returns RT_ERR_INUSE
 * when the port is taken. */
RtResult rt_store_server_start(const char *host, int port, double idle_timeout,
                               RtStoreServer **out);
int rt_store_server_port(const RtStoreServer *s);

/* Counters for tests. */
typedef struct {
  int dropped_bad;     /* a bad frame, or the store's byte cap passed */
  int dropped_idle;    /* silent, a half frame or a pending answer unread */
  int dropped_pending; /* pending answers over RT_STORE_MAX_PENDING */
  int evicted;         /* closed to make room for a waiting client */
  int clients;         /* connections open now */
  int64_t max_pending; /* most answer bytes one connection ever had pending */
} RtStoreStats;
void rt_store_server_stats(RtStoreServer *s, RtStoreStats *out);
/* Stops the thread, closes every connection, frees everything. */
void rt_store_server_stop(RtStoreServer *s);

/* A client connection. op_timeout bounds each request/response. Where it
 * reconnects when the store closed it between two requests is kept by
 * store.c per connection (rt_store_connect to rt_store_close), so that
 * the struct stays these two fields. */
typedef struct {
  int fd;
  double op_timeout;
} RtStore;

/* Connects, retrying until join_timeout seconds have passed (the store may
 * start after its clients). */
RtResult rt_store_connect(RtStore *st, const char *host, int port,
                          double join_timeout, double op_timeout);
void rt_store_close(RtStore *st);
RtResult rt_store_set(RtStore *st, const char *key, const void *val, size_t n);
/* Sets key only if absent; RT_ERR_EXISTS (message names the key) if not. */
RtResult rt_store_create(RtStore *st, const char *key, const void *val,
                         size_t n);
/* Gets key's value (malloc'd, NUL-terminated, caller frees);
 * RT_ERR_NOTFOUND if absent. */
RtResult rt_store_get(RtStore *st, const char *key, char **val, size_t *n);
/* Waits up to timeout seconds for key to exist, then gets it;
 * RT_ERR_TIMEOUT if it never came. */
RtResult rt_store_wait(RtStore *st, const char *key, double timeout,
                       char **val, size_t *n);
/* Adds delta to the counter at key (absent: 0) and returns the new value. */
RtResult rt_store_add(RtStore *st, const char *key, int64_t delta,
                      int64_t *out);

#endif
