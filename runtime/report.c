/*
 * report.c: renders a launcher's report as JSON and as text.
 *
 * Input: an RtReport filled by the launcher. Output: a JSON document with
 * a stable key order (format `rankrun.report/1`) and a text summary.
 * Invariants: the JSON names the first failure with the same figures as
 * the text; preflight results are listed per group and summed up per
 * group kind (kinds in order of first appearance in the plan).
 */
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "outfile.h"
#include "plan.h"
#include "report.h"

static const char *sig_name(int s) {
  const char *d = s > 0 ? sigabbrev_np(s) : NULL;
  return d ? d : "?";
}

/* Per-kind totals: number of groups, how many passed, bandwidth range. */
typedef struct {
  GroupKind kind;
  int groups, ok, measured;
  double min_bus, max_bus;
} KindSum;

static int kind_sums(const RtReport *r, KindSum **out) {
  KindSum *ks = rp_calloc((size_t)r->ngroups + 1, sizeof *ks);
  int nk = 0;
  for (int i = 0; i < r->ngroups; i++) {
    const RtGroupResult *g = &r->groups[i];
    int k = 0;
    while (k < nk && ks[k].kind != g->kind) k++;
    if (k == nk) {
      ks[nk].kind = g->kind;
      ks[nk].min_bus = -1;
      nk++;
    }
    ks[k].groups++;
    if (g->have && g->ok) ks[k].ok++;
    if (g->have && g->nranks > 1) {
      if (ks[k].min_bus < 0 || g->busbw_gbs < ks[k].min_bus)
        ks[k].min_bus = g->busbw_gbs;
      if (g->busbw_gbs > ks[k].max_bus) ks[k].max_bus = g->busbw_gbs;
      ks[k].measured++;
    }
  }
  *out = ks;
  return nk;
}

static double gbs(int64_t bytes, double secs) {
  return secs > 0 ? (double)bytes / secs / 1e9 : 0.0;
}

static json_t *link_json(int64_t bytes, double secs) {
  json_t *x = json_object();
  json_object_set_new(x, "bytes", json_integer(bytes));
  json_object_set_new(x, "seconds", json_real(secs));
  json_object_set_new(x, "gbs", bytes ? json_real(gbs(bytes, secs)) : json_null());
  return x;
}

static double median(double *v, int n);

/* The median over ranks of the --probe memory copy bandwidth (GB/s), 0
 * when no rank gave one. */
static double copy_median(const RtReport *r) {
  double *v = rp_calloc((size_t)r->world_size + 1, sizeof *v);
  int n = 0;
  for (int i = 0; i < r->world_size; i++)
    if (r->copy_gbs[i] > 0) v[n++] = r->copy_gbs[i];
  double m = n ? median(v, n) : 0;
  free(v);
  return m;
}

