/* units.c: not written yet. */
typedef int rp__stub_units;
