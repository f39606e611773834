/*
 * emit_launch.h: what the launch targets share (private to emit_*.c).
 *
 * A Launch holds the plan, its engine entry, and the plan's instances as
 * the engine sees them: each instance's ranks sorted in the engine's own
 * rank order and cut into runs of consecutive ranks, one run per node (the
 * engines number their workers node by node); the devices of a run, in
 * that order, are its CUDA_VISIBLE_DEVICES. Ports come from per-node
 * blocks (docs/engines.md, "Ports"). The emitters append files to the
 * Launch; launch_emit writes them all at once.
 */
#ifndef RANKPLAN_EMIT_LAUNCH_H
#define RANKPLAN_EMIT_LAUNCH_H

#include "launch.h"

typedef struct {
  int32_t node;
  int32_t n;          /* ranks of the instance on this node */
  int32_t *dev;       /* their devices, in engine rank order */
  int64_t first;      /* engine rank of the run's first rank */
  int64_t port0;      /* the instance's port block on this node */
} InstRun;

typedef struct {
  size_t pool;
  int32_t instance;
  const PlanPool *P;
  int64_t tp, pp, dp, cp, ep, etp, dcp;
  size_t nruns;
  InstRun *runs;      /* runs[0]: the head node */
  int64_t http, aux_a, aux_b, side; /* ports on the head node */
} Inst;

typedef struct {
  size_t inst, run;   /* l->inst[inst].runs[run] */
} LNodeRun;

typedef struct {
  char *name;
  StrBuf text;
  bool exec;          /* a script: mode 0755 */
  int32_t node;       /* the node it runs on, -1: none */
} LFile;

typedef struct Launch {
  const Plan *p;
  const PlanLaunch *L;
  const EngineCaps *c;
  LaunchTarget target;
  size_t ninst;
  Inst *inst;
  int64_t *next_port;  /* per node: the first port not yet given out */
  bool *host_used;     /* per node: the current script names its host */
  RP_VEC(int32_t) hosts_named; /* those nodes, in the order first named */
  size_t *node_first;  /* per node, and one past: where its runs start in node_runs */
  RP_VEC(LNodeRun) node_runs;  /* every instance run, grouped by node, in instance order */
  RP_VEC(LFile) files;
  char *err;           /* the first problem, or NULL */
  int32_t router_node;
  int64_t router_port; /* 0: no router */
  /* The k8s target: one pod per node of an instance, its GPUs its own (no
   * CUDA_VISIBLE_DEVICES); the instance's head is LWS_LEADER_ADDRESS, a
   * pod's own address POD_IP, a worker's index LWS_WORKER_INDEX. */
  bool k8s;
  int32_t k8s_head;
  /* The dynamo target: one command per pool, the head node's, which the
   * Dynamo operator runs in every pod of an instance (emit_dynamo.c): no
   * CUDA_VISIBLE_DEVICES, no server or multi-node flags. */
  bool dynamo;
} Launch;

/* The first problem wins; later calls are ignored. Returns false. */
bool lerr(Launch *l, const char *fmt, ...) RP_PRINTF(2, 3);

/* A new file (name must be unique and plain); returns its text. */
StrBuf *lfile(Launch *l, const char *name, bool exec, int32_t node);

/* Appends s as one shell word: as is when it holds only safe characters,
 * else in single quotes. */
void lq(StrBuf *sb, const char *s);
/* The shell variable naming node n's host, quoted ("${host_3}" with its
 * double quotes); marks it used. */
const char *lhost(Launch *l, int32_t node, char buf[32]);
/* Node n's host name as the plan gives it (hostnames, pattern or
 * "node-N"); caller frees. */
char *lhost_name(const Launch *l, int32_t node);

/* " FLAG VALUE" (value may be NULL for a switch) for rankplan term
 * `term` in the engine's spelling, as a continued line; an entry without
 * that term is an error (lerr). */
void lflag(Launch *l, StrBuf *sb, const char *term, const char *value);
void lflag_i(Launch *l, StrBuf *sb, const char *term, int64_t v);
/* The same with a value that is already one shell word (a host variable). */
void lflag_raw(Launch *l, StrBuf *sb, const char *term, const char *shell_word);
/* The flag of dimension d (tp, pp, ...) with v. */
void ldim(Launch *l, StrBuf *sb, EngineDim d, int64_t v);
/* The expert slots of an instance's ep rank beyond one per routed expert
 * (model.moe.redundant_experts, or an expert_placement hook's replicas),
 * from the pool's expert_map; 0 without one. */
int64_t lredundant_experts(const Inst *in);
/* The engine's redundant-experts flag when the instance has such slots;
 * an error when the catalog entry names none. */
void lredundant_flag(Launch *l, StrBuf *sb, const Inst *in);
/* Flags every engine takes from the plan's launch key: served model name,
 * revision, max model length, max sequences, chunked-prefill tokens. */
void lserving(Launch *l, StrBuf *sb);
/* The engine's KV dtype word for the plan's kv_cache dtype. */
const char *lkv_dtype(Launch *l);

/* Memory fractions of pool `pool` from its ledger, floored to 4 decimals
 * (docs/engines.md, "Memory fractions"); lerr when one is not in (0, 1]. */
double lfrac_pool(Launch *l, size_t pool); /* the pool's SGLang or TensorRT-LLM memory fraction flag */
/* The engine's memory-fraction flag with f: exactly as the double reads
 * back (exact), or with 4 decimals. */
void lflag_frac(Launch *l, StrBuf *sb, double f, bool exact);

