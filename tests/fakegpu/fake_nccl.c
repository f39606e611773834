/*
 * fake_nccl.c: the stand-in NCCL (include/nccl.h) for tests of the nccl
 * backend on machines without a GPU: communicators between processes of
 * one machine, over POSIX shared memory.
 *
 * A communicator is one shared-memory segment, named from the
 * ncclUniqueId (random bytes from ncclGetUniqueId, passed between ranks
 * the way real ids are): a header (who arrived, a shared error) and, per
 * ordered pair of members, a bounded ring of RING bytes with the
 * descriptors of the operations posted on each side. Member 0 creates it;
 * the last member to arrive unlinks the name (every member has mapped it
 * by then), and abort and destroy unlink it too, so that a creator that
 * dies leaves nothing behind once a peer gives up.
 *
 * Semantics kept from NCCL:
 *  - Non-blocking communicators (ncclConfig_t.blocking = 0): init, every
 *    operation and finalize return ncclInProgress, and
 *    ncclCommGetAsyncError says ncclInProgress until init has seen every
 *    member, and once more after each launch.
 *  - Work is queued on the CUDA stream (fake_cuda.c) and posted when its
 *    turn comes; it completes when the peers have posted theirs. Progress
 *    is made only when the caller polls (ncclCommGetAsyncError,
 *    cudaStreamQuery), so a dead or late peer shows as in progress until
 *    the caller's deadline, and ncclCommAbort releases everything.
 *  - Sends and receives with one peer match in order (per direction),
 *    collectives match in call order; a send and its receive must have
 *    the same count and type, and matched operations the same kind: a
 *    mismatch is ncclInvalidUsage on both members, with the message from
 *    ncclGetLastError. A group's operations progress together; a send
 *    moves data only once its receive is posted and completes only once
 *    the receiver has taken every byte (rendezvous), and the next group on
 *    a stream is posted only when the one before it completed. A schedule
 *    whose groups are cut so that it would hang on NCCL hangs here too.
 *  - A send to self needs its receive in the same group (ncclGroupEnd
 *    refuses the group otherwise). Buffers must be device memory of the
 *    stand-in runtime (ncclInvalidArgument otherwise).
 * All-reduce adds the members' inputs in rank order on every member, so
 * that every member gets the same bits. Data types: ncclUint8, ncclInt64,
 * ncclFloat32; ops ncclSum, ncclMax. ncclCommFinalize waits for this
 * member's queued work only (no barrier with the peers).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"
#include "nccl.h"

#define MAXR 64
#define RING ((size_t)1 << 20)
#define NDESC 2048 /* > the operations one group posts to one peer */
#define MAGIC 0x46474e43u
#define HDR_BYTES 8192

enum { K_P2P = 1, K_ALLREDUCE = 2, K_ALLGATHER = 3 };

typedef struct {
  uint32_t kind; /* K_*, and the reduction op << 8 */
  uint32_t dtype;
  uint64_t bytes;
} Desc;

typedef struct {
  _Atomic uint64_t send_posted, recv_posted; /* operations posted per side */
  _Atomic uint64_t written, read;            /* bytes through the ring */
  Desc sdesc[NDESC], rdesc[NDESC];
  unsigned char ring[RING];
} Pair;

typedef struct {
  _Atomic uint32_t ready; /* MAGIC once member 0 set the header */
  uint32_t n;
  _Atomic uint32_t arrived;
  _Atomic uint32_t error; /* 0; 1 while a message is written; else ncclResult_t */
  _Atomic int32_t member[MAXR]; /* pid of the member that arrived */
  char errmsg[640];
} Header;

typedef struct Task Task;

struct ncclComm {
  char name[64];
  int n, rank;
  bool blocking;
  Header *h;
  size_t maplen;
  bool ready, arrived, launching, finalizing;
  ncclResult_t async;
  Task *tasks;
  uint64_t send_seq[MAXR], send_off[MAXR], recv_seq[MAXR], recv_off[MAXR];
  char lasterr[640];
};

typedef struct {
  int peer;
  bool send;
  Desc d;
  unsigned char *buf; /* host bytes behind the device buffer; NULL: combine */
  uint64_t seq, start, done;
  bool complete;
} Op;

