#!/bin/sh
# Checks rankrun's NCCL backend on a machine with NVIDIA GPUs: builds with
# NCCL required, compiles a one-node plan with one rank per visible GPU
# (Llama-3.1-8B, tp = GPU count), runs it with --backend nccl, and checks
# that every group's all-reduce of rank ids was right and its bandwidth
# measured; with --probe it also times each rank's device-to-device copy
# and prints the calibration it writes (hbm_efficiency and the link
# constants against the GPU's catalog entry). Usage: tests/gpu/check_nccl.sh [BUILD_DIR]   (run from the repo root)
set -eu
build=${1:-build-gpu}
out=${OUT:-$(mktemp -d)}
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
case $ngpu in
  1|2|4|8) ;;
  *) echo "check_nccl: $ngpu GPUs; this check needs 1, 2, 4 or 8 (tp must divide 8 KV heads)"; exit 2 ;;
esac
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dnccl=enabled -Dcuda=enabled -Dtests=disabled
fi
ninja -C "$build" rankplan rankrun
# The catalog entry of this GPU, so that the probe's efficiencies are
# measured against the right nominal figures (h100-sxm when unknown).
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) in
  *H200*) preset=h200-sxm ;;
  *B200*) preset=b200 ;;
  *A100*80*) preset=a100-80g ;;
  *) preset=h100-sxm ;;
esac
cat > "$out/nccl-check.yaml" <<SPEC
# rankrun NCCL check: one instance over every GPU of this machine.
version: 1
name: nccl-check
model:
  preset: llama-3.1-8b
hardware:
  preset: $preset
  nodes: 1
  gpus_per_node: $ngpu
workload:
  input_tokens: 2000
  output_tokens: 300
  rate: 1 req/s
deployment:
  mode: aggregated
  pools:
    - name: main
      replicas: 1
      tp: $ngpu
SPEC
"$build/rankplan" compile "$out/nccl-check.yaml" -o "$out/nccl-check.json"
"$build/rankrun" "$out/nccl-check.json" --node 0 --backend nccl --timeout 120 \
  --preflight-bytes 67108864 --report "$out/nccl-report.json" \
  --probe "$out/calibration.json"
python3 - "$out/nccl-report.json" "$out/nccl-check.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
groups = r["preflight"]["groups"]
bad = [g for g in groups if not (g["checked"] and g["ok"])]
assert r["status"] == "ok", r["first_failure"]
assert len(groups) == len(plan["groups"]), (len(groups), len(plan["groups"]))
assert not bad, bad
for kind, s in r["preflight"]["by_kind"].items():
    print(f"{kind:10s} {s['ok']}/{s['groups']} groups ok, bus bandwidth "
          f"{s['min_busbw_gbs']} to {s['max_busbw_gbs']} GB/s")
mc = r["memory_copy"]
assert mc and all(g for g in mc["per_rank_gbs"]), mc
print(f"memory copy (device to device, read + write): median {mc['median_gbs']:.0f} GB/s "
      f"over {len(mc['per_rank_gbs'])} GPU(s), nominal {plan['hardware']['hbm_bandwidth'] / 1e9:.0f} GB/s")
for w in r["calibration"]["written"]:
    print(f"calibration: {w['name']} = {w['value']:g} ({w['from']})")
print(f"check_nccl: ok, {len(groups)} groups on {plan['world_size']} GPU(s)")
PY
