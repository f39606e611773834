#!/bin/sh
# The GPU checks of rankrun, in one script for a machine with NVIDIA GPUs
# (docs/benchmarks.md, "GPU"). Every step prints PASS, FAIL or SKIP lines;
# logs and reports go to $OUT (a temporary folder when unset).
#  1. build with NCCL required (meson setup only when BUILD_DIR has no
#     build yet);
#  2. nccl_self (tests/gpu/nccl_self.c): the backend's calls on GPU 0 in a
#     one-member communicator: copies, collectives, p2p_post/p2p_wait to
#     self with RT_P2P_MAX operations, copy_ref, teardown, and the failure
#     paths (a refused group, an init whose peer never comes: timeout and
#     ncclCommAbort);
#  3. tests/gpu/check_nccl.sh: the preflight of a one-node plan over every
#     GPU, the memory copy probe and its calibration, and each rank's
#     ledger allocated with cudaMalloc after the cudaMemGetInfo check;
#  4. a device-to-device cudaMemcpy of 256 MiB within GPU 0 by a small
#     helper compiled against the CUDA runtime, next to the probe's figure;
#  5. with 2 GPUs or more: the KV benchmark, tests/bench/bench_kv.yaml (one
#     prefill rank on GPU 0, one decode rank on GPU 1, same node) with
#     --backend nccl, 8 requests of 2048 tokens, every cell verified; it
#     prints the same-node transfer bandwidth, the device-to-device
#     reference measured by the sending rank in the same run, and their
#     ratio (target >= 0.8). With one GPU no KV can move through NCCL (a
#     communicator cannot hold two ranks on one GPU: "Duplicate GPU
#     detected"), so it runs a two-rank plan instead whose rank 1 has no
#     GPU, and checks that the deployment fails cleanly and names it;
#  6. with PyTorch importable and a GPU visible: tests/bench/gpu_kernels.py
#     --fp8, gpu_graph_memory.py and gpu_decode_step.py, their outputs in
#     $OUT (SKIP without PyTorch).
# Exit: 0 when nothing failed, 1 otherwise.
# usage: tests/gpu/run.sh [BUILD_DIR]   (run from the repository root)
set -u
build=${1:-build-gpu}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export OUT="$out"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
cuda=${CUDA_HOME:-/usr/local/cuda}
fails=0
t_start=$(date +%s)
say() { echo "$*"; }
fail() { say "FAIL: $*"; fails=$((fails + 1)); }

say "gpu run: outputs in $out"
if ! command -v nvidia-smi > /dev/null 2>&1; then
  fail "nvidia-smi not found: not a GPU machine"
  exit 1
fi
nvidia-smi -L | tee "$out/gpus.txt"
ngpu=$(grep -c '^GPU ' "$out/gpus.txt")
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv \
  > "$out/gpu-memory.csv" 2>&1
cat "$out/gpu-memory.csv"