struct Task {
  FakeTask ft; /* first: the stream sees this */
  struct ncclComm *comm;
  int kind;
  Op *ops;
  int nops, cap;
  bool posted;
  /* collectives */
  const unsigned char *in;
  unsigned char *out, *acc;
  size_t bytes;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int next_rank; /* all-reduce: the member whose input is added next */
  Task *next;    /* the communicator's list */
};

static char global_lasterr[640];

static size_t esize(ncclDataType_t t) {
  switch (t) {
  case ncclUint8: return 1;
  case ncclInt64: return 8;
  case ncclFloat32: return 4;
  }
  return 0;
}

static const char *dname(uint32_t t) {
  switch (t) {
  case ncclUint8: return "ncclUint8";
  case ncclInt64: return "ncclInt64";
  case ncclFloat32: return "ncclFloat32";
  }
  return "?";
}

static Pair *pair(const struct ncclComm *c, int src, int dst) {
  size_t i = (size_t)src * (size_t)c->n + (size_t)dst;
  return (Pair *)((char *)c->h + HDR_BYTES + i * sizeof(Pair));
}

static size_t seg_bytes(int n) { return HDR_BYTES + (size_t)n * (size_t)n * sizeof(Pair); }

/* Records an error on the communicator, and in the segment so that every
 * member sees it (the first message wins). */
static void fail(struct ncclComm *c, ncclResult_t e, bool shared, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(struct ncclComm *c, ncclResult_t e, bool shared, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->lasterr, sizeof c->lasterr, fmt, ap);
  va_end(ap);
  if (c->async == ncclSuccess) c->async = e;
  if (shared && c->h) {
    uint32_t zero = 0;
    if (atomic_compare_exchange_strong(&c->h->error, &zero, 1)) {
      snprintf(c->h->errmsg, sizeof c->h->errmsg, "%s", c->lasterr);
      atomic_store(&c->h->error, (uint32_t)e);
    }
  }
}

/* An error another member recorded in the segment. */
static void adopt_shared(struct ncclComm *c) {
  if (!c->h || c->async != ncclSuccess) return;
  uint32_t e = atomic_load(&c->h->error);
  if (e > 1) {
    snprintf(c->lasterr, sizeof c->lasterr, "%s", c->h->errmsg);
    c->async = (ncclResult_t)e;
  }
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->lasterr : global_lasterr; }

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  size_t got = 0;
  while (got < 16) {
    ssize_t r = getrandom(id->internal + got, 16 - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      snprintf(global_lasterr, sizeof global_lasterr, "getrandom: %s", strerror(errno));
      return ncclSystemError;
    }
    got += (size_t)r;
  }
  memcpy(id->internal + 16, "fakegpu", 8);
  return ncclSuccess;
}

/* ---- init ---------------------------------------------------------------- */

/* One step of init; true once this member has arrived and every member
 * has. Errors go to c->async. */
