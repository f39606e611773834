/*
 * emit_inst.c: the plan's instances as an engine numbers its workers, the
 * port blocks, the node scripts, the manifest and the output directory
 * (emit_launch.h; docs/engines.md).
 *
 * Engine rank order (the order of CUDA_VISIBLE_DEVICES):
 *  vLLM     dp, pp, cp, tp (each data-parallel engine holds tp x pp
 *           workers, pipeline stage by stage);
 *  SGLang   pp, dp, cp, tp (with attention dp its tp ranks are dp groups
 *           of attention tp);
 *  TRT-LLM  pp, cp, dp, tp (Mapping: tp fastest, then cp, then pp; with
 *           attention dp the tp ranks are the dp ranks).
 * The engines give node k the ranks [k L, (k + 1) L) of that order, so an
 * instance's ranks on each node must be one such block of equal size L;
 * a plan whose placement is otherwise cannot be launched by the engine's
 * own launcher and is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emit_launch.h"
#include "outfile.h"

typedef struct {
  int64_t key;
  int32_t rank;
} RankKey;

static int cmp_key(const void *a, const void *b) {
  const RankKey *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key;
}

static int64_t order_key(Engine e, const PlanPool *P, const PlanRank *R) {
  const int64_t *s = P->size;
  const int32_t *c = R->coords;
  if (e == ENGINE_VLLM) return ((c[CO_DP] * s[CO_PP] + c[CO_PP]) * s[CO_CP] + c[CO_CP]) * s[CO_TP] + c[CO_TP];
  if (e == ENGINE_SGLANG) return ((c[CO_PP] * s[CO_DP] + c[CO_DP]) * s[CO_CP] + c[CO_CP]) * s[CO_TP] + c[CO_TP];
  return ((c[CO_PP] * s[CO_CP] + c[CO_CP]) * s[CO_DP] + c[CO_DP]) * s[CO_TP] + c[CO_TP];
}

static Engine launch_engine(const PlanLaunch *L) {
  return strcmp(L->engine, "vllm") == 0 ? ENGINE_VLLM : strcmp(L->engine, "sglang") == 0 ? ENGINE_SGLANG : ENGINE_TRTLLM;
}

/* Cuts the instance's ranks (in engine order) into per-node runs; the
 * runs share one device array. seen[node] is the last instance (plus one)
 * that had a run there, so a node met twice is found in O(1). */
static bool make_runs(Launch *l, Inst *in, RankKey *k, int64_t n, size_t *seen, size_t stamp) {
  const Plan *p = l->p;
  in->runs = rp_calloc((size_t)n, sizeof *in->runs);
  int32_t *dev = rp_calloc((size_t)n, sizeof *dev);
  for (int64_t i = 0; i < n; i++) {
    const PlanRank *R = &p->ranks[k[i].rank];
    InstRun *r = in->nruns ? &in->runs[in->nruns - 1] : NULL;
    if (!r || r->node != R->node) {
      if (seen[R->node] == stamp) /* dev is runs[0].dev by now: launch_free frees it */
        return lerr(l, "pool `%s` instance %d: its ranks on node %d are not one block of the engine's rank "
                       "order, which the engine's launcher needs",
                    in->P->name, in->instance, R->node);
      seen[R->node] = stamp;
      r = &in->runs[in->nruns++];
      r->node = R->node;
      r->first = i;
      r->dev = dev + i;
    }
    r->dev[r->n++] = R->device;
  }
  for (size_t j = 1; j < in->nruns; j++)
    if (in->runs[j].n != in->runs[0].n)
      return lerr(l, "pool `%s` instance %d: %d ranks on node %d but %d on node %d; the engine needs the same "
                     "number on every node of an instance",
                  in->P->name, in->instance, in->runs[j].n, in->runs[j].node, in->runs[0].n, in->runs[0].node);
  return true;
}

/* Gives each run its port block: 3 ports (HTTP, two rendezvous ports) and
 * one per rank of the instance (per-worker side channels), counted up
 * from launch.port per node in instance order. */
static bool give_ports(Launch *l, Inst *in) {
  int64_t block = 3 + in->P->instance_size;
  for (size_t j = 0; j < in->nruns; j++) {
    InstRun *r = &in->runs[j];
    r->port0 = l->next_port[r->node];
    l->next_port[r->node] += block;
    if (l->next_port[r->node] - 1 > 65535)
      return lerr(l, "node %d needs ports up to %lld, past 65535: lower serving.port (%lld) or run fewer "
                     "instances per node",
                  r->node, (long long)(l->next_port[r->node] - 1), (long long)l->L->port);
  }
  in->http = in->runs[0].port0;
  in->aux_a = in->http + 1;
  in->aux_b = in->http + 2;
  in->side = in->http + 3;
  return true;
}

