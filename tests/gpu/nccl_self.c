/*
 * nccl_self.c: the nccl backend's calls on one GPU, through the same
 * backend table rankrun's workers use (runtime/backend.h), for a machine
 * with a single GPU, where no two ranks can share a communicator (NCCL
 * refuses two ranks on one device: "Duplicate GPU detected").
 *
 * One process is rank 0 of a one-member group. It checks: host/device
 * copies; all-reduce (int64 and float, sum and max), all-gather and
 * all-to-all against their one-member results; the barrier; p2p_post /
 * p2p_wait with RT_P2P_MAX sends and receives to itself (NCCL pairs a send
 * to self with the receive from self of the same group, in order) at odd
 * sizes and offsets, interleaved and sends-first, with a from_host into
 * other memory while the group is in flight, and one large message;
 * copy_ref; the normal teardown (ncclCommFinalize, ncclCommDestroy). Then
 * the failure paths: a group whose send to self has no receive (NCCL
 * refuses it) must fail without hanging, and the communicator of a
 * two-member group whose second member never comes must give
 * RT_ERR_TIMEOUT by the deadline and be aborted with ncclCommAbort.
 *
 * Prints one PASS or FAIL line per check. Exit: 0 when every check passed,
 * 1 when one failed, 77 (a skip for meson) when no GPU is visible.
 * usage: nccl_self [TIMEOUT_S]   (default 10: the init timeout check waits
 * that long)
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "store.h"

static int failures;

static void check(bool ok, const char *what, const char *detail) {
  printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "",
         detail ? detail : "");
  fflush(stdout);
  if (!ok) failures++;
}

static void on_alarm(int s) {
  (void)s;
  static const char m[] = "FAIL: watchdog: a backend call hung past its "
                          "deadline (see the last PASS line)\n";
  ssize_t w = write(1, m, sizeof m - 1);
  (void)w;
  _exit(1);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)x;
  }
}

/* One piece of the p2p check: bytes from src offset so to dst offset do. */
typedef struct {
  size_t so, d, n;
} Piece;

