#!/usr/bin/env python3
"""The Python twin of tests/runtime/worker.c through python/rankrun.py
(ctypes): the same checks in every group, the same store keys, the same
KV pattern and verification, the same last line."""
import os
import sys

sys.path.insert(0, os.path.join(os.environ["SRCROOT"], "python"))
import rankrun  # noqa: E402

M = (1 << 64) - 1


def cell(k, l, h, p, words):
    x = ((k * 0x9E3779B97F4A7C15) ^ (l << 40) ^ (h << 20) ^ p) & M
    x = (x * 0xBF58476D1CE4E5B9) & M
    x ^= x >> 31
    return b"".join(((x + w * 0x94D049BB133111EB) & M).to_bytes(8, "little") for w in range(words))


def region(lay, k):
    return b"".join(cell(k, l, h, p, lay.cell_bytes // 8) for l in range(lay.layer_begin, lay.layer_end)
                    for h in range(lay.head_begin, lay.head_end) for p in range(lay.tokens))


def main(argv):
    requests = int(argv[0]) if argv else 0
    tokens = int(argv[1]) if len(argv) > 1 else 16
    with rankrun.Rankrun() as rr:
        dev = rr.mem_alloc(16)  # backend memory: device memory on nccl
        for g in rr.groups:
            buf = bytearray(rr.rank.to_bytes(8, "little", signed=True) + (1).to_bytes(8, "little"))
            rr.from_host(dev, buf)
            g.comm.all_reduce(dev, 2, "int64", "sum")
            rr.to_host(buf, dev)
            got = (int.from_bytes(buf[:8], "little", signed=True), int.from_bytes(buf[8:], "little"))
            if got != (sum(g.members), len(g.members)) or g.comm.size != len(g.members):
                print(f"worker: group {g.kind} {g.id}: all_reduce gave {got}", file=sys.stderr)
                return 1
        rr.mem_free(dev)
        rr.store_set(f"hello/{rr.rank}", f"rank {rr.rank} of pool {rr.pool}".encode())
        for q in range(rr.world_size):
            v = rr.store_wait(f"hello/{q}", 30).decode()
            if not v.startswith(f"rank {q} "):
                print(f"worker: store key hello/{q} holds {v!r}", file=sys.stderr)
                return 1
        verified = 0
        for k in range(requests):
            role = rr.kv_role(k)
            if role == rankrun.KV_NONE:
                continue
            lay = rr.kv_layout(k, tokens)
            buf = bytearray(region(lay, k)) if role == rankrun.KV_SEND else bytearray(b"\xee" * lay.bytes)
            dev = rr.mem_alloc(lay.bytes)
            rr.from_host(dev, buf)
            (rr.kv_send if role == rankrun.KV_SEND else rr.kv_recv)(k, tokens, dev, lay.bytes)
            rr.to_host(buf, dev)
            rr.mem_free(dev)
            if role == rankrun.KV_RECV:
                if bytes(buf) != region(lay, k):
                    print(f"worker: request {k}: the received region differs", file=sys.stderr)
                    return 1
                verified += lay.bytes
        print(f"worker ok: rank {rr.rank} ({rr.backend} {rr.pool}, tp {rr.coord('tp')}), {len(rr.groups)} groups, "
              f"{verified} KV bytes verified", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
