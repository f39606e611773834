/*
 * cost_fixtures.h: in-memory specs shared by test_cost.c and test_search.c.
 *
 * Model shapes come from the public config.json of each checkpoint:
 * Llama-3.1-70B (hidden 8192, 80 layers, 64 heads, 8 KV heads, head_dim
 * 128, intermediate 28672, vocab 128256) and DeepSeek-V3 (hidden 7168, 61
 * layers, 128 heads, MLA q_lora 1536 / kv_lora 512 / nope 128 / rope 64 /
 * v 128, 256 routed experts of 2048, top-8, 1 shared, 3 dense layers of
 * 18432, vocab 129280). H200 SXM figures from NVIDIA's H200 datasheet:
 * 141 GB HBM3e at 4.8 TB/s, 989 TFLOP/s dense BF16, 1979 TFLOP/s dense FP8,
 * NVLink 900 GB/s (450 GB/s per direction), 8 GPUs per NVLink domain; the
 * scale-out NIC is ConnectX-7 at 400 Gb/s (50 GB/s). Memory utilisation
 * 0.90, a 2 GiB reserve and 16-token KV blocks are the tests' own
 * deployment choices, not hardware figures.
 *
 * The functions are static inline so that a test file that uses only some
 * of them compiles without unused-function warnings.
 */
#ifndef RANKPLAN_TESTS_COST_FIXTURES_H
#define RANKPLAN_TESTS_COST_FIXTURES_H

#include <string.h>

#include "spec.h"

#define SI(x) {(x), {"t", 1, 1}, true}
#define SN(x) {(x), {"t", 1, 1}, true}

static inline void hw_h200(Spec *s, int64_t nodes) {
  s->hardware.gpu.memory = (SInt)SI(141000000000LL);
  s->hardware.gpu.hbm_bandwidth = (SNum)SN(4.8e12);
  s->hardware.gpu.bf16 = (SNum)SN(989e12);
  s->hardware.gpu.fp16 = (SNum)SN(989e12);
  s->hardware.gpu.fp8 = (SNum)SN(1979e12);
  s->hardware.nodes = (SInt)SI(nodes);
  s->hardware.gpus_per_node = (SInt)SI(8);
  s->hardware.scale_up.domain = (SInt)SI(8);
  s->hardware.scale_up.bandwidth = (SNum)SN(450e9);
  s->hardware.scale_out.bandwidth = (SNum)SN(50e9);
  s->deployment.memory.utilization = (SNum)SN(0.90);
  s->deployment.memory.reserve = (SInt)SI(2LL << 30);
  s->deployment.memory.kv_block = (SInt)SI(16);
  s->deployment.mode.v = MODE_SEARCH;
  s->deployment.mode.set = true;
}

static inline void workload(Spec *s, int64_t in, int64_t out, double ttft, double tpot) {
  s->workload.input_tokens = (SInt)SI(in);
  s->workload.output_tokens = (SInt)SI(out);
  s->slo.ttft = (SNum)SN(ttft);
  s->slo.tpot = (SNum)SN(tpot);
}

static inline Spec llama70b(int64_t nodes) {
  Spec s;
  memset(&s, 0, sizeof s);
  ModelSpec *m = &s.model;
  m->name.v = "llama-3.1-70b";
  m->layers = (SInt)SI(80);
  m->hidden_size = (SInt)SI(8192);
  m->vocab_size = (SInt)SI(128256);
  m->attention.kind.v = ATTN_GQA;
  m->attention.kind.set = true;
  m->attention.heads = (SInt)SI(64);
  m->attention.kv_heads = (SInt)SI(8);
  m->attention.head_dim = (SInt)SI(128);
  m->ffn.intermediate_size = (SInt)SI(28672);
  m->dtype.weights.v = DT_BF16;
  m->dtype.kv_cache.v = DT_BF16;
  m->dtype.activations.v = DT_BF16;
  m->max_context = (SInt)SI(131072);
  hw_h200(&s, nodes);
  workload(&s, 4000, 500, 0.6, 0.04);
  return s;
}

static inline Spec dsv3(int64_t nodes) {
  Spec s;
  memset(&s, 0, sizeof s);
  ModelSpec *m = &s.model;
  m->name.v = "deepseek-v3";
  m->layers = (SInt)SI(61);
  m->hidden_size = (SInt)SI(7168);
  m->vocab_size = (SInt)SI(129280);
  m->attention.kind.v = ATTN_MLA;
  m->attention.kind.set = true;
  m->attention.heads = (SInt)SI(128);
  m->attention.q_lora_rank = (SInt)SI(1536);
  m->attention.kv_lora_rank = (SInt)SI(512);
  m->attention.qk_nope_head_dim = (SInt)SI(128);
  m->attention.qk_rope_head_dim = (SInt)SI(64);
  m->attention.v_head_dim = (SInt)SI(128);
  m->ffn.intermediate_size = (SInt)SI(18432);
  m->moe.present = true;
  m->moe.experts = (SInt)SI(256);
  m->moe.top_k = (SInt)SI(8);
  m->moe.shared_experts = (SInt)SI(1);
  m->moe.expert_intermediate_size = (SInt)SI(2048);
  m->moe.dense_layers = (SInt)SI(3);
  m->dtype.weights.v = DT_FP8;
  m->dtype.kv_cache.v = DT_BF16;
  m->dtype.activations.v = DT_BF16;
  m->max_context = (SInt)SI(131072);
  hw_h200(&s, nodes);
  workload(&s, 4000, 500, 2.0, 0.05);
  return s;
}

#endif
