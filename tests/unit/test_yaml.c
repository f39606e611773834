/* Unit tests for ytree.c (tree, positions, caps) and parse.c (typing,
 * defaults and their positions, presets, structure rules). */
#include "rp_config.h"
#include "spec.h"
#include "t.h"
#include "ytree.h"

/* Loads text; returns the root (NULL on error) and the first code. */
static YNode *load(Diags *d, YArena *a, const char *text) {
  diags_init(d);
  const char *f = diags_add_source(d, "t.yaml", text, strlen(text));
  return yaml_load(d, a, f, text, strlen(text));
}

static DiagCode first_code(const Diags *d) { return d->list.len ? d->list.items[0]->code : DIAG__COUNT; }

static void test_tree(void) {
  Diags d;
  YArena *a = yaml_arena_new();
  YNode *r = load(&d, a, "a: 1\nb:\n  - x\n  - 'y'\nc: {k: v}\n");
  T_CHECK(r && r->kind == YN_MAP && r->n == 3);
  if (r) {
    YNode *b = yaml_map_get(r, "b");
    T_CHECK(b && b->kind == YN_SEQ && b->n == 2);
    if (b && b->n == 2) {
      T_EQ_STR(b->items[1]->str, "y");
      T_EQ_INT(b->items[1]->style, YS_SINGLE);
      T_EQ_INT(b->items[1]->loc.line, 4);
      T_EQ_INT(b->items[1]->loc.col, 5);
    }
    YNode *v = yaml_map_get(yaml_map_get(r, "c"), "k");
    T_CHECK(v && v->loc.line == 5 && v->loc.col == 8);
    T_EQ_STR(yaml_node_type_name(yaml_map_get(r, "a")), "integer");
    T_EQ_STR(yaml_node_type_name(b), "sequence");
    T_CHECK(yaml_map_get(r, "zz") == NULL);
  }
  T_EQ_INT(d.nerrors, 0);
  diags_free(&d);
  yaml_arena_free(a);
}

/* whole: the error leaves the tree usable, so a root comes back */
static void check_error(const char *text, DiagCode want, int line, int col, bool whole) {
  Diags d;
  YArena *a = yaml_arena_new();
  YNode *r = load(&d, a, text);
  T_CHECK((r != NULL) == whole);
  T_CHECK(d.nerrors > 0);
  T_EQ_INT(first_code(&d), want);
  if (d.list.len) {
    T_EQ_INT(d.list.items[0]->loc.line, line);
    T_EQ_INT(d.list.items[0]->loc.col, col);
  }
  diags_free(&d);
  yaml_arena_free(a);
}

/* A UTF-8 byte order mark and CRLF line ends are fine and take no column. */
static void test_bom_crlf(void) {
  Diags d;
  YArena *a = yaml_arena_new();
  YNode *r = load(&d, a, "\xef\xbb\xbf" "a: 1\r\nb: 2\r\n");
  T_CHECK(r != NULL);
  YNode *b = yaml_map_get(r, "b");
  T_CHECK(b && b->loc.line == 2 && b->loc.col == 4);
  if (r) T_EQ_INT(r->pairs[0].key->loc.col, 1);
  diags_free(&d);
  yaml_arena_free(a);
}

static void check_fails(const char *text, DiagCode want, int line, int col) {
  check_error(text, want, line, col, false);
}

static void test_errors(void) {
  check_fails("a: [1, 2\n", DIAG_E0005, 1, 4);
  check_error("a: 1\nb: 2\na: 3\n", DIAG_E0013, 3, 1, true);
  check_fails("a: &x [*x]\n", DIAG_E0010, 1, 8);
  check_fails("a: *nope\n", DIAG_E0011, 1, 4);
  check_error("a: !!str x\n", DIAG_E0014, 1, 4, true);
  check_fails("a: 1\n---\nb: 2\n", DIAG_E0008, 2, 1);
  check_fails("# nothing\n", DIAG_E0007, 0, 0);
  check_fails("a:\n\tb: 1\n", DIAG_E0006, 2, 1);
  check_error("[a]: 1\n", DIAG_E0015, 1, 1, true);
  check_fails("a: b\n  c\xff\n", DIAG_E0003, 2, 4);
  /* NUL inside the buffer: the pre-scan sees it even though C strings stop */
  {
    Diags d;
    YArena *a = yaml_arena_new();
    diags_init(&d);
    static const char t[] = "a: 1\nb: x\0y\n";
    T_CHECK(yaml_load(&d, a, "t", t, sizeof t - 1) == NULL);
    T_EQ_INT(first_code(&d), DIAG_E0004);
    T_EQ_INT(d.list.items[0]->loc.line, 2);
    T_EQ_INT(d.list.items[0]->loc.col, 5);
    diags_free(&d);
    yaml_arena_free(a);
  }
}