static json_t *kv_json(const RtReport *r) {
  const RtKvReport *k = &r->kv;
  json_t *o = json_object();
  json_object_set_new(o, "requests", json_integer(k->requests));
  json_object_set_new(o, "input_tokens", json_integer(k->input_tokens));
  json_object_set_new(o, "host_memory_scale", json_real(k->mem_scale));
  json_object_set_new(o, "bytes", json_integer(k->bytes));
  json_object_set_new(o, "cells_verified", json_integer(k->cells_verified));
  json_t *links = json_object();
  json_object_set_new(links, "same_node", link_json(k->bytes_same_node, k->secs_same_node));
  json_object_set_new(links, "cross_node", link_json(k->bytes_cross_node, k->secs_cross_node));
  json_object_set_new(o, "links", links);
  double all = gbs(k->bytes, k->secs_same_node + k->secs_cross_node);
  json_object_set_new(o, "gbs", json_real(all));
  json_object_set_new(o, "memcpy_gbs", json_real(k->memcpy_gbs));
  json_object_set_new(o, "reference", json_string(k->reference ? k->reference : "memcpy"));
  json_object_set_new(o, "transfer_path", json_string(k->grouped ? "grouped" : "per message"));
  json_object_set_new(o, "ratio_to_memcpy",
                      k->memcpy_gbs > 0 ? json_real(all / k->memcpy_gbs) : json_null());
  if (k->cpu_run_secs >= 0 && k->cpu_wait_secs >= 0) {
    json_t *cpu = json_object();
    double busy = k->cpu_run_secs + k->cpu_wait_secs;
    json_object_set_new(cpu, "run_s", json_real(k->cpu_run_secs));
    json_object_set_new(cpu, "runq_wait_s", json_real(k->cpu_wait_secs));
    json_object_set_new(cpu, "runq_wait_share",
                        busy > 0 ? json_real(k->cpu_wait_secs / busy) : json_null());
    json_object_set_new(o, "cpu", cpu);
  } else {
    json_object_set_new(o, "cpu", json_null());
  }
  json_t *reqs = json_array();
  for (int i = 0; i < k->requests; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "request", json_integer(i));
    json_object_set_new(x, "bytes", json_integer(k->req_bytes[i]));
    json_object_set_new(x, "seconds", json_real(k->req_secs[i]));
    json_object_set_new(x, "gbs", json_real(gbs(k->req_bytes[i], k->req_secs[i])));
    json_t *rl = json_object();
    json_object_set_new(rl, "same_node", link_json(k->req_link_bytes[0][i], k->req_link_secs[0][i]));
    json_object_set_new(rl, "cross_node", link_json(k->req_link_bytes[1][i], k->req_link_secs[1][i]));
    json_object_set_new(x, "links", rl);
    json_array_append_new(reqs, x);
  }
  json_object_set_new(o, "per_request", reqs);
  json_t *mem = json_array();
  for (int i = 0; i < r->nlocal; i++) {
    const RtRankStatus *s = &r->local[i];
    if (!s->have_mem) continue;
    json_t *x = json_object();
    json_object_set_new(x, "rank", json_integer(s->rank));
    json_object_set_new(x, "planned_weights", json_integer(s->planned_weights));
    json_object_set_new(x, "planned_kv", json_integer(s->planned_kv));
    json_object_set_new(x, "allocated_weights", json_integer(s->alloc_weights));
    json_object_set_new(x, "allocated_kv", json_integer(s->alloc_kv));
    json_array_append_new(mem, x);
  }
  json_object_set_new(o, "memory", mem);
  return o;
}

/* One user process (`-- CMD`). */
static json_t *proc_json(const RtRankStatus *s) {
  json_t *x = json_object();
  json_object_set_new(x, "label", json_string(s->label));
  json_object_set_new(x, "first_rank", json_integer(s->rank));
  json_object_set_new(x, "pid", s->pid > 0 ? json_integer(s->pid) : json_null());
  json_object_set_new(x, "exit_code", s->exited && s->exit_code >= 0 ? json_integer(s->exit_code) : json_null());
  json_object_set_new(x, "signal", s->signal ? json_integer(s->signal) : json_null());
  json_object_set_new(x, "ready", s->ready < 0 ? json_null() : json_boolean(s->ready == 1));
  json_object_set_new(x, "ready_s", s->ready == 1 ? json_real(s->ready_s) : json_null());
  json_object_set_new(x, "log_tail", s->tail ? json_string(s->tail) : json_null());
  return x;
}

/* The user phase: its mode and processes, or null without a command. */
static json_t *command_json(const RtReport *r) {
  if (!r->per) return json_null();
  json_t *c = json_object(), *ps = json_array();
  json_object_set_new(c, "per", json_string(r->per));
  json_object_set_new(c, "job", r->user_job ? json_string(r->user_job) : json_null());
  for (int i = 0; i < r->nprocs; i++) json_array_append_new(ps, proc_json(&r->procs[i]));
  json_object_set_new(c, "processes", ps);
  return c;
}

/* The first failure of the job, for the JSON report. */
static json_t *failure_json(const RtReport *r) {
  json_t *f = json_object();
  json_object_set_new(f, "rank", r->fail_rank >= 0 ? json_integer(r->fail_rank) : json_null());
  json_object_set_new(f, "node", json_integer(r->fail_node));
  json_object_set_new(f, "exit_code", r->fail_exit >= 0 ? json_integer(r->fail_exit) : json_null());
  json_object_set_new(f, "signal", r->fail_signal ? json_integer(r->fail_signal) : json_null());
  json_object_set_new(f, "signal_name", r->fail_signal ? json_string(sig_name(r->fail_signal)) : json_null());
  json_object_set_new(f, "reason", json_string(r->fail_reason ? r->fail_reason : ""));
  json_object_set_new(f, "log_tail", r->fail_tail ? json_string(r->fail_tail) : json_null());
  return f;
}

