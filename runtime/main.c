/*
 * main.c: the `rankrun` command line. Parses options, loads the plan, and
 * runs either the launcher of one node or (hidden `--worker` mode, used by
 * the launcher itself) one rank. See launcher.h for the process model and
 * docs/runtime.md for the user's view.
 */
#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "emitted.h"
#include "kv.h"
#include "launcher.h"
#include "opts.h"
#include "outfile.h"
#include "plan.h"
#include "procs.h"
#include "rp_config.h"
#include "version.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: rankrun PLAN --node N [--rendezvous HOST:PORT] "
          "[--backend host|nccl]\n"
          "               [--timeout S] [--grace S] [--dry-run] [--report FILE]\n"
          "               [--preflight-only | [--no-preflight] [--per MODE] -- CMD ARGS...\n"
          "                | [--no-preflight] --emitted DIR]\n"
          "\n"
          "Starts the ranks of node N of a plan written by `rankplan compile`,\n"
          "one process per local rank, checks every group's collectives and\n"
          "stops every rank of every node when one fails. With `-- CMD ARGS...`\n"
          "it then runs CMD as the plan says (docs/runtime.md), with the same\n"
          "shared fate.\n"
          "\n"
          "options:\n"
          "  --node N              this launcher's node (0 runs the rendezvous store)\n"
          "  --rendezvous H:P      store address; node 0 binds exactly this address\n"
          "                        (default 127.0.0.1:0 for a one-node plan)\n"
          "  --backend NAME        %s (default host)\n"
          "  --timeout S           join and operation timeout in seconds (default 30)\n"
          "  --grace S             SIGTERM to SIGKILL grace period (default 2)\n"
          "  --soak S              after the preflight, run collectives for about S s\n"
          "  --preflight-bytes N   all-reduce size of the bandwidth check (default 1048576)\n"
          "  --requests K          after the preflight, move K requests' KV as the\n"
          "                        plan's kv_reshard says and verify every byte\n"
          "  --input-tokens T      tokens per request (default 64, or the plan's\n"
          "                        kv_reshard token ranges)\n"
          "  --host-memory-scale F allocate F times the ledger's bytes (host backend)\n"
          "  --dry-run             print what would be started, start nothing\n"
          "  --report FILE         write the JSON report to FILE, text to FILE.txt\n"
          "  --probe FILE          node 0 writes a calibration file for `rankplan search\n"
          "                        --calibration`: the measured latencies and the bus\n"
          "                        bandwidth over the plan's nominal link bandwidth\n"
          "                        (scale_up/scale_out_efficiency), and each rank's\n"
          "                        memory copy bandwidth over the plan's HBM bandwidth\n"
          "                        (hbm_efficiency)\n"
          "  --probe-copy-bytes N  bytes of the probe's memory copy (default 256 MiB on\n"
          "                        nccl, 64 MiB on host)\n"
          "  --quiet               no progress lines on stderr\n"
          "  --preflight-only      check every group's communicator and exit (the\n"
          "                        default without a command; refuses one)\n"
          "running a command (after `--`):\n"
          "  --per MODE            rank (default): one process per local rank;\n"
          "                        instance: one per instance on this node;\n"
          "                        node: one for the node\n"
          "  --no-preflight        start the command without the preflight\n"
          "  --env K=V             one more environment variable (repeatable)\n"
          "  --log-dir DIR         each process's output also goes to DIR/LABEL.log\n"
          "  --ready-port PORT     a process is ready when its node accepts\n"
          "                        connections on PORT (a template: {port})\n"
          "  --ready-cmd CMD       a process is ready when `sh -c CMD` exits 0\n"
          "  --ready-timeout S     seconds a process has to be ready (default\n"
          "                        --timeout)\n"
          "  CMD and ARGS may hold templates: {rank} {world_size} {local_rank}\n"
          "  {local_world_size} {group_rank} {instance_rank} {global_rank} {node}\n"
          "  {nnodes} {port} {master_addr} {master_port} {devices} {pool} {role}\n"
          "  {instance} {tp} {cp} {dp} {pp} {ep} {etp} {edp} {dcp}; {{ and }} are braces\n"
          "  --emitted DIR         instead of `-- CMD`: run DIR/node-N.sh, written by\n"
          "                        `rankplan emit` for this plan (checked against\n"
          "                        DIR/manifest.json), as `--per node -- bash\n"
          "                        DIR/node-N.sh`; the options above apply\n"
          "  --help, --version\n"
          "\n"
          "exit codes: 0 success, 1 bad plan, 2 usage, 3 runtime failure, "
          "70 internal error\n",
          rt_backend_names());
}

