/*
 * engines.h: the engine capability matrix (plans/catalog/engines/, one
 * YAML file per engine and version range; docs/engines.md) and the rules
 * that refuse what an engine cannot run.
 *
 * engine_catalog.c reads an entry into EngineCaps (it is a front-end
 * reader, like the presets of parse.c); engines.c checks a Spec against it
 * (`check` and `compile` call engine_check from validate_spec) and answers
 * the emitters' questions (flag spellings, KV dtype and transfer names).
 * The generic engine has no entry and no rules: engine_check does nothing
 * for it.
 */
#ifndef RANKPLAN_ENGINES_H
#define RANKPLAN_ENGINES_H

#include "spec.h"

/* The parallel dimensions of a pool, in the catalog's `dims:` order. */
typedef enum { ED_TP, ED_PP, ED_DP, ED_EP, ED_ETP, ED_CP, ED_DCP, ED__COUNT } EngineDim;
const char *engine_dim_name(EngineDim d);

/* Named layout rules an entry may list under `rules:` (docs/engines.md):
 *  ER_EDP_ONE        MoE pools: the expert groups span the instance
 *                    (edp = 1): the engine shards experts over all of an
 *                    instance's tp x dp ranks;
 *  ER_EP_ALL_OR_NONE MoE pools: ep = 1 (experts sharded by tp) or etp = 1
 *                    (one expert-parallel group of every rank), nothing
 *                    between;
 *  ER_DP_NEEDS_TP1   MoE pools: dp > 1 (attention data parallel) only with
 *                    tp = 1;
 *  ER_DCP_DIVIDES_TP dcp divides tp (dcp regroups the tp ranks);
 *  ER_DP_MOE_ONLY    dp > 1 only for MoE models (the engine's dp inside an
 *                    instance is attention data parallelism; a dense
 *                    model's dp is more replicas). */
enum { ER_EDP_ONE = 1, ER_EP_ALL_OR_NONE = 2, ER_DP_NEEDS_TP1 = 4, ER_DCP_DIVIDES_TP = 8, ER_DP_MOE_ONLY = 16 };

/* What an engine allows between a prefill and a decode pool's tp (or pp):
 * any sizes, equal sizes, a decode size that is a multiple of the prefill
 * size, nothing established (a warning, W0701), or either size a multiple
 * of the other. */
typedef enum { PD_ANY, PD_EQUAL, PD_DECODE_MULTIPLE, PD_UNVERIFIED, PD_DIVISIBLE } PdRule;

typedef struct {
  char *key, *value;
} EngineKV;

#define ENGINE_MAX_BLOCK_SIZES 16

typedef struct {
  bool roles[3];  /* PoolRole: whether a size above 1 runs in that role */
  char *flag;     /* the engine's spelling, NULL when it has none */
} EngineDimCaps;

typedef struct EngineCaps {
  char *file;           /* the entry as shown in messages */
  Engine engine;
  char *version;        /* the entry's version name ("0.11") */
  char *min, *below;    /* the releases it covers, min <= v < below; NULL:
                           only `version` itself */
  char *source;         /* where its facts were read */
  char *command;        /* the launch command ("vllm serve") */
  EngineDimCaps dim[ED__COUNT];
  unsigned rules;       /* ER_* */
  char *layer_split;    /* how its loader splits layers over pp (partition.c) */
  PdRule pd_tp, pd_pp;  /* prefill against decode pools */
  size_t nkv_dtypes, nkv_transfer, nflags, nsamplers;
  EngineKV *kv_dtypes;  /* rankplan dtype -> the engine's --kv-cache-dtype word */
  EngineKV *kv_transfer;/* transfer name -> the engine's connector/backend word */
  char *kv_transfer_default;
  EngineKV *flags;      /* rankplan term -> the engine's flag */
  EngineKV *samplers;   /* serving.sampler -> the environment setting that
                           selects it; none: the key is refused */
  size_t nyaml_keys, nblock_sizes;
  int64_t block_sizes[ENGINE_MAX_BLOCK_SIZES]; /* the KV block sizes its flag
                                                  accepts, ascending; none listed: any */
  char *block_sizes_from; /* a release inside the range from which the flag
                             also accepts block_sizes_added; NULL: none */
  int64_t block_sizes_added[ENGINE_MAX_BLOCK_SIZES];
  size_t nblock_sizes_added;
  EngineKV *yaml_keys;  /* rankplan term -> `section.field` of the engine's
                           arguments YAML (the file its `config` flag names),
                           for settings the engine takes there only */
} EngineCaps;

