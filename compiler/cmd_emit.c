/*
 * cmd_emit.c: `rankplan emit PLAN --target T -o DIR`: a plan's launch
 * files (docs/engines.md). The plan is read by the plan library's loader,
 * which checks it whole, and nothing else of the spec is needed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "compile.h"
#include "launch.h"

static const char emit_usage[] =
    "usage: rankplan emit PLAN --target TARGET -o DIR\n"
    "\n"
    "Writes the files that launch a compiled plan (docs/engines.md): for\n"
    "every node a node-N.sh with the engine's exact command lines for the\n"
    "instances there (CUDA_VISIBLE_DEVICES, sizes, ports and memory\n"
    "fractions from the plan), router.sh for prefill/decode plans, engine\n"
    "configs, and manifest.json listing each file. DIR is written at once:\n"
    "a new directory beside it replaces it by one rename; an existing DIR\n"
    "must be empty or an earlier emit output. The plan needs a `launch` key\n"
    "(a spec with deployment.engine and model.source).\n"
    "\n"
    "targets:\n"
    "  vllm, sglang, trtllm   the engine's files (the plan's engine)\n"
    "  shell                  those and launch.sh, which runs every node's\n"
    "                         script over ssh\n"
    "  slurm                  those and job.sbatch, one job step per node\n"
    "  k8s                    k8s.yaml: a LeaderWorkerSet and a Service per pool,\n"
    "                         and the router's Deployment and Service for a\n"
    "                         disaggregated plan (needs deployment.image)\n"
    "  dynamo                 dynamo.yaml: a DynamoGraphDeployment of NVIDIA\n"
    "                         Dynamo, a frontend and a worker service per pool\n"
    "                         (needs deployment.image)\n"    "\n"
    "options:\n"
    "  -t, --target vllm|sglang|trtllm|shell|slurm|k8s|dynamo\n"
    "                         what to write (required)\n"
    "  -o, --output DIR       where (required)\n"
    "  --catalog DIR          where the engine catalog entries are\n"
    "  -h, --help             show this help\n"
    "\n"
    "exit: 0 written, 1 the plan is invalid or cannot be launched as asked,\n"
    "2 usage error or unreadable plan or unwritable DIR, 70 internal error\n";

int cmd_emit(int argc, char **argv) {
  const char *path = NULL, *out = NULL, *target = NULL, *catalog = NULL;
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, cli_help, NULL},
      {"--target", "-t", true, &target, NULL, NULL, NULL},
      {"--output", "-o", true, &out, NULL, NULL, NULL},
      {"--catalog", NULL, true, &catalog, NULL, NULL, NULL},
  };
  int pr = cli_parse("emit", emit_usage, opts, RP_ARRAY_LEN(opts), argc, argv, &path, "PLAN");
  if (pr != RP_OPT_GO) return pr;
  if (!path) return cli_usage_error("emit", "missing PLAN");
  if (!target) return cli_usage_error("emit", "missing '--target TARGET' (%s)", launch_target_list());
  LaunchTarget t;
  if (!launch_target_parse(target, &t))
    return cli_usage_error("emit", "unknown target '%s' (expected %s)", target, launch_target_list());
  if (!out) return cli_usage_error("emit", "missing '-o DIR' (where to write the files)");
  const char *inputs[] = {path};
  if (cli_output_not_input("emit", "-o", out, inputs, 1)) return RP_EXIT_USAGE;
  char *err = NULL;
  Plan *p = plan_load(path, NULL, &err);
  if (!p) {
    fprintf(stderr, "rankplan emit: %s\n", err);
    bool unreadable = strstr(err, "cannot read the plan") != NULL;
    free(err);
    return unreadable ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  }
  int rc = launch_emit(p, t, out, catalog, stderr);
  plan_free(p);
  return rc;
}

/* `compile SPEC --emit T -o DIR`: the plan goes to a temporary file beside
 * DIR (written atomically by the compile), is read back by the plan
 * loader like any plan, and lands in DIR as plan.json with the target's
 * files. */
int compile_emit(const Spec *spec, const char *target, const char *dir, const char *split_dir,
                 const char *catalog, const CostConsts *consts, Diags *d, char **what, int *werr) {
  LaunchTarget t;
  *what = NULL;
  *werr = 0;
  if (!launch_target_parse(target, &t)) rp_internal("target checked by the caller");
  const char *why = launch_spec_lacks(spec, t);
  if (why) {
    Diag *g = diag_at(d, DIAG_E0708, spec->deployment.engine.loc, "cannot emit target `%s`: %s", target, why);
    diag_help(g, "the launch targets need deployment.engine, model.source and, for k8s and dynamo, "
                 "deployment.image (docs/engines.md)");
    return RP_EXIT_INPUT;
  }
  char *slash = strrchr(dir, '/');
  char *tmp = slash ? rp_sprintf("%.*s/.rankplan-plan-XXXXXX", (int)(slash - dir), dir)
                    : rp_strdup(".rankplan-plan-XXXXXX");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    *werr = errno;
    *what = tmp;
    return RP_EXIT_USAGE;
  }
  close(fd);
  CompileOpts o = {tmp, split_dir, consts};
  int rc = compile_spec_to_plan(spec, &o, d, what, werr);
  if (rc == RP_EXIT_OK) {
    char *text = NULL, *err = NULL;
    size_t len = 0;
    *werr = rp_read_file(tmp, PLAN_MAX_BYTES, &text, &len);
    Plan *p = *werr ? NULL : plan_load_mem(tmp, text, len, NULL, &err);
    if (*werr) *what = rp_strdup(tmp), rc = RP_EXIT_USAGE;
    else if (!p) rp_internal("the plan just compiled does not load: %s", err);
    else rc = launch_emit_with_plan(p, t, dir, catalog, stderr, text, len);
    plan_free(p);
    free(text);
  }
  unlink(tmp);
  free(tmp);
  return rc;
}
