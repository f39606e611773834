/*
 * test_records.c: the store records ranks post for their launcher
 * (`kv/RANK`: KV transfer figures, `copy/RANK`: the --probe memory copy).
 * Anyone who can reach the store can write them, so the decoders take
 * untrusted text: a record that does not parse, is cut short, has extra
 * text, or holds counts no run can give is refused, never summed.
 *
 * Also the option parser both binaries use (compiler/opts.h): rankrun's
 * options go through it, so its rules are tested here with the runtime.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "launcher.h"
#include "opts.h"
#include "t.h"

/* A rank's figures for 2 requests, encoded. */
static char *good_record(void) {
  RtKvStats st;
  memset(&st, 0, sizeof st);
  int64_t rb[2] = {4096, 8192}, l0[2] = {1024, 0}, l1[2] = {0, 2048};
  double rs[2] = {0.5, 0.25}, s0[2] = {0.125, 0}, s1[2] = {0, 0.0625};
  st.bytes_recv = 12288;
  st.bytes_same_node = 1024;
  st.bytes_cross_node = 2048;
  st.secs_same_node = 0.125;
  st.secs_cross_node = 0.0625;
  st.cells_verified = 96;
  st.memcpy_secs = 0.03125;
  st.grouped = true;
  st.cpu_run_secs = 1.5;
  st.cpu_wait_secs = -1;
  st.nreq = 2;
  st.req_bytes = rb;
  st.req_secs = rs;
  st.req_link_bytes[0] = l0;
  st.req_link_bytes[1] = l1;
  st.req_link_secs[0] = s0;
  st.req_link_secs[1] = s1;
  StrBuf sb;
  sb_init(&sb);
  rt_kv_stats_encode(&st, &sb);
  return sb_take(&sb);
}

static void test_kv_round_trip(void) {
  char *text = good_record();
  RtKvStats st;
  T_CHECK(rt_kv_stats_decode(text, 2, &st));
  T_EQ_INT((int)st.bytes_recv, 12288);
  T_EQ_INT((int)st.bytes_same_node, 1024);
  T_EQ_INT((int)st.bytes_cross_node, 2048);
  T_EQ_INT((int)st.cells_verified, 96);
  T_CHECK(st.grouped);
  T_NEAR(st.secs_same_node, 0.125, 1e-12);
  T_NEAR(st.memcpy_secs, 0.03125, 1e-12);
  T_NEAR(st.cpu_run_secs, 1.5, 1e-12);
  T_CHECK(st.cpu_wait_secs == -1);
  T_EQ_INT(st.nreq, 2);
  T_EQ_INT((int)st.req_bytes[1], 8192);
  T_EQ_INT((int)st.req_link_bytes[0][0], 1024);
  T_EQ_INT((int)st.req_link_bytes[1][1], 2048);
  T_NEAR(st.req_secs[0], 0.5, 1e-12);
  T_NEAR(st.req_link_secs[1][1], 0.0625, 1e-12);
  rt_kv_stats_free(&st);
  free(text);
}

/* Every way of spoiling a good record is refused and leaves nothing
 * allocated (LeakSanitizer checks the last part). */
