/*
 * launch_key.c: the plan's `launch` key (docs/plan.md, "launch").
 *
 * Input: a Spec whose engine passed engine_check, and its Layout. Output:
 * one line of JSON, `"launch": {...}`, with what a launch target needs
 * beyond the ranks: the engine and the catalog entry's version, the model
 * source, the serving options, the memory utilization the ledger was
 * planned with, the host names and the image. Nothing for the generic
 * engine. Invariants: keys in a fixed order, unset values as null, so the
 * same spec gives the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "layout.h"

static void put_opt_str(StrBuf *sb, const char *key, const SStr *v) {
  sb_printf(sb, ",\"%s\":", key);
  if (v->set) sb_json_str(sb, v->v);
  else sb_puts(sb, "null");
}

static void put_opt_int(StrBuf *sb, const char *key, const SInt *v) {
  sb_printf(sb, ",\"%s\":", key);
  if (v->set) sb_printf(sb, "%lld", (long long)v->v);
  else sb_puts(sb, "null");
}

static void put_hosts(StrBuf *sb, const HardwareSpec *h) {
  sb_puts(sb, ",\"hostnames\":");
  if (!h->hostnames.set) {
    sb_puts(sb, "null");
  } else {
    sb_putc(sb, '[');
    for (size_t i = 0; i < h->hostnames.len; i++) {
      if (i) sb_putc(sb, ',');
      sb_json_str(sb, h->hostnames.items[i].v);
    }
    sb_putc(sb, ']');
  }
  put_opt_str(sb, "hostname_pattern", &h->hostname_pattern);
}

void launch_key_emit(StrBuf *sb, const Spec *s, const struct Layout *L) {
  const DeploymentSpec *dep = &s->deployment;
  if (L->engine == ENGINE_GENERIC) return;
  char *err = NULL;
  bool none = false;
  EngineCaps *c = engine_caps_load(s->catalog_dir, L->engine, dep->engine_version.v, &err, &none);
  /* engine_check loaded the same entry moments ago in this process */
  if (!c) rp_internal("engine entry vanished between check and emit: %s", err);
  const ServingSpec *sv = &s->serving;
  sb_puts(sb, "  \"launch\": {\"engine\":");
  sb_json_str(sb, engine_name(L->engine));
  sb_puts(sb, ",\"engine_version\":");
  sb_json_str(sb, c->version);
  put_opt_str(sb, "source", &s->model.source);
  put_opt_str(sb, "revision", &s->model.revision);
  put_opt_str(sb, "served_model_name", sv->served_model_name.set ? &sv->served_model_name : &s->model.source);
  sb_printf(sb, ",\"port\":%lld,\"max_model_len\":%lld", (long long)sv->port.v, (long long)sv->max_model_len.v);
  put_opt_int(sb, "max_num_seqs", &sv->max_num_seqs);
  put_opt_int(sb, "max_num_batched_tokens", &sv->max_num_batched_tokens);
  sb_printf(sb, ",\"kv_block\":%lld,\"kv_cache_dtype\":\"%s\",\"activations_dtype\":\"%s\"",
            (long long)engine_kv_block(s), dtype_name((DType)s->model.dtype.kv_cache.v),
            dtype_name((DType)s->model.dtype.activations.v));
  sb_puts(sb, ",\"kv_transfer\":");
  sb_json_str(sb, sv->kv_transfer.set ? sv->kv_transfer.v : c->kv_transfer_default);
  if (sv->sampler.set) put_opt_str(sb, "sampler", &sv->sampler); /* written only when chosen */
  const char *backend = engine_attention_backend(s);
  if (backend) { /* written only when the plan depends on it */
    sb_puts(sb, ",\"attention_backend\":");
    sb_json_str(sb, backend);
  }
  if (sv->cuda_graph_max_bs.set) /* written only when chosen */
    sb_printf(sb, ",\"cuda_graph_max_bs\":%lld", (long long)sv->cuda_graph_max_bs.v);
  if (sv->overlap_schedule.set) /* written only when chosen */
    sb_printf(sb, ",\"overlap_schedule\":%s", sv->overlap_schedule.v ? "true" : "false");
  if (sv->chunked_prefill.set) /* written only when chosen */
    sb_printf(sb, ",\"chunked_prefill\":%s", sv->chunked_prefill.v ? "true" : "false");
  /* the fraction the ledger was planned with, exactly as the spec wrote it */
  sb_puts(sb, ",\"gpu_memory_utilization\":");
  sb_put_exact(sb, dep->memory.utilization.v);
  sb_printf(sb, ",\"moe\":%s", s->model.moe.present ? "true" : "false");
  put_hosts(sb, &s->hardware);
  put_opt_str(sb, "image", &dep->image);
  if (engine_gpu_is_amd(&s->hardware)) sb_puts(sb, ",\"gpu_vendor\":\"amd\""); /* absent: NVIDIA */
  sb_puts(sb, "},\n");
  engine_caps_free(c);
}
