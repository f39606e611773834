/*
 * Unit tests for mem_engine.c: the ledger's budget as each engine counts
 * it (docs/memory.md, "Engine accounting"). Every expected figure is
 * recomputed here from the formula docs/memory.md cites (vLLM 0.11's
 * worker and profile run, SGLang's profile_max_num_token), so a change to
 * any one component (the total, the profile tokens and sequences, the
 * sampler, the non-torch memory, the reserve default, SGLang's fraction)
 * fails a check here.
 */
#include "memory.h"

#include "engines.h"

#include <math.h>

#include "model_fixtures.h"
#include "t.h"

#define MIB ((int64_t)1 << 20)
#define GIB ((int64_t)1 << 30)

static PoolSpec pool;

/* Llama-3.1-8B on one H100 SXM as the catalog gives it: nvidia-smi's
 * 81,559 MiB and CUDA's 81,080 MiB; utilization 0.9; no reserve. */
static void fx_h100(Spec *s, Engine e, int64_t tp) {
  memset(s, 0, sizeof *s);
  fx_llama8b(&s->model);
  FX_I(s->model.max_context, 8192);
  s->hardware.name.v = "NVIDIA H100 SXM";
  s->hardware.name.set = true;
  FX_I(s->hardware.gpu.memory, 81559 * MIB);
  FX_I(s->hardware.gpu.cuda_memory, 81080 * MIB);
  FX_I(s->hardware.nodes, 1);
  FX_I(s->hardware.gpus_per_node, 8);
  FX_I(s->hardware.scale_up.domain, 8);
  FX_I(s->workload.input_tokens, 1000);
  FX_I(s->workload.output_tokens, 1000);
  FX_I(s->deployment.engine, e);
  if (e == ENGINE_VLLM) { /* the tests below check 0.11's rules; test_vllm019 the newest's */
    s->deployment.engine_version.v = "0.11";
    s->deployment.engine_version.set = true;
  }
  FX_I(s->deployment.memory.utilization, 0.90);
  s->deployment.memory.reserve.v = 2 * GIB; /* the parser's default, unset */
  FX_I(s->deployment.memory.kv_block, 16);
  memset(&pool, 0, sizeof pool);
  pool.name.v = "p";
  FX_I(pool.role, ROLE_BOTH);
  FX_I(pool.replicas, 1);
  FX_I(pool.tp, tp);
  FX_I(pool.pp, 1);
  FX_I(pool.cp, 1);
  FX_I(pool.dp, 1);
  FX_I(pool.ep, 1);
  FX_I(pool.etp, tp);
  FX_I(pool.dcp, 1);
  s->deployment.npools = 1;
  s->deployment.pools = &pool;
}

/* The widest layer of Llama-3.1-8B per token on a tp rank (docs/memory.md,
 * "The ledger of one rank"): 4h + (q + 2 kv heads) * d + 2 * I/tp. */
static int64_t llama8b_width(int64_t tp) {
  return 4 * 4096 + (32 / tp + 2 * (8 / tp)) * 128 + 2 * (14336 / tp);
}

/* The ledger of pp stage 0 of the one pool, without diagnostics. */
static bool ledger(const Spec *s, MemLedger *L) { return mem_ledger(s, &pool, 0, NULL, L, NULL); }

/* vLLM on an H100: the fraction of CUDA's total; the profile's forward of
 * 8192 tokens and sampler warm-up at 1024 sequences (hidden states kept);
 * 0.13 GiB outside PyTorch; no reserve; KV the rest, in whole blocks. */
