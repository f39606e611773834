/*
 * emit_dynamo.c: the `dynamo` target: dynamo.yaml, one DynamoGraphDeployment
 * (nvidia.com/v1alpha1) for NVIDIA Dynamo's Kubernetes operator: a frontend
 * service and one worker service per pool (docs/engines.md, "Dynamo").
 *
 * Read from github.com/ai-dynamo/dynamo at commit e20adb44 (Dynamo 0.6.1):
 *  - the workers, `python3 -m dynamo.vllm` and `python3 -m dynamo.sglang`,
 *    parse their own flags and then the engine's (vLLM's AsyncEngineArgs,
 *    SGLang's ServerArgs; components/src/dynamo/{vllm,sglang}/args.py), so
 *    a worker's command is the engine target's, with the module in place of
 *    the engine's command. dynamo.vllm takes the model as --model, has none
 *    of `vllm serve`'s server flags (--port, --headless), refuses
 *    --kv-transfer-config next to its --connector (default nixl), and takes
 *    --is-prefill-worker for a prefill worker;
 *  - the operator writes the frontend's command and port itself
 *    (internal/dynamo/component_frontend.go);
 *  - resources.limits.gpu is per pod; a multi-node instance is
 *    multinode.nodeCount pods (the CRD's field comments), and the operator
 *    adds the engine's multi-node flags to the worker command
 *    (internal/dynamo/backend_vllm.go: Ray for tp x pp over nodes, else
 *    --data-parallel-address/-size-local/-rpc-port/-start-rank;
 *    backend_sglang.go: --dist-init-addr --nnodes --node-rank), joining the
 *    arguments with spaces, unquoted (internal/dynamo/utils.go).
 * So each pool's command is its instance's head-node command in the
 * engine's own words without those flags, as a list of arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

typedef RP_VEC(char *) Words;

/* The worker module of each engine (Dynamo 0.6.1, components/src/dynamo/). */
static const char *module_of(const char *engine) {
  return strcmp(engine, "vllm") == 0 ? "dynamo.vllm" : strcmp(engine, "sglang") == 0 ? "dynamo.sglang" : NULL;
}

void ldynamo_vllm_kv(Launch *l, const Inst *in, StrBuf *sb) {
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

static void put_image(Launch *l, StrBuf *y) {
  sb_puts(y, "      extraPodSpec:\n        mainContainer:\n          image: ");
  sb_json_str(y, l->L->image);
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
  put_image(l, y);
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

void emit_dynamo(Launch *l) {
  const char *mod = module_of(l->L->engine);
  if (!mod) {
    lerr(l, "the dynamo target writes vLLM and SGLang workers; Dynamo's TensorRT-LLM worker (dynamo.trtllm) "
            "takes its own flags, not trtllm-serve's, and no catalog entry holds them");
    return;
  }
  /* the engine's entry with Dynamo's module as the command; dynamo.vllm
   * takes the model as --model (vLLM's own flag), not positionally */
  EngineCaps dc = *l->c;
  char *command = rp_sprintf("python3 -m %s", mod), model_flag[] = "--model";
  EngineKV *flags = rp_calloc(dc.nflags ? dc.nflags : 1, sizeof *flags);
  for (size_t i = 0; i < dc.nflags; i++) {
    flags[i] = dc.flags[i];
    if (strcmp(dc.flags[i].key, "model") == 0 && !*dc.flags[i].value) flags[i].value = model_flag;
  }
  dc.command = command;
  dc.flags = flags;
  const EngineCaps *saved = l->c;
  l->c = &dc;
  l->dynamo = true;
  StrBuf y;
  sb_init(&y);
  sb_printf(&y, "# The plan as one DynamoGraphDeployment (kubectl apply -f dynamo.yaml); written by rankplan from "
                "plan %.16s...\napiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata:\n"
                "  name: rankplan-%.12s\n  labels:\n    app.kubernetes.io/managed-by: rankplan\nspec:\n"
                "  backendFramework: %s\n  services:\n",
            l->p->spec_sha256, l->p->spec_sha256, l->L->engine);
  put_service_head(l, &y, "frontend", "frontend");
  sb_puts(&y, "      replicas: 1\n"); /* one, as in Dynamo's examples/backends/{vllm,sglang}/deploy/ */
  put_image(l, &y);
  put_workers(l, &y, strcmp(l->L->engine, "vllm") == 0 ? lrun_vllm : lrun_sglang);
  l->c = saved;
  free(flags);
  free(command);
  StrBuf *out = lfile(l, "dynamo.yaml", false, -1);
  sb_free(out);
  *out = y;
}