static void init_step(struct ncclComm *c) {
  if (c->ready || c->async != ncclSuccess) return;
  size_t len = seg_bytes(c->n);
  if (!c->h) {
    int fd;
    if (c->rank == 0) {
      fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd < 0) {
        fail(c, ncclSystemError, false, "shm_open(%s): %s", c->name, strerror(errno));
        return;
      }
      if (ftruncate(fd, (off_t)len) != 0) {
        fail(c, ncclSystemError, false, "ftruncate(%s, %zu): %s", c->name, len, strerror(errno));
        close(fd);
        shm_unlink(c->name);
        return;
      }
    } else {
      fd = shm_open(c->name, O_RDWR, 0600);
      if (fd < 0) return; /* member 0 has not created it yet */
      struct stat sb;
      if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < len) {
        close(fd);
        return; /* not sized yet */
      }
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      fail(c, ncclSystemError, false, "mmap of %zu bytes (%s): %s", len, c->name, strerror(errno));
      if (c->rank == 0) shm_unlink(c->name);
      return;
    }
    c->h = p;
    c->maplen = len;
    if (c->rank == 0) {
      c->h->n = (uint32_t)c->n;
      atomic_store(&c->h->ready, MAGIC);
    }
  }
  if (atomic_load(&c->h->ready) != MAGIC) return;
  if (!c->arrived) {
    if (c->h->n != (uint32_t)c->n) {
      fail(c, ncclInvalidUsage, true, "rank %d says the communicator has %d ranks, rank 0 says %u",
           c->rank, c->n, c->h->n);
      return;
    }
    int32_t none = 0;
    if (!atomic_compare_exchange_strong(&c->h->member[c->rank], &none, (int32_t)getpid())) {
      fail(c, ncclInvalidUsage, true, "rank %d joined the communicator twice (pids %d and %d)",
           c->rank, (int)none, (int)getpid());
      return;
    }
    c->arrived = true;
    /* The last to arrive unlinks the name: every member has it mapped. */
    if (atomic_fetch_add(&c->h->arrived, 1) + 1 == (uint32_t)c->n) shm_unlink(c->name);
  }
  adopt_shared(c);
  if (atomic_load(&c->h->arrived) == (uint32_t)c->n) c->ready = true;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  *comm = NULL;
  if (nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks) {
    snprintf(global_lasterr, sizeof global_lasterr,
             "rank %d of %d ranks: the stand-in takes 1 to %d ranks", rank, nranks, MAXR);
    return ncclInvalidArgument;
  }
  if (memcmp(id.internal + 16, "fakegpu", 8) != 0) {
    snprintf(global_lasterr, sizeof global_lasterr, "the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->n = nranks;
  c->rank = rank;
  c->blocking = !config || config->blocking != 0;
  int k = snprintf(c->name, sizeof c->name, "/fakegpu-nccl-");
  for (int i = 0; i < 16; i++)
    k += snprintf(c->name + k, sizeof c->name - (size_t)k, "%02x", (unsigned char)id.internal[i]);
  *comm = c;
  init_step(c);
  if (c->blocking) {
    while (!c->ready && c->async == ncclSuccess) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
      init_step(c);
    }
    return c->async;
  }
  return c->async != ncclSuccess ? c->async : ncclInProgress;
}

/* ---- moving data ----------------------------------------------------------- */

static void ring_put(Pair *p, uint64_t at, const unsigned char *src, size_t n) {
  size_t o = (size_t)(at % RING), first = RING - o < n ? RING - o : n;
  memcpy(p->ring + o, src, first);
  if (n > first) memcpy(p->ring, src + first, n - first);
}

static void ring_get(const Pair *p, uint64_t at, unsigned char *dst, size_t n) {
  size_t o = (size_t)(at % RING), first = RING - o < n ? RING - o : n;
  memcpy(dst, p->ring + o, first);
  if (n > first) memcpy(dst + first, p->ring, n - first);
}

static void combine(unsigned char *acc, const unsigned char *in, size_t n, ncclDataType_t t,
                    ncclRedOp_t op) {
  size_t es = esize(t);
  for (size_t i = 0; i + es <= n; i += es) {
    if (t == ncclInt64) {
      int64_t a, b;
      memcpy(&a, acc + i, 8);
      memcpy(&b, in + i, 8);
      a = op == ncclSum ? (int64_t)((uint64_t)a + (uint64_t)b) : (a > b ? a : b);
      memcpy(acc + i, &a, 8);
    } else if (t == ncclFloat32) {
      float a, b;
      memcpy(&a, acc + i, 4);
      memcpy(&b, in + i, 4);
      a = op == ncclSum ? a + b : (a > b ? a : b);
      memcpy(acc + i, &a, 4);
    } else {
      unsigned a = acc[i], b = in[i];
      acc[i] = (unsigned char)(op == ncclSum ? a + b : (a > b ? a : b));
    }
  }
}

static bool desc_eq(const Desc *a, const Desc *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->bytes == b->bytes;
}

static const char *kname(uint32_t kind) {
  switch (kind & 0xff) {
  case K_P2P: return "send/receive";
  case K_ALLREDUCE: return (kind >> 8) == ncclSum ? "all-reduce (sum)" : "all-reduce (max)";
  case K_ALLGATHER: return "all-gather";
  }
  return "?";
}