/* This node's ranks and how each ended. */
static json_t *ranks_json(const RtReport *r) {
  json_t *ranks = json_array();
  for (int i = 0; i < r->nlocal; i++) {
    const RtRankStatus *s = &r->local[i];
    json_t *x = json_object();
    json_object_set_new(x, "rank", json_integer(s->rank));
    json_object_set_new(x, "local_rank", json_integer(s->local_rank));
    json_object_set_new(x, "device", json_integer(s->device));
    json_object_set_new(x, "pid", json_integer(s->pid));
    json_object_set_new(x, "exit_code", s->exited && s->exit_code >= 0 ? json_integer(s->exit_code) : json_null());
    json_object_set_new(x, "signal", s->signal ? json_integer(s->signal) : json_null());
    json_array_append_new(ranks, x);
  }
  return ranks;
}

/* One communicator's preflight result. */
static json_t *group_json(const RtGroupResult *g) {
  json_t *x = json_object();
  char id[16];
  snprintf(id, sizeof id, "%d", (int)g->id);
  json_object_set_new(x, "id", json_string(id));
  json_object_set_new(x, "kind", json_string(plan_kind_name(g->kind)));
  json_object_set_new(x, "ranks", json_integer(g->nranks));
  json_object_set_new(x, "checked", json_boolean(g->have));
  json_object_set_new(x, "ok", json_boolean(g->have && g->ok));
  json_object_set_new(x, "bytes", json_integer(g->bytes));
  json_object_set_new(x, "iters", json_integer(g->iters));
  json_object_set_new(x, "seconds", json_real(g->seconds));
  json_object_set_new(x, "algbw_gbs", json_real(g->algbw_gbs));
  json_object_set_new(x, "busbw_gbs", json_real(g->busbw_gbs));
  json_object_set_new(x, "latency_s", json_real(g->latency_s));
  json_object_set_new(x, "cross_node", json_boolean(g->cross_node));
  return x;
}

/* The preflight: every group, and a summary per group kind. */
static json_t *preflight_json(const RtReport *r) {
  json_t *pf = json_object();
  json_t *groups = json_array();
  for (int i = 0; i < r->ngroups; i++) json_array_append_new(groups, group_json(&r->groups[i]));
  json_object_set_new(pf, "groups", groups);
  KindSum *ks;
  int nk = kind_sums(r, &ks);
  json_t *byk = json_object();
  for (int k = 0; k < nk; k++) {
    json_t *x = json_object();
    json_object_set_new(x, "groups", json_integer(ks[k].groups));
    json_object_set_new(x, "ok", json_integer(ks[k].ok));
    json_object_set_new(x, "min_busbw_gbs", ks[k].measured ? json_real(ks[k].min_bus) : json_null());
    json_object_set_new(x, "max_busbw_gbs", ks[k].measured ? json_real(ks[k].max_bus) : json_null());
    json_object_set_new(byk, plan_kind_name(ks[k].kind), x);
  }
  free(ks);
  json_object_set_new(pf, "by_kind", byk);
  return pf;
}

/* The memory-copy probe: per rank and the median. */
static json_t *copy_json(const RtReport *r) {
  json_t *mc = json_object(), *per = json_array();
  json_object_set_new(mc, "bytes", json_integer(r->copy_bytes));
  for (int i = 0; i < r->world_size; i++)
    json_array_append_new(per, r->copy_gbs[i] > 0 ? json_real(r->copy_gbs[i]) : json_null());
  json_object_set_new(mc, "per_rank_gbs", per);
  double med = copy_median(r);
  json_object_set_new(mc, "median_gbs", med > 0 ? json_real(med) : json_null());
  return mc;
}

/* The calibration file written, and each constant with its origin. */
static json_t *calib_json(const RtReport *r) {
  json_t *cal = json_object();
  json_object_set_new(cal, "path", json_string(r->calib.path));
  json_t *w = json_array();
  for (int i = 0; i < r->calib.n; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "name", json_string(r->calib.c[i].name));
    json_object_set_new(x, "value", json_real(r->calib.c[i].value));
    json_object_set_new(x, "from", json_string(r->calib.c[i].from));
    json_array_append_new(w, x);
  }
  json_object_set_new(cal, "written", w);
  return cal;
}

