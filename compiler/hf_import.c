/*
 * hf_import.c: Hugging Face config.json → ModelSpec → model YAML.
 *
 * Input IR: the bytes of a config.json. Output IR: HfModel (hf_import.h),
 * a ModelSpec with .set on every field the config gave, and its YAML.
 * Invariants: the config is parsed by Jansson with duplicate keys refused;
 * every value is type- and range-checked before use and a problem is a
 * diagnostic naming its JSON field path (`text_config.hidden_size`); every
 * key is read, in the list of keys without bearing on memory or compute
 * (ignored_keys), or listed in W0150; shapes the spec cannot hold are
 * E0151, features it does not model are W0151. docs/models.md describes
 * the mapping family by family.
 */
#include "hf_import.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "json_pos.h"
#include "model.h"

/* ---------------------------------------------------------------------- */
/* Families. */

typedef enum { MOE_NONE, MOE_MIXTRAL, MOE_QWEN, MOE_DEEPSEEK, MOE_LLAMA4 } MoeStyle;
/* A flag that is never set, always set, or read from a config key. */
typedef enum { TRI_NO, TRI_YES, TRI_FIELD } Tri;

typedef struct {
  const char *type;   /* model_type */
  bool nested;        /* the language model is under `text_config` */
  bool tie_default;   /* tie_word_embeddings when absent: the transformers class default */
  Tri qkv_bias;       /* TRI_FIELD: attention_bias */
  Tri qk_norm;        /* TRI_FIELD: use_qk_norm */
  MoeStyle moe;
  bool mla;
  Tri router_bias;    /* TRI_FIELD: topk_method is noaux_tc (e_score_correction_bias) */
} Family;

/* Qwen2 always has q/k/v biases and no attention_bias key; Qwen3 and
 * Gemma 3 always have per-head q/k RMSNorms; Llama 4's use_qk_norm is an
 * L2 norm without weights, so it adds no parameters. */
static const Family families[] = {
    {"llama", false, false, TRI_FIELD, TRI_NO, MOE_NONE, false, TRI_NO},
    {"mistral", false, false, TRI_NO, TRI_NO, MOE_NONE, false, TRI_NO},
    {"mixtral", false, false, TRI_NO, TRI_NO, MOE_MIXTRAL, false, TRI_NO},
    {"qwen2", false, false, TRI_YES, TRI_NO, MOE_NONE, false, TRI_NO},
    {"qwen2_moe", false, false, TRI_YES, TRI_NO, MOE_QWEN, false, TRI_NO},
    {"qwen3", false, false, TRI_FIELD, TRI_YES, MOE_NONE, false, TRI_NO},
    {"qwen3_moe", false, false, TRI_FIELD, TRI_YES, MOE_QWEN, false, TRI_NO},
    {"deepseek_v2", false, false, TRI_FIELD, TRI_NO, MOE_DEEPSEEK, true, TRI_FIELD},
    {"deepseek_v3", false, false, TRI_FIELD, TRI_NO, MOE_DEEPSEEK, true, TRI_FIELD},
    {"kimi_k2", false, false, TRI_FIELD, TRI_NO, MOE_DEEPSEEK, true, TRI_FIELD},
    {"glm4_moe", false, false, TRI_FIELD, TRI_FIELD, MOE_DEEPSEEK, false, TRI_YES},
    {"gpt_oss", false, false, TRI_FIELD, TRI_NO, MOE_MIXTRAL, false, TRI_YES},
    {"gemma3", true, true, TRI_FIELD, TRI_YES, MOE_NONE, false, TRI_NO},
    {"gemma3_text", false, true, TRI_FIELD, TRI_YES, MOE_NONE, false, TRI_NO},
    {"llama4", true, false, TRI_FIELD, TRI_NO, MOE_LLAMA4, false, TRI_NO},
    {"llama4_text", false, false, TRI_FIELD, TRI_NO, MOE_LLAMA4, false, TRI_NO},
};

/* Keys that change neither the weights, the KV cache nor the FLOPs of a
 * token (positions, initialisation, token ids, training losses, routing
 * arithmetic, softcaps, library versions). docs/models.md lists them. */
static const char *const ignored_keys[] = {
    "_name_or_path", "attention_dropout", "attn_logit_softcapping",
    "attn_scale", "attn_temperature_tuning", "auto_map", "aux_loss_alpha", "boi_token_index",
    "bos_token_id", "cache_implementation", "eoi_token_index", "eos_token_id", "ep_size",
    "final_logit_softcapping", "floor_scale", "hidden_act", "hidden_activation",
    "image_token_index", "initial_context_length", "initializer_range",
    "mm_tokens_per_image", "norm_topk_prob", "output_router_logits",
    "pad_token_id", "pretraining_tp", "query_pre_attn_scalar",
    "rms_norm_eps", "rope_theta",
    "routed_scaling_factor", "router_aux_loss_coef", "router_jitter_noise", "scoring_func",
    "seq_aux", "swiglu_limit", "transformers_version", "use_cache"};

/* Keys of quantization_config that the import reads or that only tune how
 * the quantised kernels run. */
static const char *const quant_keys[] = {"activation_scheme", "fmt", "ignore", "ignored_layers",
                                         "modules_to_not_convert", "quant_method",
                                         "weight_block_size"};

/* ---------------------------------------------------------------------- */
/* Reading typed values. */

typedef struct {
  Diags *d;
  SrcLoc loc;          /* the config file (no line: Jansson keeps none) */
  const char *text;    /* the file's bytes, where json_loc finds a key */
  size_t len;
  const Family *fam;
  json_t *root, *cfg;  /* cfg: the language model's object */
  const char *pre;     /* "" or "text_config." */
  json_t *seen;        /* object whose keys are the paths read */
  StrBuf notes;        /* what W0151 reported, one line each */
  bool ok;
} H;

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number with a fraction or exponent";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL:
  default: return "null";
  }
}

/* The position of pre+key ("text_config.", "quantization_config." or ""),
 * else the file's. */
static SrcLoc json_loc(const H *h, const char *pre, const char *key) {
  char *path = rp_sprintf("%s%s", pre, key);
  SrcLoc at = json_pos(h->text, h->len, 0, (SrcLoc){h->loc.file, 1, 1}, path, h->loc);
  free(path);
  return at;
}

/* obj[key], recording pre+key as read. */
static json_t *get_in(H *h, json_t *obj, const char *pre, const char *key) {
  char *p = rp_sprintf("%s%s", pre, key);
  json_object_set_new(h->seen, p, json_true());
  free(p);
  return json_object_get(obj, key);
}

static json_t *get(H *h, const char *key) { return get_in(h, h->cfg, h->pre, key); }

static void type_err(H *h, const char *pre, const char *key, const char *want, const json_t *v) {
  Diag *g = diag_at(h->d, DIAG_E0103, json_loc(h, pre, key), "`%s%s` in the config: expected %s, got %s", pre, key,
                    want, json_kind(v));
  diag_help(g, "the config is read as Hugging Face transformers writes it; check the file");
  h->ok = false;
}

/* A key missing from the object at pre ("" or "text_config."): the
 * object's own key, or the file. */
