/*
 * test_cost.c: the cost model (compiler/cost.c) against the published
 * formulas it implements (docs/cost-model.md) and hand-computed figures.
 *
 * Model shapes come from the public config.json of each checkpoint:
 * Llama-3.1-70B (hidden 8192, 80 layers, 64 heads, 8 KV heads, head_dim
 * 128, intermediate 28672, vocab 128256) and DeepSeek-V3 (hidden 7168, 61
 * layers, 128 heads, MLA q_lora 1536 / kv_lora 512 / nope 128 / rope 64 /
 * v 128, 256 routed experts of 2048, top-8, 1 shared, 3 dense layers of
 * 18432, vocab 129280). H200 SXM figures from NVIDIA's H200 datasheet:
 * 141 GB HBM3e at 4.8 TB/s, 989 TFLOP/s dense BF16, 1979 TFLOP/s dense FP8,
 * NVLink 900 GB/s (450 GB/s per direction), 8 GPUs per NVLink domain; the
 * scale-out NIC is ConnectX-7 at 400 Gb/s (50 GB/s).
 */
#include <unistd.h>

#include "cost.h"
#include "engines.h"
#include "model.h"
#include "t.h"

#include "cost_fixtures.h"

static CostModel model_of(Spec *s) {
  CostConsts k;
  cost_consts_default(&k);
  CostModel m;
  Diags d;
  diags_init(&d);
  bool ok = cost_model_init(&d, s, &k, &m);
  T_CHECK(ok);
  T_EQ_INT(d.nerrors, 0);
  diags_free(&d);
  return m;
}

/* Issue 6, acceptance 5: P = 8000 and D = 2000 tok/s/GPU. */
static void test_xpyd_ratio(void) {
  int64_t x = 0, y = 0;
  T_CHECK(cost_xpyd_ratio(4000, 500, 8000, 2000, 4096, &x, &y));
  T_EQ_INT(x, 2);
  T_EQ_INT(y, 1);
  T_CHECK(cost_xpyd_ratio(500, 2000, 8000, 2000, 4096, &x, &y));
  T_EQ_INT(x, 1);
  T_EQ_INT(y, 16);
  /* Equal demand: 1:1. A ratio past the bound clamps to the extreme. */
  T_CHECK(cost_xpyd_ratio(1000, 250, 8000, 2000, 64, &x, &y));
  T_EQ_INT(x, 1);
  T_EQ_INT(y, 1);
  T_CHECK(cost_xpyd_ratio(1, 100000, 8000, 2000, 16, &x, &y));
  T_EQ_INT(x, 1);
  T_EQ_INT(y, 16);
  T_CHECK(!cost_xpyd_ratio(0, 1, 1, 1, 16, &x, &y));
}

/* TP* = sqrt(W_MLA * P / KV_total) minimises W/t + KV*t/P. The figures are
 * DeepSeek-V3's, from its config.json (deepseek-ai/DeepSeek-V3 on the
 * Hugging Face hub: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank
 * 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, 61
 * layers): W_MLA is the MLA projections' fp8 bytes (one byte per weight,
 * 11.41e9 over 61 layers) and a token's KV is (512 + 64) bf16 values per
 * layer. P = 64 GPUs decode a batch of 64 at the context of 4,000 input and
 * 500 output tokens. */
static void test_attn_tp_opt(void) {
  const double hid = 7168, nh = 128, qr = 1536, kvr = 512, dn = 128, dr = 64, dv = 128, L = 61;
  double w_layer = hid * qr + qr * nh * (dn + dr) + hid * (kvr + dr) + kvr * nh * (dn + dv) + nh * dv * hid;
  double w = L * w_layer;
  T_NEAR(w, 11413422080.0, 0.5);
  double kv_tok = L * (kvr + dr) * 2;
  T_NEAR(kv_tok, 70272.0, 0.0);
  /* The model code derives the same from the same config: the weights to
   * within their fp8 block scales, the KV exactly. */
  Spec v3 = dsv3(1);
  ModelBytes mb;
  T_CHECK(model_weight_bytes(&v3.model, &mb, NULL));
  T_CHECK((double)mb.attention_proj_mla >= w && (double)mb.attention_proj_mla <= w * 1.01);
  T_EQ_INT(model_kv_bytes_per_token(&v3.model), 70272);
  double P = 64, kv = 64 * 4500.0 * kv_tok;
  double t = cost_attn_tp_opt(w, P, kv);
  T_NEAR(t, sqrt(w * P / kv), 1e-12);
  double f = w / t + kv * t / P;
  T_CHECK(f <= w / (t * 1.1) + kv * t * 1.1 / P);
  T_CHECK(f <= w / (t / 1.1) + kv * (t / 1.1) / P);
  /* Doubling the KV traffic shrinks TP* by sqrt(2). */
  T_NEAR(cost_attn_tp_opt(w, P, 2 * kv), t / sqrt(2.0), 1e-12);
}

/* 61 layers, p = 4, tail beta = 0.5 -> 17, 17, 17, 10. */
static void test_pp_rebalance(void) {
  int64_t out[8];
  T_CHECK(cost_pp_rebalance(61, 4, 0.5, out));
  T_EQ_INT(out[0], 17);
  T_EQ_INT(out[1], 17);
  T_EQ_INT(out[2], 17);
  T_EQ_INT(out[3], 10);
  T_CHECK(cost_pp_rebalance(80, 4, 1.0, out));
  T_EQ_INT(out[0] + out[1] + out[2] + out[3], 80);
  T_EQ_INT(out[3], 20);
  T_CHECK(cost_pp_rebalance(7, 1, 0.5, out));
  T_EQ_INT(out[0], 7);
  T_CHECK(!cost_pp_rebalance(3, 4, 0.5, out));
  /* A tiny tail share still leaves the tail one layer. */
  T_CHECK(cost_pp_rebalance(10, 4, 0.01, out));
  T_CHECK(out[3] >= 1);
  T_EQ_INT(out[0] + out[1] + out[2] + out[3], 10);
}

/* Zigzag: every rank 2N+1 chunk-units; contiguous: worst rank 4N-1. */
static void test_zigzag(void) {
  for (int64_t n = 1; n <= 16; n++) {
    int64_t worst = 0, total = 0;
    for (int64_t r = 0; r < n; r++) {
      T_EQ_INT(cost_cp_chunk_units(n, r, true), 2 * n + 1);
      int64_t u = cost_cp_chunk_units(n, r, false);
      total += u;
      worst = u > worst ? u : worst;
    }
    T_EQ_INT(worst, 4 * n - 1);
    /* Both schemes do the same total work: 2N chunks, chunk j costs j+1. */
    T_EQ_INT(total, n * (2 * n + 1));
    T_NEAR(cost_cp_imbalance(n, true), 1.0, 1e-12);
    T_NEAR(cost_cp_imbalance(n, false), (double)(4 * n - 1) / (double)(2 * n + 1), 1e-12);
  }
}

