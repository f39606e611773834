/*
 * spec.h: the typed Spec IR, output of the parse stage (compiler/parse.c)
 * and input of every later stage.
 *
 * Invariants once spec_parse() returned without errors:
 *  - every field a stage reads carries .set and .loc (the YAML position it
 *    came from, which may be inside a catalog file when a preset supplied
 *    it); unset optional fields hold their documented default with .set
 *    false and .loc pointing at the enclosing section;
 *  - quantities are in base units: bytes (int64, exact), bytes per second,
 *    FLOP per second, seconds, requests per second (double);
 *  - counts are positive int64 unless documented otherwise;
 *  - nothing here refers to libyaml: later stages never see YAML.
 */
#ifndef RANKPLAN_SPEC_H
#define RANKPLAN_SPEC_H

#include "diag.h"

typedef struct { int64_t v; SrcLoc loc; bool set; } SInt;  /* counts, bytes */
typedef struct { double v; SrcLoc loc; bool set; } SNum;   /* quantities */
typedef struct { const char *v; SrcLoc loc; bool set; } SStr;
typedef struct { bool v; SrcLoc loc; bool set; } SBool;
typedef struct { int v; SrcLoc loc; bool set; } SEnum;

typedef enum { DT_FP32, DT_BF16, DT_FP16, DT_FP8, DT_INT8, DT_INT4, DT_MXFP4, DT_NVFP4, DT__COUNT } DType;
typedef enum { ATTN_MHA, ATTN_GQA, ATTN_MQA, ATTN_MLA } AttnKind;
typedef enum { MODE_AGGREGATED, MODE_DISAGGREGATED, MODE_SEARCH } DeployMode;
/* deployment.order when the spec leaves it out (docs/spec.md): the rank
 * order of an instance, innermost first. */
#define SPEC_ORDER_DEFAULT "tp-cp-ep-dp-pp"

typedef enum { ENGINE_GENERIC, ENGINE_VLLM, ENGINE_SGLANG, ENGINE_TRTLLM } Engine;
typedef enum { ROLE_PREFILL, ROLE_DECODE, ROLE_BOTH } PoolRole;
/* What one layer's attention sees (docs/memory.md, "Attention types"):
 * every earlier token, the last sliding_window tokens, or the tokens of
 * its chunk_size-token chunk (Llama 4's chunked local attention). */
typedef enum { LAYER_FULL, LAYER_SLIDING, LAYER_CHUNKED } LayerAttn;
/* Where a MoE layer's shared experts live: split over tp like a dense FFN,
 * or whole on every rank (docs/memory.md, "Shared experts"). */
typedef enum { SHARED_TP, SHARED_REPLICATED } SharedPlacement;
/* Hugging Face rope_scaling.rope_type, as far as it sizes the engines'
 * cos/sin table (docs/memory.md, "The RoPE cache"). */
typedef enum { ROPE_NONE, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_YARN, ROPE_LLAMA3 } RopeScaling;

const char *dtype_name(DType t);
const char *attn_kind_name(AttnKind k);
const char *mode_name(DeployMode m);
const char *engine_name(Engine e);
const char *role_name(PoolRole r);
const char *layer_attn_name(LayerAttn t);
const char *rope_scaling_name(RopeScaling r);

