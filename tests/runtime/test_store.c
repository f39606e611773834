/*
 * test_store.c: the rendezvous store's protocol, including what an
 * untrusted client can send: garbage, oversized frames, silence, half
 * frames, duplicate claims. Each test starts its own store on loopback.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "t.h"

static RtStoreServer *start(double idle) {
  RtStoreServer *s = NULL;
  RtResult r = rt_store_server_start("127.0.0.1", 0, idle, &s);
  T_EQ_INT(r, RT_OK);
  if (r != RT_OK) {
    fprintf(stderr, "%s\n", rt_errmsg());
    exit(1);
  }
  return s;
}

static void client(RtStoreServer *s, RtStore *st) {
  T_EQ_INT(rt_store_connect(st, "127.0.0.1", rt_store_server_port(s), 2.0, 2.0),
           RT_OK);
}

static int raw_connect(RtStoreServer *s) {
  int fd = -1;
  T_EQ_INT(rt_connect("127.0.0.1", rt_store_server_port(s), rt_now() + 2, &fd),
           RT_OK);
  return fd;
}

/* True when the server closed fd within `within` seconds. */
static bool closed_within(int fd, double within) {
  char buf[64];
  double deadline = rt_now() + within;
  for (;;) {
    RtResult r = rt_read_all(fd, buf, 1, deadline);
    if (r == RT_ERR_CLOSED) return true;
    if (r != RT_OK) return false; /* timeout: still open */
  }
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void test_basic_ops(void) {
  RtStoreServer *s = start(5);
  RtStore st;
  client(s, &st);
  T_EQ_INT(rt_store_set(&st, "a", "hello", 5), RT_OK);
  char *v = NULL;
  size_t n = 0;
  T_EQ_INT(rt_store_get(&st, "a", &v, &n), RT_OK);
  T_EQ_STR(v, "hello");
  T_EQ_INT(n, 5);
  free(v);
  v = NULL;
  T_EQ_INT(rt_store_get(&st, "missing", &v, &n), RT_ERR_NOTFOUND);
  T_CHECK(v == NULL);
  int64_t x = 0;
  T_EQ_INT(rt_store_add(&st, "ctr", 5, &x), RT_OK);
  T_EQ_INT(x, 5);
  T_EQ_INT(rt_store_add(&st, "ctr", -2, &x), RT_OK);
  T_EQ_INT(x, 3);
  /* Overflow of a counter is refused, never wrapped. */
  T_EQ_INT(rt_store_add(&st, "big", INT64_MAX, &x), RT_OK);
  T_EQ_INT(rt_store_add(&st, "big", 1, &x), RT_ERR_PROTO);
  /* A counter key holding text is refused for add. */
  T_EQ_INT(rt_store_add(&st, "a", 1, &x), RT_ERR_PROTO);
  /* Binary values (an NCCL id) round-trip. */
  unsigned char bin[128];
  for (int i = 0; i < 128; i++) bin[i] = (unsigned char)(i * 7);
  T_EQ_INT(rt_store_set(&st, "bin", bin, sizeof bin), RT_OK);
  T_EQ_INT(rt_store_get(&st, "bin", &v, &n), RT_OK);
  T_EQ_INT(n, 128);
  T_CHECK(v && memcmp(v, bin, 128) == 0);
  free(v);
  /* Keys over the cap are refused by the client before sending. */
  char longkey[RT_STORE_MAX_KEY + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = 0;
  T_EQ_INT(rt_store_set(&st, longkey, "x", 1), RT_ERR_INVALID);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

static void test_duplicate_rank(void) {
  RtStoreServer *s = start(5);
  RtStore a, b;
  client(s, &a);
  client(s, &b);
  T_EQ_INT(rt_store_create(&a, "rank/3", "0 100", 5), RT_OK);
  T_EQ_INT(rt_store_create(&b, "rank/3", "0 200", 5), RT_ERR_EXISTS);
  T_CHECK(strstr(rt_errmsg(), "rank/3") != NULL);
  char *v = NULL;
  T_EQ_INT(rt_store_get(&b, "rank/3", &v, NULL), RT_OK);
  T_EQ_STR(v, "0 100"); /* the first claim stands */
  free(v);
  rt_store_close(&a);
  rt_store_close(&b);
  rt_store_server_stop(s);
}

typedef struct {
  int port;
  double delay;
} SetLater;

static void *set_later(void *arg) {
  SetLater *sl = arg;
  sleep_s(sl->delay);
  RtStore st;
  if (rt_store_connect(&st, "127.0.0.1", sl->port, 2, 2) == RT_OK) {
    rt_store_set(&st, "late", "here", 4);
    rt_store_close(&st);
  }
  return NULL;
}

static void test_wait(void) {
  RtStoreServer *s = start(5);
  RtStore st;
  client(s, &st);
  SetLater sl = {rt_store_server_port(s), 0.2};
  pthread_t th;
  pthread_create(&th, NULL, set_later, &sl);
  char *v = NULL;
  double t0 = rt_now();
  T_EQ_INT(rt_store_wait(&st, "late", 5.0, &v, NULL), RT_OK);
  T_CHECK(rt_now() - t0 < 4.0);
  T_EQ_STR(v, "here");
  free(v);
  pthread_join(th, NULL);
  /* A peer that never arrives: the wait fails at its timeout, within a
   * loose window (this checks behaviour, not speed). */
  t0 = rt_now();
  v = NULL;
  T_EQ_INT(rt_store_wait(&st, "never", 1.0, &v, NULL), RT_ERR_TIMEOUT);
  double dt = rt_now() - t0;
  T_CHECK(dt >= 0.9 && dt <= 2.0);
  T_CHECK(v == NULL);
  /* The connection is still usable after a timed-out wait. */
  T_EQ_INT(rt_store_set(&st, "after", "1", 1), RT_OK);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

/* The pure frame decoder: each rule of the wire format, on bytes alone. */
static void test_frame_decode(void) {
  RtStoreFrame f;
  size_t used = 0;
  /* A SET of key "ab" to "xyz" with one byte of the next frame behind it. */
  unsigned char set[] = {0, 0, 0, 8, RT_STORE_OP_SET, 0, 2, 'a', 'b', 'x', 'y', 'z', 0};
  T_EQ_INT(rt_store_frame_decode(set, sizeof set, &f, &used), RT_FRAME_OK);
  T_EQ_INT(used, 12);
  T_EQ_INT(f.op, RT_STORE_OP_SET);
  T_EQ_INT(f.klen, 2);
  T_CHECK(memcmp(f.key, "ab", 2) == 0);
  T_EQ_INT(f.vlen, 3);
  T_CHECK(memcmp(f.val, "xyz", 3) == 0);
  /* Every strict prefix asks for more bytes. */
  for (size_t n = 0; n < 12; n++)
    T_EQ_INT(rt_store_frame_decode(set, n, &f, &used), RT_FRAME_MORE);
  /* A length over the cap or under 3 is refused from its 4 bytes alone. */
  unsigned char big[4] = {0, 0x10, 0, 1};
  T_EQ_INT(rt_store_frame_decode(big, 4, &f, &used), RT_FRAME_BAD);
  unsigned char tiny[4] = {0, 0, 0, 2};
  T_EQ_INT(rt_store_frame_decode(tiny, 4, &f, &used), RT_FRAME_BAD);
  /* A frame of exactly the cap is only incomplete. */
  unsigned char cap[4] = {0, 0x10, 0, 0};
  T_EQ_INT(rt_store_frame_decode(cap, 4, &f, &used), RT_FRAME_MORE);
  /* Key: empty, past the body, over RT_STORE_MAX_KEY. */
  unsigned char nokey[] = {0, 0, 0, 4, RT_STORE_OP_GET, 0, 0, 'k'};
  T_EQ_INT(rt_store_frame_decode(nokey, sizeof nokey, &f, &used), RT_FRAME_BAD);
  unsigned char past[] = {0, 0, 0, 4, RT_STORE_OP_GET, 0, 2, 'k'};
  T_EQ_INT(rt_store_frame_decode(past, sizeof past, &f, &used), RT_FRAME_BAD);
  unsigned char longkey[4 + 3 + RT_STORE_MAX_KEY + 1] = {0};
  longkey[3] = (unsigned char)(3 + RT_STORE_MAX_KEY + 1);
  longkey[2] = (unsigned char)((3 + RT_STORE_MAX_KEY + 1) >> 8);
  longkey[4] = RT_STORE_OP_GET;
  longkey[5] = (unsigned char)((RT_STORE_MAX_KEY + 1) >> 8);
  longkey[6] = (unsigned char)(RT_STORE_MAX_KEY + 1);
  T_EQ_INT(rt_store_frame_decode(longkey, sizeof longkey, &f, &used), RT_FRAME_BAD);
  longkey[3]--;
  longkey[6]--; /* exactly RT_STORE_MAX_KEY bytes: fine */
  T_EQ_INT(rt_store_frame_decode(longkey, sizeof longkey - 1, &f, &used), RT_FRAME_OK);
  T_EQ_INT(f.klen, RT_STORE_MAX_KEY);
  /* Unknown op; WAIT and ADD with a value of the wrong size. */
  unsigned char op[] = {0, 0, 0, 4, 99, 0, 1, 'k'};
  T_EQ_INT(rt_store_frame_decode(op, sizeof op, &f, &used), RT_FRAME_BAD);
  unsigned char wait3[] = {0, 0, 0, 7, RT_STORE_OP_WAIT, 0, 1, 'k', 0, 0, 1};
  T_EQ_INT(rt_store_frame_decode(wait3, sizeof wait3, &f, &used), RT_FRAME_BAD);
  unsigned char wait4[] = {0, 0, 0, 8, RT_STORE_OP_WAIT, 0, 1, 'k', 0, 0, 1, 0};
  T_EQ_INT(rt_store_frame_decode(wait4, sizeof wait4, &f, &used), RT_FRAME_OK);
  unsigned char add7[] = {0, 0, 0, 11, RT_STORE_OP_ADD, 0, 1, 'k', 0, 0, 0, 0, 0, 0, 1};
  T_EQ_INT(rt_store_frame_decode(add7, sizeof add7, &f, &used), RT_FRAME_BAD);
}

static void test_garbage(void) {
  RtStoreServer *s = start(5);
  /* Text where a frame is expected: "GET " reads as a 1.2 GB length. */
  int fd = raw_connect(s);
  const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  T_EQ_INT(rt_write_all(fd, http, strlen(http), rt_now() + 2), RT_OK);
  T_CHECK(closed_within(fd, 2.0));
  close(fd);
  /* A well-sized frame with an unknown op. */
  fd = raw_connect(s);
  unsigned char bad[] = {0, 0, 0, 5, 99, 0, 1, 'k', 'v'};
  T_EQ_INT(rt_write_all(fd, bad, sizeof bad, rt_now() + 2), RT_OK);
  T_CHECK(closed_within(fd, 2.0));
  close(fd);
  /* A key length pointing past the frame. */
  fd = raw_connect(s);
  unsigned char past[] = {0, 0, 0, 4, RT_STORE_OP_GET, 0, 200, 'k'};
  T_EQ_INT(rt_write_all(fd, past, sizeof past, rt_now() + 2), RT_OK);
  T_CHECK(closed_within(fd, 2.0));
  close(fd);
  /* A frame shorter than its header. */
  fd = raw_connect(s);
  unsigned char tiny[] = {0, 0, 0, 1, RT_STORE_OP_GET};
  T_EQ_INT(rt_write_all(fd, tiny, sizeof tiny, rt_now() + 2), RT_OK);
  T_CHECK(closed_within(fd, 2.0));
  close(fd);
  /* Random bytes. */
  srand(7);
  for (int k = 0; k < 20; k++) {
    fd = raw_connect(s);
    unsigned char junk[300];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    rt_write_all(fd, junk, sizeof junk, rt_now() + 2);
    close(fd);
  }
  /* The store still serves well-behaved clients. */
  RtStore st;
  client(s, &st);
  T_EQ_INT(rt_store_set(&st, "ok", "1", 1), RT_OK);
  rt_store_close(&st);
  RtStoreStats ss;
  rt_store_server_stats(s, &ss);
  T_CHECK(ss.dropped_bad >= 4);
  rt_store_server_stop(s);
}

static void test_oversized(void) {
  RtStoreServer *s = start(5);
  int fd = raw_connect(s);
  /* Only the 4-byte length is sent: the store refuses it before reading a
   * body it would have to buffer. */
  unsigned char hdr[4] = {0, 0x10, 0, 1}; /* 1 MiB + 1 */
  T_EQ_INT(rt_write_all(fd, hdr, 4, rt_now() + 2), RT_OK);
  T_CHECK(closed_within(fd, 2.0));
  close(fd);
  /* A value that makes the frame exceed the cap is refused by the client. */
  RtStore st;
  client(s, &st);
  size_t big = RT_STORE_MAX_FRAME;
  char *buf = calloc(1, big);
  T_EQ_INT(rt_store_set(&st, "big", buf, big), RT_ERR_INVALID);
  /* Just under the cap is fine. */
  T_EQ_INT(rt_store_set(&st, "big", buf, big - 3 - 3), RT_OK);
  free(buf);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

static void test_silent_client(void) {
  RtStoreServer *s = start(1.0);
  int silent = raw_connect(s);
  int half = raw_connect(s);
  unsigned char part[2] = {0, 0};
  T_EQ_INT(rt_write_all(half, part, 2, rt_now() + 2), RT_OK);
  /* Others are served while the silent ones hold their connections. */
  RtStore st;
  client(s, &st);
  double t0 = rt_now();
  for (int i = 0; i < 50; i++) T_EQ_INT(rt_store_set(&st, "k", "v", 1), RT_OK);
  T_CHECK(rt_now() - t0 < 1.0);
  /* Both are dropped after the idle timeout (1 s), well before 3 s. */
  T_CHECK(closed_within(silent, 3.0));
  T_CHECK(closed_within(half, 3.0));
  close(silent);
  close(half);
  /* A client that has sent a frame may stay idle (it is a known party). */
  sleep_s(1.5);
  T_EQ_INT(rt_store_set(&st, "k", "v", 1), RT_OK);
  RtStoreStats ss;
  rt_store_server_stats(s, &ss);
  T_EQ_INT(ss.dropped_idle, 2);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

static void test_port_in_use(void) {
  RtStoreServer *s = start(5);
  RtStoreServer *t = NULL;
  RtResult r = rt_store_server_start("127.0.0.1", rt_store_server_port(s), 5, &t);
  T_EQ_INT(r, RT_ERR_INUSE);
  T_CHECK(strstr(rt_errmsg(), "already in use") != NULL);
  T_CHECK(t == NULL);
  rt_store_server_stop(s);
}

static void test_bound_address_only(void) {
  /* Bound to 127.0.0.1, the store must not answer on 127.0.0.2 (another
   * loopback address): it never binds the wildcard. */
  RtStoreServer *s = start(5);
  int fd = -1;
  RtResult r = rt_connect("127.0.0.2", rt_store_server_port(s), rt_now() + 0.3, &fd);
  T_CHECK(r != RT_OK);
  if (r == RT_OK) close(fd);
  rt_store_server_stop(s);
}

static void test_store_gone(void) {
  /* A client whose store disappears gets an error, not a hang. */
  RtStoreServer *s = start(5);
  RtStore st;
  client(s, &st);
  rt_store_server_stop(s);
  RtResult r = rt_store_set(&st, "k", "v", 1);
  T_CHECK(r == RT_ERR_CLOSED || r == RT_ERR_TIMEOUT);
  rt_store_close(&st);
  /* Nobody listening: the join timeout bounds the connect. */
  double t0 = rt_now();
  RtStore st2;
  r = rt_store_connect(&st2, "127.0.0.1", 1, 0.5, 0.5);
  T_EQ_INT(r, RT_ERR_TIMEOUT);
  T_CHECK(rt_now() - t0 < 2.0);
}

/* This process's resident set, bytes (/proc/self/statm). */
static int64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long pages = 0, res = 0;
  if (!f) return -1;
  if (fscanf(f, "%lld %lld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : res * (int64_t)sysconf(_SC_PAGESIZE);
}

/* A GET frame for key k into buf; returns its size. */
static size_t get_frame(unsigned char *buf, const char *k) {
  size_t kl = strlen(k), len = 3 + kl;
  buf[0] = buf[1] = 0;
  buf[2] = (unsigned char)(len >> 8);
  buf[3] = (unsigned char)len;
  buf[4] = RT_STORE_OP_GET;
  buf[5] = (unsigned char)(kl >> 8);
  buf[6] = (unsigned char)kl;
  memcpy(buf + 7, k, kl);
  return 4 + len;
}

/* A client that pipelines GETs of a large value and never reads the
 * answers: before the cap, every GET queued a copy of the value (15 KB of
 * GETs held 1.5 GB). The store drops it once its pending answers would
 * pass RT_STORE_MAX_PENDING, and neither the pending bytes nor this
 * process's memory grow with the number of GETs. Then the same with small
 * values (many answers, each small), and with GETs sent one at a time. */
static void test_pipelined_gets_dropped(void) {
  RtStoreServer *s = start(5);
  RtStore st;
  client(s, &st);
  size_t vbytes = RT_STORE_MAX_FRAME - 3 - 3;
  char *val = calloc(1, vbytes);
  T_EQ_INT(rt_store_set(&st, "big", val, vbytes), RT_OK);
  T_EQ_INT(rt_store_set(&st, "small", "v", 1), RT_OK);
  free(val);
  int64_t rss0 = rss_bytes();
  const char *keys[] = {"big", "small"};
  int rounds[] = {1500, 1000000};
  for (int k = 0; k < 2; k++) {
    int fd = raw_connect(s);
    /* A small receive buffer, so that the kernel holds little of what the
     * store sends and the answers stay with the store. */
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    unsigned char one[32];
    size_t n = get_frame(one, keys[k]);
    size_t total = n * (size_t)rounds[k];
    unsigned char *frames = malloc(total);
    for (int i = 0; i < rounds[k]; i++) memcpy(frames + n * (size_t)i, one, n);
    /* Sent without reading; the store may close before all is sent. */
    rt_write_all(fd, frames, total, rt_now() + 5);
    free(frames);
    T_CHECK(closed_within(fd, 5.0));
    close(fd);
  }
  RtStoreStats ss;
  rt_store_server_stats(s, &ss);
  /* Both clients are dropped: for their pending answers, or, on a loaded
   * machine where the store's sends stall for the whole 5 s timeout first,
   * as readers that make no progress; either way the cap held. */
  T_EQ_INT(ss.dropped_pending + ss.dropped_idle, 2);
  T_CHECK(ss.dropped_pending >= 1);
  T_CHECK(ss.max_pending <= (int64_t)RT_STORE_MAX_PENDING);
  /* Two pending answers at most were ever held, plus the kernel's socket
   * buffers: far below the 1.5 GB the GETs asked for. */
  int64_t rss1 = rss_bytes();
  T_CHECK(rss0 > 0 && rss1 - rss0 < (int64_t)64 << 20);
  /* The well-behaved client is served as before. */
  char *v = NULL;
  T_EQ_INT(rt_store_get(&st, "small", &v, NULL), RT_OK);
  free(v);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

/* A client that asks for a large value, one request at a time, and never
 * reads: once the kernel's buffers are full its answer stays pending
 * without progress, and it is dropped after the idle timeout (before its
 * next request, 1.5 s later, could pass the pending cap). */
static void test_slow_reader_dropped(void) {
  RtStoreServer *s = start(1.0);
  RtStore st;
  client(s, &st);
  size_t vbytes = RT_STORE_MAX_FRAME - 3 - 3;
  char *val = calloc(1, vbytes);
  T_EQ_INT(rt_store_set(&st, "big", val, vbytes), RT_OK);
  free(val);
  int fd = raw_connect(s);
  unsigned char one[32];
  size_t n = get_frame(one, "big");
  RtStoreStats ss;
  memset(&ss, 0, sizeof ss);
  for (int i = 0; i < 40 && ss.dropped_idle + ss.dropped_pending == 0; i++) {
    if (rt_write_all(fd, one, n, rt_now() + 2) != RT_OK) break;
    sleep_s(1.5);
    rt_store_server_stats(s, &ss);
  }
  T_EQ_INT(ss.dropped_idle, 1);
  T_EQ_INT(ss.dropped_pending, 0);
  T_CHECK(ss.max_pending <= (int64_t)RT_STORE_MAX_PENDING);
  close(fd);
  rt_store_close(&st);
  rt_store_server_stop(s);
}

/* Every slot held by clients that sent one valid frame and went quiet:
 * a new client still joins (the least recently active connection is
 * closed to make room), does set and get, and a client of this project
 * whose connection was closed that way reconnects and goes on. */
static void test_idle_slots_make_room(void) {
  RtStoreServer *s = start(30);
  RtStore early;
  client(s, &early);
  T_EQ_INT(rt_store_set(&early, "early", "1", 1), RT_OK);
  int n = RT_STORE_MAX_CLIENTS;
  int *fds = malloc(sizeof(int) * (size_t)n);
  unsigned char one[32];
  size_t fl = get_frame(one, "early");
  for (int i = 0; i < n; i++) {
    fds[i] = raw_connect(s);
    T_EQ_INT(rt_write_all(fds[i], one, fl, rt_now() + 2), RT_OK);
    unsigned char ans[6];
    /* The store answers while it has slots; past them, it makes room. */
    T_EQ_INT(rt_read_all(fds[i], ans, sizeof ans, rt_now() + 5), RT_OK);
  }
  RtStore late;
  double t0 = rt_now();
  client(s, &late);
  T_EQ_INT(rt_store_set(&late, "late", "2", 1), RT_OK);
  char *v = NULL;
  T_EQ_INT(rt_store_get(&late, "late", &v, NULL), RT_OK);
  T_CHECK(v && strcmp(v, "2") == 0);
  free(v);
  T_CHECK(rt_now() - t0 < 5.0);
  /* The first client was the least recently active: closed, it
   * reconnects on its next request. */
  v = NULL;
  T_EQ_INT(rt_store_get(&early, "late", &v, NULL), RT_OK);
  T_CHECK(v && strcmp(v, "2") == 0);
  free(v);
  RtStoreStats ss;
  rt_store_server_stats(s, &ss);
  T_CHECK(ss.evicted >= 2);
  T_CHECK(ss.clients <= RT_STORE_MAX_CLIENTS);
  for (int i = 0; i < n; i++) close(fds[i]);
  free(fds);
  rt_store_close(&early);
  rt_store_close(&late);
  rt_store_server_stop(s);
}

/* Control characters become \xNN: C0, DEL and UTF-8 C1; other UTF-8 and
 * backslashes stay; escaping is idempotent; rt_err escapes what it
 * records; a short buffer cuts at a whole escape. */
static void test_escape(void) {
  char out[64];
  rt_escape(out, sizeof out, "a\x1b[2Jb\x07\r\n\x7f");
  T_EQ_STR(out, "a\\x1b[2Jb\\x07\\x0d\\x0a\\x7f");
  rt_escape(out, sizeof out, "caf\xc3\xa9 \xc2\x9b" "1m \xc2\xa0 c:\\x");
  T_EQ_STR(out, "caf\xc3\xa9 \\xc2\\x9b1m \xc2\xa0 c:\\x");
  char again[64];
  rt_escape(again, sizeof again, out);
  T_EQ_STR(again, out);
  rt_escape(out, 6, "ab\x1b");
  T_EQ_STR(out, "ab");
  rt_escape(out, sizeof out, NULL);
  T_EQ_STR(out, "");
  char *d = rt_escape_dup("\x1b\x1b");
  T_EQ_STR(d, "\\x1b\\x1b");
  free(d);
  T_CHECK(rt_escape_dup(NULL) == NULL);
  T_EQ_INT(rt_err(RT_ERR_PROTO, "peer sent `%s`", "x\x1b]0;t\x07"), RT_ERR_PROTO);
  T_EQ_STR(rt_errmsg(), "peer sent `x\\x1b]0;t\\x07`");
}

int main(void) {
  T_RUN(test_escape);
  signal(SIGPIPE, SIG_IGN);
  T_RUN(test_frame_decode);
  T_RUN(test_basic_ops);
  T_RUN(test_duplicate_rank);
  T_RUN(test_wait);
  T_RUN(test_garbage);
  T_RUN(test_oversized);
  T_RUN(test_silent_client);
  T_RUN(test_port_in_use);
  T_RUN(test_bound_address_only);
  T_RUN(test_store_gone);
  T_RUN(test_pipelined_gets_dropped);
  T_RUN(test_slow_reader_dropped);
  T_RUN(test_idle_slots_make_room);
  T_DONE();
}