static void missing_err(H *h, const char *key) {
  char *obj = rp_sprintf("%.*s", (int)strcspn(h->pre, "."), h->pre);
  SrcLoc at = obj[0] ? json_loc(h, "", obj) : h->loc;
  free(obj);
  Diag *g = diag_at(h->d, DIAG_E0102, at, "`%s%s` is missing from the config", h->pre, key);
  diag_help(g, "model_type `%s` needs it; check that the file is the model's config.json",
            h->fam->type);
  h->ok = false;
}

/* An integer key of the language model in [lo, hi]: *out is its value, or
 * def when absent (or null and nullable); a required key that is absent is
 * E0102. Returns whether the key gave the value. */
static bool rd_int(H *h, const char *key, bool required, bool nullable, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out) {
  *out = def;
  json_t *v = get(h, key);
  if (!v || (nullable && json_is_null(v))) {
    if (required) missing_err(h, key);
    return false;
  }
  if (!json_is_integer(v)) {
    type_err(h, h->pre, key, "an integer", v);
    return false;
  }
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) {
    diag_at(h->d, DIAG_E0105, json_loc(h, h->pre, key), "`%s%s` in the config is %lld, outside [%lld, %lld]", h->pre,
            key, (long long)x, (long long)lo, (long long)hi);
    h->ok = false;
    return false;
  }
  *out = x;
  return true;
}

static bool rd_bool(H *h, const char *key, bool def) {
  json_t *v = get(h, key);
  if (!v || json_is_null(v)) return def;
  if (!json_is_boolean(v)) {
    type_err(h, h->pre, key, "a boolean", v);
    return def;
  }
  return json_is_true(v);
}

/* A string key of obj (NULL when absent or null; E0103 when another type). */
static const char *rd_str_in(H *h, json_t *obj, const char *pre, const char *key) {
  json_t *v = get_in(h, obj, pre, key);
  if (!v || json_is_null(v)) return NULL;
  if (!json_is_string(v)) {
    type_err(h, pre, key, "a string", v);
    return NULL;
  }
  return json_string_value(v);
}

static void set_int(SInt *f, SrcLoc loc, int64_t v) {
  f->v = v;
  f->loc = loc;
  f->set = true;
}

static void set_bool(SBool *f, SrcLoc loc, bool v) {
  f->v = v;
  f->loc = loc;
  f->set = true;
}

/* One diagnostic of the import, with its help line: W0151 (a key that
 * matters for memory or compute but that the spec does not express; its
 * line also goes into the YAML header) or E0151 (a shape the spec cannot
 * hold; the import fails). */
/* Where the key a message names first (`path`, an index dropped) is. */
static SrcLoc msg_loc(const H *h, const char *msg) {
  const char *a = strchr(msg, '`');
  if (!a || !strchr(a + 1, '`')) return h->loc;
  char *path = rp_sprintf("%.*s", (int)strcspn(a + 1, "[`"), a + 1);
  SrcLoc at = json_loc(h, "", path);
  free(path);
  return at;
}

static void report(H *h, DiagCode code, const char *fmt, ...) RP_PRINTF(3, 4);
static void report(H *h, DiagCode code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = rp_vsprintf(fmt, ap);
  va_end(ap);
  Diag *g = diag_at(h->d, code, msg_loc(h, msg), "%s", msg);
  if (code == DIAG_W0151) {
    diag_help(g, "docs/models.md lists what the import does not model and what it means for the plan");
    sb_printf(&h->notes, "Not modelled: %s\n", msg);
  } else {
    diag_help(g, "write the model by hand (docs/spec.md, \"model\"); docs/models.md lists the "
                 "shapes the import reads");
    h->ok = false;
  }
  free(msg);
}
#define not_modelled(h, ...) report(h, DIAG_W0151, __VA_ARGS__)
#define unsupported(h, ...) report(h, DIAG_E0151, __VA_ARGS__)

/* A line for the YAML header about a field the import did model. */
static void header_note(H *h, const char *fmt, ...) RP_PRINTF(2, 3);
static void header_note(H *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = rp_vsprintf(fmt, ap);
  va_end(ap);
  sb_printf(&h->notes, "%s\n", msg);
  free(msg);
}

/* ---------------------------------------------------------------------- */
/* The model's shape. */

/* The bounds of docs/spec.md, "Limits" (the spec's parser checks them
 * again on the YAML). */
#define HF_DIM_MAX (1LL << 24)
#define HF_LAYERS_MAX 1024LL
#define HF_TOKENS_MAX (1LL << 30)

