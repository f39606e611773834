/*
 * test_kvpool.c: a rank's ledger against the memory its backend reports.
 * A backend that can tell its free memory (mem_info: cudaMemGetInfo on
 * nccl) must make a rank whose ledger does not fit fail before anything is
 * allocated, naming the planned and the free bytes; a failed allocation
 * names them too. These run everywhere on a backend that is the host
 * backend with mem_info and mem_alloc replaced, so the nccl path's logic
 * is checked without a GPU.
 */
#include <string.h>

#include <stdio.h>

#include "kv.h"
#include "launcher.h"
#include "t.h"

static int64_t fake_free, fake_total;
static int allocs, frees;
static bool alloc_fails;

static RtResult fake_mem_info(void *state, int64_t *free_bytes,
                              int64_t *total_bytes) {
  (void)state;
  *free_bytes = fake_free;
  *total_bytes = fake_total;
  return RT_OK;
}

static void *fake_mem_alloc(void *state, size_t bytes) {
  allocs++;
  return alloc_fails ? NULL : rt_backend_host.mem_alloc(state, bytes);
}

static void fake_mem_free(void *state, void *p) {
  frees++;
  rt_backend_host.mem_free(state, p);
}

static RtBackend fake_backend(bool with_info) {
  RtBackend be = rt_backend_host;
  be.name = "fake";
  be.mem_alloc = fake_mem_alloc;
  be.mem_free = fake_mem_free;
  be.mem_info = with_info ? fake_mem_info : NULL;
  return be;
}

/* Rank 3 on device 2: 1 MiB of weights, 4 blocks of 16 tokens of 4 KiB
 * = 256 KiB of KV pool. */
static PlanRank rank3(void) {
  PlanRank R;
  memset(&R, 0, sizeof R);
  R.rank = 3;
  R.device = 2;
  R.memory[MEM_WEIGHTS] = INT64_C(1) << 20;
  R.kv_blocks = 4;
  R.kv_block_tokens = 16;
  R.kv_bytes_per_token = 4096;
  return R;
}

static void reset(int64_t free_b, int64_t total_b, bool fail) {
  fake_free = free_b;
  fake_total = total_b;
  alloc_fails = fail;
  allocs = frees = 0;
}

static void test_fits(void) {
  RtBackend be = fake_backend(true);
  PlanRank R = rank3();
  RtKvPool p;
  reset(INT64_C(8) << 20, INT64_C(16) << 20, false);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 1.0, &p), RT_OK);
  T_EQ_INT((int)p.weights_bytes, 1 << 20);
  T_EQ_INT((int)p.kv_bytes, 256 << 10);
  T_EQ_INT((int)p.planned_kv, 256 << 10);
  T_EQ_INT(allocs, 2);
  rt_kvpool_free(&be, NULL, &p);
  T_EQ_INT(frees, 2);
}

static void test_too_big_before_alloc(void) {
  RtBackend be = fake_backend(true);
  PlanRank R = rank3();
  RtKvPool p;
  /* 1 MiB + 256 KiB planned, 1 MiB free: refused, nothing allocated. */
  reset(INT64_C(1) << 20, INT64_C(80) << 30, false);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 1.0, &p), RT_ERR_SYS);
  const char *m = rt_errmsg();
  T_CHECK(strstr(m, "rank 3 (device 2)") != NULL);
  T_CHECK(strstr(m, "does not fit the device") != NULL);
  T_CHECK(strstr(m, "planned 1.00 MiB of weights and 256.00 KiB of KV pool") != NULL);
  T_CHECK(strstr(m, "1.00 MiB free of 80.00 GiB") != NULL);
  T_EQ_INT(allocs, 0);
  T_CHECK(p.weights == NULL && p.kv == NULL);
}

static void test_exact_fit(void) {
  RtBackend be = fake_backend(true);
  PlanRank R = rank3();
  RtKvPool p;
  reset((INT64_C(1) << 20) + (INT64_C(256) << 10), INT64_C(2) << 20, false);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 1.0, &p), RT_OK);
  rt_kvpool_free(&be, NULL, &p);
}

static void test_alloc_fails_names_free(void) {
  RtBackend be = fake_backend(true);
  PlanRank R = rank3();
  RtKvPool p;
  /* The device said it had room, the allocation failed anyway
   * (fragmentation, another process): the error still names both. */
  reset(INT64_C(4) << 20, INT64_C(8) << 20, true);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 1.0, &p), RT_ERR_SYS);
  const char *m = rt_errmsg();
  T_CHECK(strstr(m, "cannot allocate its memory") != NULL);
  T_CHECK(strstr(m, "4.00 MiB free of 8.00 MiB") != NULL);
  T_CHECK(p.weights == NULL && p.kv == NULL);
}