char *rt_report_json(const RtReport *r) {
  json_t *o = json_object();
  json_object_set_new(o, "format", json_string("rankrun.report/1"));
  json_object_set_new(o, "plan", json_string(r->plan_path ? r->plan_path : ""));
  json_object_set_new(o, "backend", json_string(r->backend ? r->backend : ""));
  json_object_set_new(o, "job", r->job ? json_string(r->job) : json_null());
  json_object_set_new(o, "node", json_integer(r->node));
  json_object_set_new(o, "nodes", json_integer(r->nnodes));
  json_object_set_new(o, "world_size", json_integer(r->world_size));
  json_object_set_new(o, "status", json_string(r->exit_code == 0 ? "ok" : "failed"));
  json_object_set_new(o, "exit_code", json_integer(r->exit_code));
  json_object_set_new(o, "elapsed_s", json_real(r->elapsed_s));
  json_object_set_new(o, "first_failure", r->failed ? failure_json(r) : json_null());
  json_object_set_new(o, "ranks", ranks_json(r));
  json_object_set_new(o, "command", command_json(r));
  json_object_set_new(o, "preflight", preflight_json(r));
  json_object_set_new(o, "kv", r->kv.have ? kv_json(r) : json_null());
  json_object_set_new(o, "memory_copy", r->copy_bytes > 0 && r->copy_gbs ? copy_json(r) : json_null());
  json_object_set_new(o, "calibration", r->calib.have ? calib_json(r) : json_null());
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  json_decref(o);
  if (!s) rp_internal("cannot render the report");
  char *out = rp_sprintf("%s\n", s);
  free(s);
  return out;
}

/* The user processes: one line each, and a failed one's last lines. */
static void procs_text(StrBuf *sb, const RtReport *r) {
  if (r->per) sb_printf(sb, "command: one process per %s\n", r->per);
  for (int i = 0; i < r->nprocs; i++) {
    const RtRankStatus *s = &r->procs[i];
    sb_printf(sb, "  process %s", s->label);
    if (s->pid > 0) sb_printf(sb, " (pid %d)", s->pid);
    if (s->pid <= 0) sb_puts(sb, ": not started");
    else if (s->signal) sb_printf(sb, ": signal %d (SIG%s)", s->signal, sig_name(s->signal));
    else sb_printf(sb, ": exit %d", s->exit_code);
    if (s->ready == 1) sb_printf(sb, ", ready after %.2f s", s->ready_s);
    if (s->ready == 0) sb_puts(sb, ", never ready");
    sb_putc(sb, '\n');
    if (!s->tail || (s->exit_code == 0 && !s->signal)) continue;
    sb_puts(sb, "    last lines:\n");
    for (const char *l = s->tail; *l;) {
      const char *nl = strchr(l, '\n');
      size_t n = nl ? (size_t)(nl - l) : strlen(l);
      sb_printf(sb, "    | %.*s\n", (int)n, l);
      l += n + (nl != NULL);
    }
  }
}

/* The first failure of the job, one line. */
static void failure_text(StrBuf *sb, const RtReport *r) {
  sb_puts(sb, "first failure: ");
  if (r->fail_rank >= 0)
    sb_printf(sb, "rank %d on node %d", r->fail_rank, r->fail_node);
  else
    sb_printf(sb, "node %d", r->fail_node);
  if (r->fail_signal)
    sb_printf(sb, ", killed by signal %d (SIG%s)", r->fail_signal,
              sig_name(r->fail_signal));
  else if (r->fail_exit >= 0)
    sb_printf(sb, ", exit code %d", r->fail_exit);
  if (r->fail_reason && *r->fail_reason)
    sb_printf(sb, ": %s", r->fail_reason);
  sb_putc(sb, '\n');
}

/* This node's ranks, one line each: how each ended. */
static void ranks_text(StrBuf *sb, const RtReport *r) {
  for (int i = 0; i < r->nlocal; i++) {
    const RtRankStatus *s = &r->local[i];
    if (s->pid > 0)
      sb_printf(sb, "  rank %d (local %d, device %d, pid %d): ", s->rank,
                s->local_rank, s->device, s->pid);
    else
      sb_printf(sb, "  rank %d (local %d, device %d): ", s->rank,
                s->local_rank, s->device);
    if (s->pid <= 0)
      sb_puts(sb, "not started\n");
    else if (!s->exited)
      sb_puts(sb, "not reaped\n");
    else if (s->signal)
      sb_printf(sb, "signal %d (SIG%s)\n", s->signal, sig_name(s->signal));
    else
      sb_printf(sb, "exit %d\n", s->exit_code);
  }
}