static void test_collectives(void) {
  /* Ring all-reduce: 2(n-1)/n * bytes / bw + 2(n-1) latencies. */
  T_NEAR(cost_ring_allreduce(1e9, 8, 1e11, 1e-5), 2.0 * 7 / 8 * 1e-2 + 14e-5, 1e-12);
  T_NEAR(cost_ring_allreduce(1e9, 1, 1e11, 1e-5), 0.0, 0.0);
  T_NEAR(cost_all_to_all(8e8, 4, 1e11, 1e-5), 0.75 * 8e-3 + 1e-5, 1e-12);
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  T_CHECK(cost_link_class(&m, 8) == LINK_SCALE_UP);
  T_CHECK(cost_link_class(&m, 16) == LINK_SCALE_OUT);
  T_NEAR(cost_link_bw(&m, LINK_SCALE_UP), 450e9 * m.k.scale_up_efficiency, 1e-12);
  /* No latency in the spec: the table's default applies. */
  T_NEAR(cost_link_lat(&m, LINK_SCALE_OUT), m.k.scale_out_latency_s, 1e-12);
  /* The engines' custom all-reduce inside a scale-up domain: one stage at
   * 2 ranks and below 512 KiB at 4 or 256 KiB at 8, two stages up to
   * 8 MiB, the ring beyond, at other rank counts and over the NIC. */
  const double KiB = 1024.0, bw = 1e11, lat = 1e-5;
  T_NEAR(cost_allreduce(4e6, 2, LINK_SCALE_UP, bw, lat, 0.0), 4e6 / bw + lat, 1e-15);
  T_NEAR(cost_allreduce(500 * KiB, 4, LINK_SCALE_UP, bw, lat, 0.0), 3 * 500 * KiB / bw + lat, 1e-15);
  T_NEAR(cost_allreduce(200 * KiB, 8, LINK_SCALE_UP, bw, lat, 0.0), 7 * 200 * KiB / bw + lat, 1e-15);
  T_NEAR(cost_allreduce(300 * KiB, 8, LINK_SCALE_UP, bw, lat, 0.0), 2.0 * 7 / 8 * 300 * KiB / bw + 2 * lat, 1e-15);
  T_NEAR(cost_allreduce(600 * KiB, 4, LINK_SCALE_UP, bw, lat, 0.0), 2.0 * 3 / 4 * 600 * KiB / bw + 2 * lat, 1e-15);
  T_NEAR(cost_allreduce(8 * 1024 * KiB, 8, LINK_SCALE_UP, bw, lat, 0.0),
         cost_ring_allreduce(8 * 1024 * KiB, 8, bw, lat), 1e-15);
  T_NEAR(cost_allreduce(200 * KiB, 16, LINK_SCALE_UP, bw, lat, 0.0), cost_ring_allreduce(200 * KiB, 16, bw, lat), 1e-15);
  T_NEAR(cost_allreduce(200 * KiB, 3, LINK_SCALE_UP, bw, lat, 0.0), cost_ring_allreduce(200 * KiB, 3, bw, lat), 1e-15);
  T_NEAR(cost_allreduce(200 * KiB, 8, LINK_SCALE_OUT, bw, lat, 0.0), cost_ring_allreduce(200 * KiB, 8, bw, lat), 1e-15);
}

/* NCCL's NVLS all-reduce (docs/cost-model.md, "Collectives"): 25 us plus
 * 2(n-1)/n * bytes at the domain's NVLS bus bandwidth, taken where it beats
 * the ring, inside the scale-up domain only and above the custom
 * all-reduce's sizes; the bus bandwidth is scale_up.nvls_ratio times the
 * line rate, and the H100 ratio on an H800's 200 GB/s comes within 2% of
 * the 215 GB/s an H800 node measured (NCCL issue #1374). */
static void test_nvls(void) {
  const double MiB = 1024.0 * 1024.0, bw = 360e9, lat = 5e-6, nvls = 480e9;
  double b = 30.7e6;
  T_NEAR(cost_nvls_allreduce(b, 8, nvls), 25e-6 + 2.0 * 7 / 8 * b / nvls, 1e-15);
  T_NEAR(cost_allreduce(b, 8, LINK_SCALE_UP, bw, lat, nvls), cost_nvls_allreduce(b, 8, nvls), 1e-15);
  T_CHECK(cost_nvls_allreduce(b, 8, nvls) < cost_ring_allreduce(b, 8, bw, lat));
  T_NEAR(cost_allreduce(b, 8, LINK_SCALE_OUT, bw, lat, nvls), cost_ring_allreduce(b, 8, bw, lat), 1e-15);
  /* below 8 MiB at 8 ranks the custom all-reduce runs, NVLS or not */
  T_NEAR(cost_allreduce(4 * MiB, 8, LINK_SCALE_UP, bw, lat, nvls), cost_allreduce(4 * MiB, 8, LINK_SCALE_UP, bw, lat, 0.0),
         1e-15);
  /* a slow NVLS never beats the ring: NCCL takes the faster */
  T_NEAR(cost_allreduce(b, 8, LINK_SCALE_UP, bw, lat, 1e9), cost_ring_allreduce(b, 8, bw, lat), 1e-15);
  T_NEAR(cost_nvls_allreduce(b, 1, nvls), 0.0, 0.0);
  Spec s = llama70b(1);
  s.hardware.scale_up.nvls_ratio = (SNum)SN(480.0 / 450.0);
  CostModel m = model_of(&s);
  T_NEAR(cost_link_nvls(&m, LINK_SCALE_UP), 480e9, 1e-3);
  T_NEAR(cost_link_nvls(&m, LINK_SCALE_OUT), 0.0, 0.0);
  s.hardware.scale_up.bandwidth = (SNum)SN(200e9); /* an H800 written as an H100 */
  m = model_of(&s);
  T_CHECK(fabs(cost_link_nvls(&m, LINK_SCALE_UP) / 215e9 - 1.0) < 0.02);
}

/* The link class follows the placement: a tp group inside the scale-up
 * domain all-reduces over NVLink, one wider than the domain over the NIC;
 * and comm_overlap hides communication behind compute. */
static void test_link_class_in_use(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout t8 = {8, 1, 1, 1, 1, 1, 1}, t16 = {16, 1, 1, 1, 1, 1, 1};
  CostDecode d8, d16;
  T_CHECK(cost_decode_step(&m, &t8, 32, 4250, &d8));
  T_CHECK(cost_decode_step(&m, &t16, 32, 4250, &d16));
  /* 32 tokens x 8192 x 2 B = 512 KiB over 8 NVLink ranks: the two-stage
   * custom all-reduce (2(n-1)/n of the bytes, two latencies) */
  double bw8 = cost_link_bw(&m, LINK_SCALE_UP), lat8 = cost_link_lat(&m, LINK_SCALE_UP);
  double per8 = 2.0 * (2.0 * 7 / 8 * (32.0 * 8192 * 2) / bw8 + 2.0 * lat8);
  double per16 = 2.0 * cost_ring_allreduce(32.0 * 8192 * 2, 16, cost_link_bw(&m, LINK_SCALE_OUT),
                                           cost_link_lat(&m, LINK_SCALE_OUT));
  T_NEAR(d8.comm, 80 * per8, 1e-9);
  T_NEAR(d16.comm, 80 * per16, 1e-9);
  CostPrefill p0, p1;
  T_CHECK(cost_prefill(&m, &t8, &p0));
  m.k.comm_overlap = 1.0;
  T_CHECK(cost_prefill(&m, &t8, &p1));
  T_NEAR(p1.latency, p0.compute + p0.overhead, 1e-9);
  T_CHECK(p1.latency < p0.latency);
}

static void test_md1(void) {
  /* Wq = rho / (2 mu (1 - rho)). */
  T_NEAR(cost_md1_wait(0.5, 10.0), 0.05, 1e-12);
  T_NEAR(cost_md1_wait(0.9, 2.0), 0.9 / (2 * 2.0 * 0.1), 1e-12);
  T_CHECK(isinf(cost_md1_wait(1.0, 2.0)));
  T_NEAR(cost_md1_wait(0.0, 2.0), 0.0, 0.0);
  double rho = cost_md1_max_rho(3.0, 0.2);
  T_CHECK(rho > 0 && rho < 1);
  T_NEAR(cost_md1_wait(rho, 3.0), 0.2, 1e-9);
  T_NEAR(cost_md1_max_rho(3.0, 0.0), 0.0, 0.0);
}

/* Weight bytes per GPU under tp are the model's bytes over tp (norms are
 * replicated and tiny), and pp divides them further. */
static void test_weights_and_kv(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  ModelBytes mb;
  T_CHECK(model_weight_bytes(&s.model, &mb, NULL));
  CostLayout l8 = {8, 1, 1, 1, 1, 1, 1};
  T_NEAR(cost_weight_bytes_gpu(&m, &l8), (double)mb.total / 8, 0.01);
  CostLayout l4p2 = {4, 2, 1, 1, 1, 1, 1};
  T_NEAR(cost_weight_bytes_gpu(&m, &l4p2), (double)mb.total / 8, 0.03);
  /* Llama-3.1-70B: 327,680 KV bytes per token; 40,960 per GPU at tp8. */
  T_EQ_INT(m.kv_bytes_token, 327680);
  T_EQ_INT(cost_kv_bytes_token_gpu(&m, &l8), 40960);

  Spec v3 = dsv3(128);
  CostModel d = model_of(&v3);
  T_EQ_INT(d.kv_bytes_token, 70272);
  CostLayout a = {8, 1, 1, 1, 8, 1, 1}, b = {8, 1, 1, 1, 8, 1, 4};
  T_EQ_INT(cost_kv_bytes_token_gpu(&d, &a), 70272);
  T_EQ_INT(cost_kv_bytes_token_gpu(&d, &b), 70272 / 4);
  /* Stage layers: the last stage also runs the lm_head, so the heaviest
   * stage holds at least ceil(61/4) layers and the tail fewer. */
  double beta = 0;
  int64_t sl = cost_stage_layers(&d, 4, &beta);
  T_CHECK(beta > 0 && beta <= 1.0);
  T_CHECK(sl >= 16);
}

