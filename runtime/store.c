/* store.c: not written yet. */
typedef int rp__stub_store;
