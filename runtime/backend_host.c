/*
 * backend_host.c: the host backend. Ranks are processes on one or several
 * machines; every pair of ranks that shares a plan group gets one TCP
 * connection, made when the first group they share is created (the higher
 * rank connects, the lower accepts; addresses come from the store).
 *
 * Input: the plan's groups, the store. Output: communicators whose
 * collectives run over those connections.
 * Invariants: each pair connection carries the pair's messages in the
 * order both sides issue them, so collectives on overlapping groups stay
 * matched as long as every rank runs its groups in plan order; every wait
 * has a deadline (ctx->timeout) and a dead peer shows as RT_ERR_CLOSED.
 *
 * Algorithms: ring all-reduce (reduce-scatter then all-gather), ring
 * all-gather, pairwise all-to-all, barrier as a one-byte ring all-gather.
 * Same-host pairs (ranks of one plan node) move their bytes through
 * shared memory: one single-producer single-consumer ring per direction
 * (/dev/shm/rankrun-JOB-FROM-TO, created by the receiver in init, before it
 * publishes its address, and opened by the sender when the pair connects).
 * The pair's TCP connection stays open as the liveness signal: when the
 * peer dies the kernel closes it, which a waiting rank sees at once.
 * RANKRUN_HOST_SHM=0 turns the rings off (TCP for every pair).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

#define HOST_MAGIC 0x524b5255u /* "RKRU" */

/* Bytes of one ring. Large enough for a sender to run several KV messages
 * (a layer group, 512 KiB to a few MiB) ahead of its receiver, so that it
 * seldom waits for room while the receiver unpacks or verifies; the pages
 * are reserved and mapped up front (posix_fallocate, MAP_POPULATE) so that
 * no page fault lands inside a transfer and a full /dev/shm shows at
 * creation (that pair then stays on TCP), not as SIGBUS later. Cost: this
 * much shared memory per ordered same-node pair that shares a group. */
#define RING_BYTES ((uint64_t)RT_HOST_RING_BYTES)

/* One direction of a same-host pair. head and tail count bytes since the
 * start; they live on separate cache lines. A side that finds nothing to do
 * sleeps on a futex word of the ring (hseq for the consumer waiting for
 * data, tseq for the producer waiting for room) after raising its wait
 * flag; the other side bumps the word after every move and wakes it only
 * when the flag is up, so a busy pair makes no system calls. */
typedef struct {
  _Atomic uint64_t head; /* written by the producer */
  char pad1[56];
  _Atomic uint64_t tail; /* written by the consumer */
  char pad2[56];
  _Atomic uint32_t hseq, hwait; /* producer bumps, consumer sleeps */
  char pad3[56];
  _Atomic uint32_t tseq, twait; /* consumer bumps, producer sleeps */
  char pad4[56];
  unsigned char data[];
} Ring;

typedef struct {
  const Plan *plan;
  int rank;
  double timeout;
  RtStore *store;
  char keyspace[16]; /* RtBackendCtx.keyspace */
  int lfd;
  int *fd;    /* per global rank, -1 until connected */
  Ring **rx;  /* per global rank: the ring it writes to us (ours) */
  Ring **tx;  /* per global rank: the ring we write to it (its) */
  char job[64];
  bool has_owner;    /* rings only when the launcher's record is known */
  RtShmOwner owner;  /* names the rings (rt_ring_name) */
  uint64_t tag_skew; /* tests only: RANKRUN_TEST_TAG_SKEW=1 (host_p2p_post) */
} HostState;

static size_t ring_size(void) { return sizeof(Ring) + RING_BYTES; }

#define SHM_DIR "/dev/shm" /* where glibc's shm_open keeps its objects */

void rt_ring_name(char *buf, size_t n, const char *job, const RtShmOwner *own,
                  int from, int to) {
  snprintf(buf, n, "/rankrun-%s-%ld-%llu-%d-%d", job, own->pid, own->start,
           from, to);
}

bool rt_proc_start(long pid, unsigned long long *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* Field 2 is the command in parentheses and may hold anything: count
   * from the last ')'. starttime is field 22, the 20th after it. */
  const char *p = strrchr(buf, ')');
  if (!p) return false;
  p++;
  for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
  return p && sscanf(p, " %llu", start) == 1;
}

bool rt_shm_owner_of(long pid, RtShmOwner *out) {
  out->pid = pid;
  return pid > 0 && rt_proc_start(pid, &out->start);
}

