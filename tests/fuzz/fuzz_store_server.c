/*
 * fuzz_store_server.c: libFuzzer target for the rendezvous store's server
 * loop (runtime/store.c), with several connections at once. fuzz_store
 * covers the frame decoder alone; this one runs the real server thread on
 * loopback and drives up to 8 client connections from the input, so that
 * interleaved, pipelined, half-sent, half-closed and reopened connections
 * reach the per-connection buffers, WAITs, the pending-answer cap and the
 * drops.
 *
 * Input: byte 0 picks the number of connections (1 to 8); then a script of
 * steps, each one byte: the low 3 bits pick the connection, the high bits
 * the action: 0-3 write the next byte's count of bytes (taken from the
 * input) on it, 4 read and discard what has arrived, 5 close and reopen
 * it, 6 let the server run for a millisecond, 7 half-close it (no more
 * writes). Writes never block: what the socket does not take is skipped.
 *
 * What must hold after every input: the store still serves a well-behaved
 * client (set, then get of the same value, within 5 s); no connection
 * ever had more than RT_STORE_MAX_PENDING answer bytes pending; the
 * store never holds more than RT_STORE_MAX_CLIENTS connections. Each
 * input gets its own store, stopped and freed at the end, so
 * LeakSanitizer sees a path that forgets memory.
 */
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CONN 8

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "fuzz_store_server: `%s` does not hold\n", #c);      \
      abort();                                                              \
    }                                                                       \
  } while (0)

static int open_conn(int port) {
  int fd = -1;
  if (rt_connect("127.0.0.1", port, rt_now() + 2, &fd) != RT_OK) return -1;
  return fd;
}

static void drain(int fd) {
  char buf[4096];
  while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

/* Runs the script in data[1..size) against the store on port. */
static void run_script(int port, const uint8_t *data, size_t size) {
  int n = 1 + data[0] % MAX_CONN;
  int fds[MAX_CONN];
  for (int i = 0; i < n; i++) fds[i] = open_conn(port);
  for (size_t off = 1; off < size;) {
    int c = data[off] & 7, act = data[off] >> 5;
    off++;
    int *fd = &fds[c % n];
    if (act <= 3) {
      size_t len = off < size ? data[off++] : 0;
      if (len > size - off) len = size - off;
      if (*fd >= 0 && len) send(*fd, data + off, len, MSG_DONTWAIT | MSG_NOSIGNAL);
      off += len;
    } else if (act == 4) {
      if (*fd >= 0) drain(*fd);
    } else if (act == 5) {
      if (*fd >= 0) close(*fd);
      *fd = open_conn(port);
    } else if (act == 6) {
      poll(NULL, 0, 1);
    } else if (*fd >= 0) {
      shutdown(*fd, SHUT_WR);
    }
  }
  poll(NULL, 0, 2);
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  signal(SIGPIPE, SIG_IGN);
  RtStoreServer *s = NULL;
  if (rt_store_server_start("127.0.0.1", 0, 0.5, &s) != RT_OK) return 0;
  int port = rt_store_server_port(s);
  /* Inputs are copied into a buffer of their exact size. */
  uint8_t *buf = malloc(size);
  CHECK(buf != NULL);
  memcpy(buf, data, size);
  run_script(port, buf, size);
  free(buf);
  RtStore st;
  CHECK(rt_store_connect(&st, "127.0.0.1", port, 5, 5) == RT_OK);
  CHECK(rt_store_set(&st, "fuzz/check", "alive", 5) == RT_OK);
  char *v = NULL;
  size_t vn = 0;
  CHECK(rt_store_get(&st, "fuzz/check", &v, &vn) == RT_OK);
  CHECK(vn == 5 && memcmp(v, "alive", 5) == 0);
  free(v);
  rt_store_close(&st);
  RtStoreStats ss;
  rt_store_server_stats(s, &ss);
  CHECK(ss.max_pending <= (int64_t)RT_STORE_MAX_PENDING);
  CHECK(ss.clients <= RT_STORE_MAX_CLIENTS);
  rt_store_server_stop(s);
  return 0;
}
