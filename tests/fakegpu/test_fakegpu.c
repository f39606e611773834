/*
 * test_fakegpu.c: the stand-in's own rules (fake_cuda.c, fake_nccl.c),
 * which the tests of the nccl backend rely on: device memory kept apart
 * from host memory, the device's size, and NCCL's matching rules between
 * two processes (count and type mismatches refused with a message,
 * groups cut so that NCCL would hang hang here too until aborted, one
 * group's sends and receives progressing together).
 * Prints one PASS or FAIL line per check; exit 1 when one failed.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

static void check(int ok, const char *what, const char *detail) {
  printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
  fflush(stdout);
  if (!ok) failures++;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Polls until the stream is done or the communicator fails or `secs` pass:
 * ncclSuccess, the error, or ncclInProgress at the deadline. */
static ncclResult_t poll_until(ncclComm_t c, cudaStream_t s, double secs) {
  double end = now() + secs;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(c, &st);
    if (st != ncclSuccess && st != ncclInProgress) return st;
    if (st == ncclSuccess && (!s || cudaStreamQuery(s) == cudaSuccess)) return ncclSuccess;
    if (now() > end) return ncclInProgress;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static ncclComm_t join(ncclUniqueId id, int rank) {
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t e = ncclCommInitRankConfig(&c, 2, id, rank, &cfg);
  if (e != ncclSuccess && e != ncclInProgress) return NULL;
  if (poll_until(c, NULL, 10) != ncclSuccess) {
    ncclCommAbort(c);
    return NULL;
  }
  return c;
}

#define BIG ((size_t)4 << 20) /* more than one ring */

/* One member of the two-process checks; returns the number of failures. */
static int member(int rank, ncclUniqueId id1, ncclUniqueId id2, ncclUniqueId id3) {
  int bad = 0;
  int peer = 1 - rank;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *a = NULL, *b = NULL;
  cudaMalloc(&a, BIG);
  cudaMalloc(&b, BIG);
  char msg[800];

  /* A send of 100 bytes matched with a receive of 200: both members fail
   * with ncclInvalidUsage, and the message gives both sizes. */
  ncclComm_t c = join(id1, rank);
  if (!c) return 100;
  ncclResult_t e = rank == 0 ? ncclSend(a, 100, ncclUint8, peer, c, s)
                             : ncclRecv(b, 200, ncclUint8, peer, c, s);
  ncclResult_t st = e == ncclInProgress || e == ncclSuccess ? poll_until(c, s, 10) : e;
  const char *last = ncclGetLastError(c);
  snprintf(msg, sizeof msg, "rank %d: %s; %s", rank, ncclGetErrorString(st), last);
  if (!(st == ncclInvalidUsage && strstr(last, "100 bytes") && strstr(last, "200 bytes"))) {
    printf("FAIL: %s\n", msg);
    bad++;
  } else if (rank == 0) {
    printf("PASS: a send and its receive of different sizes: %s\n", msg);
  }
  ncclCommAbort(c);

  /* Each member: group {send}, then group {receive}. The sends wait for
   * receives the peers post only after their sends completed: NCCL hangs
   * on this schedule and so does the stand-in, until the abort. */
  c = join(id2, rank);
  if (!c) return bad + 100;
  ncclGroupStart();
  ncclSend(a, BIG, ncclUint8, peer, c, s);
  ncclGroupEnd();
  ncclGroupStart();
  ncclRecv(b, BIG, ncclUint8, peer, c, s);
  ncclGroupEnd();
  st = poll_until(c, s, 1.0);
  if (st != ncclInProgress) {
    printf("FAIL: rank %d: send and receive in separate groups did not hang: %s\n", rank,
           ncclGetErrorString(st));
    bad++;
  } else if (rank == 0) {
    printf("PASS: a send and a receive each in its own group hang (as on NCCL) until aborted\n");
  }
  /* Another stream is not ordered with the queued receive: writing its
   * buffer is refused, reading the send buffer is not. */
  {
    cudaStream_t s2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    static unsigned char hb[4096];
    cudaError_t w = cudaMemcpyAsync(b, hb, sizeof hb, cudaMemcpyHostToDevice, s2);
    cudaError_t rd = cudaMemcpyAsync(hb, a, sizeof hb, cudaMemcpyDeviceToHost, s2);
    if (w != cudaErrorInvalidValue || rd != cudaSuccess) {
      printf("FAIL: rank %d: a copy on another stream into a queued receive's buffer: %s; "
             "out of a queued send's buffer: %s\n", rank, cudaGetErrorString(w), cudaGetErrorString(rd));
      bad++;
    } else if (rank == 0) {
      printf("PASS: a copy on another stream into a queued receive's buffer is refused\n");
    }
    cudaStreamDestroy(s2);
  }
  ncclCommAbort(c);
  if (cudaStreamQuery(s) != cudaSuccess) {
    printf("FAIL: rank %d: the stream still has work after ncclCommAbort\n", rank);
    bad++;
  }

  /* The same in one group completes, and the bytes arrive. */
  c = join(id3, rank);
  if (!c) return bad + 100;
  unsigned char *h = malloc(BIG), *g = malloc(BIG);
  for (size_t i = 0; i < BIG; i++) h[i] = (unsigned char)(i * 7 + (size_t)rank);
  cudaMemcpyAsync(a, h, BIG, cudaMemcpyHostToDevice, s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  ncclGroupStart();
  ncclSend(a, BIG, ncclUint8, peer, c, s);
  ncclRecv(b, BIG, ncclUint8, peer, c, s);
  ncclGroupEnd();
  cudaEventRecord(e1, s);
  float ms = -1;
  st = poll_until(c, s, 10);
  cudaMemcpyAsync(g, b, BIG, cudaMemcpyDeviceToHost, s);
  int ok = st == ncclSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0;
  for (size_t i = 0; ok && i < BIG; i++) ok = g[i] == (unsigned char)(i * 7 + (size_t)peer);
  if (!ok) {
    printf("FAIL: rank %d: send and receive in one group: %s, %.3f ms\n", rank, ncclGetErrorString(st),
           (double)ms);
    bad++;
  } else if (rank == 0) {
    printf("PASS: a send and a receive in one group complete, bytes right, %.3f ms by events\n", (double)ms);
  }
  ncclCommFinalize(c);
  poll_until(c, NULL, 10);
  ncclCommDestroy(c);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  free(h);
  free(g);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
  return bad;
}

int main(void) {
  alarm(120);
  setenv("RANKRUN_FAKEGPU_MEMORY", "1G", 1);
  size_t fr = 0, tot = 0;
  void *d = NULL, *d2 = NULL;
  cudaMemGetInfo(&fr, &tot);
  check(tot == (size_t)1 << 30 && fr == tot, "cudaMemGetInfo gives RANKRUN_FAKEGPU_MEMORY", NULL);
  check(cudaMalloc(&d, (size_t)768 << 20) == cudaSuccess, "cudaMalloc of 768 MiB of 1 GiB", NULL);
  cudaMemGetInfo(&fr, &tot);
  check(fr == (size_t)256 << 20, "free memory less what is allocated", NULL);
  check(cudaMalloc(&d2, (size_t)512 << 20) == cudaErrorMemoryAllocation && !d2,
        "cudaMalloc beyond the free memory is refused", NULL);

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  char host[64] = {0};
  check(cudaMemcpyAsync(host, d, 64, cudaMemcpyHostToDevice, s) == cudaErrorInvalidValue,
        "HostToDevice into host memory is refused", NULL);
  check(cudaMemcpyAsync(d, host, 64, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue,
        "DeviceToHost from host memory is refused", NULL);
  check(cudaMemcpyAsync(d, host, 64, cudaMemcpyHostToDevice, s) == cudaSuccess &&
            cudaMemcpyAsync(host, d, 64, cudaMemcpyDeviceToHost, s) == cudaSuccess,
        "copies of the right kinds work", NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* no sanitizer handler: the kernel's verdict */
    volatile char *p = d;
    char x = p[0]; /* must fault: device memory is not host memory */
    _exit(x == 99 ? 2 : 0);
  }
  int ws = 0;
  waitpid(pid, &ws, 0);
  check(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSEGV, "a device pointer read by the host faults", NULL);
  check(cudaFree(d) == cudaSuccess, "cudaFree", NULL);
  check(cudaMemcpyAsync(host, d, 64, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue,
        "a copy from freed device memory is refused", NULL);
  check(cudaFree(d) == cudaErrorInvalidValue, "a second cudaFree is refused", NULL);
  cudaMemGetInfo(&fr, &tot);
  check(fr == tot, "freed memory is free again", NULL);
  cudaStreamDestroy(s);

  int n = -1;
  setenv("CUDA_VISIBLE_DEVICES", "9", 1);
  check(cudaGetDeviceCount(&n) == cudaErrorNoDevice && n == 0,
        "CUDA_VISIBLE_DEVICES naming a device the machine lacks: no device", NULL);
  unsetenv("CUDA_VISIBLE_DEVICES");
  setenv("RANKRUN_FAKEGPU_DEVICES", "2", 1);
  check(cudaGetDeviceCount(&n) == cudaSuccess && n == 2 && cudaSetDevice(2) == cudaErrorInvalidDevice,
        "RANKRUN_FAKEGPU_DEVICES sets the machine's devices", NULL);

  setenv("RANKRUN_FAKEGPU_MEMORY", "1G", 1);
  ncclUniqueId id1, id2, id3;
  ncclGetUniqueId(&id1);
  ncclGetUniqueId(&id2);
  ncclGetUniqueId(&id3);
  fflush(stdout);
  pid = fork();
  if (pid == 0) _exit(member(1, id1, id2, id3) ? 1 : 0);
  int bad = member(0, id1, id2, id3);
  waitpid(pid, &ws, 0);
  check(bad == 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "both members of the two-process checks", NULL);
  printf("%s: test_fakegpu, %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
