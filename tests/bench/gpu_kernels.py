#!/usr/bin/env python3
"""Kernel-level figures of one NVIDIA GPU that the cost model's constants
stand for (docs/cost-model.md, "Constants"; docs/benchmarks.md, "GPU:
kernel figures"), measured with PyTorch's cuBLAS and CUDA events:

  1. memory: cudaMemGetInfo's total (the figure vLLM and SGLang multiply
     by their memory fraction), and what the CUDA context and cuBLAS's
     first matrix product take before any tensor of the engine exists;
  2. decode reads (in CUDA graphs, as engines run decode): bf16 products of M tokens by the weight matrices of
     Llama-3.1-70B's layer at tp 1, 2, 4 and 8 (shapes from the model's
     config: hidden 8192, 64 query and 8 KV heads of 128, intermediate
     28672), M = 1 to 256; the bytes read (weights plus activations) over
     the time, against the GPU's nominal memory bandwidth, and per M the
     least-squares line t = fixed + bytes / bandwidth over the 16
     matrices: the `hbm_efficiency` and the fixed time per product
     (`kernel_stall_s`) a dense decode step's products show;
  3. prefill products: the same matrices at M = 2048 to 16384 tokens; the
     FLOP rate against the nominal dense bf16 rate: the ceiling of
     `mfu_prefill` for the linear layers alone;
  4. kernel boundaries: 2,000 one-element kernels replayed as one CUDA
     graph, the time per kernel (the floor of `kernel_stall_s`), and the
     same kernels issued eagerly by PyTorch, the CPU time per kernel (the
     floor of `eager_kernel_s`, below an engine's Python per kernel).

Each product cycles over enough copies of its weight to exceed 4x the L2
cache, so no read is served from L2. Times are the median of 7 timed
repetitions of 20 products after 3 warm-up repetitions.

usage: gpu_kernels.py [--out FILE.json] [--bandwidth GB/s] [--bf16 TFLOP/s]
                      [--fp8] [--fp8-tflops TFLOP/s]
       gpu_kernels.py --from FILE.json   (reprints an --fp8 run's summary)
(defaults: the H200 SXM catalog entry's 4800 GB/s, 989.5 and 1979 TFLOP/s,
plans/catalog/hardware/h200-sxm.yaml)."""
import argparse
import json
import statistics
import sys
import time

from gpu_common import capture, line_fit, timed, torch, warm_up, write_json  # torch: None without PyTorch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 8192, 64, 8, 128, 28672


