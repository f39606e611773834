/*
 * fake_cuda.c: the stand-in CUDA runtime (include/cuda_runtime.h) for
 * tests of the nccl backend on machines without a GPU.
 *
 * Device memory: cudaMalloc reserves an address range that is mapped with
 * no access (PROT_NONE), and keeps the bytes in a separate host mapping.
 * A device pointer dereferenced by the caller therefore faults, a copy
 * whose kind does not match where its pointers live is refused
 * (cudaErrorInvalidValue, with a line on stderr), and freed device memory
 * stays reserved and unusable (every later use is refused). Both mappings
 * are MAP_NORESERVE: a ledger of tens of GB costs only the pages written.
 * The device's size is RANKRUN_FAKEGPU_MEMORY (bytes, optional K/M/G/T
 * suffix, binary; default 80G); cudaMemGetInfo reports it less what is
 * allocated, and cudaMalloc refuses what does not fit. The machine has
 * RANKRUN_FAKEGPU_DEVICES devices (default 8, 0 for none); a set
 * CUDA_VISIBLE_DEVICES leaves the listed ones below that count.
 *
 * Streams run copies and memsets when they are queued, unless NCCL work
 * (fake_nccl.c) is ahead of them on the stream: that work completes only
 * when its peers have done their part, as polled from cudaStreamQuery and
 * ncclCommGetAsyncError, and what is queued behind it runs then. Events
 * take CLOCK_MONOTONIC at the moment their stream's earlier work
 * completed. cudaFree while NCCL work is queued on a stream aborts the
 * process: on a GPU it would wait for that work, forever if a peer is
 * gone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"

void fakegpu_warn(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakegpu[%d]: %s\n", (int)getpid(), buf);
}

/* ---- device memory ---------------------------------------------------- */

typedef struct {
  uintptr_t dev;  /* start of the reserved, inaccessible range */
  size_t size;    /* bytes asked for */
  size_t len;     /* bytes mapped (page multiple) */
  void *host;     /* the bytes; NULL once freed */
} Alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Alloc *allocs;
static size_t nallocs, capallocs;
static size_t used_bytes;
static int cur_device;

static size_t env_size(const char *name, size_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v) {
    fakegpu_warn("%s=`%s` is not a size; using the default", name, v);
    return dflt;
  }
  const char *units = "KMGT", *u = *end ? strchr(units, *end & ~0x20) : NULL;
  for (long k = u ? u - units + 1 : 0; k > 0; k--) x <<= 10;
  return (size_t)x;
}

static size_t total_bytes(void) {
  return env_size("RANKRUN_FAKEGPU_MEMORY", (size_t)80 << 30);
}

/* The allocation holding p (live or freed), or NULL. */
static Alloc *find(uintptr_t p) {
  for (size_t i = 0; i < nallocs; i++)
    if (p >= allocs[i].dev && p < allocs[i].dev + allocs[i].len) return &allocs[i];
  return NULL;
}

bool fakegpu_is_dev(const void *p) {
  pthread_mutex_lock(&mu);
  bool r = find((uintptr_t)p) != NULL;
  pthread_mutex_unlock(&mu);
  return r;
}

void *fakegpu_dev_host(const void *dev, size_t bytes, const char **why) {
  pthread_mutex_lock(&mu);
  uintptr_t p = (uintptr_t)dev;
  Alloc *a = find(p);
  void *r = NULL;
  if (!a)
    *why = "not device memory";
  else if (!a->host)
    *why = "device memory that was freed";
  else if (p - a->dev > a->size || bytes > a->size - (p - a->dev))
    *why = "past the end of its device allocation";
  else
    r = (char *)a->host + (p - a->dev);
  pthread_mutex_unlock(&mu);
  return r;
}