/* Checks the two sides of operation `seq` between src and dst. */
static bool matched(struct ncclComm *c, int src, int dst, uint64_t seq) {
  Pair *p = pair(c, src, dst);
  const Desc *s = &p->sdesc[seq % NDESC], *r = &p->rdesc[seq % NDESC];
  if (desc_eq(s, r)) return true;
  if ((s->kind & 0xff) == K_P2P && (r->kind & 0xff) == K_P2P)
    fail(c, ncclInvalidUsage, true,
         "send/receive mismatch: rank %d sends %llu bytes (%s) to rank %d, which receives "
         "%llu bytes (%s) (operation %llu between them)",
         src, (unsigned long long)s->bytes, dname(s->dtype), dst, (unsigned long long)r->bytes,
         dname(r->dtype), (unsigned long long)seq);
  else
    fail(c, ncclInvalidUsage, true,
         "operations out of step: rank %d runs %s of %llu bytes (%s) where rank %d runs %s of "
         "%llu bytes (%s) (operation %llu between them)",
         src, kname(s->kind), (unsigned long long)s->bytes, dname(s->dtype), dst, kname(r->kind),
         (unsigned long long)r->bytes, dname(r->dtype), (unsigned long long)seq);
  return false;
}

static void post(Task *t) {
  struct ncclComm *c = t->comm;
  for (int i = 0; i < t->nops; i++) {
    Op *o = &t->ops[i];
    if (o->send) {
      Pair *p = pair(c, c->rank, o->peer);
      o->seq = c->send_seq[o->peer]++;
      o->start = c->send_off[o->peer];
      c->send_off[o->peer] += o->d.bytes;
      p->sdesc[o->seq % NDESC] = o->d;
      atomic_store(&p->send_posted, o->seq + 1);
    } else {
      Pair *p = pair(c, o->peer, c->rank);
      o->seq = c->recv_seq[o->peer]++;
      o->start = c->recv_off[o->peer];
      c->recv_off[o->peer] += o->d.bytes;
      p->rdesc[o->seq % NDESC] = o->d;
      atomic_store(&p->recv_posted, o->seq + 1);
    }
  }
  if (t->kind == K_ALLGATHER && t->bytes)
    memmove(t->out + (size_t)c->rank * t->bytes, t->in, t->bytes);
  t->posted = true;
}

/* One step of one operation; true when it moved something or completed. */
static bool step(Task *t, Op *o) {
  struct ncclComm *c = t->comm;
  if (o->complete) return false;
  if (o->send) {
    Pair *p = pair(c, c->rank, o->peer);
    if (atomic_load(&p->recv_posted) <= o->seq) return false;
    if (!matched(c, c->rank, o->peer, o->seq)) return false;
    uint64_t w = atomic_load(&p->written), r = atomic_load(&p->read);
    bool moved = false;
    if (o->done < o->d.bytes && w == o->start + o->done) {
      size_t space = RING - (size_t)(w - r), n = (size_t)(o->d.bytes - o->done);
      if (n > space) n = space;
      if (n) {
        ring_put(p, w, o->buf + o->done, n);
        atomic_store(&p->written, w + n);
        o->done += n;
        moved = true;
      }
    }
    if (o->done == o->d.bytes && atomic_load(&p->read) >= o->start + o->d.bytes) {
      o->complete = true;
      return true;
    }
    return moved;
  }
  Pair *p = pair(c, o->peer, c->rank);
  if (atomic_load(&p->send_posted) <= o->seq) return false;
  if (!matched(c, o->peer, c->rank, o->seq)) return false;
  if (t->kind == K_ALLREDUCE && o->peer != t->next_rank) return false;
  uint64_t r = atomic_load(&p->read), w = atomic_load(&p->written);
  if (r != o->start + o->done) return false;
  size_t n = (size_t)(w - r), left = (size_t)(o->d.bytes - o->done);
  if (n > left) n = left;
  bool moved = false;
  if (o->buf) {
    if (n) {
      ring_get(p, r, o->buf + o->done, n);
      moved = true;
    }
  } else {
    /* All-reduce: add to the accumulator, whole elements at a time. */
    unsigned char tmp[65536];
    size_t es = esize(t->dtype);
    if (n > sizeof tmp) n = sizeof tmp;
    n -= n % es;
    if (n) {
      ring_get(p, r, tmp, n);
      if (o->peer == 0)
        memcpy(t->acc + o->done, tmp, n);
      else
        combine(t->acc + o->done, tmp, n, t->dtype, t->op);
      moved = true;
    }
  }
  if (moved) {
    atomic_store(&p->read, r + n);
    o->done += n;
  }
  if (o->done == o->d.bytes) {
    o->complete = true;
    if (t->kind == K_ALLREDUCE) t->next_rank++;
    return true;
  }
  return moved;
}