/* The owner of ring `name` (an entry of /dev/shm); false when the name is
 * not a ring's. */
static bool ring_owner(const char *name, RtShmOwner *own) {
  char job[17];
  int from = 0, to = 0, end = 0;
  if (sscanf(name, "rankrun-%16[0-9a-f]-%ld-%llu-%d-%d%n", job, &own->pid,
             &own->start, &from, &to, &end) != 5 || name[end] != 0)
    return false;
  return strlen(job) == 16 && own->pid > 0 && from >= 0 && to >= 0;
}

int rt_shm_remove_rings(const RtShmOwner *own, int64_t *bytes) {
  DIR *d = opendir(SHM_DIR);
  int removed = 0;
  if (bytes) *bytes = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    RtShmOwner o;
    unsigned long long now = 0;
    if (!ring_owner(e->d_name, &o)) continue;
    bool match = own ? o.pid == own->pid && o.start == own->start
                     : !rt_proc_start(o.pid, &now) || now != o.start;
    if (!match) continue;
    struct stat sb;
    int64_t sz = fstatat(dirfd(d), e->d_name, &sb, 0) == 0 ? sb.st_size : 0;
    char name[300];
    snprintf(name, sizeof name, "/%s", e->d_name);
    if (shm_unlink(name) != 0) continue;
    removed++;
    if (bytes) *bytes += sz;
  }
  closedir(d);
  return removed;
}

bool rt_host_shm_on(void) {
  const char *e = getenv("RANKRUN_HOST_SHM");
  return !(e && strcmp(e, "0") == 0);
}

static bool shm_wanted(void) { return rt_host_shm_on(); }

/* Maps ring `name`; create: make it (the receiver) or open it (the
 * sender). */