def shapes(tp):
    """(name, K, N) of one Llama-3.1-70B layer's products at tp."""
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM // tp
    return [("qkv", HIDDEN, qkv), ("o", HEADS * HEAD_DIM // tp, HIDDEN),
            ("gate_up", HIDDEN, 2 * INTER // tp), ("down", INTER // tp, HIDDEN)]


def graph_timed(fn, reps=20):
    """Median seconds of one call of fn, fn captured reps times in one CUDA
    graph (as engines run decode steps), so no CPU issue time is counted."""
    warm_up(fn, 3)
    return timed(capture(fn, reps).replay, reps=1, trials=9) / reps


def fit(rows):
    """Least-squares t = fixed + bytes / bw over rows: (fixed s, bw B/s)."""
    fixed, b = line_fit([r["bytes"] for r in rows], [r["s"] for r in rows])
    return fixed, 1 / b


def weights(k, n, l2):
    """Copies of an N x K bf16 weight (the engines' layout: y = x W^T),
    together over 4x the L2 cache."""
    nbytes = k * n * 2
    copies = max(1, -(-4 * l2 // nbytes))
    return [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]


def products(ms, l2, bw, peak):
    rows = []
    for tp in (1, 2, 4, 8):
        for name, k, n in shapes(tp):
            ws = weights(k, n, l2)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                i = [0]

                def step():
                    torch.nn.functional.linear(x, ws[i[0] % len(ws)])
                    i[0] += 1
                t = graph_timed(step) if m in DECODE_M else timed(step)
                t_eager = timed(step) if m in DECODE_M else t
                nbytes = (k * n + m * k + m * n) * 2
                flops = 2 * m * k * n
                rows.append({"tp": tp, "matrix": name, "k": k, "n": n, "m": m, "s": t, "s_eager": t_eager,
                             "bytes": nbytes, "gbs": nbytes / t / 1e9,
                             "hbm_fraction": nbytes / t / 1e9 / bw,
                             "tflops": flops / t / 1e12, "mfu": flops / t / 1e12 / peak})
            del ws
            torch.cuda.empty_cache()
    return rows


FP8_M = [16, 32, 64, 128, 192, 256, 384, 512, 768, 1024]
LAYERS = 80  # Llama-3.3-70B's num_hidden_layers (its config.json)
# The cost model's defaults (docs/cost-model.md, "Constants"), for the
# comparison line only.
HBM_EFF, MFU_DECODE, STALL = 0.80, 0.50, 5e-6


def fp8_products(l2, bw, peak):
    """torch._scaled_mm rows per tp, matrix and M (FP8_M)."""
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows = []
    for tp in (1, 2, 4, 8):
        for name, k, n in shapes(tp):
            copies = max(1, -(-4 * l2 // (k * n)))
            ws = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
            for m in FP8_M:
                x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                i = [0]

                def step():
                    torch._scaled_mm(x, ws[i[0] % len(ws)].t(), one, one, out_dtype=torch.bfloat16)
                    i[0] += 1
                t = graph_timed(step)
                nbytes, flops = k * n + m * k + 2 * m * n, 2 * m * k * n
                rows.append({"tp": tp, "matrix": name, "k": k, "n": n, "m": m, "s": t, "bytes": nbytes,
                             "roof_s": max(nbytes / bw / 1e9, flops / peak / 1e12),
                             "hbm_fraction": nbytes / t / 1e9 / bw, "mfu": flops / t / 1e12 / peak})
            del ws
            torch.cuda.empty_cache()
    return rows


def fp8_summary(rows, bw, peak):
    print(f"fp8 products (in CUDA graphs), fraction of {bw:.0f} GB/s read:")
    table(rows, FP8_M, "hbm_fraction", 7)
    print(f"fp8 products, fraction of {peak:.0f} TFLOP/s:")
    table(rows, FP8_M, "mfu", 7)
    for m in FP8_M:
        r = [x for x in rows if x["m"] == m]
        print(f"  M={m:4d}: median over the {len(r)} matrices {statistics.median(x['mfu'] for x in r):.3f} of the rate, "
              f"{statistics.median(x['roof_s'] / x['s'] for x in r):.3f} of the roofline")
    print(f"tp 2, one layer's four products x {LAYERS} layers (a decode step's linear part); 'model' is the\n"
          f"  cost model's form with its defaults: max(weights / ({HBM_EFF} x {bw:.0f} GB/s), FLOPs / ({MFU_DECODE}"
          f" x {peak:.0f} TFLOP/s)) + {STALL * 1e6:.0f} us per product")
    prev = None
    for m in FP8_M:
        r = [x for x in rows if x["tp"] == 2 and x["m"] == m]
        t, roof = LAYERS * sum(x["s"] for x in r), LAYERS * sum(x["roof_s"] for x in r)
        w, fl = LAYERS * sum(x["k"] * x["n"] for x in r), LAYERS * sum(2 * m * x["k"] * x["n"] for x in r)
        model = max(w / (HBM_EFF * bw * 1e9), fl / (MFU_DECODE * peak * 1e12)) + LAYERS * len(r) * STALL
        grow = "" if prev is None else f", {(t - prev[1]) / (m - prev[0]) * 1e3:.4f} ms per token since M={prev[0]}"
        print(f"  M={m:4d}: {t * 1e3:7.3f} ms (roofline {roof * 1e3:7.3f} ms, model {model * 1e3:7.3f} ms){grow}")
        prev = (m, t)


def boundaries():
    a = torch.zeros(1, device="cuda")
    n = 2000
    warm_up(lambda: a.add_(1), 3)
    graph_s = timed(capture(lambda: a.add_(1), n).replay, reps=5) / n
    torch.cuda.synchronize()
    eager = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            a.add_(1)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        eager.append((t1 - t0) / n)
    return {"kernels": n, "graph_s_per_kernel": graph_s,
            "eager_cpu_s_per_kernel": statistics.median(eager)}


def memory():
    free0, total = torch.cuda.mem_get_info()
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, a)
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    return {"total_bytes": total, "total_mib": total / 2**20, "total_gib": total / 2**30,
            "used_after_context_bytes": total - free0,
            "used_after_first_product_bytes": total - free1,
            "torch_allocated_bytes": torch.cuda.memory_reserved()}


def table(rows, ms, key, width):
    """One line per tp and matrix: rows' `key` at each M of ms."""
    print("  tp  matrix       K      N " + " ".join(f"{'M=' + str(m):>{width}}" for m in ms))
    for tp in (1, 2, 4, 8):
        for name, k, n in shapes(tp):
            r = [x for x in rows if x["tp"] == tp and x["matrix"] == name and x["m"] in ms]
            print(f"  {tp:2d}  {name:8s} {k:6d} {n:6d} " + " ".join(f"{x[key]:{width}.3f}" for x in r))


def summary(rows, bw, peak):
    print(f"decode products (bf16, in CUDA graphs), fraction of {bw:.0f} GB/s read:")
    table(rows, DECODE_M, "hbm_fraction", 7)
    for m in DECODE_M:
        fixed, b = fit([x for x in rows if x["m"] == m])
        print(f"  M={m}: t = {fixed * 1e6:.2f} us + bytes / ({b / 1e9:.0f} GB/s = "
              f"{b / 1e9 / bw:.3f} of nominal), least squares over the 16 matrices")
    print(f"prefill products (bf16), fraction of {peak:.1f} TFLOP/s:")
    table(rows, PREFILL_M, "mfu", 8)


DECODE_M = [1, 8, 32, 64, 128, 256]
PREFILL_M = [2048, 4096, 8192, 16384]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--bandwidth", type=float, default=4800.0, help="nominal GB/s")
    ap.add_argument("--bf16", type=float, default=989.5, help="nominal dense bf16 TFLOP/s")
    ap.add_argument("--fp8", action="store_true", help="also the fp8 products (item 5)")
    ap.add_argument("--fp8-tflops", type=float, default=1979.0, help="nominal dense fp8 TFLOP/s")
    ap.add_argument("--from", dest="src", default=None,
                    help="reprint the fp8 summary from an --out FILE.json of an --fp8 run (no GPU)")
    a = ap.parse_args()
    if a.src:
        res = json.load(open(a.src))
        fp8_summary(res["fp8_products"], res["nominal_gbs"], res.get("nominal_fp8_tflops", a.fp8_tflops))
        return 0
    if torch is None or not torch.cuda.is_available():
        print("gpu_kernels: no CUDA device", file=sys.stderr)
        return 2
    p = torch.cuda.get_device_properties(0)
    l2 = getattr(p, "L2_cache_size", 64 << 20)
    res = {"device": p.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "l2_bytes": l2, "nominal_gbs": a.bandwidth, "nominal_bf16_tflops": a.bf16, "nominal_fp8_tflops": a.fp8_tflops}
    res["memory"] = memory()
    print(f"{p.name}, torch {torch.__version__}, CUDA {torch.version.cuda}, L2 {l2 >> 20} MiB")
    m = res["memory"]
    print(f"memory: total {m['total_bytes']} bytes ({m['total_mib']:.1f} MiB, "
          f"{m['total_gib']:.2f} GiB); used after the context "
          f"{m['used_after_context_bytes'] / 2**20:.0f} MiB, after the first product "
          f"{m['used_after_first_product_bytes'] / 2**20:.0f} MiB")
    res["boundaries"] = boundaries()
    b = res["boundaries"]
    print(f"kernel boundaries: {b['graph_s_per_kernel'] * 1e6:.2f} us per kernel in a CUDA graph, "
          f"{b['eager_cpu_s_per_kernel'] * 1e6:.2f} us CPU per kernel issued eagerly")
    res["products"] = products(DECODE_M + PREFILL_M, l2, a.bandwidth, a.bf16)
    summary(res["products"], a.bandwidth, a.bf16)
    if a.fp8:
        res["fp8_products"] = fp8_products(l2, a.bandwidth, a.fp8_tflops)
        fp8_summary(res["fp8_products"], a.bandwidth, a.fp8_tflops)
    write_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