typedef struct ModelSpec {
  SrcLoc loc;   /* the `model:` mapping */
  SStr preset;  /* catalog entry name, if any */
  SStr hf_config; /* Hugging Face config.json the model was imported from, if any */
  SStr name;    /* display name (catalog "name:" or the preset) */
  SInt layers, hidden_size, vocab_size;
  SBool tie_embeddings;                   /* default false */
  struct {
    SrcLoc loc;
    SEnum kind;                           /* AttnKind */
    SInt heads, kv_heads, head_dim;       /* kv_heads defaults: mha=heads, mqa=1 */
    SBool qk_norm;                        /* per-head q/k RMSNorm (Qwen3); default false */
    SBool qkv_bias;                       /* default false */
    /* MLA only */
    SInt q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* Per-layer attention types: sliding_window W tokens and chunk_size C
     * tokens (0: none); layer_types one LayerAttn per layer. Unset
     * layer_types: every layer sliding when sliding_window is set, chunked
     * when chunk_size is, else full. */
    SInt sliding_window, chunk_size;
    struct { SrcLoc loc; bool set; size_t len; SEnum *items; } layer_types;
  } attention;
  struct {
    SrcLoc loc;
    SInt intermediate_size;               /* dense FFN (SwiGLU: gate, up, down) */
  } ffn;
  struct {
    SrcLoc loc;
    bool present;                         /* a `moe:` section was given */
    SInt experts, top_k, shared_experts;  /* shared_experts default 0 */
    SInt expert_intermediate_size;
    SInt dense_layers;                    /* leading dense layers, default 0 */
    SBool router_bias;                    /* default false */
    /* Group-limited routing (HF config n_group, topk_group): the experts
     * form `groups` contiguous groups and a token picks its top_k from at
     * most `group_top_k` of them. 0: unlimited. */
    SInt groups, group_top_k;
    /* Expert slots besides one per routed expert (replicas the engine's
     * load balancer fills); default 0. ep divides experts + this. */
    SInt redundant_experts;
    /* Dtypes of the dispatched and combined activations (DType); unset:
     * the activations' dtype. fp8/int8 dispatch carries scales. */
    SEnum dispatch_dtype, combine_dtype;
    SEnum shared_placement;               /* SharedPlacement; default tp */
  } moe;
  struct {
    SrcLoc loc;
    SEnum weights, kv_cache, activations; /* DType; defaults bf16 */
    SEnum attention_weights;              /* DType of the attention projections; defaults to weights */
  } dtype;
  SInt max_context;
  /* Positions the rotary embedding is built for (Hugging Face
   * max_position_embeddings); default max_context. vLLM and SGLang cache
   * cos and sin for every one of them (docs/memory.md, "The RoPE cache"). */
  SInt max_position_embeddings;
  /* model.rope: what sizes the rotary embedding's cos/sin tables the
   * engines build (docs/memory.md, "The RoPE cache"). */
  struct {
    SrcLoc loc;
    SInt rotary_dim;                      /* rotated head dimensions; default the head dim */
    SEnum scaling;                        /* RopeScaling; default none */
    SNum factor;                          /* rope_scaling.factor */
    SInt original_max_position_embeddings; /* yarn's */
    SBool local_base;                     /* sliding layers rotate with their own base: a second table */
  } rope;
  /* Multi-token-prediction modules of the checkpoint (DeepSeek-V3's
   * num_nextn_predict_layers); default 0. Loaded, and counted, only when
   * the workload drafts tokens (workload.draft_tokens). */
  SInt mtp_layers;
  SStr source;    /* Hugging Face id or local path the engines load; optional */
  bool source_preset; /* source is the preset's default, not written in the spec */
  SStr revision;  /* branch, tag or commit of source; optional */
  /* The model class the engines dispatch on (Hugging Face's
   * architectures[0], "DeepseekV3ForCausalLM"); optional. Engines pick
   * kernels by it, and with them the KV page size and dtypes they take
   * (docs/engines.md, "Attention backends"). */
  SStr architecture;
  /* The speculative-decoding draft model (model.draft), NULL when absent:
   * its weights and KV are counted on the last pp stage when the
   * workload drafts tokens (docs/memory.md, "Draft model"). */
  struct ModelSpec *draft;
} ModelSpec;