/* Prefill compute: 2 * params per token + causal attention pairs. */
static void test_prefill(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostPrefill p;
  T_CHECK(cost_prefill(&m, &l, &p));
  double S = 4000;
  double lin = 2.0 * S * (double)(m.attn_params + m.dense_ffn_params) * 80;
  double att = S * (S + 1) / 2 * 4.0 * 64 * 128 * 80;
  double lm = 2.0 * 128256.0 * 8192;
  T_NEAR(p.compute, (lin + att + lm) / 8 / (989e12 * m.k.mfu_prefill), 1e-9);
  T_CHECK(p.comm_tp > 0);
  T_NEAR(p.comm_ep, 0.0, 0.0);
  /* 7 kernels a layer and its two tp all-reduces */
  T_NEAR(p.latency, p.compute + p.comm_tp + 80 * (7 + 2) * m.k.kernel_stall_s, 1e-9);
  T_NEAR(p.mu, 1.0 / p.stage, 1e-12);
  T_NEAR(p.tok_s_gpu, S / p.stage / 8, 1e-12);
  /* pp 2: same work, one boundary send more latency, half the stage. */
  CostLayout l2 = {4, 2, 1, 1, 1, 1, 1};
  CostPrefill p2;
  T_CHECK(cost_prefill(&m, &l2, &p2));
  T_CHECK(p2.comm_pp > 0);
  T_CHECK(p2.stage < p2.latency);
  /* cp 2 (GQA): zigzag keeps the attention balanced. */
  CostLayout lc = {4, 1, 2, 1, 1, 1, 1};
  CostPrefill pc;
  T_CHECK(cost_prefill(&m, &lc, &pc));
  T_NEAR(pc.cp_imbalance, 1.0, 1e-12);
  T_CHECK(pc.comm_cp > 0);
  /* A prompt so long that the attention FLOPs overflow int64 is refused. */
  Spec big = s;
  big.workload.input_tokens.v = (int64_t)1 << 40;
  CostModel mb = model_of(&big);
  T_CHECK(!cost_prefill(&mb, &l, &p));

  /* MoE prefill under ep pays dispatch and combine. */
  Spec v3 = dsv3(128);
  CostModel d = model_of(&v3);
  CostLayout e = {8, 1, 1, 4, 32, 1, 1};
  CostPrefill pe;
  T_CHECK(cost_prefill(&d, &e, &pe));
  T_CHECK(pe.comm_ep > 0);
  T_NEAR(pe.mu, 4.0 / pe.stage, 1e-12);
}

/* Decode: roofline per layer; at batch 1 a dense model is memory bound and
 * the step is at least the weight bytes over the HBM bandwidth. */
static void test_decode(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecode d1, d64, dlong;
  T_CHECK(cost_decode_step(&m, &l, 1, 4250, &d1));
  T_CHECK(d1.memory_bound);
  double wbytes = (double)cost_weight_bytes_gpu(&m, &l);
  T_CHECK(d1.tpot >= wbytes / (4.8e12 * m.k.hbm_efficiency));
  T_NEAR(d1.memory, (double)d1.bytes_gpu / (4.8e12 * m.k.hbm_efficiency), 1e-6);
  T_CHECK(cost_decode_step(&m, &l, 64, 4250, &d64));
  T_CHECK(d64.tpot > d1.tpot);
  /* KV bytes read: 64 requests * 4250 tokens * 40,960 B more than batch 1's. */
  T_NEAR((double)(d64.bytes_gpu - d1.bytes_gpu), 63.0 * 4250 * 40960, 1e-6);
  T_CHECK(cost_decode_step(&m, &l, 64, 16000, &dlong));
  T_CHECK(dlong.tpot > d64.tpot);
  /* Monotone in B (the search's binary search relies on it). */
  double prev = 0;
  for (int64_t B = 1; B <= 512; B *= 2) {
    CostDecode dc;
    T_CHECK(cost_decode_step(&m, &l, B, 4250, &dc));
    T_CHECK(dc.tpot >= prev);
    prev = dc.tpot;
  }
  /* pp: the stages add up. */
  CostLayout lp = {8, 2, 1, 1, 1, 1, 1};
  CostDecode dp;
  T_CHECK(cost_decode_step(&m, &lp, 2, 4250, &dp));
  T_CHECK(dp.tpot > d1.tpot);

  /* MoE: a big batch touches (nearly) every local expert. */
  T_NEAR(cost_experts_touched(256, 8, 32, 1), 32.0 * 8 / 256, 1e-12);
  T_NEAR(cost_experts_touched(256, 8, 32, 10000), 32.0, 1e-9);
  Spec v3 = dsv3(128);
  CostModel dm = model_of(&v3);
  CostLayout e = {1, 1, 1, 32, 32, 1, 1};
  CostDecode de;
  T_CHECK(cost_decode_step(&dm, &e, 1024, 4250, &de));
  T_CHECK(de.comm > 0);
  /* KV transfer: 4000 tokens * 70,272 B over one 50 GB/s link (MLA: one
   * distinct latent copy per stage). */
  T_NEAR(cost_kv_transfer(&dm, &e, &e),
         4000.0 * 70272 / (50e9 * dm.k.scale_out_efficiency) + dm.k.scale_out_latency_s, 1e-9);
}


/* MoE dispatch and combine (docs/cost-model.md, "MoE dispatch and
 * combine"): one copy per distinct destination GPU over scale-up and per
 * distinct remote node over scale-out, never per expert; fp8 dispatch with
 * its scales; group-limited routing caps the nodes. */
static void test_ep_comm(void) {
  Spec v3 = dsv3(128);
  CostModel dm = model_of(&v3);
  T_NEAR(dm.dispatch_bytes, 7168.0 * 2, 0.0); /* unset: the activations' bf16 */
  v3.model.moe.dispatch_dtype.set = true;
  v3.model.moe.dispatch_dtype.v = DT_FP8;
  dm = model_of(&v3);
  T_NEAR(dm.dispatch_bytes, 7168.0 + 7168.0 / 128 * 4, 0.0); /* 1x128 fp32 scales */
  T_NEAR(dm.combine_bytes, 7168.0 * 2, 0.0);
  /* ep 16 over two 8-GPU nodes, 100 tokens from this rank */
  CostLayout e = {1, 1, 1, 16, 16, 1, 1};
  CostEpComm c;
  cost_ep_comm(&dm, &e, 100, &c);
  double hit16 = 16.0 * (1 - pow(15.0 / 16, 8)), hit2 = 2.0 * (1 - pow(0.5, 8));
  T_NEAR(c.gpus, 15.0 / 16 * hit16, 1e-12);
  T_NEAR(c.nodes, hit2, 1e-12);
  T_NEAR(c.remote_nodes, hit2 / 2, 1e-12);
  T_CHECK(c.remote_nodes <= 1.0 && c.nodes <= 2.0); /* at most min(top_k, nodes) */
  double per = 7392.0 + 14336.0;
  T_NEAR(c.bytes_up, 100 * c.gpus * per, 1e-6);
  T_NEAR(c.bytes_out, 100 * c.remote_nodes * per, 1e-6);
  T_NEAR(c.time, fmax(c.bytes_up / cost_link_bw(&dm, LINK_SCALE_UP),
                      c.bytes_out / cost_link_bw(&dm, LINK_SCALE_OUT)) +
                     2 * cost_link_lat(&dm, LINK_SCALE_OUT), 1e-12);
  /* ep 64 over 8 nodes: top-8 picks hit 5.25 nodes on average; routing
   * limited to 4 of 8 groups (one group per node) caps them at 4. */
  CostLayout e8 = {1, 1, 1, 64, 64, 1, 1};
  cost_ep_comm(&dm, &e8, 100, &c);
  T_NEAR(c.nodes, 8.0 * (1 - pow(7.0 / 8, 8)), 1e-12);
  v3.model.moe.groups = (SInt){.v = 8, .set = true};
  v3.model.moe.group_top_k = (SInt){.v = 4, .set = true};
  CostModel dg = model_of(&v3);
  cost_ep_comm(&dg, &e8, 100, &c);
  T_NEAR(c.nodes, 4.0, 1e-12);
  T_NEAR(c.remote_nodes, 4.0 * 7 / 8, 1e-12);
  /* within one scale-up domain: scale-up only */
  CostLayout e1 = {1, 1, 1, 8, 8, 1, 1};
  cost_ep_comm(&dm, &e1, 100, &c);
  T_NEAR(c.bytes_out, 0.0, 0.0);
  T_NEAR(c.time, c.bytes_up / cost_link_bw(&dm, LINK_SCALE_UP) +
                     2 * cost_link_lat(&dm, LINK_SCALE_UP), 1e-12);
}

