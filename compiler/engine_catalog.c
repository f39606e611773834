/*
 * engine_catalog.c: reads one entry of the engine capability matrix,
 * plans/catalog/engines/<engine>-<version>.yaml, into EngineCaps
 * (engines.h). A front-end reader like the presets of parse.c, so it may
 * use the YAML tree (ytree.h; tests/unit/layering.py lists it).
 *
 * Input: the catalog directory, an engine and an optional version.
 * Output: the entry covering that version (or the newest), or NULL and one
 * message naming the file and key. Invariants: every key the format names
 * is checked for type; unknown keys are refused, so a misspelt capability
 * cannot silently read as "unsupported".
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "ytree.h"

static const char *const dim_names[ED__COUNT] = {"tp", "pp", "dp", "ep", "etp", "cp", "dcp"};
static const char *const rule_names[] = {"edp-1", "ep-all-or-none", "dp-needs-tp-1", "dcp-divides-tp",
                                         "dp-moe-only"};
static const char *const role_words[] = {"prefill", "decode", "both"};

const char *engine_dim_name(EngineDim d) {
  return (unsigned)d < ED__COUNT ? dim_names[d] : "?";
}

typedef struct {
  const char *file;
  char *err;
} Rd;

static bool fail(Rd *r, const YNode *n, const char *what) {
  if (!r->err)
    r->err = rp_sprintf("%s:%d:%d: %s", r->file, n ? n->loc.line : 0, n ? n->loc.col : 0, what);
  return false;
}

static bool keys_ok(Rd *r, const YNode *m, const char *const *keys, size_t nk) {
  for (size_t i = 0; m && i < m->n; i++) {
    bool ok = false;
    for (size_t j = 0; j < nk && !ok; j++) ok = strcmp(m->pairs[i].key->str, keys[j]) == 0;
    if (!ok) {
      char *w = rp_sprintf("unknown key `%s`", m->pairs[i].key->str);
      fail(r, m->pairs[i].key, w);
      free(w);
      return false;
    }
  }
  return true;
}

/* A required scalar of mapping m, copied; NULL after fail(). */
static char *str_of(Rd *r, const YNode *m, const char *key, bool required) {
  const YNode *v = yaml_map_get(m, key);
  if (!v) {
    if (required) {
      char *w = rp_sprintf("missing key `%s`", key);
      fail(r, m, w);
      free(w);
    }
    return NULL;
  }
  if (v->kind != YN_SCALAR || strlen(v->str) != v->len || v->len == 0) {
    char *w = rp_sprintf("`%s` must be a non-empty string", key);
    fail(r, v, w);
    free(w);
    return NULL;
  }
  return rp_strdup(v->str);
}

static const YNode *map_of(Rd *r, const YNode *m, const char *key) {
  const YNode *v = yaml_map_get(m, key);
  if (!v || v->kind != YN_MAP) {
    char *w = rp_sprintf("`%s` must be a mapping", key);
    fail(r, v ? v : m, w);
    free(w);
    return NULL;
  }
  return v;
}

/* A mapping of strings to strings (empty ones only when may_be_empty: a
 * flag "" is the engine's positional argument). */
static bool read_kv(Rd *r, const YNode *m, EngineKV **out, size_t *n, bool may_be_empty) {
  *out = rp_calloc(m->n ? m->n : 1, sizeof **out);
  for (size_t i = 0; i < m->n; i++) {
    const YNode *v = m->pairs[i].val;
    if (v->kind != YN_SCALAR || (v->len == 0 && !may_be_empty) || strlen(v->str) != v->len)
      return fail(r, v, "expected a non-empty string");
    (*out)[i].key = rp_strdup(m->pairs[i].key->str);
    (*out)[i].value = rp_strdup(v->str);
    *n = i + 1;
  }
  return true;
}

static bool read_roles(Rd *r, const YNode *l, bool roles[3]) {
  if (!l || l->kind != YN_SEQ) return fail(r, l, "`roles` must be a list of prefill, decode, both");
  for (size_t i = 0; i < l->n; i++) {
    bool ok = false;
    for (int k = 0; k < 3 && !ok; k++)
      if (l->items[i]->kind == YN_SCALAR && strcmp(l->items[i]->str, role_words[k]) == 0) {
        roles[k] = true;
        ok = true;
      }
    if (!ok) return fail(r, l->items[i], "expected a role: prefill, decode or both");
  }
  return true;
}

