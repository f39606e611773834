#!/usr/bin/env bash
# Benchmark of `rankplan search`: DeepSeek-V3 (fp8 weights) on H200 clusters
# of 64, 256, 1,024 and 4,096 GPUs, full aggregated + disaggregated search
# (deployment.mode: search, no pools), from plans/examples/deepseek-v3-1024.yaml.
# Prints one markdown row per size: GPUs, wall seconds (best of 3),
# candidates evaluated, valid layouts and the winner.
#
# usage: tests/bench/bench_search.sh [BUILD_DIR] [ENGINE]
#   BUILD_DIR defaults to build; ENGINE (default: the example's sglang)
#   replaces deployment.engine: `generic` searches every layout the
#   validation rules allow, a named engine only those it can run.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-build}"
engine="${2:-sglang}"
case "$engine" in generic | vllm | sglang | trtllm) ;; *) echo "bench_search: unknown engine $engine" >&2; exit 2 ;; esac
rp="$build/rankplan"
[ -x "$rp" ] || { echo "bench_search: $rp not built" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
src="$root/plans/examples/deepseek-v3-1024.yaml"
echo "| GPUs | wall s (best of 3) | candidates | valid layouts P/D/agg | winner |"
echo "|---:|---:|---:|---|---|"
for gpus in 64 256 1024 4096; do
  nodes=$((gpus / 8))
  spec="$tmp/dsv3-$gpus.yaml"
  # Keep everything above `pools:`, switch to search mode, set the size.
  sed -n '/^  pools:/q;p' "$src" |
    sed -e 's/mode: disaggregated/mode: search/' -e "s/^  nodes: .*/  nodes: $nodes/" \
      -e "s/^  engine: .*/  engine: $engine/" >"$spec"
  best=""
  for _ in 1 2 3; do
    s=$(date +%s.%N)
    "$rp" search "$spec" --catalog "$root/plans/catalog" --format json --top 1 >"$tmp/out.json" 2>"$tmp/err.txt"
    e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
  done
  python3 - "$tmp/out.json" "$gpus" "$best" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = d["valid_layouts"]
w = d["results"][0]
print(f"| {int(sys.argv[2]):,} | {float(sys.argv[3]):.3f} | {d['budget']['evaluated']:,} | "
      f"{v['prefill']}/{v['decode']}/{v['aggregated']} | {w['layout']} |")
PY
done
