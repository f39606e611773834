/*
 * emit_k8s.c: the `k8s` target: k8s.yaml with one LeaderWorkerSet
 * (leaderworkerset.x-k8s.io/v1) and one Service per pool, and for a
 * disaggregated plan the router as a Deployment (apps/v1) with its Service.
 *
 * A LeaderWorkerSet group is one engine instance: `size` is the nodes per
 * instance, `replicas` the pool's replicas, each pod asks for the GPUs the
 * plan puts on one node of the instance (nvidia.com/gpu, amd.com/gpu) and runs the
 * same engine command as that node's script, with the instance's head
 * named by LWS_LEADER_ADDRESS, a pod's own address by POD_IP (downward
 * API) and a worker's rank by LWS_WORKER_INDEX. The Service POOL-http
 * selects every instance's leader pod (worker index 0) on the HTTP port;
 * the name of the set itself belongs to the headless Service that the LWS
 * controller creates for the pods' DNS names. The router runs the same
 * command as router.sh, naming each instance by its leader pod's DNS name
 * under that headless Service. The device numbers of the plan do not
 * apply (the device plugin hands a pod its GPUs); the node placement is
 * the scheduler's.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

/* A pod's /dev/shm: an in-memory emptyDir, as vLLM's LWS example mounts
 * (docs/deployment/frameworks/lws.md), where the container's default is 64
 * MiB, too small for NCCL's shared-memory transport and the engines' worker
 * queues; the size is the Dynamo operator's default for the same volume
 * (docs/engines.md, "Kubernetes"). */
#define K8S_SHM_SIZE "8Gi"

bool ldns_label(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n <= 40 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && s[0] != '-' &&
         s[n - 1] != '-';
}

/* The command text as a YAML block scalar under `args:` of a container
 * whose keys are indented by ind spaces. */
static void put_args(StrBuf *y, const StrBuf *cmd, const char *prelude, int ind) {
  sb_printf(y, "%*scommand: [\"/bin/sh\", \"-c\"]\n%*sargs:\n%*s- |\n", ind, "", ind, "", ind + 2, "");
  /* no CUDA_VISIBLE_DEVICES: the command may open with a bare continuation */
  const char *c = cmd->buf ? cmd->buf : "";
  while (*c == ' ' || (c[0] == '\\' && c[1] == '\n')) c += *c == ' ' ? 1 : 2;
  StrBuf all;
  sb_init(&all);
  sb_puts(&all, prelude);
  sb_puts(&all, c);
  lindent(y, all.buf ? all.buf : "", ind + 4);
  sb_free(&all);
}

/* The files a command reads as "$here/NAME" (TensorRT-LLM's --config YAML,
 * disagg.yaml): the pod writes them before it starts. */
static void here_files(Launch *l, const StrBuf *cmd, StrBuf *pre) {
  if (!cmd->buf || !strstr(cmd->buf, "\"$here/")) return;
  sb_puts(pre, "here=/tmp/rankplan\nmkdir -p \"$here\"\n");
  for (size_t i = 0; i < l->files.len; i++) {
    char *ref = rp_sprintf("\"$here/%s\"", l->files.items[i].name);
    if (strstr(cmd->buf, ref))
      sb_printf(pre, "cat > \"$here/%s\" <<'EOF'\n%sEOF\n", l->files.items[i].name, l->files.items[i].text.buf);
    free(ref);
  }
}

/* The device plugin's resource: NVIDIA's, or AMD's `amd.com/gpu` (the
 * ROCm device plugin, ROCm/k8s-device-plugin, example/pod/alexnet-gpu.yaml:
 * "amd.com/gpu: 1 # requesting a GPU") for a plan on AMD GPUs. */
static const char *k8s_gpu_resource(const PlanLaunch *L) { return L->amd ? "amd.com/gpu" : "nvidia.com/gpu"; }

