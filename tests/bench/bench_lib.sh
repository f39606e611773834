# shellcheck shell=sh
# Sourced by the compile and render benchmarks.

# bench_rankplan NAME ROOT BUILD_DIR: the path of BUILD_DIR's rankplan
# (BUILD_DIR relative to the source root ROOT unless absolute); exits 2
# naming the script NAME when it is not built.
bench_rankplan() {
  b=$3
  case $b in /*) ;; *) b=$2/$b ;; esac
  [ -x "$b/rankplan" ] || { echo "$1: $b/rankplan not built" >&2; exit 2; }
  echo "$b/rankplan"
}

# `bench_spec N` prints the
# spec of their N-rank plan: Llama-3.1-70B on N / 8 H200 nodes of 8 GPUs,
# disaggregated, half the GPUs in prefill instances (tp 8), half in decode
# instances (tp 4), so every group kind, the reshard maps and the memory
# ledger run.
bench_spec() {
  n=$1
  nodes=$((n / 8))
  pre=$((n / 2 / 8))
  dec=$((n / 2 / 4))
  cat <<SPEC
version: 1
name: bench-$n
model:
  preset: llama-3.1-70b
hardware:
  preset: h200-sxm
  nodes: $nodes
  gpus_per_node: 8
workload:
  input_tokens: 4000
  output_tokens: 500
slo:
  ttft: 600 ms
  tpot: 40 ms
deployment:
  mode: disaggregated
  engine: vllm
  pools:
    - name: prefill
      role: prefill
      replicas: $pre
      tp: 8
    - name: decode
      role: decode
      replicas: $dec
      tp: 4
SPEC
}