static void test_no_info_alloc_fails(void) {
  RtBackend be = fake_backend(false);
  PlanRank R = rank3();
  RtKvPool p;
  reset(0, 0, true);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 0.5, &p), RT_ERR_SYS);
  const char *m = rt_errmsg();
  T_CHECK(strstr(m, "asked 524288 + 131072 bytes at scale 0.5") != NULL);
}

static void test_overflow(void) {
  RtBackend be = fake_backend(true);
  PlanRank R = rank3();
  RtKvPool p;
  R.kv_blocks = INT64_MAX / 2;
  reset(INT64_MAX, INT64_MAX, false);
  T_EQ_INT(rt_kvpool_alloc(&be, NULL, &R, 1.0, &p), RT_ERR_INVALID);
  T_CHECK(strstr(rt_errmsg(), "overflows 64 bits") != NULL);
  T_EQ_INT(allocs, 0);
}

/* A pair of two transfers of one layer each, kv heads [0, 2): 2 cells
 * per token of 128 bytes (bytes_per_token 256). */
static PlanTransfer xfers[2];
static int64_t ranges[1][2];
static PlanReshard pair;
static char pname[] = "prefill", dname[] = "decode";
static Plan kv_plan(void) {
  memset(xfers, 0, sizeof xfers);
  for (int i = 0; i < 2; i++)
    xfers[i] = (PlanTransfer){.src = i, .dst = 0, .layers = {i, i + 1},
                              .kv_heads = {0, 2}, .tokens = PT_ALL,
                              .stride = 1, .offset = 0,
                              .bytes_per_token = 256};
  pair = (PlanReshard){.prefill = pname, .decode = dname,
                       .ntransfers = 2, .transfers = xfers};
  Plan pl;
  memset(&pl, 0, sizeof pl);
  pl.nreshard = 1;
  pl.reshard = &pair;
  return pl;
}

static void test_plan_check_ok(void) {
  Plan pl = kv_plan();
  int64_t T = 0;
  T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_OK);
  T_EQ_INT(T, -1);
  /* Another layer and head count with the same cell size is fine. */
  xfers[1].layers[1] = 3;
  xfers[1].bytes_per_token = 512;
  T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_OK);
  xfers[1].tokens = PT_RANGES;
  xfers[1].nranges = 1;
  xfers[1].ranges = ranges;
  ranges[0][0] = 0;
  ranges[0][1] = RT_KV_MAX_TOKENS;
  T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_OK);
  T_EQ_INT(T, RT_KV_MAX_TOKENS);
}

/* A transfer whose cells differ in size from its pair's first is refused,
 * naming it: messages are laid out in the pair's one cell size. */
static void test_plan_check_mixed_cells(void) {
  int64_t bpt[] = {512, 128, 258};
  for (size_t i = 0; i < sizeof bpt / sizeof bpt[0]; i++) {
    Plan pl = kv_plan();
    int64_t T = 0;
    xfers[1].bytes_per_token = bpt[i];
    T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_ERR_INVALID);
    T_CHECK(strstr(rt_errmsg(), "kv_reshard[0].transfers[1]") != NULL);
  }
  /* The first transfer itself malformed: named too. */
  Plan pl = kv_plan();
  int64_t T = 0;
  xfers[0].bytes_per_token = 0;
  T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_ERR_INVALID);
  T_CHECK(strstr(rt_errmsg(), "kv_reshard[0].transfers[0]") != NULL);
}

/* Token ranges past the --input-tokens bound, negative or empty are plan
 * errors naming the transfer, not a bad --input-tokens. */
static void test_plan_check_token_ranges(void) {
  int64_t bad[][2] = {{0, (int64_t)RT_KV_MAX_TOKENS + 1}, {-1, 4}, {4, 4},
                      {0, INT64_MAX}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    Plan pl = kv_plan();
    int64_t T = 0;
    xfers[1].tokens = PT_RANGES;
    xfers[1].nranges = 1;
    xfers[1].ranges = ranges;
    ranges[0][0] = bad[i][0];
    ranges[0][1] = bad[i][1];
    T_EQ_INT(rt_kv_plan_check(&pl, &T), RT_ERR_INVALID);
    T_CHECK(strstr(rt_errmsg(), "kv_reshard[0].transfers[1]") != NULL);
    T_CHECK(strstr(rt_errmsg(), "input-tokens") == NULL);
  }
}