/* The preflight: a line per group kind. */
static void preflight_text(StrBuf *sb, const RtReport *r) {
  KindSum *ks;
  int nk = kind_sums(r, &ks);
  int have = 0;
  for (int i = 0; i < r->ngroups; i++) have += r->groups[i].have;
  if (nk && !have)
    sb_printf(sb, "preflight: no results (%d groups not checked)\n", r->ngroups);
  if (nk && have)
    sb_puts(sb, "preflight (all-reduce of rank ids, then bandwidth):\n");
  if (!have) nk = 0;
  for (int k = 0; k < nk; k++) {
    sb_printf(sb, "  %-10s %d/%d groups ok", plan_kind_name(ks[k].kind),
              ks[k].ok, ks[k].groups);
    if (ks[k].measured)
      sb_printf(sb, ", bus bandwidth %.3f to %.3f GB/s", ks[k].min_bus,
                ks[k].max_bus);
    sb_putc(sb, '\n');
  }
  free(ks);
}

static void kv_mem_text(StrBuf *sb, const RtReport *r);

/* The KV transfer test: totals, per request, and the memory each rank took. */
static void kv_text(StrBuf *sb, const RtReport *r) {
  const RtKvReport *k = &r->kv;
  double all = gbs(k->bytes, k->secs_same_node + k->secs_cross_node);
  if (k->bytes == 0) { /* nothing to time: an aggregated plan, or no transfer finished */
    sb_printf(sb, "kv: %d requests of %lld tokens, no KV moved\n", k->requests,
              (long long)k->input_tokens);
    kv_mem_text(sb, r);
    return;
  }
  sb_printf(sb, "kv: %d requests of %lld tokens, %lld bytes moved, %lld "
            "cells verified, %.3f GB/s (%s %.3f GB/s, ratio %.2f)\n",
            k->requests, (long long)k->input_tokens, (long long)k->bytes,
            (long long)k->cells_verified, all,
            k->reference ? k->reference : "memcpy", k->memcpy_gbs,
            k->memcpy_gbs > 0 ? all / k->memcpy_gbs : 0.0);
  sb_printf(sb, "  same node: %lld bytes, %.3f GB/s; cross node: %lld "
            "bytes, %.3f GB/s\n", (long long)k->bytes_same_node,
            gbs(k->bytes_same_node, k->secs_same_node),
            (long long)k->bytes_cross_node,
            gbs(k->bytes_cross_node, k->secs_cross_node));
  if (k->cpu_run_secs >= 0 && k->cpu_wait_secs > 0 &&
      k->cpu_wait_secs >= 0.1 * (k->cpu_run_secs + k->cpu_wait_secs))
    sb_printf(sb, "  ranks waited for a CPU %.0f%% of the time they could "
              "run (%.3f s of %.3f s): timings include that wait\n",
              100 * k->cpu_wait_secs / (k->cpu_run_secs + k->cpu_wait_secs),
              k->cpu_wait_secs, k->cpu_run_secs + k->cpu_wait_secs);
  for (int i = 0; i < k->requests; i++) {
    sb_printf(sb, "  request %d: %lld bytes in %.4f s", i,
              (long long)k->req_bytes[i], k->req_secs[i]);
    static const char *const cls[2] = {"same node", "cross node"};
    for (int c = 0; c < 2; c++)
      if (k->req_link_bytes[c][i])
        sb_printf(sb, "; %s %lld bytes, %.3f GB/s", cls[c],
                  (long long)k->req_link_bytes[c][i],
                  gbs(k->req_link_bytes[c][i], k->req_link_secs[c][i]));
    sb_putc(sb, '\n');
  }
  kv_mem_text(sb, r);
}

/* The memory each local rank took, against its ledger. */
static void kv_mem_text(StrBuf *sb, const RtReport *r) {
  const RtKvReport *k = &r->kv;
  if (k->mem_scale != 1.0)
    sb_printf(sb, "  host memory scaled by %g (--host-memory-scale)\n",
              k->mem_scale);
  for (int i = 0; i < r->nlocal; i++) {
    const RtRankStatus *s = &r->local[i];
    if (!s->have_mem) continue;
    char a[32], b[32], c[32], d[32];
    sb_printf(sb, "  rank %d memory: weights %s of %s planned, KV pool %s "
              "of %s planned\n", s->rank,
              rp_fmt_bytes(s->alloc_weights, a, sizeof a),
              rp_fmt_bytes(s->planned_weights, b, sizeof b),
              rp_fmt_bytes(s->alloc_kv, c, sizeof c),
              rp_fmt_bytes(s->planned_kv, d, sizeof d));
  }
}