/* How the engine's scheduler fills one step (docs/cost-model.md,
 * "Aggregated instances"), with the spec's serving.* values or the
 * engine's defaults for the spec's GPU:
 *  mixed   prefill tokens ride in decode steps under a per-step token
 *          budget (vLLM V1's chunked prefill, TensorRT-LLM's with
 *          serving.chunked_prefill); false: the engine alternates prefill
 *          and decode steps (SGLang without --enable-mixed-chunk), or runs
 *          whole prompts beside the decodes (whole_prompts);
 *  tokens  the per-step token budget of one scheduler (a dp rank):
 *          serving.max_num_batched_tokens, else the engine's default,
 *          0 when neither is known;
 *  seqs    the most running sequences of one scheduler: serving.max_num_seqs,
 *          else the engine's default, 0 when neither is known;
 *  overlap the engine prepares step n+1 (scheduling, inputs, sampling
 *          output) on the CPU while the GPU runs step n: serving.overlap_schedule,
 *          else the engine's default (engine_overlap_default);
 *  source  where the defaults were read (NULL: the spec set them, or none). */
typedef struct {
  bool mixed, overlap;
  int64_t tokens, seqs;
  const char *source;
  bool eager_prefill;  /* a prefill forward runs without CUDA graphs, its kernels
                          issued one by one from Python */
  bool whole_prompts;  /* a step carries whole prompts beside the running
                          decodes (TensorRT-LLM's in-flight batching without
                          chunked prefill): each such step also advances them */
  double overlap_exposed_s; /* CPU time per step and pipeline stage that the
                               overlap still leaves exposed, 0: none known */
} EngineSched;
void engine_sched(const Spec *s, EngineSched *out);

/* vLLM 0.11's largest CUDA-graph capture, in tokens a step:
 * serving.cuda_graph_max_bs (--max-cudagraph-capture-size), else
 * min(2 * max_num_seqs, 512) with the spec's or the default max_num_seqs
 * (vllm/config of 0.11.0; docs/memory.md, "CUDA graphs"). */
int64_t engine_vllm_graph_tokens(const Spec *s);
/* How many step sizes the spec's vLLM captures by default up to that
 * largest one (0.19: 51 at 512; 0.11: 67; docs/memory.md, "CUDA graphs"). */
int64_t engine_vllm_graph_sizes(const Spec *s);

/* TensorRT-LLM's CUDA graphs for one attention dp rank's decode batch:
 * the largest batch captured (serving.cuda_graph_max_bs, else 128) and
 * the largest below which every batch has a graph (the same when set,
 * the launch files writing it padded; else 32, the default sizes being
 * unpadded; docs/memory.md, "CUDA graphs"). */
int64_t engine_trtllm_graph_bs(const Spec *s);
/* How many decode graphs it captures: the sizes up to that batch. */
int64_t engine_trtllm_graph_count(const Spec *s);
int64_t engine_trtllm_graph_cover(const Spec *s);

/* Whether a vLLM spec or plan of engine version `version` (NULL or unset:
 * the catalog's newest vLLM entry) follows vLLM 0.19's rules rather than
 * 0.11's: the two entries of plans/catalog/engines/ (docs/engines.md). */
bool engine_vllm_019(const char *version);

/* Why vLLM's launch files cannot run an instance of layout v over nodes
 * of gpn GPUs under deployment.order `order` (NULL: the default), NULL
 * when they can or the instance fits one node. Over nodes they run one
 * engine on a Ray cluster (dp 1) or whole tp x cp x pp engines on each
 * node, consecutive dp ranks (emit_vllm.c, lrun_vllm); the second needs
 * each engine inside a node and the plan's rank order to keep an
 * engine's ranks together, dp outside pp and cp (emit_inst.c orders
 * them as vLLM does: dp, pp, cp, tp). */
