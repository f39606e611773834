/* backend_nccl.c: not written yet. */
typedef int rp__stub_backend_nccl;