typedef struct {
  SrcLoc loc;   /* the `hardware:` mapping */
  SStr preset;
  SStr name;
  struct {
    SrcLoc loc;
    SInt memory;         /* bytes */
    SInt cuda_memory;    /* bytes CUDA reports as the device total (torch); optional */
    SNum hbm_bandwidth;  /* bytes/s */
    SNum bf16, fp16, fp8, int8;  /* dense FLOP/s (or OP/s); fp8/int8 may be unset */
    SNum fp4;            /* dense FP4 FLOP/s; may be unset (no dtype uses it yet) */
  } gpu;
  SInt nodes, gpus_per_node;
  SInt nodes_per_rack;   /* optional; topology for placement hooks */
  struct {
    SrcLoc loc;
    SInt domain;        /* GPUs */
    SNum bandwidth;     /* B/s per GPU per direction */
    SNum latency;       /* s */
    SNum nvls_ratio;    /* peak bus bandwidth of NCCL's NVLink SHARP all-reduce over `bandwidth`; unset: none */
  } scale_up;
  struct { SrcLoc loc; SNum bandwidth; SNum latency; } scale_out;              /* B/s per GPU per direction; s */
  /* Node host names for launch files: a list (one per node) or a pattern
   * with one `{n}` for the node index; both optional, at most one given. */
  struct { SrcLoc loc; bool set; size_t len; SStr *items; } hostnames;
  SStr hostname_pattern;
} HardwareSpec;

typedef struct {
  SrcLoc loc;
  SInt input_tokens, output_tokens;
  SNum rate;           /* req/s; optional (open loop: Poisson arrivals) */
  SInt concurrency;    /* requests in flight; optional (closed loop); not with rate */
  SInt requests;       /* requests a finite closed-loop run sends; optional; needs concurrency */
  SNum prefix_cache_hit_rate; /* share of prompt tokens served from the prefix cache; [0, 1) */
  SInt draft_tokens;   /* speculative decoding: tokens proposed per step */
  SNum accepted_tokens; /* tokens emitted per step and request, 1 to 1 + draft_tokens */
} WorkloadSpec;

typedef struct {
  SrcLoc loc;
  SNum ttft, tpot;     /* seconds */
} SloSpec;

typedef struct {
  SrcLoc loc;          /* the pool's mapping */
  SStr name;
  SEnum role;          /* PoolRole */
  SInt replicas;       /* default 1 */
  SInt tp, pp, cp, dp, ep, etp, dcp;  /* default 1 each; an MoE pool's etp tp*cp*dp/ep */
  struct { SrcLoc loc; bool set; size_t len; SInt *items; } layer_partition;
} PoolSpec;

typedef struct {
  SrcLoc loc;
  SEnum mode;          /* DeployMode */
  SEnum engine;        /* Engine, default generic */
  SStr engine_version; /* `engine: {name, version}`; unset: the catalog's newest */
  SStr image;          /* container image for the Kubernetes and Dynamo targets */
  SStr order;          /* default SPEC_ORDER_DEFAULT */
  SBool allow_tp_across_domain;  /* default false */
  size_t npools;
  PoolSpec *pools;
  struct {
    SrcLoc loc;
    SNum utilization;  /* fraction of GPU memory usable, default 0.90 */
    SInt reserve;      /* bytes, default 2 GiB */
    SInt kv_block;     /* tokens per KV block, default 16 */
  } memory;
  struct {
    SrcLoc loc;
    SStr placement, layer_partition, expert_placement, objective, filter;  /* Lua files */
  } hooks;
} DeploymentSpec;

/* `serving:` (docs/spec.md): options the launch files pass to the engine. */
typedef struct {
  SrcLoc loc;
  SInt port;                   /* first HTTP port of a node, default 8000 */
  SStr served_model_name;      /* default: model.source */
  SInt max_model_len;          /* default: model.max_context */
  SInt max_num_seqs;           /* optional: the engine's default */
  SInt max_num_batched_tokens; /* chunked-prefill token budget; optional */
  SStr kv_transfer;            /* KV transfer backend; default: the engine's */
  SStr sampler;                /* vLLM's top-k/top-p sampler (flashinfer, torch); optional */
  SBool overlap_schedule;      /* CPU work of step n+1 beside the GPU's step n; unset: the engine's default */
  SBool chunked_prefill;       /* prompts split over steps under the token budget; unset: the engine's default */
  SInt cuda_graph_max_bs;      /* largest decode batch of one scheduler in CUDA graphs; optional */
} ServingSpec;
/* The layout dimensions a `search:` constraint can name per role
 * (docs/spec.md, "Search constraints"); SDIM_GPUS is one instance's GPUs. */