/* Groups every run by node (node_first/node_runs), in instance order. */
static void index_nodes(Launch *l) {
  size_t nn = l->p->nnodes;
  l->node_first = rp_calloc(nn + 1, sizeof *l->node_first);
  for (size_t i = 0; i < l->ninst; i++)
    for (size_t j = 0; j < l->inst[i].nruns; j++) l->node_first[l->inst[i].runs[j].node + 1]++;
  for (size_t n = 0; n < nn; n++) l->node_first[n + 1] += l->node_first[n];
  size_t *at = rp_calloc(nn ? nn : 1, sizeof *at);
  memcpy(at, l->node_first, nn * sizeof *at);
  l->node_runs.items = rp_calloc(l->node_first[nn] ? l->node_first[nn] : 1, sizeof *l->node_runs.items);
  l->node_runs.len = l->node_runs.cap = l->node_first[nn];
  for (size_t i = 0; i < l->ninst; i++)
    for (size_t j = 0; j < l->inst[i].nruns; j++)
      l->node_runs.items[at[l->inst[i].runs[j].node]++] = (LNodeRun){i, j};
  free(at);
}

bool launch_instances(Launch *l) {
  const Plan *p = l->p;
  Engine e = launch_engine(l->L);
  size_t *seen = rp_calloc(p->nnodes ? p->nnodes : 1, sizeof *seen);
  for (size_t pi = 0; pi < p->npools; pi++) l->ninst += (size_t)p->pools[pi].replicas;
  l->inst = rp_calloc(l->ninst ? l->ninst : 1, sizeof *l->inst);
  size_t k = 0;
  for (size_t pi = 0; pi < p->npools; pi++) {
    const PlanPool *P = &p->pools[pi];
    RankKey *keys = rp_calloc((size_t)P->instance_size, sizeof *keys);
    for (int32_t i = 0; i < P->replicas; i++, k++) {
      Inst *in = &l->inst[k];
      *in = (Inst){pi, i, P, P->size[CO_TP], P->size[CO_PP], P->size[CO_DP], P->size[CO_CP],
                   P->size[CO_EP], P->size[CO_ETP], P->size[CO_DCP], 0, NULL, 0, 0, 0, 0};
      int64_t first = P->first_rank + (int64_t)i * P->instance_size;
      for (int64_t r = 0; r < P->instance_size; r++) {
        RP_ASSERT(p->ranks[first + r].instance == i && (size_t)p->ranks[first + r].pool == pi);
        keys[r] = (RankKey){order_key(e, P, &p->ranks[first + r]), (int32_t)(first + r)};
      }
      qsort(keys, (size_t)P->instance_size, sizeof *keys, cmp_key);
      if (!make_runs(l, in, keys, P->instance_size, seen, k + 1) || !give_ports(l, in)) {
        free(keys);
        free(seen);
        return false;
      }
    }
    free(keys);
  }
  free(seen);
  index_nodes(l);
  return true;
}

/* The commands of node n's script, each instance with ranks there in
 * instance order; *cmds counts those that start a process. */
static void node_body(Launch *l, size_t n, LRunFn fn, StrBuf *body, size_t *cmds) {
  for (size_t x = l->node_first[n]; x < l->node_first[n + 1]; x++) {
    const Inst *in = &l->inst[l->node_runs.items[x].inst];
    size_t j = l->node_runs.items[x].run;
    linst_comment(body, l, in, j);
    if (!fn(l, in, j, body)) continue;
    (*cmds)++;
    sb_puts(body, " \\\n    > \"$log_dir/");
    linst_name(body, l, in);
    sb_printf(body, ".node-%zu.log\" 2>&1 &\n\n", n);
  }
}

/* Shared fate (the tail of every node script, launch.sh and job.sbatch):
 * the first child to exit ends the script with its status (a bare `wait`
 * would return 0 whatever the children did), the others are stopped, and
 * rankrun --emitted or the job system sees the failure. */
const char launch_shared_fate[] =
    "# Shared fate: the first process to exit ends this script with its status.\n"
    "status=0\n"
    "wait -n || status=$?\n"
    "jobs -p | xargs -r kill 2>/dev/null || true\n"
    "wait || true\n"
    "exit \"$status\"\n";

void lnodes(Launch *l, LRunFn fn) {
  for (size_t n = 0; n < l->p->nnodes && !l->err; n++) {
    StrBuf cmd, body;
    sb_init(&cmd);
    sb_init(&body);
    size_t cmds = 0;
    node_body(l, n, fn, &cmd, &cmds);
    lhere(&body, &cmd);
    if (cmds) sb_puts(&body, "log_dir=${RANKPLAN_LOG_DIR:-.}\n");
    sb_puts(&body, "\n");
    sb_putn(&body, cmd.buf ? cmd.buf : "", cmd.len);
    sb_puts(&body, cmds ? launch_shared_fate : cmd.len ? "" : "# no ranks of the plan on this node\n");
    char name[40], what[80];
    snprintf(name, sizeof name, "node-%zu.sh", n);
    snprintf(what, sizeof what, "node %zu: the %s processes of the plan's ranks there", n, l->L->engine);
    lscript(l, lfile(l, name, true, (int32_t)n), what, &body);
    sb_free(&cmd);
    sb_free(&body);
  }
}