/* A scale-up domain spanning nodes, as plans/catalog/hardware/gb200-nvl72.yaml
 * gives it (NVIDIA's GB200 NVL72 page): 18 trays of 4 GPUs in one NVLink
 * domain of 72 at 900 GB/s per direction, a 400 Gb/s (50 GB/s) NIC per
 * GPU. Groups spanning trays inside the rack use NVLink; only a group
 * wider than the rack (72) crosses the NIC. */
static void test_nvl72_domain(void) {
  Spec v3 = dsv3(36);
  v3.hardware.gpus_per_node = (SInt)SI(4);
  v3.hardware.scale_up.domain = (SInt)SI(72);
  v3.hardware.scale_up.bandwidth = (SNum)SN(900e9);
  v3.hardware.scale_out.bandwidth = (SNum)SN(50e9);
  CostModel m = model_of(&v3);
  T_CHECK(cost_link_class(&m, 8) == LINK_SCALE_UP); /* tp 8: two trays */
  T_CHECK(cost_link_class(&m, 72) == LINK_SCALE_UP);
  T_CHECK(cost_link_class(&m, 73) == LINK_SCALE_OUT);
  T_CHECK(cost_link_class(&m, 144) == LINK_SCALE_OUT);
  /* ep 64 over 16 trays of one rack: NVLink only */
  CostLayout in = {1, 1, 1, 64, 64, 1, 1}, across = {1, 1, 1, 128, 128, 1, 1};
  CostEpComm c;
  cost_ep_comm(&m, &in, 100, &c);
  T_NEAR(c.bytes_out, 0.0, 0.0);
  T_NEAR(c.time, c.bytes_up / cost_link_bw(&m, LINK_SCALE_UP) +
                     2 * cost_link_lat(&m, LINK_SCALE_UP), 1e-12);
  /* ep 128 over two racks: top-8 picks hit 2 (1 - 0.5^8) racks, half of
   * them remote, over the NIC */
  cost_ep_comm(&m, &across, 100, &c);
  double hit2 = 2.0 * (1 - pow(0.5, 8));
  T_NEAR(c.nodes, hit2, 1e-12);
  T_NEAR(c.remote_nodes, hit2 / 2, 1e-12);
  T_CHECK(c.bytes_out > 0.0);
}

/* The grouped GEMM pads every touched expert's rows to the GEMM's M
 * block (128): 1,024 tokens of top-8 over 256 experts give 32 tokens per
 * expert, 128 rows each; 65,536 tokens give 2,048, no padding. */
static void test_expert_rows(void) {
  Spec v3 = dsv3(128);
  CostModel dm = model_of(&v3);
  double x = cost_experts_touched(256, 8, 16, 1024);
  T_NEAR(cost_expert_rows(&dm, 16, 1024), x * 128, 1e-9);
  T_NEAR(cost_expert_rows(&dm, 16, 65536), 16.0 * 2048, 1e-6);
  dm.k.expert_imbalance = 1.5; /* the busiest rank: 3,072 rows per expert */
  T_NEAR(cost_expert_rows(&dm, 16, 65536), 16.0 * 3072, 1e-6);
}

/* Expert tp with the activations replicated over etp ranks: one
 * all-reduce of the layer's output per MoE layer, as a dense FFN over tp,
 * not top_k * etp gathered copies. And the two-part decode step is the
 * one-call step, to the bit. */
static void test_expert_tp(void) {
  Spec v3 = dsv3(128);
  CostModel dm = model_of(&v3);
  CostLayout e2 = {1, 1, 1, 16, 8, 2, 1};
  CostDecode d2;
  T_CHECK(cost_decode_step(&dm, &e2, 1024, 4250, &d2));
  /* 58 MoE layers, 16 dp ranks at tp 1: 64 tokens per rank */
  CostEpComm c;
  cost_ep_comm(&dm, &e2, 64, &c);
  double ar = cost_ring_allreduce(64.0 * 7168 * 2, 2, cost_link_bw(&dm, LINK_SCALE_OUT),
                                  cost_link_lat(&dm, LINK_SCALE_OUT));
  T_NEAR(d2.comm_ep, 58.0 * (c.time + ar), 1e-9);
  /* etp equal to tp: the tp all-reduce after the FFN is the expert one */
  CostLayout et = {2, 1, 1, 8, 8, 2, 1};
  CostDecode dt;
  T_CHECK(cost_decode_step(&dm, &et, 1024, 4250, &dt));
  cost_ep_comm(&dm, &et, 128 / 2, &c); /* 8 dp ranks: 128 requests, half per tp rank */
  T_NEAR(dt.comm_ep, 58.0 * c.time, 1e-9);

  CostDecodePrep prep;
  T_CHECK(cost_decode_prep(&dm, &e2, 4250, &prep));
  int64_t Bs[] = {1, 7, 64, 1000, 5000};
  for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++) {
    CostDecode a, b;
    T_CHECK(cost_decode_step(&dm, &e2, Bs[i], 4250, &a));
    T_CHECK(cost_decode_at(&dm, &prep, Bs[i], &b));
    T_CHECK(memcmp(&a, &b, sizeof a) == 0);
  }
}

/* Prefix cache: a hit rate h computes only the new tokens, each attending
 * to the whole prompt (docs/cost-model.md, "Prefix cache"). */
static void test_prefix_cache(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostPrefill p0, p1;
  T_CHECK(cost_prefill(&m, &l, &p0));
  m.prefix_hit = 0.75; /* 3,000 of 4,000 tokens cached */
  T_CHECK(cost_prefill(&m, &l, &p1));
  double S = 4000, C = 3000;
  double lin = 2.0 * (S - C) * (double)(m.attn_params + m.dense_ffn_params) * 80;
  double att = (S * (S + 1) / 2 - C * (C + 1) / 2) * 4.0 * 64 * 128 * 80;
  double lm = 2.0 * 128256.0 * 8192;
  T_NEAR(p1.compute, (lin + att + lm) / 8 / (989e12 * m.k.mfu_prefill), 1e-9);
  T_CHECK(p1.comm_tp < p0.comm_tp && p1.latency < p0.latency);
  /* every prompt token counts as served input */
  T_NEAR(p1.tok_s_gpu, S / p1.stage / 8, 1e-9);
}

/* Speculative decoding: 1 + d tokens per request per step over the same
 * weights and KV, a tokens emitted: TPOT = step / a. */
static void test_speculative(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecode d0, d1, d2;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &d0));
  T_NEAR(d0.step, d0.tpot, 0.0);
  m.draft = 1;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &d1));
  T_NEAR(d1.bytes_gpu, d0.bytes_gpu, 0.0); /* same weights and KV read */
  T_CHECK(d1.flops_gpu > d0.flops_gpu && d1.step > d0.step);
  m.accepted = 1.875;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &d2));
  T_NEAR(d2.step, d1.step, 0.0);
  T_NEAR(d2.tpot, d1.step / 1.875, 1e-15);
  T_CHECK(d2.tpot < d0.tpot); /* memory bound: the drafts pay off */
}