static Ring *ring_map(const char *name, bool create) {
  int fd = shm_open(name, create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
  if (fd < 0) return NULL;
  if (create && (ftruncate(fd, (off_t)ring_size()) != 0 ||
                 posix_fallocate(fd, 0, (off_t)ring_size()) != 0)) {
    close(fd);
    shm_unlink(name);
    return NULL;
  }
  void *p = mmap(NULL, ring_size(), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return NULL;
  }
  return p;
}

/* Whether ranks a and b share a plan group. */
static bool share_group(const Plan *pl, int a, int b) {
  for (int g = 0; g < pl->ngroups; g++)
    if (rt_group_index(&pl->groups[g], a) >= 0 &&
        rt_group_index(&pl->groups[g], b) >= 0)
      return true;
  return false;
}

int64_t rt_host_ring_bytes(void) { return (int64_t)ring_size(); }

/* Above this many ranks on one node the pair table (ranks^2 bytes) is not
 * built and every ordered pair counts: 4,096 ranks make a 16 MiB table,
 * and their 16.7 million rings would need 128 TiB, which no node has, so
 * the upper bound fails the fit check just as the exact count would. */
#define RINGS_EXACT_MAX 4096

int64_t rt_host_node_rings(const Plan *pl, int node) {
  int *local = rp_malloc(sizeof(int) * ((size_t)pl->world_size + 1));
  int64_t nl = 0, rings = 0;
  for (int r = 0; r < pl->world_size; r++)
    local[r] = rt_rank_node(pl, r) == node ? (int)nl++ : -1;
  if (nl > RINGS_EXACT_MAX) {
    free(local);
    return nl * (nl - 1);
  }
  unsigned char *pair = rp_calloc((size_t)(nl * nl) + 1, 1);
  int *mem = rp_malloc(sizeof(int) * ((size_t)nl + 1));
  for (int g = 0; g < pl->ngroups; g++) {
    const PlanGroup *G = &pl->groups[g];
    int m = 0; /* the group's members on this node */
    for (int i = 0; i < G->n && m < nl; i++)
      if (local[G->ranks[i]] >= 0) mem[m++] = local[G->ranks[i]];
    for (int i = 0; i < m; i++)
      for (int j = 0; j < m; j++) {
        int64_t at = (int64_t)mem[i] * nl + mem[j];
        if (mem[i] == mem[j] || pair[at]) continue;
        pair[at] = 1;
        rings++;
      }
  }
  free(mem);
  free(pair);
  free(local);
  return rings;
}

static int64_t host_shm_segments(const Plan *pl, int node, int64_t *seg_bytes) {
  *seg_bytes = rt_host_ring_bytes();
  return rt_host_shm_on() ? rt_host_node_rings(pl, node) : 0;
}

struct RtComm {
  HostState *hs;
  int group;
  int n, me;
  int *fds; /* per member index; -1 for this rank */
  double p2p_secs; /* time of the last p2p_post, for p2p_wait */
};

static RtResult host_init(const RtBackendCtx *ctx, void **state) {
  /* Rank processes are throughput workers that wake each other through
   * the rings' futexes. Under SCHED_OTHER a woken receiver preempts its
   * sender at once when ranks outnumber cores, and the sender's copy then
   * waits for the receiver's unpacking: on the 2-core build machine that
   * was 80% of the time in send calls (docs/benchmarks.md). SCHED_BATCH
   * keeps fair sharing but drops wake-up preemption. Unprivileged; a
   * refusal changes nothing else. */
  struct sched_param sp = {.sched_priority = 0};
  (void)sched_setscheduler(0, SCHED_BATCH, &sp);
  HostState *hs = rp_calloc(1, sizeof *hs);
  hs->plan = ctx->plan;
  hs->rank = ctx->rank;
  hs->timeout = ctx->timeout;
  hs->store = ctx->store;
  snprintf(hs->keyspace, sizeof hs->keyspace, "%s", ctx->keyspace ? ctx->keyspace : "");
  hs->fd = rp_malloc(sizeof(int) * (size_t)ctx->plan->world_size);
  for (int i = 0; i < ctx->plan->world_size; i++) hs->fd[i] = -1;
  hs->rx = rp_calloc((size_t)ctx->plan->world_size, sizeof *hs->rx);
  hs->tx = rp_calloc((size_t)ctx->plan->world_size, sizeof *hs->tx);
  snprintf(hs->job, sizeof hs->job, "%s", ctx->job ? ctx->job : "");
  /* The rings carry the launcher's record in their names: a rank is its
   * launcher's child (fork and exec, launcher.c). The job id came from the
   * store: rings only for one of the form node 0 makes (16 hex digits),
   * which rt_shm_remove_rings recognises. */
  hs->has_owner = strlen(hs->job) == 16 &&
                  strspn(hs->job, "0123456789abcdef") == 16 &&
                  rt_shm_owner_of(ctx->owner_pid > 0 ? ctx->owner_pid : (long)getppid(),
                                  &hs->owner);
  const char *skew = getenv("RANKRUN_TEST_TAG_SKEW");
  hs->tag_skew = skew && strcmp(skew, "1") == 0 ? 1 : 0;
  /* Our receive rings, before our address is published: a peer that can
   * see the address can open the ring. A ring that cannot be made leaves
   * that pair on TCP. */
  int my_node = rt_rank_node(ctx->plan, ctx->rank);
  for (int p = 0; p < ctx->plan->world_size && hs->job[0] && hs->has_owner &&
                  shm_wanted(); p++) {
    if (p == ctx->rank || rt_rank_node(ctx->plan, p) != my_node ||
        !share_group(ctx->plan, ctx->rank, p))
      continue;
    char name[128];
    rt_ring_name(name, sizeof name, hs->job, &hs->owner, p, ctx->rank);
    hs->rx[p] = ring_map(name, true);
  }
  int port = 0;
  RtResult r = rt_listen(ctx->bind_host, &port, 256, &hs->lfd);
  if (r != RT_OK) {
    free(hs->fd);
    free(hs);
    return r;
  }
  char key[64], val[128];
  snprintf(key, sizeof key, "%shost/addr/%d", hs->keyspace, ctx->rank);
  int vl = snprintf(val, sizeof val, "%s:%d", ctx->bind_host, port);
  r = rt_store_set(ctx->store, key, val, (size_t)vl);
  if (r != RT_OK) {
    close(hs->lfd);
    free(hs->fd);
    free(hs);
    return r;
  }
  *state = hs;
  return RT_OK;
}

static RtResult host_finalize(void *state) {
  HostState *hs = state;
  if (!hs) return RT_OK;
  for (int i = 0; i < hs->plan->world_size; i++) {
    if (hs->fd[i] >= 0) close(hs->fd[i]);
    if (hs->rx[i]) {
      char name[128];
      rt_ring_name(name, sizeof name, hs->job, &hs->owner, i, hs->rank);
      shm_unlink(name);
      munmap(hs->rx[i], ring_size());
    }
    if (hs->tx[i]) munmap(hs->tx[i], ring_size());
  }
  close(hs->lfd);
  free(hs->rx);
  free(hs->tx);
  free(hs->fd);
  free(hs);
  return RT_OK;
}

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t get32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | p[3];
}

