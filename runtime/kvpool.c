/*
 * kvpool.c: per-rank memory as the plan's ledger says.
 *
 * Input: a rank's ledger (memory.weights, kv.blocks, kv.block_tokens,
 * kv.bytes_per_token) and the host-memory scale. Output: a KV pool and a
 * weights placeholder allocated by the backend (host memory or device
 * memory).
 * Invariants: every size is computed with checked arithmetic; an
 * allocation that fails is an error naming the planned and the asked
 * bytes, never a crash.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "kv.h"

#define PAGE 4096

/* bytes * scale rounded down to whole pages, at least one page. */
static int64_t scaled(int64_t bytes, double scale) {
  double v = (double)bytes * scale;
  if (v > 9.0e18) v = 9.0e18;
  int64_t b = (int64_t)v / PAGE * PAGE;
  return b < PAGE ? PAGE : b;
}

static bool kv_planned(const PlanRank *R, int64_t *out) {
  CkState st = {true};
  *out = ckm(&st, ckm(&st, R->kv_blocks, R->kv_block_tokens), R->kv_bytes_per_token);
  return st.ok;
}

/* "rank R (device D): WHAT: planned ... of weights and ... of KV pool,
 * FREE free of TOTAL TAIL", an RT_ERR_SYS. */
static RtResult device_err(const PlanRank *R, const RtKvPool *p,
                           const char *what, int64_t free_b, int64_t total_b,
                           const char *tail) {
  char a[32], b[32], c[32], d[32];
  return rt_err(RT_ERR_SYS,
                "rank %d (device %d): %s: planned %s of weights and %s of KV "
                "pool, %s free of %s%s", R->rank, R->device, what,
                rp_fmt_bytes(p->planned_weights, a, sizeof a),
                rp_fmt_bytes(p->planned_kv, b, sizeof b),
                rp_fmt_bytes(free_b, c, sizeof c),
                rp_fmt_bytes(total_b, d, sizeof d), tail);
}

RtResult rt_kvpool_alloc(const RtBackend *be, void *state, const PlanRank *R,
                         double scale, RtKvPool *out) {
  memset(out, 0, sizeof *out);
  out->planned_weights = R->memory[MEM_WEIGHTS];
  if (!kv_planned(R, &out->planned_kv))
    return rt_err(RT_ERR_INVALID, "rank %d: the KV pool size overflows 64 bits",
                  R->rank);
  out->weights_bytes = scaled(out->planned_weights, scale);
  out->kv_bytes = scaled(out->planned_kv, scale);
  /* Where the backend can tell, check the fit first: the error then names
   * the free bytes, and nothing is half allocated. */
  int64_t free_b = -1, total_b = -1, need = 0;
  if (be->mem_info) {
    RTCHECK(be->mem_info(state, &free_b, &total_b));
    if (!ck_add(out->weights_bytes, out->kv_bytes, &need) || need > free_b)
      return device_err(R, out, "its ledger does not fit the device", free_b,
                        total_b, "");
  }
  out->weights = be->mem_alloc(state, (size_t)out->weights_bytes);
  out->kv = out->weights ? be->mem_alloc(state, (size_t)out->kv_bytes) : NULL;
  if (!out->weights || !out->kv) {
    RtResult r;
    if (free_b >= 0) {
      r = device_err(R, out, "cannot allocate its memory", free_b, total_b,
                     " before allocating");
    } else {
      char a[32], b[32];
      r = rt_err(RT_ERR_SYS,
                 "rank %d: cannot allocate its memory: planned %s of weights "
                 "and %s of KV pool, asked %lld + %lld bytes at scale %g",
                 R->rank, rp_fmt_bytes(out->planned_weights, a, sizeof a),
                 rp_fmt_bytes(out->planned_kv, b, sizeof b),
                 (long long)out->weights_bytes, (long long)out->kv_bytes,
                 scale);
    }
    rt_kvpool_free(be, state, out);
    return r;
  }
  /* Touch the pages (host) so that the memory is really there; on a
   * device this is one memset-like copy per page-sized chunk. */
  if (be->host_memory) {
    memset(out->weights, 0, (size_t)out->weights_bytes);
    memset(out->kv, 0, (size_t)out->kv_bytes);
  }
  return RT_OK;
}

void rt_kvpool_free(const RtBackend *be, void *state, RtKvPool *p) {
  if (p->weights) be->mem_free(state, p->weights);
  if (p->kv) be->mem_free(state, p->kv);
  p->weights = p->kv = NULL;
}

int64_t rt_host_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int64_t rt_node_planned_bytes(const Plan *pl, int node_index, double scale) {
  int64_t sum = 0;
  for (int64_t i = 0; i < pl->nranks; i++) {
    const PlanRank *R = &pl->ranks[i];
    if (pl->nodes[node_index].node != R->node) continue;
    int64_t kv = 0;
    if (!kv_planned(R, &kv)) return INT64_MAX;
    if (!ck_add(sum, scaled(R->memory[MEM_WEIGHTS], scale), &sum) ||
        !ck_add(sum, scaled(kv, scale), &sum))
      return INT64_MAX;
  }
  return sum;
}

int64_t rt_fs_free(const char *path) {
  struct statvfs sv;
  int64_t out = 0;
  if (statvfs(path, &sv) != 0 ||
      !ck_mul((int64_t)sv.f_bavail, (int64_t)sv.f_frsize, &out))
    return -1;
  return out;
}

RtResult rt_node_fit_check(const RtNodeFit *f) {
  int64_t rb = 0, need = 0;
  char a[32], b[32], c[32];
  if (!ck_mul(f->rings, f->ring_bytes, &rb) || !ck_add(f->ledger, rb, &need))
    return rt_err(RT_ERR_INVALID, "node %d does not fit: its %lld shared-memory "
                  "rings of %lld bytes and its ledger overflow 64 bits",
                  f->node, (long long)f->rings, (long long)f->ring_bytes);
  if (f->shm_free >= 0 && rb > f->shm_free)
    return rt_err(RT_ERR_INVALID, "node %d does not fit: its %lld shared-memory "
                  "rings (one per direction of each pair of its ranks that "
                  "shares a group, %lld bytes each) need %s (%lld bytes) of "
                  "/dev/shm, %s (%lld bytes) are free; RANKRUN_HOST_SHM=0 keeps "
                  "every pair on TCP", f->node, (long long)f->rings,
                  (long long)f->ring_bytes, rp_fmt_bytes(rb, a, sizeof a),
                  (long long)rb, rp_fmt_bytes(f->shm_free, b, sizeof b),
                  (long long)f->shm_free);
  if (f->mem_free >= 0 && need > f->mem_free)
    return rt_err(RT_ERR_INVALID, "node %d does not fit: its ranks' ledger needs "
                  "%s (%lld bytes at --host-memory-scale %g) and its %lld "
                  "shared-memory rings %s (%lld bytes), %lld bytes in all; %s "
                  "(%lld bytes) are free", f->node,
                  rp_fmt_bytes(f->ledger, a, sizeof a), (long long)f->ledger,
                  f->scale, (long long)f->rings, rp_fmt_bytes(rb, b, sizeof b),
                  (long long)rb, (long long)need,
                  rp_fmt_bytes(f->mem_free, c, sizeof c), (long long)f->mem_free);
  return RT_OK;
}
