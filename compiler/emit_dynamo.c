/*
 * emit_dynamo.c: the `dynamo` target: dynamo.yaml, one DynamoGraphDeployment
 * (nvidia.com/v1alpha1) for NVIDIA Dynamo's Kubernetes operator: a frontend
 * service and one worker service per pool, and for TensorRT-LLM a
 * ConfigMap with the engine YAMLs (docs/engines.md, "Dynamo").
 *
 * Read from github.com/ai-dynamo/dynamo at commit e20adb44 (Dynamo 0.6.1):
 *  - `python3 -m dynamo.vllm` and `python3 -m dynamo.sglang` parse their
 *    own flags and then the engine's (vLLM's AsyncEngineArgs, SGLang's
 *    ServerArgs; components/src/dynamo/{vllm,sglang}/args.py), so their
 *    command is the engine target's with the module in place of the
 *    engine's command. dynamo.vllm takes the model as --model, has none of
 *    `vllm serve`'s server flags (--port, --headless), refuses
 *    --kv-transfer-config next to its --connector (default nixl), and takes
 *    --is-prefill-worker for a prefill worker;
 *  - `python3 -m dynamo.trtllm` has flags of its own for what trtllm-serve
 *    spells otherwise (components/src/dynamo/trtllm/utils/trtllm_utils.py),
 *    and reads the engine YAML with --extra-engine-args (main.py); the
 *    trtllm target's command is written with that spelling (respell);
 *  - the operator writes the frontend's command and port itself
 *    (internal/dynamo/component_frontend.go);
 *  - resources.limits.gpu is per pod; a multi-node instance is
 *    multinode.nodeCount pods (the CRD's field comments), and the operator
 *    adds the multi-node launch to the worker command
 *    (internal/dynamo/backend_vllm.go: Ray for tp x pp over nodes, else
 *    --data-parallel-address/-size-local/-rpc-port/-start-rank;
 *    backend_sglang.go: --dist-init-addr --nnodes --node-rank;
 *    backend_trtllm.go: mpirun over the pods), joining the arguments with
 *    spaces, unquoted (utils.go, backend_trtllm.go).
 * So each pool's command is its instance's head-node command without
 * those flags, as a list of arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

typedef RP_VEC(char *) Words;

/* The worker module of each engine (Dynamo 0.6.1, components/src/dynamo/). */
static const char *module_of(const char *engine) {
  return strcmp(engine, "vllm") == 0     ? "dynamo.vllm"
         : strcmp(engine, "sglang") == 0 ? "dynamo.sglang"
                                         : "dynamo.trtllm";
}

/* Dynamo's spelling of a rankplan term where it is not the engine entry's:
 * dynamo.vllm passes vLLM's own --model; dynamo.trtllm's flags are its own
 * (trtllm_utils.py cmd_line_args); a dynamo.trtllm term not listed has no
 * flag there. */
static struct {
  char engine[8], term[24], flag[32];
} respell[] = {
    {"vllm", "model", "--model"},
    {"trtllm", "model", "--model-path"},
    {"trtllm", "served_model_name", "--served-model-name"},
    {"trtllm", "max_model_len", "--max-seq-len"},
    {"trtllm", "max_num_seqs", "--max-batch-size"},
    {"trtllm", "max_num_batched_tokens", "--max-num-tokens"},
    {"trtllm", "memory_fraction", "--free-gpu-memory-fraction"},
    {"trtllm", "gpus_per_node", "--gpus-per-node"},
    {"trtllm", "config", "--extra-engine-args"},
};
static char trt_tp[] = "--tensor-parallel-size", trt_pp[] = "--pipeline-parallel-size",
            trt_ep[] = "--expert-parallel-size";

void ldynamo_flags(Launch *l, const Inst *in, StrBuf *sb) {
  bool trt = strcmp(l->L->engine, "trtllm") == 0;
  if (trt) sb_printf(sb, " \\\n    --kv-block-size %lld", (long long)l->L->kv_block); /* its router's block */
  if (strcmp(in->P->role, "both") == 0) return;
  if (trt) {
    sb_printf(sb, " \\\n    --disaggregation-mode %s", in->P->role); /* handler_base.py DisaggregationMode */
    return;
  }
  /* dynamo.vllm's --connector words (args.py VALID_CONNECTORS) that name a
   * rankplan KV transfer: only NIXL */
  if (strcmp(l->L->kv_transfer, "nixl") != 0) {
    lerr(l, "pool `%s`: Dynamo's vLLM worker moves KV with the connectors nixl, lmcache or kvbm; rankplan's "
            "`serving.kv_transfer: %s` is none of them",
         in->P->name, l->L->kv_transfer);
    return;
  }
  sb_puts(sb, " \\\n    --connector nixl");
  if (strcmp(in->P->role, "prefill") == 0) sb_puts(sb, " \\\n    --is-prefill-worker");
}

/* The engine's entry as Dynamo's worker spells it: the module as the
 * command, respelled flags; for TensorRT-LLM only Dynamo's own. flags
 * receives the new array (caller frees). */