static bool parse_num(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || !end || *end || end == s || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

static int bad_usage(const char *fmt, ...) RP_PRINTF(1, 2);
static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("rankrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nrankrun: see `rankrun --help`\n", stderr);
  return RP_EXIT_USAGE;
}

/* The parser's usage errors (opts.h), in rankrun's style. */
static int usage_msg(const char *cmd, const char *msg) {
  (void)cmd;
  return bad_usage("%s", msg);
}

/* What the command line says. */
typedef struct {
  RtLaunchOpts o;
  bool worker;
  const char *rdzv;
  bool per_given;
  const char *emitted; /* --emitted DIR */
  char **emitted_cmd;  /* the command it runs (emitted.h) */
} Cli;

/* A numeric option: its range, whether it is a whole number, what the
 * error says is expected, and where it lands in RtLaunchOpts. */
typedef enum { NUM_INT, NUM_I64, NUM_DOUBLE } NumType;
typedef struct {
  double lo, hi;
  bool whole;
  const char *expect;
  NumType type;
  size_t off;
} NumOpt;

static int opt_num(void *ctx, const RpOpt *opt, const char *v) {
  const NumOpt *n = opt->data;
  double x;
  if (!parse_num(v, n->lo, n->hi, &x) || (n->whole && x != (double)(int64_t)x))
    return bad_usage("bad %s `%s`: %s", opt->name, v, n->expect);
  char *dst = (char *)&((Cli *)ctx)->o + n->off;
  if (n->type == NUM_INT) *(int *)dst = (int)x;
  else if (n->type == NUM_I64) *(int64_t *)dst = (int64_t)x;
  else *(double *)dst = x;
  return RP_OPT_GO;
}

static int opt_corrupt(void *ctx, const RpOpt *opt, const char *v) {
  (void)opt;
  long long c[5];
  if (sscanf(v, "%lld:%lld:%lld:%lld:%lld", &c[0], &c[1], &c[2], &c[3], &c[4]) != 5 ||
      c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0 || c[4] < 0)
    return bad_usage("bad --test-corrupt `%s`: expected REQUEST:LAYER:HEAD:TOKEN:BYTE", v);
  for (int k = 0; k < 5; k++) ((Cli *)ctx)->o.corrupt[k] = c[k];
  return RP_OPT_GO;
}

static int opt_per(void *ctx, const RpOpt *opt, const char *v) {
  (void)opt;
  RtPer p;
  if (!rt_per_parse(v, &p))
    return bad_usage("bad --per `%s`: expected rank, instance or node", v);
  ((Cli *)ctx)->o.per = (int)p;
  ((Cli *)ctx)->per_given = true;
  return RP_OPT_GO;
}

static int opt_env(void *ctx, const RpOpt *opt, const char *v) {
  (void)opt;
  RtLaunchOpts *o = &((Cli *)ctx)->o;
  const char *eq = strchr(v, '=');
  if (!eq || eq == v)
    return bad_usage("bad --env `%s`: expected NAME=VALUE", v);
  o->env = rp_realloc(o->env, sizeof *o->env * (size_t)(o->nenv + 2));
  o->env[o->nenv++] = (char *)v;
  o->env[o->nenv] = NULL;
  return RP_OPT_GO;
}

static int opt_help(void *ctx, const RpOpt *opt, const char *v) {
  (void)ctx, (void)opt, (void)v;
  usage(stdout);
  return RP_EXIT_OK;
}

static int opt_version(void *ctx, const RpOpt *opt, const char *v) {
  (void)ctx, (void)opt, (void)v;
  rp_version_print(stdout, "rankrun", rt_backend_find("nccl") != NULL);
  return RP_EXIT_OK;
}

static int opt_plan(void *ctx, const char *a) {
  Cli *c = ctx;
  if (c->o.plan_path) return bad_usage("unexpected argument `%s`: one PLAN only", a);
  c->o.plan_path = a;
  return RP_OPT_GO;
}

_Static_assert(RT_KV_MAX_TOKENS == 16777216, "--input-tokens' message below");
#define NUM(field, type, lo, hi, whole, expect)                               \
  &(const NumOpt) { lo, hi, whole, expect, type, offsetof(RtLaunchOpts, field) }