static bool read_dims(Rd *r, const YNode *m, EngineCaps *c) {
  if (!keys_ok(r, m, dim_names, ED__COUNT)) return false;
  for (int d = 0; d < ED__COUNT; d++) {
    const YNode *e = yaml_map_get(m, dim_names[d]);
    if (!e || e->kind != YN_MAP) {
      char *w = rp_sprintf("`dims.%s` must be a mapping with `roles`", dim_names[d]);
      fail(r, e ? e : m, w);
      free(w);
      return false;
    }
    static const char *const k[] = {"roles", "flag"};
    if (!keys_ok(r, e, k, 2) || !read_roles(r, yaml_map_get(e, "roles"), c->dim[d].roles)) return false;
    c->dim[d].flag = str_of(r, e, "flag", false);
    if (r->err) return false;
  }
  return true;
}

static bool read_rules(Rd *r, const YNode *l, unsigned *out) {
  if (!l) return true;
  if (l->kind != YN_SEQ) return fail(r, l, "`rules` must be a list");
  for (size_t i = 0; i < l->n; i++) {
    bool ok = false;
    for (size_t k = 0; k < RP_ARRAY_LEN(rule_names) && !ok; k++)
      if (l->items[i]->kind == YN_SCALAR && strcmp(l->items[i]->str, rule_names[k]) == 0) {
        *out |= 1u << k;
        ok = true;
      }
    if (!ok) return fail(r, l->items[i], "unknown rule (docs/engines.md lists them)");
  }
  return true;
}

static bool read_pd_rule(Rd *r, const YNode *pd, const char *key, PdRule *out) {
  static const char *const words[] = {"any", "equal", "decode-multiple", "unverified", "divisible"};
  const YNode *v = yaml_map_get(pd, key);
  for (size_t i = 0; v && v->kind == YN_SCALAR && i < RP_ARRAY_LEN(words); i++)
    if (strcmp(v->str, words[i]) == 0) {
      *out = (PdRule)i;
      return true;
    }
  char *w = rp_sprintf("`pd.%s` must be any, equal, decode-multiple, divisible or unverified", key);
  fail(r, v ? v : pd, w);
  free(w);
  return false;
}

/* NAME=value as a shell takes it before a command, NAME none of the
 * settings the launch files write themselves. */
static bool sampler_env_ok(const char *v) {
  static const char *const ours[] = {"CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_HOST",
                                     "VLLM_NIXL_SIDE_CHANNEL_PORT"};
  size_t name = strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
  if (name == 0 || (v[0] >= '0' && v[0] <= '9') || v[name] != '=' || !v[name + 1]) return false;
  for (size_t i = 0; i < RP_ARRAY_LEN(ours); i++)
    if (strlen(ours[i]) == name && strncmp(ours[i], v, name) == 0) return false;
  const char *val = v + name + 1;
  return strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") == strlen(val);
}

/* `samplers`: name -> one NAME=value environment setting, which the
 * launch files write before the engine's command, so both sides are
 * plain words (no quoting needed in a shell or a YAML string). */
static bool read_samplers(Rd *r, const YNode *sm, EngineCaps *c) {
  if (sm->kind != YN_MAP) return fail(r, sm, "`samplers` must be a mapping of name to NAME=value");
  if (!read_kv(r, sm, &c->samplers, &c->nsamplers, false)) return false;
  for (size_t i = 0; i < c->nsamplers; i++) {
    const char *k = c->samplers[i].key, *v = c->samplers[i].value;
    if (strcmp(k, "flashinfer") != 0 && strcmp(k, "torch") != 0)
      return fail(r, sm->pairs[i].key, "the memory ledger knows the samplers flashinfer and torch only");
    if (!sampler_env_ok(v))
      return fail(r, sm->pairs[i].val,
                  "a sampler's setting is NAME=value: NAME of A-Z, 0-9 and _ not starting with a digit, and not one "
                  "the launch files set themselves; value of letters, digits, _ and .");
  }
  return true;
}

/* `yaml_keys`: term -> `section.field` of the arguments YAML the launch
 * files write (emit_trtllm.c: TensorRT-LLM entries only), for the terms
 * it knows to write there; the entry must name the flag that passes the
 * YAML (`config`), and a term has a flag or a key, not both. */
