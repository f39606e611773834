/* hooks.c: not written yet. */
typedef int rp__stub_hooks;
