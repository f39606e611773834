/*
 * emit_launch.c: the launch targets' common part (emit_launch.h) and
 * launch_emit (launch.h).
 *
 * Input: a loaded Plan with a `launch` key and the engine's catalog entry.
 * Output: the target's files (every node's script, the router, engine
 * configs, a manifest), written into a directory at once: the files go to
 * a fresh temporary directory beside it, which then replaces it by one
 * rename (docs/engines.md, "Output directory").
 * Invariants: every number in a file comes from the plan (devices, sizes,
 * nodes, memory fractions from the ledger); the same plan gives the same
 * bytes; no two processes of one node get the same port.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emit_launch.h"
#include "outfile.h"

static const char *const target_names[LT__COUNT] = {"vllm", "sglang", "trtllm", "shell", "slurm", "k8s", "dynamo"};

const char *launch_target_name(LaunchTarget t) {
  return (unsigned)t < LT__COUNT ? target_names[t] : "?";
}

bool launch_target_parse(const char *s, LaunchTarget *out) {
  for (int i = 0; i < LT__COUNT; i++)
    if (strcmp(s, target_names[i]) == 0) {
      *out = (LaunchTarget)i;
      return true;
    }
  return false;
}

const char *launch_target_list(void) { return "vllm, sglang, trtllm, shell, slurm, k8s, dynamo"; }

bool lerr(Launch *l, const char *fmt, ...) {
  if (l->err) return false;
  va_list ap;
  va_start(ap, fmt);
  l->err = rp_vsprintf(fmt, ap);
  va_end(ap);
  return false;
}

StrBuf *lfile(Launch *l, const char *name, bool exec, int32_t node) {
  LFile f = {rp_strdup(name), {0}, exec, node};
  sb_init(&f.text);
  rp_vec_push(&l->files, f);
  return &l->files.items[l->files.len - 1].text;
}

void lq(StrBuf *sb, const char *s) {
  const char *safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,@%+-";
  if (*s && strspn(s, safe) == strlen(s)) {
    sb_puts(sb, s);
    return;
  }
  sb_putc(sb, '\'');
  for (const char *c = s; *c; c++) {
    if (*c == '\'') sb_puts(sb, "'\\''");
    else sb_putc(sb, *c);
  }
  sb_putc(sb, '\'');
}

char *lhost_name(const Launch *l, int32_t node) {
  const PlanLaunch *L = l->L;
  if (L->nhostnames) return rp_strdup(L->hostnames[node]);
  if (L->hostname_pattern) {
    const char *at = strstr(L->hostname_pattern, "{n}");
    return rp_sprintf("%.*s%d%s", (int)(at - L->hostname_pattern), L->hostname_pattern, node, at + 3);
  }
  return rp_sprintf("node-%d", node);
}

const char *lhost(Launch *l, int32_t node, char buf[32]) {
  if (l->k8s) {
    snprintf(buf, 32, "\"${%s}\"", node == l->k8s_head ? "LWS_LEADER_ADDRESS" : "POD_IP");
    return buf;
  }
  if (!l->host_used[node]) rp_vec_push(&l->hosts_named, node);
  l->host_used[node] = true;
  snprintf(buf, 32, "\"${host_%d}\"", node);
  return buf;
}

void lflag(Launch *l, StrBuf *sb, const char *term, const char *value) {
  const char *f = engine_flag(l->c, term);
  if (!f) {
    lerr(l, "the catalog entry %s has no flag for `%s`", l->c->file, term);
    return;
  }
  if (*f) sb_printf(sb, " \\\n    %s", f);
  if (value) {
    sb_putc(sb, ' ');
    lq(sb, value);
  }
}

void lflag_raw(Launch *l, StrBuf *sb, const char *term, const char *shell_word) {
  const char *f = engine_flag(l->c, term);
  if (!f) {
    lerr(l, "the catalog entry %s has no flag for `%s`", l->c->file, term);
    return;
  }
  sb_printf(sb, " \\\n    %s %s", f, shell_word);
}

void lflag_i(Launch *l, StrBuf *sb, const char *term, int64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%lld", (long long)v);
  lflag(l, sb, term, b);
}

int64_t lredundant_experts(const Inst *in) {
  const PlanPool *P = in->P;
  if (!P->expert_map || P->expert_slots <= 0) return 0;
  int64_t n = P->expert_slots * in->ep, top = -1; /* the loader bounded slots * ep */
  for (int64_t i = 0; i < n; i++)
    if (P->expert_map[i] > top) top = P->expert_map[i];
  return n - (top + 1);
}

void lredundant_flag(Launch *l, StrBuf *sb, const Inst *in) {
  int64_t r = lredundant_experts(in);
  if (r > 0) lflag_i(l, sb, "redundant_experts", r);
}

void ldim(Launch *l, StrBuf *sb, EngineDim d, int64_t v) {
  const char *f = l->c->dim[d].flag;
  if (!f) {
    lerr(l, "the catalog entry %s has no flag for `%s`", l->c->file, engine_dim_name(d));
    return;
  }
  sb_printf(sb, " \\\n    %s %lld", f, (long long)v);
}

