/*
 * test_plan.c: the plan emitter and the shared plan loader (plan.h).
 *
 * A spec written inline is compiled in-process (parse, lay_build, default
 * placement, memory ledger, emit); the text is loaded back and compared
 * field by field with the Layout, then damaged in one place at a time to
 * check that the loader refuses it and names the JSON path of the damage.
 * The compile pipeline (compile.h) is checked here too: an expert map with
 * replicas goes through the ledger and the plan, and estimates come from
 * the cost model.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include "compile.h"
#include "layout.h"
#include "outfile.h"
#include "rp_config.h"
#include "t.h"

/* Two nodes of 8: prefill 1 x (tp 4, pp 2), decode 2 x tp 4 (dcp 2). The
 * model has 2 KV heads instead of Llama-3.1-8B's 8, so that tp 4 holds each
 * head twice and dcp 2 splits those copies' tokens (E0213 otherwise). */
static const char spec_text[] =
    "version: 1\n"
    "name: plan-test\n"
    "model:\n"
    "  preset: llama-3.1-8b\n"
    "  attention:\n"
    "    kv_heads: 2\n"
    "hardware:\n"
    "  preset: h100-sxm\n"
    "  nodes: 2\n"
    "  gpus_per_node: 8\n"
    "workload:\n"
    "  input_tokens: 1000\n"
    "  output_tokens: 100\n"
    "slo:\n"
    "  ttft: 500 ms\n"
    "  tpot: 50 ms\n"
    "deployment:\n"
    "  mode: disaggregated\n"
    "  engine: vllm\n"
    "  pools:\n"
    "    - name: prefill\n"
    "      role: prefill\n"
    "      replicas: 1\n"
    "      tp: 4\n"
    "      pp: 2\n"
    "    - name: decode\n"
    "      role: decode\n"
    "      replicas: 2\n"
    "      tp: 4\n"
    "      dcp: 2\n";

typedef struct {
  Diags d;
  Spec *s;
  Layout *L;
  char *text;
  size_t len;
} Compiled;

static bool compile(Compiled *c, int32_t node) {
  memset(c, 0, sizeof *c);
  diags_init(&c->d);
  c->s = spec_parse(&c->d, "plan-test.yaml", spec_text, strlen(spec_text),
                    RP_SOURCE_ROOT "/plans/catalog");
  if (!c->s || diags_failed(&c->d)) {
    diags_print(&c->d, stderr, DIAG_FMT_TEXT, false);
    return false;
  }
  c->L = lay_build(&c->d, c->s, NULL);
  if (!c->L || !lay_place_default(&c->d, c->L) || !lay_memory(&c->d, c->s, c->L)) return false;
  c->text = emit_plan(&c->d, c->s, c->L, NULL, node, &c->len);
  return true;
}

static void compiled_free(Compiled *c) {
  free(c->text);
  lay_free(c->L);
  spec_free(c->s);
  diags_free(&c->d);
}

/* Replaces the first occurrence of from with to; false when absent. */
static char *replace1(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) return NULL;
  StrBuf sb;
  sb_init(&sb);
  sb_putn(&sb, text, (size_t)(at - text));
  sb_puts(&sb, to);
  sb_puts(&sb, at + strlen(from));
  return sb_take(&sb);
}

/* Loads text with one replacement applied and expects an error containing
 * want. */
static void expect_error(const char *text, const char *from, const char *to, const char *want) {
  char *bad = replace1(text, from, to);
  T_CHECK(bad != NULL);
  if (!bad) {
    fprintf(stderr, "  pattern not found: %s\n", from);
    return;
  }
  char *err = NULL;
  Plan *p = plan_load_mem("plan.json", bad, strlen(bad), NULL, &err);
  T_CHECK(p == NULL);
  T_CHECK(err && strstr(err, want));
  if (err && !strstr(err, want)) fprintf(stderr, "  got: %s\n  want: %s\n", err, want);
  plan_free(p);
  free(err);
  free(bad);
}

