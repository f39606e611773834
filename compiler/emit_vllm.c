/*
 * emit_vllm.c: the `vllm` target: `vllm serve` lines per node, the NIXL
 * connector for prefill and decode pools, and the P/D proxy.
 *
 * Multi-node instances use vLLM's own modes (0.11 and 0.19; docs/engines.md):
 *  - data parallel across nodes (dp > 1, whole tp x pp engines per node):
 *    the head runs the API server and its local engines with
 *    --data-parallel-size-local/-address/-rpc-port, every other node runs
 *    --headless with --data-parallel-start-rank;
 *  - tp x pp across nodes (dp = 1): a Ray cluster, `ray start --head` on
 *    the head and `ray start --address` elsewhere, and `vllm serve
 *    --distributed-executor-backend ray` on the head.
 * Anything else (a tp x pp engine split across nodes with dp > 1) is
 * refused: neither release has a launcher for it. For the dynamo target
 * (emit_dynamo.c) the head's command is written without the server,
 * multi-node and NIXL side-channel settings, which Dynamo supplies.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

static bool disagg(const Inst *in) { return strcmp(in->P->role, "both") != 0; }

static void vllm_sizes(Launch *l, const Inst *in, StrBuf *sb) {
  ldim(l, sb, ED_TP, in->tp);
  ldim(l, sb, ED_PP, in->pp);
  ldim(l, sb, ED_DP, in->dp);
  if (l->L->moe && in->ep > 1) sb_printf(sb, " \\\n    %s", l->c->dim[ED_EP].flag);
  if (lredundant_experts(in) > 0) {
    char *json = rp_sprintf("{\"num_redundant_experts\":%lld}", (long long)lredundant_experts(in));
    lflag(l, sb, "eplb", NULL);
    lflag(l, sb, "eplb_config", json);
    free(json);
  }
  if (in->dcp > 1) ldim(l, sb, ED_DCP, in->dcp);
  lflag(l, sb, "kv_cache_dtype", lkv_dtype(l));
  lflag_i(l, sb, "block_size", l->L->kv_block);
  lflag_frac(l, sb, l->L->gpu_memory_utilization, true); /* the fraction the ledger was planned with */
  lserving(l, sb);
  if (disagg(in) && l->dynamo) {
    ldynamo_flags(l, in, sb);
  } else if (disagg(in)) {
    const char *conn = engine_kv(l->c->kv_transfer, l->c->nkv_transfer, l->L->kv_transfer);
    if (!conn) {
      lerr(l, "engine vllm %s has no KV transfer backend `%s`", l->c->version, l->L->kv_transfer);
      return;
    }
    char *json = rp_sprintf("{\"kv_connector\":\"%s\",\"kv_role\":\"kv_both\"}", conn);
    lflag(l, sb, "kv_transfer", json);
    free(json);
  }
}

const char *lvllm_sampler_env(const Launch *l) {
  return l->L->sampler ? engine_kv(l->c->samplers, l->c->nsamplers, l->L->sampler) : NULL;
}

