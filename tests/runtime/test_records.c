/*
 * test_records.c: the store records ranks post for their launcher
 * (`kv/RANK`: KV transfer figures, `copy/RANK`: the --probe memory copy).
 * Anyone who can reach the store can write them, so the decoders take
 * untrusted text: a record that does not parse, is cut short, has extra
 * text, or holds counts no run can give is refused, never summed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "launcher.h"
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

int main(void) {
  T_RUN(test_kv_round_trip);
  T_RUN(test_kv_refused);
  T_RUN(test_copy_record);
  T_DONE();
}