static void read_dims(H *h, ModelSpec *m) {
  int64_t v;
  if (rd_int(h, "num_hidden_layers", true, false, 0, 1, HF_LAYERS_MAX, &v)) set_int(&m->layers, h->loc, v);
  if (rd_int(h, "hidden_size", true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->hidden_size, h->loc, v);
  if (rd_int(h, "vocab_size", true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->vocab_size, h->loc, v);
  if (rd_int(h, "max_position_embeddings", true, false, 0, 1, HF_TOKENS_MAX, &v)) {
    set_int(&m->max_context, h->loc, v);
    set_int(&m->max_position_embeddings, h->loc, v);
  }
  /* Gemma 3 and Llama 4 state the flag at the top level of the
   * multimodal config, some exports inside text_config too. */
  bool tie = rd_bool(h, "tie_word_embeddings", h->fam->tie_default);
  if (h->cfg != h->root) {
    json_t *t = get_in(h, h->root, "", "tie_word_embeddings");
    if (t && json_is_boolean(t) && !json_object_get(h->cfg, "tie_word_embeddings")) tie = json_is_true(t);
    else if (t && !json_is_boolean(t) && !json_is_null(t)) type_err(h, "", "tie_word_embeddings", "a boolean", t);
  }
  set_bool(&m->tie_embeddings, h->loc, tie);
  if (rd_bool(h, "mlp_bias", false))
    unsupported(h, "`%smlp_bias` is true: rankplan's FFNs have no biases", h->pre);
}

static bool tri(H *h, Tri t, const char *key) {
  return t == TRI_YES || (t == TRI_FIELD && rd_bool(h, key, false));
}

static void read_mla(H *h, ModelSpec *m) {
  int64_t v;
  m->attention.kind.v = ATTN_MLA;
  set_int(&m->attention.kv_heads, h->loc, 1);
  get(h, "num_key_value_heads"); /* MLA caches one latent; the key is a leftover */
  if (rd_int(h, "q_lora_rank", false, true, 0, 1, HF_DIM_MAX, &v)) set_int(&m->attention.q_lora_rank, h->loc, v);
  if (rd_int(h, "kv_lora_rank", true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->attention.kv_lora_rank, h->loc, v);
  if (rd_int(h, "qk_nope_head_dim", true, false, 0, 1, HF_DIM_MAX, &v))
    set_int(&m->attention.qk_nope_head_dim, h->loc, v);
  if (rd_int(h, "qk_rope_head_dim", true, false, 0, 1, HF_DIM_MAX, &v))
    set_int(&m->attention.qk_rope_head_dim, h->loc, v);
  if (rd_int(h, "v_head_dim", true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->attention.v_head_dim, h->loc, v);
  if (rd_bool(h, "attention_bias", false))
    unsupported(h, "`%sattention_bias` is true on an MLA model: rankplan's MLA projections have no biases",
                h->pre);
}

static void read_attention(H *h, ModelSpec *m) {
  int64_t heads, kv, hd;
  m->attention.kind.set = true;
  m->attention.kind.loc = h->loc;
  if (rd_int(h, "num_attention_heads", true, false, 0, 1, HF_DIM_MAX, &heads))
    set_int(&m->attention.heads, h->loc, heads);
  if (h->fam->mla) {
    read_mla(h, m);
    return;
  }
  m->attention.kind.v = ATTN_GQA;
  bool has_kv = rd_int(h, "num_key_value_heads", false, true, heads, 1, HF_DIM_MAX, &kv);
  if (has_kv || heads > 0) set_int(&m->attention.kv_heads, h->loc, has_kv ? kv : heads);
  int64_t hidden = m->hidden_size.v;
  bool has_hd = rd_int(h, "head_dim", false, true, 0, 1, HF_DIM_MAX, &hd);
  if (!has_hd && heads > 0 && hidden % heads == 0) {
    hd = hidden / heads;
    has_hd = true;
  }
  if (has_hd) set_int(&m->attention.head_dim, h->loc, hd);
  else if (heads > 0)
    unsupported(h, "`%shead_dim` is absent and hidden_size %lld is not divisible by %lld heads", h->pre,
                (long long)hidden, (long long)heads);
  if (tri(h, h->fam->qkv_bias, "attention_bias")) set_bool(&m->attention.qkv_bias, h->loc, true);
  if (tri(h, h->fam->qk_norm, "use_qk_norm")) set_bool(&m->attention.qk_norm, h->loc, true);
  else if (h->fam->moe == MOE_LLAMA4) rd_bool(h, "use_qk_norm", false);
}

/* ---------------------------------------------------------------------- */
/* Feed-forward and mixture of experts. */

static void set_dense_ffn(H *h, ModelSpec *m, const char *key) {
  int64_t v;
  if (rd_int(h, key, true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->ffn.intermediate_size, h->loc, v);
}

/* mlp_only_layers must be the leading layers 0..k-1 (the spec's
 * dense_layers); returns k, or -1 after E0151/E0103. */
static int64_t leading_layers(H *h, const char *key) {
  json_t *a = get(h, key);
  if (!a || json_is_null(a)) return 0;
  if (!json_is_array(a)) {
    type_err(h, h->pre, key, "an array of layer indices", a);
    return -1;
  }
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *x = json_array_get(a, i);
    if (!json_is_integer(x) || json_integer_value(x) != (json_int_t)i) {
      unsupported(h, "`%s%s[%zu]` is not %zu: rankplan expresses dense layers only as the leading "
                  "layers 0..k-1", h->pre, key, i, i);
      return -1;
    }
  }
  return (int64_t)json_array_size(a);
}

/* A key that must be 1 when present (every layer of the kind). */
static void want_one(H *h, const char *key, const char *what) {
  int64_t v;
  if (rd_int(h, key, false, true, 1, 0, HF_LAYERS_MAX, &v) && v != 1)
    unsupported(h, "`%s%s` is %lld: %s", h->pre, key, (long long)v, what);
}

static void moe_common(H *h, ModelSpec *m, const char *experts_key, const char *size_key) {
  int64_t v;
  m->moe.present = true;
  m->moe.loc = h->loc;
  if (rd_int(h, experts_key, true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->moe.experts, h->loc, v);
  if (rd_int(h, "num_experts_per_tok", true, false, 0, 1, HF_DIM_MAX, &v)) set_int(&m->moe.top_k, h->loc, v);
  if (rd_int(h, size_key, true, false, 0, 1, HF_DIM_MAX, &v))
    set_int(&m->moe.expert_intermediate_size, h->loc, v);
  set_int(&m->moe.shared_experts, h->loc, 0);
  set_int(&m->moe.dense_layers, h->loc, 0);
  set_bool(&m->moe.router_bias, h->loc, false);
}

static void read_moe_qwen(H *h, ModelSpec *m) {
  moe_common(h, m, "num_experts", "moe_intermediate_size");
  want_one(h, "decoder_sparse_step", "rankplan expresses MoE layers only as every layer after the dense ones");
  int64_t k = leading_layers(h, "mlp_only_layers"), s;
  if (k > 0) set_int(&m->moe.dense_layers, h->loc, k);
  if (k > 0) set_dense_ffn(h, m, "intermediate_size");
  else get(h, "intermediate_size"); /* no dense layer uses it */
  int64_t e = m->moe.expert_intermediate_size.v;
  if (rd_int(h, "shared_expert_intermediate_size", false, true, 0, 0, HF_DIM_MAX, &s) && s > 0) {
    if (e > 0 && s % e == 0) set_int(&m->moe.shared_experts, h->loc, s / e);
    else
      unsupported(h, "`%sshared_expert_intermediate_size` %lld is not a multiple of moe_intermediate_size "
                  "%lld: rankplan counts shared experts in units of the routed expert's size",
                  h->pre, (long long)s, (long long)e);
  }
}

/* Group-limited routing (n_group, topk_group): model.moe.groups and
 * group_top_k, which the cost model's dispatch uses (docs/cost-model.md).
 * One group is no limit. */
static void read_routing_groups(H *h, ModelSpec *m) {
  int64_t g, k;
  bool hg = rd_int(h, "n_group", false, true, 1, 1, HF_DIM_MAX, &g);
  bool hk = rd_int(h, "topk_group", false, true, 1, 1, HF_DIM_MAX, &k);
  if (!hg || !hk || g <= 1) return;
  if (k > g || m->moe.experts.v % g != 0) {
    unsupported(h, "`%sn_group` %lld and `topk_group` %lld: a token's groups must be at most the groups, "
                "which must divide the %lld experts", h->pre, (long long)g, (long long)k,
                (long long)m->moe.experts.v);
    return;
  }
  set_int(&m->moe.groups, h->loc, g);
  set_int(&m->moe.group_top_k, h->loc, k);
}

/* The multi-token-prediction modules: counted when the workload drafts
 * tokens (docs/memory.md, "MTP"). */
static void read_mtp(H *h, ModelSpec *m) {
  int64_t n;
  if (rd_int(h, "num_nextn_predict_layers", false, true, 0, 0, HF_LAYERS_MAX, &n) && n > 0)
    set_int(&m->mtp_layers, h->loc, n);
}

static void read_moe_deepseek(H *h, ModelSpec *m) {
  int64_t v;
  moe_common(h, m, "n_routed_experts", "moe_intermediate_size");
  if (rd_int(h, "n_shared_experts", false, true, 0, 0, HF_DIM_MAX, &v)) set_int(&m->moe.shared_experts, h->loc, v);
  if (rd_int(h, "first_k_dense_replace", false, true, 0, 0, HF_LAYERS_MAX, &v))
    set_int(&m->moe.dense_layers, h->loc, v);
  want_one(h, "moe_layer_freq", "rankplan expresses MoE layers only as every layer after the dense ones");
  if (m->moe.dense_layers.v > 0) set_dense_ffn(h, m, "intermediate_size");
  else get(h, "intermediate_size");
  bool bias = h->fam->router_bias == TRI_YES;
  const char *tk = rd_str_in(h, h->cfg, h->pre, "topk_method");
  if (h->fam->router_bias == TRI_FIELD && tk) bias = strcmp(tk, "noaux_tc") == 0;
  set_bool(&m->moe.router_bias, h->loc, bias);
  read_routing_groups(h, m);
  read_mtp(h, m);
}

static void read_moe_mixtral(H *h, ModelSpec *m) {
  moe_common(h, m, "num_local_experts", "intermediate_size");
  int64_t k;
  /* gpt-oss states top-k twice; they must agree */
  if (rd_int(h, "experts_per_token", false, false, 0, 1, HF_DIM_MAX, &k) && k != m->moe.top_k.v)
    unsupported(h, "`%sexperts_per_token` %lld differs from num_experts_per_tok %lld", h->pre,
                (long long)k, (long long)m->moe.top_k.v);
  set_bool(&m->moe.router_bias, h->loc, h->fam->router_bias == TRI_YES);
}

static void read_moe_llama4(H *h, ModelSpec *m) {
  moe_common(h, m, "num_local_experts", "intermediate_size");
  set_int(&m->moe.shared_experts, h->loc, 1); /* one shared expert of the routed size */
  want_one(h, "interleave_moe_layer_step",
           "MoE layers interleaved with dense ones are not expressible (only leading dense layers)");
  get(h, "intermediate_size_mlp"); /* the dense layers' size; step 1 has none */
  json_t *ml = get(h, "moe_layers");
  if (ml && !json_is_null(ml) && (!json_is_array(ml) || (int64_t)json_array_size(ml) != m->layers.v))
    unsupported(h, "`%smoe_layers` does not list every layer: only leading dense layers are expressible",
                h->pre);
}

static void read_ffn(H *h, ModelSpec *m) {
  switch (h->fam->moe) {
  case MOE_NONE: set_dense_ffn(h, m, "intermediate_size"); break;
  case MOE_MIXTRAL: read_moe_mixtral(h, m); break;
  case MOE_QWEN: read_moe_qwen(h, m); break;
  case MOE_DEEPSEEK: read_moe_deepseek(h, m); break;
  case MOE_LLAMA4: read_moe_llama4(h, m); break;
  }
  if (m->moe.present && m->layers.set && m->moe.dense_layers.v > m->layers.v) {
    diag_at(h->d, DIAG_E0105, h->loc, "the config's %lld leading dense layers are more than its %lld layers",
            (long long)m->moe.dense_layers.v, (long long)m->layers.v);
    h->ok = false;
  }
}

/* ---------------------------------------------------------------------- */
/* Weights dtype, quantisation, and what the spec does not model. */

static void read_dtype(H *h, ModelSpec *m) {
  m->dtype.loc = h->loc;
  /* `dtype` is the newer transformers' name; a multimodal config may state
   * it at the top level, in text_config, or both (text_config wins). */
  const char *t = rd_str_in(h, h->cfg, h->pre, "torch_dtype");
  if (!t) t = rd_str_in(h, h->cfg, h->pre, "dtype");
  if (h->cfg != h->root) {
    const char *top = rd_str_in(h, h->root, "", "torch_dtype");
    if (!top) top = rd_str_in(h, h->root, "", "dtype");
    if (!t) t = top;
  }
  static const char *const names[] = {"float32", "bfloat16", "float16"};
  static const DType types[] = {DT_FP32, DT_BF16, DT_FP16};
  m->dtype.weights.v = DT_BF16;
  for (size_t i = 0; t && i < RP_ARRAY_LEN(names); i++)
    if (strcmp(t, names[i]) == 0) {
      m->dtype.weights.v = (int)types[i];
      m->dtype.weights.set = types[i] != DT_BF16;
      return;
    }
  if (t) unsupported(h, "`torch_dtype` `%s` is not one of float32, bfloat16, float16", t);
}

/* MXFP4 (gpt-oss): the linear projections in mxfp4, except the attention's
 * where modules_to_not_convert keeps `self_attn` in the checkpoint's dtype
 * (dtype.attention_weights). Embeddings, lm_head and routers are counted
 * unquantised whatever the list says (model_plain_bytes). */
static void read_mxfp4(H *h, json_t *q, ModelSpec *m) {
  DType plain = (DType)m->dtype.weights.v;
  m->dtype.weights.v = DT_MXFP4;
  m->dtype.weights.set = true;
  json_t *keep = get_in(h, q, "quantization_config.", "modules_to_not_convert");
  for (size_t i = 0; keep && json_is_array(keep) && i < json_array_size(keep); i++) {
    const char *s = json_string_value(json_array_get(keep, i));
    if (s && strstr(s, "self_attn")) {
      m->dtype.attention_weights.v = (int)plain;
      m->dtype.attention_weights.set = true;
      header_note(h, "`quantization_config.modules_to_not_convert` keeps `%s` unquantised: the attention "
                     "projections are counted in %s (dtype.attention_weights)", s, dtype_name(plain));
    }
  }
}

static void read_quant(H *h, ModelSpec *m) {
  json_t *q = get_in(h, h->root, "", "quantization_config");
  if (!q || json_is_null(q)) return;
  if (!json_is_object(q)) {
    type_err(h, "", "quantization_config", "an object", q);
    return;
  }
  const char *qm = rd_str_in(h, q, "quantization_config.", "quant_method");
  if (!qm) {
    Diag *g = diag_at(h->d, DIAG_E0102, h->loc, "`quantization_config.quant_method` is missing from the config");
    diag_help(g, "a quantised checkpoint names its method, e.g. `fp8` or `mxfp4`");
    h->ok = false;
    return;
  }
  if (strcmp(qm, "mxfp4") == 0) {
    read_mxfp4(h, q, m);
    return;
  }
  if (strcmp(qm, "fp8") != 0) {
    not_modelled(h, "`quantization_config.quant_method` `%s`: the spec has no dtype for it; weights are "
                 "counted in %s", qm, dtype_name((DType)m->dtype.weights.v));
    return;
  }
  m->dtype.weights.v = DT_FP8;
  m->dtype.weights.set = true;
  json_t *b = get_in(h, q, "quantization_config.", "weight_block_size");
  bool blocks128 = b && json_is_array(b) && json_array_size(b) == 2 &&
                   json_integer_value(json_array_get(b, 0)) == 128 &&
                   json_integer_value(json_array_get(b, 1)) == 128;
  if (!blocks128)
    not_modelled(h, "`quantization_config`: fp8 scales are counted as one fp32 per 128x128 block, which "
                 "this checkpoint does not state");
}

/* layer_types of the config (transformers' names), into t[0..n). */
static bool config_layer_types(H *h, json_t *lt, int64_t n, int *t) {
  if (!json_is_array(lt)) {
    type_err(h, h->pre, "layer_types", "an array", lt);
    return false;
  }
  if ((int64_t)json_array_size(lt) != n) {
    unsupported(h, "`%slayer_types` has %zu entries for %lld layers", h->pre, json_array_size(lt), (long long)n);
    return false;
  }
  static const char *const names[] = {"full_attention", "sliding_attention", "chunked_attention"};
  for (size_t i = 0; i < json_array_size(lt); i++) {
    const char *s = json_string_value(json_array_get(lt, i));
    t[i] = -1;
    for (size_t k = 0; s && k < RP_ARRAY_LEN(names); k++)
      if (strcmp(s, names[k]) == 0) t[i] = (int)k;
    if (t[i] < 0) {
      unsupported(h, "`%slayer_types[%zu]` is not one of full_attention, sliding_attention, chunked_attention",
                  h->pre, i);
      return false;
    }
  }
  return true;
}

/* Llama 4: chunked attention on the layers with RoPE, full on the NoPE
 * ones (no_rope_layers[i] == 0; by default every 4th layer, transformers'
 * Llama4TextConfig). */
static bool nope_layer_types(H *h, int64_t n, int *t) {
  int64_t every = 4;
  rd_int(h, "no_rope_layer_interval", false, true, 4, 1, HF_LAYERS_MAX, &every);
  json_t *nr = get(h, "no_rope_layers");
  bool listed = nr && json_is_array(nr) && json_array_size(nr) > 0;
  if (nr && !json_is_null(nr) && !json_is_array(nr)) {
    type_err(h, h->pre, "no_rope_layers", "an array", nr);
    return false;
  }
  if (listed && (int64_t)json_array_size(nr) != n) {
    unsupported(h, "`%sno_rope_layers` has %zu entries for %lld layers", h->pre, json_array_size(nr), (long long)n);
    return false;
  }
  for (int64_t i = 0; i < n; i++) {
    bool rope = listed ? json_integer_value(json_array_get(nr, (size_t)i)) != 0 : (i + 1) % every != 0;
    t[i] = rope ? LAYER_CHUNKED : LAYER_FULL;
  }
  return true;
}

/* Sliding windows without layer_types: every P-th layer full
 * (sliding_window_pattern, Gemma 3), Qwen2's layers from
 * max_window_layers on, or every layer (Mistral 7B v0.1). */
static void window_layer_types(H *h, int64_t n, int *t) {
  int64_t pat = 0, from = 0;
  bool has_pat = rd_int(h, "sliding_window_pattern", false, true, 0, 1, HF_LAYERS_MAX, &pat);
  bool qwen = strncmp(h->fam->type, "qwen", 4) == 0;
  if (qwen) rd_int(h, "max_window_layers", false, true, 0, 0, HF_LAYERS_MAX, &from);
  for (int64_t i = 0; i < n; i++)
    t[i] = (has_pat && (i + 1) % pat == 0) || (qwen && i < from) ? LAYER_FULL : LAYER_SLIDING;
}

/* The attention type of every layer: model.attention.sliding_window,
 * chunk_size and layer_types (docs/models.md, "Attention types"). */
static void read_windows(H *h, ModelSpec *m) {
  int64_t w = 0, chunk = 0, n = m->layers.v;
  bool has_w = rd_int(h, "sliding_window", false, true, 0, 0, HF_TOKENS_MAX, &w) && w > 0;
  if (!rd_bool(h, "use_sliding_window", true)) has_w = false;
  bool has_c = rd_int(h, "attention_chunk_size", false, true, 0, 1, HF_TOKENS_MAX, &chunk);
  json_t *lt = get(h, "layer_types");
  /* read, whichever of them decides the layers' types */
  get(h, "sliding_window_pattern");
  get(h, "max_window_layers");
  get(h, "no_rope_layers");
  get(h, "no_rope_layer_interval");
  if (n <= 0) return;
  int *t = rp_calloc((size_t)n, sizeof *t);
  bool ok = true;
  if (lt && !json_is_null(lt)) ok = config_layer_types(h, lt, n, t);
  else if (has_c) ok = nope_layer_types(h, n, t);
  else if (has_w) window_layer_types(h, n, t);
  int64_t count[3] = {0, 0, 0};
  for (int64_t i = 0; ok && i < n; i++) count[t[i]]++;
  if (ok && count[LAYER_SLIDING] > 0 && !has_w)
    unsupported(h, "`%slayer_types` has sliding layers, but `%ssliding_window` is not given", h->pre, h->pre);
  else if (ok && count[LAYER_CHUNKED] > 0 && !has_c)
    unsupported(h, "`%slayer_types` has chunked layers, but `%sattention_chunk_size` is not given", h->pre, h->pre);
  else if (ok) {
    if (count[LAYER_SLIDING] > 0) set_int(&m->attention.sliding_window, h->loc, w);
    if (count[LAYER_CHUNKED] > 0) set_int(&m->attention.chunk_size, h->loc, chunk);
    bool mixed = count[LAYER_FULL] < n && count[LAYER_FULL] > 0;
    if (mixed || (count[LAYER_SLIDING] > 0 && count[LAYER_CHUNKED] > 0)) {
      m->attention.layer_types.items = rp_calloc((size_t)n, sizeof(SEnum));
      for (int64_t i = 0; i < n; i++) m->attention.layer_types.items[i] = (SEnum){t[i], h->loc, true};
      m->attention.layer_types.len = (size_t)n;
      m->attention.layer_types.set = true;
      m->attention.layer_types.loc = h->loc;
    }
  }
  free(t);
}

/* ---------------------------------------------------------------------- */
/* The rotary embedding (model.rope). */

/* A number of obj (pre its path) in (lo, hi], or -1 when absent or null. */
static double rope_num(H *h, json_t *obj, const char *pre, const char *key, double lo, double hi) {
  json_t *v = get_in(h, obj, pre, key);
  if (!v || json_is_null(v)) return -1;
  if (!json_is_number(v)) {
    type_err(h, pre, key, "a number", v);
    return -1;
  }
  double x = json_number_value(v);
  if (!(x > lo && x <= hi)) {
    diag_at(h->d, DIAG_E0105, json_loc(h, pre, key), "`%s%s` in the config is %g, outside (%g, %g]", pre, key, x,
            lo, hi);
    h->ok = false;
    return -1;
  }
  return x;
}

/* rope_scaling (transformers 4) or rope_parameters (5; the full-attention
 * layers' entry where it is keyed by layer type): the scaling that sizes
 * the engines' tables. Types that do not are left as none, with a note
 * where the import cannot tell (docs/models.md, model.rope). */
static void read_rope_scaling(H *h, ModelSpec *m, json_t *rs, const char *pre) {
  const char *t = rd_str_in(h, rs, pre, "rope_type");
  if (!t) t = rd_str_in(h, rs, pre, "type");
  if (!t || strcmp(t, "default") == 0) return;
  RopeScaling sc = strcmp(t, "linear") == 0 ? ROPE_LINEAR : strcmp(t, "dynamic") == 0 ? ROPE_DYNAMIC
                   : strcmp(t, "yarn") == 0 || strcmp(t, "deepseek_yarn") == 0 ? ROPE_YARN
                   : strcmp(t, "llama3") == 0 ? ROPE_LLAMA3 : ROPE_NONE;
  if (sc == ROPE_NONE) {
    not_modelled(h, "`%srope_type` `%s`: the RoPE table is counted unscaled", pre, t);
    return;
  }
  double f = rope_num(h, rs, pre, "factor", 0, 1024);
  if (f < 0) { /* a bad factor was reported at its place */
    json_t *given = json_object_get(rs, "factor");
    if (!given || json_is_null(given)) unsupported(h, "`%sfactor` is not given for the rope type `%s`", pre, t);
    return;
  }
  m->rope.scaling = (SEnum){sc, h->loc, true};
  m->rope.factor = (SNum){f, h->loc, true};
  if (sc != ROPE_YARN) return;
  int64_t orig = 0;
  json_t *o = get_in(h, rs, pre, "original_max_position_embeddings");
  if (o && json_is_integer(o) && json_integer_value(o) >= 1 && json_integer_value(o) <= HF_TOKENS_MAX)
    orig = json_integer_value(o);
  if (orig) set_int(&m->rope.original_max_position_embeddings, h->loc, orig);
  else unsupported(h, "`%soriginal_max_position_embeddings` is not a positive integer for the rope type `%s`", pre, t);
}

/* partial_rotary_factor (GLM) as the rotated dimensions, as the engines
 * round it (int(head_dim x factor)). */
static void read_rotary_dim(H *h, ModelSpec *m) {
  double f = rope_num(h, h->cfg, h->pre, "partial_rotary_factor", 0, 1);
  if (f > 0 && f < 1 && m->attention.kind.v != ATTN_MLA && m->attention.head_dim.v > 0) {
    int64_t d = (int64_t)((double)m->attention.head_dim.v * f);
    set_int(&m->rope.rotary_dim, h->loc, d > 0 ? d : 1);
  }
}

static void read_rope(H *h, ModelSpec *m) {
  read_rotary_dim(h, m);
  json_t *rs = get(h, "rope_scaling"), *rp = get(h, "rope_parameters");
  char *pre = NULL;
  if ((!rs || json_is_null(rs)) && rp && json_is_object(rp)) {
    json_t *full = json_object_get(rp, "full_attention");
    pre = rp_sprintf("%srope_parameters.%s", h->pre, json_is_object(full) ? "full_attention." : "");
    rs = json_is_object(full) ? full : rp;
    json_t *slide = json_object_get(rp, "sliding_attention");
    char *sp = rp_sprintf("%srope_parameters.sliding_attention.", h->pre);
    double lt = json_is_object(slide) ? rope_num(h, slide, sp, "rope_theta", 0, 1e30) : -1;
    double gt = json_is_object(full) ? rope_num(h, full, pre, "rope_theta", 0, 1e30) : -1;
    free(sp);
    if (lt > 0 && gt > 0 && lt != gt && m->attention.sliding_window.set) set_bool(&m->rope.local_base, h->loc, true);
  } else {
    pre = rp_sprintf("%srope_scaling.", h->pre);
  }
  if (rs && json_is_object(rs)) read_rope_scaling(h, m, rs, pre);
  else if (rs && !json_is_null(rs)) type_err(h, h->pre, "rope_scaling", "an object", rs);
  free(pre);
  double local = rope_num(h, h->cfg, h->pre, "rope_local_base_freq", 0, 1e30);
  json_t *theta = json_object_get(h->cfg, "rope_theta");
  if (local > 0 && m->attention.sliding_window.set &&
      !(theta && json_is_number(theta) && json_number_value(theta) == local))
    set_bool(&m->rope.local_base, h->loc, true);
}

/* The encoders of a multimodal checkpoint. */
static void read_towers(H *h) {
  static const char *const towers[] = {"vision_config", "audio_config"};
  for (size_t i = 0; i < RP_ARRAY_LEN(towers); i++) {
    json_t *v = get_in(h, h->root, "", towers[i]);
    if (v && !json_is_null(v))
      not_modelled(h, "`%s`: the encoder's weights are not counted", towers[i]);
  }
}

static bool in_list(const char *k, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(k, list[i]) == 0) return true;
  return false;
}

/* Appends the keys of obj (path prefix pre) that were neither read nor
 * known to be irrelevant. */
static void unknown_keys(H *h, json_t *obj, const char *pre, StrBuf *sb, size_t *n) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    char *p = rp_sprintf("%s%s", pre, k);
    bool known = json_object_get(h->seen, p) || in_list(k, ignored_keys, RP_ARRAY_LEN(ignored_keys));
    if (strcmp(p, "quantization_config") == 0 && json_is_object(v)) {
      const char *qk;
      json_t *qv;
      json_object_foreach(v, qk, qv) {
        if (!in_list(qk, quant_keys, RP_ARRAY_LEN(quant_keys)))
          sb_printf(sb, "%s`quantization_config.%s`", (*n)++ ? ", " : "", qk);
      }
    }
    if (!known) sb_printf(sb, "%s`%s`", (*n)++ ? ", " : "", p);
    free(p);
  }
}

static void report_unknown(H *h) {
  StrBuf sb;
  sb_init(&sb);
  size_t n = 0;
  unknown_keys(h, h->root, "", &sb, &n);
  if (h->cfg != h->root) unknown_keys(h, h->cfg, h->pre, &sb, &n);
  if (n) {
    Diag *g = diag_at(h->d, DIAG_W0150, h->loc, "%zu key%s of the config %s not read by the import: %s",
                      n, n == 1 ? "" : "s", n == 1 ? "is" : "are", sb.buf);
    diag_help(g, "check that none of them changes the model's shape (docs/models.md)");
  }
  sb_free(&sb);
}

/* ---------------------------------------------------------------------- */
/* The length of the well-formed UTF-8 character at s[0..n) (its code
 * point in *cp), or 0 for a byte that starts none. */
static size_t utf8_char(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned c = s[0];
  *cp = c;
  if (c < 0x80) return 1;
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (!len || c > 0xF4 || len > n) return 0;
  *cp = c & (len == 2 ? 0x1fu : len == 3 ? 0x0fu : 0x07u);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    *cp = *cp << 6 | (s[i] & 0x3fu);
  }
  if ((len == 3 && *cp < 0x800) || (len == 4 && (*cp < 0x10000 || *cp > 0x10FFFF))) return 0;
  return len;
}

/* Whether YAML holds code point cp as text inside one line: YAML 1.1's
 * printable set as libyaml reads it (0x20-0x7E, U+00A0-U+D7FF,
 * U+E000-U+FFFD but the byte order mark, U+10000 and up) less what it
 * takes as a line break (U+0085 NEL, U+2028, U+2029: a comment would end
 * there and the rest become YAML); tab is left out too. */
static bool yaml_inline_cp(uint32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp != 0x7f;
  if (cp == 0x2028 || cp == 0x2029) return false;
  return (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD && cp != 0xFEFF) || cp >= 0x10000;
}

/* Copies s[0..n) with every character YAML may not hold inside a line
 * (yaml_inline_cp), and every byte that starts no UTF-8 character,
 * written as one `?`. */
static void y_printable(StrBuf *sb, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = utf8_char(u + i, n - i, &cp);
    if (k && yaml_inline_cp(cp)) sb_putn(sb, s + i, k);
    else sb_putc(sb, '?');
    i += k ? k : 1;
  }
}

