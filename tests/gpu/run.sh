#!/bin/sh
# The GPU checks of rankrun, in one script for a machine with NVIDIA GPUs
# (issue 9, item 6; docs/benchmarks.md, "runtime"):
#  1. tests/gpu/check_nccl.sh: builds with NCCL required, runs the preflight
#     of a one-node plan over every visible GPU;
#  2. a device-to-device reference: cudaMemcpy of 256 MiB within GPU 0,
#     by a small helper this script compiles against the CUDA runtime;
#  3. with 2 GPUs or more: the KV benchmark, tests/bench/bench_kv.yaml (one
#     prefill rank on GPU 0, one decode rank on GPU 1, same node) with
#     --backend nccl, 8 requests of 2048 tokens; it prints the same-node
#     transfer bandwidth, the device-to-device reference measured by the
#     sending rank in the same run, and their ratio (target >= 0.8).
#     With one GPU the ratio is skipped: NCCL cannot put two ranks of one
#     communicator on one GPU.
# Exits non-zero when a build, a preflight or a KV verification fails.
#
# usage: tests/gpu/run.sh [BUILD_DIR]   (run from the repository root)
set -eu
build=${1:-build-gpu}
out=${OUT:-$(mktemp -d)}
export OUT="$out"
cuda=${CUDA_HOME:-/usr/local/cuda}

sh tests/gpu/check_nccl.sh "$build"
ngpu=$(nvidia-smi -L | grep -c '^GPU ')

cat > "$out/d2d.c" <<'C'
#include <cuda_runtime.h>
#include <stdio.h>
int main(void) {
  size_t n = (size_t)256 << 20;
  void *a = NULL, *b = NULL;
  cudaEvent_t e0, e1;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
    fprintf(stderr, "d2d: cudaMalloc of 2 x %zu bytes failed\n", n);
    return 1;
  }
  cudaMemset(a, 1, n);
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 0;
  for (int i = 0; i < 6; i++) {
    float ms = 0;
    cudaEventRecord(e0, 0);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0 && (best == 0 || ms < best)) best = ms;
  }
  if (cudaGetLastError() != cudaSuccess || best <= 0) {
    fprintf(stderr, "d2d: the copy failed\n");
    return 1;
  }
  printf("d2d: cudaMemcpy device to device, %zu bytes, best of 5: %.1f GB/s\n",
         n, (double)n / (best / 1e3) / 1e9);
  return 0;
}
C
cc -O2 -I"$cuda/include" "$out/d2d.c" -o "$out/d2d" -L"$cuda/lib64" -lcudart \
  -Wl,-rpath,"$cuda/lib64"
CUDA_VISIBLE_DEVICES=0 "$out/d2d"

if [ "$ngpu" -lt 2 ]; then
  echo "SKIP kv ratio: $ngpu GPU; the same-node KV benchmark needs 2 GPUs" \
       "(NCCL cannot put two ranks of one communicator on one GPU)"
  exit 0
fi
"$build/rankplan" compile tests/bench/bench_kv.yaml -o "$out/kv-bench.json"
"$build/rankrun" "$out/kv-bench.json" --node 0 --backend nccl --timeout 300 \
  --requests 8 --input-tokens 2048 --quiet --report "$out/kv-report.json"
python3 - "$out/kv-report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "ok", r["first_failure"]
k = r["kv"]
assert k["transfer_path"] == "grouped", k["transfer_path"]
assert k["cells_verified"] > 0 and k["bytes"] == sum(x["bytes"] for x in k["per_request"]), k
same = k["links"]["same_node"]
ratio = same["gbs"] / k["memcpy_gbs"] if same["gbs"] and k["memcpy_gbs"] else None
print(f"kv: {k['requests']} requests, {k['bytes']} bytes, {k['cells_verified']} cells verified")
print(f"kv: same node {same['gbs']:.1f} GB/s, {k['reference']} {k['memcpy_gbs']:.1f} GB/s, "
      f"ratio {ratio:.2f} (target >= 0.8)")
for x in k["per_request"]:
    s = x["links"]["same_node"]
    print(f"  request {x['request']}: {x['bytes']} bytes, same node {s['gbs']} GB/s")
PY
echo "gpu run: ok (outputs in $out)"