static void test_roundtrip(void) {
  Compiled c;
  T_CHECK(compile(&c, -1));
  if (!c.text) return;
  char *err = NULL;
  Plan *p = plan_load_mem("plan.json", c.text, c.len, NULL, &err);
  T_CHECK(p != NULL);
  if (!p) {
    fprintf(stderr, "  %s\n", err);
    free(err);
    compiled_free(&c);
    return;
  }
  T_EQ_INT(p->world_size, 16);
  T_EQ_INT(p->nranks, 16);
  T_EQ_INT(p->ngroups, c.L->ngroups);
  T_EQ_INT(p->npools, 2);
  T_EQ_STR(p->pools[1].name, "decode");
  T_EQ_INT(p->pools[0].layer_partition[0], 16); /* vllm, 32 layers over 2 */
  T_EQ_STR(p->spec_sha256, c.s->sha256);
  T_CHECK(!p->partial);
  /* hardware: the spec's nominal figures, bit for bit */
  const HardwareSpec *hw = &c.s->hardware;
  T_CHECK(p->hardware.hbm_bandwidth == hw->gpu.hbm_bandwidth.v && p->hardware.hbm_bandwidth > 0);
  T_CHECK(p->hardware.scale_up_bandwidth == hw->scale_up.bandwidth.v);
  T_CHECK(p->hardware.scale_out_bandwidth == hw->scale_out.bandwidth.v);
  T_CHECK(p->hardware.scale_up_bandwidth > p->hardware.scale_out_bandwidth);
  T_EQ_INT(p->hardware.scale_up_domain, c.L->domain);
  T_CHECK(p->hardware.has_scale_up_latency == hw->scale_up.latency.set);
  T_CHECK(p->hardware.has_scale_out_latency == hw->scale_out.latency.set);
  for (int64_t r = 0; r < p->nranks; r++) {
    const PlanRank *R = &p->ranks[r];
    const LayRank *Q = &c.L->ranks[r];
    T_EQ_INT(R->node, Q->node);
    T_EQ_INT(R->device, Q->device);
    for (int k = 0; k < CO__COUNT; k++) T_EQ_INT(R->coords[k], Q->coords[k]);
    for (int k = 0; k < GK__COUNT; k++) T_EQ_INT(R->groups[k], Q->group[k]);
    T_CHECK(R->memory[MEM_CAPACITY] > 0);
    T_CHECK(R->kv_bytes_per_token > 0);
  }
  /* rank 9: decode instance 0 (ranks 8..11), tp 1, dcp 1 */
  const PlanRank *R = plan_find_rank(p, 9);
  T_EQ_INT(R->coords[CO_DCP], 1);
  const PlanGroup *G = plan_rank_group(p, R, GK_DCP);
  T_CHECK(G && G->n == 2 && G->ranks[0] == 8 && G->ranks[1] == 9);
  T_EQ_INT(p->nreshard, 1);
  /* deterministic: emitting again gives the same bytes */
  size_t len2;
  char *again = emit_plan(&c.d, c.s, c.L, NULL, -1, &len2);
  T_CHECK(len2 == c.len && memcmp(again, c.text, len2) == 0);
  free(again);
  plan_free(p);
  compiled_free(&c);
}

static void test_split_node(void) {
  Compiled c;
  T_CHECK(compile(&c, 1));
  if (!c.text) return;
  char *err = NULL;
  Plan *p = plan_load_mem("node-1.plan.json", c.text, c.len, NULL, &err);
  T_CHECK(p != NULL);
  if (!p) {
    fprintf(stderr, "  %s\n", err);
    free(err);
    compiled_free(&c);
    return;
  }
  T_CHECK(p->partial);
  T_EQ_INT(p->partial_node, 1);
  T_EQ_INT(p->nranks, 8);
  T_EQ_INT(p->ranks[0].rank, 8);
  T_CHECK(plan_find_rank(p, 3) == NULL);
  T_CHECK(plan_find_rank(p, 15) != NULL);
  /* only groups of node 1's ranks, but the world group lists everyone */
  for (int64_t g = 0; g < p->ngroups; g++) {
    bool mine = false;
    for (int32_t j = 0; j < p->groups[g].n; j++)
      if (plan_find_rank(p, p->groups[g].ranks[j])) mine = true;
    T_CHECK(mine);
  }
  const PlanGroup *w = plan_rank_group(p, plan_find_rank(p, 8), GK_WORLD);
  T_CHECK(w && w->n == 16);
  plan_free(p);
  compiled_free(&c);
}

