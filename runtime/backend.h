/*
 * backend.h: the communication backend interface, a versioned struct of
 * function pointers (after NCCL's net_v8.h). A worker process picks one
 * backend by name, initialises it once, creates one communicator per plan
 * group it belongs to, runs collectives on them, and finalises.
 *
 * Common contract for every member:
 *  - Results are RtResult values; a failure records its message with
 *    rt_err() and leaves the backend usable only for finalize/abort.
 *  - Every blocking call honours ctx->timeout (seconds) and returns
 *    RT_ERR_TIMEOUT instead of hanging; a dead peer gives RT_ERR_CLOSED or
 *    RT_ERR_TIMEOUT, never a hang.
 *  - Buffers passed to communication calls come from mem_alloc (host memory
 *    on the host backend, device memory on nccl).
 *  - Collective calls are made by every member of the group in the same
 *    order. Members create their communicators in the plan's group order,
 *    which makes interleaved collectives on overlapping groups deadlock-free
 *    (the lowest pending group can always progress).
 */
#ifndef RANKRUN_BACKEND_H
#define RANKRUN_BACKEND_H

#include "rp_config.h"

#include "rt.h"
#include "rtplan.h"
#include "store.h"

#define RT_BACKEND_VERSION 5

typedef enum { RT_I64 = 0, RT_F32 = 1 } RtDtype;
typedef enum { RT_SUM = 0, RT_MAX = 1 } RtRedOp;

/* What a backend is initialised with. */
typedef struct {
  const Plan *plan;
  int rank;          /* global rank */
  int local_rank;    /* rank index on this node */
  int device;        /* plan device id; with nccl, CUDA_VISIBLE_DEVICES is
                        set to it, so the process sees it as device 0 */
  RtStore *store;    /* connected rendezvous store */
  const char *bind_host; /* local address other ranks can reach */
  double timeout;    /* join and operation deadline, seconds */
  const char *job;   /* deployment id (hex), the same on every rank of one
                        run: names shared-memory segments */
  const char *keyspace; /* prefix of the backend's store keys: "" for
                           rankrun's ranks, "u/" for a command's processes
                           (librankrun), so that they never read the
                           preflight's addresses and ids */
  long owner_pid;    /* the launcher whose child this process is (names
                        its shared-memory rings); 0: the parent process */
} RtBackendCtx;

typedef struct RtComm RtComm; /* one per (backend, group); backend-defined */

/* One point-to-point operation of a group (p2p_post). */
typedef struct {
  bool send;    /* send buf, else receive into buf */
  int peer;     /* member index in the communicator */
  void *buf;    /* backend memory (mem_alloc) */
  size_t bytes;
  int64_t tag;  /* the caller's name for the matched pair: the sender's and
                   the receiver's operation carry the same tag; a backend
                   may check that they agree (host does), nccl ignores it */
} RtP2p;

/* Most operations one p2p_post takes (older NCCL refuses more than 2048
 * operations in one group). */
#define RT_P2P_MAX 1024

/* Default bytes of the --probe memory copy: above the last-level cache of
 * the device, so that the copy measures memory, not cache (an H100's L2 is
 * 50 MB, NVIDIA H100 Tensor Core GPU Architecture whitepaper; the H200
 * uses the same GH100 die; the host figure is above the 32 MiB L3 of the
 * build machine, `lscpu`). */