/* Parses the command line into c (defaults first). Returns RP_OPT_GO or
 * the exit code. */
static int parse_cli(int argc, char **argv, Cli *c) {
  memset(c, 0, sizeof *c);
  RtLaunchOpts *o = &c->o;
  o->node = -1;
  o->backend = "host";
  o->timeout = 30;
  o->grace = 2;
  o->preflight_bytes = 1 << 20;
  o->mem_scale = 1.0;
  o->input_tokens = -1;
  o->corrupt[0] = -1;
  o->ready_timeout = -1;
  const RpOpt opts[] = {
      {"--help", "-h", false, NULL, NULL, opt_help, NULL},
      {"--version", NULL, false, NULL, NULL, opt_version, NULL},
      {"--worker", NULL, false, NULL, &c->worker, NULL, NULL},
      {"--dry-run", NULL, false, NULL, &o->dry_run, NULL, NULL},
      {"--quiet", NULL, false, NULL, &o->quiet, NULL, NULL},
      {"--test-ignore-sigterm", NULL, false, NULL, &o->test_ignore_sigterm, NULL, NULL},
      {"--node", NULL, true, NULL, NULL, opt_num,
       NUM(node, NUM_INT, 0, 1 << 20, true, "expected a node number")},
      {"--rendezvous", NULL, true, &c->rdzv, NULL, NULL, NULL},
      {"--backend", NULL, true, &o->backend, NULL, NULL, NULL},
      {"--timeout", NULL, true, NULL, NULL, opt_num,
       NUM(timeout, NUM_DOUBLE, 0.1, 86400, false, "expected 0.1 to 86400 seconds")},
      {"--grace", NULL, true, NULL, NULL, opt_num,
       NUM(grace, NUM_DOUBLE, 0, 3600, false, "expected 0 to 3600 seconds")},
      {"--soak", NULL, true, NULL, NULL, opt_num,
       NUM(soak, NUM_DOUBLE, 0, 86400, false, "expected 0 to 86400 seconds")},
      {"--preflight-bytes", NULL, true, NULL, NULL, opt_num,
       NUM(preflight_bytes, NUM_I64, 4, 1 << 30, true, "expected 4 to 1073741824")},
      {"--requests", NULL, true, NULL, NULL, opt_num,
       NUM(requests, NUM_INT, 0, 1 << 20, true, "expected 0 to 1048576")},
      {"--input-tokens", NULL, true, NULL, NULL, opt_num,
       NUM(input_tokens, NUM_I64, 1, RT_KV_MAX_TOKENS, true, "expected 1 to 16777216")},
      {"--host-memory-scale", NULL, true, NULL, NULL, opt_num,
       NUM(mem_scale, NUM_DOUBLE, 1e-9, 1, false, "expected above 0, at most 1")},
      {"--test-corrupt", NULL, true, NULL, NULL, opt_corrupt, NULL},
      {"--report", NULL, true, &o->report_path, NULL, NULL, NULL},
      {"--probe", NULL, true, &o->probe_path, NULL, NULL, NULL},
      {"--probe-copy-bytes", NULL, true, NULL, NULL, opt_num,
       NUM(probe_copy_bytes, NUM_I64, 4096, (double)(INT64_C(1) << 40), true,
           "expected 4096 to 1099511627776")},
      {"--per", NULL, true, NULL, NULL, opt_per, NULL},
      {"--no-preflight", NULL, false, NULL, &o->no_preflight, NULL, NULL},
      {"--preflight-only", NULL, false, NULL, &o->preflight_only, NULL, NULL},
      {"--env", NULL, true, NULL, NULL, opt_env, NULL},
      {"--log-dir", NULL, true, &o->log_dir, NULL, NULL, NULL},
      {"--ready-port", NULL, true, &o->ready_port, NULL, NULL, NULL},
      {"--ready-cmd", NULL, true, &o->ready_cmd, NULL, NULL, NULL},
      {"--emitted", NULL, true, &c->emitted, NULL, NULL, NULL},
      {"--ready-timeout", NULL, true, NULL, NULL, opt_num,
       NUM(ready_timeout, NUM_DOUBLE, 0.1, 86400 * 7, false,
           "expected 0.1 to 604800 seconds")},
  };
  RpOptSpec spec = {"rankrun", opts, RP_ARRAY_LEN(opts), usage_msg, opt_plan,
                    NULL, "PLAN", c};
  /* Everything after `--` is the command, never an option of rankrun. */
  int end = 1;
  while (end < argc && strcmp(argv[end], "--") != 0) end++;
  if (end < argc) {
    if (end + 1 == argc) return bad_usage("%s", "`--` needs a command after it");
    o->cmd = argv + end + 1;
  }
  return rp_opts_parse(&spec, end, argv, 1);
}