int main(int argc, char **argv) {
  double timeout = argc > 1 ? atof(argv[1]) : 10.0;
  if (timeout <= 0) timeout = 10.0;
  signal(SIGALRM, on_alarm);
  alarm((unsigned)(6 * timeout + 60));

  RtStoreServer *srv = NULL;
  RtStore st = {-1, timeout};
  if (rt_store_server_start("127.0.0.1", 0, 60, &srv) != RT_OK ||
      rt_store_connect(&st, "127.0.0.1", rt_store_server_port(srv), timeout,
                       timeout) != RT_OK) {
    check(false, "rendezvous store", rt_errmsg());
    return 1;
  }
  int32_t solo[1] = {0}, pair[2] = {0, 1};
  PlanGroup groups[2] = {{.id = 0, .kind = GK_WORLD, .pool = -1, .instance = -1, .n = 1, .ranks = solo},
                         {.id = 1, .kind = GK_TP, .n = 2, .ranks = pair}};
  PlanRank ranks[2] = {{.rank = 0, .local_rank = 0, .device = 0},
                       {.rank = 1, .local_rank = 1, .device = 1}};
  Plan plan = {.world_size = 2, .nnodes = 1, .nranks = 2, .ranks = ranks, .ngroups = 2, .groups = groups};
  RtBackendCtx ctx = {&plan, 0, 0, 0, &st, "127.0.0.1", timeout, "0", "", 0};
  const RtBackend *be = &rt_backend_nccl;
  void *state = NULL;
  RtResult r = be->init(&ctx, &state);
  if (r == RT_ERR_UNSUPPORTED) {
    printf("SKIP: %s\n", rt_errmsg());
    return 77;
  }
  check(r == RT_OK, "init (cudaSetDevice, streams, events)", rt_errmsg());
  if (r != RT_OK) return 1;
  {
    int nv = 0, rv = 0, dv = 0;
    struct cudaDeviceProp p;
    ncclGetVersion(&nv);
    cudaRuntimeGetVersion(&rv);
    cudaDriverGetVersion(&dv);
    memset(&p, 0, sizeof p);
    cudaGetDeviceProperties(&p, 0);
    printf("info: %s, NCCL %d (built with %d), CUDA runtime %d, driver %d\n",
           p.name, nv, NCCL_VERSION_CODE, rv, dv);
  }

  RtComm *c = NULL;
  double t0 = rt_now();
  r = be->group_create(state, 0, &c);
  char d[256];
  snprintf(d, sizeof d, "%.2f s; %s", rt_now() - t0, r == RT_OK ? "" : rt_errmsg());
  check(r == RT_OK, "group_create of a one-member group", d);
  if (r != RT_OK) return 1;
  check(be->comm_size(c) == 1 && be->comm_index(c) == 0, "comm_size and comm_index", NULL);

  int64_t fb = 0, tb = 0;
  r = be->mem_info(state, &fb, &tb);
  snprintf(d, sizeof d, "%lld free of %lld bytes", (long long)fb, (long long)tb);
  check(r == RT_OK && fb > 0 && tb >= fb, "mem_info (cudaMemGetInfo)", d);

  const size_t N = (size_t)64 << 20, BIG = (size_t)256 << 20;
  unsigned char *ha = rp_malloc(BIG), *hb = rp_malloc(BIG), *hc = rp_malloc(N);
  void *A = be->mem_alloc(state, BIG), *B = be->mem_alloc(state, BIG),
       *C = be->mem_alloc(state, N), *I = be->mem_alloc(state, 64);
  check(A && B && C && I, "mem_alloc (cudaMalloc)", NULL);
  if (!A || !B || !C || !I) return 1;

  fill(ha, BIG, 1);
  r = be->from_host(state, A, ha, BIG);
  if (r == RT_OK) r = be->to_host(state, hb, A, BIG);
  check(r == RT_OK && memcmp(ha, hb, BIG) == 0, "from_host then to_host, 256 MiB",
        r == RT_OK ? "" : rt_errmsg());

  /* Collectives of one member: their results are the input. */
  int64_t id = 41, got = 0;
  r = be->from_host(state, I, &id, sizeof id);
  if (r == RT_OK) r = be->all_reduce(c, I, I, 1, RT_I64, RT_SUM);
  if (r == RT_OK) r = be->to_host(state, &got, I, sizeof got);
  check(r == RT_OK && got == 41, "all-reduce int64 sum in place", r == RT_OK ? "" : rt_errmsg());
  {
    size_t cnt = N / sizeof(float);
    float *f = (float *)ha;
    for (size_t i = 0; i < cnt; i++) f[i] = (float)(i % 1000) - 500.0f;
    r = be->from_host(state, A, f, N);
    if (r == RT_OK) r = be->all_reduce(c, A, B, cnt, RT_F32, RT_SUM);
    if (r == RT_OK) r = be->to_host(state, hb, B, N);
    check(r == RT_OK && memcmp(ha, hb, N) == 0, "all-reduce float sum out of place",
          r == RT_OK ? "" : rt_errmsg());
    if (r == RT_OK) r = be->all_reduce(c, A, A, cnt, RT_F32, RT_MAX);
    if (r == RT_OK) r = be->to_host(state, hb, A, N);
    check(r == RT_OK && memcmp(ha, hb, N) == 0, "all-reduce float max in place",
          r == RT_OK ? "" : rt_errmsg());
  }
  fill(ha, N, 2);
  r = be->from_host(state, A, ha, N);
  if (r == RT_OK) r = be->all_gather(c, A, B, N);
  if (r == RT_OK) r = be->to_host(state, hb, B, N);
  check(r == RT_OK && memcmp(ha, hb, N) == 0, "all-gather", r == RT_OK ? "" : rt_errmsg());
  fill(ha, N, 3);
  r = be->from_host(state, A, ha, N);
  if (r == RT_OK) r = be->all_to_all(c, A, B, N);
  if (r == RT_OK) r = be->to_host(state, hb, B, N);
  check(r == RT_OK && memcmp(ha, hb, N) == 0, "all-to-all (send and receive to self in one group)",
        r == RT_OK ? "" : rt_errmsg());
  t0 = rt_now();
  r = be->barrier(c);
  snprintf(d, sizeof d, "%.1f us; %s", (rt_now() - t0) * 1e6, r == RT_OK ? "" : rt_errmsg());
  check(r == RT_OK, "barrier", d);

  /* p2p: RT_P2P_MAX / 2 pieces of odd sizes at odd offsets, each sent to
   * self from A and received into B at another place (pieces in reverse
   * order), in two layouts of the operation list. */
  {
    int np = RT_P2P_MAX / 2;
    Piece *pc = rp_calloc((size_t)np, sizeof *pc);
    RtP2p *ops = rp_calloc((size_t)RT_P2P_MAX, sizeof *ops);
    size_t off = 1, total = 0;
    for (int i = 0; i < np; i++) {
      pc[i].so = off;
      pc[i].n = 1 + (size_t)(i * 7919) % 65537;
      off += pc[i].n + 3;
      total += pc[i].n;
    }
    size_t dend = off;
    for (int i = 0; i < np; i++) pc[i].d = dend - pc[i].so - pc[i].n;
    for (int layout = 0; layout < 2; layout++) {
      fill(ha, dend, 10 + (unsigned)layout);
      memset(hb, 0, dend);
      /* The zeros must be on the device before the receives land (the
       * from_host race the copy stream closes), and the source before the
       * sends read it. */
      r = be->from_host(state, B, hb, dend);
      if (r == RT_OK) r = be->from_host(state, A, ha, dend);
      int n = 0;
      for (int i = 0; i < np; i++) {
        RtP2p s = {true, 0, (unsigned char *)A + pc[i].so, pc[i].n, i};
        RtP2p v = {false, 0, (unsigned char *)B + pc[i].d, pc[i].n, i};
        if (layout == 0) {
          ops[n++] = s;
          ops[n++] = v;
        } else {
          ops[i] = s;
          ops[np + i] = v;
          n += 2;
        }
      }
      double secs = 0;
      fill(hc, N, 20 + (unsigned)layout);
      if (r == RT_OK) r = be->p2p_post(c, ops, n);
      /* What the KV path does while a group is on the wire: copy the next
       * layer group into other pool memory. */
      if (r == RT_OK) r = be->from_host(state, C, hc, N);
      if (r == RT_OK) r = be->p2p_wait(c, &secs);
      if (r == RT_OK) r = be->to_host(state, hb, B, dend);
      bool ok = r == RT_OK;
      size_t bad = 0;
      for (int i = 0; ok && i < np; i++)
        if (memcmp(hb + pc[i].d, ha + pc[i].so, pc[i].n) != 0) {
          ok = false;
          bad = (size_t)i;
        }
      unsigned char *back = rp_malloc(N);
      if (ok) r = be->to_host(state, back, C, N);
      bool cok = ok && r == RT_OK && memcmp(back, hc, N) == 0;
      free(back);
      snprintf(d, sizeof d, "%d operations, %zu bytes, %.3f ms by events%s%s", n,
               total, secs * 1e3, r == RT_OK ? "" : "; ",
               r == RT_OK ? (ok ? "" : "a piece differs") : rt_errmsg());
      if (!ok && r == RT_OK) {
        size_t l = strlen(d);
        snprintf(d + l, sizeof d - l, " (piece %zu)", bad);
      }
      check(ok && secs > 0, layout == 0 ? "p2p_post/p2p_wait to self, sends and receives interleaved"
                                        : "p2p_post/p2p_wait to self, sends first",
            d);
      check(cok, "from_host while the p2p group is in flight", NULL);
    }
    free(pc);
    free(ops);
  }
  {
    fill(ha, BIG, 30);
    r = be->from_host(state, A, ha, BIG);
    RtP2p two[2] = {{true, 0, A, BIG, 0}, {false, 0, B, BIG, 0}};
    double secs = 0;
    if (r == RT_OK) r = be->p2p_post(c, two, 2);
    if (r == RT_OK) r = be->p2p_wait(c, &secs);
    if (r == RT_OK) r = be->to_host(state, hb, B, BIG);
    snprintf(d, sizeof d, "%.3f ms, %.1f GB/s copied%s%s", secs * 1e3,
             secs > 0 ? (double)BIG / secs / 1e9 : 0.0, r == RT_OK ? "" : "; ",
             r == RT_OK ? "" : rt_errmsg());
    check(r == RT_OK && secs > 0 && memcmp(ha, hb, BIG) == 0,
          "p2p to self, one 256 MiB message", d);
  }
  {
    double secs = 0;
    fill(ha, BIG, 40);
    r = be->from_host(state, A, ha, BIG);
    if (r == RT_OK) r = be->copy_ref(state, B, A, BIG, &secs);
    if (r == RT_OK) r = be->to_host(state, hb, B, BIG);
    snprintf(d, sizeof d, "%.3f ms, %.1f GB/s read + written%s%s", secs * 1e3,
             secs > 0 ? 2.0 * (double)BIG / secs / 1e9 : 0.0,
             r == RT_OK ? "" : "; ", r == RT_OK ? "" : rt_errmsg());
    check(r == RT_OK && secs > 0 && memcmp(ha, hb, BIG) == 0,
          "copy_ref, 256 MiB device to device", d);
  }
  be->mem_free(state, A);
  be->mem_free(state, B);
  be->mem_free(state, C);
  be->mem_free(state, I);
  t0 = rt_now();
  r = be->comm_destroy(c, false);
  snprintf(d, sizeof d, "%.2f s; %s", rt_now() - t0, r == RT_OK ? "" : rt_errmsg());
  check(r == RT_OK, "comm_destroy (ncclCommFinalize, ncclCommDestroy)", d);

  /* Failure paths. A send to self with no receive: NCCL refuses the
   * group; the call must fail, not hang, and abort must return. */
  c = NULL;
  r = be->group_create(state, 0, &c);
  check(r == RT_OK, "group_create again after a destroy", r == RT_OK ? "" : rt_errmsg());
  if (r == RT_OK) {
    void *X = be->mem_alloc(state, 4096);
    RtP2p lone = {true, 0, X, 4096, 0};
    double secs = 0;
    t0 = rt_now();
    r = be->p2p_post(c, &lone, 1);
    if (r == RT_OK) r = be->p2p_wait(c, &secs);
    snprintf(d, sizeof d, "after %.2f s: %s", rt_now() - t0, r == RT_OK ? "no error" : rt_errmsg());
    check(r != RT_OK && rt_now() - t0 < timeout + 5, "a send to self without its receive fails", d);
    r = be->all_reduce(c, X, X, 1, RT_F32, RT_SUM);
    check(r != RT_OK, "a failed communicator refuses further calls", rt_errmsg());
    t0 = rt_now();
    be->comm_destroy(c, true);
    snprintf(d, sizeof d, "%.2f s", rt_now() - t0);
    check(rt_now() - t0 < timeout, "comm_destroy with abort (ncclCommAbort)", d);
    be->mem_free(state, X); /* left to exit: the state is broken now */
  }
  /* A two-member group whose other member never comes: init must give
   * RT_ERR_TIMEOUT by the deadline, and the abort must return. */
  c = NULL;
  t0 = rt_now();
  r = be->group_create(state, 1, &c);
  double dt = rt_now() - t0;
  snprintf(d, sizeof d, "after %.2f s (timeout %.0f s): %s", dt, timeout,
           r == RT_OK ? "created" : rt_errmsg());
  check(r == RT_ERR_TIMEOUT && dt < timeout + 5,
        "init of a group whose peer never comes times out and is aborted", d);
  if (r == RT_OK) be->comm_destroy(c, true);
  t0 = rt_now();
  be->finalize(state);
  snprintf(d, sizeof d, "%.2f s", rt_now() - t0);
  check(rt_now() - t0 < timeout, "finalize", d);
  rt_store_close(&st);
  rt_store_server_stop(srv);
  free(ha);
  free(hb);
  free(hc);
  printf("%s: nccl_self, %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