static void put_template(Launch *l, StrBuf *y, const char *key, const Inst *in, size_t run, LRunFn fn) {
  StrBuf cmd, pre;
  sb_init(&cmd);
  sb_init(&pre);
  fn(l, in, run, &cmd);
  here_files(l, &cmd, &pre);
  sb_printf(y, "    %s:\n      metadata:\n        labels:\n          rankplan.io/pool: %s\n      spec:\n"
               "        containers:\n          - name: engine\n",
            key, in->P->name);
  sb_puts(y, "            image: ");
  sb_json_str(y, l->L->image);
  sb_puts(y, "\n");
  put_args(y, &cmd, pre.buf ? pre.buf : "", 12);
  sb_printf(y, "            env:\n              - name: POD_IP\n                valueFrom:\n                  fieldRef:\n"
               "                    fieldPath: status.podIP\n            ports:\n              - containerPort: %lld\n"
               "            resources:\n              limits:\n                %s: %d\n"
               "            volumeMounts:\n              - name: dshm\n                mountPath: /dev/shm\n"
               "        volumes:\n          - name: dshm\n            emptyDir:\n              medium: Memory\n"
               "              sizeLimit: %s\n",
            (long long)in->http, k8s_gpu_resource(l->L), in->runs[run].n, K8S_SHM_SIZE);
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
  sb_printf(y, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: rankplan-%s-http\n  labels:\n"
               "    app.kubernetes.io/managed-by: rankplan\nspec:\n  selector:\n"
               "    leaderworkerset.sigs.k8s.io/name: rankplan-%s\n    leaderworkerset.sigs.k8s.io/worker-index: \"0\"\n"
               "  ports:\n    - name: http\n      port: %lld\n      targetPort: %lld\n",
            P->name, P->name, (long long)in->http, (long long)in->http);
}

/* The router as a Deployment of one pod and a Service on its port. */
static void put_router(Launch *l, StrBuf *y, LRouterFn fn) {
  StrBuf cmd, pre;
  sb_init(&cmd);
  sb_init(&pre);
  fn(l, &cmd);
  here_files(l, &cmd, &pre);
  sb_printf(y, "---\n# the router: clients send requests to Service rankplan-router, port %lld\n"
               "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: rankplan-router\n  labels:\n"
               "    app.kubernetes.io/managed-by: rankplan\n    rankplan.io/component: router\nspec:\n"
               "  replicas: 1\n  selector:\n    matchLabels:\n      rankplan.io/component: router\n  template:\n"
               "    metadata:\n      labels:\n        rankplan.io/component: router\n    spec:\n      containers:\n"
               "        - name: router\n          image: ",
            (long long)l->router_port);
  sb_json_str(y, l->L->image);
  sb_puts(y, "\n");
  put_args(y, &cmd, pre.buf ? pre.buf : "", 10);
  sb_printf(y, "          ports:\n            - containerPort: %lld\n", (long long)l->router_port);
  sb_printf(y, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: rankplan-router\n  labels:\n"
               "    app.kubernetes.io/managed-by: rankplan\nspec:\n  selector:\n    rankplan.io/component: router\n"
               "  ports:\n    - name: http\n      port: %lld\n      targetPort: %lld\n",
            (long long)l->router_port, (long long)l->router_port);
  sb_free(&cmd);
  sb_free(&pre);
}

/* Every Service name (the sets' headless ones, POOL-http, the router's)
 * once: pool names such as `a` and `a-http` would make two the same. */
static void check_names(Launch *l) {
  RP_VEC(char *) names = {0};
  for (size_t i = 0; i < l->ninst; i++)
    if (l->inst[i].instance == 0) {
      rp_vec_push(&names, rp_sprintf("rankplan-%s", l->inst[i].P->name));
      rp_vec_push(&names, rp_sprintf("rankplan-%s-http", l->inst[i].P->name));
    }
  if (l->router_port) rp_vec_push(&names, rp_strdup("rankplan-router"));
  for (size_t i = 0; i < names.len; i++)
    for (size_t j = i + 1; j < names.len; j++)
      if (strcmp(names.items[i], names.items[j]) == 0)
        lerr(l, "the k8s target would name two Services `%s`: rename the pool whose name makes it", names.items[i]);
  for (size_t i = 0; i < names.len; i++) free(names.items[i]);
  free(names.items);
}

void emit_k8s(Launch *l) {
  bool vllm = strcmp(l->L->engine, "vllm") == 0, sglang = strcmp(l->L->engine, "sglang") == 0;
  LRunFn fn = vllm ? lrun_vllm : sglang ? lrun_sglang : lrun_trtllm;
  LRouterFn rf = vllm ? lrouter_vllm : sglang ? lrouter_sglang : lrouter_trtllm;
  l->k8s = true;
  StrBuf y;
  sb_init(&y);
  sb_printf(&y, "# The plan's pools as LeaderWorkerSets, and its router (kubectl apply -f k8s.yaml); written by rankplan "
                "from plan "
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
  bool router = !l->err && lrouter_place(l);
  if (!l->err) check_names(l);
  if (router && !l->err) put_router(l, &y, rf);
  StrBuf *out = lfile(l, "k8s.yaml", false, -1);
  sb_free(out);
  *out = y;
}