static size_t page_round(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

static bool nccl_pending(void);

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (!devPtr) return cudaErrorInvalidValue;
  *devPtr = NULL;
  if (size == 0) return cudaSuccess;
  size_t total = total_bytes();
  pthread_mutex_lock(&mu);
  if (size > total - used_bytes) {
    pthread_mutex_unlock(&mu);
    return cudaErrorMemoryAllocation;
  }
  size_t len = page_round(size);
  void *dev = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void *host = dev == MAP_FAILED ? MAP_FAILED
                                 : mmap(NULL, len, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED) {
    if (dev != MAP_FAILED) munmap(dev, len);
    pthread_mutex_unlock(&mu);
    return cudaErrorMemoryAllocation;
  }
  if (nallocs == capallocs) {
    size_t nc = capallocs ? 2 * capallocs : 64;
    Alloc *na = realloc(allocs, nc * sizeof *na);
    if (!na) abort();
    allocs = na;
    capallocs = nc;
  }
  allocs[nallocs++] = (Alloc){(uintptr_t)dev, size, len, host};
  used_bytes += size;
  pthread_mutex_unlock(&mu);
  *devPtr = dev;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (!devPtr) return cudaSuccess;
  if (nccl_pending()) {
    fakegpu_warn("cudaFree(%p) while NCCL work is queued on a stream: on a GPU "
                 "cudaFree waits for it, and forever if a peer is gone",
                 devPtr);
    abort();
  }
  pthread_mutex_lock(&mu);
  Alloc *a = find((uintptr_t)devPtr);
  cudaError_t r = cudaSuccess;
  if (!a || a->dev != (uintptr_t)devPtr || !a->host) {
    fakegpu_warn("cudaFree(%p): %s", devPtr,
                 !a ? "not device memory" : !a->host ? "freed twice" : "not the start of an allocation");
    r = cudaErrorInvalidValue;
  } else {
    /* The bytes go; the address range stays reserved and inaccessible, so
     * that a later use of the pointer is caught, not served by new data. */
    munmap(a->host, a->len);
    a->host = NULL;
    used_bytes -= a->size;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  size_t t = total_bytes();
  pthread_mutex_lock(&mu);
  *free_b = t > used_bytes ? t - used_bytes : 0;
  pthread_mutex_unlock(&mu);
  *total = t;
  return cudaSuccess;
}

/* ---- devices ---------------------------------------------------------- */

static int device_count(void) {
  int machine = (int)env_size("RANKRUN_FAKEGPU_DEVICES", 8);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (!vis) return machine;
  /* Listed devices count up to the first that is not there. */
  int n = 0;
  const char *p = vis;
  while (*p) {
    char *end = NULL;
    long d = strtol(p, &end, 10);
    if (end == p || d < 0 || d >= machine) break;
    n++;
    p = end;
    if (*p == ',') p++;
    else break;
  }
  return n;
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  cur_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "rankrun stand-in GPU %d (host memory)", device);
  prop->totalGlobalMem = total_bytes();
  return cudaSuccess;
}

/* The stand-in has no version of its own: 0. */
cudaError_t cudaRuntimeGetVersion(int *version) {
  *version = 0;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
  *version = 0;
  return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorUnknown: break;
  }
  return "unknown error";
}

/* ---- streams and events ----------------------------------------------- */

struct CUevent_st {
  int state;      /* 0 never recorded, 1 waiting on its stream, 2 complete */
  unsigned gen;   /* which record the stream's item belongs to */
  struct timespec t;
};

typedef enum { IT_TASK, IT_EVENT, IT_COPY, IT_SET } ItemKind;
typedef struct Item {
  ItemKind kind;
  FakeTask *task;
  cudaEvent_t ev;
  unsigned gen;
  void *dst;
  const void *src;
  size_t n;
  int val;
  struct Item *next;
} Item;

struct CUstream_st {
  Item *head, *tail;
  struct CUstream_st *next; /* every stream, for fakegpu_progress */
};

static struct CUstream_st *streams;
static struct CUstream_st legacy; /* stream 0 */

static cudaStream_t real_stream(cudaStream_t s) { return s ? s : &legacy; }

static bool known(cudaStream_t s) {
  if (s == &legacy) return true;
  for (struct CUstream_st *x = streams; x; x = x->next)
    if (x == s) return true;
  return false;
}

static bool nccl_pending(void) {
  for (struct CUstream_st *x = streams; x; x = x->next)
    for (Item *it = x->head; it; it = it->next)
      if (it->kind == IT_TASK) return true;
  for (Item *it = legacy.head; it; it = it->next)
    if (it->kind == IT_TASK) return true;
  return false;
}

