/*
 * rankrun.h: librankrun, the worker API of a process started by
 * `rankrun PLAN --node N --per rank -- CMD ARGS...` (docs/runtime.md,
 * "Worker API"). The only public header of the library; its Python
 * binding is python/rankrun.py (ctypes).
 *
 * A worker reads its identity and groups from the plan rankrun ran, uses
 * the deployment's rendezvous store, gets one communicator per kind of
 * group it belongs to (NCCL on the nccl backend, the host backend's TCP
 * and shared-memory links otherwise), and sends and receives a request's
 * KV as the plan's kv_reshard says, from and into buffers it owns.
 *
 * Every call that can fail returns a RANKRUN_* code (0: success) and
 * keeps a one-line message for rankrun_errmsg() (per thread). Calls on
 * communicators are collective over the group's members as
 * runtime/backend.h says; every blocking call ends by the deployment's
 * timeout (RANKPLAN_TIMEOUT) instead of hanging.
 */
#ifndef RANKRUN_H
#define RANKRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RANKRUN_API_VERSION 1

/* Result codes (the runtime's RtResult values). */
enum {
  RANKRUN_OK = 0,
  RANKRUN_ERR_SYS = 1,         /* a system call failed */
  RANKRUN_ERR_TIMEOUT = 2,     /* a deadline passed */
  RANKRUN_ERR_PROTO = 3,       /* malformed bytes from the network */
  RANKRUN_ERR_CLOSED = 4,      /* a peer closed its connection or died */
  RANKRUN_ERR_EXISTS = 5,      /* a create-once key exists */
  RANKRUN_ERR_NOTFOUND = 6,    /* a key is not in the store */
  RANKRUN_ERR_INVALID = 7,     /* a bad argument, environment or plan */
  RANKRUN_ERR_INUSE = 8,       /* an address is in use */
  RANKRUN_ERR_UNSUPPORTED = 9, /* the backend cannot do this */
  RANKRUN_ERR_CHECK = 10       /* a wrong result */
};

enum { RANKRUN_INT64 = 0, RANKRUN_FLOAT32 = 1 }; /* all_reduce types */
enum { RANKRUN_SUM = 0, RANKRUN_MAX = 1 };       /* all_reduce ops */
enum { RANKRUN_KV_NONE = 0, RANKRUN_KV_SEND = 1, RANKRUN_KV_RECV = 2 };

typedef struct rankrun rankrun;           /* one per process */
typedef struct rankrun_comm rankrun_comm; /* owned by its rankrun */

/* API version of the library (RANKRUN_API_VERSION it was built with). */
int rankrun_api_version(void);
/* The message of this thread's last failure ("" when none). */
const char *rankrun_errmsg(void);

/* Joins the deployment from the environment rankrun gives a --per rank
 * process (RANKPLAN_PLAN, RANKPLAN_RANK, RANKPLAN_STORE, RANKPLAN_BACKEND,
 * RANKPLAN_JOB, RANKPLAN_TIMEOUT, RANKPLAN_LAUNCHER_PID): loads the plan,
 * claims the rank (a second process with the same rank gets
 * RANKRUN_ERR_EXISTS), starts the backend and creates a communicator for
 * every group the rank belongs to, in the plan's order (collective: every
 * rank of the command calls it). */
int rankrun_init(rankrun **out);
/* Frees everything; NULL is allowed. */
void rankrun_finalize(rankrun *rr);

/* Identity. */
int rankrun_rank(const rankrun *rr);       /* global rank in the plan */
int rankrun_world_size(const rankrun *rr); /* ranks of the plan */
int rankrun_node(const rankrun *rr);
int rankrun_device(const rankrun *rr);     /* the plan's device number */
const char *rankrun_pool(const rankrun *rr);
const char *rankrun_role(const rankrun *rr); /* prefill, decode, both */
int rankrun_instance(const rankrun *rr);
/* Coordinate "tp", "cp", "dp", "pp", "ep", "etp", "edp" or "dcp"; -1 for
 * another name. */
int rankrun_coord(const rankrun *rr, const char *name);
const char *rankrun_backend(const rankrun *rr); /* "host", "nccl" */

/* Groups this rank belongs to, i in [0, rankrun_ngroups), plan order. */
int rankrun_ngroups(const rankrun *rr);
const char *rankrun_group_kind(const rankrun *rr, int i); /* "tp", "world" */
int rankrun_group_id(const rankrun *rr, int i);   /* the plan's id */
int rankrun_group_size(const rankrun *rr, int i);
/* Global rank of member m of group i (the plan's member order); -1 when
 * out of range. */