static void test_vllm_h100_tp1(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.capacity, 81559 * MIB);
  T_EQ_INT(L.engine_total, 81080 * MIB);
  T_EQ_INT(L.usable, (int64_t)((double)(81080 * MIB) * 0.90));
  T_EQ_INT(L.tokens_per_forward, 8192);
  T_EQ_INT(L.profile_seqs, 1024);
  T_EQ_INT(L.forward_peak, 8192 * llama8b_width(1) * 2);
  T_EQ_INT(L.sampler, 8192 * 4096 * 2 + 1024 * 128256 * (int64_t)38);
  T_EQ_INT(L.activations, L.sampler);
  T_EQ_INT(L.workspace, 13 * GIB / 100);
  T_EQ_INT(L.comm, 0);
  T_EQ_INT(L.reserve, 0);
  ModelParams p;
  T_CHECK(model_params(&s.model, &p, NULL));
  /* the parameters, and vLLM's RoPE cache: cos and sin of every position
   * (max_position_embeddings unset: max_context) over the head dimension,
   * in bf16 */
  T_EQ_INT(L.w_rope, 8192 * 128 * 2);
  T_EQ_INT(L.weights, 2 * p.total + L.w_rope);
  T_EQ_INT(L.kv_pool, L.usable - L.weights - L.activations - L.workspace);
  T_EQ_INT(L.kv_blocks, L.kv_pool / (16 * 131072));
  FX_I(s.model.max_position_embeddings, 10485760); /* Llama 4 Scout's: 2.5 GiB */
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)10485760 * 128 * 2);
  s.deployment.engine.v = ENGINE_SGLANG; /* fp32 on CUDA */
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)10485760 * 128 * 4);
  s.deployment.engine.v = ENGINE_TRTLLM; /* fp32 too */
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)10485760 * 128 * 4);
  s.deployment.engine.v = ENGINE_GENERIC; /* none */
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, 0);
}

/* At tp 2 one communicator adds 0.41 GiB; the sampler still sees the
 * whole vocabulary (the logits are gathered on every rank). An explicit
 * reserve is taken on top. */
static void test_vllm_tp2_reserve(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 2);
  FX_I(s.deployment.memory.reserve, 1 * GIB);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, 41 * GIB / 100);
  T_EQ_INT(L.reserve, 1 * GIB);
  T_EQ_INT(L.sampler, 8192 * 4096 * 2 + 1024 * 128256 * (int64_t)38);
  T_EQ_INT(L.forward_peak, 8192 * llama8b_width(2) * 2);
  T_EQ_INT(L.kv_pool, L.usable - L.weights - L.activations - L.workspace - L.comm - L.reserve);
}

/* vLLM's defaults on an A100 (named so) are 2048 tokens and 256
 * sequences; the spec's serving limits override them. */
static void test_vllm_defaults(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  s.hardware.name.v = "NVIDIA A100 80GB SXM";
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.tokens_per_forward, 2048);
  T_EQ_INT(L.profile_seqs, 256);
  FX_I(s.serving.max_num_batched_tokens, 4096);
  FX_I(s.serving.max_num_seqs, 64);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.tokens_per_forward, 4096);
  T_EQ_INT(L.profile_seqs, 64);
  T_EQ_INT(L.sampler, 4096 * 4096 * 2 + 64 * 128256 * (int64_t)38);
}

/* SGLang: mem_fraction_static of the memory free before the weights
 * (CUDA's total less its communicators) holds weights and KV; the
 * activations live above it and are not taken from the pool. */
/* SGLang's distributed start-up at 2 ranks: 1.34 GiB (docs/memory.md). */
#define SGL_INIT_2 ((134 * GIB) / 100)

static void test_sglang(void) {
  Spec s;
  fx_h100(&s, ENGINE_SGLANG, 2);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, SGL_INIT_2);
  T_EQ_INT(L.reserve, 0);
  T_EQ_INT(L.usable, (int64_t)((double)(81080 * MIB - SGL_INIT_2) * 0.90));
  T_EQ_INT(L.kv_pool, L.usable - L.weights);
  /* With no room above the fraction, what the activations need there
   * comes out of the pool. */
  FX_I(s.deployment.memory.utilization, 1.0);
  FX_I(s.hardware.gpu.memory, 81080 * MIB);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.usable, 81080 * MIB - SGL_INIT_2);
  T_EQ_INT(L.kv_pool, L.usable - L.weights - L.activations - L.workspace);
}

/* SGLang's distributed start-up by its ranks (--tp-size x pp): none at
 * one rank (the communicators' rule: none), 1.34 GiB at 2, 1.43 at 4,
 * 2.01 at 8 and beyond; it comes off the memory the fraction multiplies. */