#define RT_PROBE_COPY_DEVICE (INT64_C(256) << 20)
#define RT_PROBE_COPY_HOST (INT64_C(64) << 20)
typedef struct {
  int version;      /* RT_BACKEND_VERSION */
  const char *name; /* "host", "nccl" */

  /* Prepares the process: publishes how peers reach this rank through the
   * store and anything the backend needs once per process. Called once,
   * before any group_create. *state is the backend's private state. */
  RtResult (*init)(const RtBackendCtx *ctx, void **state);

  /* Releases everything init and group_create made. Safe to call after a
   * failure; never blocks longer than the context's timeout. */
  RtResult (*finalize)(void *state);

  /* Creates the communicator of plan group `group` (index in plan->groups)
   * on this rank, which must be a member. Collective over the group's
   * members; every member calls it for its groups in increasing index
   * order. Must finish or fail within the timeout. */
  RtResult (*group_create)(void *state, int group, RtComm **comm);

  /* Frees a communicator before finalize. abort = true after a failure:
   * the communicator may be mid-operation and must be torn down without
   * waiting for peers (ncclCommAbort on nccl). */
  RtResult (*comm_destroy)(RtComm *comm, bool abort);

  /* Size of the communicator and this rank's index in it (the order of
   * the plan group's `ranks`). */
  int (*comm_size)(const RtComm *comm);
  int (*comm_index)(const RtComm *comm);

  /* Point to point: sends or receives `bytes` bytes to/from the member
   * with index `peer`. A send may complete before the matching recv is
   * posted only for small messages; callers pair sends and recvs so that
   * neither side waits for the other to send first. */
  RtResult (*send)(RtComm *comm, const void *buf, size_t bytes, int peer);
  RtResult (*recv)(RtComm *comm, void *buf, size_t bytes, int peer);

  /* recv[i] = op over members of send[i], for count elements of dtype.
   * send and recv may be the same buffer. */
  RtResult (*all_reduce)(RtComm *comm, const void *send, void *recv,
                         size_t count, RtDtype dtype, RtRedOp op);

  /* recv = concatenation of every member's `bytes` bytes, by index. */
  RtResult (*all_gather)(RtComm *comm, const void *send, void *recv,
                         size_t bytes);

  /* Member i's block j (of `bytes` bytes) lands at member j's block i. */
  RtResult (*all_to_all)(RtComm *comm, const void *send, void *recv,
                         size_t bytes);

  /* Returns once every member has entered the barrier. */
  RtResult (*barrier)(RtComm *comm);

  /* Memory for communication buffers, and copies between it and host
   * memory. mem_alloc returns NULL when the memory is not there. */
  void *(*mem_alloc)(void *state, size_t bytes);
  void (*mem_free)(void *state, void *p);
  RtResult (*to_host)(void *state, void *host, const void *mem, size_t bytes);
  RtResult (*from_host)(void *state, void *mem, const void *host,
                        size_t bytes);

  /* Optional members (NULL when the backend has none); version 2. */

  /* Posts n (1..RT_P2P_MAX) sends and receives as one group (on nccl one
   * ncclGroupStart/ncclGroupEnd) and returns once they are enqueued, not
   * complete. Sends and receives with one peer match the peer's in order.
   * At most one group is in flight per communicator; p2p_wait ends it. */
  RtResult (*p2p_post)(RtComm *comm, const RtP2p *ops, int n);
  /* Waits for the posted group; *secs is the group's time from its post
   * to its completion (on nccl: CUDA events around it on the stream). */
  RtResult (*p2p_wait)(RtComm *comm, double *secs);
  /* The benchmark's reference: copies bytes from src to dst, both backend
   * memory (device to device on nccl), and gives the copy's time. */
  RtResult (*copy_ref)(void *state, void *dst, const void *src, size_t bytes,
                       double *secs);

  /* Optional (NULL when the backend has none); version 3. The free and
   * total bytes of the memory mem_alloc draws from (the device on nccl:
   * cudaMemGetInfo), so that a rank whose ledger does not fit fails before
   * it allocates, naming the planned and the free bytes. */
  RtResult (*mem_info)(void *state, int64_t *free_bytes, int64_t *total_bytes);

  /* Capabilities; version 4. What differs between backends is said here,
   * never by comparing names, so that a new backend states its own. */

  /* mem_alloc returns host memory of the calling process. Then the KV pool
   * is written in place (its pages are touched at allocation so that the
   * memory really exists, and a request's region is the pool itself, with
   * no staging buffer), --host-memory-scale scales what a rank allocates,
   * and the launcher checks a node's ledger against MemAvailable before
   * it starts ranks. false: device memory, allocated as planned. */
  bool host_memory;
  /* The environment variable that makes the rank's planned device the
   * only one the rank sees (its value is the device number), or NULL when
   * the backend uses none. "CUDA_VISIBLE_DEVICES" on nccl. */
  const char *visible_devices_env;
  /* Bytes of the --probe memory copy when --probe-copy-bytes is not given
   * (RT_PROBE_COPY_DEVICE or RT_PROBE_COPY_HOST). */
  int64_t probe_copy_bytes;
  /* What copy_ref measures, as the report names the KV benchmark's
   * reference ("memcpy", "device-to-device copy"). */
  const char *copy_ref_kind;
  /* The KV executor takes the grouped path (p2p_post, straight from and
   * into the pool) by default; false: one message at a time through a host
   * buffer unless RANKRUN_KV_GROUPED=1. */
  bool kv_grouped;
  /* Shared-memory segments the backend makes on plan node `node` (0 when
   * it makes none there, e.g. turned off by RANKRUN_HOST_SHM=0), and the
   * bytes of /dev/shm each takes (*seg_bytes, set whatever the count), so
   * that a node whose segments cannot fit fails before any rank starts.
   * NULL when the backend uses no shared memory. */
  int64_t (*shm_segments)(const Plan *pl, int node, int64_t *seg_bytes);

  /* Optional (NULL when the backend has none); version 5. The backend's
   * own handle of a communicator, for a worker that calls the library
   * underneath itself (librankrun's rankrun_comm_native): the
   * ncclComm_t on nccl. */
  void *(*comm_native)(RtComm *comm);
} RtBackend;