static bool task_poll(FakeTask *ft) {
  Task *t = (Task *)ft;
  struct ncclComm *c = t->comm;
  adopt_shared(c);
  if (c->async != ncclSuccess) return false; /* stuck until ncclCommAbort */
  if (!t->posted) post(t);
  for (;;) {
    bool moved = false;
    if (t->kind == K_ALLREDUCE && t->next_rank == c->rank) {
      if (c->rank == 0)
        memcpy(t->acc, t->in, t->bytes);
      else
        combine(t->acc, t->in, t->bytes, t->dtype, t->op);
      t->next_rank++;
      moved = true;
    }
    for (int i = 0; i < t->nops; i++) moved |= step(t, &t->ops[i]);
    if (c->async != ncclSuccess) return false;
    if (!moved) break;
  }
  for (int i = 0; i < t->nops; i++)
    if (!t->ops[i].complete) return false;
  if (t->kind == K_ALLREDUCE && t->next_rank < c->n) return false;
  if (t->kind == K_ALLREDUCE) memcpy(t->out, t->acc, t->bytes);
  return true;
}

static void task_free(Task *t) {
  free(t->ops);
  free(t->acc);
  free(t);
}

static void unlink_task(Task *t) {
  for (Task **pp = &t->comm->tasks; *pp; pp = &(*pp)->next)
    if (*pp == t) {
      *pp = t->next;
      return;
    }
}

static void task_done(FakeTask *ft) {
  Task *t = (Task *)ft;
  unlink_task(t);
  task_free(t);
}

static bool meets(const unsigned char *a, size_t an, const unsigned char *b, size_t bn) {
  return a && b && an && bn && a < b + bn && b < a + an;
}

static bool task_uses(const FakeTask *ft, const unsigned char *p, size_t n, bool write) {
  const Task *t = (const Task *)ft;
  if (t->kind != K_P2P) {
    size_t outb = t->kind == K_ALLGATHER ? t->bytes * (size_t)t->comm->n : t->bytes;
    return meets(t->out, outb, p, n) || (write && meets(t->in, t->bytes, p, n));
  }
  for (int i = 0; i < t->nops; i++)
    if ((write || !t->ops[i].send) && meets(t->ops[i].buf, (size_t)t->ops[i].d.bytes, p, n))
      return true;
  return false;
}

static Task *task_new(struct ncclComm *c, int kind) {
  Task *t = calloc(1, sizeof *t);
  if (!t) abort();
  t->ft.poll = task_poll;
  t->ft.on_done = task_done;
  t->ft.uses = task_uses;
  t->comm = c;
  t->kind = kind;
  return t;
}

static void add_op(Task *t, int peer, bool send, Desc d, unsigned char *buf) {
  if (t->nops == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 8;
    t->ops = realloc(t->ops, (size_t)t->cap * sizeof *t->ops);
    if (!t->ops) abort();
  }
  t->ops[t->nops++] = (Op){peer, send, d, buf, 0, 0, 0, false};
}

/* ---- calls ------------------------------------------------------------------- */

/* What a group collects until ncclGroupEnd. */
typedef struct {
  struct ncclComm *comm;
  cudaStream_t stream;
  Task *task; /* built now, pushed at the end */
} Launch;

static int group_depth;
static ncclResult_t group_err;
static Launch *pending;
static int npending, cappending;