const char *engine_vllm_nodes_refusal(const int64_t v[ED__COUNT], int64_t gpn, const char *order);

/* Whether engine e at `version` (NULL: the catalog's newest entry)
 * overlaps the CPU work of a step with the GPU's by default: SGLang's
 * overlap scheduler (on unless --disable-overlap-schedule), TensorRT-LLM's
 * (disable_overlap_scheduler defaults to False) and vLLM 0.19's async
 * scheduling do; vLLM 0.11 only with --async-scheduling; generic does not.
 * vLLM 0.19 turns it off for an engine run by the Ray executor
 * (engine_vllm_ray_sync_gpn). */
bool engine_overlap_default(Engine e, const char *version);

/* The catalog term of the flag that sets serving.overlap_schedule to on
 * against engine e's default at `version`: "overlap_on" (turns it on) or
 * "overlap_off" (turns it off); NULL when on is the default already. */
const char *engine_overlap_term(Engine e, const char *version, bool on);
/* Whether serving.chunked_prefill chooses the engine's prefill form
 * (TensorRT-LLM's enable_chunked_prefill; E0712 otherwise). */
bool engine_takes_chunked_prefill(Engine e);

/* The most prompt tokens per cp rank that a prefill-running pool accepts,
 * 0 when the engine sets no such limit. TensorRT-LLM's PyTorch backend
 * refuses, with HTTP 400, a request whose prompt over cp exceeds
 * max_num_tokens unless enable_chunked_prefill (BaseLLM._check_arguments
 * in tensorrt_llm/llmapi/llm.py: "The sum of prompt length (...), query
 * length (...) should not exceed max_num_tokens (...)"; a
 * generation-only request, a decode pool's, skips the check). `check`
 * reports it (E0713, W0703) and `search` leaves out the layouts it refuses. */
int64_t engine_prompt_budget(const Spec *s);

/* False, with E0713, when the budget refuses the workload's prompts on
 * every layout entry c runs (none with cp where prompts are prefilled):
 * what `check` says of a spec that leaves the pools to `search`, and the
 * search's own stop before it ranks nothing. */
bool engine_prompts_admitted(Diags *d, const Spec *s, const EngineCaps *c);

/* False after E0718 when the spec's engine does not run on its GPU's
 * vendor (TensorRT-LLM on an AMD GPU); engine_check and the search call
 * it. */
bool engine_vendor_ok(Diags *d, const Spec *s);

/* The width each etp rank's share of the expert intermediate size must be
 * a multiple of, 0 when the engine sets none: vLLM and SGLang load
 * block-quantised fp8 experts (rankplan's fp8, MODEL_FP8_BLOCK) only in
 * whole blocks, raising "The output_size of gate's and up's weight = N is
 * not divisible by weight quantization block_n = 128" (and the same of
 * down's input for block_k) from Fp8MoEMethod.create_weights in
 * vllm/model_executor/layers/quantization/fp8.py and in SGLang's
 * python/sglang/srt/layers/quantization/fp8.py. `check` reports it
 * (E0221) and `search` leaves out the layouts it refuses. */
int64_t engine_fp8_expert_block(const Spec *s);

/* vLLM 0.19 disables async scheduling under the Ray executor, which the
 * launch files use for a tp x pp engine across nodes (emit_vllm.c): only
 * multiproc and uniproc executors support it (vllm/config/vllm.py, "Async
 * scheduling will be disabled"). engine_vllm_ray_sync_gpn is the node size
 * past which the spec's vLLM runs an engine synchronously (0: never), and
 * engine_spans_nodes whether an engine of tp x pp (its attention dp dp)
 * spans nodes of that size. */
int64_t engine_vllm_ray_sync_gpn(const Spec *s);
bool engine_spans_nodes(int64_t gpus_per_node, int64_t tp, int64_t pp, int64_t dp);

