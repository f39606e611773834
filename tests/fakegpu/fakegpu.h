/*
 * fakegpu.h: what the stand-in NCCL (fake_nccl.c) needs from the stand-in
 * CUDA runtime (fake_cuda.c): device pointers translated to the host bytes
 * behind them, and NCCL work queued on a stream that completes only when
 * its peers have done their part.
 */
#ifndef RANKRUN_FAKEGPU_H
#define RANKRUN_FAKEGPU_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_runtime.h"

/* Work on a stream that waits for other processes. poll makes what
 * progress it can and returns true once the task is complete; the stream
 * then runs what was queued behind it. The stream owns nothing: the
 * task's owner removes it (fakegpu_stream_remove) before freeing it. */
typedef struct FakeTask FakeTask;
struct FakeTask {
  bool (*poll)(FakeTask *t);
  void (*on_done)(FakeTask *t); /* called once, when popped complete */
  /* Whether the task uses host bytes [p, p + n): any use when `write`
   * (someone else would write them), else a write by the task. */
  bool (*uses)(const FakeTask *t, const unsigned char *p, size_t n, bool write);
};

/* Host address of `bytes` device bytes at dev, or NULL with *why set when
 * [dev, dev + bytes) is not inside one live device allocation. */
void *fakegpu_dev_host(const void *dev, size_t bytes, const char **why);
/* Whether p points into any device allocation, live or freed. */
bool fakegpu_is_dev(const void *p);

/* Queues t on stream s. A task is polled only at the head of its stream
 * (its turn: everything queued before it has run). Returns false for an
 * unknown stream. */
bool fakegpu_stream_push(cudaStream_t s, FakeTask *t);
/* Takes t off its stream, complete or not (abort). */
void fakegpu_stream_remove(FakeTask *t);
/* Polls every stream's head; what completes runs what follows it. */
void fakegpu_progress(void);

/* "fakegpu: ..." on stderr. */
void fakegpu_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