/* Rings per node: one per direction of each same-node pair that shares a
 * group. 6 ranks, 0-3 on node 0 and 4-5 on node 1; groups {0,1}, {2,3},
 * {1,4} (across nodes: no ring), {4,5}, and {0,1} again (counted once). */
static void test_node_rings(void) {
  PlanRank ranks[6];
  for (int r = 0; r < 6; r++)
    ranks[r] = (PlanRank){.rank = r, .node = r < 4 ? 0 : 1, .local_rank = r % 4,
                          .device = r % 4};
  int32_t g0[] = {0, 1}, g1[] = {2, 3}, g2[] = {1, 4}, g3[] = {4, 5}, g4[] = {0, 1};
  PlanGroup groups[] = {{.n = 2, .ranks = g0}, {.n = 2, .ranks = g1},
                        {.n = 2, .ranks = g2}, {.n = 2, .ranks = g3},
                        {.n = 2, .ranks = g4}};
  Plan pl = {.world_size = 6, .nnodes = 2, .nranks = 6, .ranks = ranks,
             .ngroups = 5, .groups = groups};
  T_EQ_INT(rt_host_node_rings(&pl, 0), 4);
  T_EQ_INT(rt_host_node_rings(&pl, 1), 2);
  /* A world group: every ordered pair of a node. */
  int32_t w[] = {0, 1, 2, 3, 4, 5};
  PlanGroup all[] = {{.kind = GK_WORLD, .n = 6, .ranks = w}};
  Plan pw = pl;
  pw.ngroups = 1;
  pw.groups = all;
  T_EQ_INT(rt_host_node_rings(&pw, 0), 12);
  T_EQ_INT(rt_host_node_rings(&pw, 1), 2);
  T_CHECK(rt_host_ring_bytes() > (int64_t)RT_HOST_RING_BYTES);
}

/* 32 ranks sharing a group on one node: 992 rings of 8 MiB, 7.75 GiB of
 * /dev/shm. Refused against less, with every figure named; fine against
 * enough; the ledger and the rings together against MemAvailable. */
static void test_node_fit(void) {
  int64_t ring = rt_host_ring_bytes(), rings = 32 * 31;
  RtNodeFit f = {0, 0, 1.0, rings, ring, rings * ring - 1, -1};
  T_EQ_INT(rt_node_fit_check(&f), RT_ERR_INVALID);
  char want[64];
  snprintf(want, sizeof want, "%lld bytes) of /dev/shm", (long long)(rings * ring));
  T_CHECK(strstr(rt_errmsg(), "node 0 does not fit: its 992 shared-memory rings") != NULL);
  T_CHECK(strstr(rt_errmsg(), want) != NULL);
  T_CHECK(strstr(rt_errmsg(), "RANKRUN_HOST_SHM=0") != NULL);
  f.shm_free = rings * ring;
  T_EQ_INT(rt_node_fit_check(&f), RT_OK);
  f.shm_free = -1; /* unknown: not compared */
  T_EQ_INT(rt_node_fit_check(&f), RT_OK);
  /* Memory: the ledger fits alone, not with the rings. */
  f.ledger = INT64_C(1) << 30;
  f.mem_free = f.ledger + rings * ring - 1;
  T_EQ_INT(rt_node_fit_check(&f), RT_ERR_INVALID);
  T_CHECK(strstr(rt_errmsg(), "992 shared-memory rings") != NULL);
  T_CHECK(strstr(rt_errmsg(), "are free") != NULL);
  f.mem_free++;
  T_EQ_INT(rt_node_fit_check(&f), RT_OK);
  /* No rings (RANKRUN_HOST_SHM=0): only the ledger counts. */
  f.rings = 0;
  f.mem_free = f.ledger;
  T_EQ_INT(rt_node_fit_check(&f), RT_OK);
  /* Overflow is an error, not a wrap. */
  f.rings = INT64_MAX / 2;
  T_EQ_INT(rt_node_fit_check(&f), RT_ERR_INVALID);
  T_CHECK(strstr(rt_errmsg(), "overflow") != NULL);
}

int main(void) {
  T_RUN(test_node_rings);
  T_RUN(test_node_fit);
  T_RUN(test_plan_check_ok);
  T_RUN(test_plan_check_mixed_cells);
  T_RUN(test_plan_check_token_ranges);
  T_RUN(test_fits);
  T_RUN(test_too_big_before_alloc);
  T_RUN(test_exact_fit);
  T_RUN(test_alloc_fails_names_free);
  T_RUN(test_no_info_alloc_fails);
  T_RUN(test_overflow);
  T_DONE();
}