static bool yaml_word(const char *w, size_t n) {
  return n > 0 && strspn(w, "abcdefghijklmnopqrstuvwxyz0123456789_") >= n;
}

static bool read_yaml_keys(Rd *r, const YNode *m, EngineCaps *c) {
  static const char *const terms[] = {"cuda_graph_max_bs", "kv_cache_dtype"};
  if (m->kind != YN_MAP) return fail(r, m, "`yaml_keys` must be a mapping of term to section.field");
  if (c->engine != ENGINE_TRTLLM) return fail(r, m, "only the TensorRT-LLM launch files write an arguments YAML");
  if (!keys_ok(r, m, terms, RP_ARRAY_LEN(terms)) || !read_kv(r, m, &c->yaml_keys, &c->nyaml_keys, false))
    return false;
  if (!engine_flag(c, "config")) return fail(r, m, "`yaml_keys` needs a `config` flag that passes the YAML");
  for (size_t i = 0; i < c->nyaml_keys; i++) {
    const char *v = c->yaml_keys[i].value, *dot = strchr(v, '.');
    if (!dot || !yaml_word(v, (size_t)(dot - v)) || !yaml_word(dot + 1, strlen(dot + 1)))
      return fail(r, m->pairs[i].val, "a YAML key is section.field, each of a-z, 0-9 and _");
    if (engine_flag(c, c->yaml_keys[i].key))
      return fail(r, m->pairs[i].key, "a term set by a flag cannot also have a YAML key");
    /* the launch files write the KV dtype inside the kv_cache_config they build */
    if (!strcmp(c->yaml_keys[i].key, "kv_cache_dtype") && strncmp(v, "kv_cache_config.", 16) != 0)
      return fail(r, m->pairs[i].val, "`kv_cache_dtype` is a field of kv_cache_config");
  }
  return true;
}

static bool read_pd_kv(Rd *r, const YNode *root, EngineCaps *c) {
  const YNode *pd = map_of(r, root, "pd");
  static const char *const pk[] = {"tp", "pp"};
  if (!pd || !keys_ok(r, pd, pk, 2) || !read_pd_rule(r, pd, "tp", &c->pd_tp) ||
      !read_pd_rule(r, pd, "pp", &c->pd_pp))
    return false;
  const YNode *kd = map_of(r, root, "kv_dtypes");
  if (!kd || !read_kv(r, kd, &c->kv_dtypes, &c->nkv_dtypes, false)) return false;
  const YNode *kt = map_of(r, root, "kv_transfer");
  static const char *const tk[] = {"default", "backends"};
  if (!kt || !keys_ok(r, kt, tk, 2)) return false;
  c->kv_transfer_default = str_of(r, kt, "default", true);
  const YNode *b = map_of(r, kt, "backends");
  if (!c->kv_transfer_default || !b || !read_kv(r, b, &c->kv_transfer, &c->nkv_transfer, false)) return false;
  if (!engine_kv(c->kv_transfer, c->nkv_transfer, c->kv_transfer_default))
    return fail(r, kt, "`kv_transfer.default` is not one of its `backends`");
  /* optional: the samplers the spec may choose (serving.sampler) */
  const YNode *sm = yaml_map_get(root, "samplers");
  if (sm && !read_samplers(r, sm, c)) return false;
  const YNode *f = map_of(r, root, "flags");
  if (!f || !read_kv(r, f, &c->flags, &c->nflags, true)) return false;
  const YNode *y = yaml_map_get(root, "yaml_keys"); /* optional */
  return !y || read_yaml_keys(r, y, c);
}

/* `block_sizes`: the KV block sizes the engine's flag accepts, a list of
 * 1 to ENGINE_MAX_BLOCK_SIZES distinct counts in 1..2^20, ascending. */
static bool read_sizes(Rd *r, const YNode *l, const char *bad, int64_t *out, size_t *n) {
  if (l->kind != YN_SEQ || l->n == 0 || l->n > ENGINE_MAX_BLOCK_SIZES) return fail(r, l, bad);
  for (size_t i = 0; i < l->n; i++) {
    const YNode *v = l->items[i];
    char *end = NULL;
    long long x = v->kind == YN_SCALAR ? strtoll(v->str, &end, 10) : 0;
    if (!end || *end || end == v->str || x < 1 || x > (1 << 20) || (i && x <= out[i - 1]))
      return fail(r, v, "expected a block size in 1..1048576, above the one before it");
    out[i] = x;
  }
  *n = l->n;
  return true;
}