/* Chunked prefill in aggregated pools (docs/cost-model.md, "Aggregated
 * instances"): the step with a prompt chunk, and the instance's R_cap from
 * the steady-state chunk. */
static void test_mixed_step(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  T_EQ_INT(m.chunk_tokens, 0); /* generic, no token budget: alternating */
  T_EQ_INT(m.new_tokens, 4000);
  T_NEAR(m.chunk_ctx, 2000.0, 0.0);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecodePrep p;
  T_CHECK(cost_decode_prep(&m, &l, 4250, &p));
  CostDecode d0, dz, dc;
  T_CHECK(cost_decode_at(&m, &p, 64, &d0));
  T_CHECK(cost_step_at(&m, &p, 64, 0, &dz));
  T_NEAR(dz.step, d0.step, 0.0);
  /* 512 prompt tokens: 2 FLOPs per parameter each, and attention to 2,000
   * tokens of their prompt (4 H d per pair), over tp 8, in 80 layers; their
   * prompt's KV read once per layer (2,000 tokens of the rank's one KV
   * head: 128 values, K and V, bf16). */
  T_CHECK(cost_step_at(&m, &p, 64, 512, &dc));
  double lin = 2.0 * 512 * (double)(m.attn_params + m.dense_ffn_params) / 8;
  double att = 512.0 * 2000 * 4 * 64 * 128 / 8;
  T_NEAR((double)(dc.flops_gpu - d0.flops_gpu), 80 * (lin + att), 80 * 1.0);
  T_NEAR((double)(dc.bytes_gpu - d0.bytes_gpu), 80.0 * 2000 * 1 * 128 * 2 * 2, 1e-6);
  T_CHECK(dc.step > d0.step);

  /* R_cap of a full instance at B = 64 with an 8,192-token budget: each
   * step finishes 64 / 500 requests' output, so 64 * 4000 / 500 = 512
   * prompt tokens arrive per step (below the 8,128 the budget leaves):
   * R_cap = 64 / (500 * TPOT(64, 512)). */
  m.chunk_tokens = 8192;
  CostInstance in;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 64, 0.9, NULL, &in));
  T_EQ_INT(in.batch, 64);
  T_NEAR(in.rcap, 64.0 / (500.0 * dc.tpot), 1e-12 * in.rcap);
  /* one prompt: 4,000 tokens fit in one step's 8,128: one step carrying them */
  CostDecode carry;
  T_CHECK(cost_step_at(&m, &p, 64, 4000, &carry));
  T_NEAR(in.pre.latency, carry.step, 0.0);
  T_NEAR(in.pre.mu, in.rcap, 0.0);
  /* A budget of 1,024 at B = 128 (SLOs loose, so memory sets B): 896
   * tokens left per step, below the 1,024 arriving: prompt-bound, R_cap =
   * 896 / 4000 / TPOT(128, 896). */
  m.chunk_tokens = 1024;
  m.slo_tpot = 10.0;
  m.slo_ttft = 1000.0;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 128, 0.9, NULL, &in));
  T_EQ_INT(in.batch, 128);
  T_CHECK(cost_step_at(&m, &p, 128, 896, &dc));
  T_NEAR(in.rcap, 896.0 / (4000.0 * dc.tpot), 1e-12 * in.rcap);
  /* 4,000 prompt tokens at 896 per step: 5 steps */
  T_CHECK(cost_step_at(&m, &p, 128, 896, &carry));
  T_NEAR(in.pre.latency, 5.0 * carry.step, 1e-15);
  /* the batch leaves at least one token of the budget: at most 1,023 */
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 100000, 0.9, NULL, &in));
  T_CHECK(in.cap <= 1023);
}

/* Whole prompts beside the decodes (docs/cost-model.md, "Whole prompts"):
 * at the rate R a step of mean t carries, with probability q = 1 - e^-R t,
 * max(1, R t / q) prompts beside the 64 decodes, so t = (1 - q) t(64, 0) +
 * q t(64, those prompts' tokens); R_cap is the rate at which 64 decodes of
 * T_out such steps finish, R_cap T_out t(R_cap) = 64. The alternating form
 * is unchanged: prompts alone, decodes stretched by 1 / (1 - u). */
static void test_whole_prompts(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostInstance alt, whole;
  m.slo_tpot = 10.0;
  m.slo_ttft = 1000.0;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 64, 0.9, NULL, &alt));
  m.whole_prompts = true;
  m.whole_tokens = 8192;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 64, 1.0, NULL, &whole));
  CostDecodePrep p;
  CostDecode dc, one;
  T_CHECK(cost_decode_prep(&m, &l, cost_decode_ctx(&m), &p));
  T_CHECK(cost_decode_at(&m, &p, 64, &dc));
  double tp = 1.0 / alt.pre.mu, t = dc.tpot, ua = alt.rho * alt.rcap * tp;
  T_NEAR(alt.rcap, 1.0 / (tp + 500.0 * t / 64.0), 1e-12);
  T_NEAR(alt.tpot, t / (1.0 - ua), 1e-12);
  T_NEAR(whole.rcap * 500.0 * whole.tpot, 64.0, 1e-3);
  double lam = whole.rcap * whole.tpot, q = 1.0 - exp(-lam);
  int64_t c = (int64_t)ceil(fmax(1.0, lam / q) * (double)m.new_tokens);
  T_CHECK(cost_step_at(&m, &p, 64, c < 8192 - 64 ? c : 8192 - 64, &one));
  T_NEAR(whole.tpot, (1.0 - q) * t + q * one.tpot, 1e-3);
  T_CHECK(whole.tpot > t && whole.tpot < one.tpot);
  /* a batch above T_out stays finite */
  m.tout = 32;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 64, 0.9, NULL, &whole));
  T_CHECK(whole.tpot > 0 && isfinite(whole.tpot) && whole.rcap > 0);
}

/* Instance `l` of m at batch 256 and 1,000 output tokens: its R_cap is
 * out_tok requests' output per step over the step whose busiest dp rank
 * carries `slow` prompt tokens and every rank `mean` on average. */
static void check_busy_rcap(const CostModel *m, CostLayout l, int64_t slow, int64_t mean,
                            double out_tok) {
  CostDecodePrep p;
  CostInstance in;
  CostDecode step;
  T_CHECK(cost_decode_prep(m, &l, cost_decode_ctx(m), &p));
  T_CHECK(cost_instance_eval(m, ROLE_BOTH, &l, 256, 0.9, NULL, &in));
  T_CHECK(cost_step_ranks(m, &p, 256, slow, mean, &step));
  T_NEAR(in.rcap, out_tok / (1000.0 * step.tpot), 1e-12 * in.rcap);
}

/* A mixed step of a MoE instance whose dp ranks its experts join lasts as
 * long as its busiest rank (docs/cost-model.md, "The busiest dp rank"):
 * DeepSeek-V3 at 1,000 tokens in and out, 256 requests over 8 dp ranks
 * (32 each), an 8,192-token budget. Each step finishes 32 / 1000 of a
 * rank's requests, so 32 prompt tokens arrive per rank and step on
 * average; a rank runs a whole 1,000-token prompt in a share 0.032 of the
 * steps, and the busiest of 8 carries 1000 (1 - 0.968^8) on average. */
