/* launcher.c: not written yet. */
typedef int rp__stub_launcher;
