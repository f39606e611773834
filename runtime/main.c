/*
 * main.c: the `rankrun` command line. Parses options, loads the plan, and
 * runs either the launcher of one node or (hidden `--worker` mode, used by
 * the launcher itself) one rank. See launcher.h for the process model and
 * docs/runtime.md for the user's view.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kv.h"
#include "launcher.h"
#include "outfile.h"
#include "plan.h"
#include "rp_config.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: rankrun PLAN --node N [--rendezvous HOST:PORT] "
          "[--backend host|nccl]\n"
          "               [--timeout S] [--grace S] [--dry-run] [--report FILE]\n"
          "\n"
          "Starts the ranks of node N of a plan written by `rankplan compile`,\n"
          "one process per local rank, checks every group's collectives and\n"
          "stops every rank of every node when one fails.\n"
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

int main(int argc, char **argv) {
  json_set_alloc_funcs(rp_malloc, free); /* as rankplan: exit 70 when out of memory */
  RtLaunchOpts o;
  memset(&o, 0, sizeof o);
  o.node = -1;
  o.backend = "host";
  o.timeout = 30;
  o.grace = 2;
  o.preflight_bytes = 1 << 20;
  o.mem_scale = 1.0;
  o.input_tokens = -1;
  o.corrupt[0] = -1;
  bool worker = false;
  const char *rdzv = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    double v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return RP_EXIT_OK;
    } else if (strcmp(a, "--version") == 0) {
      printf("rankrun %s\n", RP_VERSION);
      return RP_EXIT_OK;
    } else if (strcmp(a, "--worker") == 0) {
      worker = true;
    } else if (strcmp(a, "--dry-run") == 0) {
      o.dry_run = true;
    } else if (strcmp(a, "--quiet") == 0) {
      o.quiet = true;
    } else if (strcmp(a, "--test-ignore-sigterm") == 0) {
      o.test_ignore_sigterm = true;
    } else if (!next && (strcmp(a, "--node") == 0 || strcmp(a, "--rendezvous") == 0 ||
                         strcmp(a, "--backend") == 0 || strcmp(a, "--timeout") == 0 ||
                         strcmp(a, "--grace") == 0 || strcmp(a, "--soak") == 0 ||
                         strcmp(a, "--preflight-bytes") == 0 || strcmp(a, "--report") == 0 ||
                         strcmp(a, "--probe") == 0 || strcmp(a, "--probe-copy-bytes") == 0 ||
                         strcmp(a, "--requests") == 0 || strcmp(a, "--input-tokens") == 0 ||
                         strcmp(a, "--host-memory-scale") == 0 ||
                         strcmp(a, "--test-corrupt") == 0)) {
      return bad_usage("option `%s` needs a value", a);
    } else if (strcmp(a, "--node") == 0) {
      if (!parse_num(next, 0, 1 << 20, &v) || v != (int)v)
        return bad_usage("bad --node `%s`: expected a node number", next);
      o.node = (int)v;
      i++;
    } else if (strcmp(a, "--rendezvous") == 0) {
      rdzv = next;
      i++;
    } else if (strcmp(a, "--backend") == 0) {
      o.backend = next;
      i++;
    } else if (strcmp(a, "--timeout") == 0) {
      if (!parse_num(next, 0.1, 86400, &v))
        return bad_usage("bad --timeout `%s`: expected 0.1 to 86400 seconds", next);
      o.timeout = v;
      i++;
    } else if (strcmp(a, "--grace") == 0) {
      if (!parse_num(next, 0, 3600, &v))
        return bad_usage("bad --grace `%s`: expected 0 to 3600 seconds", next);
      o.grace = v;
      i++;
    } else if (strcmp(a, "--soak") == 0) {
      if (!parse_num(next, 0, 86400, &v))
        return bad_usage("bad --soak `%s`: expected 0 to 86400 seconds", next);
      o.soak = v;
      i++;
    } else if (strcmp(a, "--preflight-bytes") == 0) {
      if (!parse_num(next, 4, 1 << 30, &v) || v != (double)(int64_t)v)
        return bad_usage("bad --preflight-bytes `%s`: expected 4 to 1073741824", next);
      o.preflight_bytes = (int64_t)v;
      i++;
    } else if (strcmp(a, "--requests") == 0) {
      if (!parse_num(next, 0, 1 << 20, &v) || v != (int)v)
        return bad_usage("bad --requests `%s`: expected 0 to 1048576", next);
      o.requests = (int)v;
      i++;
    } else if (strcmp(a, "--input-tokens") == 0) {
      if (!parse_num(next, 1, RT_KV_MAX_TOKENS, &v) || v != (int)v)
        return bad_usage("bad --input-tokens `%s`: expected 1 to %d", next,
                         RT_KV_MAX_TOKENS);
      o.input_tokens = (int64_t)v;
      i++;
    } else if (strcmp(a, "--host-memory-scale") == 0) {
      if (!parse_num(next, 1e-9, 1, &v))
        return bad_usage("bad --host-memory-scale `%s`: expected above 0, at most 1", next);
      o.mem_scale = v;
      i++;
    } else if (strcmp(a, "--test-corrupt") == 0) {
      long long c[5];
      if (sscanf(next, "%lld:%lld:%lld:%lld:%lld", &c[0], &c[1], &c[2], &c[3], &c[4]) != 5 ||
          c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0 || c[4] < 0)
        return bad_usage("bad --test-corrupt `%s`: expected REQUEST:LAYER:HEAD:TOKEN:BYTE", next);
      for (int k = 0; k < 5; k++) o.corrupt[k] = c[k];
      i++;
    } else if (strcmp(a, "--report") == 0) {
      o.report_path = next;
      i++;
    } else if (strcmp(a, "--probe") == 0) {
      o.probe_path = next;
      i++;
    } else if (strcmp(a, "--probe-copy-bytes") == 0) {
      if (!parse_num(next, 4096, (double)(INT64_C(1) << 40), &v) ||
          v != (double)(int64_t)v)
        return bad_usage("bad --probe-copy-bytes `%s`: expected 4096 to "
                         "1099511627776", next);
      o.probe_copy_bytes = (int64_t)v;
      i++;
    } else if (a[0] == '-') {
      return bad_usage("unknown option `%s`", a);
    } else if (!o.plan_path) {
      o.plan_path = a;
    } else {
      return bad_usage("unexpected argument `%s`: one PLAN only", a);
    }
  }
  if (!o.plan_path) return bad_usage("%s", "missing PLAN");
  if (!worker && o.probe_copy_bytes > 0 && !o.probe_path)
    return bad_usage("%s", "--probe-copy-bytes needs --probe FILE");
  if (o.node < 0) return bad_usage("%s", "missing --node N");
  const char *outs[] = {o.report_path, o.probe_path}, *which;
  for (size_t i = 0; i < 2; i++)
    if (outs[i] && rp_out_is_input(outs[i], (const char *const[]){o.plan_path}, 1, &which))
      return bad_usage("%s `%s` is the plan `%s`; writing it would destroy the plan",
                       i ? "--probe" : "--report", outs[i], which);
  o.be = rt_backend_find(o.backend);
  if (!o.be) {
    fprintf(stderr, "rankrun: unknown backend `%s`: expected one of %s\n",
            o.backend, rt_backend_names());
    const char *note = rt_backend_absent_note(o.backend);
    if (note) fprintf(stderr, "rankrun: %s\n", note);
    return RP_EXIT_USAGE;
  }
  if (!worker && o.probe_path && o.probe_copy_bytes == 0)
    o.probe_copy_bytes = o.be->probe_copy_bytes;
  Plan *plan = NULL;
  RtResult r = rt_plan_open(o.plan_path, &plan);
  if (r != RT_OK) {
    fprintf(stderr, "rankrun: %s\n", rt_errmsg());
    return r == RT_ERR_SYS ? RP_EXIT_USAGE : RP_EXIT_INPUT;
  }
  if (rdzv) {
    if (rt_parse_hostport(rdzv, &o.rdzv_host, &o.rdzv_port) != RT_OK) {
      fprintf(stderr, "rankrun: %s\n", rt_errmsg());
      plan_free(plan);
      return RP_EXIT_USAGE;
    }
  } else if (plan->nnodes > 1 && !o.dry_run) {
    fprintf(stderr, "rankrun: the plan has %d nodes: --rendezvous HOST:PORT "
            "is needed so that launchers find node 0\n", (int)plan->nnodes);
    plan_free(plan);
    return RP_EXIT_USAGE;
  } else {
    o.rdzv_host = rp_strdup("127.0.0.1");
    o.rdzv_port = 0;
  }
  if (o.rdzv_port == 0 && plan->nnodes > 1 && !o.dry_run) {
    fprintf(stderr, "rankrun: --rendezvous port 0 only works for a one-node "
            "plan (other nodes could not find it)\n");
    free(o.rdzv_host);
    plan_free(plan);
    return RP_EXIT_USAGE;
  }
  /* Token ranges in kv_reshard were computed for one request length: the
   * default input length is theirs, and another one is refused. */
  int64_t ranges_T = -1;
  const Plan *pl = plan;
  if (o.requests > 0 && rt_kv_plan_check(pl, &ranges_T) != RT_OK) {
    fprintf(stderr, "rankrun: %s: %s\n", o.plan_path, rt_errmsg());
    free(o.rdzv_host);
    plan_free(plan);
    return RP_EXIT_INPUT;
  }
  if (o.input_tokens < 0) o.input_tokens = ranges_T > 0 ? ranges_T : 64;
  if (o.requests > 0 && ranges_T > 0 && o.input_tokens < ranges_T) {
    fprintf(stderr, "rankrun: --input-tokens %lld is below the %lld tokens the "
            "plan's kv_reshard ranges were computed for\n",
            (long long)o.input_tokens, (long long)ranges_T);
    free(o.rdzv_host);
    plan_free(plan);
    return RP_EXIT_USAGE;
  }
  if (o.requests > 0 && pl->nreshard == 0)
    fprintf(stderr, "rankrun: note: the plan has no kv_reshard (no prefill and "
            "decode pools): --requests only allocates the ledger's memory\n");
  int code = worker ? rt_worker_main(&o, plan) : rt_launch(&o, plan);
  free(o.rdzv_host);
  plan_free(plan);
  return code;
}
