/*
 * emit_sglang.c: the `sglang` target: `python3 -m sglang.launch_server`
 * lines per node, prefill/decode disaggregation, and the sgl-router.
 *
 * SGLang's --tp-size counts every GPU of one pipeline stage: with
 * attention data parallelism (a MoE model, dp > 1) it is tp x dp with
 * --dp-size dp --enable-dp-attention; a dense model's dp runs as --dp-size
 * replicas of --tp-size tp. A multi-node instance runs the same line on
 * every node with --nnodes, --node-rank and --dist-init-addr (the head's
 * rendezvous port). Every node of an instance gets its own --nccl-port
 * where the entry has one. For the dynamo target (emit_dynamo.c) the
 * multi-node flags are left to Dynamo's operator.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

bool lrun_sglang(Launch *l, const Inst *in, size_t j, StrBuf *sb) {
  const InstRun *r = &in->runs[j];
  const PlanLaunch *L = l->L;
  bool dp_attn = L->moe && in->dp > 1;
  char hh[32];
  ldevices(l, sb, r);
  sb_printf(sb, " \\\n  %s", l->c->command);
  lflag(l, sb, "model", L->source);
  lflag(l, sb, "host", "0.0.0.0");
  lflag_i(l, sb, "port", in->http);
  ldim(l, sb, ED_TP, dp_attn ? in->tp * in->dp : in->tp);
  ldim(l, sb, ED_PP, in->pp);
  ldim(l, sb, ED_DP, in->dp);
  if (dp_attn) lflag(l, sb, "dp_attention", NULL);
  if (L->moe) ldim(l, sb, ED_EP, in->ep);
  lredundant_flag(l, sb, in);
  if (in->dcp > 1) ldim(l, sb, ED_DCP, in->dcp);
  if (L->attention_backend) lflag(l, sb, "attention_backend", L->attention_backend);
  lflag(l, sb, "kv_cache_dtype", lkv_dtype(l));
  lflag_i(l, sb, "block_size", L->kv_block);
  lflag_frac(l, sb, lfrac_pool(l, in->pool), true);
  lserving(l, sb);
  if (engine_flag(l->c, "nccl_port")) lflag_i(l, sb, "nccl_port", r->port0 + 2); /* releases before 0.4.9 lack it */
  if (in->nruns > 1 && !l->dynamo) {
    lflag_i(l, sb, "nnodes", (int64_t)in->nruns);
    if (l->k8s && j > 0) lflag_raw(l, sb, "node_rank", "\"${LWS_WORKER_INDEX}\"");
    else lflag_i(l, sb, "node_rank", (int64_t)j);
    char *addr = rp_sprintf("%s:%lld", lhost(l, in->runs[0].node, hh), (long long)in->aux_a);
    lflag_raw(l, sb, "dist_init_addr", addr);
    free(addr);
  }
  if (strcmp(in->P->role, "both") != 0) {
    lflag(l, sb, "disaggregation_mode", in->P->role);
    const char *b = engine_kv(l->c->kv_transfer, l->c->nkv_transfer, L->kv_transfer);
    if (!b) return lerr(l, "engine sglang %s has no KV transfer backend `%s`", l->c->version, L->kv_transfer);
    lflag(l, sb, "kv_transfer", b);
    if (strcmp(in->P->role, "prefill") == 0) lflag_i(l, sb, "bootstrap_port", in->side);
  }
  return true;
}

/* The sgl-router in prefill/decode mode: each prefill server with its
 * bootstrap port, each decode server. */
void lrouter_sglang(Launch *l, StrBuf *cmd) {
  char hb[LHOST_MAX];
  sb_puts(cmd, "python3 -m sglang_router.launch_router \\\n    --pd-disaggregation");
  for (size_t i = 0; i < l->ninst; i++) {
    const Inst *in = &l->inst[i];
    bool pre = strcmp(in->P->role, "prefill") == 0;
    sb_printf(cmd, " \\\n    --%s http://%s:%lld", pre ? "prefill" : "decode", linst_host(l, in, hb),
              (long long)linst_ports(l, in)->http);
    if (pre) sb_printf(cmd, " %lld", (long long)linst_ports(l, in)->side);
  }
  sb_printf(cmd, " \\\n    --host 0.0.0.0 \\\n    --port %lld\n", (long long)l->router_port);
}

void emit_sglang(Launch *l) {
  lnodes(l, lrun_sglang);
  if (lrouter_place(l)) lrouter_script(l, lrouter_sglang, "the sgl-router over the prefill and decode servers");
}
