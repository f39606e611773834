#!/usr/bin/env python3
"""Memory a CUDA graph takes outside PyTorch's allocator, per graph and per
layer, on one NVIDIA GPU: the figure behind the ledger's count of
TensorRT-LLM's decode graphs (docs/memory.md, "CUDA graphs"), which takes
TensorRT-LLM PR #12895's "about 10 MiB" a graph for DeepSeek-R1's 61 layers
and scales it by the rank's layers.

A decode step of a Llama-3.1-8B-shaped decoder (hidden 4096, 32 query and
8 KV heads of 128, intermediate 14336, bf16, random weights, attention by
scaled_dot_product_attention over a fixed 256-token KV) is captured at the
34 batch sizes TensorRT-LLM captures by default (1 to 31, 32, 64, 128),
all graphs in one shared memory pool as engines capture them, with 8, 16
and 32 layers. After each capture it reads cudaMemGetInfo's used bytes
and PyTorch's reserved bytes: what grows outside PyTorch's allocator is
the graph's own data (its executable and kernel nodes), what grows inside
is the shared pool. The driver maps memory in 2 MiB steps, most captures
showing none, so each size is captured 4 times (136 graphs) and the mean
is taken over all but the first capture, which also sizes the pool. Per
layer count it prints that mean, and the least-squares line over the
layer counts.

usage: gpu_graph_memory.py [--out FILE.json]
"""
import argparse
import statistics
import sys

from gpu_common import capture, line_fit, torch, warm_up, write_json  # torch: None without PyTorch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, CTX = 4096, 32, 8, 128, 14336, 256
SIZES = list(range(1, 32)) + [32, 64, 128]
REPEAT = 4  # the driver maps memory in 2 MiB steps: the mean over 4 x 34 graphs resolves less


def norm(x):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)


def make_layer():
    w = lambda n, k: torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02  # noqa: E731
    return {"qkv": w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o": w(HIDDEN, HEADS * HEAD_DIM),
            "gu": w(2 * INTER, HIDDEN), "down": w(HIDDEN, INTER),
            "k": torch.randn(128, KV_HEADS, CTX, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
            "v": torch.randn(128, KV_HEADS, CTX, HEAD_DIM, device="cuda", dtype=torch.bfloat16)}


def layer_step(p, x):
    b = x.shape[0]
    qkv = torch.nn.functional.linear(norm(x), p["qkv"])
    q = qkv[:, :HEADS * HEAD_DIM].view(b, HEADS, 1, HEAD_DIM)
    a = torch.nn.functional.scaled_dot_product_attention(q, p["k"][:b], p["v"][:b], enable_gqa=True)
    x = x + torch.nn.functional.linear(a.reshape(b, HEADS * HEAD_DIM), p["o"])
    g, u = torch.nn.functional.linear(norm(x), p["gu"]).chunk(2, dim=-1)
    return x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, p["down"])


def used():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free, torch.cuda.memory_reserved()


def capture_all(layers):
    """Growth outside and inside PyTorch's allocator per captured graph."""
    xs = {b: torch.randn(b, HIDDEN, device="cuda", dtype=torch.bfloat16) for b in SIZES}

    def step(b):
        x = xs[b]
        for p in layers:
            x = layer_step(p, x)
        return x
    def every():  # each size once, no output kept alive
        for b in SIZES:
            step(b)
    warm_up(every, 1)
    pool, graphs, rows = torch.cuda.graph_pool_handle(), [], []
    for b in list(reversed(SIZES)) * REPEAT:  # largest first, as engines capture: the pool is sized once
        u0, r0 = used()
        g = capture(lambda: step(b), pool=pool)  # noqa: B023 (captured at once)
        u1, r1 = used()
        graphs.append(g)
        rows.append({"batch": b, "outside": (u1 - u0) - (r1 - r0), "inside": r1 - r0})
    return graphs, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        print("gpu_graph_memory: no CUDA device", file=sys.stderr)
        return 2
    p = torch.cuda.get_device_properties(0)
    res = {"device": p.name, "torch": torch.__version__, "cuda": torch.version.cuda, "runs": []}
    print(f"{p.name}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    all_layers = [make_layer() for _ in range(32)]
    for n in (8, 16, 32):
        graphs, rows = capture_all(all_layers[:n])
        per = [r["outside"] for r in rows[1:]]  # the first capture also sizes the pool
        mean = statistics.mean(per)
        res["runs"].append({"layers": n, "graphs": len(rows), "rows": rows, "outside_mean": mean})
        print(f"{n:2d} layers: {len(rows)} graphs, outside PyTorch {mean / 2**20:.3f} MiB a graph "
              f"(median {statistics.median(per) / 2**20:.3f}), pool {sum(r['inside'] for r in rows) / 2**20:.1f} MiB")
        del graphs
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    xs = [r["layers"] for r in res["runs"]]
    ys = [r["outside_mean"] for r in res["runs"]]
    fixed, slope = line_fit(xs, ys)
    res["per_layer_bytes"], res["fixed_bytes"] = slope, fixed
    print(f"least squares: {slope / 2**20:.4f} MiB a layer a graph + {fixed / 2**20:.3f} MiB; "
          f"61 layers: {(fixed + slope * 61) / 2**20:.2f} MiB a graph")
    write_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
