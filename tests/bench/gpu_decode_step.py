#!/usr/bin/env python3
"""A whole decode step on one NVIDIA GPU against the cost model's price of
it (docs/cost-model.md, "Decode"; docs/benchmarks.md, "GPU: a whole
decode step").

Measure (needs a GPU and PyTorch): a Llama-3.1-8B-shaped decoder (32
layers, hidden 4096, 32 query and 8 KV heads of 128, intermediate 14336,
vocabulary 128256, bf16, random weights) decodes one token for M
sequences, each attending to L = 1024 cached tokens: per layer an RMSNorm,
the qkv product, scaled_dot_product_attention over the layer's KV (grouped
heads, FlashAttention where PyTorch picks it), the o product and residual,
an RMSNorm, the gate/up product, SiLU x up, the down product and
residual; then the final norm and the logits. The step is captured in one
CUDA graph, as engines run decode, and timed by CUDA events (median of 9
replays of 10 steps); rotary embedding, sampling and the KV write are left
out. M = 1, 8, 32, 64, 128 and 256. The same step without the attention
call (its query passed on in its place) is timed too: the difference is
the attention's time, and its KV bytes over it the bandwidth it reads at.

Predict (no GPU): the same step as rankplan prices it: a decode pool of
one H200 (plans/catalog/hardware/h200-sxm.yaml) at batch M (serving.max_num_seqs)
with 1000 input and 48 output tokens (a mean context of 1024), fed by
31 prefill GPUs so that it runs full, generic
engine, and a calibration file that sets step_overhead_s and
seq_overhead_s to their floors, since a replayed graph has no host work
between its kernels. It prints the plan's decode step_ms beside the
measured one.

usage: gpu_decode_step.py [--out FILE.json]
       gpu_decode_step.py --predict RANKPLAN --from FILE.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from gpu_common import capture, timed, torch, warm_up, write_json  # torch: None without PyTorch

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, CTX = 32, 4096, 32, 8, 128, 14336, 128256, 1024
BATCHES = [1, 8, 32, 64, 128, 256]


def norm(x, w):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def build():
    bf = dict(device="cuda", dtype=torch.bfloat16)
    w = lambda n, k: torch.randn(n, k, **bf) * 0.02  # noqa: E731
    layers = [{"qkv": w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o": w(HIDDEN, HEADS * HEAD_DIM),
               "gu": w(2 * INTER, HIDDEN), "down": w(HIDDEN, INTER), "n1": torch.ones(HIDDEN, **bf),
               "n2": torch.ones(HIDDEN, **bf),
               "k": torch.randn(max(BATCHES), KV_HEADS, CTX, HEAD_DIM, **bf),
               "v": torch.randn(max(BATCHES), KV_HEADS, CTX, HEAD_DIM, **bf)} for _ in range(LAYERS)]
    return layers, w(VOCAB, HIDDEN), torch.ones(HIDDEN, **bf)


def step(layers, head, fnorm, x, attend=True):
    F = torch.nn.functional
    b = x.shape[0]
    for p in layers:
        q = F.linear(norm(x, p["n1"]), p["qkv"])[:, :HEADS * HEAD_DIM].view(b, HEADS, 1, HEAD_DIM)
        a = F.scaled_dot_product_attention(q, p["k"][:b], p["v"][:b], enable_gqa=True) if attend else q
        x = x + F.linear(a.reshape(b, HEADS * HEAD_DIM), p["o"])
        g, u = F.linear(norm(x, p["n2"]), p["gu"]).chunk(2, dim=-1)
        x = x + F.linear(F.silu(g) * u, p["down"])
    return F.linear(norm(x, fnorm), head)


def timed_graph(fn):
    """Milliseconds of one replay of fn captured in a CUDA graph."""
    warm_up(fn, 2)
    return timed(capture(fn).replay, reps=10, trials=9, warm=2) * 1e3


def measure(out_path):
    if torch is None or not torch.cuda.is_available():
        print("gpu_decode_step: no CUDA device", file=sys.stderr)
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel
    p = torch.cuda.get_device_properties(0)
    res = {"device": p.name, "torch": torch.__version__, "cuda": torch.version.cuda, "ctx": CTX, "rows": []}
    print(f"{p.name}, torch {torch.__version__}, CUDA {torch.version.cuda}; context {CTX}")
    layers, head, fnorm = build()
    weights = sum(t.numel() * 2 for l in layers for k, t in l.items() if k not in ("k", "v")) + head.numel() * 2
    for b in BATCHES:
        x = torch.randn(b, HIDDEN, device="cuda", dtype=torch.bfloat16)
        backend = "flash"
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                ms = timed_graph(lambda: step(layers, head, fnorm, x))
        except RuntimeError:
            backend = "default"
            ms = timed_graph(lambda: step(layers, head, fnorm, x))
        bare = timed_graph(lambda: step(layers, head, fnorm, x, attend=False))
        kv = LAYERS * 2 * b * KV_HEADS * CTX * HEAD_DIM * 2
        res["rows"].append({"batch": b, "ms": ms, "ms_without_attention": bare, "attention": backend,
                            "weight_bytes": weights, "kv_bytes": kv})
        print(f"  M={b:3d}: {ms:7.3f} ms ({backend} attention), {bare:7.3f} ms without it; weights "
              f"{weights / 1e9:.2f} GB + KV {kv / 1e9:.2f} GB read: {(weights + kv) / ms / 1e6:.0f} GB/s; "
              f"the attention's KV at {kv / max(ms - bare, 1e-9) / 1e6:.0f} GB/s")
    write_json(out_path, res)
    return 0


SPEC = """version: 1
name: decode-step-{b}
model: {{ preset: llama-3.1-8b }}
hardware: {{ preset: h200-sxm, nodes: 4, gpus_per_node: 8 }}
workload: {{ input_tokens: 1000, output_tokens: 48, concurrency: 1000000 }}
serving: {{ max_num_seqs: {b} }}
slo: {{ ttft: 1000000 s, tpot: 10 s }}
search: {{ headroom: 1.0 }}
deployment:
  mode: disaggregated
  engine: generic
  pools:
    - {{ name: prefill, role: prefill, replicas: 31, tp: 1 }}
    - {{ name: decode, role: decode, replicas: 1, tp: 1 }}
