#!/bin/sh
# Compile-time benchmark: wall time and peak RSS of `rankplan compile` at
# 1,024, 8,192, 32,768 and 131,072 ranks (docs/benchmarks.md, "compile").
#
# Each size is a Llama-3.1-70B deployment on 8-GPU H200 nodes, disaggregated:
# half the GPUs in prefill instances (tp 8), half in decode instances (tp 4),
# so every group kind, the reshard maps and the memory ledger run.
# Results are printed as a Markdown table; nothing is asserted (timings
# depend on the machine).
#
# usage: tests/bench/bench_compile.sh [BUILD_DIR] [SIZES...]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/bench_lib.sh
. "$root/tests/bench/bench_lib.sh"
rp=$(bench_rankplan bench_compile "$root" "${1:-build}")
[ $# -gt 0 ] && shift
sizes=${*:-1024 8192 32768 131072}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| ranks | nodes | wall time (s) | peak RSS (MiB) | plan size (MB) | us per rank |"
echo "|------:|------:|--------------:|---------------:|---------------:|------------:|"
for n in $sizes; do
  nodes=$((n / 8))
  bench_spec "$n" > "$tmp/spec.yaml"
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$rp" compile "$tmp/spec.yaml" -o "$tmp/plan.json" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  read -r wall rss < "$tmp/time"
  size=$(wc -c < "$tmp/plan.json")
  awk -v n="$n" -v nodes="$nodes" -v w="$wall" -v r="$rss" -v s="$size" 'BEGIN {
    printf "| %d | %d | %.2f | %.0f | %.1f | %.1f |\n", n, nodes, w, r / 1024, s / 1e6, w * 1e6 / n }'
done