static EngineCaps respelled(const EngineCaps *c, const char *engine, char *command, EngineKV **flags) {
  EngineCaps dc = *c;
  bool trt = strcmp(engine, "trtllm") == 0;
  size_t n = 0;
  *flags = rp_calloc(c->nflags + RP_ARRAY_LEN(respell), sizeof **flags);
  for (size_t i = 0; i < RP_ARRAY_LEN(respell); i++)
    if (strcmp(respell[i].engine, engine) == 0) (*flags)[n++] = (EngineKV){respell[i].term, respell[i].flag};
  for (size_t i = 0; i < c->nflags && !trt; i++)
    if (!engine_kv(*flags, n, c->flags[i].key)) (*flags)[n++] = c->flags[i];
  dc.flags = *flags;
  dc.nflags = n;
  dc.command = command;
  if (trt) {
    for (int d = 0; d < ED__COUNT; d++) dc.dim[d].flag = NULL;
    dc.dim[ED_TP].flag = trt_tp;
    dc.dim[ED_PP].flag = trt_pp;
    dc.dim[ED_EP].flag = trt_ep;
  }
  return dc;
}

/* Splits a command as lq and the run functions write it (words, ` \`
 * continuations, single quotes with '\'' inside) into words; *quoted: some
 * word needed quoting. */
static void split_words(const char *s, Words *out, bool *quoted) {
  StrBuf w;
  sb_init(&w);
  *quoted = false;
  while (*s) {
    while (*s == ' ' || *s == '\n' || (s[0] == '\\' && s[1] == '\n')) s += *s == '\\' ? 2 : 1;
    if (!*s) break;
    while (*s && *s != ' ' && *s != '\n') {
      if (*s == '\'') {
        const char *e = strchr(s + 1, '\'');
        if (!e) rp_internal("an unterminated quote in a dynamo worker command");
        sb_putn(&w, s + 1, (size_t)(e - s - 1));
        s = e + 1;
        *quoted = true;
      } else if (s[0] == '\\' && s[1] == '\'') {
        sb_putc(&w, '\'');
        s += 2;
      } else if (strchr("\\\"$`", *s)) {
        rp_internal("a dynamo worker command holds shell syntax: %s", s);
      } else {
        sb_putc(&w, *s++);
      }
    }
    rp_vec_push(out, sb_take(&w));
  }
  sb_free(&w);
}

static void put_args(Launch *l, StrBuf *y, const Inst *in, const StrBuf *cmd) {
  Words w = {0};
  bool quoted = false;
  split_words(cmd->buf ? cmd->buf : "", &w, &quoted);
  const char *mod = module_of(l->L->engine);
  if (w.len < 3 || strcmp(w.items[0], "python3") || strcmp(w.items[1], "-m") || strcmp(w.items[2], mod))
    rp_internal("the dynamo worker command of pool `%s` does not start with python3 -m %s", in->P->name, mod);
  if (quoted && in->nruns > 1)
    lerr(l, "pool `%s`: an argument needs shell quoting, but Dynamo's operator joins a multi-node worker's "
            "arguments with spaces, unquoted; use names and paths of letters, digits and ._/:=,@%%+-",
         in->P->name);
  sb_printf(y, "          command: [\"python3\", \"-m\", \"%s\"]\n          args:\n", mod);
  for (size_t i = 3; i < w.len; i++) {
    sb_puts(y, "            - ");
    sb_json_str(y, w.items[i]);
    sb_putc(y, '\n');
  }
  for (size_t i = 0; i < w.len; i++) free(w.items[i]);
  free(w.items);
}

static void put_service_head(Launch *l, StrBuf *y, const char *name, const char *type) {
  sb_printf(y, "    %s:\n      dynamoNamespace: rankplan-%.12s\n      componentType: %s\n", name, l->p->spec_sha256,
            type);
}

/* The pod's image; with `config`, the engine YAMLs' ConfigMap mounted at
 * LDYNAMO_CONFIG_DIR. */
static void put_image(Launch *l, StrBuf *y, bool config) {
  sb_puts(y, "      extraPodSpec:\n");
  if (config)
    sb_printf(y, "        volumes:\n          - name: rankplan-config\n            configMap:\n"
                 "              name: rankplan-%.12s-trtllm\n",
              l->p->spec_sha256);
  sb_puts(y, "        mainContainer:\n          image: ");
  sb_json_str(y, l->L->image);
  sb_putc(y, '\n');
  if (config)
    sb_puts(y, "          volumeMounts:\n            - name: rankplan-config\n              mountPath: " LDYNAMO_CONFIG_DIR
               "\n              readOnly: true\n");
}

/* The worker's environment: vLLM's sampler setting (lvllm_sampler_env),
 * which the shell targets write before the command. */
static void put_envs(const Launch *l, StrBuf *y) {
  const char *env = strcmp(l->L->engine, "vllm") == 0 ? lvllm_sampler_env(l) : NULL;
  const char *eq = env ? strchr(env, '=') : NULL;
  if (!eq) return; /* the catalog reader admits only NAME=value */
  sb_printf(y, "      envs:\n        - name: %.*s\n          value: ", (int)(eq - env), env);
  sb_json_str(y, eq + 1);
  sb_putc(y, '\n');
}

