/*
 * emit_k8s.c: the `k8s` target: k8s.yaml with one LeaderWorkerSet
 * (leaderworkerset.x-k8s.io/v1) and one Service per pool.
 *
 * A LeaderWorkerSet group is one engine instance: `size` is the nodes per
 * instance, `replicas` the pool's replicas, each pod asks for the GPUs the
 * plan puts on one node of the instance (nvidia.com/gpu) and runs the
 * same engine command as that node's script, with the instance's head
 * named by LWS_LEADER_ADDRESS, a pod's own address by POD_IP (downward
 * API) and a worker's rank by LWS_WORKER_INDEX. The Service selects every
 * instance's leader pod (worker index 0) on the HTTP port. The device
 * numbers of the plan do not apply (the device plugin hands a pod its
 * GPUs); the node placement is the scheduler's.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

bool ldns_label(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n <= 40 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && s[0] != '-' &&
         s[n - 1] != '-';
}

/* The command text as a YAML block scalar under `args:` of the container. */
static void put_args(StrBuf *y, const StrBuf *cmd, const char *prelude) {
  sb_puts(y, "            command: [\"/bin/sh\", \"-c\"]\n            args:\n              - |\n");
  StrBuf all;
  sb_init(&all);
  sb_puts(&all, prelude);
  sb_putn(&all, cmd->buf ? cmd->buf : "", cmd->len);
  const char *p = all.buf ? all.buf : "";
  /* no CUDA_VISIBLE_DEVICES: the line may open with a bare continuation */
  while (*p == ' ' || (p[0] == '\\' && p[1] == '\n')) p += *p == ' ' ? 1 : 2;
  lindent(y, p, "                ");
  sb_free(&all);
}

/* TensorRT-LLM reads its --config YAML from a file: the pod writes it. */
static void trtllm_prelude(Launch *l, const Inst *in, StrBuf *pre) {
  StrBuf name;
  sb_init(&name);
  sb_puts(&name, "trtllm-");
  linst_name(&name, l, in);
  sb_puts(&name, ".yaml");
  sb_puts(pre, "here=/tmp/rankplan\nmkdir -p \"$here\"\n");
  for (size_t i = 0; i < l->files.len; i++)
    if (strcmp(l->files.items[i].name, name.buf) == 0)
      sb_printf(pre, "cat > \"$here/%s\" <<'EOF'\n%sEOF\n", name.buf, l->files.items[i].text.buf);
  sb_free(&name);
}

static void put_template(Launch *l, StrBuf *y, const char *key, const Inst *in, size_t run, LRunFn fn) {
  StrBuf cmd, pre;
  sb_init(&cmd);
  sb_init(&pre);
  fn(l, in, run, &cmd);
  if (strcmp(l->L->engine, "trtllm") == 0) trtllm_prelude(l, in, &pre);
  sb_printf(y, "    %s:\n      metadata:\n        labels:\n          rankplan.io/pool: %s\n      spec:\n"
               "        containers:\n          - name: engine\n",
            key, in->P->name);
  sb_puts(y, "            image: ");
  sb_json_str(y, l->L->image);
  sb_puts(y, "\n");
  put_args(y, &cmd, pre.buf ? pre.buf : "");
  sb_printf(y, "            env:\n              - name: POD_IP\n                valueFrom:\n                  fieldRef:\n"
               "                    fieldPath: status.podIP\n            ports:\n              - containerPort: %lld\n"
               "            resources:\n              limits:\n                nvidia.com/gpu: %d\n",
            (long long)in->http, in->runs[run].n);
  sb_free(&cmd);
  sb_free(&pre);
}

static void put_pool(Launch *l, StrBuf *y, const Inst *in, LRunFn fn) {
  const PlanPool *P = in->P;
  sb_printf(y, "---\n# pool %s (%s): %lld instance(s) of %zu pod(s), %d GPUs each; tp %lld, pp %lld, dp %lld, ep %lld\n",
            P->name, P->role, (long long)P->replicas, in->nruns, in->runs[0].n, (long long)in->tp,
            (long long)in->pp, (long long)in->dp, (long long)in->ep);
  sb_printf(y, "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata:\n  name: rankplan-%s\n"
               "  labels:\n    app.kubernetes.io/managed-by: rankplan\n    rankplan.io/pool: %s\nspec:\n"
               "  replicas: %lld\n  leaderWorkerTemplate:\n    size: %zu\n    restartPolicy: RecreateGroupOnPodRestart\n",
            P->name, P->name, (long long)P->replicas, in->nruns);
  l->k8s_head = in->runs[0].node;
  if (in->nruns > 1) put_template(l, y, "leaderTemplate", in, 0, fn);
  put_template(l, y, "workerTemplate", in, in->nruns > 1 ? 1 : 0, fn);
  sb_printf(y, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: rankplan-%s\n  labels:\n"
               "    app.kubernetes.io/managed-by: rankplan\nspec:\n  selector:\n"
               "    leaderworkerset.sigs.k8s.io/name: rankplan-%s\n    leaderworkerset.sigs.k8s.io/worker-index: \"0\"\n"
               "  ports:\n    - name: http\n      port: %lld\n      targetPort: %lld\n",
            P->name, P->name, (long long)in->http, (long long)in->http);
}

void emit_k8s(Launch *l) {
  LRunFn fn = strcmp(l->L->engine, "vllm") == 0 ? lrun_vllm : strcmp(l->L->engine, "sglang") == 0 ? lrun_sglang
                                                                                                   : lrun_trtllm;
  l->k8s = true;
  StrBuf y;
  sb_init(&y);
  sb_printf(&y, "# The plan's pools as LeaderWorkerSets (kubectl apply -f k8s.yaml); written by rankplan from plan "
                "%.16s...\n",
            l->p->spec_sha256);
  for (size_t i = 0; i < l->ninst && !l->err; i++) {
    const Inst *in = &l->inst[i];
    if (!lpool_first(l, i, "a LeaderWorkerSet has one group size")) continue;
    if (!ldns_label(in->P->name))
      lerr(l, "pool `%s`: the k8s target names objects after pools: lowercase letters, digits and `-`, at most 40",
           in->P->name);
    else put_pool(l, &y, in, fn);
  }
  StrBuf *out = lfile(l, "k8s.yaml", false, -1);
  sb_free(out);
  *out = y;
}