/* Opens the ring we write to `peer`, when it made one for us (same node,
 * shared memory on). Without it the pair stays on TCP. */
static void open_tx(HostState *hs, int peer) {
  if (!hs->job[0] || !hs->has_owner || !shm_wanted() ||
      rt_rank_node(hs->plan, peer) != rt_rank_node(hs->plan, hs->rank))
    return;
  char name[128];
  rt_ring_name(name, sizeof name, hs->job, &hs->owner, hs->rank, peer);
  hs->tx[peer] = ring_map(name, false);
}

/* Connects to lower rank `peer` and introduces this rank. */
static RtResult host_dial(HostState *hs, int peer, double deadline) {
  char key[64], *addr = NULL, *host = NULL;
  snprintf(key, sizeof key, "%shost/addr/%d", hs->keyspace, peer);
  RtResult r = rt_store_wait(hs->store, key, deadline - rt_now(), &addr, NULL);
  if (r == RT_ERR_TIMEOUT)
    return rt_err(r, "rank %d never published its address (waited %.1f s)",
                  peer, hs->timeout);
  RTCHECK(r);
  int port, fd = -1;
  r = rt_parse_hostport(addr, &host, &port);
  free(addr);
  RTCHECK(r);
  r = rt_connect(host, port, deadline, &fd);
  free(host);
  if (r != RT_OK)
    return rt_err(r, "cannot reach rank %d: %s", peer, rt_errmsg());
  unsigned char hello[8];
  put32(hello, HOST_MAGIC);
  put32(hello + 4, (uint32_t)hs->rank);
  r = rt_write_all(fd, hello, 8, deadline);
  if (r != RT_OK) {
    close(fd);
    return rt_err(r, "cannot greet rank %d: %s", peer, rt_errmsg());
  }
  hs->fd[peer] = fd;
  open_tx(hs, peer);
  return RT_OK;
}

/* Accepts connections until rank `want` (higher than ours) has arrived.
 * Connections from other valid higher ranks are kept for later groups;
 * anything else (bad magic, unknown or duplicate rank) is closed. */
