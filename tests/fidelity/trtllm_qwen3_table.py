#!/usr/bin/env python3
"""Every FP8 row of TensorRT-LLM's perf-overview table for Qwen3-235B-A22B
(H200 and H100, TP8, attention dp with ep 8), priced as the corpus row
trtllm-qwen3-235b-h100-tp8-1k1k prices its 1000/1000 one, with the GPU and
the lengths changed. It checks the busiest-dp-rank term
(docs/cost-model.md, "The busiest dp rank") on rows the corpus does not
hold; it prints a markdown table and fails on nothing.

Source of the measured figures (Total Output Throughput, tokens/s, 8 GPUs):
https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686aa854010d68bcbd0f4ab000221541ca6/docs/source/performance/perf-overview.md
section "Throughput Measurements", table "Qwen3-235B-A22B", columns
"H200 TP8 (FP8)" and "H100 TP8 (FP8)".

  RANKPLAN=build/rankplan SRCROOT=. python3 tests/fidelity/trtllm_qwen3_table.py
"""
import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("SRCROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
RANKPLAN = os.environ.get("RANKPLAN", os.path.join(SRC, "build", "rankplan"))
TEMPLATE = os.path.join(SRC, "tests", "fidelity", "perf", "trtllm-qwen3-235b-h100-tp8-1k1k.yaml")

# (gpu preset, input tokens, output tokens, published tokens/s on 8 GPUs);
# the table leaves H100 at 128/128, 2048/128 and 20000/2000 empty.
ROWS = [
    ("h200-sxm", 128, 128, 30429), ("h200-sxm", 128, 2048, 42821),
    ("h200-sxm", 128, 4096, 26852), ("h200-sxm", 500, 2000, 28026),
    ("h200-sxm", 1000, 1000, 23789), ("h200-sxm", 1000, 2000, 22061),
    ("h200-sxm", 2048, 128, 3331), ("h200-sxm", 2048, 2048, 16672),
    ("h200-sxm", 5000, 500, 3623), ("h200-sxm", 20000, 2000, 1876),
    ("h100-sxm", 128, 2048, 19658), ("h100-sxm", 128, 4096, 12447),
    ("h100-sxm", 500, 2000, 18351), ("h100-sxm", 1000, 1000, 14898),
    ("h100-sxm", 1000, 2000, 15136), ("h100-sxm", 2048, 2048, 9924),
    ("h100-sxm", 5000, 500, 3225),
]


def spec_text(template, gpu, isl, osl):
    out = []
    for line in template.splitlines():
        if line.startswith("  preset: h100-sxm"):
            line = "  preset: " + gpu
        elif line.startswith("  input_tokens:"):
            line = "  input_tokens: %d" % isl
        elif line.startswith("  output_tokens:"):
            line = "  output_tokens: %d" % osl
        out.append(line)
    return "\n".join(out) + "\n"


def predict(path):
    p = subprocess.run([RANKPLAN, "compile", path, "-o", "-"], capture_output=True,
                       text=True, timeout=300, check=False)
    if p.returncode != 0:
        return None
    plan = json.loads(p.stdout)
    return plan["estimates"]["throughput_tok_s"] / plan["world_size"]


def main():
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    print("| GPU | ISL/OSL | measured tok/s/GPU | predicted | ratio |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu, isl, osl, total in ROWS:
            path = os.path.join(tmp, "%s-%d-%d.yaml" % (gpu, isl, osl))
            with open(path, "w", encoding="utf-8") as f:
                f.write(spec_text(template, gpu, isl, osl))
            measured = total / 8.0
            pred = predict(path)
            if pred is None:
                print("| %s | %d/%d | %.0f | compile failed | - |" % (gpu, isl, osl, measured))
                continue
            print("| %s | %d/%d | %.0f | %.0f | %.2f |" % (gpu, isl, osl, measured, pred,
                                                         pred / measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