static void test_kv_refused(void) {
  char *good = good_record();
  RtKvStats st;
  /* the request count must be the run's */
  T_CHECK(!rt_kv_stats_decode(good, 3, &st));
  T_CHECK(!rt_kv_stats_decode(good, 1, &st));
  T_CHECK(st.req_bytes == NULL);
  /* cut short at any field boundary: refused */
  size_t n = strlen(good);
  char *cut = malloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    if (good[i] != ' ') continue;
    memcpy(cut, good, i);
    cut[i] = 0;
    bool ok = rt_kv_stats_decode(cut, 2, &st);
    if (ok) {
      fprintf(stderr, "accepted a record cut to `%s`\n", cut);
      rt_kv_stats_free(&st);
    }
    T_CHECK(!ok);
  }
  free(cut);
  static const struct {
    int requests;
    const char *text;
  } bad[] = {
      {0, ""},
      {0, "garbage"},
      /* header fields: negative bytes, NaN and infinite seconds, bytes over
       * 2^53, grouped not 0/1, CPU seconds negative but not -1, seconds
       * over 1e9 */
      {0, "-1 0 0 0 0 0 0 0 -1 -1 0"},
      {0, "0 0 0 nan 0 0 0 0 -1 -1 0"},
      {0, "0 0 0 0 inf 0 0 0 -1 -1 0"},
      {0, "9007199254740993 0 0 0 0 0 0 0 -1 -1 0"},
      {0, "0 0 0 0 0 0 0 2 -1 -1 0"},
      {0, "0 0 0 0 0 0 0 0 -2 -1 0"},
      {0, "0 0 0 0 0 0 1e10 0 -1 -1 0"},
      /* extra text after a complete record */
      {0, "0 0 0 0 0 0 0 0 -1 -1 0 junk"},
      /* a per-request entry with a negative byte count or NaN seconds */
      {1, "0 0 0 0 0 0 0 0 -1 -1 1 -5 0 0 0 0 0"},
      {1, "0 0 0 0 0 0 0 0 -1 -1 1 5 nan 0 0 0 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    bool ok = rt_kv_stats_decode(bad[i].text, bad[i].requests, &st);
    if (ok) {
      fprintf(stderr, "accepted: `%s`\n", bad[i].text);
      rt_kv_stats_free(&st);
    }
    T_CHECK(!ok);
    T_CHECK(st.req_bytes == NULL);
  }
  /* the smallest good record */
  T_CHECK(rt_kv_stats_decode("0 0 0 0 0 0 0 0 -1 -1 0", 0, &st));
  rt_kv_stats_free(&st);
  T_CHECK(rt_kv_stats_decode("0 0 0 0 0 0 0 0 -1 -1 0\n", 0, &st));
  rt_kv_stats_free(&st);
  free(good);
}

static void test_copy_record(void) {
  double g = -1;
  T_CHECK(rt_copy_record_decode("67108864 4.5", 67108864, &g));
  T_NEAR(g, 4.5, 1e-12);
  static const char *const bad[] = {
      "", "67108864", "67108864 0", "67108864 -3", "67108864 nan",
      "67108864 inf", "67108864 1e9", "1024 4.5", "67108864 4.5 7",
      "67108864 4.5x",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    bool ok = rt_copy_record_decode(bad[i], 67108864, &g);
    if (ok) fprintf(stderr, "accepted: `%s`\n", bad[i]);
    T_CHECK(!ok);
    T_CHECK(g == 0);
  }
}

/* ---- the option parser (opts.h) ---------------------------------------- */

static char last_error[256];
static int errors;

static int record_error(const char *cmd, const char *msg) {
  snprintf(last_error, sizeof last_error, "%s: %s", cmd, msg);
  errors++;
  return 2;
}

static int seen_node;
static const char *seen_value;

static int take_node(void *ctx, const RpOpt *opt, const char *v) {
  (void)opt;
  seen_node = atoi(v);
  seen_value = v;
  return *(int *)ctx; /* RP_OPT_GO, or a code that stops the parse */
}

typedef struct {
  const char *out, *fmt, *arg;
  bool quiet;
} Got;

/* Parses argv (NULL-terminated, argv[0] the command) with a small table:
 * --output/-o VALUE, --format VALUE, --quiet/-q, --node VALUE (handler). */
static int parse(const char **argv, Got *g, int stop) {
  int argc = 0;
  while (argv[argc]) argc++;
  memset(g, 0, sizeof *g);
  last_error[0] = 0;
  errors = 0;
  seen_node = -1;
  seen_value = NULL;
  const RpOpt opts[] = {
      {"--output", "-o", true, &g->out, NULL, NULL, NULL},
      {"--format", NULL, true, &g->fmt, NULL, NULL, NULL},
      {"--quiet", "-q", false, NULL, &g->quiet, NULL, NULL},
      {"--node", NULL, true, NULL, NULL, take_node, NULL},
  };
  RpOptSpec spec = {"cmd", opts, sizeof opts / sizeof *opts, record_error, NULL,
                    &g->arg, "SPEC", &stop};
  return rp_opts_parse(&spec, argc, (char **)argv, 1);
}