void lhere(StrBuf *body, const StrBuf *cmd) {
  if (cmd->buf && strstr(cmd->buf, "$here/")) sb_puts(body, "here=$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\n");
}

/* ---- the router ------------------------------------------------------- */

char *linst_host_name(const Launch *l, const Inst *in) {
  /* LWS names a group's leader pod SET-GROUP and gives its pods the
   * subdomain SET, the headless Service of the set (LWS_LEADER_ADDRESS) */
  if (l->k8s) return rp_sprintf("rankplan-%s-%d.rankplan-%s", in->P->name, in->instance, in->P->name);
  return lhost_name(l, in->runs[0].node);
}

const Inst *linst_ports(const Launch *l, const Inst *in) { return l->k8s ? in - in->instance : in; }

const char *linst_host(Launch *l, const Inst *in, char *buf) {
  if (!l->k8s) return lhost(l, in->runs[0].node, buf);
  char *h = linst_host_name(l, in);
  snprintf(buf, LHOST_MAX, "%s", h);
  free(h);
  return buf;
}

void lrouter_script(Launch *l, LRouterFn fn, const char *what) {
  StrBuf cmd, body;
  sb_init(&cmd);
  sb_init(&body);
  fn(l, &cmd);
  lhere(&body, &cmd);
  sb_putn(&body, cmd.buf ? cmd.buf : "", cmd.len);
  lscript(l, lfile(l, "router.sh", true, l->router_node), what, &body);
  sb_free(&cmd);
  sb_free(&body);
}

/* ---- manifest and output directory ------------------------------------ */

static int cmp_file(const void *a, const void *b) {
  return strcmp(((const LFile *)a)->name, ((const LFile *)b)->name);
}

static void put_endpoints(Launch *l, StrBuf *sb) {
  sb_puts(sb, "  \"endpoints\": [");
  for (size_t i = 0; i < l->ninst; i++) {
    const Inst *in = &l->inst[i];
    char *h = lhost_name(l, in->runs[0].node);
    sb_printf(sb, "%s\n    {\"pool\":", i ? "," : "");
    sb_json_str(sb, in->P->name);
    sb_printf(sb, ",\"instance\":%d,\"role\":\"%s\",\"node\":%d,\"host\":", in->instance, in->P->role, in->runs[0].node);
    sb_json_str(sb, h);
    sb_printf(sb, ",\"port\":%lld,\"nodes\":%zu,\"gpus\":%lld}", (long long)in->http, in->nruns,
              (long long)in->P->instance_size);
    free(h);
  }
  sb_puts(sb, l->ninst ? "\n  ],\n" : "],\n");
  sb_puts(sb, "  \"router\": ");
  if (!l->router_port) {
    sb_puts(sb, "null,\n");
    return;
  }
  char *h = lhost_name(l, l->router_node);
  sb_printf(sb, "{\"node\":%d,\"host\":", l->router_node);
  sb_json_str(sb, h);
  sb_printf(sb, ",\"port\":%lld},\n", (long long)l->router_port);
  free(h);
}

bool lpool_first(Launch *l, size_t i, const char *why) {
  const Inst *in = &l->inst[i];
  if (in->instance == 0) return true;
  const Inst *first = &l->inst[i - (size_t)in->instance];
  if (in->nruns != first->nruns || in->runs[0].n != first->runs[0].n)
    lerr(l, "pool `%s`: its instances span different node counts; %s", in->P->name, why);
  return false;
}

void launch_manifest(Launch *l) {
  if (l->files.len) qsort(l->files.items, l->files.len, sizeof *l->files.items, cmp_file);
  StrBuf sb;
  sb_init(&sb);
  sb_printf(&sb, "{\n  \"format\": \"rankplan.emit/1\",\n  \"target\": \"%s\",\n  \"engine\": \"%s\",\n"
                 "  \"engine_version\": ",
            launch_target_name(l->target), l->L->engine);
  sb_json_str(&sb, l->L->engine_version);
  sb_printf(&sb, ",\n  \"spec_sha256\": \"%s\",\n  \"nodes\": %zu,\n", l->p->spec_sha256, l->p->nnodes);
  put_endpoints(l, &sb);
  sb_puts(&sb, "  \"files\": [");
  for (size_t i = 0; i < l->files.len; i++) {
    const LFile *f = &l->files.items[i];
    char hex[65];
    rp_sha256_hex(f->text.buf ? f->text.buf : "", f->text.len, hex);
    sb_printf(&sb, "%s\n    {\"path\":", i ? "," : "");
    sb_json_str(&sb, f->name);
    sb_printf(&sb, ",\"mode\":\"%s\",\"node\":", f->exec ? "0755" : "0644");
    if (f->node >= 0) sb_printf(&sb, "%d", f->node);
    else sb_puts(&sb, "null");
    sb_printf(&sb, ",\"bytes\":%zu,\"sha256\":\"%s\"}", f->text.len, hex);
  }
  sb_puts(&sb, l->files.len ? "\n  ]\n}\n" : "]\n}\n");
  StrBuf *m = lfile(l, "manifest.json", false, -1);
  sb_free(m);
  *m = sb;
}