static void test_sglang_startup(void) {
  static const struct { int64_t tp, want_centi_gib; } cases[] = {{1, 0}, {2, 134}, {4, 143}, {8, 201}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    Spec s;
    fx_h100(&s, ENGINE_SGLANG, cases[i].tp);
    MemLedger L;
    T_CHECK(ledger(&s, &L));
    T_EQ_INT(L.comm, (cases[i].want_centi_gib * GIB) / 100);
    T_EQ_INT(L.usable, (int64_t)((double)(81080 * MIB - L.comm) * 0.90));
  }
  Spec s;
  fx_h100(&s, ENGINE_SGLANG, 4);
  FX_I(pool.pp, 4); /* 16 ranks: the 8-rank figure */
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, (201 * GIB) / 100);
}

/* SGLang's default mem_fraction_static (server_args.py 0.5.6) when the
 * spec leaves utilization unset: on an H100 (81,559 MiB, 60 to 90 GiB:
 * chunked prefill 8192, CUDA-graph batch 256 below tp 4) at tp 2 the
 * reserve is 512 + 8192 * 1.5 + 256 * 2 + 2/8 * 1024 = 13,568 MiB;
 * speculative decoding adds 2,048. A set utilization is taken as is. */
static void test_sglang_default_fraction(void) {
  Spec s;
  fx_h100(&s, ENGINE_SGLANG, 2);
  s.deployment.memory.utilization.set = false;
  double want = nearbyint((81559.0 - 13568.0) / 81559.0 * 1000) / 1000;
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 1, 1), want, 1e-12);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_NEAR(L.utilization, 0.834, 1e-12);
  T_EQ_INT(L.usable, (int64_t)((double)(81080 * MIB - SGL_INIT_2) * 0.834));
  FX_I(s.workload.draft_tokens, 3);
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 1, 1), nearbyint((81559.0 - 15616.0) / 81559.0 * 1000) / 1000, 1e-12);
  FX_I(s.deployment.memory.utilization, 0.9);
  T_CHECK(ledger(&s, &L));
  T_NEAR(L.utilization, 0.9, 1e-12);
}

/* What SGLang's default fraction reserves for its CUDA graphs, which
 * W0207 also asks of a spec-set utilization: 2 MiB per unit of
 * cuda_graph_max_bs (an H100 below tp 4: 256; at tp 4: 512; the spec's
 * when set), plus 3 MiB per unit and dp rank with attention dp (an MoE
 * pool with dp > 1), 4.5 above a batch of 300. A dense model's dp is
 * replicas, not attention dp. */
static void test_sglang_graph_reserve(void) {
  Spec s;
  fx_h100(&s, ENGINE_SGLANG, 2);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 2, 1), 256 * 2, 1e-12);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 4, 1), 512 * 2, 1e-12);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 2, 4), 256 * 2, 1e-12);
  s.model.moe.present = true;
  FX_I(s.model.moe.experts, 8);
  FX_I(s.model.moe.top_k, 2);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 1, 2), 256 * 2 + 256 * 2 * 3, 1e-12);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 2, 2), 512 * 2 + 512 * 2 * 4.5, 1e-12);
  FX_I(s.serving.cuda_graph_max_bs, 48);
  T_NEAR(mem_engine_sglang_graph_mib(&s, 2, 2), 48 * 2 + 48 * 2 * 3, 1e-12);
}

/* serving.sampler: flashinfer: FlashInfer's top-k/top-p path holds 14 B
 * per (sequence, vocabulary entry) where the PyTorch-native one holds 38
 * (unset counts the latter); the pool grows by the difference. */
static void test_vllm_flashinfer_sampler(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  MemLedger L, F;
  T_CHECK(ledger(&s, &L));
  s.serving.sampler.v = "torch";
  s.serving.sampler.set = true;
  T_CHECK(ledger(&s, &F));
  T_EQ_INT(F.sampler, L.sampler);
  s.serving.sampler.v = "flashinfer";
  T_CHECK(ledger(&s, &F));
  T_EQ_INT(F.sampler, 8192 * 4096 * 2 + 1024 * 128256 * (int64_t)14);
  T_EQ_INT(F.activations, F.sampler);
  T_EQ_INT(F.kv_pool - L.kv_pool, 1024 * 128256 * (int64_t)(38 - 14));
}