bool lrun_vllm(Launch *l, const Inst *in, size_t j, StrBuf *sb) {
  const InstRun *r = &in->runs[j];
  int64_t engine = in->tp * in->pp * in->cp;
  bool multi = in->nruns > 1, dp_mode = multi && in->dp > 1 && r->n % engine == 0, ray = multi && in->dp == 1;
  if (multi && !dp_mode && !ray)
    return lerr(l, "pool `%s` instance %d: a tp x pp engine across nodes with dp %lld; vLLM %s launches "
                   "either whole engines per node (data parallel) or one engine over a Ray cluster",
                in->P->name, in->instance, (long long)in->dp, l->c->version);
  char hb[32], hh[32];
  if (ray && j > 0) {
    const char *head = lhost(l, in->runs[0].node, hh);
    ldevices(l, sb, r);
    sb_printf(sb, " \\\n  ray start --block --address %s:%lld --num-gpus %d", head, (long long)in->aux_a, r->n);
    return true;
  }
  if (ray && !l->dynamo) {
    ldevices(l, sb, r);
    sb_printf(sb, " ray start --head --port %lld --num-gpus %d\n", (long long)in->aux_a, r->n);
  }
  ldevices(l, sb, r);
  if (disagg(in) && !l->dynamo)
    sb_printf(sb, " VLLM_NIXL_SIDE_CHANNEL_HOST=%s VLLM_NIXL_SIDE_CHANNEL_PORT=%lld", lhost(l, r->node, hb),
              (long long)(r->port0 + 3));
  /* serving.sampler (VLLM_USE_FLASHINFER_SAMPLER) before the command; the
   * dynamo target writes it in the worker's `envs` (emit_dynamo.c) */
  const char *env = lvllm_sampler_env(l);
  if (env && !l->dynamo) sb_printf(sb, " %s", env);
  sb_printf(sb, " \\\n  %s", l->c->command);
  lflag(l, sb, "model", l->L->source);
  if (!l->dynamo && (!dp_mode || j == 0)) lflag_i(l, sb, "port", in->http);
  vllm_sizes(l, in, sb);
  if (ray) lflag(l, sb, "executor", "ray");
  if (dp_mode && !l->dynamo) {
    if (j > 0) lflag(l, sb, "headless", NULL);
    lflag_i(l, sb, "dp_size_local", r->n / engine);
    if (j > 0 && l->k8s) {
      char w[64];
      snprintf(w, sizeof w, "\"$((LWS_WORKER_INDEX * %lld))\"", (long long)(r->n / engine));
      lflag_raw(l, sb, "dp_start_rank", w);
    } else if (j > 0) {
      lflag_i(l, sb, "dp_start_rank", r->first / engine);
    }
    lflag_raw(l, sb, "dp_address", lhost(l, in->runs[0].node, hh));
    lflag_i(l, sb, "dp_rpc_port", in->aux_a);
  }
  return true;
}

/* vLLM's documented P/D proxy (the toy proxy of its NIXL tests, run from
 * a source tree of the plan's release) over every prefill and decode
 * instance's API server. */
void lrouter_vllm(Launch *l, StrBuf *cmd) {
  char hb[LHOST_MAX];
  sb_puts(cmd, "# the P/D proxy of vLLM's NIXL connector tests (docs.vllm.ai v0.11.0, NixlConnector usage)\n");
  sb_printf(cmd, "python3 \"${VLLM_SOURCE:?set VLLM_SOURCE to a vLLM %s source tree}/tests/v1/kv_connector/"
                 "nixl_integration/toy_proxy_server.py\" \\\n    --host 0.0.0.0",
            l->c->version);
  sb_printf(cmd, " \\\n    --port %lld", (long long)l->router_port);
  static const char *const role[2] = {"prefill", "decode"}, *const flag[2] = {"prefiller", "decoder"};
  for (int k = 0; k < 2; k++) {
    sb_printf(cmd, " \\\n    --%s-hosts", flag[k]);
    for (size_t i = 0; i < l->ninst; i++)
      if (strcmp(l->inst[i].P->role, role[k]) == 0) sb_printf(cmd, " %s", linst_host(l, &l->inst[i], hb));
    sb_printf(cmd, " \\\n    --%s-ports", flag[k]);
    for (size_t i = 0; i < l->ninst; i++)
      if (strcmp(l->inst[i].P->role, role[k]) == 0) sb_printf(cmd, " %lld", (long long)linst_ports(l, &l->inst[i])->http);
  }
  sb_puts(cmd, "\n");
}

bool lrouter_place(Launch *l) {
  for (size_t i = 0; i < l->ninst; i++)
    if (strcmp(l->inst[i].P->role, "prefill") == 0) {
      l->router_node = l->inst[i].runs[0].node;
      l->router_port = l->next_port[l->router_node]++;
      if (l->router_port > 65535) return lerr(l, "the router's port on node %d is past 65535", l->router_node);
      return true;
    }
  return false;
}

void emit_vllm(Launch *l) {
  lnodes(l, lrun_vllm);
  if (lrouter_place(l)) lrouter_script(l, lrouter_vllm, "the prefill/decode proxy: clients send requests here");
}