# 1. Build. NCCL is taken from NCCL_HOME, else from the CUDA directory or
# the system, else from the nvidia-nccl wheel that PyTorch installs (its
# lib holds only libnccl.so.2; meson.build links that file).
t0=$(date +%s)
nccl_home=${NCCL_HOME:-}
if [ -z "$nccl_home" ] && [ ! -f "$cuda/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  nccl_home=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) || nccl_home=
fi
say "NCCL: ${nccl_home:-$cuda or the system directories}"
set -- -Dcudart_home="$cuda"
[ -n "$nccl_home" ] && set -- "$@" -Dnccl_home="$nccl_home"
grep -h 'define NCCL_\(MAJOR\|MINOR\|PATCH\) ' "${nccl_home:-$cuda}/include/nccl.h" \
  "$cuda/include/nccl.h" /usr/include/nccl.h 2>/dev/null | head -n 3 |
  awk '{printf "%s ", $3} END {print ""}' | sed 's/^/nccl.h version: /'
meson=${MESON:-meson}
command -v "$meson" > /dev/null 2>&1 || meson="python3 -m mesonbuild.mesonmain"
if [ ! -f "$build/build.ninja" ]; then
  # shellcheck disable=SC2086 # $meson may be "python3 -m mesonbuild.mesonmain"
  $meson setup "$build" --buildtype=release -Dnccl=enabled -Dcuda=enabled "$@" \
    -Dtests=disabled > "$out/meson-setup.log" 2>&1 ||
    { fail "meson setup (see $out/meson-setup.log)"; tail -n 30 "$out/meson-setup.log"; exit 1; }
fi
if ninja -C "$build" rankplan rankrun tests/gpu/nccl_self > "$out/ninja.log" 2>&1; then
  say "PASS: build with NCCL ($(( $(date +%s) - t0 )) s)"
else
  fail "build (see $out/ninja.log)"
  tail -n 30 "$out/ninja.log"
  exit 1
fi

# 2. The backend's calls on one GPU.
CUDA_VISIBLE_DEVICES=0 timeout 180 "$build/tests/gpu/nccl_self" 10 > "$out/nccl_self.log" 2>&1
rc=$?
grep -E '^(PASS|FAIL|SKIP|info)' "$out/nccl_self.log"
[ $rc -eq 0 ] || { fail "nccl_self exited $rc (log $out/nccl_self.log)"; tail -n 20 "$out/nccl_self.log"; }

# 3. Preflight, probe, ledger.
sh tests/gpu/check_nccl.sh "$build" || fail "check_nccl.sh"

# 4. A device-to-device copy outside rankrun.
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
  float ms[6];
  for (int i = 0; i < 6; i++) {
    cudaEventRecord(e0, 0);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms[i], e0, e1);
  }
  /* The median of the 5 timed copies after the first, as the probe does. */
  for (int i = 2; i < 6; i++)
    for (int j = i; j > 1 && ms[j] < ms[j - 1]; j--) {
      float t = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = t;
    }
  float med = ms[3];
  if (cudaGetLastError() != cudaSuccess || med <= 0) {
    fprintf(stderr, "d2d: the copy failed\n");
    return 1;
  }
  printf("d2d: cudaMemcpy device to device, %zu bytes, median of 5: %.1f GB/s "
         "read + written (%.1f GB/s copied)\n", n, 2.0 * (double)n / (med / 1e3) / 1e9,
         (double)n / (med / 1e3) / 1e9);
  return 0;
}
C
if cc -O2 -I"$cuda/include" "$out/d2d.c" -o "$out/d2d" -L"$cuda/lib64" -lcudart \
     -Wl,-rpath,"$cuda/lib64" > "$out/d2d-build.log" 2>&1 &&
   CUDA_VISIBLE_DEVICES=0 timeout 60 "$out/d2d" > "$out/d2d.log" 2>&1; then
  cat "$out/d2d.log"
  say "PASS: device-to-device copy outside rankrun (compare with the probe's median above)"
else
  fail "d2d helper (see $out/d2d-build.log, $out/d2d.log)"
  cat "$out/d2d-build.log" "$out/d2d.log" 2>/dev/null | tail -n 10
fi

# 5. KV through NCCL, or the failure path on one GPU.
if [ "$ngpu" -lt 2 ]; then
  say "SKIP: KV benchmark: $ngpu GPU; it needs 2 (NCCL refuses two ranks of one" \
      "communicator on one GPU: \"Duplicate GPU detected\"), so the grouped KV path" \
      "(p2p between ranks) is not run; nccl_self ran p2p_post/p2p_wait to self instead"
  cat > "$out/two-rank.yaml" <<'SPEC'
version: 1
name: nccl-two-rank
model:
  preset: llama-3.1-8b
hardware:
  preset: h100-sxm
  nodes: 1
  gpus_per_node: 2
workload:
  input_tokens: 2000
  output_tokens: 300
  rate: 1 req/s
deployment:
  mode: aggregated
  pools:
    - name: main
      replicas: 1
      tp: 2
SPEC
  t0=$(date +%s)
  "$build/rankplan" compile "$out/two-rank.yaml" -o "$out/two-rank.json" > "$out/two-rank-compile.log" 2>&1 &&
    timeout 120 "$build/rankrun" "$out/two-rank.json" --node 0 --rendezvous 127.0.0.1:0 \
      --backend nccl --timeout 30 --quiet --report "$out/two-rank-report.json" \
      > "$out/two-rank.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  if python3 - "$out/two-rank-report.json" "$rc" "$dt" <<'PY'