/* vLLM 0.19 (docs/memory.md, "vLLM 0.19"), also a spec naming no version:
 * 14 B per (sequence x vocabulary entry) on either sampler path, 0.25 GiB
 * outside PyTorch, 1.82 GiB more with a tp group, none for a pp group,
 * 0.11's 0.41 GiB for any other communicator. */
static void test_vllm019(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  s.deployment.engine_version = (SStr){0};
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.sampler, 8192 * 4096 * 2 + 1024 * 128256 * (int64_t)14);
  T_EQ_INT(L.workspace, 25 * GIB / 100);
  T_EQ_INT(L.comm, 0);
  s.serving.sampler = (SStr){.v = "flashinfer", .set = true};
  MemLedger F;
  T_CHECK(ledger(&s, &F));
  T_EQ_INT(F.sampler, L.sampler);
  s.serving.sampler = (SStr){0};
  s.deployment.engine_version = (SStr){.v = "0.19.0", .set = true};
  FX_I(pool.tp, 2);
  FX_I(pool.etp, 2);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, 182 * GIB / 100);
  FX_I(pool.tp, 1);
  FX_I(pool.etp, 1);
  FX_I(pool.pp, 2);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, 0);
  FX_I(pool.tp, 2);
  FX_I(pool.etp, 2);
  FX_I(pool.cp, 2);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.comm, 182 * GIB / 100 + 41 * GIB / 100);
  /* its default capture sizes: 1, 2, 4, every 8 below 256, every 16 from
   * 256 up to min(2 x max_num_seqs, 512) or cuda_graph_max_bs */
  T_EQ_INT(engine_vllm_graph_sizes(&s), 51);
  static const int64_t max[] = {1, 3, 8, 200, 255, 256, 272};
  static const int64_t want[] = {1, 2, 4, 28, 34, 35, 36};
  for (size_t i = 0; i < RP_ARRAY_LEN(max); i++) {
    FX_I(s.serving.cuda_graph_max_bs, max[i]);
    T_EQ_INT(engine_vllm_graph_sizes(&s), want[i]);
  }
  /* 0.11's: 1, 2 and 4, then every 8 up to the largest (67 at 512) */
  s.deployment.engine_version = (SStr){.v = "0.11", .set = true};
  static const int64_t want011[] = {1, 2, 4, 28, 34, 35, 37};
  for (size_t i = 0; i < RP_ARRAY_LEN(max); i++) {
    FX_I(s.serving.cuda_graph_max_bs, max[i]);
    T_EQ_INT(engine_vllm_graph_sizes(&s), want011[i]);
  }
  FX_I(s.serving.cuda_graph_max_bs, 512);
  T_EQ_INT(engine_vllm_graph_sizes(&s), 67);
}

/* The default fraction by SGLang release (server_args.py of each, read
 * at its tag; docs/memory.md): 0.4.7's table by tp x pp up to 80 GiB and
 * its H200 branch, 0.4.10.post2's reserve in GiB, 0.5.4's CUDA-graph
 * batch of 16 (0.5.6: 24) on a GPU under 35 GiB at tp below 4. */
static void set_version(Spec *s, const char *v) {
  s->deployment.engine_version.v = v;
  s->deployment.engine_version.set = true;
}

/* vLLM 0.19 keeps the fused-MoE kernels' workspace for the process
 * (vllm/v1/worker/workspace.py), so the profile peak holds it beside the
 * sampler warm-up. Mixtral-8x7B at tp 2 (etp 2): per 8192-token forward,
 * k = 2 experts a token, I = 14336 / 2, K = 4096: the Triton experts'
 * max(M k max(I, K), M K) + M k max(2I, K) bf16 elements (fused_moe.py,
 * TritonExperts.workspace_shapes); the forward width leaves out the
 * routed gate/up outputs the workspace holds. 0.11 allocated them per
 * call, and attention dp and fp4 experts are not modelled: no workspace. */