/* The registry: every backend compiled into this binary. */
const RtBackend *rt_backend_find(const char *name);
/* Comma-separated names, for help text. */
const char *rt_backend_names(void);
/* A note on why backend `name` is not in this build (a line for the
 * user), or NULL when the name is no backend this project knows. */
const char *rt_backend_absent_note(const char *name);

extern const RtBackend rt_backend_host;

/* Bytes of one shared-memory ring of the host backend (one per direction
 * of a same-node pair that shares a group). The KV benchmark's memcpy
 * reference writes through a buffer of this size too, so that both see
 * the same caches. */
#define RT_HOST_RING_BYTES (8u << 20)

/* Whether the host backend makes rings (RANKRUN_HOST_SHM is not 0). */
bool rt_host_shm_on(void);
/* Bytes of /dev/shm one ring takes (RT_HOST_RING_BYTES and its header). */
int64_t rt_host_ring_bytes(void);
/* Rings the host backend makes on plan node `node`: one per direction of
 * each pair of its ranks that shares a group (every ordered pair of the
 * node's ranks when it has over 4,096). */
int64_t rt_host_node_rings(const Plan *pl, int node);

/* Shared-memory rings are named /rankrun-JOB-PID-START-FROM-TO: the
 * deployment id, the process id of the launcher whose ranks use them and
 * that launcher's start time (clock ticks since boot, field 22 of
 * /proc/PID/stat), and the ordered pair of ranks. A ring's owner can thus
 * be recovered from its name alone (docs/runtime.md, "Stale rings"). */
typedef struct {
  long pid;
  unsigned long long start;
} RtShmOwner;

/* pid's start time; false when no process has that id. */
bool rt_proc_start(long pid, unsigned long long *start);
/* The owner record of process pid; false when it is gone. */
bool rt_shm_owner_of(long pid, RtShmOwner *out);
void rt_ring_name(char *buf, size_t n, const char *job, const RtShmOwner *own,
                  int from, int to);
/* Unlinks the rings in /dev/shm whose owner is `own` (own non-NULL: a
 * launcher's own rings, at its end), or whose owner is gone (own NULL:
 * no process has the PID, or the process with that PID started at another
 * time, i.e. the PID was reused). Names of another form are left alone.
 * Returns how many were removed; *bytes (if given) gets their size. */
int rt_shm_remove_rings(const RtShmOwner *own, int64_t *bytes);
#if RP_HAVE_NCCL || defined(RP_FAKE_GPU)
extern const RtBackend rt_backend_nccl;
#endif

/* Result of one group's preflight. */
typedef struct {
  int group;        /* index in plan->groups */
  bool ok;          /* the all-reduce of rank ids gave the expected sum */
  int64_t bytes;    /* all-reduce payload per iteration */
  int iters;
  double seconds;   /* time for all iterations */
  double algbw_gbs; /* bytes * iters / seconds / 1e9 */
  double busbw_gbs; /* algbw * 2 (n-1)/n, the usual all-reduce bus figure */
  double latency_s; /* one 8-byte all-reduce, mean of RT_LAT_ITERS */
} RtPreflight;

#define RT_LAT_ITERS 20

/* Runs the preflight on every communicator of this rank, in group order:
 * an all-reduce of rank ids checked against the expected sum, then a timed
 * all-reduce of `bytes` bytes. out[i] matches comms[i]. */
RtResult rt_preflight(const RtBackend *be, void *state, const Plan *plan,
                      int rank, RtComm **comms, const int *groups, int n,
                      int64_t bytes, RtPreflight *out);

#endif
