/*
 * emit_trtllm.c: the `trtllm` target: `trtllm-serve` lines per node, one
 * engine-arguments YAML per instance (LLM API arguments, passed with the
 * catalog entry's `config` flag: --config at 00209af,
 * --extra_llm_api_options in 1.0.0), and for disaggregated plans the
 * `trtllm-serve disaggregated` proxy with its YAML.
 *
 * --tp_size counts every GPU of one pipeline stage and context group: with
 * attention data parallelism (a MoE model, dp > 1, tp 1) it is dp, and the
 * YAML sets enable_attention_dp. A multi-node instance runs under one
 * `mpirun ... trtllm-llmapi-launch trtllm-serve` started on its head node
 * (TensorRT-LLM's multi-node launcher), which needs the same device list
 * on every node; the other nodes' scripts only say so. For the dynamo
 * target (emit_dynamo.c) the command is Dynamo's worker's, whose flags
 * emit_dynamo.c respells, without mpirun (Dynamo's operator starts it).
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

static bool disagg(const Inst *in) { return strcmp(in->P->role, "both") != 0; }

static void yaml_name(StrBuf *sb, const Launch *l, const Inst *in) {
  sb_puts(sb, "trtllm-");
  linst_name(sb, l, in);
  sb_puts(sb, ".yaml");
}

/* The CUDA-graph batch where the entry takes it in the YAML (`yaml_keys`,
 * section.field; the catalog reader checked the form), padded: a decode
 * batch between two captured sizes runs the next larger graph rather than
 * eagerly (CudaGraphConfig.enable_padding), as trtllm-bench runs the
 * engine (tensorrt_llm/bench/benchmark/utils/general.py, get_settings:
 * padding on, the graphs up to the engine's max_batch_size). */
static void graph_yaml(const Launch *l, StrBuf *y) {
  const char *k = engine_yaml_key(l->c, "cuda_graph_max_bs"), *dot = k ? strchr(k, '.') : NULL;
  if (dot && l->L->cuda_graph_max_bs > 0)
    sb_printf(y, "%.*s:\n  %s: %lld\n  enable_padding: true\n", (int)(dot - k), k, dot + 1,
              (long long)l->L->cuda_graph_max_bs);
}

/* The KV cache dtype where the entry takes it in kv_cache_config
 * (`yaml_keys`, a field of that section: the catalog reader checked it):
 * the plan's, as the entry names it ("auto": the checkpoint's, which is
 * the model's dtype unless the checkpoint says an FP8 KV cache). An entry
 * without the key runs only "auto" (kv_dtypes). */
static void kv_dtype_yaml(Launch *l, StrBuf *y) {
  const char *k = engine_yaml_key(l->c, "kv_cache_dtype");
  if (k) sb_printf(y, "  %s: %s\n", strchr(k, '.') + 1, lkv_dtype(l));
}

/* trtllm-POOL-I.yaml: the instance's LLM API arguments. */
static void trtllm_yaml(Launch *l, const Inst *in) {
  StrBuf name;
  sb_init(&name);
  yaml_name(&name, l, in);
  StrBuf *y = lfile(l, name.buf, false, in->runs[0].node);
  const char *flag = engine_flag(l->c, "config");
  sb_printf(y, "# LLM API arguments of pool %s instance %d (%s%s); written by rankplan\n", in->P->name, in->instance,
            l->dynamo ? "dynamo.trtllm --extra-engine-args" : "trtllm-serve ", l->dynamo || !flag ? "" : flag);
  sb_printf(y, "enable_attention_dp: %s\n", l->L->moe && in->dp > 1 ? "true" : "false");
  /* serving.chunked_prefill, when the spec chose it (BaseLlmArgs.enable_chunked_prefill, default False) */
  if (l->L->chunked_prefill >= 0)
    sb_printf(y, "enable_chunked_prefill: %s\n", l->L->chunked_prefill ? "true" : "false");
  /* the YAML's kv_cache_config replaces the one the flags built (llm_utils.py
   * update_llm_args_with_extra_dict: llm_args | llm_args_dict), so it
   * repeats the memory fraction */
  sb_printf(y, "kv_cache_config:\n  tokens_per_block: %lld\n  free_gpu_memory_fraction: ",
            (long long)l->L->kv_block);
  sb_put_exact(y, lfrac_pool(l, in->pool));
  sb_putc(y, '\n');
  kv_dtype_yaml(l, y);
  graph_yaml(l, y);
  if (disagg(in)) {
    const char *b = engine_kv(l->c->kv_transfer, l->c->nkv_transfer, l->L->kv_transfer);
    if (!b) lerr(l, "engine trtllm %s has no KV transfer backend `%s`", l->c->version, l->L->kv_transfer);
    sb_printf(y, "cache_transceiver_config:\n  backend: %s\n", b ? b : "");
  }
  sb_free(&name);
}