/* The memory-copy probe and the calibration file written. */
static void copy_calib_text(StrBuf *sb, const RtReport *r) {
  if (r->copy_bytes > 0 && r->copy_gbs) {
    int n = 0;
    for (int i = 0; i < r->world_size; i++) n += r->copy_gbs[i] > 0;
    char b[32];
    sb_printf(sb, "memory copy: median %.3f GB/s over %d rank(s) (copies of "
              "%s, bytes read + written)\n", copy_median(r), n,
              rp_fmt_bytes(r->copy_bytes, b, sizeof b));
  }
  if (r->calib.have) {
    sb_printf(sb, "calibration written to %s:\n", r->calib.path);
    for (int i = 0; i < r->calib.n; i++)
      sb_printf(sb, "  %s = %g: %s\n", r->calib.c[i].name, r->calib.c[i].value,
                r->calib.c[i].from);
  }
}

char *rt_report_text(const RtReport *r) {
  StrBuf sb;
  sb_init(&sb);
  sb_printf(&sb, "rankrun report: node %d of %d, world size %d, backend %s\n",
            r->node, r->nnodes, r->world_size, r->backend ? r->backend : "?");
  sb_printf(&sb, "status: %s (exit %d) after %.2f s\n",
            r->exit_code == 0 ? "ok" : "failed", r->exit_code, r->elapsed_s);
  if (r->failed) failure_text(&sb, r);
  ranks_text(&sb, r);
  procs_text(&sb, r);
  preflight_text(&sb, r);
  if (r->kv.have) kv_text(&sb, r);
  copy_calib_text(&sb, r);
  return sb_take(&sb);
}