static void test_busiest_rank(void) {
  Spec v3 = dsv3(1);
  workload(&v3, 1000, 1000, 1000.0, 10.0);
  CostModel m = model_of(&v3);
  m.chunk_tokens = 8192;
  CostLayout l = {1, 1, 1, 8, 8, 1, 1};
  CostDecodePrep p;
  T_CHECK(cost_decode_prep(&m, &l, cost_decode_ctx(&m), &p));
  CostInstance in;
  T_CHECK(cost_instance_eval(&m, ROLE_BOTH, &l, 256, 0.9, NULL, &in));
  T_EQ_INT(in.batch, 256);
  int64_t slow = (int64_t)ceil(1000.0 * (1.0 - pow(1.0 - 32.0 / 1000.0, 8)));
  T_EQ_INT(slow, 230);
  CostDecode busy, even, carry;
  T_CHECK(cost_step_ranks(&m, &p, 256, slow, 32, &busy));
  T_NEAR(in.rcap, 256.0 / (1000.0 * busy.tpot), 1e-12 * in.rcap);
  T_CHECK(cost_step_at(&m, &p, 256, 32, &even));
  T_CHECK(busy.step > even.step); /* the busiest rank's attention and dispatch */
  T_CHECK(busy.flops_gpu > even.flops_gpu);
  /* one prompt on its rank, the other 7 at the mean: the experts see
   * (1000 + 7 * 32) / 8 = 153 tokens a rank */
  T_CHECK(cost_step_ranks(&m, &p, 256, 1000, 153, &carry));
  T_NEAR(in.pre.latency, carry.step, 0.0);
  /* ep 4 over the 8 dp ranks: two copies of the experts, each joining 4
   * ranks; the busiest of 4 carries 1000 (1 - 0.968^4) */
  T_EQ_INT((int64_t)ceil(1000.0 * (1.0 - pow(0.968, 4))), 122);
  check_busy_rcap(&m, (CostLayout){1, 1, 1, 8, 4, 1, 1}, 122, 32, 256.0);
  /* prompt-bound (a 48-token budget leaves 16 per rank, below the 32
   * arriving): every rank carries a full chunk, as before */
  m.chunk_tokens = 48;
  check_busy_rcap(&m, l, 16, 16, 16.0 * 8);
  /* each dp rank its own copy of the experts (tp 8, dp 2, ep 8): the
   * ranks share nothing, the step carries the mean */
  m.chunk_tokens = 8192;
  check_busy_rcap(&m, (CostLayout){8, 1, 1, 2, 8, 1, 1}, 128, 128, 256.0);
  /* one dp rank (tp 8): the step carries the mean */
  check_busy_rcap(&m, (CostLayout){8, 1, 1, 1, 8, 1, 1}, 256, 256, 256.0);
}

/* The batch search (cost__largest: interpolation, Illinois weights, a
 * bisection safeguard) returns what a scan from 1 up gives: the largest
 * decode batch within the memory bound whose TPOT meets the SLO, for
 * DeepSeek-V3, whose step time is concave in the batch where each added
 * sequence touches more experts, at several SLOs, layouts and guesses
 * (the last layout's answer, good or far off), within the memory bound
 * (700) and the instance's cap. */
static void test_batch_search(void) {
  Spec v3 = dsv3(1);
  workload(&v3, 1000, 1000, 1000.0, 10.0);
  CostModel m = model_of(&v3);
  static const CostLayout lay[] = {{8, 1, 1, 1, 8, 1, 1}, {1, 1, 1, 8, 8, 1, 1}, {4, 2, 1, 1, 4, 1, 1}};
  static const double slo[] = {0.02, 0.035, 0.05, 0.08};
  static const int64_t guesses[] = {0, 2, 37, 600};
  for (size_t i = 0; i < RP_ARRAY_LEN(lay); i++) {
    CostDecodePrep p;
    T_CHECK(cost_decode_prep(&m, &lay[i], cost_decode_ctx(&m), &p));
    if (p.graph_bs > 0) continue; /* the graph-batch rule may pick another batch */
    for (size_t j = 0; j < RP_ARRAY_LEN(slo); j++) {
      m.slo_tpot = slo[j];
      CostInstance first;
      T_CHECK(cost_instance_eval(&m, ROLE_DECODE, &lay[i], 700, 0.9, NULL, &first));
      int64_t hi = first.cap < 700 ? first.cap : 700, want = 0; /* the engine's cap per dp rank */
      for (int64_t B = 1; B <= hi; B++) {
        CostDecode dc;
        if (!cost_decode_at(&m, &p, B, &dc) || !(dc.tpot <= m.slo_tpot)) break;
        want = B;
      }
      for (size_t g = 0; g < RP_ARRAY_LEN(guesses); g++) {
        CostInstance in;
        int64_t guess = guesses[g];
        T_CHECK(cost_instance_eval(&m, ROLE_DECODE, &lay[i], 700, 0.9, &guess, &in));
        T_EQ_INT(in.slo_ok ? in.batch : 0, want);
      }
    }
  }
}

/* serving.max_num_seqs bounds the batch: per instance, or per dp rank
 * under vLLM and TensorRT-LLM. */
static void test_run_seqs_cap(void) {
  Spec s = llama70b(4);
  s.serving.max_num_seqs = (SInt)SI(16);
  CostModel m = model_of(&s);
  m.slo_tpot = 10.0;
  m.slo_ttft = 1000.0;
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostInstance in;
  T_CHECK(cost_instance_eval(&m, ROLE_DECODE, &l, 1000, 0.9, NULL, &in));
  T_EQ_INT(in.cap, 16);
  T_EQ_INT(in.batch, 16);
  CostLayout l2 = {4, 1, 1, 2, 1, 1, 1};
  T_CHECK(cost_instance_eval(&m, ROLE_DECODE, &l2, 1000, 0.9, NULL, &in));
  T_EQ_INT(in.cap, 16);
  m.limits_per_dp = true;
  T_CHECK(cost_instance_eval(&m, ROLE_DECODE, &l2, 1000, 0.9, NULL, &in));
  T_EQ_INT(in.cap, 32);
}

/* An engine that overlaps its per-step CPU work with the GPU's step
 * exposes only what the step does not cover. */
static void test_overlap(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  m.k.kernel_stall_s = 0.0; /* the CPU part alone; the stalls: test_layer_stall */
  m.k.seq_overhead_s = 0.0;  /* the fixed part alone; per sequence: test_seq_overhead */
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecode a, b, c;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &a));
  T_NEAR(a.overhead, m.k.step_overhead_s, 0.0);
  m.overlap = true;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &b));
  T_NEAR(b.overhead, 0.0, 0.0);
  T_NEAR(b.step, a.step - m.k.step_overhead_s, 1e-15);
  /* CPU work longer than the GPU's step: the step is the CPU's */
  m.k.step_overhead_s = 1.0;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &c));
  T_NEAR(c.step, 1.0, 1e-12);
  T_NEAR(c.overhead, 1.0 - b.step, 1e-12);
  /* what the engine's overlap leaves exposed is a floor, per pipeline
   * stage (TensorRT-LLM's 0.58 ms); CPU work beyond the step still wins */
  m.overlap_exposed_s = 580e-6;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &c));
  T_NEAR(c.step, 1.0, 1e-12);
  m.k.step_overhead_s = a.overhead;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &c));
  T_NEAR(c.step, b.step + 580e-6, 1e-12);
  T_NEAR(c.overhead, 580e-6, 1e-12);
  m.overlap_exposed_s = 0.0;
  /* vLLM 0.19 runs an engine larger than a node under Ray, synchronously:
   * tp 8 on nodes of 4 exposes the CPU work again; on nodes of 8 it hides */
  m.k.step_overhead_s = a.overhead;
  m.sync_gpn = 4;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &c));
  T_NEAR(c.step, a.step, 1e-15);
  m.sync_gpn = 8;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &c));
  T_NEAR(c.step, b.step, 1e-15);
  s.deployment.engine.v = ENGINE_VLLM;
  s.deployment.engine_version = (SStr){.v = "0.19", .set = true};
  s.hardware.gpus_per_node = (SInt)SI(4);
  T_EQ_INT(model_of(&s).sync_gpn, 4);
  s.deployment.engine_version = (SStr){.v = "0.11", .set = true};
  T_EQ_INT(model_of(&s).sync_gpn, 0);
}

/* The CPU work of a step grows by seq_overhead_s per sequence of the
 * scheduler's batch: the requests of one dp rank's micro-batch, so pp
 * stages together pay it once per request (docs/cost-model.md, "Engine
 * overhead per step"). */
