/* backend_host.c: not written yet. */
typedef int rp__stub_backend_host;