static void run_item(Item *it) {
  switch (it->kind) {
  case IT_COPY: memmove(it->dst, it->src, it->n); break;
  case IT_SET: memset(it->dst, it->val, it->n); break;
  case IT_EVENT:
    if (it->ev && it->ev->gen == it->gen) {
      clock_gettime(CLOCK_MONOTONIC, &it->ev->t);
      it->ev->state = 2;
    }
    break;
  case IT_TASK: break;
  }
}

/* Runs the stream from its head as far as it goes. */
static void drain(cudaStream_t s) {
  while (s->head) {
    Item *it = s->head;
    if (it->kind == IT_TASK) {
      if (!it->task->poll(it->task)) return;
      FakeTask *t = it->task;
      s->head = it->next;
      if (!s->head) s->tail = NULL;
      free(it);
      if (t->on_done) t->on_done(t);
      continue;
    }
    run_item(it);
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    free(it);
  }
}

static void push(cudaStream_t s, const Item *proto) {
  if (!s->head) {
    /* Idle stream: copies, memsets and event records happen now. */
    if (proto->kind != IT_TASK) {
      Item tmp = *proto;
      run_item(&tmp);
      return;
    }
  }
  Item *it = malloc(sizeof *it);
  if (!it) abort();
  *it = *proto;
  it->next = NULL;
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  if (s->head == it) drain(s);
}

void fakegpu_progress(void) {
  drain(&legacy);
  for (struct CUstream_st *x = streams; x; x = x->next) drain(x);
}

bool fakegpu_stream_push(cudaStream_t s, FakeTask *t) {
  s = real_stream(s);
  if (!known(s)) return false;
  Item it = {IT_TASK, t, NULL, 0, NULL, NULL, 0, 0, NULL};
  push(s, &it);
  return true;
}

static void remove_from(cudaStream_t s, FakeTask *t) {
  Item **pp = &s->head, *prev = NULL;
  while (*pp) {
    Item *it = *pp;
    if (it->kind == IT_TASK && it->task == t) {
      *pp = it->next;
      if (s->tail == it) s->tail = prev;
      free(it);
      continue;
    }
    prev = it;
    pp = &it->next;
  }
}

void fakegpu_stream_remove(FakeTask *t) {
  remove_from(&legacy, t);
  for (struct CUstream_st *x = streams; x; x = x->next) remove_from(x, t);
  /* What waited behind it runs now. */
  fakegpu_progress();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  (void)flags;
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return cudaErrorMemoryAllocation;
  s->next = streams;
  streams = s;
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream || !known(stream)) return cudaErrorInvalidResourceHandle;
  if (stream->head)
    fakegpu_warn("cudaStreamDestroy of a stream with work still queued: the "
                 "work is dropped");
  for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
    if (*pp == stream) {
      *pp = stream->next;
      break;
    }
  while (stream->head) {
    Item *it = stream->head;
    stream->head = it->next;
    free(it);
  }
  free(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cudaStream_t s = real_stream(stream);
  if (!known(s)) return cudaErrorInvalidResourceHandle;
  fakegpu_progress();
  return s->head ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  *event = calloc(1, sizeof **event);
  return *event ? cudaSuccess : cudaErrorMemoryAllocation;
}

static void forget_event(cudaStream_t s, cudaEvent_t e) {
  for (Item *it = s->head; it; it = it->next)
    if (it->kind == IT_EVENT && it->ev == e) it->ev = NULL;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  forget_event(&legacy, event);
  for (struct CUstream_st *x = streams; x; x = x->next) forget_event(x, event);
  free(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  cudaStream_t s = real_stream(stream);
  if (!event || !known(s)) return cudaErrorInvalidResourceHandle;
  event->gen++;
  event->state = 1;
  Item it = {IT_EVENT, NULL, event, event->gen, NULL, NULL, 0, 0, NULL};
  push(s, &it);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end || !start->state || !end->state) return cudaErrorInvalidResourceHandle;
  if (start->state != 2 || end->state != 2) return cudaErrorNotReady;
  double d = (double)(end->t.tv_sec - start->t.tv_sec) +
             (double)(end->t.tv_nsec - start->t.tv_nsec) * 1e-9;
  *ms = (float)(d * 1e3);
  return cudaSuccess;
}