static void test_vllm019_moe_workspace(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 2);
  fx_mixtral(&s.model);
  FX_I(s.model.max_context, 8192);
  s.deployment.engine_version = (SStr){0};
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  int64_t m = 8192, ws13 = m * 2 * 7168, ws2 = m * 2 * 14336;
  T_EQ_INT(L.moe_workspace, (ws13 + ws2) * 2);
  int64_t width = 4 * 4096 + (16 + 2 * 4) * 128; /* no dense layer, no shared expert */
  T_EQ_INT(L.forward_peak, m * width * 2 + L.moe_workspace);
  T_EQ_INT(L.activations, L.moe_workspace + (L.sampler > m * width * 2 ? L.sampler : m * width * 2));
  set_version(&s, "0.11");
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.moe_workspace, 0);
  s.deployment.engine_version = (SStr){0};
  s.model.dtype.weights.v = DT_MXFP4;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.moe_workspace, 0);
  s.model.dtype.weights.v = DT_BF16;
  FX_I(pool.dp, 2);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.moe_workspace, 0);
  FX_I(pool.dp, 1);
}

/* vLLM's MXFP4 experts on Hopper (docs/memory.md, "MXFP4 experts on
 * Hopper"), gpt-oss-20b's experts (32 of width 2880, hidden 2880, 24
 * layers): from a release pinned to torch 2.8.1 or later, the Hopper
 * scale layout's copy of the block scales, rows padded to 256 and
 * columns to 2, beside the loaded ones: 5888 x 90 + 3072 x 90 bytes an
 * expert and layer at tp 1 (0.577 GiB). At tp 2 the width 1440 pads to
 * 1472 (a multiple of 64), so weights and scales grow. 0.11.0 (torch
 * 2.8.0) and a non-Hopper GPU: none. */
static void test_vllm_mxfp4_hopper(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  fx_base(&s.model, "gpt-oss-20b", 24, 2880, 201088, 64, 8, 64, 0);
  fx_moe(&s.model, 32, 4, 0, 2880, 0, true);
  s.model.dtype.weights.v = DT_MXFP4;
  FX_I(s.model.max_context, 8192);
  s.hardware.preset = (SStr){.v = "h100-sxm", .set = true};
  s.deployment.engine_version = (SStr){0};
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_layout, (int64_t)(5888 * 90 + 3072 * 90) * 32 * 24);
  set_version(&s, "0.11");
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_layout, 0);
  set_version(&s, "0.11.1");
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_layout, (int64_t)(5888 * 90 + 3072 * 90) * 32 * 24);
  s.deployment.engine_version = (SStr){0};
  FX_I(pool.tp, 2);
  FX_I(pool.etp, 2);
  T_CHECK(ledger(&s, &L));
  int64_t scales = (int64_t)(3072 * 90 + 3072 * 46) * 32 * 24; /* 2 x 1472 -> 3072; 1472 / 32 = 46 */
  int64_t grow = model_matrix_bytes(DT_MXFP4, 1472, 2880, 2) + model_matrix_bytes(DT_MXFP4, 2880, 1472, 1) -
                 model_matrix_bytes(DT_MXFP4, 1440, 2880, 2) - model_matrix_bytes(DT_MXFP4, 2880, 1440, 1);
  T_EQ_INT(L.w_layout, scales + grow * 32 * 24);
  FX_I(pool.tp, 1);
  FX_I(pool.etp, 1);
  s.hardware.name.v = "NVIDIA B200";
  s.hardware.preset.v = "b200";
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_layout, 0);
}