int rankrun_group_member(const rankrun *rr, int i, int m);
/* The communicator of group i, or of this rank's group of a kind (NULL
 * when the rank has none of that kind). */
rankrun_comm *rankrun_comm_at(rankrun *rr, int i);
rankrun_comm *rankrun_comm_of_kind(rankrun *rr, const char *kind);
int rankrun_comm_size(const rankrun_comm *c);
int rankrun_comm_index(const rankrun_comm *c); /* this rank's member index */
/* The backend's handle: the ncclComm_t on nccl; NULL on host. */
void *rankrun_comm_native(rankrun_comm *c);

/* Collectives and point to point on a communicator. Buffers are backend
 * memory: host memory on host, device memory on nccl (rankrun_mem_alloc,
 * or memory the worker allocated on the device itself). */
int rankrun_all_reduce(rankrun_comm *c, const void *send, void *recv,
                       size_t count, int dtype, int op);
int rankrun_all_gather(rankrun_comm *c, const void *send, void *recv,
                       size_t bytes);
int rankrun_barrier(rankrun_comm *c);
int rankrun_send(rankrun_comm *c, const void *buf, size_t bytes, int peer);
int rankrun_recv(rankrun_comm *c, void *buf, size_t bytes, int peer);

/* Backend memory, and copies between it and host memory. */
void *rankrun_mem_alloc(rankrun *rr, size_t bytes);
void rankrun_mem_free(rankrun *rr, void *p);
int rankrun_to_host(rankrun *rr, void *host, const void *mem, size_t bytes);
int rankrun_from_host(rankrun *rr, void *mem, const void *host, size_t bytes);

/* The rendezvous store, under the key prefix "user/" (rankrun's own keys
 * are out of reach). Values are at most 1 MiB. get copies at most cap
 * bytes into buf and gives the value's length in *n (a value longer than
 * cap: RANKRUN_ERR_INVALID, *n set); wait waits up to timeout_s seconds
 * for the key to appear. */
int rankrun_store_set(rankrun *rr, const char *key, const void *val, size_t n);
int rankrun_store_get(rankrun *rr, const char *key, void *buf, size_t cap,
                      size_t *n);
int rankrun_store_wait(rankrun *rr, const char *key, double timeout_s,
                       void *buf, size_t cap, size_t *n);
/* Adds delta to the counter at key (absent: 0); *out is the new value. */
int rankrun_store_add(rankrun *rr, const char *key, int64_t delta, int64_t *out);

/* KV of one request, moved by the plan's kv_reshard maps (docs/runtime.md
 * "KV pools and KV-reshard transfers": request k takes pair k mod pairs,
 * prefill and decode instance k mod replicas). This rank's region of a
 * request of `tokens` tokens is laid out per layer, kv head and token:
 *
 *   byte offset of (layer l, kv head h, token p) =
 *     (((l - layer_begin) * (head_end - head_begin) + (h - head_begin))
 *      * tokens + p) * cell_bytes
 *
 * over the rank's shard of layers [layer_begin, layer_end) and kv heads
 * [head_begin, head_end); cell_bytes is the model's KV bytes per layer,
 * kv head and token. */
typedef struct {
  int64_t layer_begin, layer_end, head_begin, head_end;
  int64_t tokens, cell_bytes;
  int64_t bytes; /* the whole region */
} rankrun_kv_layout;

/* RANKRUN_KV_SEND (this rank holds the request's prefill KV),
 * RANKRUN_KV_RECV (it receives it) or RANKRUN_KV_NONE. */
int rankrun_kv_role(rankrun *rr, int64_t request, int *role);
int rankrun_kv_layout_of(rankrun *rr, int64_t request, int64_t tokens,
                         rankrun_kv_layout *out);
/* Sends (a prefill rank) or receives (a decode rank) the request's KV:
 * every rank whose role is SEND or RECV for the request calls its side
 * with its region, `bytes` long (the layout's bytes), in backend memory.
 * A receiver's cells that no transfer brings keep their bytes. Requests
 * are moved in the same order on every rank (the plan's transfers are
 * ordered so that this cannot deadlock). */
int rankrun_kv_send(rankrun *rr, int64_t request, int64_t tokens,
                    const void *buf, size_t bytes);
int rankrun_kv_recv(rankrun *rr, int64_t request, int64_t tokens, void *buf,
                    size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