/* ---- copies ------------------------------------------------------------ */

static const char *kind_name(cudaMemcpyKind k) {
  switch (k) {
  case cudaMemcpyHostToHost: return "HostToHost";
  case cudaMemcpyHostToDevice: return "HostToDevice";
  case cudaMemcpyDeviceToHost: return "DeviceToHost";
  case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
  case cudaMemcpyDefault: return "Default";
  }
  return "?";
}

/* A copy on stream s must not touch device bytes that NCCL work queued on
 * another stream uses: nothing orders the two (a race on a GPU). */
static bool races_on(cudaStream_t x, cudaStream_t s, const void *h, size_t n, bool write) {
  if (x == s) return false; /* ordered behind the work */
  for (Item *it = x->head; it; it = it->next)
    if (it->kind == IT_TASK && it->task->uses && it->task->uses(it->task, h, n, write))
      return true;
  return false;
}

static bool races(cudaStream_t s, const void *h, size_t n, bool write, const char *what) {
  bool r = races_on(&legacy, s, h, n, write);
  for (struct CUstream_st *x = streams; x && !r; x = x->next) r = races_on(x, s, h, n, write);
  if (r)
    fakegpu_warn("%s on one stream %s device bytes that NCCL work queued on another "
                 "stream uses: nothing orders the two", what, write ? "writes" : "reads");
  return r;
}

/* The host address of one side of a copy, checked against the kind. */
static void *side(const void *p, size_t n, bool want_dev, cudaMemcpyKind k, const char *which) {
  const char *why = NULL;
  if (want_dev) {
    void *h = fakegpu_dev_host(p, n, &why);
    if (!h) fakegpu_warn("cudaMemcpyAsync(%s): the %s %p is %s", kind_name(k), which, p, why);
    return h;
  }
  if (fakegpu_is_dev(p) || fakegpu_is_dev((const char *)p + n - 1)) {
    fakegpu_warn("cudaMemcpyAsync(%s): the %s %p is device memory", kind_name(k), which, p);
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  cudaStream_t s = real_stream(stream);
  if (!known(s)) return cudaErrorInvalidResourceHandle;
  if (count == 0) return cudaSuccess;
  bool ddev, sdev;
  switch (kind) {
  case cudaMemcpyHostToHost: ddev = sdev = false; break;
  case cudaMemcpyHostToDevice: ddev = true; sdev = false; break;
  case cudaMemcpyDeviceToHost: ddev = false; sdev = true; break;
  case cudaMemcpyDeviceToDevice: ddev = sdev = true; break;
  case cudaMemcpyDefault:
    ddev = fakegpu_is_dev(dst);
    sdev = fakegpu_is_dev(src);
    break;
  default: return cudaErrorInvalidValue;
  }
  void *d = side(dst, count, ddev, kind, "destination");
  const void *sp = side(src, count, sdev, kind, "source");
  if (!d || !sp) return cudaErrorInvalidValue;
  if ((ddev && races(s, d, count, true, "cudaMemcpyAsync")) ||
      (sdev && races(s, sp, count, false, "cudaMemcpyAsync")))
    return cudaErrorInvalidValue;
  Item it = {IT_COPY, NULL, NULL, 0, d, sp, count, 0, NULL};
  push(s, &it);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  cudaStream_t s = real_stream(stream);
  if (!known(s)) return cudaErrorInvalidResourceHandle;
  if (count == 0) return cudaSuccess;
  const char *why = NULL;
  void *d = fakegpu_dev_host(devPtr, count, &why);
  if (!d) {
    fakegpu_warn("cudaMemsetAsync: %p is %s", devPtr, why);
    return cudaErrorInvalidValue;
  }
  if (races(s, d, count, true, "cudaMemsetAsync")) return cudaErrorInvalidValue;
  Item it = {IT_SET, NULL, NULL, 0, d, NULL, count, value, NULL};
  push(s, &it);
  return cudaSuccess;
}