/* Whether the spec's GPU is an AMD one (its name holds "AMD" or
 * "Instinct", or its preset starts "mi3"): the engines' ROCm builds
 * differ where their CUDA paths are cited (SGLang 0.4.7's fraction,
 * vLLM's FlashInfer sampler). The spec names no vendor. */
bool engine_gpu_is_amd(const HardwareSpec *h);

/* Whether the spec's GPU is a Hopper one (its name or preset holds
 * "H100", "H20" (H200, GH200 too) or "H800"), where vLLM's MXFP4 experts
 * take triton_kernels' Hopper layouts (docs/memory.md, "MXFP4 experts on
 * Hopper"). The spec names no architecture. */
bool engine_gpu_is_hopper(const HardwareSpec *h);

/* Whether the spec's GPU is of compute capability 10 (its name or preset
 * holds "B200" or "B300": the HGX boards and the GB200/GB300 racks), where
 * SGLang's is_sm100_supported and vLLM's `major == 10` hold; and whether it
 * is exactly 10.0 (B200, GB200; the B300 and GB300 are 10.3: NVIDIA's CUDA
 * GPU compute capability table, https://developer.nvidia.com/cuda-gpus),
 * where vLLM 0.11's is_device_capability(100) holds. */
bool engine_gpu_is_sm100(const HardwareSpec *h);
bool engine_gpu_is_sm100_0(const HardwareSpec *h);

/* The attention backend an engine picks for the spec's model and GPU when
 * it constrains the KV block (engine_attn.c; docs/engines.md, "Attention
 * backends"). backend NULL: none does, the block is the spec's, else the
 * engine's default (engine_kv_block). Otherwise a stated block is kept when it is one of only[]
 * (where only[0] > 0) or a multiple of unit; another one the engine changes
 * to `page` (changes: E0715) or runs on the slower `fallback` backend
 * (W0704), when the fallback takes it (a multiple of fallback_unit, any
 * block where that is 0). A block no backend takes is refused at start-up
 * (E0715, quoting `refusal`). pinned: the launch files name the backend
 * (SGLang's --attention-backend) and the plan's launch.attention_backend
 * holds it. */
typedef struct {
  const char *backend, *fallback, *why, *refusal;
  int64_t page, unit, only[3], fallback_unit;
  bool changes, pinned;
} EngineAttn;
void engine_attn(const Spec *s, EngineAttn *out);

/* The pinned backend's name, NULL when none is pinned. */
const char *engine_attention_backend(const Spec *s);

/* The KV block (page) in tokens the engine runs: deployment.memory.kv_block
 * when set, else the backend's page, else the engine's default: SGLang's
 * page_size 1 (server_args.py: `page_size: int = 1` in 0.4.7, None then 1
 * on CUDA from 0.4.10.post2), TensorRT-LLM's tokens_per_block 32 (the LLM
 * API's KvCacheConfig, tensorrt_llm/llmapi/llm_args.py), vLLM's 16
 * (CacheConfig.DEFAULT_BLOCK_SIZE), and 16 under generic. */
int64_t engine_kv_block(const Spec *s);

/* SGLang asserts "chunked_prefill_size must be divisible by page_size"
 * (server_args.py, check_server_args, 0.4.7 to 0.5.6) after dividing the
 * size by dp under attention dp (_handle_data_parallelism); from 0.5.4 a
 * decode-mode server skips it. The per-rank share a pool of role and dp
 * would run when the page does not divide it (E0717), else 0. */
int64_t engine_sglang_chunk_share(const Spec *s, PoolRole role, int64_t dp);

/* E0715, W0704 and E0717: the stated block or KV dtype against the
 * backend, and SGLang's chunk against its page. */
void engine_attn_check(Diags *d, const Spec *s);

/* The engine's --kv-cache-dtype word for rankplan's dtype kv_dtype under
 * the plan's pinned attention backend (NULL: none): trtllm_mla takes the
 * model's dtype only as `auto`; otherwise the entry's word. NULL when the
 * entry has none. */