/* Nesting: the root mapping is level 1; YAML_MAX_DEPTH levels pass. */
static void test_depth(void) {
  for (int depth = YAML_MAX_DEPTH - 1; depth <= YAML_MAX_DEPTH + 1; depth++) {
    StrBuf sb;
    sb_init(&sb);
    sb_puts(&sb, "a: ");
    for (int i = 1; i < depth; i++) sb_putc(&sb, '[');
    for (int i = 1; i < depth; i++) sb_putc(&sb, ']');
    sb_putc(&sb, '\n');
    Diags d;
    YArena *a = yaml_arena_new();
    YNode *r = load(&d, a, sb.buf);
    if (depth <= YAML_MAX_DEPTH) {
      T_CHECK(r != NULL);
      T_EQ_INT(r ? r->height : 0, depth);
    } else {
      T_CHECK(r == NULL);
      T_EQ_INT(first_code(&d), DIAG_E0012);
    }
    diags_free(&d);
    yaml_arena_free(a);
    sb_free(&sb);
  }
  /* 200,000 deep, unclosed: stops at the cap */
  size_t n = 200000;
  char *t = rp_malloc(n + 8);
  memcpy(t, "a: ", 3);
  memset(t + 3, '[', n);
  t[n + 3] = '\0';
  Diags d;
  YArena *a = yaml_arena_new();
  T_CHECK(load(&d, a, t) == NULL);
  T_EQ_INT(first_code(&d), DIAG_E0012);
  T_EQ_INT(d.nerrors, 1);
  diags_free(&d);
  yaml_arena_free(a);
  free(t);
  /* aliases count towards depth: 40 + 40 levels */
  StrBuf sb;
  sb_init(&sb);
  sb_puts(&sb, "a: &x ");
  for (int i = 0; i < 40; i++) sb_putc(&sb, '[');
  for (int i = 0; i < 40; i++) sb_putc(&sb, ']');
  sb_puts(&sb, "\nb: ");
  for (int i = 0; i < 40; i++) sb_putc(&sb, '[');
  sb_puts(&sb, "*x");
  for (int i = 0; i < 40; i++) sb_putc(&sb, ']');
  sb_putc(&sb, '\n');
  check_fails(sb.buf, DIAG_E0012, 2, 44); /* at the alias */
  sb_free(&sb);
}

static void test_aliases(void) {
  /* a shared alias is fine and counted */
  Diags d;
  YArena *a = yaml_arena_new();
  YNode *r = load(&d, a, "base: &b {x: 1, y: 2}\nuse: *b\n");
  T_CHECK(r != NULL);
  if (r) T_CHECK(yaml_map_get(r, "use") == yaml_map_get(r, "base"));
  diags_free(&d);
  yaml_arena_free(a);
  /* billion laughs: 10 ^ 5 copies */
  StrBuf sb;
  sb_init(&sb);
  sb_puts(&sb, "a: &a [1,1,1,1,1,1,1,1,1,1]\n");
  for (char c = 'b'; c <= 'f'; c++) {
    sb_printf(&sb, "%c: &%c [", c, c);
    for (int i = 0; i < 10; i++) sb_printf(&sb, "%s*%c", i ? "," : "", c - 1);
    sb_puts(&sb, "]\n");
  }
  check_fails(sb.buf, DIAG_E0009, 4, 29); /* the 8th alias on line 4 */
  sb_free(&sb);
}

static const char spec_text[] =
    "version: 1\n"
    "model:\n"
    "  preset: llama-3.1-70b\n"
    "  max_context: 32768\n"
    "  attention: { kind: gqa, heads: 64, kv_heads: 8, head_dim: 128, qk_norm: true }\n"
    "hardware:\n"
    "  preset: h200-sxm\n"
    "  nodes: 4\n"
    "  gpu: { memory: 96 GiB }\n"
    "workload: { input_tokens: 4000, output_tokens: 500 }\n"
    "deployment:\n"
    "  mode: disaggregated\n"
    "  pools:\n"
    "    - { name: prefill, role: prefill, replicas: 2, tp: 8 }\n"
    "    - { name: decode, role: decode, replicas: 2, tp: 4 }\n";