/* `block_sizes_from: { version: V, add: [...] }`: from release V, inside
 * the entry's range, the flag also accepts these sizes (vLLM 0.11.1 adds
 * 256 to 0.11.0's six). */
static bool read_block_sizes(Rd *r, const YNode *root, EngineCaps *c) {
  const YNode *bs = yaml_map_get(root, "block_sizes"), *f = yaml_map_get(root, "block_sizes_from");
  if (bs && !read_sizes(r, bs, "`block_sizes` must be a list of 1 to 16 block sizes", c->block_sizes,
                        &c->nblock_sizes))
    return false;
  if (!f) return true;
  static const char *const fk[] = {"version", "add"};
  if (!bs || f->kind != YN_MAP || !keys_ok(r, f, fk, 2))
    return r->err ? false : fail(r, f, "`block_sizes_from` must be a mapping of version and add, beside `block_sizes`");
  c->block_sizes_from = str_of(r, f, "version", true);
  const YNode *add = yaml_map_get(f, "add");
  if (r->err || !add) return r->err ? false : fail(r, f, "`block_sizes_from` needs `add`");
  if (!c->min || engine_version_cmp(c->block_sizes_from, c->min) <= 0 ||
      engine_version_cmp(c->block_sizes_from, c->below) >= 0)
    return fail(r, f, "`block_sizes_from.version` must lie inside `versions`, above its `min`");
  return read_sizes(r, add, "`block_sizes_from.add` must be a list of 1 to 16 block sizes", c->block_sizes_added,
                    &c->nblock_sizes_added);
}

static bool read_entry(Rd *r, const YNode *root, Engine e, EngineCaps *c) {
  static const char *const top[] = {"engine", "version", "versions", "source", "command", "layer_split",
                                    "dims", "rules", "pd", "kv_dtypes", "kv_transfer", "samplers",
                                    "flags", "yaml_keys", "block_sizes", "block_sizes_from"};
  if (root->kind != YN_MAP) return fail(r, root, "an engine entry is a mapping");
  if (!keys_ok(r, root, top, RP_ARRAY_LEN(top))) return false;
  char *name = str_of(r, root, "engine", true);
  bool same = name && strcmp(name, engine_name(e)) == 0;
  free(name);
  if (!r->err && !same) return fail(r, root, "`engine` does not match the file name");
  c->engine = e;
  c->version = str_of(r, root, "version", true);
  c->source = str_of(r, root, "source", true);
  c->command = str_of(r, root, "command", true);
  c->layer_split = str_of(r, root, "layer_split", true);
  /* `versions` is optional: without it the entry covers its `version` only */
  const YNode *vr = yaml_map_get(root, "versions");
  static const char *const vk[] = {"min", "below"};
  if (r->err || (vr && (vr->kind != YN_MAP || !keys_ok(r, vr, vk, 2))))
    return r->err ? false : fail(r, vr, "`versions` must be a mapping of min and below");
  if (vr) {
    c->min = str_of(r, vr, "min", true);
    c->below = str_of(r, vr, "below", true);
    if (r->err) return false;
    if (engine_version_cmp(c->min, c->below) >= 0) return fail(r, vr, "`versions.min` must be below `below`");
  }
  const YNode *dims = map_of(r, root, "dims");
  return dims && read_dims(r, dims, c) && read_rules(r, yaml_map_get(root, "rules"), &c->rules) &&
         read_pd_kv(r, root, c) && read_block_sizes(r, root, c);
}

EngineCaps *engine_caps_parse(const char *shown, const char *text, size_t len, Engine e, char **err) {
  Diags d;
  diags_init(&d);
  YArena *a = yaml_arena_new();
  const char *file = diags_add_source(&d, shown, text, len);
  YNode *root = yaml_load(&d, a, file, text, len);
  EngineCaps *c = rp_calloc(1, sizeof *c);
  c->file = rp_strdup(shown);
  Rd r = {c->file, NULL};
  if (!root || d.nerrors) r.err = rp_sprintf("%s: %s", shown, d.list.len ? d.list.items[0]->msg : "not YAML");
  else read_entry(&r, root, e, c);
  yaml_arena_free(a);
  diags_free(&d);
  if (r.err) {
    engine_caps_free(c);
    *err = r.err;
    return NULL;
  }
  *err = NULL;
  return c;
}