RtResult rt_report_write(const RtReport *r, const char *path) {
  char *j = rt_report_json(r), *t = rt_report_text(r);
  char *tp = rp_sprintf("%s.txt", path);
  int e1 = rp_write_file_atomic(path, j, strlen(j));
  int e2 = rp_write_file_atomic(tp, t, strlen(t));
  RtResult res = RT_OK;
  if (e1 || e2)
    res = rt_err(RT_ERR_SYS, "cannot write the report `%s`: %s",
                 e1 ? path : tp, strerror(e1 ? e1 : e2));
  free(j);
  free(t);
  free(tp);
  return res;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The [lo, hi] range the calibration loader accepts for constant name.
 * The runtime may not include the cost model (tests/unit/layering.py), so
 * these copy compiler/cost.h's COST_CONSTANTS table; the runtime test's
 * round trip through `rankplan search --calibration` fails when they
 * drift apart. */
static void const_range(const char *name, double *lo, double *hi) {
  static const struct { const char *name; double lo, hi; } t[] = {
      {"hbm_efficiency", 0.01, 1.0},
      {"scale_up_efficiency", 0.01, 1.0},
      {"scale_out_efficiency", 0.01, 1.0},
      {"scale_up_latency_s", 0.0, 1.0},
      {"scale_out_latency_s", 0.0, 1.0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(t[i].name, name) == 0) {
      *lo = t[i].lo;
      *hi = t[i].hi;
      return;
    }
  rp_internal("cost constant `%s` has no range", name);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

/* Records constant name = v (clamped into its range) in r->calib and o. */
static void calib_put(RtReport *r, json_t *o, const char *name, double v, char *from) {
  double lo, hi;
  const_range(name, &lo, &hi);
  double c = v < lo ? lo : v > hi ? hi : v;
  RtCalibration *k = &r->calib;
  RP_ASSERT(k->n < RT_CALIB_MAX);
  if (c != v) {
    char *f = rp_sprintf("%s, %g clamped into [%g, %g]", from, v, lo, hi);
    free(from);
    from = f;
  }
  k->c[k->n].name = name;
  k->c[k->n].value = c;
  k->c[k->n].from = from;
  k->n++;
  json_object_set_new(o, name, json_real(c));
}

/* The link constants from the preflight's groups: per link class, the
 * median per-hop latency and the median bus bandwidth over the plan's
 * nominal one. */
static void calib_links(RtReport *r, const Plan *plan, json_t *o, int nmeasured[2]) {
  double *lat[2], *bus[2];
  int n[2] = {0, 0};
  for (int c = 0; c < 2; c++) {
    lat[c] = rp_calloc((size_t)r->ngroups + 1, sizeof(double));
    bus[c] = rp_calloc((size_t)r->ngroups + 1, sizeof(double));
  }
  int nb[2] = {0, 0};
  for (int i = 0; i < r->ngroups; i++) {
    const RtGroupResult *g = &r->groups[i];
    if (!g->have || !g->ok || g->nranks < 2) continue;
    int c = g->cross_node ? 1 : 0;
    if (g->latency_s > 0) lat[c][n[c]++] = g->latency_s / (2.0 * (g->nranks - 1));
    if (g->busbw_gbs > 0) bus[c][nb[c]++] = g->busbw_gbs;
  }
  nmeasured[0] = n[0];
  nmeasured[1] = n[1];
  static const char *const lat_keys[2] = {"scale_up_latency_s", "scale_out_latency_s"};
  static const char *const eff_keys[2] = {"scale_up_efficiency", "scale_out_efficiency"};
  static const char *const where[2] = {"inside a node", "across nodes"};
  static const char *const nominal_key[2] = {"hardware.scale_up.bandwidth",
                                             "hardware.scale_out.bandwidth"};
  const PlanHardware *hw = &plan->hardware;
  for (int c = 0; c < 2; c++) {
    if (n[c]) {
      double med = median(lat[c], n[c]);
      calib_put(r, o, lat_keys[c], med,
                rp_sprintf("median per-hop latency of %d all-reduce group(s) %s: "
                           "%g s", n[c], where[c], med));
    }
    double nominal = c == 0 ? hw->scale_up_bandwidth : hw->scale_out_bandwidth;
    if (nb[c] && nominal > 0) {
      double med = median(bus[c], nb[c]);
      double eff = med * 1e9 / nominal;
      calib_put(r, o, eff_keys[c], eff,
                rp_sprintf("median bus bandwidth of %d group(s) %s %g GB/s / "
                           "nominal %g GB/s (plan %s) = %g",
                           nb[c], where[c], med, nominal / 1e9, nominal_key[c], eff));
    }
  }
  for (int c = 0; c < 2; c++) {
    free(lat[c]);
    free(bus[c]);
  }
}

/* hbm_efficiency from the memory-copy probe: the median copy bandwidth
 * over the plan's nominal HBM bandwidth. */
static void calib_hbm(RtReport *r, const PlanHardware *hw, json_t *o) {
  if (!(r->copy_bytes > 0 && r->copy_gbs && hw->hbm_bandwidth > 0)) return;
  int nr = 0;
  for (int i = 0; i < r->world_size; i++) nr += r->copy_gbs[i] > 0;
  double med = copy_median(r);
  if (med > 0) {
    double eff = med * 1e9 / hw->hbm_bandwidth;
    calib_put(r, o, "hbm_efficiency", eff,
              rp_sprintf("median memory copy bandwidth of %d rank(s) %g GB/s "
                         "(2 x %lld bytes over the median copy time) / "
                         "nominal %g GB/s (plan hardware.hbm_bandwidth) = %g",
                         nr, med, (long long)r->copy_bytes,
                         hw->hbm_bandwidth / 1e9, eff));
  }
}

RtResult rt_write_calibration(RtReport *r, const Plan *plan, const char *path) {
  json_t *o = json_object();
  json_object_set_new(o, "format", json_string("rankplan.calibration/1"));
  json_object_set_new(o, "source", json_null()); /* its place: written below */
  int n[2];
  calib_links(r, plan, o, n);
  char *src = rp_sprintf("rankrun --probe, backend %s, %d ranks on %d node(s), "
                         "%d groups inside a node and %d across nodes measured",
                         r->backend ? r->backend : "?", (int)plan->world_size,
                         (int)plan->nnodes, n[0], n[1]);
  json_object_set_new(o, "source", json_string(src));
  free(src);
  calib_hbm(r, &plan->hardware, o);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  json_decref(o);
  char *text = rp_sprintf("%s\n", s);
  free(s);
  int e = rp_write_file_atomic(path, text, strlen(text));
  free(text);
  if (e)
    return rt_err(RT_ERR_SYS, "cannot write the calibration `%s`: %s", path,
                  strerror(e));
  r->calib.have = true;
  r->calib.path = rp_strdup(path);
  return RT_OK;
}