/* Entry points. */

/* The display name: the file name without `.json`, or its directory's
 * name when the file is called config.json. */
static char *default_name(const char *file) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
  if (n == 6 && strncmp(base, "config", 6) == 0 && base != file) {
    const char *end = base - 1, *start = end;
    while (start > file && start[-1] != '/') start--;
    if (end > start) return rp_strndup(start, (size_t)(end - start));
  }
  return n ? rp_strndup(base, n) : rp_strdup("model");
}

static const Family *find_family(H *h) {
  const char *t = rd_str_in(h, h->root, "", "model_type");
  if (!t) {
    if (h->ok) {
      Diag *g = diag_at(h->d, DIAG_E0102, h->loc, "`model_type` is missing from the config");
      diag_help(g, "a transformers config.json names its model_type; check the file");
    }
    h->ok = false;
    return NULL;
  }
  for (size_t i = 0; i < RP_ARRAY_LEN(families); i++)
    if (strcmp(t, families[i].type) == 0) return &families[i];
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < RP_ARRAY_LEN(families); i++) sb_printf(&sb, "%s%s", i ? ", " : "", families[i].type);
  Diag *g = diag_at(h->d, DIAG_E0151, json_loc(h, "", "model_type"), "`model_type` `%s` is not one the import reads", t);
  diag_help(g, "supported: %s; other models can be written by hand (docs/spec.md, \"model\")", sb.buf);
  sb_free(&sb);
  h->ok = false;
  return NULL;
}