static void test_errors(void) {
  Compiled c;
  T_CHECK(compile(&c, -1));
  if (!c.text) return;
  const char *t = c.text;
  char *err = NULL;
  /* truncated */
  Plan *p = plan_load_mem("plan.json", t, c.len / 2, NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "plan.json: line ") && strstr(err, "not a valid plan"));
  free(err);
  p = plan_load_mem("plan.json", "", 0, NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "empty"));
  free(err);
  /* other version, not an object */
  expect_error(t, "\"rankplan.plan/1\"", "\"rankplan.plan/2\"",
               "plan.json: format: expected \"rankplan.plan/1\", got \"rankplan.plan/2\"");
  p = plan_load_mem("plan.json", "[1]", 3, NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "expected a JSON object at the top, got an array"));
  free(err);
  /* hardware: required, finite, not negative; each field named by its path */
  expect_error(t, "\"hardware\": ", "\"hw\": ", "plan.json: hardware: missing");
  expect_error(t, "\"scale_out\":{\"bandwidth\":", "\"scale_out\":{\"bandwidth\":-",
               "plan.json: hardware.scale_out.bandwidth: expected a finite number > 0, got -");
  expect_error(t, "\"scale_up\":{\"domain\":8,", "\"scale_up\":{\"domain\":0,",
               "plan.json: hardware.scale_up.domain: expected 1..");
  expect_error(t, "\"scale_out\":{\"bandwidth\":50000000000,\"latency_s\":null",
               "\"scale_out\":{\"bandwidth\":50000000000,\"latency_s\":-1e-6",
               "plan.json: hardware.scale_out.latency_s: expected a finite number >= 0, got -1e-06");
  expect_error(t, "{\"hbm_bandwidth\":", "{\"hbm_bandwidth\":true,\"x\":",
               "plan.json: hardware.hbm_bandwidth: expected a number or null, got a boolean");
  /* a latency the spec gives reads back exactly */
  {
    const char *from = "\"scale_up\":{\"domain\":8,\"bandwidth\":450000000000,\"latency_s\":null";
    const char *at = strstr(t, from);
    T_CHECK(at != NULL);
    if (at) {
      char *x = rp_sprintf("%.*s\"scale_up\":{\"domain\":8,\"bandwidth\":450000000000,"
                           "\"latency_s\":2.5e-06%s", (int)(at - t), t, at + strlen(from));
      p = plan_load_mem("plan.json", x, strlen(x), NULL, &err);
      T_CHECK(p && p->hardware.has_scale_up_latency && p->hardware.scale_up_latency_s == 2.5e-6 &&
              !p->hardware.has_scale_out_latency);
      if (!p) free(err);
      plan_free(p);
      free(x);
    }
  }
  /* corrupt fields, each named by its JSON path */
  expect_error(t, "{\"rank\":12,\"node\":1,", "{\"rank\":12,\"node\":\"1\",",
               "ranks[12].node: expected an integer, got a string");
  expect_error(t, "{\"rank\":12,\"node\":1,\"local_rank\":4,\"device\":4",
               "{\"rank\":12,\"node\":1,\"local_rank\":4,\"device\":9",
               "ranks[12].device: expected 0..7, got 9");
  expect_error(t, "{\"rank\":12,\"node\":1,", "{\"rank\":12,\"node\":5,",
               "ranks[12].node: node 5 is not in nodes[]");
  expect_error(t, "{\"rank\":3,", "{\"rank\":4,", "ranks[3].rank: expected 3");
  expect_error(t, "\"spec_sha256\": \"", "\"spec_sha256\": \"x", "spec_sha256: expected 64 lowercase hex");
  expect_error(t, "\"world_size\": 16", "\"world_size\": 17", "pools: the pools hold 16 ranks, expected world_size 17");
  expect_error(t, "\"kv\":{\"bytes_per_token\":", "\"kv\":{\"bytes_per_tokens\":",
               "ranks[0].kv.bytes_per_token: missing");
  /* consistency: a coordinate that disagrees with the tp group */
  expect_error(t, "{\"rank\":1,\"node\":0,\"local_rank\":1,\"device\":1,\"pool\":\"prefill\",\"instance\":0,\"coords\":{\"tp\":1,\"cp\":0,\"dp\":0,\"pp\":0",
               "{\"rank\":1,\"node\":0,\"local_rank\":1,\"device\":1,\"pool\":\"prefill\",\"instance\":0,\"coords\":{\"tp\":1,\"cp\":0,\"dp\":0,\"pp\":1",
               "members of a tp group share coords.pp");
  /* a rank pointing at a group that does not list it */
  expect_error(t, "\"groups\":{\"tp\":0,", "\"groups\":{\"tp\":1,", "is listed in tp group 0 but its groups.tp is 1");
  /* two ranks on one GPU */
  expect_error(t, "{\"rank\":1,\"node\":0,\"local_rank\":1,\"device\":1,",
               "{\"rank\":1,\"node\":0,\"local_rank\":1,\"device\":0,", "node 0 device 0 is used by rank 0 too");
  /* the JSON reader: duplicate keys, nesting, integers past int64 */
  expect_error(t, "\"world_size\": 16", "\"world_size\": 16, \"world_size\": 16", "duplicate object key");
  expect_error(t, "\"world_size\": 16", "\"world_size\": 99999999999999999999", "integer out of range");
  expect_error(t, "\"world_size\": 16", "\"world_size\": 16.0", "world_size: expected an integer, got a number with a fraction");
  expect_error(t, "\"estimates\": null", "\"estimates\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
               "nesting too deep");
  expect_error(t, "\"estimates\": null", "\"estimates\": nul", "invalid token");
  expect_error(t, "\"estimates\": null",
               "\"estimates\": {\"ttft_ms\": 1, \"tpot_ms\": 1, \"throughput_tok_s\": 1, "
               "\"goodput_tok_s_per_gpu\": 0, \"pools\": [{\"pool\": \"nope\"}]}",
               "estimates.pools[0].pool: no pool named `nope`");
  expect_error(t, "\"estimates\": null",
               "\"estimates\": {\"ttft_ms\": 1, \"tpot_ms\": 1, \"throughput_tok_s\": 1, "
               "\"goodput_tok_s_per_gpu\": 0, \"pools\": [{\"pool\": \"prefill\", \"prefill\": "
               "{\"time_ms\": -1}}]}",
               "estimates.pools[0].prefill.time_ms: expected a finite number >= 0, got -1");
  expect_error(t, "\"format\"", "\"form\\qat\"", "invalid escape in a string");
  /* escapes decode to UTF-8; numbers with exponents are read */
  {
    char *a = replace1(t, "\"name\":\"decode\"", "\"name\":\"d\\u00e9code\\ud83d\\ude00\"");
    char *b = a ? replace1(a, "\"estimates\": null", "\"estimates\": {\"ttft_ms\": 1.5e2, \"tpot_ms\": 20, "
                                                    "\"throughput_tok_s\": 1E3, \"goodput_tok_s_per_gpu\": 0.25, "
                                                    "\"pools\": [{\"pool\": \"prefill\", \"prefill\": null, "
                                                    "\"d\\u0065code\": null, \"max_batch\": null}]}")
              : NULL;
    /* every rank and group of the pool names it too */
    StrBuf sb;
    sb_init(&sb);
    for (const char *q = b; q && *q;) {
      const char *at = strstr(q, "\"decode\"");
      if (!at) {
        sb_puts(&sb, q);
        break;
      }
      sb_putn(&sb, q, (size_t)(at - q));
      sb_puts(&sb, "\"d\\u00e9code\\ud83d\\ude00\"");
      q = at + strlen("\"decode\"");
    }
    char *c2 = replace1(sb.buf, "\"role\":\"d\\u00e9code\\ud83d\\ude00\"", "\"role\":\"decode\"");
    char *c3 = c2 ? replace1(c2, "\"d\\u00e9code\\ud83d\\ude00\":", "\"decode\":") : NULL;
    sb_free(&sb);
    sb_init(&sb);
    if (c3) sb_puts(&sb, c3);
    free(c2);
    free(c3);
    p = plan_load_mem("plan.json", sb.buf, sb.len, NULL, &err);
    T_CHECK(p != NULL);
    if (p) {
      T_EQ_STR(p->pools[1].name, "d\xc3\xa9" "code\xf0\x9f\x98\x80");
      T_CHECK(p->has_estimates && p->ttft_ms == 150.0 && p->throughput_tok_s == 1000.0);
    } else {
      fprintf(stderr, "  %s\n", err);
      free(err);
    }
    plan_free(p);
    sb_free(&sb);
    free(a);
    free(b);
  }
  /* a rank missing from its node's list */
  expect_error(t, "\"ranks\":[0,1,2,3,4,5,6,7]}", "\"ranks\":[0,1,2,3,4,5,6]}",
               "nodes: the nodes list 15 ranks, expected the 16 of ranks[]");
  /* spec digest */
  char tmpl[] = "/tmp/rankplan-spec-XXXXXX";
  int fd = mkstemp(tmpl);
  T_CHECK(fd >= 0);
  if (fd >= 0) {
    T_CHECK(write(fd, spec_text, strlen(spec_text)) == (ssize_t)strlen(spec_text));
    close(fd);
    p = plan_load_mem("plan.json", t, c.len, tmpl, &err);
    T_CHECK(p != NULL);
    plan_free(p);
    fd = open(tmpl, O_WRONLY | O_APPEND);
    T_CHECK(write(fd, "# edited\n", 9) == 9);
    close(fd);
    p = plan_load_mem("plan.json", t, c.len, tmpl, &err);
    T_CHECK(p == NULL && err && strstr(err, "the plan was compiled from another spec"));
    free(err);
    unlink(tmpl);
  }
  p = plan_load("/nonexistent/plan.json", NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "cannot read the plan"));
  free(err);
  compiled_free(&c);
}

