/* plan_load.c: not written yet. */
typedef int rp__stub_plan_load;