static void test_sglang_fraction_by_version(void) {
  Spec s;
  fx_h100(&s, ENGINE_SGLANG, 1);
  s.deployment.memory.utilization.set = false;
  set_version(&s, "0.4.7");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), 0.88, 1e-12);
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 1, 1), 0.87, 1e-12);
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 2, 1), 0.85, 1e-12);
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), 0.81, 1e-12);
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 2, 1), 0.79, 1e-12);
  set_version(&s, "0.4.10");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), 0.88, 1e-12);
  set_version(&s, "0.4.10.post2");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), nearbyint((81559.0 - 10240.0) / 81559.0 * 1000) / 1000, 1e-12);
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), 0.831, 1e-12);
  set_version(&s, "0.5.5");
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 1, 1), nearbyint((81559.0 - 13568.0) / 81559.0 * 1000) / 1000, 1e-12);
  FX_I(s.workload.draft_tokens, 3);
  set_version(&s, "0.4.7");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), 0.88 * 0.95, 1e-12);
  set_version(&s, "0.4.10.post2");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), nearbyint((81559.0 - 12288.0) / 81559.0 * 1000) / 1000, 1e-12);
  FX_I(s.workload.draft_tokens, 0);
  /* an H200 (143,771 MiB) under 0.4.7: the lesser of the two bounds */
  FX_I(s.hardware.gpu.memory, 143771 * MIB);
  set_version(&s, "0.4.7");
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), (143771.0 - 18432.0) / 143771.0, 1e-12);
  /* above 180,000 MiB 0.79 on CUDA; on an AMD GPU (SGLang's ROCm build)
   * the 96 GiB branch: an MI300X (196,592 MiB) gets the lesser bound */
  FX_I(s.hardware.gpu.memory, 196592 * MIB);
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), 0.79, 1e-12);
  s.hardware.name.v = "AMD Instinct MI300X";
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), (196592.0 - 18432.0) / 196592.0, 1e-12);
  s.hardware.name.v = "NVIDIA H100 SXM";
  /* 0.4.10.post2 from 160 GiB: a flat 32 GiB */
  set_version(&s, "0.4.10.post2");
  T_NEAR(mem_engine_sglang_fraction(&s, 8, 1, 1), nearbyint((196592.0 - 32768.0) / 196592.0 * 1000) / 1000, 1e-12);
  /* a commit-named version takes 0.5.6's rule, as no version does */
  FX_I(s.hardware.gpu.memory, 81559 * MIB);
  set_version(&s, "001067f");
  T_NEAR(mem_engine_sglang_fraction(&s, 2, 1, 1), nearbyint((81559.0 - 13568.0) / 81559.0 * 1000) / 1000, 1e-12);
  /* a 24 GiB GPU (23,034 MiB) at tp 1: 512 + 2048 * 1.5 + bs * 2 + 128 */
  FX_I(s.hardware.gpu.memory, 23034 * MIB);
  set_version(&s, "0.5.4");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), nearbyint((23034.0 - 3744.0) / 23034.0 * 1000) / 1000, 1e-12);
  set_version(&s, "0.5.6");
  T_NEAR(mem_engine_sglang_fraction(&s, 1, 1, 1), nearbyint((23034.0 - 3760.0) / 23034.0 * 1000) / 1000, 1e-12);
}

/* engine_version_cmp, which picks the catalog entry and the fraction
 * rule: a missing segment is 0, a pre-release sorts before its release,
 * post releases by their number. */
static void test_version_cmp(void) {
  T_EQ_INT(engine_version_cmp("0.11", "0.11.0"), 0);
  T_EQ_INT(engine_version_cmp("0.4", "0.4.7"), -1);
  T_EQ_INT(engine_version_cmp("0.4.7", "0.4"), 1);
  T_EQ_INT(engine_version_cmp("0.4.10", "0.4.10.post2"), -1);
  T_EQ_INT(engine_version_cmp("0.4.10.post2", "0.4.10.post10"), -1);
  T_EQ_INT(engine_version_cmp("0.5.4rc1", "0.5.4"), -1);
  T_EQ_INT(engine_version_cmp("0.5.4rc2", "0.5.4rc10"), -1);
  T_EQ_INT(engine_version_cmp("0.5.5.post1", "0.5.6"), -1);
  T_EQ_INT(engine_version_cmp("0.10.1.1", "0.9.2"), 1);
  T_EQ_INT(engine_version_cmp("1.0.0", "1.0.0"), 0);
  T_EQ_INT(engine_version_cmp("99999999999999999999999.1", "99999999999999999999999.2"), -1);
}

/* generic keeps its ledger: nvidia-smi's total, the 2 GiB default
 * reserve, 32 MiB of workspace, 64 MiB per communicator, fp32 logits. */
static void test_generic(void) {
  Spec s;
  fx_h100(&s, ENGINE_GENERIC, 2);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.engine_total, 81559 * MIB);
  T_EQ_INT(L.reserve, 2 * GIB);
  T_EQ_INT(L.workspace, 32 * MIB);
  T_EQ_INT(L.comm, 64 * MIB);
  T_EQ_INT(L.tokens_per_forward, 1000);
  T_EQ_INT(L.activations, 1000 * llama8b_width(2) * 2 + 1 * (128256 / 2) * 4);
  T_EQ_INT(L.kv_pool, L.usable - L.weights - L.activations - L.workspace - L.comm - L.reserve);
}