void lserving(Launch *l, StrBuf *sb) {
  const PlanLaunch *L = l->L;
  if (L->served_model_name && engine_flag(l->c, "served_model_name")) lflag(l, sb, "served_model_name", L->served_model_name);
  if (L->revision) lflag(l, sb, "revision", L->revision);
  lflag_i(l, sb, "max_model_len", L->max_model_len);
  if (L->max_num_seqs) lflag_i(l, sb, "max_num_seqs", L->max_num_seqs);
  if (L->max_num_batched_tokens) lflag_i(l, sb, "max_num_batched_tokens", L->max_num_batched_tokens);
  /* an entry that takes it in its YAML writes it there (emit_trtllm.c) */
  if (L->cuda_graph_max_bs && !engine_yaml_key(l->c, "cuda_graph_max_bs"))
    lflag_i(l, sb, "cuda_graph_max_bs", L->cuda_graph_max_bs);
  /* serving.overlap_schedule where it departs from the engine's default */
  const char *term = L->overlap_schedule >= 0 ? engine_overlap_term(l->c->engine, l->c->version, L->overlap_schedule == 1) : NULL;
  if (term) lflag(l, sb, term, NULL);
}

const char *lkv_dtype(Launch *l) {
  const char *w = engine_kv_word(l->c, l->L->kv_cache_dtype, l->L->activations_dtype, l->L->attention_backend);
  if (!w) lerr(l, "engine %s %s has no KV cache dtype for `%s`", l->L->engine, l->c->version, l->L->kv_cache_dtype);
  return w ? w : "";
}

/* The smallest ratio num/den over the pool's ranks, floored to 4 decimals. */
static double frac_min(Launch *l, size_t pool, bool kv_free) {
  const PlanPool *P = &l->p->pools[pool];
  double best = 2;
  for (int64_t r = P->first_rank; r < P->first_rank + P->nranks; r++) {
    const int64_t *m = l->p->ranks[r].memory;
    int64_t den = m[MEM_CAPACITY], num = m[MEM_WEIGHTS] + m[MEM_KV_CACHE];
    if (kv_free) num = m[MEM_KV_CACHE], den = m[MEM_CAPACITY] - m[MEM_WEIGHTS] - m[MEM_ACTIVATIONS] - m[MEM_WORKSPACE];
    double f = den > 0 ? floor((double)num / (double)den * 10000.0) / 10000.0 : 0;
    if (f < best) best = f;
  }
  if (!(best > 0 && best <= 1))
    lerr(l, "pool `%s`: its memory ledger gives a fraction of %.4f, outside (0, 1]", P->name, best);
  return best;
}

/* The pool's memory fraction flag: the plan's (its ledger's,
 * pools[].memory_fraction); for plans without one, the ranks' weights and
 * KV cache over their capacity (SGLang) or KV cache over what weights,
 * activations and workspace leave (TensorRT-LLM), floored to 4 decimals. */
double lfrac_pool(Launch *l, size_t pool) {
  double mf = l->p->pools[pool].memory_fraction;
  return mf > 0 ? mf : frac_min(l, pool, strcmp(l->L->engine, "trtllm") == 0);
}
void lflag_frac(Launch *l, StrBuf *sb, double f, bool exact) {
  StrBuf v;
  sb_init(&v);
  if (exact) sb_put_exact(&v, f);
  else sb_printf(&v, "%.4f", f);
  lflag(l, sb, "memory_fraction", v.buf);
  sb_free(&v);
}

void linst_name(StrBuf *sb, const Launch *l, const Inst *in) {
  sb_printf(sb, "%s-%d", l->p->pools[in->pool].name, in->instance);
}

void linst_comment(StrBuf *sb, const Launch *l, const Inst *in, size_t run) {
  const PlanPool *P = in->P;
  sb_printf(sb, "# pool %s (%s), instance %d: tp %lld, pp %lld, dp %lld, cp %lld, ep %lld, ranks %lld-%lld; "
                "node %zu of %zu of the instance\n",
            P->name, P->role, in->instance, (long long)in->tp, (long long)in->pp, (long long)in->dp,
            (long long)in->cp, (long long)in->ep, (long long)(P->first_rank + in->instance * P->instance_size),
            (long long)(P->first_rank + (in->instance + 1) * P->instance_size - 1), run, in->nruns);
  (void)l;
}

void lindent(StrBuf *y, const char *text, int indent) {
  for (const char *p = text; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    sb_printf(y, "%*s", indent, "");
    sb_putn(y, p, n);
    sb_putc(y, '\n');
    p += n + (e ? 1 : 0);
  }
}

void ldevices(Launch *l, StrBuf *sb, const InstRun *r) {
  if (l->k8s || l->dynamo) return; /* a pod's GPUs are its own */
  sb_puts(sb, "CUDA_VISIBLE_DEVICES=");
  for (int32_t i = 0; i < r->n; i++) sb_printf(sb, "%s%d", i ? "," : "", r->dev[i]);
}

static int cmp_node(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

void lscript(Launch *l, StrBuf *out, const char *what, const StrBuf *body) {
  sb_printf(out, "#!/bin/bash\n# %s\n# Written by rankplan from plan %.16s... (docs/engines.md); edit the plan, not this file.\n"
                 "set -euo pipefail\n",
            what, l->p->spec_sha256);
  /* in node order, touching only the nodes the body names */
  if (l->hosts_named.len) qsort(l->hosts_named.items, l->hosts_named.len, sizeof(int32_t), cmp_node);
  for (size_t i = 0; i < l->hosts_named.len; i++) {
    int32_t n = l->hosts_named.items[i];
    char *h = lhost_name(l, n);
    sb_printf(out, "host_%d=${RANKPLAN_HOST_%d:-%s}\n", n, n, h);
    free(h);
    l->host_used[n] = false;
  }
  l->hosts_named.len = 0;
  sb_putn(out, body->buf ? body->buf : "", body->len);
}