/* What the options need of each other and of this build. */
static int check_cli(Cli *c) {
  RtLaunchOpts *o = &c->o;
  if (!o->plan_path) return bad_usage("%s", "missing PLAN");
  if (!c->worker && o->probe_copy_bytes > 0 && !o->probe_path)
    return bad_usage("%s", "--probe-copy-bytes needs --probe FILE");
  if (o->node < 0) return bad_usage("%s", "missing --node N");
  const char *outs[] = {o->report_path, o->probe_path}, *which;
  for (size_t i = 0; i < 2; i++)
    if (outs[i] && rp_out_is_input(outs[i], (const char *const[]){o->plan_path}, 1, &which))
      return bad_usage("%s `%s` is the plan `%s`; writing it would destroy the plan",
                       i ? "--probe" : "--report", outs[i], which);
  o->be = rt_backend_find(o->backend);
  if (!o->be) {
    fprintf(stderr, "rankrun: unknown backend `%s`: expected one of %s\n",
            o->backend, rt_backend_names());
    const char *note = rt_backend_absent_note(o->backend);
    if (note) fprintf(stderr, "rankrun: %s\n", note);
    return RP_EXIT_USAGE;
  }
  if (!c->worker && o->probe_path && o->probe_copy_bytes == 0)
    o->probe_copy_bytes = o->be->probe_copy_bytes;
  return RP_OPT_GO;
}

/* What a command (`-- CMD ARGS...`) needs of the options. */
static int check_cmd_opts(Cli *c) {
  RtLaunchOpts *o = &c->o;
  if (c->emitted && (o->cmd || c->per_given || o->preflight_only))
    return bad_usage("--emitted runs DIR/node-N.sh once for the node: drop %s",
                     o->cmd ? "`-- CMD`" : c->per_given ? "--per" : "--preflight-only");
  if (o->cmd && o->preflight_only)
    return bad_usage("%s", "--preflight-only runs no command: drop it or `-- CMD`");
  const char *needs = c->per_given ? "--per" : o->nenv ? "--env" : o->log_dir ? "--log-dir"
                      : o->ready_port ? "--ready-port" : o->ready_cmd ? "--ready-cmd"
                      : o->ready_timeout >= 0 ? "--ready-timeout"
                      : o->no_preflight ? "--no-preflight" : NULL;
  if (!o->cmd && !c->emitted && needs) return bad_usage("%s needs a command: `-- CMD ARGS...`", needs);
  if (o->ready_port && o->ready_cmd)
    return bad_usage("%s", "--ready-port and --ready-cmd: give one");
  if (o->ready_timeout < 0) o->ready_timeout = o->timeout;
  if (o->cmd && !rt_command_found(o->cmd[0]))
    return bad_usage("command `%s` not found (not an executable path, not in PATH)",
                     o->cmd[0]);
  if (o->log_dir && mkdir(o->log_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "rankrun: cannot make --log-dir `%s`: %s\n", o->log_dir,
            strerror(errno));
    return RP_EXIT_USAGE;
  }
  return RP_OPT_GO;
}

/* Every template of the command and of --ready-* names something each
 * of this node's processes has; checked before anything starts. */
static int check_templates(const RtLaunchOpts *o, const Plan *plan) {
  if (!o->cmd || o->node >= (int)plan->nnodes) return RP_OPT_GO;
  if (plan->partial)
    return bad_usage("%s", "a command needs the whole plan (every node's ranks "
                     "give each instance's world), not a --split-by-node file");
  RtProcSpec *ps;
  int n = rt_procs_of_node(plan, o->node, (RtPer)o->per, &ps), code = RP_OPT_GO;
  for (int i = 0; i < n && code == RP_OPT_GO; i++)
    for (int a = -1; (a < 0 || o->cmd[a]) && code == RP_OPT_GO; a++) {
      const char *t = a < 0 ? (o->ready_port ? o->ready_port : o->ready_cmd) : o->cmd[a];
      char *bad = NULL, *x = t ? rt_template_expand(t, plan, &ps[i], o->node, &bad) : NULL;
      if (bad) code = bad_usage("%s", bad);
      free(bad);
      free(x);
    }
  rt_procs_free(ps, n);
  return code;
}

