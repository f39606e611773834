/*
 * nccl.h: a stand-in for tests. It declares the subset of NCCL's public
 * API that rankrun's nccl backend (runtime/backend_nccl.c) and
 * tests/gpu/nccl_self.c use, written from the API documentation; it is not
 * NVIDIA's header. The implementation is tests/fakegpu/fake_nccl.c:
 * communicators between processes of one machine over POSIX shared memory
 * (see docs/testing.md). Built only into the test binaries (RP_FAKE_GPU).
 */
#ifndef RANKRUN_FAKEGPU_NCCL_H
#define RANKRUN_FAKEGPU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version codes from 2.9 on: X * 10000 + Y * 100 + Z. The stand-in models
 * the API of 2.14, the first with non-blocking communicators,
 * ncclCommFinalize and ncclGetLastError together. */
#define NCCL_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(2, 14, 0)

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;

typedef enum { ncclUint8 = 1, ncclInt64 = 4, ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;

/* Communicator options; only `blocking` is read (0: every call returns at
 * once, ncclInProgress while work goes on, polled with
 * ncclCommGetAsyncError). */
typedef struct {
  size_t size;
  unsigned int magic;
  int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_MAGIC_STANDIN 0x52524647u
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), NCCL_CONFIG_MAGIC_STANDIN, 1}

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
