/*
 * mem_fixtures.h: the one-pool spec the memory-ledger tests build around a
 * model fixture (model_fixtures.h): one node of 8 GPUs, a 4,000 + 500
 * token workload, utilization 0.90, a 2 GiB reserve, 16-token KV blocks,
 * and a pool of every parallel size 1 that a test then changes.
 */
#ifndef RANKPLAN_TEST_MEM_FIXTURES_H
#define RANKPLAN_TEST_MEM_FIXTURES_H

#include "model_fixtures.h"

#define GIB ((int64_t)1 << 30)

static PoolSpec pool;

static inline void fx_spec(Spec *s, void (*model)(ModelSpec *), int64_t gpu_bytes) {
  memset(s, 0, sizeof *s);
  model(&s->model);
  FX_I(s->hardware.gpu.memory, gpu_bytes);
  FX_I(s->hardware.nodes, 1);
  FX_I(s->hardware.gpus_per_node, 8);
  FX_I(s->hardware.scale_up.domain, 8);
  FX_I(s->workload.input_tokens, 4000);
  FX_I(s->workload.output_tokens, 500);
  s->deployment.memory.utilization.v = 0.90;
  s->deployment.memory.utilization.set = true;
  FX_I(s->deployment.memory.reserve, 2 * GIB);
  FX_I(s->deployment.memory.kv_block, 16);
  memset(&pool, 0, sizeof pool);
  pool.name.v = "p";
  FX_I(pool.role, ROLE_BOTH);
  FX_I(pool.replicas, 1);
  FX_I(pool.tp, 1);
  FX_I(pool.pp, 1);
  FX_I(pool.cp, 1);
  FX_I(pool.dp, 1);
  FX_I(pool.ep, 1);
  FX_I(pool.etp, 1);
  FX_I(pool.dcp, 1);
  s->deployment.npools = 1;
  s->deployment.pools = &pool;
}

#endif