static void test_atomic_write(void) {
  Compiled c;
  T_CHECK(compile(&c, -1));
  if (!c.text) return;
  char dir[] = "/tmp/rankplan-out-XXXXXX";
  T_CHECK(mkdtemp(dir) != NULL);
  char *path = rp_sprintf("%s/plan.json", dir);
  char *split = rp_sprintf("%s/nodes", dir);
  char *what = NULL;
  T_EQ_INT(emit_plan_files(&c.d, c.s, c.L, NULL, path, split, &what), 0);
  char *back;
  size_t len;
  T_EQ_INT(rp_read_file(path, (size_t)1 << 30, &back, &len), 0);
  T_CHECK(len == c.len && memcmp(back, c.text, len) == 0);
  free(back);
  char *n1 = rp_sprintf("%s/node-1.plan.json", split);
  T_CHECK(access(n1, R_OK) == 0);
  free(n1);
  /* an unwritable target leaves nothing behind and reports the path */
  char *bad = rp_sprintf("%s/missing/plan.json", dir);
  int e = emit_plan_files(&c.d, c.s, c.L, NULL, bad, NULL, &what);
  T_EQ_INT(e, ENOENT);
  T_EQ_STR(what, bad);
  free(what);
  free(bad);
  free(path);
  free(split);
  char *cmd = rp_sprintf("rm -rf '%s'", dir);
  T_EQ_INT(system(cmd), 0);
  free(cmd);
  compiled_free(&c);
}

