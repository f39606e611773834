/*
 * worker.c: a worker written against librankrun's public header only
 * (runtime/include/rankrun.h), started by `rankrun PLAN --node N -- worker
 * REQUESTS TOKENS` in the exec-worker scenarios of test_runtime.py; its
 * twin in Python is worker.py, which must behave the same.
 *
 * It all-reduces (rank, 1) in every group it belongs to and checks the
 * sum of the members and the count; each rank sets a store key and reads
 * every other rank's; then for REQUESTS requests of TOKENS tokens a
 * prefill rank fills its region with a pattern of (request, layer, kv
 * head, token, word) and sends it, a decode rank receives into a buffer
 * filled with 0xEE and checks every cell of its region byte for byte.
 * Prints `worker ok: rank R, G groups, B KV bytes verified` and exits 0;
 * on any failure prints the reason and exits 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rankrun.h"

static int fail(const char *what, int code) {
  fprintf(stderr, "worker: %s: code %d: %s\n", what, code, rankrun_errmsg());
  return 1;
}

/* Word w of cell (k, l, h, p): the same in worker.py. */
static uint64_t cell_word(int64_t k, int64_t l, int64_t h, int64_t p, int64_t w) {
  uint64_t x = ((uint64_t)k * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)l << 40) ^
               ((uint64_t)h << 20) ^ (uint64_t)p;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  return x + (uint64_t)w * 0x94D049BB133111EBull;
}

/* Fills (fill) or checks (!fill) every cell of the region. */
static int64_t cells(unsigned char *buf, const rankrun_kv_layout *L, int64_t k, int fill) {
  int64_t bad = 0;
  for (int64_t l = L->layer_begin; l < L->layer_end; l++)
    for (int64_t h = L->head_begin; h < L->head_end; h++)
      for (int64_t p = 0; p < L->tokens; p++) {
        unsigned char *c = buf + (((l - L->layer_begin) * (L->head_end - L->head_begin) +
                                   (h - L->head_begin)) * L->tokens + p) * L->cell_bytes;
        for (int64_t w = 0; w < L->cell_bytes / 8; w++) {
          uint64_t v = cell_word(k, l, h, p, w), got;
          if (fill) {
            memcpy(c + 8 * w, &v, 8);
            continue;
          }
          memcpy(&got, c + 8 * w, 8);
          if (got != v && bad++ == 0)
            fprintf(stderr, "worker: request %" PRId64 ", layer %" PRId64 ", kv head %" PRId64
                    ", token %" PRId64 ", word %" PRId64 ": wrong\n", k, l, h, p, w);
        }
      }
  return bad;
}

static int groups_check(rankrun *rr) {
  void *dev = rankrun_mem_alloc(rr, 16); /* device memory on nccl */
  for (int i = 0; i < rankrun_ngroups(rr); i++) {
    int64_t v[2] = {rankrun_rank(rr), 1}, want = 0;
    for (int m = 0; m < rankrun_group_size(rr, i); m++) want += rankrun_group_member(rr, i, m);
    rankrun_comm *c = rankrun_comm_at(rr, i);
    int r = rankrun_from_host(rr, dev, v, sizeof v);
    if (!r) r = rankrun_all_reduce(c, dev, dev, 2, RANKRUN_INT64, RANKRUN_SUM);
    if (!r) r = rankrun_to_host(rr, v, dev, sizeof v);
    if (r) return fail("all_reduce", r);
    if (v[0] != want || v[1] != rankrun_group_size(rr, i) || rankrun_comm_size(c) != v[1]) {
      fprintf(stderr, "worker: group %s %d: all_reduce gave %" PRId64 " %" PRId64 ", expected %"
              PRId64 " %d\n", rankrun_group_kind(rr, i), rankrun_group_id(rr, i), v[0], v[1], want,
              rankrun_group_size(rr, i));
      return 1;
    }
  }
  rankrun_mem_free(rr, dev);
  return 0;
}

static int store_check(rankrun *rr) {
  char key[64], val[64], got[64];
  snprintf(key, sizeof key, "hello/%d", rankrun_rank(rr));
  snprintf(val, sizeof val, "rank %d of pool %s", rankrun_rank(rr), rankrun_pool(rr));
  int r = rankrun_store_set(rr, key, val, strlen(val));
  if (r) return fail("store_set", r);
  for (int q = 0; q < rankrun_world_size(rr); q++) {
    size_t n = 0;
    snprintf(key, sizeof key, "hello/%d", q);
    r = rankrun_store_wait(rr, key, 30, got, sizeof got - 1, &n);
    if (r) return fail("store_wait", r);
    got[n] = 0;
    if (strncmp(got, "rank ", 5) != 0 || atoi(got + 5) != q) {
      fprintf(stderr, "worker: store key %s holds `%s`\n", key, got);
      return 1;
    }
  }
  return 0;
}

static int kv_check(rankrun *rr, int64_t requests, int64_t tokens, int64_t *verified) {
  for (int64_t k = 0; k < requests; k++) {
    int role = 0, r = rankrun_kv_role(rr, k, &role);
    rankrun_kv_layout L;
    if (!r && role != RANKRUN_KV_NONE) r = rankrun_kv_layout_of(rr, k, tokens, &L);
    if (r) return fail("kv_role/kv_layout", r);
    if (role == RANKRUN_KV_NONE) continue;
    if (L.cell_bytes % 8) return fprintf(stderr, "worker: cell of %" PRId64 " bytes\n", L.cell_bytes), 1;
    unsigned char *host = malloc((size_t)L.bytes), *dev = rankrun_mem_alloc(rr, (size_t)L.bytes);
    memset(host, 0xEE, (size_t)L.bytes);
    if (role == RANKRUN_KV_SEND) cells(host, &L, k, 1);
    r = rankrun_from_host(rr, dev, host, (size_t)L.bytes);
    if (!r) r = role == RANKRUN_KV_SEND ? rankrun_kv_send(rr, k, tokens, dev, (size_t)L.bytes)
                                        : rankrun_kv_recv(rr, k, tokens, dev, (size_t)L.bytes);
    if (!r && role == RANKRUN_KV_RECV) r = rankrun_to_host(rr, host, dev, (size_t)L.bytes);
    int64_t bad = !r && role == RANKRUN_KV_RECV ? cells(host, &L, k, 0) : 0;
    if (!r && role == RANKRUN_KV_RECV && !bad) *verified += L.bytes;
    rankrun_mem_free(rr, dev);
    free(host);
    if (r) return fail(role == RANKRUN_KV_SEND ? "kv_send" : "kv_recv", r);
    if (bad) return fprintf(stderr, "worker: %" PRId64 " wrong words\n", bad), 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int64_t requests = argc > 1 ? atoll(argv[1]) : 0, tokens = argc > 2 ? atoll(argv[2]) : 16;
  rankrun *rr = NULL;
  int r = rankrun_init(&rr);
  if (r) return fail("init", r);
  int64_t verified = 0;
  int bad = groups_check(rr);
  if (!bad) bad = store_check(rr);
  if (!bad) bad = kv_check(rr, requests, tokens, &verified);
  if (!bad)
    printf("worker ok: rank %d (%s %s, tp %d), %d groups, %" PRId64 " KV bytes verified\n",
           rankrun_rank(rr), rankrun_backend(rr), rankrun_pool(rr), rankrun_coord(rr, "tp"),
           rankrun_ngroups(rr), verified);
  rankrun_finalize(rr);
  return bad ? 1 : 0;
}