/* TensorRT-LLM: free_gpu_memory_fraction of what CUDA's total leaves after
 * the profiled peak (weights, a forward of max_num_tokens = 8192 tokens in
 * dummy prompts of 1,000 tokens, 9 of them with logits, workspace and
 * communicators); no reserve unless the spec sets one. */
static void test_trtllm(void) {
  Spec s;
  fx_h100(&s, ENGINE_TRTLLM, 2);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.engine_total, 81080 * MIB);
  T_EQ_INT(L.reserve, 0);
  T_EQ_INT(L.tokens_per_forward, 8192);
  T_EQ_INT(L.activations, 8192 * llama8b_width(2) * 2 + 9 * (128256 / 2) * 4);
  int64_t used = L.weights + L.activations + L.workspace + L.comm;
  T_EQ_INT(L.kv_pool, (int64_t)((double)(81080 * MIB - used) * 0.90));
  T_EQ_INT(L.usable, used + L.kv_pool);
  /* a reserve the spec sets is taken before the fraction */
  FX_I(s.deployment.memory.reserve, GIB);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.kv_pool, (int64_t)((double)(81080 * MIB - used - GIB) * 0.90));
  /* the workspace holds the decode graphs' data: 34 graphs by default, 10
   * MiB each at DeepSeek-R1's 61 layers, here Llama-3.1-8B's 32 */
  T_EQ_INT(engine_trtllm_graph_count(&s), 34);
  T_EQ_INT(L.workspace, 32 * MIB + 34 * 10 * MIB * 32 / 61);
  /* padded up to cuda_graph_max_bs: 1, 2, 4, every 8 to 128, the powers of
   * two from 256 below it and itself */
  static const int64_t max[] = {1, 3, 4, 8, 12, 128, 200, 256, 4096};
  static const int64_t want[] = {1, 3, 3, 4, 5, 19, 20, 20, 24};
  for (size_t i = 0; i < RP_ARRAY_LEN(max); i++) {
    FX_I(s.serving.cuda_graph_max_bs, max[i]);
    T_EQ_INT(engine_trtllm_graph_count(&s), want[i]);
  }
}

/* TensorRT-LLM's RoPE table under MLA: DeepSeek-V3's 163,840 positions
 * over qk_rope_head_dim 64, fp32, twice (duplicate_data): 80 MiB; vLLM
 * casts one copy to bf16: 20 MiB. */
static void test_trtllm_mla_rope(void) {
  Spec s;
  fx_h100(&s, ENGINE_TRTLLM, 8);
  memset(&s.model, 0, sizeof s.model);
  fx_dsv3(&s.model);
  FX_I(s.hardware.gpu.memory, 143771 * MIB);
  s.hardware.gpu.cuda_memory.set = false;
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)163840 * 64 * 4 * 2);
  s.deployment.engine.v = ENGINE_VLLM;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)163840 * 64 * 2);
}

/* model.rope sizes the tables: a Gemma-3-style model (head_dim 128, 131,072
 * positions, linear scaling x 8 and a local base for its sliding layers)
 * under vLLM holds 131,072 x 8 + 131,072 positions in bf16 (288 MiB);
 * SGLang the same in fp32; TensorRT-LLM 2 x 131,072 in fp32 (its table
 * is max_position_embeddings long whatever the scaling). yarn scales
 * original_max_position_embeddings; llama3 keeps the positions; a partial
 * rotary dimension shrinks every table; gpt-oss's class gets vLLM's fp32. */