/* Damage the plan at pseudo-random places (a fixed xorshift sequence, so
 * the test is the same on every run): the loader must either refuse it
 * with a message that starts with the file name, or accept a plan whose
 * invariants hold. Under the sanitizer build this also shows it reads no
 * byte it should not. */
static void test_mutations(void) {
  Compiled c;
  T_CHECK(compile(&c, -1));
  if (!c.text) return;
  uint64_t x = 0x9e3779b97f4a7c15u;
  static const char repl[] = "0123456789\"{}[],:-x ";
  int refused = 0, accepted = 0, bad = 0;
  for (int i = 0; i < 2000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    char *t = rp_strndup(c.text, c.len);
    size_t at = (size_t)(x % c.len), len = c.len;
    if (i % 10 == 0) len = at; /* truncation */
    else t[at] = repl[(x >> 32) % (sizeof repl - 1)];
    char *err = NULL;
    Plan *p = plan_load_mem("plan.json", t, len, NULL, &err);
    if (p) {
      accepted++;
      for (int64_t r = 0; r < p->nranks; r++) {
        const PlanRank *R = &p->ranks[r];
        if (R->node < 0 || R->device < 0 || !plan_rank_group(p, R, GK_TP)) bad++;
      }
    } else {
      refused++;
      if (!err || strncmp(err, "plan.json: ", 11) != 0) bad++;
    }
    plan_free(p);
    free(err);
    free(t);
  }
  T_EQ_INT(bad, 0);
  T_CHECK(refused > 600);
  T_CHECK(accepted > 0); /* e.g. a space replaced by a space */
  compiled_free(&c);
}

static void test_names(void) {
  GroupKind k;
  for (int i = 0; i < GK__COUNT; i++) {
    T_CHECK(plan_kind_parse(plan_kind_name((GroupKind)i), &k));
    T_EQ_INT(k, i);
  }
  T_CHECK(!plan_kind_parse("tensor", &k));
  T_CHECK(plan_kind_fixes(GK_TP, CO_PP));
  T_CHECK(!plan_kind_fixes(GK_TP, CO_TP));
  T_CHECK(!plan_kind_fixes(GK_TP, CO_EP));
  T_CHECK(plan_kind_fixes(GK_EP, CO_EDP));
  T_CHECK(!plan_kind_fixes(GK_WORLD, CO_TP));
}

/* Qwen3-235B-A22B (128 experts, 94 MoE layers) on one node: tp 4 x dp 2,
 * ep 8. */
static const char moe_text[] =
    "version: 1\n"
    "name: moe-test\n"
    "model:\n"
    "  preset: qwen3-235b-a22b\n"
    "hardware:\n"
    "  preset: h200-sxm\n"
    "  nodes: 1\n"
    "  gpus_per_node: 8\n"
    "workload:\n"
    "  input_tokens: 3000\n"
    "  output_tokens: 800\n"
    "slo:\n"
    "  ttft: 1000 ms\n"
    "  tpot: 50 ms\n"
    "deployment:\n"
    "  mode: aggregated\n"
    "  pools:\n"
    "    - name: main\n"
    "      tp: 4\n"
    "      dp: 2\n"
    "      ep: 8\n";

/* plan_escape: what a terminal acts on is written out, one \\xHH per byte
 * (C0 controls, DEL, C1 controls in UTF-8, bytes that are not UTF-8);
 * printable ASCII and other UTF-8 stay as they are. */
static void test_escape(void) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"prefill", "prefill"},
      {"a\x1b[2Jb", "a\\x1b[2Jb"},
      {"\t\n\r\x07", "\\x09\\x0a\\x0d\\x07"},
      {"del\x7f", "del\\x7f"},
      {"c1 \xc2\x9b" "31m", "c1 \\xc2\\x9b31m"}, /* U+009B, CSI */
      {"nbsp \xc2\xa0 \xc3\xa9", "nbsp \xc2\xa0 \xc3\xa9"}, /* U+00A0, e-acute */
      {"\xe2\x82\xac \xf0\x9f\x98\x80", "\xe2\x82\xac \xf0\x9f\x98\x80"},
      {"bad \xff \xe2\x82", "bad \\xff \\xe2\\x82"}, /* not UTF-8, cut short */
      {"\\x1b", "\\x1b"},                              /* already text */
      {"", ""},
  };
  for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
    char *e = plan_escape(cases[i].in);
    T_CHECK(strcmp(e, cases[i].out) == 0);
    free(e);
  }
}

