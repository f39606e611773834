#!/bin/sh
# KV-transfer benchmark of the host backend (docs/benchmarks.md, "runtime";
# issue item: transfer bandwidth at least 0.5 of a plain memcpy measured on
# the same machine in the same run).
#
# Three plans, RUNS runs each (default 5), 20 requests of 128 tokens:
#  - tests/bench/bench_kv.yaml: one prefill rank -> one decode rank on one
#    node, 16 MiB per request over one shared-memory ring (2 ranks: no more
#    ranks than a 2-core machine has cores);
#  - tests/bench/bench_kv_2node.yaml: the same pair on 2 plan nodes (both
#    launchers on this machine), over one loopback TCP connection;
#  - tests/bench/tcp_stream.c (compiled here with cc): not rankrun, the
#    kernel's own figure: one process streams the same 320 MiB in 2 MiB
#    messages to another over loopback TCP, with the same memcpy reference,
#    so that the cross-node rows can be read against plain TCP;
#  - tests/runtime/pd-small.yaml: prefill tp 2 -> decode tp 4 on 2 plan
#    nodes (both launchers on this machine), 6 ranks; same-node pairs use
#    the rings, cross-node pairs loopback TCP.
# Per run it prints the memcpy reference, the transfer bandwidth and their
# ratio (rankrun's report: kv.memcpy_gbs, kv.gbs, kv.ratio_to_memcpy), and
# the same-node (ring) and cross-node (TCP) bandwidths, and the share of
# the ranks' runnable time spent waiting for a core (kv.cpu).
# Nothing is asserted: timings depend on the machine and its load.
#
# usage: tests/bench/bench_kv.sh [BUILD_DIR] [RUNS] [PORT]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
runs=${2:-5}
port=${3:-29650}
case $build in /*) ;; *) build=$root/$build ;; esac
for b in rankplan rankrun; do
  [ -x "$build/$b" ] || { echo "bench_kv: $build/$b not built" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/rankplan" compile "$root/tests/bench/bench_kv.yaml" -o "$tmp/kv2.json" >/dev/null 2>&1
${CC:-cc} -std=c11 -O2 -o "$tmp/tcp_stream" "$root/tests/bench/tcp_stream.c"
"$build/rankplan" compile "$root/tests/bench/bench_kv_2node.yaml" -o "$tmp/kv2n.json" >/dev/null 2>&1
"$build/rankplan" compile "$root/tests/runtime/pd-small.yaml" -o "$tmp/pd.json" >/dev/null 2>&1
A="--requests 20 --input-tokens 128 --host-memory-scale 0.0005"

row() { # plan run report
  python3 - "$@" <<'PY'
import json, sys
plan, run, path = sys.argv[1:4]
k = json.load(open(path))["kv"]
l = k["links"]
f = lambda v, d=3: "-" if v is None else f"{v:.{d}f}"
cpu = k.get("cpu") or {}
w = cpu.get("runq_wait_share")
print(f"| {plan} | {run} | {f(k['memcpy_gbs'])} | {f(k['gbs'])} | "
      f"{f(k['ratio_to_memcpy'], 2)} | {f(l['same_node']['gbs'])} | "
      f"{f(l['cross_node']['gbs'])} | {'-' if w is None else f'{100 * w:.0f}%'} |")
PY
}

echo "| plan | run | memcpy GB/s | transfer GB/s | ratio | same node GB/s | cross node GB/s | waiting for a core |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
i=1
while [ "$i" -le "$runs" ]; do
  port=$((port + 1))
  "$build/rankrun" "$tmp/kv2.json" --node 0 --rendezvous 127.0.0.1:$port $A \
    --report "$tmp/r.json" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; exit 1; }
  row "1 -> 1" "$i" "$tmp/r.json"
  i=$((i + 1))
done
two_nodes() { # plan-json label
  i=1
  while [ "$i" -le "$runs" ]; do
    port=$((port + 1))
    "$build/rankrun" "$1" --node 1 --rendezvous 127.0.0.1:$port $A \
      >"$tmp/log1" 2>&1 &
    "$build/rankrun" "$1" --node 0 --rendezvous 127.0.0.1:$port $A \
      --report "$tmp/r.json" >"$tmp/log" 2>&1 ||
      { cat "$tmp/log" "$tmp/log1" >&2; exit 1; }
    wait
    row "$2" "$i" "$tmp/r.json"
    i=$((i + 1))
  done
}
two_nodes "$tmp/kv2n.json" "1 -> 1, 2 nodes"
i=1
while [ "$i" -le "$runs" ]; do
  "$tmp/tcp_stream" 2097152 335544320 | awk -v run="$i" \
    '{ printf "| plain TCP stream | %d | %s | %s | %s | - | %s | - |\n", run, $5, $2, $8, $2 }'
  i=$((i + 1))
done
two_nodes "$tmp/pd.json" "pd-small"