/* Points h->cfg at the language model's object. */
static bool find_text(H *h) {
  if (!h->fam->nested) return true;
  json_t *t = get_in(h, h->root, "", "text_config");
  if (!t || !json_is_object(t)) {
    if (t) type_err(h, "", "text_config", "an object", t);
    else {
      Diag *g = diag_at(h->d, DIAG_E0102, h->loc, "`text_config` is missing from the config");
      diag_help(g, "model_type `%s` keeps its language model under text_config", h->fam->type);
    }
    h->ok = false;
    return false;
  }
  h->cfg = t;
  h->pre = "text_config.";
  rd_str_in(h, t, h->pre, "model_type");
  return true;
}

/* architectures[0]: the model class the engines dispatch on (E0103 when
 * the key holds anything but an array whose first entry is a class name). */
static char *read_architecture(H *h) {
  json_t *a = get_in(h, h->root, "", "architectures");
  if (!a || json_is_null(a)) return NULL;
  json_t *first = json_is_array(a) ? json_array_get(a, 0) : NULL;
  if (!first || !json_is_string(first) || !rp_is_identifier(json_string_value(first))) {
    type_err(h, "", "architectures", "an array whose first entry is a model class name", a);
    return NULL;
  }
  return rp_strdup(json_string_value(first));
}