"""


def predict(rankplan, src):
    with open(src, encoding="utf-8") as f:
        res = json.load(f)
    print(f"{res['device']}, context {res['ctx']}: measured step against rankplan's decode step_ms")
    print("| M | measured ms | predicted ms | predicted/measured | compute ms | HBM ms | overhead ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        cal = os.path.join(d, "cal.json")
        with open(cal, "w", encoding="utf-8") as f:
            json.dump({"format": "rankplan.calibration/1", "step_overhead_s": 1e-6, "seq_overhead_s": 1e-8}, f)
        for r in res["rows"]:
            spec, plan = os.path.join(d, f"s{r['batch']}.yaml"), os.path.join(d, f"p{r['batch']}.json")
            with open(spec, "w", encoding="utf-8") as f:
                f.write(SPEC.format(b=r["batch"]))
            p = subprocess.run([rankplan, "compile", spec, "--calibration", cal, "-o", plan],
                               capture_output=True, text=True, check=False)
            if p.returncode != 0:
                print(f"rankplan compile failed for M={r['batch']}: {p.stderr.strip()}", file=sys.stderr)
                return 1
            with open(plan, encoding="utf-8") as f:
                pools = json.load(f)["estimates"]["pools"]
            dec = next(x["decode"] for x in pools if x["pool"] == "decode")
            if dec["batch"] != r["batch"]:
                print(f"the plan decodes {dec['batch']} sequences, not {r['batch']}", file=sys.stderr)
                return 1
            print(f"| {r['batch']} | {r['ms']:.3f} | {dec['step_ms']:.3f} | {dec['step_ms'] / r['ms']:.2f} | "
                  f"{dec['compute_ms']:.3f} | {dec['hbm_ms']:.3f} | {dec['overhead_ms']:.3f} |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--predict", default=None, metavar="RANKPLAN")
    ap.add_argument("--from", dest="src", default=None)
    a = ap.parse_args()
    if a.predict:
        if not a.src:
            ap.error("--predict needs --from FILE.json")
        return predict(a.predict, a.src)
    return measure(a.out)


if __name__ == "__main__":
    sys.exit(main())