/* The rendezvous address: --rendezvous, or 127.0.0.1 and a free port for
 * a one-node plan. */
static int rendezvous(Cli *c, const Plan *plan) {
  RtLaunchOpts *o = &c->o;
  if (c->rdzv) {
    if (rt_parse_hostport(c->rdzv, &o->rdzv_host, &o->rdzv_port) != RT_OK) {
      fprintf(stderr, "rankrun: %s\n", rt_errmsg());
      return RP_EXIT_USAGE;
    }
  } else if (plan->nnodes > 1 && !o->dry_run) {
    fprintf(stderr, "rankrun: the plan has %d nodes: --rendezvous HOST:PORT "
            "is needed so that launchers find node 0\n", (int)plan->nnodes);
    return RP_EXIT_USAGE;
  } else {
    o->rdzv_host = rp_strdup("127.0.0.1");
    o->rdzv_port = 0;
  }
  if (o->rdzv_port == 0 && plan->nnodes > 1 && !o->dry_run) {
    fprintf(stderr, "rankrun: --rendezvous port 0 only works for a one-node "
            "plan (other nodes could not find it)\n");
    return RP_EXIT_USAGE;
  }
  return RP_OPT_GO;
}

/* Token ranges in kv_reshard were computed for one request length: the
 * default input length is theirs, and another one is refused. */
static int request_length(RtLaunchOpts *o, const Plan *pl, bool worker) {
  int64_t ranges_T = -1;
  if (o->requests > 0 && rt_kv_plan_check(pl, &ranges_T) != RT_OK) {
    fprintf(stderr, "rankrun: %s: %s\n", o->plan_path, rt_errmsg());
    return RP_EXIT_INPUT;
  }
  if (o->input_tokens < 0) o->input_tokens = ranges_T > 0 ? ranges_T : 64;
  if (o->requests > 0 && ranges_T > 0 && o->input_tokens < ranges_T) {
    fprintf(stderr, "rankrun: --input-tokens %lld is below the %lld tokens the "
            "plan's kv_reshard ranges were computed for\n",
            (long long)o->input_tokens, (long long)ranges_T);
    return RP_EXIT_USAGE;
  }
  if (o->requests > 0 && pl->nreshard == 0 && !worker) /* the launcher says it, not every rank */
    fprintf(stderr, "rankrun: note: the plan has no kv_reshard (no prefill and "
            "decode pools): --requests only allocates the ledger's memory\n");
  return RP_OPT_GO;
}

int main(int argc, char **argv) {
  json_set_alloc_funcs(rp_malloc, free); /* as rankplan: exit 70 when out of memory */
  Cli c;
  int code = parse_cli(argc, argv, &c);
  if (code == RP_OPT_GO) code = check_cli(&c);
  if (code == RP_OPT_GO) code = check_cmd_opts(&c);
  if (code != RP_OPT_GO) {
    free(c.o.env);
    return code;
  }
  Plan *plan = NULL;
  RtResult r = rt_plan_open(c.o.plan_path, &plan);
  if (r != RT_OK) {
    fprintf(stderr, "rankrun: %s\n", rt_errmsg());
    free(c.o.env);
    return r == RT_ERR_SYS ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  }
  if (c.emitted) {
    code = rt_emitted_command(c.emitted, plan, c.o.node, &c.emitted_cmd) ? RP_EXIT_USAGE
           : rt_command_found("bash") ? RP_OPT_GO
           : bad_usage("%s", "--emitted runs bash, not found in PATH");
    c.o.cmd = c.emitted_cmd;
    c.o.per = RT_PER_NODE;
  }
  if (code == RP_OPT_GO) code = check_templates(&c.o, plan);
  if (code == RP_OPT_GO) code = rendezvous(&c, plan);
  if (code == RP_OPT_GO) code = request_length(&c.o, plan, c.worker);
  if (code == RP_OPT_GO)
    code = c.worker ? rt_worker_main(&c.o, plan) : rt_launch(&c.o, plan);
  free(c.o.rdzv_host);
  free(c.o.env);
  rt_emitted_free(c.emitted_cmd);
  plan_free(plan);
  return code;
}