static void read_model(H *h, ModelSpec *m) {
  m->loc = h->loc;
  m->attention.loc = m->ffn.loc = m->moe.loc = h->loc;
  read_dims(h, m);
  read_attention(h, m);
  read_ffn(h, m);
  read_dtype(h, m);
  read_quant(h, m);
  read_windows(h, m);
  read_rope(h, m);
  read_towers(h);
}

bool hf_import(Diags *d, const char *file, const char *text, size_t len, const char *name,
               HfModel *out) {
  memset(out, 0, sizeof *out);
  SrcLoc loc = {file, 0, 0};
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    SrcLoc at = {file, je.line > 0 ? je.line : 0, je.column > 0 ? je.column : 0};
    Diag *g = diag_at(d, DIAG_E0150, at, "the model config is not valid JSON: %s", je.text);
    diag_help(g, "give the model's config.json as Hugging Face serves it");
    return false;
  }
  H h = {d, loc, text, len, NULL, root, root, "", json_object(), {0}, true};
  sb_init(&h.notes);
  if (!json_is_object(root)) {
    Diag *g = diag_at(d, DIAG_E0150, loc, "the model config is %s, expected a JSON object", json_kind(root));
    diag_help(g, "give the model's config.json as Hugging Face serves it");
    h.ok = false;
  } else if ((h.fam = find_family(&h)) && find_text(&h)) {
    read_model(&h, &out->m);
    out->architecture = read_architecture(&h);
    if (out->architecture) out->m.architecture = (SStr){out->architecture, loc, true};
    report_unknown(&h);
  }
  /* the name is written into the YAML: what YAML cannot hold becomes `?` */
  char *raw = name ? rp_strdup(name) : default_name(file);
  StrBuf nb;
  sb_init(&nb);
  y_printable(&nb, raw, strlen(raw));
  free(raw);
  out->name = sb_take(&nb);
  out->m.name = (SStr){out->name, loc, true};
  out->model_type = rp_strdup(h.fam ? h.fam->type : "");
  out->source = rp_strdup(file);
  out->notes = sb_take(&h.notes);
  json_decref(h.seen);
  json_decref(root);
  return h.ok;
}