static void test_spec(void) {
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "s.yaml", spec_text, strlen(spec_text), RP_SOURCE_ROOT "/plans/catalog");
  T_CHECK(s != NULL);
  T_EQ_INT(d.nerrors, 0);
  if (s) {
    /* from the catalog, with the catalog file's position */
    T_EQ_INT(s->model.layers.v, 80);
    T_CHECK(s->model.layers.set);
    T_EQ_STR(s->model.layers.loc.file, "plans/catalog/models/llama-3.1-70b.yaml");
    /* overridden beside the preset */
    T_EQ_INT(s->model.max_context.v, 32768);
    T_EQ_STR(s->model.max_context.loc.file, "s.yaml");
    T_EQ_INT(s->model.max_context.loc.line, 4);
    T_EQ_INT(s->model.max_context.loc.col, 16);
    T_CHECK(s->model.attention.qk_norm.v);
    T_EQ_STR(s->model.preset.v, "llama-3.1-70b");
    /* nested merge: gpu.memory overridden, gpu.hbm_bandwidth kept */
    T_EQ_INT(s->hardware.gpu.memory.v, 96LL << 30);
    T_NEAR(s->hardware.gpu.hbm_bandwidth.v, 4.8e12, 1e-12);
    T_NEAR(s->hardware.scale_out.bandwidth.v, 50e9, 1e-12);
    T_EQ_INT(s->hardware.scale_up.domain.v, 8);
    /* defaults: value, unset, position of the enclosing section */
    T_CHECK(!s->deployment.memory.kv_block.set);
    T_EQ_INT(s->deployment.memory.kv_block.v, 16);
    T_EQ_INT(s->deployment.memory.reserve.v, 2LL << 30);
    T_NEAR(s->deployment.memory.utilization.v, 0.90, 1e-12);
    T_EQ_INT(s->deployment.memory.kv_block.loc.line, 12); /* the `deployment:` mapping */
    T_EQ_STR(s->deployment.order.v, "tp-cp-ep-dp-pp");
    T_EQ_INT(s->deployment.npools, 2);
    T_EQ_INT(s->deployment.pools[1].tp.v, 4);
    T_EQ_INT(s->deployment.pools[1].pp.v, 1);
    T_CHECK(!s->deployment.pools[1].pp.set);
    T_EQ_INT(pool_gpus(&s->deployment.pools[0]), 16);
    T_EQ_INT(s->model.dtype.kv_cache.v, DT_BF16);
    T_EQ_STR(s->name.v, "s");
    T_EQ_INT(s->search.gpu_budget.v, 32);
    T_EQ_INT(strlen(s->sha256), 64);
  }
  spec_free(s);
  diags_free(&d);
}

static void test_spec_errors_all_reported(void) {
  const char *t =
      "version: 1\n"
      "model: { preset: llama-3.1-8b, layerz: 3 }\n"
      "hardware: { preset: h100-sxm, nodes: 0, gpus_per_node: yes }\n"
      "workload: { input_tokens: 0x10, output_tokens: 010 }\n"
      "deployment: { mode: aggregated, pools: [ { name: a, tp: 16 } ] }\n";
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "e.yaml", t, strlen(t), RP_SOURCE_ROOT "/plans/catalog");
  T_CHECK(s == NULL);
  T_EQ_INT(d.nerrors, 5);
  bool seen[5] = {false};
  DiagCode want[5] = {DIAG_E0101, DIAG_E0105, DIAG_E0110, DIAG_E0104, DIAG_E0104};
  for (size_t i = 0; i < d.list.len; i++)
    for (int k = 0; k < 5; k++)
      if (!seen[k] && d.list.items[i]->code == want[k]) {
        seen[k] = true;
        break;
      }
  for (int k = 0; k < 5; k++) T_CHECK(seen[k]);
  diags_free(&d);
}

/* Every catalog model parses, and its fields give the KV bytes per token
 * (bf16) that follow from the models' published configs: K and V of
 * kv_heads * head_dim per layer, or MLA's latent plus rope key. */