static void test_seq_overhead(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  m.k.kernel_stall_s = 0.0;
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  CostDecode a, b;
  T_CHECK(cost_decode_step(&m, &l, 16, 4250, &a));
  T_CHECK(cost_decode_step(&m, &l, 64, 4250, &b));
  T_NEAR(a.overhead, m.k.step_overhead_s + 16 * m.k.seq_overhead_s, 1e-15);
  T_NEAR(b.overhead, m.k.step_overhead_s + 64 * m.k.seq_overhead_s, 1e-15);
  CostLayout pp = {8, 2, 1, 1, 1, 1, 1};
  T_CHECK(cost_decode_step(&m, &pp, 64, 4250, &b));
  T_NEAR(b.overhead, 2 * m.k.step_overhead_s + 64 * m.k.seq_overhead_s, 1e-15);
  CostLayout dp = {2, 1, 1, 4, 1, 1, 1};
  T_CHECK(cost_decode_step(&m, &dp, 64, 4250, &b));
  T_NEAR(b.overhead, m.k.step_overhead_s + 16 * m.k.seq_overhead_s, 1e-15);
}

/* seq_overhead_s's default is the least-squares slope, through the
 * origin, of the CPU time per step that async scheduling hid in vLLM PR
 * #23914 (https://github.com/vllm-project/vllm/pull/23914, description,
 * "Test Result": A100, TP=2, tokens/s with sync and async scheduling at
 * each global batch): per step, gbs/tps_sync - gbs/tps_async. */
static void test_seq_overhead_source(void) {
  static const double pr[][3] = {{32, 1014, 1025}, {64, 1853, 1896},
                                 {128, 3048, 3177}, {256, 4039, 4258}};
  double sxy = 0.0, sxx = 0.0;
  for (size_t i = 0; i < RP_ARRAY_LEN(pr); i++) {
    double gbs = pr[i][0], hidden = gbs / pr[i][1] - gbs / pr[i][2];
    sxy += gbs * hidden;
    sxx += gbs * gbs;
  }
  CostConsts k;
  cost_consts_default(&k);
  T_CHECK(fabs(k.seq_overhead_s / (sxy / sxx) - 1.0) < 0.005);
}

/* step_overhead_s's default: the CPU time a step of 16 sequences hid once
 * SGLang's overlap schedule ran it beside the GPU's step (SGLang PR #5608,
 * https://github.com/sgl-project/sglang/pull/5608, description: a decode
 * server of Llama-3.1-8B at tp 4 logs "#running-req: 16" and "gen
 * throughput (token/s)" 3053.86 before and 3458.31 after), less those 16
 * sequences' seq_overhead_s: the fixed part of the step's CPU work. */
static void test_step_overhead_source(void) {
  CostConsts k;
  cost_consts_default(&k);
  double hidden = 16.0 / 3053.86 - 16.0 / 3458.31;
  T_CHECK(fabs(k.step_overhead_s / (hidden - 16.0 * k.seq_overhead_s) - 1.0) < 0.005);
}

/* request_overhead_s's default: SGLang's serving path with its forward
 * replaced by a 2.632 ms busy wait measured a median TTFT of 9.54 ms at
 * one request in flight (tenstorrent/tt-inference-server issue 3560,
 * comment of 2026-05-18); the rest is the time outside the forward. */
static void test_request_overhead_source(void) {
  CostConsts k;
  cost_consts_default(&k);
  T_CHECK(fabs(k.request_overhead_s / ((9.54 - 2.632) * 1e-3) - 1.0) < 0.005);
}

/* Every layer of a forward pass adds its kernels x kernel_stall_s (7 for a
 * dense layer, 2 more for its tp all-reduces when tp > 1): L of them to a
 * decode step and to a prefill, and overhead reports them with the exposed
 * CPU work (docs/cost-model.md, "Kernel-boundary stalls"). */
static void stall_delta(CostModel *m, const CostLayout *l, double per_pass) {
  CostDecode a, b;
  CostPrefill pa, pb;
  m->k.kernel_stall_s = 0.0;
  T_CHECK(cost_decode_step(m, l, 16, 4250, &a) && cost_prefill(m, l, &pa));
  T_NEAR(pa.overhead, 0.0, 0.0);
  m->k.kernel_stall_s = 5e-6;
  T_CHECK(cost_decode_step(m, l, 16, 4250, &b) && cost_prefill(m, l, &pb));
  T_NEAR(b.step - a.step, per_pass, 1e-12);
  T_NEAR(b.overhead - a.overhead, per_pass, 1e-12);
  T_NEAR(pb.latency - pa.latency, per_pass, 1e-12);
  T_NEAR(pb.overhead, per_pass, 1e-15);
}

static void test_layer_stall(void) {
  Spec s = llama70b(4);
  CostModel m = model_of(&s);
  double L = (double)m.layers;
  CostLayout l1 = {1, 1, 1, 1, 1, 1, 1};
  stall_delta(&m, &l1, L * 35e-6);
  CostLayout l = {8, 1, 1, 1, 1, 1, 1};
  stall_delta(&m, &l, L * 45e-6);
  /* over two pipeline stages: still every layer once per step */
  CostLayout l2 = {4, 2, 1, 1, 1, 1, 1};
  stall_delta(&m, &l2, L * 45e-6);
  /* dcp adds its reduction */
  CostLayout ld = {8, 1, 1, 1, 1, 1, 2};
  stall_delta(&m, &ld, L * 50e-6);
  /* per-head q/k RMSNorms (Qwen3) add two kernels a layer */
  Spec q = llama70b(4);
  q.model.attention.qk_norm.v = true;
  q.model.attention.qk_norm.set = true;
  CostModel mq = model_of(&q);
  stall_delta(&mq, &l1, L * 45e-6);
  /* DeepSeek-V3: 3 dense layers of 7 kernels, 58 MoE layers of 11 plus 3
   * for the shared expert, 5 more in each for MLA, 2 tp all-reduces in
   * each; the experts over etp 8 = tp add none, over ep 8 a dispatch and a
   * combine. */
  Spec v3 = dsv3(128);
  CostModel d = model_of(&v3);
  CostLayout e = {8, 1, 1, 1, 1, 8, 1};
  stall_delta(&d, &e, (3 * 14 + 58 * 21) * 5e-6);
  CostLayout ep = {8, 1, 1, 1, 8, 1, 1};
  stall_delta(&d, &ep, (3 * 14 + 58 * 23) * 5e-6);
}

