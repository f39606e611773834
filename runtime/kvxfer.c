/* kvxfer.c: not written yet (issue 9: verified kv_reshard transfers). */
typedef int rp__stub_kvxfer;