typedef enum {
  SDIM_TP, SDIM_PP, SDIM_CP, SDIM_DP, SDIM_EP, SDIM_ETP, SDIM_DCP, SDIM_GPUS, SDIM__COUNT
} SearchDim;

/* Allowed values of one dimension: a list (n > 0, ascending, distinct) or
 * a range lo..hi (n == 0). Unset: every value. */
typedef struct {
  bool set;
  SrcLoc loc;
  size_t n;
  int64_t *vals;
  int64_t lo, hi;
} SearchDimSet;

typedef struct {
  SrcLoc loc;
  SInt gpu_budget;     /* default: whole cluster */
  SInt top;            /* rows to print, default 10 */
  SNum headroom;       /* rho for xPyD sizing, default 0.9 */
  SBool cp, pp;        /* set and false: no context / pipeline parallelism in any pool */
  SBool whole_nodes;   /* every instance's GPUs are whole nodes; default false */
  SBool separate_nodes; /* prefill and decode instances never share a node; default false */
  SBool aggregated, disaggregated; /* set and false: that serving mode is not searched */
  SrcLoc role_loc[3];  /* search.prefill, .decode, .both (PoolRole order) */
  SearchDimSet dims[3][SDIM__COUNT];
} SearchSpec;

/* "tp", "pp", "cp", "dp", "ep", "etp", "dcp", "gpus". */
const char *search_dim_name(SearchDim d);
/* Whether v is allowed by s (an unset s allows every value). */
bool search_dim_allows(const SearchDimSet *s, int64_t v);

typedef struct Spec {
  const char *file;    /* interned path of the spec */
  char sha256[65];     /* digest of the spec's bytes */
  SInt version;
  SStr name;
  ModelSpec model;
  HardwareSpec hardware;
  WorkloadSpec workload;
  SloSpec slo;
  DeploymentSpec deployment;
  SearchSpec search;
  ServingSpec serving;
  const char *catalog_dir; /* where presets and engine entries were looked up */
  void *arena;         /* owned allocations; freed by spec_free */
} Spec;

/* The longest request the engine admits: serving.max_model_len, which
 * defaults to model.max_context (E0121 keeps it at most that). The memory
 * ledger's one-request check and the engines' "maximum concurrency" line
 * use it, as the engines do. */
int64_t spec_max_model_len(const Spec *s);

/* Parses a spec from bytes already read (name is the path shown in
 * diagnostics). catalog_dir is where presets are looked up (NULL: the
 * default, see spec_catalog_dir()). Returns NULL when any error was
 * reported; warnings alone still return the Spec. */
Spec *spec_parse(Diags *d, const char *name, const char *text, size_t len,
                 const char *catalog_dir);
/* Reads path (size-capped) and parses it; unreadable → E0001/E0002. */
Spec *spec_parse_file(Diags *d, const char *path, const char *catalog_dir);
/* The same with the hardware replaced by catalog entry hw_preset (NULL:
 * as written): the spec's `hardware.nodes` and `nodes_per_rack` stay, every
 * other hardware figure comes from the entry (search --what-if gpu=). */
Spec *spec_parse_file_hw(Diags *d, const char *path, const char *catalog_dir, const char *hw_preset);
void spec_free(Spec *s);

/* The catalog directory: $RANKPLAN_CATALOG, else the data directory's
 * (datadir.h: the source tree for a build run in place, else found from
 * the executable's location). */
const char *spec_catalog_dir(void);

/* The path shown in messages for catalog entry kind/name.yaml under dir:
 * relative to the project for the bundled catalog (free it). */
char *spec_catalog_display(const char *dir, const char *kind, const char *name);

/* Size cap for spec files, bytes. */
#define SPEC_MAX_BYTES (1u << 20)

/* Structural rules that need the whole Spec (pools fit the cluster, roles
 * match the mode, order string, ...). Called by spec_parse. */
void spec_check_structure(Diags *d, Spec *s);

/* GPUs used by one pool: replicas * tp * cp * dp * pp (checked). */
int64_t pool_gpus(const PoolSpec *p);

#endif