void hf_model_free(HfModel *h) {
  free(h->m.attention.layer_types.items);
  free(h->name);
  free(h->model_type);
  free(h->architecture);
  free(h->source);
  free(h->notes);
  memset(h, 0, sizeof *h);
}

/* ---------------------------------------------------------------------- */
/* The model YAML. */

static void y_int(StrBuf *sb, const char *ind, const char *k, const SInt *f) {
  if (f->set) sb_printf(sb, "%s%s: %lld\n", ind, k, (long long)f->v);
}

static void y_true(StrBuf *sb, const char *ind, const char *k, const SBool *f) {
  if (f->set && f->v) sb_printf(sb, "%s%s: true\n", ind, k);
}

static void y_attention(StrBuf *sb, const ModelSpec *m) {
  sb_printf(sb, "attention:\n  kind: %s\n", attn_kind_name((AttnKind)m->attention.kind.v));
  y_int(sb, "  ", "heads", &m->attention.heads);
  y_int(sb, "  ", "kv_heads", &m->attention.kv_heads);
  y_int(sb, "  ", "head_dim", &m->attention.head_dim);
  y_true(sb, "  ", "qk_norm", &m->attention.qk_norm);
  y_true(sb, "  ", "qkv_bias", &m->attention.qkv_bias);
  y_int(sb, "  ", "q_lora_rank", &m->attention.q_lora_rank);
  y_int(sb, "  ", "kv_lora_rank", &m->attention.kv_lora_rank);
  y_int(sb, "  ", "qk_nope_head_dim", &m->attention.qk_nope_head_dim);
  y_int(sb, "  ", "qk_rope_head_dim", &m->attention.qk_rope_head_dim);
  y_int(sb, "  ", "v_head_dim", &m->attention.v_head_dim);
  y_int(sb, "  ", "sliding_window", &m->attention.sliding_window);
  y_int(sb, "  ", "chunk_size", &m->attention.chunk_size);
  if (m->attention.layer_types.set) {
    sb_puts(sb, "  layer_types: [");
    for (size_t i = 0; i < m->attention.layer_types.len; i++)
      sb_printf(sb, "%s%s", i ? ", " : "", layer_attn_name((LayerAttn)m->attention.layer_types.items[i].v));
    sb_puts(sb, "]\n");
  }
}