static RtResult host_accept(HostState *hs, int want, double deadline) {
  while (hs->fd[want] < 0) {
    struct pollfd p = {.fd = hs->lfd, .events = POLLIN, .revents = 0};
    double left = deadline - rt_now();
    int rc = left <= 0 ? 0 : poll(&p, 1, (int)(left * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0)
      return rt_err(RT_ERR_TIMEOUT, "rank %d did not connect within %.1f s",
                    want, hs->timeout);
    int fd = accept4(hs->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    unsigned char hello[8];
    double hd = rt_now() + 2.0 < deadline ? rt_now() + 2.0 : deadline;
    if (rt_read_all(fd, hello, 8, hd) != RT_OK || get32(hello) != HOST_MAGIC) {
      close(fd);
      continue;
    }
    uint32_t from = get32(hello + 4);
    if (from >= (uint32_t)hs->plan->world_size || (int)from <= hs->rank ||
        hs->fd[from] >= 0) {
      close(fd);
      continue;
    }
    hs->fd[from] = fd;
    open_tx(hs, (int)from);
  }
  return RT_OK;
}

static RtResult host_group_create(void *state, int group, RtComm **out) {
  HostState *hs = state;
  const PlanGroup *g = &hs->plan->groups[group];
  int me = rt_group_index(g, hs->rank);
  if (me < 0)
    return rt_err(RT_ERR_INVALID, "rank %d is not in group `%d`", hs->rank,
                  g->id);
  double deadline = rt_now() + hs->timeout;
  /* Dial lower ranks first: connects complete in the peer's backlog, so no
   * rank ever waits on another rank's accept order. */
  for (int i = 0; i < g->n; i++) {
    int peer = g->ranks[i];
    if (peer < hs->rank && hs->fd[peer] < 0)
      RTCHECK(host_dial(hs, peer, deadline));
  }
  for (int i = 0; i < g->n; i++) {
    int peer = g->ranks[i];
    if (peer > hs->rank && hs->fd[peer] < 0)
      RTCHECK(host_accept(hs, peer, deadline));
  }
  RtComm *c = rp_calloc(1, sizeof *c);
  c->hs = hs;
  c->group = group;
  c->n = g->n;
  c->me = me;
  c->fds = rp_malloc(sizeof(int) * (size_t)g->n);
  for (int i = 0; i < g->n; i++)
    c->fds[i] = i == me ? -1 : hs->fd[g->ranks[i]];
  *out = c;
  return RT_OK;
}

static RtResult host_comm_destroy(RtComm *c, bool abort) {
  (void)abort; /* the pair connections belong to the state */
  if (!c) return RT_OK;
  free(c->fds);
  free(c);
  return RT_OK;
}

static int host_comm_size(const RtComm *c) { return c->n; }
static int host_comm_index(const RtComm *c) { return c->me; }

static double deadline_of(const RtComm *c) { return rt_now() + c->hs->timeout; }

/* Whether the pair connection to a shared-memory peer has closed: no bytes
 * travel on it, so readable means end of file (the peer is gone). */
static bool tcp_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char b;
  ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Sleeps on futex word w while it still holds v, for at most ms
 * milliseconds. Shared (not private) futex: the word lives in a mapping
 * two processes share. Early returns (EAGAIN, EINTR) are fine: the caller
 * re-checks the ring. */
static void futex_wait(_Atomic uint32_t *w, uint32_t v, int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* After a move: bump the word the other side may sleep on and wake it if
 * its flag is up. The bump is a sequentially consistent read-modify-write
 * after the head/tail store, and the sleeper raises its flag before it
 * reads the word and re-checks head/tail, so either the sleeper sees the
 * move or the mover sees the flag. */
static void ring_signal(_Atomic uint32_t *seq, _Atomic uint32_t *wait) {
  atomic_fetch_add(seq, 1);
  if (atomic_load(wait)) futex_wake(seq);
}

static size_t ring_put(Ring *g, const unsigned char *src, size_t n) {
  uint64_t head = atomic_load_explicit(&g->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
  uint64_t room = RING_BYTES - (head - tail);
  if (n > room) n = (size_t)room;
  if (n == 0) return 0;
  size_t off = (size_t)(head % RING_BYTES), first = (size_t)RING_BYTES - off;
  if (first > n) first = n;
  memcpy(g->data + off, src, first);
  memcpy(g->data, src + first, n - first);
  atomic_store_explicit(&g->head, head + n, memory_order_release);
  ring_signal(&g->hseq, &g->hwait);
  return n;
}

static size_t ring_get(Ring *g, unsigned char *dst, size_t n) {
  uint64_t tail = atomic_load_explicit(&g->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&g->head, memory_order_acquire);
  uint64_t avail = head - tail;
  if (n > avail) n = (size_t)avail;
  if (n == 0) return 0;
  size_t off = (size_t)(tail % RING_BYTES), first = (size_t)RING_BYTES - off;
  if (first > n) first = n;
  memcpy(dst, g->data + off, first);
  memcpy(dst + first, g->data, n - first);
  atomic_store_explicit(&g->tail, tail + n, memory_order_release);
  ring_signal(&g->tseq, &g->twait);
  return n;
}

/* Waits until ring g has data (want_data) or room, or ms milliseconds
 * pass: a short spin (the peer is often mid-copy on another core), then a
 * futex sleep that gives the core away, which matters when ranks
 * outnumber cores. */
static void ring_wait(Ring *g, bool want_data, int ms) {
  _Atomic uint32_t *seq = want_data ? &g->hseq : &g->tseq;
  _Atomic uint32_t *flag = want_data ? &g->hwait : &g->twait;
  for (int i = 0; i < 200; i++) {
    uint64_t used = atomic_load_explicit(&g->head, memory_order_acquire) -
                    atomic_load_explicit(&g->tail, memory_order_acquire);
    if (want_data ? used > 0 : used < RING_BYTES) return;
  }
  atomic_store(flag, 1);
  uint32_t v = atomic_load(seq);
  uint64_t used = atomic_load(&g->head) - atomic_load(&g->tail);
  if (want_data ? used == 0 : used == RING_BYTES) futex_wait(seq, v, ms);
  atomic_store(flag, 0);
}

/* Sends sn bytes to rank `to` while receiving rn bytes from rank `from`
 * (either may be -1 with 0 bytes), through the pair's ring or its TCP
 * connection. */
static RtResult chan_sendrecv(HostState *hs, int to, const void *sbuf,
                              size_t sn, int from, void *rbuf, size_t rn,
                              double deadline) {
  Ring *tx = sn && to >= 0 ? hs->tx[to] : NULL;
  Ring *rx = rn && from >= 0 ? hs->rx[from] : NULL;
  if (!tx && !rx)
    return rt_sendrecv(to >= 0 ? hs->fd[to] : -1, sbuf, sn,
                       from >= 0 ? hs->fd[from] : -1, rbuf, rn, deadline);
  const unsigned char *sp = sbuf;
  unsigned char *rp = rbuf;
  size_t so = 0, ro = 0;
  int idle = 0;
  while (so < sn || ro < rn) {
    bool moved = false;
    if (so < sn) {
      size_t n = 0;
      if (tx) {
        n = ring_put(tx, sp + so, sn - so);
      } else {
        ssize_t w = send(hs->fd[to], sp + so, sn - so, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return rt_err(RT_ERR_CLOSED, "peer closed the connection");
        n = w > 0 ? (size_t)w : 0;
      }
      so += n;
      moved |= n > 0;
    }
    if (ro < rn) {
      size_t n = 0;
      if (rx) {
        n = ring_get(rx, rp + ro, rn - ro);
      } else {
        ssize_t r = recv(hs->fd[from], rp + ro, rn - ro, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
          return rt_err(RT_ERR_CLOSED, "peer closed the connection");
        n = r > 0 ? (size_t)r : 0;
      }
      ro += n;
      moved |= n > 0;
    }
    if (moved) {
      idle = 0;
      continue;
    }
    /* Nothing moved: check the peers are alive and the deadline, then
     * wait. A lone ring direction (point-to-point on a same-node pair, the
     * KV path) sleeps on the ring's futex, 10 ms at most so that a dead
     * peer is still noticed; a mix of directions or of ring and TCP has no
     * single thing to sleep on, so it yields, then sleeps 20 us. */
    bool lone_tx = so < sn && tx && ro >= rn, lone_rx = ro < rn && rx && so >= sn;
    bool lone = lone_tx || lone_rx;
    if (++idle % 64 == 0 || (lone && idle > 1)) {
      if ((so < sn && tx && tcp_gone(hs->fd[to])) ||
          (ro < rn && rx && tcp_gone(hs->fd[from])))
        return rt_err(RT_ERR_CLOSED, "peer closed the connection");
      if (rt_now() > deadline)
        return rt_err(RT_ERR_TIMEOUT,
                      "peer did not answer in time (%zu of %zu bytes sent, %zu "
                      "of %zu received)", so, sn, ro, rn);
    }
    if (lone) {
      ring_wait(lone_tx ? tx : rx, lone_rx, 10);
    } else if (idle < 256) {
      sched_yield();
    } else {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
  return RT_OK;
}

static RtResult peer_err(const RtComm *c, int idx, RtResult r) {
  const PlanGroup *g = &c->hs->plan->groups[c->group];
  return rt_err(r, "group `%d` (%s): rank %d: %s", g->id, plan_kind_name(g->kind),
                g->ranks[idx], rt_errmsg());
}

static RtResult host_send(RtComm *c, const void *buf, size_t bytes, int peer) {
  if (peer < 0 || peer >= c->n || peer == c->me)
    return rt_err(RT_ERR_INVALID, "bad peer index %d in a group of %d", peer,
                  c->n);
  const PlanGroup *g = &c->hs->plan->groups[c->group];
  RtResult r = chan_sendrecv(c->hs, g->ranks[peer], buf, bytes, -1, NULL, 0,
                             deadline_of(c));
  return r == RT_OK ? r : peer_err(c, peer, r);
}

static RtResult host_recv(RtComm *c, void *buf, size_t bytes, int peer) {
  if (peer < 0 || peer >= c->n || peer == c->me)
    return rt_err(RT_ERR_INVALID, "bad peer index %d in a group of %d", peer,
                  c->n);
  const PlanGroup *g = &c->hs->plan->groups[c->group];
  RtResult r = chan_sendrecv(c->hs, -1, NULL, 0, g->ranks[peer], buf, bytes,
                             deadline_of(c));
  return r == RT_OK ? r : peer_err(c, peer, r);
}

/* Exchange with ring neighbours: send to me+1, receive from me-1. */
static RtResult ring_step(RtComm *c, const void *s, size_t sn, void *r,
                          size_t rn) {
  int right = (c->me + 1) % c->n, left = (c->me + c->n - 1) % c->n;
  const PlanGroup *g = &c->hs->plan->groups[c->group];
  RtResult res = chan_sendrecv(c->hs, g->ranks[right], s, sn, g->ranks[left],
                               r, rn, deadline_of(c));
  return res == RT_OK ? res : peer_err(c, left, res);
}

static size_t dtype_size(RtDtype t) { return t == RT_I64 ? 8 : 4; }

static void reduce(void *dst, const void *src, size_t count, RtDtype t,
                   RtRedOp op) {
  if (t == RT_I64) {
    int64_t *d = dst;
    const int64_t *s = src;
    for (size_t i = 0; i < count; i++) {
      if (op == RT_SUM)
        d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)s[i]);
      else if (s[i] > d[i])
        d[i] = s[i];
    }
  } else {
    float *d = dst;
    const float *s = src;
    for (size_t i = 0; i < count; i++) {
      if (op == RT_SUM)
        d[i] += s[i];
      else if (s[i] > d[i])
        d[i] = s[i];
    }
  }
}

static RtResult host_all_reduce(RtComm *c, const void *send, void *recv,
                                size_t count, RtDtype t, RtRedOp op) {
  size_t es = dtype_size(t);
  if (send != recv) memmove(recv, send, count * es);
  int n = c->n;
  if (n == 1 || count == 0) return RT_OK;
  /* Segment k covers [off[k], off[k+1]) elements. */
  size_t *off = rp_malloc(sizeof(size_t) * (size_t)(n + 1));
  for (int k = 0; k <= n; k++) off[k] = count * (size_t)k / (size_t)n;
  size_t maxseg = 0;
  for (int k = 0; k < n; k++)
    if (off[k + 1] - off[k] > maxseg) maxseg = off[k + 1] - off[k];
  char *tmp = rp_malloc(maxseg * es + 1);
  char *rb = recv;
  RtResult r = RT_OK;
  for (int s = 0; s < n - 1 && r == RT_OK; s++) {
    int ss = ((c->me - s) % n + n) % n, rs = ((c->me - s - 1) % n + n) % n;
    r = ring_step(c, rb + off[ss] * es, (off[ss + 1] - off[ss]) * es, tmp,
                  (off[rs + 1] - off[rs]) * es);
    if (r == RT_OK) reduce(rb + off[rs] * es, tmp, off[rs + 1] - off[rs], t, op);
  }
  for (int s = 0; s < n - 1 && r == RT_OK; s++) {
    int ss = ((c->me - s + 1) % n + n) % n, rs = ((c->me - s) % n + n) % n;
    r = ring_step(c, rb + off[ss] * es, (off[ss + 1] - off[ss]) * es,
                  rb + off[rs] * es, (off[rs + 1] - off[rs]) * es);
  }
  free(tmp);
  free(off);
  return r;
}

static RtResult host_all_gather(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  char *rb = recv;
  memmove(rb + (size_t)c->me * bytes, send, bytes);
  int n = c->n;
  for (int s = 0; s < n - 1; s++) {
    int sb = ((c->me - s) % n + n) % n, rbk = ((c->me - s - 1) % n + n) % n;
    RTCHECK(ring_step(c, rb + (size_t)sb * bytes, bytes,
                      rb + (size_t)rbk * bytes, bytes));
  }
  return RT_OK;
}

static RtResult host_all_to_all(RtComm *c, const void *send, void *recv,
                                size_t bytes) {
  const char *sb = send;
  char *rb = recv;
  int n = c->n;
  memmove(rb + (size_t)c->me * bytes, sb + (size_t)c->me * bytes, bytes);
  for (int s = 1; s < n; s++) {
    int to = (c->me + s) % n, from = (c->me - s + n) % n;
    const PlanGroup *g = &c->hs->plan->groups[c->group];
    RtResult r = chan_sendrecv(c->hs, g->ranks[to], sb + (size_t)to * bytes,
                               bytes, g->ranks[from], rb + (size_t)from * bytes,
                               bytes, deadline_of(c));
    if (r != RT_OK) return peer_err(c, from, r);
  }
  return RT_OK;
}

static RtResult host_barrier(RtComm *c) {
  char one = 1, *all = rp_malloc((size_t)c->n);
  RtResult r = host_all_gather(c, &one, all, 1);
  free(all);
  return r;
}

/* A group of point-to-point operations, run one after the other in the
 * caller's order. This is deadlock-free for the KV executor, whose
 * operation lists on every rank are restrictions of one total order; the
 * backend's default KV path does not use it (RANKRUN_KV_GROUPED=1 does, to
 * test the grouped path of a device backend on any machine).
 *
 * A byte stream would carry two sends into one receive of their sum, or a
 * send into a receive of another tag, without a complaint; NCCL would not
 * (its sends and receives match one to one, and groups cut differently on
 * two ranks can hang). So every operation here goes with a 16-byte header
 * (bytes, tag), and the receiver refuses one that does not match its own:
 * what runs here is then also right for a device backend. */
static RtResult host_p2p_post(RtComm *c, const RtP2p *ops, int n) {
  if (n < 1 || n > RT_P2P_MAX)
    return rt_err(RT_ERR_INVALID, "p2p_post of %d operations: expected 1 to %d",
                  n, RT_P2P_MAX);
  /* Tests only: RANKRUN_TEST_TAG_SKEW=1 sends every tag off by one, to
   * show that the receiver's check fires. */
  uint64_t off = c->hs->tag_skew;
  double t0 = rt_now();
  for (int i = 0; i < n; i++) {
    unsigned char h[16];
    uint64_t b = ops[i].bytes, t = (uint64_t)ops[i].tag + (ops[i].send ? off : 0);
    RtResult r;
    if (ops[i].send) {
      put32(h, (uint32_t)(b >> 32));
      put32(h + 4, (uint32_t)b);
      put32(h + 8, (uint32_t)(t >> 32));
      put32(h + 12, (uint32_t)t);
      r = host_send(c, h, sizeof h, ops[i].peer);
      if (r == RT_OK) r = host_send(c, ops[i].buf, ops[i].bytes, ops[i].peer);
    } else {
      r = host_recv(c, h, sizeof h, ops[i].peer);
      uint64_t gb = ((uint64_t)get32(h) << 32) | get32(h + 4);
      uint64_t gt = ((uint64_t)get32(h + 8) << 32) | get32(h + 12);
      if (r == RT_OK && (gb != b || gt != (uint64_t)ops[i].tag)) {
        const PlanGroup *g = &c->hs->plan->groups[c->group];
        return rt_err(RT_ERR_PROTO, "group `%d` (%s): point-to-point mismatch "
                      "with rank %d: it sent %llu bytes with tag %lld, this "
                      "rank posted a receive of %llu bytes with tag %lld",
                      g->id, plan_kind_name(g->kind), g->ranks[ops[i].peer],
                      (unsigned long long)gb, (long long)gt,
                      (unsigned long long)b, (long long)ops[i].tag);
      }
      if (r == RT_OK) r = host_recv(c, ops[i].buf, ops[i].bytes, ops[i].peer);
    }
    if (r != RT_OK) return r;
  }
  c->p2p_secs = rt_now() - t0;
  return RT_OK;
}

static RtResult host_p2p_wait(RtComm *c, double *secs) {
  *secs = c->p2p_secs;
  c->p2p_secs = 0;
  return RT_OK;
}

static RtResult host_copy_ref(void *state, void *dst, const void *src,
                              size_t bytes, double *secs) {
  (void)state;
  double t0 = rt_now();
  memcpy(dst, src, bytes);
  *secs = rt_now() - t0;
  return RT_OK;
}

static void *host_mem_alloc(void *state, size_t bytes) {
  (void)state;
  return malloc(bytes ? bytes : 1);
}
static void host_mem_free(void *state, void *p) {
  (void)state;
  free(p);
}
static RtResult host_to_host(void *state, void *host, const void *mem,
                             size_t bytes) {
  (void)state;
  memmove(host, mem, bytes);
  return RT_OK;
}
static RtResult host_from_host(void *state, void *mem, const void *host,
                               size_t bytes) {
  (void)state;
  memmove(mem, host, bytes);
  return RT_OK;
}

const RtBackend rt_backend_host = {
    .version = RT_BACKEND_VERSION,
    .name = "host",
    .init = host_init,
    .finalize = host_finalize,
    .group_create = host_group_create,
    .comm_destroy = host_comm_destroy,
    .comm_size = host_comm_size,
    .comm_index = host_comm_index,
    .send = host_send,
    .recv = host_recv,
    .all_reduce = host_all_reduce,
    .all_gather = host_all_gather,
    .all_to_all = host_all_to_all,
    .barrier = host_barrier,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .to_host = host_to_host,
    .from_host = host_from_host,
    .p2p_post = host_p2p_post,
    .p2p_wait = host_p2p_wait,
    .copy_ref = host_copy_ref,
    .host_memory = true,
    .visible_devices_env = NULL,
    .probe_copy_bytes = RT_PROBE_COPY_HOST,
    .copy_ref_kind = "memcpy",
    .kv_grouped = false,
    .shm_segments = host_shm_segments,
    .comm_native = NULL,
};
