/*
 * tcp_stream.c: the kernel's own loopback TCP figure, for the KV benchmark
 * (tests/bench/bench_kv.sh). One process streams TOTAL bytes to another
 * over a loopback TCP connection in messages of MSG bytes, the way the host
 * backend's cross-node pairs do (blocking sends of whole messages, the
 * receiver reading them into one buffer), and times its send calls. Before
 * each send it memcpys the same message into a pre-faulted 8 MiB buffer
 * written round-robin, timed the same way as rankrun's reference. It
 * prints both bandwidths and their ratio, so that the host backend's
 * cross-node ratio can be read against what plain TCP reaches on the same
 * machine in the same minute.
 *
 * usage: tcp_stream [MSG_BYTES [TOTAL_BYTES]]   (default 2 MiB, 320 MiB)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REF_BYTES ((size_t)8 << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int die(const char *what) {
  perror(what);
  return 1;
}

static size_t arg_bytes(const char *s, size_t dflt) {
  if (!s) return dflt;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (!end || *end || v == 0 || v > ((size_t)1 << 40)) {
    fprintf(stderr, "tcp_stream: bad byte count `%s`\n", s);
    exit(2);
  }
  return (size_t)v;
}

int main(int argc, char **argv) {
  size_t msg = arg_bytes(argc > 1 ? argv[1] : NULL, (size_t)2 << 20);
  size_t total = arg_bytes(argc > 2 ? argv[2] : NULL, (size_t)320 << 20);
  if (msg > total) msg = total;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) return die("socket");
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &al) != 0)
    return die("bind");
  pid_t pid = fork();
  if (pid < 0) return die("fork");
  if (pid == 0) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) != 0) _exit(1);
    char *b = malloc(msg);
    if (!b) _exit(1);
    size_t got = 0;
    while (got < total) {
      ssize_t r = recv(c, b, msg, 0);
      if (r <= 0) _exit(1);
      got += (size_t)r;
    }
    _exit(0);
  }
  int s = accept(l, NULL, NULL);
  if (s < 0) return die("accept");
  char *b = malloc(msg), *ref = malloc(REF_BYTES + msg);
  if (!b || !ref) return die("malloc");
  for (size_t i = 0; i < msg; i++) b[i] = (char)(i * 131u + 7u);
  memset(ref, 0, REF_BYTES + msg);
  double ts = 0, tm = 0;
  size_t off = 0;
  for (size_t sent = 0; sent < total; sent += msg) {
    size_t n = total - sent < msg ? total - sent : msg;
    if (off + n > REF_BYTES) off = 0;
    double t0 = now();
    memcpy(ref + off, b, n);
    tm += now() - t0;
    off += n;
    t0 = now();
    for (size_t o = 0; o < n;) {
      ssize_t w = send(s, b + o, n - o, MSG_NOSIGNAL);
      if (w <= 0) return die("send");
      o += (size_t)w;
    }
    ts += now() - t0;
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "tcp_stream: the receiver failed\n");
    return 1;
  }
  volatile char sink = ref[REF_BYTES / 2];
  (void)sink;
  printf("tcp %.3f GB/s memcpy %.3f GB/s ratio %.2f (%zu-byte messages, "
         "%zu bytes)\n", (double)total / ts / 1e9, (double)total / tm / 1e9,
         tm / ts, msg, total);
  close(s);
  close(l);
  free(b);
  free(ref);
  return 0;
}
