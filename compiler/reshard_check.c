/* reshard_check.c: not written yet. */
typedef int rp__stub_reshard_check;