/* "prefill-0": pool name and instance, for comments and file names. */
void linst_name(StrBuf *sb, const Launch *l, const Inst *in);
/* The opening comment of a command: pool, instance, sizes, ranks. */
void linst_comment(StrBuf *sb, const Launch *l, const Inst *in, size_t run);
/* Appends each line of text with indent spaces before it and a newline
 * after (the body of a YAML block scalar). */
void lindent(StrBuf *y, const char *text, int indent);
/* CUDA_VISIBLE_DEVICES=... of run r. */
void ldevices(Launch *l, StrBuf *sb, const InstRun *r);

/* A script's head: shebang, strict mode, and host variables for every
 * node its body names (host_used); body is then appended. */
void lscript(Launch *l, StrBuf *out, const char *what, const StrBuf *body);

/* Writes node-N.sh for every node: for each instance with ranks there,
 * its comment, then fn's command (true) with its log redirection and `&`,
 * or only what fn wrote (false: nothing runs there for it);
 * launch_shared_fate ends the script. */
typedef bool (*LRunFn)(Launch *l, const Inst *in, size_t run, StrBuf *sb);
void lnodes(Launch *l, LRunFn fn);
/* The tail of a script that started children with `&`: the first to exit
 * ends the script with its status and the others are stopped. */
extern const char launch_shared_fate[];

/* For targets with one object per pool: whether l->inst[i] is its pool's
 * first instance; a later one whose node count or GPUs per node differ
 * from the first's is an error (lerr) naming the pool, then `why`. */
bool lpool_first(Launch *l, size_t i, const char *why);

/* The instances of the plan with their runs and ports (false: lerr). */
bool launch_instances(Launch *l);
/* Appends manifest.json listing every file so far (sorts the files). */
void launch_manifest(Launch *l);
/* Writes the files into dir at once (emit_dir.c); an exit code. */
int launch_write_dir(Launch *l, const char *dir, FILE *err);

/* Disaggregated plans: puts the router on the first prefill instance's
 * head node, on the first port after every block there; false for a plan
 * without a prefill pool (no router). */
bool lrouter_place(Launch *l);

/* The head of instance in as the router reaches it: its node's host
 * variable in scripts (lhost), and in the k8s target the leader pod's DNS
 * name under the headless Service the LeaderWorkerSet controller makes for
 * the pool. buf holds at least LHOST_MAX bytes. */
enum { LHOST_MAX = 160 };
const char *linst_host(Launch *l, const Inst *in, char *buf);
/* The same as plain text, for files that are not shell (caller frees). */
char *linst_host_name(const Launch *l, const Inst *in);
/* The instance whose ports in's processes listen on: in itself, or in the
 * k8s target its pool's instance 0, whose command every group of the
 * LeaderWorkerSet runs. */
const Inst *linst_ports(const Launch *l, const Inst *in);
/* Appends the line that sets $here to the script's directory when cmd
 * reads files as "$here/NAME". */
void lhere(StrBuf *body, const StrBuf *cmd);

/* The router's command over every prefill and decode instance (each named
 * by linst_host), on l->router_port (emit_vllm.c, emit_sglang.c,
 * emit_trtllm.c); TensorRT-LLM's also adds disagg.yaml, read as
 * "$here/disagg.yaml". The node targets wrap it in router.sh
 * (lrouter_script), the k8s target in a Deployment. */
typedef void (*LRouterFn)(Launch *l, StrBuf *cmd);
void lrouter_vllm(Launch *l, StrBuf *cmd);
void lrouter_sglang(Launch *l, StrBuf *cmd);
void lrouter_trtllm(Launch *l, StrBuf *cmd);
/* router.sh on the router's node: fn's command as a script. */
void lrouter_script(Launch *l, LRouterFn fn, const char *what);

/* One instance's command on run j, as node-N.sh holds it (emit_vllm.c,
 * emit_sglang.c, emit_trtllm.c); false: nothing starts there. */
bool lrun_vllm(Launch *l, const Inst *in, size_t j, StrBuf *sb);
/* The NAME=value environment setting of the plan's launch.sampler from
 * the vLLM entry; NULL when the plan names none (launch_emit_with_plan
 * has refused a plan whose sampler the entry lacks). */
const char *lvllm_sampler_env(const Launch *l);
bool lrun_sglang(Launch *l, const Inst *in, size_t j, StrBuf *sb);
bool lrun_trtllm(Launch *l, const Inst *in, size_t j, StrBuf *sb);
/* k8s.yaml: a LeaderWorkerSet and a Service per pool, and the router's
 * Deployment and Service for a disaggregated plan (emit_k8s.c). */
void emit_k8s(Launch *l);
/* Whether s may name a Kubernetes object after a pool: lowercase letters,
 * digits and `-`, at most 40 (emit_k8s.c). */
bool ldns_label(const char *s);
/* dynamo.yaml: a DynamoGraphDeployment (emit_dynamo.c). */
void emit_dynamo(Launch *l);
/* The dynamo target's own worker flags of an instance: vLLM prefill and
 * decode pools its connector (in place of --kv-transfer-config);
 * TensorRT-LLM its KV block size and disaggregation mode. */
void ldynamo_flags(Launch *l, const Inst *in, StrBuf *sb);
/* Where a Dynamo TensorRT-LLM worker finds its engine YAML (a ConfigMap). */
#define LDYNAMO_CONFIG_DIR "/etc/rankplan"

/* Engine targets: node-N.sh for every node, router.sh for disaggregated
 * plans, engine config files. */
void emit_vllm(Launch *l);
void emit_sglang(Launch *l);
void emit_trtllm(Launch *l);
/* Job targets on top of the engine's files. */
void emit_shell(Launch *l);
void emit_slurm(Launch *l);

#endif
