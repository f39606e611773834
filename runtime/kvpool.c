/* kvpool.c: not written yet (issue 9: KV pools per the ledger). */
typedef int rp__stub_kvpool;