/* Plan strings are UTF-8 (RFC 8259 8.1): bytes that are not, overlong
 * forms, surrogates and sequences cut short are refused by the reader;
 * well-formed ones pass it (and then fail later: not an object). */
static void test_utf8(void) {
  static const char *const bad[] = {"\"a\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xe2\x82\"",
                                    "\"\xf4\x90\x80\x80\"", "\"\x80\"", "\"\xe0\x9f\xbf\""};
  static const char *const good[] = {"\"\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xf0\x9f\x98\x80\"",
                                     "\"\xc2\x9b\""};
  char *err = NULL;
  for (size_t i = 0; i < RP_ARRAY_LEN(bad); i++) {
    Plan *p = plan_load_mem("plan.json", bad[i], strlen(bad[i]), NULL, &err);
    T_CHECK(p == NULL && err && strstr(err, "(JSON: invalid UTF-8 in a string)"));
    free(err);
  }
  for (size_t i = 0; i < RP_ARRAY_LEN(good); i++) {
    Plan *p = plan_load_mem("plan.json", good[i], strlen(good[i]), NULL, &err);
    T_CHECK(p == NULL && err && strstr(err, "expected a JSON object at the top, got a string"));
    free(err);
  }
}

/* Files the loader refuses to read: a device, a directory, a FIFO (opened
 * without blocking), and one over PLAN_MAX_BYTES (a sparse file: no data is
 * read). Each message names the file. */
static void test_read_refusals(void) {
  char *err = NULL;
  Plan *p = plan_load("/dev/zero", NULL, &err);
  T_CHECK(p == NULL && err && strcmp(err, "/dev/zero: cannot read the plan: not a regular file (a character device)") == 0);
  free(err);
  p = plan_load("/", NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "/: cannot read the plan: not a regular file (a directory)"));
  free(err);
  char dir[] = "/tmp/test_plan_XXXXXX";
  T_CHECK(mkdtemp(dir) != NULL);
  char *fifo = rp_sprintf("%s/plan.fifo", dir), *big = rp_sprintf("%s/big.json", dir);
  T_CHECK(mkfifo(fifo, 0600) == 0);
  p = plan_load(fifo, NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "plan.fifo: cannot read the plan: not a regular file (a FIFO)"));
  free(err);
  int fd = open(big, O_WRONLY | O_CREAT, 0600);
  T_CHECK(fd >= 0 && ftruncate(fd, (off_t)PLAN_MAX_BYTES + 1) == 0);
  close(fd);
  p = plan_load(big, NULL, &err);
  T_CHECK(p == NULL && err && strstr(err, "big.json: cannot read the plan: over 536870912 bytes"));
  free(err);
  unlink(fifo);
  unlink(big);
  rmdir(dir);
  free(fifo);
  free(big);
}