const char *engine_kv_word(const EngineCaps *c, const char *kv_dtype, const char *activations_dtype,
                           const char *attention_backend);

/* Whether the spec chooses FlashInfer's sampler (serving.sampler:
 * flashinfer), which the memory ledger counts at its own bytes. */
bool engine_sampler_flashinfer(const Spec *s);

/* Whether the engine applies serving.max_num_seqs and
 * max_num_batched_tokens to each attention dp rank of an instance: vLLM
 * (each engine core schedules its own), TensorRT-LLM (each attention dp
 * rank) and SGLang's dense dp (--dp-size replicas, each with the whole
 * value). Under SGLang's attention dp (a MoE model) the values are the
 * instance's and SGLang gives each rank its share (--max-running-requests
 * and --chunked-prefill-size over --dp-size); under generic they are the
 * instance's (docs/spec.md). */
bool engine_limits_per_dp(const Spec *s);

/* Reads the entry of engine e covering version (NULL: the entry with the
 * newest `version`) from catalog_dir/engines/. Returns NULL with *err
 * (malloc'd) naming the problem: no entry covers the version (*no_entry
 * true), or a file is unreadable or invalid. */
EngineCaps *engine_caps_load(const char *catalog_dir, Engine e, const char *version,
                             char **err, bool *no_entry);
void engine_caps_free(EngineCaps *c);
/* One entry's text, shown in messages as `shown` (docs/engines.md, "The
 * catalog format"): the entry, or NULL with *err (malloc'd) naming the
 * place of the first problem. */
EngineCaps *engine_caps_parse(const char *shown, const char *text, size_t len, Engine e, char **err);

/* The value of key in a table of n pairs, or NULL. */
const char *engine_kv(const EngineKV *t, size_t n, const char *key);
/* The engine's flag for a rankplan term ("port", "tp", ...), or NULL. */
const char *engine_flag(const EngineCaps *c, const char *term);
/* The `section.field` of the engine's arguments YAML that sets a rankplan
 * term, or NULL. */
const char *engine_yaml_key(const EngineCaps *c, const char *term);
/* Whether the entry can set a term at all: a flag or a YAML key. */
bool engine_takes(const EngineCaps *c, const char *term);

/* Compares dotted version strings numerically, segment by segment. */
int engine_version_cmp(const char *a, const char *b);

/* The search's engine filter, the same rules as engine_check's pools:
 * why engine entry c cannot run a pool of role with sizes v (EngineDim
 * order), with the dimension it names in *dim, or NULL when it can. */
const char *engine_layout_refusal(const EngineCaps *c, PoolRole role, const int64_t v[ED__COUNT], bool moe,
                                  EngineDim *dim);
/* deployment.engine's catalog entry (engine_caps_free it), or NULL for
 * the generic engine or an entry that does not load, which engine_check
 * reports (E0701/E0702). */
EngineCaps *engine_caps_of(const Spec *s);
/* Whether c runs MoE pool p with its experts split ep x etp over the same
 * ranks (its other sizes as written); true when c is NULL. */
bool engine_runs_expert_split(const EngineCaps *c, const PoolSpec *p, int64_t ep, int64_t etp);
/* Whether c's `pd:` rules establish that the engine moves KV from a
 * prefill pool of tp/pp to a decode pool of tp/pp: the pairs `search`
 * forms. An unverified pair is not established (`check` accepts one a
 * spec writes, with W0701). */
bool engine_pd_established(const EngineCaps *c, int64_t pre_tp, int64_t dec_tp, int64_t pre_pp, int64_t dec_pp);

/* `check`/`compile`: refuses pools the engine of s cannot run (E0703,
 * E0704), KV dtypes and transfer backends it lacks (E0705, E0706), a
 * missing catalog entry (E0701, E0702) and host names that do not match
 * the nodes (E0707); warns where the entry does not establish what a
 * prefill/decode pair needs (W0701). Nothing for the generic engine but the host names. */
void engine_check(Diags *d, const Spec *s);

#endif