/* Loads one file; NULL with *err set. */
static EngineCaps *load_file(const char *catalog_dir, const char *dir, const char *fname, Engine e,
                             char **err) {
  char *path = rp_sprintf("%s/%s", dir, fname);
  char *stem = rp_strndup(fname, strlen(fname) - 5);
  char *shown = spec_catalog_display(catalog_dir, "engines", stem);
  free(stem);
  char *text = NULL;
  size_t len = 0;
  int rc = rp_read_file(path, SPEC_MAX_BYTES, &text, &len);
  EngineCaps *c = NULL;
  if (rc) *err = rp_sprintf("%s: %s", shown, rp_strerror(rc));
  else c = engine_caps_parse(shown, text, len, e, err);
  free(text);
  free(path);
  free(shown);
  return c;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The entry files of engine e in dir (sorted, caller frees). */
static size_t entry_files(const char *dir, Engine e, char ***out) {
  RP_VEC(char *) v = {0};
  char *prefix = rp_sprintf("%s-", engine_name(e));
  DIR *dp = opendir(dir);
  /* no memory for the directory stream is ours to report, not the user's */
  if (!dp && errno == ENOMEM) rp_internal("out of memory opening %s", dir);
  if (dp) {
    struct dirent *de;
    while ((de = readdir(dp))) {
      size_t n = strlen(de->d_name);
      if (n > 5 && strcmp(de->d_name + n - 5, ".yaml") == 0 &&
          strncmp(de->d_name, prefix, strlen(prefix)) == 0)
        rp_vec_push(&v, rp_strdup(de->d_name));
    }
    closedir(dp);
  }
  free(prefix);
  if (v.len) qsort(v.items, v.len, sizeof *v.items, cmp_name);
  *out = v.items;
  return v.len;
}

static bool covers(const EngineCaps *c, const char *version) {
  if (!version) return true;
  return strcmp(c->version, version) == 0 ||
         (c->min && engine_version_cmp(c->min, version) <= 0 && engine_version_cmp(version, c->below) < 0);
}

EngineCaps *engine_caps_load(const char *catalog_dir, Engine e, const char *version, char **err,
                             bool *no_entry) {
  *err = NULL;
  *no_entry = false;
  char *dir = rp_sprintf("%s/engines", catalog_dir);
  char **files;
  size_t n = entry_files(dir, e, &files);
  EngineCaps *best = NULL;
  StrBuf have;
  sb_init(&have);
  for (size_t i = 0; i < n && !*err; i++) {
    EngineCaps *c = load_file(catalog_dir, dir, files[i], e, err);
    if (!c) break;
    if (c->min) sb_printf(&have, "%s%s [%s, %s)", have.len ? ", " : "", c->version, c->min, c->below);
    else sb_printf(&have, "%s%s", have.len ? ", " : "", c->version);
    bool take = covers(c, version) && (!best || engine_version_cmp(c->version, best->version) > 0);
    if (take) engine_caps_free(best), best = c;
    else engine_caps_free(c);
  }
  if (*err) {
    engine_caps_free(best);
    best = NULL;
  } else if (!best) {
    *no_entry = true;
    *err = n ? rp_sprintf("no entry of engine `%s` covers version `%s`; the catalog has %s", engine_name(e),
                          version ? version : "", have.buf)
             : rp_sprintf("no entry of engine `%s` in %s", engine_name(e), dir);
  }
  sb_free(&have);
  for (size_t i = 0; i < n; i++) free(files[i]);
  free(files);
  free(dir);
  return best;
}

static void free_kv(EngineKV *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(t[i].key);
    free(t[i].value);
  }
  free(t);
}

void engine_caps_free(EngineCaps *c) {
  if (!c) return;
  free(c->file);
  free(c->version);
  free(c->min);
  free(c->below);
  free(c->block_sizes_from);
  free(c->source);
  free(c->command);
  free(c->layer_split);
  for (int d = 0; d < ED__COUNT; d++) free(c->dim[d].flag);
  free_kv(c->kv_dtypes, c->nkv_dtypes);
  free_kv(c->kv_transfer, c->nkv_transfer);
  free_kv(c->samplers, c->nsamplers);
  free(c->kv_transfer_default);
  free_kv(c->flags, c->nflags);
  free_kv(c->yaml_keys, c->nyaml_keys);
  free(c);
}