static void test_expert_map(void) {
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "moe-test.yaml", moe_text, strlen(moe_text), RP_SOURCE_ROOT "/plans/catalog");
  Layout *L = compile_layout(s, &d);
  T_CHECK(L != NULL);
  if (!L) {
    diags_print(&d, stderr, DIAG_FMT_TEXT, false);
    spec_free(s);
    diags_free(&d);
    return;
  }
  int64_t w0 = L->pools[0].mem[0][MEM_WEIGHTS], kv0 = L->pools[0].mem[0][MEM_KV_CACHE];
  /* Expert e on ep rank e % 8; experts 0..15 get a second replica on rank
   * (e + 1) % 8: every rank holds 16 + 2 = 18 experts. */
  int64_t offsets[129], ranks[144], n = 0;
  for (int64_t e = 0; e < 128; e++) {
    offsets[e] = n;
    ranks[n++] = e % 8;
    if (e < 16) ranks[n++] = (e + 1) % 8;
  }
  offsets[128] = n;
  T_EQ_INT(n, 144);
  lay_set_expert_map(L, 0, 128, 8, 18, offsets, ranks);
  T_CHECK(lay_memory(&d, s, L));
  /* One expert: gate, up and down projections of hidden 4096 x 1536, bf16,
   * in each of the 94 layers (plans/catalog/models/qwen3-235b-a22b.yaml). */
  int64_t one = (int64_t)3 * 4096 * 1536 * 2 * 94;
  T_EQ_INT(L->pools[0].mem[0][MEM_WEIGHTS] - w0, 2 * one);
  T_EQ_INT(kv0 - L->pools[0].mem[0][MEM_KV_CACHE], 2 * one);
  /* Ep rank 1 holds experts 1, 9, 17, ... (e % 8 == 1) and the replicas
   * of experts 0 and 8 ((e + 1) % 8 == 1), ascending: 0, 1, 8, 9, ... */
  int32_t *m = L->pools[0].expert_map;
  T_EQ_INT(L->pools[0].expert_slots, 18);
  T_EQ_INT(m[18 * 1 + 0], 0);
  T_EQ_INT(m[18 * 1 + 1], 1);
  T_EQ_INT(m[18 * 1 + 2], 8);
  T_EQ_INT(m[18 * 1 + 3], 9);
  size_t len;
  char *text = emit_plan(&d, s, L, NULL, -1, &len);
  char *err = NULL;
  Plan *p = plan_load_mem("moe.json", text, len, NULL, &err);
  T_CHECK(p != NULL);
  if (p) {
    T_EQ_INT(p->pools[0].expert_slots, 18);
    T_CHECK(p->pools[0].expert_map && memcmp(p->pools[0].expert_map, m, 8 * 18 * sizeof *m) == 0);
    T_EQ_INT(p->ranks[0].shard[SH_EXPERTS][1], 0);
    T_EQ_INT(p->ranks[0].memory[MEM_WEIGHTS], L->pools[0].mem[0][MEM_WEIGHTS]);
  } else {
    fprintf(stderr, "  %s\n", err);
  }
  plan_free(p);
  free(err);
  /* A list with a repeat is refused with its path. */
  char *bad = replace1(text, "[0,1,8,9,", "[0,1,8,8,");
  T_CHECK(bad != NULL);
  if (bad) {
    err = NULL;
    p = plan_load_mem("moe.json", bad, strlen(bad), NULL, &err);
    T_CHECK(p == NULL && err && strstr(err, "pools[0].expert_map.ep_ranks[1]: expected ascending"));
    plan_free(p);
    free(err);
    free(bad);
  }
  free(text);
  /* Estimates for the aggregated pool: finite, positive, within the SLOs
   * when goodput is counted. */
  PlanEstimates est;
  const char *why = NULL;
  T_CHECK(compile_estimates(s, L, NULL, &est, &why));
  T_CHECK(est.has && est.ttft_ms > 0 && est.tpot_ms > 0 && est.throughput_tok_s > 0);
  T_CHECK(est.goodput_tok_s_per_gpu == 0 ||
          (est.ttft_ms <= 1000 && est.tpot_ms <= 50 &&
           fabs(est.goodput_tok_s_per_gpu * 8 - est.throughput_tok_s) < 1e-6 * est.throughput_tok_s));
  lay_free(L);
  spec_free(s);
  diags_free(&d);
}

/* Estimates need a workload and SLOs: without the SLOs they stay null and
 * say why. */
static void test_estimates_need_slo(void) {
  char *text = replace1(moe_text, "slo:\n  ttft: 1000 ms\n  tpot: 50 ms\n", "");
  T_CHECK(text != NULL);
  if (!text) return;
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "moe-test.yaml", text, strlen(text), RP_SOURCE_ROOT "/plans/catalog");
  Layout *L = compile_layout(s, &d);
  T_CHECK(L != NULL);
  if (L) {
    PlanEstimates est;
    const char *why = NULL;
    T_CHECK(!compile_estimates(s, L, NULL, &est, &why));
    T_CHECK(!est.has && why && strstr(why, "slo"));
  }
  lay_free(L);
  spec_free(s);
  diags_free(&d);
  free(text);
  /* With them, the disaggregated pair gets figures. */
  Compiled c;
  T_CHECK(compile(&c, -1));
  PlanEstimates est;
  const char *why = NULL;
  T_CHECK(compile_estimates(c.s, c.L, NULL, &est, &why) && est.has);
  T_CHECK(isfinite(est.ttft_ms) && est.ttft_ms > 0 && est.tpot_ms > 0);
  compiled_free(&c);
}

/* The plan's estimates.pools read back as compile_estimates computed
 * them (to the six decimals the plan prints). */
static void check_est_pools_read_back(const char *path, const PlanEstimates *est) {
  char *err = NULL;
  Plan *p = plan_load(path, NULL, &err);
  T_CHECK(p != NULL && p->has_estimates);
  if (!p || !p->has_estimates) {
    plan_free(p);
    free(err);
    return;
  }
  T_EQ_INT(p->nest_pools, est->npools);
  for (size_t i = 0; i < p->nest_pools && i < est->npools; i++) {
    const PlanPoolEst *a = &p->est_pools[i], *b = &est->pools[i];
    T_EQ_INT(a->pool, b->pool);
    T_CHECK(a->has_prefill == b->has_prefill && a->has_decode == b->has_decode);
    T_EQ_INT(a->max_batch, b->has_decode ? b->max_batch : 0);
    T_CHECK(fabs(a->prefill.time_ms - b->prefill.time_ms) < 1e-6);
    T_CHECK(fabs(a->decode.time_ms - b->decode.time_ms) < 1e-6);
    for (int k = 0; k < PEC__COUNT; k++)
      T_CHECK(fabs(a->decode.comm_ms[k] - b->decode.comm_ms[k]) < 1e-6);
    /* The parts are the roofline's inputs: the step is at least the larger
     * of compute and HBM plus the communication. */
    if (b->has_decode) {
      double comm = 0;
      for (int k = 0; k < PEC__COUNT; k++) comm += b->decode.comm_ms[k];
      T_CHECK(b->decode.time_ms + 1e-9 >= comm + b->decode.overhead_ms);
      T_CHECK(b->batch >= 1 && b->batch <= b->max_batch);
    }
  }
  plan_free(p);
  free(err);
}