static void trtllm_flags(Launch *l, const Inst *in, StrBuf *sb) {
  const PlanLaunch *L = l->L;
  lflag(l, sb, "model", L->source);
  if (!l->dynamo) { /* dynamo.trtllm serves no HTTP and always runs the PyTorch backend */
    lflag(l, sb, "host", "0.0.0.0");
    lflag_i(l, sb, "port", in->http);
    lflag(l, sb, "backend", "pytorch");
  }
  ldim(l, sb, ED_TP, in->tp * in->dp);
  ldim(l, sb, ED_PP, in->pp);
  if (in->cp > 1) ldim(l, sb, ED_CP, in->cp);
  if (L->moe) ldim(l, sb, ED_EP, in->ep);
  lredundant_flag(l, sb, in); /* no TensorRT-LLM entry names one: refused */
  lflag_i(l, sb, "gpus_per_node", in->runs[0].n);
  lflag_frac(l, sb, lfrac_pool(l, in->pool), true);
  lserving(l, sb);
  StrBuf y;
  sb_init(&y);
  if (l->dynamo) { /* the DynamoGraphDeployment mounts the YAML there */
    sb_puts(&y, LDYNAMO_CONFIG_DIR "/");
    yaml_name(&y, l, in);
    lflag(l, sb, "config", y.buf);
    ldynamo_flags(l, in, sb);
    sb_free(&y);
    return;
  }
  sb_puts(&y, "$here/");
  yaml_name(&y, l, in);
  sb_printf(sb, " \\\n    %s \"%s\"", engine_flag(l->c, "config") ? engine_flag(l->c, "config") : "", y.buf);
  if (!engine_flag(l->c, "config")) lerr(l, "the catalog entry %s has no flag for `config`", l->c->file);
  sb_free(&y);
}

bool lrun_trtllm(Launch *l, const Inst *in, size_t j, StrBuf *sb) {
  const InstRun *r = &in->runs[j];
  char hb[32];
  if (!l->L->moe && in->dp > 1)
    return lerr(l, "pool `%s`: TensorRT-LLM has no data parallelism for a dense model inside one instance; "
                   "write its dp %lld as replicas",
                in->P->name, (long long)in->dp);
  for (size_t k = 1; k < in->nruns && !l->dynamo; k++)
    if (memcmp(in->runs[k].dev, in->runs[0].dev, (size_t)r->n * sizeof *r->dev) != 0)
      return lerr(l, "pool `%s` instance %d: mpirun gives every node the same CUDA_VISIBLE_DEVICES, but the "
                     "plan uses other devices on node %d than on node %d",
                  in->P->name, in->instance, in->runs[k].node, in->runs[0].node);
  if (l->k8s && in->nruns > 1)
    return lerr(l, "pool `%s`: a multi-node TensorRT-LLM instance is one MPI job (trtllm-llmapi-launch takes "
                   "each rank from mpirun or srun: tensorrt_llm/llmapi/trtllm-llmapi-launch), and mpirun starts "
                   "the ranks of other hosts through a remote shell, which LeaderWorkerSet pods do not have (LWS's "
                   "TensorRT-LLM example, docs/examples/tensorrt-llm, adds kubectl to the image and pods/exec "
                   "rights for it); use the dynamo target (its operator starts the MPI job across pods), the "
                   "shell or slurm target, or instances of one node",
                in->P->name);
  if (j > 0) {
    char *h = lhost_name(l, in->runs[0].node);
    sb_printf(sb, "# its ranks on this node run under mpirun, started by the script of node %d (%s)\n\n",
              in->runs[0].node, h);
    free(h);
    return false;
  }
  if (j == 0) trtllm_yaml(l, in);
  if (in->nruns == 1 || l->dynamo) { /* Dynamo's operator starts mpirun itself */
    ldevices(l, sb, r);
    sb_printf(sb, " \\\n  %s", l->c->command);
  } else {
    sb_puts(sb, "export ");
    ldevices(l, sb, r);
    sb_printf(sb, "\nmpirun -np %lld -x CUDA_VISIBLE_DEVICES -H ", (long long)in->P->instance_size);
    for (size_t k = 0; k < in->nruns; k++)
      sb_printf(sb, "%s%s:%d", k ? "," : "", lhost(l, in->runs[k].node, hb), in->runs[k].n);
    sb_printf(sb, " \\\n  trtllm-llmapi-launch %s", l->c->command);
  }
  trtllm_flags(l, in, sb);
  return true;
}

static void url_list(Launch *l, StrBuf *y, const char *role) {
  size_t n = 0;
  for (size_t i = 0; i < l->ninst; i++) n += strcmp(l->inst[i].P->role, role) == 0;
  sb_printf(y, "  num_instances: %zu\n  urls:\n", n);
  for (size_t i = 0; i < l->ninst; i++) {
    if (strcmp(l->inst[i].P->role, role) != 0) continue;
    char *h = linst_host_name(l, &l->inst[i]);
    sb_printf(y, "    - \"%s:%lld\"\n", h, (long long)linst_ports(l, &l->inst[i])->http);
    free(h);
  }
}

/* disagg.yaml and `trtllm-serve disaggregated` over it. */
void lrouter_trtllm(Launch *l, StrBuf *cmd) {
  StrBuf *y = lfile(l, "disagg.yaml", false, l->router_node);
  sb_printf(y, "# trtllm-serve disaggregated -c disagg.yaml; written by rankplan\nhostname: 0.0.0.0\nport: %lld\n",
            (long long)l->router_port);
  sb_puts(y, "context_servers:\n");
  url_list(l, y, "prefill");
  sb_puts(y, "generation_servers:\n");
  url_list(l, y, "decode");
  sb_printf(cmd, "%s disaggregated -c \"$here/disagg.yaml\"\n", l->c->command);
}

void emit_trtllm(Launch *l) {
  lnodes(l, lrun_trtllm);
  if (!l->err && lrouter_place(l))
    lrouter_script(l, lrouter_trtllm, "the context/generation proxy of trtllm-serve");
}