import json, sys
rc, dt = int(sys.argv[2]), int(sys.argv[3])
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  no report ({e}); exit {rc} after {dt} s")
    sys.exit(1)
f = r["first_failure"] or {}
print(f"  exit {rc} after {dt} s; first failure: rank {f.get('rank')}: {f.get('reason')}")
ok = (rc == 3 and r["status"] == "failed" and f.get("rank") == 1
      and "no CUDA device is visible to rank 1" in (f.get("reason") or "") and dt < 30)
sys.exit(0 if ok else 1)
PY
  then
    say "PASS: a rank without a GPU stops a two-rank nccl deployment (exit 3, rank 1 named, well within --timeout)"
  else
    fail "two-rank plan on one GPU: expected exit 3 naming rank 1 (log $out/two-rank.log)"
    tail -n 10 "$out/two-rank.log"
  fi
else
  "$build/rankplan" compile tests/bench/bench_kv.yaml -o "$out/kv-bench.json" > "$out/kv-compile.log" 2>&1
  timeout 400 "$build/rankrun" "$out/kv-bench.json" --node 0 --rendezvous 127.0.0.1:0 \
    --backend nccl --timeout 300 --requests 8 --input-tokens 2048 --quiet \
    --report "$out/kv-report.json" > "$out/kv-run.log" 2>&1
  rc=$?
  if python3 - "$out/kv-report.json" "$rc" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  no report ({e}); rankrun exit {sys.argv[2]}")
    sys.exit(1)
if r["status"] != "ok":
    print(f"  status {r['status']}: {r['first_failure']}")
    sys.exit(1)
k = r["kv"]
ok = (k["transfer_path"] == "grouped" and k["cells_verified"] > 0
      and k["bytes"] == sum(x["bytes"] for x in k["per_request"]))
same = k["links"]["same_node"]
ratio = same["gbs"] / k["memcpy_gbs"] if same["gbs"] and k["memcpy_gbs"] else 0.0
print(f"  kv: {k['requests']} requests, {k['bytes']} bytes, {k['cells_verified']} cells verified, "
      f"path {k['transfer_path']}")
print(f"  kv: same node {same['gbs'] or 0:.1f} GB/s, {k['reference']} {k['memcpy_gbs']:.1f} GB/s, "
      f"ratio {ratio:.2f} (target >= 0.8)")
for x in k["per_request"]:
    s = x["links"]["same_node"]
    print(f"    request {x['request']}: {x['bytes']} bytes, same node {s['gbs']} GB/s")
sys.exit(0 if ok else 1)
PY
  then
    say "PASS: KV benchmark over NCCL, every cell verified (ratio above is a measurement, not a pass condition)"
  else
    fail "KV benchmark over NCCL (log $out/kv-run.log)"
    tail -n 10 "$out/kv-run.log"
  fi
fi

# 6. With PyTorch: the kernel figures behind the cost model's constants
# (docs/benchmarks.md, "GPU: kernel figures"): products, CUDA graph
# memory and a whole decode step, each with its JSON in $out.
bench() {
  name=$1
  shift
  if python3 "tests/bench/$name.py" "$@" --out "$out/$name.json" > "$out/$name.txt" 2>&1; then
    say "PASS: tests/bench/$name.py (output $out/$name.txt)"
    tail -n 8 "$out/$name.txt"
  else
    fail "tests/bench/$name.py (log $out/$name.txt)"
    tail -n 10 "$out/$name.txt"
  fi
}
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
  bench gpu_kernels --fp8
  bench gpu_graph_memory
  bench gpu_decode_step
else
  say "SKIP: kernel figures: PyTorch with CUDA is not importable (tests/bench/gpu_*.py need it)"
fi

say "gpu run: $fails failure(s) in $(( $(date +%s) - t_start )) s (outputs in $out)"
[ "$fails" -eq 0 ]