static void test_catalog_models(void) {
  static const struct {
    const char *name;
    int64_t kv_bytes;
  } want[] = {
      {"llama-3.1-8b", 131072}, {"llama-3.1-70b", 327680},   {"llama-3.1-405b", 516096},
      {"qwen3-32b", 262144},    {"qwen3-235b-a22b", 192512}, {"deepseek-v3", 70272},
      {"mixtral-8x7b", 131072}, {"gpt-oss-120b", 73728},
  };
  for (size_t i = 0; i < RP_ARRAY_LEN(want); i++) {
    char *t = rp_sprintf("version: 1\nmodel: {preset: %s}\nhardware: {preset: h200-sxm, nodes: 1}\n"
                         "workload: {input_tokens: 1, output_tokens: 1}\n"
                         "deployment: {mode: aggregated, pools: [{name: a}]}\n",
                         want[i].name);
    Diags d;
    diags_init(&d);
    Spec *s = spec_parse(&d, "c.yaml", t, strlen(t), RP_SOURCE_ROOT "/plans/catalog");
    T_CHECK(s != NULL);
    if (s) {
      const ModelSpec *m = &s->model;
      int64_t per_layer = m->attention.kind.v == ATTN_MLA
                              ? m->attention.kv_lora_rank.v + m->attention.qk_rope_head_dim.v
                              : 2 * m->attention.kv_heads.v * m->attention.head_dim.v;
      T_EQ_INT(m->layers.v * per_layer * 2, want[i].kv_bytes);
      T_EQ_STR(m->preset.v, want[i].name);
    }
    spec_free(s);
    diags_free(&d);
    free(t);
  }
  /* every hardware entry parses too (h20 and the AMD entries need
   * scale_out from the spec), with the node and scale-up domain its header
   * cites: an NVL72 rack is 4-GPU trays in one domain of 72, a PCIe card a
   * domain of 1, an H100 NVL bridged pair 2, an H200 NVL 4-way bridge 4
   * (tests/catalog/test_hw_catalog.py loads every file of the directory) */
  static const struct {
    const char *name;
    int64_t gpn, domain;
  } hw[] = {{"a100-40g", 8, 8}, {"a100-80g", 8, 8}, {"h100-sxm", 8, 8},    {"h100-pcie", 8, 1},   {"h100-nvl", 8, 2},
            {"h200-sxm", 8, 8}, {"h200-nvl", 8, 4},    {"h20", 8, 8},         {"h800", 8, 8},
            {"b200", 8, 8},     {"b300", 8, 8},        {"gb200-nvl72", 4, 72}, {"gb300-nvl72", 4, 72},
            {"l40s", 8, 1},     {"l4", 8, 1}, {"rtx-pro-6000", 8, 1}, {"mi300x", 8, 8},     {"mi325x", 8, 8},
            {"mi355x", 8, 8}};
  for (size_t i = 0; i < RP_ARRAY_LEN(hw); i++) {
    char *t = rp_sprintf("version: 1\nmodel: {preset: llama-3.1-8b}\n"
                         "hardware: {preset: %s, nodes: 1, scale_out: {bandwidth: 400 Gb/s}}\n"
                         "workload: {input_tokens: 1, output_tokens: 1}\n"
                         "deployment: {mode: aggregated, pools: [{name: a}]}\n",
                         hw[i].name);
    Diags d;
    diags_init(&d);
    Spec *s = spec_parse(&d, "h.yaml", t, strlen(t), RP_SOURCE_ROOT "/plans/catalog");
    T_CHECK(s != NULL);
    if (s) {
      T_CHECK(s->hardware.gpu.memory.v > 0 && s->hardware.gpu.bf16.v > 0);
      T_EQ_INT(s->hardware.gpus_per_node.v, hw[i].gpn);
      T_EQ_INT(s->hardware.scale_up.domain.v, hw[i].domain);
    }
    spec_free(s);
    diags_free(&d);
    free(t);
  }
}

static void test_names(void) {
  T_EQ_STR(dtype_name(DT_FP8), "fp8");
  T_EQ_STR(attn_kind_name(ATTN_MLA), "mla");
  T_EQ_STR(mode_name(MODE_DISAGGREGATED), "disaggregated");
  T_EQ_STR(engine_name(ENGINE_SGLANG), "sglang");
  T_EQ_STR(role_name(ROLE_BOTH), "both");
  PoolSpec pl = {0};
  pl.replicas.v = INT64_MAX;
  pl.tp.v = 2;
  pl.cp.v = pl.dp.v = pl.pp.v = 1;
  T_EQ_INT(pool_gpus(&pl), -1);
}

int main(void) {
  T_RUN(test_tree);
  T_RUN(test_bom_crlf);
  T_RUN(test_errors);
  T_RUN(test_depth);
  T_RUN(test_aliases);
  T_RUN(test_spec);
  T_RUN(test_spec_errors_all_reported);
  T_RUN(test_catalog_models);
  T_RUN(test_names);
  T_DONE();
}