/* The engines' schedulers and their defaults (engines.c, engine_sched). */
static void test_engine_sched(void) {
  Spec s = llama70b(1);
  EngineSched es;
  engine_sched(&s, &es);
  T_CHECK(!es.mixed && es.tokens == 0 && es.seqs == 0);
  s.serving.max_num_batched_tokens = (SInt)SI(4096);
  engine_sched(&s, &es);
  T_CHECK(es.mixed && es.tokens == 4096);
  s.serving.max_num_batched_tokens = (SInt){0};
  s.deployment.engine.v = ENGINE_VLLM;
  s.hardware.name.v = "NVIDIA H200 SXM";
  s.deployment.engine_version = (SStr){.v = "0.11", .set = true};
  engine_sched(&s, &es);
  T_CHECK(es.mixed && !es.overlap && es.tokens == 8192 && es.seqs == 1024 && es.source);
  /* vLLM 0.19 (and the newest entry, a spec naming no version) overlaps */
  s.deployment.engine_version = (SStr){.v = "0.19.0", .set = true};
  engine_sched(&s, &es);
  T_CHECK(es.overlap);
  s.deployment.engine_version = (SStr){0};
  engine_sched(&s, &es);
  T_CHECK(es.overlap);
  s.deployment.engine_version = (SStr){.v = "0.11", .set = true};
  s.hardware.name.v = "NVIDIA A100 80GB SXM";
  engine_sched(&s, &es);
  T_CHECK(es.tokens == 2048 && es.seqs == 256);
  s.hardware.name.v = "NVIDIA L40S";
  s.hardware.gpu.memory.v = (int64_t)46068 << 20;
  engine_sched(&s, &es);
  T_CHECK(es.tokens == 2048 && es.seqs == 256);
  s.deployment.engine.v = ENGINE_SGLANG;
  engine_sched(&s, &es);
  T_CHECK(!es.mixed && es.overlap && es.overlap_exposed_s == 0.0);
  s.deployment.engine.v = ENGINE_TRTLLM;
  engine_sched(&s, &es);
  /* whole prompts beside the decodes unless chunked prefill is chosen */
  T_CHECK(!es.mixed && es.whole_prompts && es.tokens == 8192 && es.seqs == 0); /* no default limit known */
  s.serving.chunked_prefill = (SBool){.v = true, .set = true};
  engine_sched(&s, &es);
  T_CHECK(es.mixed && !es.whole_prompts && es.tokens == 8192);
  s.serving.max_num_seqs = (SInt)SI(64);
  engine_sched(&s, &es);
  T_CHECK(es.mixed && es.overlap && es.tokens == 8192 && es.seqs == 64);
  /* TensorRT-LLM's overlap leaves 0.58 ms a step exposed (issue #13957) */
  T_NEAR(es.overlap_exposed_s, 580e-6, 0.0);
  /* serving.overlap_schedule overrides the engine's default either way */
  s.serving.overlap_schedule.v = false;
  s.serving.overlap_schedule.set = true;
  engine_sched(&s, &es);
  T_CHECK(!es.overlap);
  s.deployment.engine.v = ENGINE_VLLM;
  s.serving.overlap_schedule.v = true;
  engine_sched(&s, &es);
  T_CHECK(es.overlap);
  T_CHECK(engine_overlap_term(ENGINE_VLLM, "0.11", true) &&
          !strcmp(engine_overlap_term(ENGINE_VLLM, "0.11", true), "overlap_on"));
  T_CHECK(!engine_overlap_term(ENGINE_VLLM, "0.11", false) && !engine_overlap_term(ENGINE_SGLANG, NULL, true));
  T_CHECK(!strcmp(engine_overlap_term(ENGINE_SGLANG, NULL, false), "overlap_off"));
  T_CHECK(!strcmp(engine_overlap_term(ENGINE_VLLM, "0.19", false), "overlap_off"));
  T_CHECK(!engine_overlap_term(ENGINE_VLLM, NULL, true));
  /* vLLM 0.19 runs an engine spanning nodes under Ray, synchronously */
  s.hardware.gpus_per_node = (SInt)SI(8);
  T_EQ_INT(engine_vllm_ray_sync_gpn(&s), 0); /* 0.11: no async to lose */
  s.deployment.engine_version = (SStr){.v = "0.19", .set = true};
  T_EQ_INT(engine_vllm_ray_sync_gpn(&s), 8);
  T_CHECK(engine_spans_nodes(8, 16, 1, 1) && engine_spans_nodes(8, 8, 2, 1));
  T_CHECK(!engine_spans_nodes(8, 8, 1, 1) && !engine_spans_nodes(8, 8, 2, 2) && !engine_spans_nodes(0, 16, 1, 1));
}

static const char *write_tmp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/rp-calib-%d.json", (int)getpid());
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static bool has_code(Diags *d, DiagCode c, const char *needle);

/* A calibration file with two bad values: refused, each named (E0503). */
static void calib_bad_values(const char *text, const char *first, const char *second) {
  Diags d;
  CostConsts k;
  bool unread = false;
  cost_consts_default(&k);
  diags_init(&d);
  T_CHECK(!cost_calibration_load(&d, write_tmp(text), &k, &unread));
  T_CHECK(has_code(&d, DIAG_E0503, first));
  T_CHECK(has_code(&d, DIAG_E0503, second));
  diags_free(&d);
}

static bool has_code(Diags *d, DiagCode c, const char *needle) {
  for (size_t i = 0; i < d->list.len; i++)
    if (d->list.items[i]->code == c && (!needle || strstr(d->list.items[i]->msg, needle)))
      return true;
  return false;
}

static void test_calibration(void) {
  CostConsts k;
  Diags d;
  bool unread;
  cost_consts_default(&k);
  diags_init(&d);
  const char *p = write_tmp("{\"format\": \"rankplan.calibration/1\", \"source\": \"probe\","
                            " \"mfu_prefill\": 0.42, \"scale_out_latency_s\": 3e-5}");
  T_CHECK(cost_calibration_load(&d, p, &k, &unread));
  T_NEAR(k.mfu_prefill, 0.42, 1e-12);
  T_NEAR(k.scale_out_latency_s, 3e-5, 1e-12);
  T_NEAR(k.mfu_decode, 0.50, 1e-12);
  T_EQ_INT(d.nerrors, 0);
  diags_free(&d);

  diags_init(&d);
  p = write_tmp("{\"mfu_prefil\": 0.5}");
  T_CHECK(!cost_calibration_load(&d, p, &k, &unread));
  T_CHECK(!unread);
  T_CHECK(has_code(&d, DIAG_E0502, "`mfu_prefil`"));
  T_CHECK(has_code(&d, DIAG_E0502, p));
  T_CHECK(d.list.len == 1 && d.list.items[0]->help && strstr(d.list.items[0]->help, "mfu_prefill"));
  diags_free(&d);

  calib_bad_values("{\"hbm_efficiency\": 1.5, \"mfu_decode\": \"high\"}", "got 1.5", "must be a number");
  /* the newer constants are held to their ranges by name */
  calib_bad_values("{\"kernel_stall_s\": 2, \"request_overhead_s\": -0.1}", "kernel_stall_s", "request_overhead_s");
  calib_bad_values("{\"eager_kernel_s\": -1e-6, \"kernel_stall_s\": 1.5}", "eager_kernel_s", "kernel_stall_s");
  calib_bad_values("{\"seq_overhead_s\": -1e-6, \"step_overhead_s\": 2}", "seq_overhead_s", "step_overhead_s");

  diags_init(&d);
  p = write_tmp("{\"mfu_decode\": 0.5,,}");
  T_CHECK(!cost_calibration_load(&d, p, &k, &unread));
  T_CHECK(has_code(&d, DIAG_E0504, NULL));
  T_CHECK(d.list.items[0]->loc.line == 1);
  diags_free(&d);
  unlink(p);

  diags_init(&d);
  T_CHECK(!cost_calibration_load(&d, "/nonexistent/calib.json", &k, &unread));
  T_CHECK(unread);
  T_CHECK(has_code(&d, DIAG_E0505, NULL));
  diags_free(&d);

  size_t n;
  const CostConstInfo *t = cost_const_table(&n);
  T_CHECK(n >= 10);
  for (size_t i = 0; i < n; i++) T_CHECK(t[i].def >= t[i].lo && t[i].def <= t[i].hi);
}

static void test_missing_hardware(void) {
  Spec s = llama70b(4);
  s.hardware.gpu.hbm_bandwidth.v = 0;
  s.hardware.scale_out.bandwidth.v = 0;
  CostConsts k;
  cost_consts_default(&k);
  CostModel m;
  Diags d;
  diags_init(&d);
  T_CHECK(!cost_model_init(&d, &s, &k, &m));
  T_CHECK(has_code(&d, DIAG_E0506, "hardware.gpu.hbm_bandwidth"));
  T_CHECK(has_code(&d, DIAG_E0506, "hardware.scale_out.bandwidth"));
  diags_free(&d);
}

int main(void) {
  T_RUN(test_xpyd_ratio);
  T_RUN(test_attn_tp_opt);
  T_RUN(test_pp_rebalance);
  T_RUN(test_zigzag);
  T_RUN(test_collectives);
  T_RUN(test_nvls);
  T_RUN(test_link_class_in_use);
  T_RUN(test_md1);
  T_RUN(test_weights_and_kv);
  T_RUN(test_prefill);
  T_RUN(test_decode);
  T_RUN(test_ep_comm);
  T_RUN(test_nvl72_domain);
  T_RUN(test_expert_rows);
  T_RUN(test_expert_tp);
  T_RUN(test_prefix_cache);
  T_RUN(test_speculative);
  T_RUN(test_mixed_step);
  T_RUN(test_whole_prompts);
  T_RUN(test_busiest_rank);
  T_RUN(test_engine_sched);
  T_RUN(test_overlap);
  T_RUN(test_seq_overhead);
  T_RUN(test_seq_overhead_source);
  T_RUN(test_step_overhead_source);
  T_RUN(test_request_overhead_source);
  T_RUN(test_layer_stall);
  T_RUN(test_run_seqs_cap);
  T_RUN(test_batch_search);
  T_RUN(test_calibration);
  T_RUN(test_missing_hardware);
  T_DONE();
}