/* compile_spec_to_plan, as `rankplan search -o` calls it: the estimates
 * are compile_estimates' figures, and the spec's hooks run (here a
 * placement hook that puts rank r on GPU 7 - r). */
static void test_compile_call(void) {
  char dir[] = "/tmp/rankplan-compile-XXXXXX";
  T_CHECK(mkdtemp(dir) != NULL);
  char *hook = rp_sprintf("%s/reverse.lua", dir), *out = rp_sprintf("%s/plan.json", dir);
  const char lua[] = "return function(ctx)\n  local p = {}\n"
                     "  for r = 0, #ctx.ranks - 1 do p[r + 1] = {rank = r, node = 0, gpu = 7 - r} end\n"
                     "  return p\nend\n";
  T_EQ_INT(rp_write_file_atomic(hook, lua, strlen(lua)), 0);
  char *with = rp_sprintf("%s  hooks:\n    placement: %s\n", moe_text, hook);
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "moe-test.yaml", with, strlen(with), RP_SOURCE_ROOT "/plans/catalog");
  T_CHECK(s != NULL && !diags_failed(&d));
  CompileOpts o = {out, NULL, NULL};
  char *what = NULL;
  int werr = -1;
  T_EQ_INT(compile_spec_to_plan(s, &o, &d, &what, &werr), RP_EXIT_OK);
  T_EQ_INT(werr, 0);
  T_CHECK(what == NULL);
  char *err = NULL;
  Plan *p = plan_load(out, NULL, &err);
  T_CHECK(p != NULL);
  if (p) {
    T_EQ_INT(p->ranks[0].device, 7);
    T_EQ_INT(p->ranks[7].device, 0);
  } else {
    fprintf(stderr, "  %s\n", err);
  }
  plan_free(p);
  free(err);
  size_t len = 0;
  char *text = NULL;
  T_EQ_INT(rp_read_file(out, (size_t)1 << 24, &text, &len), 0);
  Layout *L = compile_layout(s, &d);
  PlanEstimates est;
  const char *why = NULL;
  T_CHECK(L && compile_estimates(s, L, NULL, &est, &why) && est.has);
  char *want = rp_sprintf("\"estimates\": {\"ttft_ms\":%.6f,\"tpot_ms\":%.6f,\"throughput_tok_s\":%.6f,"
                          "\"goodput_tok_s_per_gpu\":%.6f,\"pools\":[", est.ttft_ms, est.tpot_ms,
                          est.throughput_tok_s, est.goodput_tok_s_per_gpu);
  T_CHECK(text && strstr(text, want));
  free(want);
  check_est_pools_read_back(out, &est);
  lay_free(L);
  free(text);
  /* A bad spec writes nothing and says so with diagnostics. */
  unlink(out);
  spec_free(s);
  diags_free(&d);
  diags_init(&d);
  char *bad = replace1(with, "      tp: 4\n", "      tp: 3\n");
  s = bad ? spec_parse(&d, "moe-test.yaml", bad, strlen(bad), RP_SOURCE_ROOT "/plans/catalog") : NULL;
  T_CHECK(s != NULL);
  if (s) {
    T_EQ_INT(compile_spec_to_plan(s, &o, &d, &what, &werr), RP_EXIT_INPUT);
    T_CHECK(diags_failed(&d) && access(out, F_OK) != 0);
  }
  free(bad);
  free(what);
  spec_free(s);
  diags_free(&d);
  unlink(hook);
  rmdir(dir);
  free(with);
  free(hook);
  free(out);
}

int main(void) {
  T_RUN(test_names);
  T_RUN(test_roundtrip);
  T_RUN(test_split_node);
  T_RUN(test_errors);
  T_RUN(test_atomic_write);
  T_RUN(test_mutations);
  T_RUN(test_escape);
  T_RUN(test_utf8);
  T_RUN(test_read_refusals);
  T_RUN(test_expert_map);
  T_RUN(test_estimates_need_slo);
  T_RUN(test_compile_call);
  T_DONE();
}