static void put_worker(Launch *l, StrBuf *y, const Inst *in, LRunFn fn) {
  const PlanPool *P = in->P;
  sb_printf(y, "    # pool %s (%s): %lld instance(s) of %zu node(s), %d GPUs each; tp %lld, pp %lld, dp %lld, ep %lld\n",
            P->name, P->role, (long long)P->replicas, in->nruns, in->runs[0].n, (long long)in->tp,
            (long long)in->pp, (long long)in->dp, (long long)in->ep);
  put_service_head(l, y, P->name, "worker");
  if (strcmp(P->role, "both") != 0) sb_printf(y, "      subComponentType: %s\n", P->role);
  sb_printf(y, "      replicas: %lld\n", (long long)P->replicas);
  if (in->nruns > 1) sb_printf(y, "      multinode:\n        nodeCount: %zu\n", in->nruns);
  sb_printf(y, "      resources:\n        limits:\n          gpu: \"%d\"\n", in->runs[0].n);
  put_envs(l, y);
  put_image(l, y, strcmp(l->L->engine, "trtllm") == 0);
  StrBuf cmd;
  sb_init(&cmd);
  if (fn(l, in, 0, &cmd) && !l->err) put_args(l, y, in, &cmd);
  sb_free(&cmd);
}

/* The pools as services: one per pool, its instances alike. */
static void put_workers(Launch *l, StrBuf *y, LRunFn fn) {
  for (size_t i = 0; i < l->ninst && !l->err; i++) {
    const Inst *in = &l->inst[i];
    if (!lpool_first(l, i, "a Dynamo service has one node count")) continue;
    if (!ldns_label(in->P->name) || strcmp(in->P->name, "frontend") == 0)
      lerr(l, "pool `%s`: the dynamo target names services after pools: lowercase letters, digits and `-`, at "
              "most 40, and not `frontend`",
           in->P->name);
    else put_worker(l, y, in, fn);
  }
}

/* What dynamo.trtllm has no flag for (trtllm_utils.py). */
static void trtllm_lacks(Launch *l) {
  if (l->L->revision)
    lerr(l, "Dynamo's TensorRT-LLM worker has no flag for the model revision (`model.revision: %s`)", l->L->revision);
  for (size_t i = 0; i < l->ninst; i++)
    if (l->inst[i].cp > 1)
      lerr(l, "pool `%s`: Dynamo's TensorRT-LLM worker has no flag for context parallelism (cp %lld)",
           l->inst[i].P->name, (long long)l->inst[i].cp);
}

/* The engine YAMLs the TensorRT-LLM workers wrote, as one ConfigMap. */
static void put_config_map(Launch *l, StrBuf *y) {
  sb_printf(y, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rankplan-%.12s-trtllm\n  labels:\n"
               "    app.kubernetes.io/managed-by: rankplan\ndata:\n",
            l->p->spec_sha256);
  for (size_t i = 0; i < l->files.len; i++) {
    const LFile *f = &l->files.items[i];
    size_t n = strlen(f->name);
    if (strncmp(f->name, "trtllm-", 7) != 0 || n < 5 || strcmp(f->name + n - 5, ".yaml") != 0) continue;
    sb_printf(y, "  %s: |\n", f->name);
    lindent(y, f->text.buf ? f->text.buf : "", 4);
  }
}

void emit_dynamo(Launch *l) {
  const char *eng = l->L->engine, *mod = module_of(eng);
  bool trt = strcmp(eng, "trtllm") == 0;
  if (trt) trtllm_lacks(l);
  if (l->err) return;
  char *command = rp_sprintf("python3 -m %s", mod);
  EngineKV *flags = NULL;
  EngineCaps dc = respelled(l->c, eng, command, &flags);
  const EngineCaps *saved = l->c;
  l->c = &dc;
  l->dynamo = true;
  StrBuf y, svc;
  sb_init(&y);
  sb_init(&svc);
  put_service_head(l, &svc, "frontend", "frontend");
  sb_puts(&svc, "      replicas: 1\n"); /* one, as in Dynamo's examples/backends/{vllm,sglang}/deploy/ */
  put_image(l, &svc, false);
  put_workers(l, &svc, strcmp(eng, "vllm") == 0 ? lrun_vllm : strcmp(eng, "sglang") == 0 ? lrun_sglang : lrun_trtllm);
  l->c = saved;
  sb_printf(&y, "# The plan as one DynamoGraphDeployment (kubectl apply -f dynamo.yaml); written by rankplan from "
                "plan %.16s...\n",
            l->p->spec_sha256);
  if (trt) put_config_map(l, &y);
  sb_printf(&y, "---\napiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata:\n"
                "  name: rankplan-%.12s\n  labels:\n    app.kubernetes.io/managed-by: rankplan\nspec:\n"
                "  backendFramework: %s\n  services:\n",
            l->p->spec_sha256, eng);
  sb_putn(&y, svc.buf ? svc.buf : "", svc.len);
  sb_free(&svc);
  free(flags);
  free(command);
  StrBuf *out = lfile(l, "dynamo.yaml", false, -1);
  sb_free(out);
  *out = y;
}