static ncclResult_t usable(struct ncclComm *c) {
  if (!c) {
    snprintf(global_lasterr, sizeof global_lasterr, "NULL communicator");
    return ncclInvalidArgument;
  }
  adopt_shared(c);
  if (c->async != ncclSuccess) return c->async;
  if (!c->ready) {
    snprintf(c->lasterr, sizeof c->lasterr, "the communicator's init has not completed");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

static unsigned char *dev_bytes(struct ncclComm *c, const void *p, size_t n, const char *what,
                                ncclResult_t *e) {
  if (n == 0) return NULL;
  const char *why = NULL;
  unsigned char *h = fakegpu_dev_host(p, n, &why);
  if (!h) {
    snprintf(c->lasterr, sizeof c->lasterr, "%s %p (%zu bytes) is %s", what, p, n, why);
    fakegpu_warn("%s", c->lasterr);
    *e = ncclInvalidArgument;
  }
  return h;
}

static ncclResult_t launch(struct ncclComm *c, cudaStream_t s, Task *t) {
  /* On the communicator's list first: the push may complete and free it. */
  t->next = c->tasks;
  c->tasks = t;
  if (!c->blocking) c->launching = true;
  if (!fakegpu_stream_push(s, &t->ft)) {
    snprintf(c->lasterr, sizeof c->lasterr, "unknown stream %p", (void *)s);
    unlink_task(t);
    task_free(t);
    return ncclInvalidArgument;
  }
  if (c->blocking) return ncclSuccess;
  return ncclInProgress;
}

/* Outside a group an operation is launched at once; inside, it joins the
 * group's task for (comm, stream) (p2p) or is queued as its own. */
static ncclResult_t submit(struct ncclComm *c, cudaStream_t s, Task *t) {
  if (group_depth == 0) return launch(c, s, t);
  if (t->kind == K_P2P)
    for (int i = 0; i < npending; i++)
      if (pending[i].comm == c && pending[i].stream == s && pending[i].task->kind == K_P2P) {
        Task *g = pending[i].task;
        for (int k = 0; k < t->nops; k++) add_op(g, t->ops[k].peer, t->ops[k].send, t->ops[k].d, t->ops[k].buf);
        task_free(t);
        return ncclSuccess;
      }
  if (npending == cappending) {
    cappending = cappending ? 2 * cappending : 8;
    pending = realloc(pending, (size_t)cappending * sizeof *pending);
    if (!pending) abort();
  }
  pending[npending++] = (Launch){c, s, t};
  return ncclSuccess;
}

static ncclResult_t p2p(const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t c,
                        cudaStream_t s, bool send) {
  ncclResult_t e = usable(c);
  if (e == ncclSuccess && (peer < 0 || peer >= c->n || esize(dt) == 0)) {
    snprintf(c->lasterr, sizeof c->lasterr, "%s: peer %d of %d ranks, type %d", send ? "ncclSend" : "ncclRecv",
             peer, c->n, (int)dt);
    e = ncclInvalidArgument;
  }
  size_t bytes = count * (e == ncclSuccess ? esize(dt) : 1);
  unsigned char *h = e == ncclSuccess ? dev_bytes(c, buf, bytes, send ? "ncclSend buffer" : "ncclRecv buffer", &e) : NULL;
  if (e != ncclSuccess) {
    if (group_depth && group_err == ncclSuccess) group_err = e;
    return e;
  }
  Task *t = task_new(c, K_P2P);
  add_op(t, peer, send, (Desc){K_P2P, (uint32_t)dt, bytes}, h);
  return submit(c, s, t);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return p2p(sendbuff, count, datatype, peer, comm, stream, true);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return p2p(recvbuff, count, datatype, peer, comm, stream, false);
}

static ncclResult_t collective(int kind, const void *in, void *out, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  ncclResult_t e = usable(c);
  if (e == ncclSuccess && (esize(dt) == 0 || (kind == K_ALLREDUCE && op != ncclSum && op != ncclMax))) {
    snprintf(c->lasterr, sizeof c->lasterr, "type %d or op %d is not one the stand-in has", (int)dt, (int)op);
    e = ncclInvalidArgument;
  }
  size_t bytes = e == ncclSuccess ? count * esize(dt) : 0;
  size_t outb = kind == K_ALLGATHER && e == ncclSuccess ? bytes * (size_t)c->n : bytes;
  const unsigned char *hin = e == ncclSuccess ? dev_bytes(c, in, bytes, "send buffer", &e) : NULL;
  unsigned char *hout = e == ncclSuccess ? dev_bytes(c, out, outb, "receive buffer", &e) : NULL;
  if (e != ncclSuccess) {
    if (group_depth && group_err == ncclSuccess) group_err = e;
    return e;
  }
  Task *t = task_new(c, kind);
  t->in = hin;
  t->out = hout;
  t->bytes = bytes;
  t->dtype = dt;
  t->op = op;
  Desc d = {(uint32_t)kind | (kind == K_ALLREDUCE ? (uint32_t)op << 8 : 0), (uint32_t)dt, bytes};
  if (kind == K_ALLREDUCE && bytes) {
    t->acc = malloc(bytes);
    if (!t->acc) abort();
  }
  for (int p = 0; p < c->n; p++) {
    if (p == c->rank) continue;
    add_op(t, p, true, d, (unsigned char *)(uintptr_t)hin);
    add_op(t, p, false, d, kind == K_ALLGATHER ? (bytes ? hout + (size_t)p * bytes : NULL) : NULL);
  }
  if (kind == K_ALLREDUCE && bytes == 0) t->next_rank = c->n;
  return submit(c, s, t);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return collective(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

/* A send to self pairs with the receive from self of the same group. */
static ncclResult_t check_self(Task *t) {
  struct ncclComm *c = t->comm;
  int ns = 0, nr = 0;
  for (int i = 0; i < t->nops; i++)
    if (t->ops[i].peer == c->rank) {
      if (t->ops[i].send) ns++;
      else nr++;
    }
  if (ns != nr) {
    snprintf(c->lasterr, sizeof c->lasterr,
             "rank %d: %d send(s) to self and %d receive(s) from self in one group: each send to self "
             "needs its receive in the same group", c->rank, ns, nr);
    return ncclInvalidUsage;
  }
  int si = 0, ri = 0;
  for (int k = 0; k < ns; k++) {
    while (!(t->ops[si].peer == c->rank && t->ops[si].send)) si++;
    while (!(t->ops[ri].peer == c->rank && !t->ops[ri].send)) ri++;
    if (!desc_eq(&t->ops[si].d, &t->ops[ri].d)) {
      snprintf(c->lasterr, sizeof c->lasterr,
               "send/receive mismatch: rank %d sends %llu bytes (%s) to itself, which receives %llu "
               "bytes (%s) (operation %d to self)", c->rank, (unsigned long long)t->ops[si].d.bytes,
               dname(t->ops[si].d.dtype), (unsigned long long)t->ops[ri].d.bytes,
               dname(t->ops[ri].d.dtype), k);
      return ncclInvalidUsage;
    }
    si++;
    ri++;
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) {
    snprintf(global_lasterr, sizeof global_lasterr, "ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t e = group_err;
  group_err = ncclSuccess;
  for (int i = 0; i < npending && e == ncclSuccess; i++)
    if (pending[i].task->kind == K_P2P) {
      e = check_self(pending[i].task);
      if (e != ncclSuccess && pending[i].comm->async == ncclSuccess) pending[i].comm->async = e;
    }
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < npending; i++) {
    if (e != ncclSuccess) {
      task_free(pending[i].task);
      continue;
    }
    ncclResult_t x = launch(pending[i].comm, pending[i].stream, pending[i].task);
    if (x != ncclSuccess && r == ncclSuccess) r = x;
  }
  npending = 0;
  if (e != ncclSuccess) return e;
  return r;
}

/* ---- state, teardown ------------------------------------------------------------- */

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *st) {
  if (!c) return ncclInvalidArgument;
  fakegpu_progress();
  init_step(c);
  adopt_shared(c);
  if (c->async != ncclSuccess)
    *st = c->async;
  else if (!c->ready)
    *st = ncclInProgress;
  else if (c->launching) {
    c->launching = false;
    *st = ncclInProgress;
  } else if (c->finalizing && c->tasks)
    *st = ncclInProgress;
  else
    *st = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  c->finalizing = true;
  if (!c->blocking) return ncclInProgress;
  while (c->tasks && c->async == ncclSuccess) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    fakegpu_progress();
    adopt_shared(c);
  }
  return c->async;
}

static void release(struct ncclComm *c) {
  Task *t;
  while ((t = c->tasks)) {
    c->tasks = t->next;
    fakegpu_stream_remove(&t->ft);
    task_free(t);
  }
  if (c->name[0]) shm_unlink(c->name); /* gone already unless init never completed */
  if (c->h) munmap(c->h, c->maplen);
  free(c);
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  release(c);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  if (c->tasks)
    fakegpu_warn("ncclCommDestroy with operations still queued: they are dropped (ncclCommFinalize "
                 "first waits for them)");
  release(c);
  return ncclSuccess;
}