static void test_rope_tables(void) {
  Spec s;
  fx_h100(&s, ENGINE_VLLM, 1);
  FX_I(s.model.max_position_embeddings, 131072);
  FX_I(s.model.rope.scaling, ROPE_LINEAR);
  FX_I(s.model.rope.factor, 8.0);
  FX_I(s.model.rope.local_base, true);
  FX_I(s.model.attention.sliding_window, 1024);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)(131072 * 8 + 131072) * 128 * 2);
  s.deployment.engine.v = ENGINE_SGLANG;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)(131072 * 8 + 131072) * 128 * 4);
  s.deployment.engine.v = ENGINE_TRTLLM;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)(131072 * 2) * 128 * 4);
  s.deployment.engine.v = ENGINE_VLLM;
  FX_I(s.model.rope.local_base, false);
  FX_I(s.model.rope.scaling, ROPE_YARN); /* Qwen3's documented yarn: 32,768 x 4 */
  FX_I(s.model.rope.factor, 4.0);
  FX_I(s.model.rope.original_max_position_embeddings, 32768);
  FX_I(s.model.max_position_embeddings, 40960);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)131072 * 128 * 2);
  FX_I(s.model.rope.scaling, ROPE_DYNAMIC);
  FX_I(s.model.rope.factor, 2.5); /* the ceiling of 40,960 x 2.5 */
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)102400 * 128 * 2);
  FX_I(s.model.rope.scaling, ROPE_LLAMA3);
  FX_I(s.model.rope.rotary_dim, 64);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)40960 * 64 * 2);
  /* gpt-oss's vLLM code builds its table in fp32 */
  s.model.architecture = (SStr){.v = "GptOssForCausalLM", .set = true};
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.w_rope, (int64_t)40960 * 64 * 4);
}

/* Whose the serving limits are (engine_limits_per_dp): each dp rank's
 * under vLLM, TensorRT-LLM and SGLang's dense --dp-size replicas; the
 * instance's, shared out, under SGLang's attention dp (a MoE model) and
 * generic. A decode pool's forward and a prefill pool's chunk follow. */
static void test_limits_per_dp(void) {
  Spec s;
  static const struct { Engine e; bool moe, per_dp; } cases[] = {
      {ENGINE_VLLM, false, true},    {ENGINE_VLLM, true, true},       {ENGINE_TRTLLM, true, true},
      {ENGINE_SGLANG, false, true},  {ENGINE_SGLANG, true, false},    {ENGINE_GENERIC, false, false},
      {ENGINE_GENERIC, true, false}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fx_h100(&s, cases[i].e, 1);
    if (cases[i].moe) fx_qwen3_235b(&s.model);
    T_CHECK(engine_limits_per_dp(&s) == cases[i].per_dp);
  }
  /* SGLang, dense, dp 2: each --dp-size replica runs the whole value. */
  fx_h100(&s, ENGINE_SGLANG, 1);
  FX_I(pool.dp, 2);
  FX_I(pool.role, ROLE_DECODE);
  FX_I(s.serving.max_num_seqs, 64);
  MemLedger L;
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.tokens_per_forward, 64);
  /* SGLang, MoE, attention dp 8: the share of the sequences, and of the
   * chunked-prefill budget (--chunked-prefill-size over --dp-size). */
  fx_h100(&s, ENGINE_SGLANG, 1);
  fx_qwen3_235b(&s.model);
  FX_I(s.model.max_context, 8192);
  FX_I(s.hardware.gpu.memory, 200 * GIB);
  FX_I(s.hardware.gpu.cuda_memory, 200 * GIB);
  FX_I(pool.dp, 8);
  FX_I(pool.ep, 8);
  FX_I(pool.etp, 1);
  FX_I(pool.role, ROLE_DECODE);
  FX_I(s.serving.max_num_seqs, 64);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.tokens_per_forward, 8);
  FX_I(pool.role, ROLE_PREFILL);
  FX_I(s.serving.max_num_batched_tokens, 4096);
  T_CHECK(ledger(&s, &L));
  T_EQ_INT(L.tokens_per_forward, 512);
}

int main(void) {
  T_RUN(test_vllm_h100_tp1);
  T_RUN(test_vllm_tp2_reserve);
  T_RUN(test_vllm_defaults);
  T_RUN(test_sglang);
  T_RUN(test_sglang_startup);
  T_RUN(test_sglang_default_fraction);
  T_RUN(test_sglang_graph_reserve);
  T_RUN(test_sglang_fraction_by_version);
  T_RUN(test_vllm_flashinfer_sampler);
  T_RUN(test_vllm019);
  T_RUN(test_vllm019_moe_workspace);
  T_RUN(test_vllm_mxfp4_hopper);
  T_RUN(test_version_cmp);
  T_RUN(test_generic);
  T_RUN(test_trtllm);
  T_RUN(test_trtllm_mla_rope);
  T_RUN(test_rope_tables);
  T_RUN(test_limits_per_dp);
  T_DONE();
}