static void test_opts_forms(void) {
  Got g;
  /* --opt VALUE and --opt=VALUE alike, for long names and aliases. */
  const char *a1[] = {"cmd", "--output", "x.json", "--format=json", "s.yaml", NULL};
  T_EQ_INT(parse(a1, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_STR(g.out, "x.json");
  T_EQ_STR(g.fmt, "json");
  T_EQ_STR(g.arg, "s.yaml");
  const char *a2[] = {"cmd", "s.yaml", "--output=x.json", "-q", "--format", "text", NULL};
  T_EQ_INT(parse(a2, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_STR(g.out, "x.json");
  T_EQ_STR(g.fmt, "text");
  T_CHECK(g.quiet);
  const char *a3[] = {"cmd", "-o", "a", "-o=b", NULL};
  T_EQ_INT(parse(a3, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_STR(g.out, "b"); /* the last one wins */
  T_CHECK(g.arg == NULL);
  /* An empty attached value is a value; so is one that looks like an
   * option, after a name that takes one. */
  const char *a4[] = {"cmd", "--output=", "--format", "--quiet", NULL};
  T_EQ_INT(parse(a4, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_STR(g.out, "");
  T_EQ_STR(g.fmt, "--quiet");
  T_CHECK(!g.quiet);
  /* A lone - is an argument (standard input). */
  const char *a5[] = {"cmd", "-", NULL};
  T_EQ_INT(parse(a5, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_STR(g.arg, "-");
  T_EQ_INT(errors, 0);
}

static void test_opts_handlers(void) {
  Got g;
  const char *a1[] = {"cmd", "--node=3", NULL};
  T_EQ_INT(parse(a1, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_INT(seen_node, 3);
  const char *a2[] = {"cmd", "--node", "5", "--output", "x", NULL};
  T_EQ_INT(parse(a2, &g, RP_OPT_GO), RP_OPT_GO);
  T_EQ_INT(seen_node, 5);
  T_EQ_STR(g.out, "x");
  /* A handler's exit code stops the parse at once (--help, a bad value). */
  const char *a3[] = {"cmd", "--node", "7", "--output", "x", NULL};
  T_EQ_INT(parse(a3, &g, 0), 0);
  T_EQ_INT(seen_node, 7);
  T_CHECK(g.out == NULL);
  T_EQ_INT(errors, 0);
}

static void test_opts_errors(void) {
  Got g;
  /* One wording for both binaries; the command's usage_error adds its own
   * prefix. */
  const char *a1[] = {"cmd", "--bogus", NULL};
  T_EQ_INT(parse(a1, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: unknown option '--bogus'");
  const char *a2[] = {"cmd", "s.yaml", "--output", NULL};
  T_EQ_INT(parse(a2, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: option '--output' needs a value");
  const char *a3[] = {"cmd", "-o", NULL};
  T_EQ_INT(parse(a3, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: option '-o' needs a value");
  /* Whole names only; a flag takes no attached value. */
  const char *a4[] = {"cmd", "--outputs=x", NULL};
  T_EQ_INT(parse(a4, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: unknown option '--outputs=x'");
  const char *a5[] = {"cmd", "--quiet=1", NULL};
  T_EQ_INT(parse(a5, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: unknown option '--quiet=1'");
  const char *a6[] = {"cmd", "a", "b", NULL};
  T_EQ_INT(parse(a6, &g, RP_OPT_GO), 2);
  T_EQ_STR(last_error, "cmd: expected one SPEC, got 'a' and 'b'");
  /* The first error stops the parse: nothing after it is taken. */
  const char *a7[] = {"cmd", "--bogus", "--node", "9", NULL};
  T_EQ_INT(parse(a7, &g, RP_OPT_GO), 2);
  T_EQ_INT(seen_node, -1);
  T_EQ_INT(errors, 1);
}

int main(void) {
  T_RUN(test_kv_round_trip);
  T_RUN(test_kv_refused);
  T_RUN(test_copy_record);
  T_RUN(test_opts_forms);
  T_RUN(test_opts_handlers);
  T_RUN(test_opts_errors);
  T_DONE();
}