static void y_rope(StrBuf *sb, const ModelSpec *m) {
  bool sc = m->rope.scaling.set && m->rope.scaling.v != ROPE_NONE;
  if (!m->rope.rotary_dim.set && !sc && !m->rope.local_base.v) return;
  sb_puts(sb, "rope:\n");
  y_int(sb, "  ", "rotary_dim", &m->rope.rotary_dim);
  if (sc) sb_printf(sb, "  scaling: %s\n  factor: %.17g\n", rope_scaling_name((RopeScaling)m->rope.scaling.v),
                    m->rope.factor.v);
  y_int(sb, "  ", "original_max_position_embeddings", &m->rope.original_max_position_embeddings);
  y_true(sb, "  ", "local_base", &m->rope.local_base);
}

static void y_body(StrBuf *sb, const ModelSpec *m) {
  sb_puts(sb, "name: ");
  sb_json_str(sb, m->name.v);
  sb_putc(sb, '\n');
  if (m->source.set) {
    sb_puts(sb, "source: ");
    sb_json_str(sb, m->source.v);
    sb_putc(sb, '\n');
  }
  if (m->architecture.set) {
    sb_puts(sb, "architecture: ");
    sb_json_str(sb, m->architecture.v);
    sb_putc(sb, '\n');
  }
  y_int(sb, "", "layers", &m->layers);
  y_int(sb, "", "hidden_size", &m->hidden_size);
  y_int(sb, "", "vocab_size", &m->vocab_size);
  sb_printf(sb, "tie_embeddings: %s\n", m->tie_embeddings.v ? "true" : "false");
  y_attention(sb, m);
  if (m->ffn.intermediate_size.set) sb_printf(sb, "ffn:\n  intermediate_size: %lld\n", (long long)m->ffn.intermediate_size.v);
  if (m->moe.present) {
    sb_puts(sb, "moe:\n");
    y_int(sb, "  ", "experts", &m->moe.experts);
    y_int(sb, "  ", "top_k", &m->moe.top_k);
    y_int(sb, "  ", "shared_experts", &m->moe.shared_experts);
    y_int(sb, "  ", "expert_intermediate_size", &m->moe.expert_intermediate_size);
    y_int(sb, "  ", "dense_layers", &m->moe.dense_layers);
    sb_printf(sb, "  router_bias: %s\n", m->moe.router_bias.v ? "true" : "false");
    if (m->moe.groups.set) y_int(sb, "  ", "groups", &m->moe.groups);
    if (m->moe.group_top_k.set) y_int(sb, "  ", "group_top_k", &m->moe.group_top_k);
  }
  if (m->dtype.weights.set) sb_printf(sb, "dtype:\n  weights: %s\n", dtype_name((DType)m->dtype.weights.v));
  if (m->dtype.weights.set && m->dtype.attention_weights.set)
    sb_printf(sb, "  attention_weights: %s\n", dtype_name((DType)m->dtype.attention_weights.v));
  y_int(sb, "", "max_context", &m->max_context);
  y_int(sb, "", "max_position_embeddings", &m->max_position_embeddings);
  if (m->mtp_layers.v > 0) y_int(sb, "", "mtp_layers", &m->mtp_layers);
  y_rope(sb, m);
}

/* One comment line: untrusted text (a file name, a quant_method, a module
 * pattern) as y_printable copies it, so no text can end the comment or
 * make the YAML unreadable. */
static void y_comment(StrBuf *sb, const char *prefix, const char *s, size_t n) {
  sb_printf(sb, "# %s", prefix);
  y_printable(sb, s, n);
  sb_putc(sb, '\n');
}

char *hf_model_yaml(Diags *d, const HfModel *h) {
  ModelParams mp;
  if (!model_params(&h->m, &mp, d)) return NULL;
  StrBuf sb;
  sb_init(&sb);
  char *from = rp_sprintf("from %s (model_type %s).", h->source, h->model_type);
  y_comment(&sb, "Imported by `rankplan import-hf` ", from, strlen(from));
  free(from);
  sb_printf(&sb, "# Parameters as rankplan counts them: %lld in total, %lld active per token.\n",
            (long long)mp.total, (long long)mp.active);
  if (mp.mtp > 0)
    sb_printf(&sb, "# Besides them, %lld in the multi-token-prediction modules (mtp_layers), loaded only "
                   "with workload.draft_tokens.\n", (long long)mp.mtp);
  for (const char *l = h->notes; l && *l;) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l) : strlen(l);
    y_comment(&sb, "", l, n);
    l += n + (e != NULL);
  }
  y_body(&sb, &h->m);
  return sb_take(&sb);
}

/* ---------------------------------------------------------------------- */
/* model.hf_config in a spec. */

/* Reads the config a spec names; NULL after E0152. */
static char *read_for_spec(Diags *d, const char *file, const char *field, SrcLoc at, size_t *len) {
  size_t n = strlen(file);
  char *text = NULL;
  /* Only files named as JSON are read: diagnostics quote the lines of the
   * config, and a spec that names another file must not get its text
   * printed into a CI log. */
  int e = n > 5 && strcmp(file + n - 5, ".json") == 0 ? rp_read_file(file, SPEC_MAX_BYTES, &text, len)
                                                     : EINVAL;
  if (!e) return text;
  Diag *g = diag_at(d, DIAG_E0152, at, "cannot read `%s` `%s`: %s", field, file,
                    e == EINVAL     ? "the import reads files whose names end in `.json`"
                    : e == EFBIG    ? "file is over 1 MiB"
                    : e == RP_ENOTREG ? "not a regular file"
                                    : rp_strerror(e));
  diag_help(g, "hf_config paths are relative to the directory of the spec file");
  return NULL;
}

char *hf_import_for_spec(Diags *d, const char *spec_file, const char *path, const char *field,
                         SrcLoc at, const char **yaml_name) {
  const char *slash = spec_file ? strrchr(spec_file, '/') : NULL;
  char *file = path[0] == '/' || !slash ? rp_strdup(path)
                                        : rp_sprintf("%.*s/%s", (int)(slash - spec_file), spec_file, path);
  size_t len = 0;
  char *text = read_for_spec(d, file, field, at, &len), *yaml = NULL;
  if (text) {
    const char *iname = diags_add_source(d, file, text, len);
    HfModel h;
    if (hf_import(d, iname, text, len, NULL, &h)) yaml = hf_model_yaml(d, &h);
    hf_model_free(&h);
    if (yaml) {
      char *shown = rp_sprintf("%s (imported)", file);
      *yaml_name = diags_add_source(d, shown, yaml, strlen(yaml));
      free(shown);
    }
  }
  free(text);
  free(file);
  return yaml;
}
