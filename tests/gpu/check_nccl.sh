#!/bin/sh
# Checks rankrun's NCCL backend on a machine with NVIDIA GPUs: builds with
# NCCL required (if BUILD_DIR has no build yet), compiles a one-node plan
# with one rank per visible GPU (Llama-3.1-8B, tp = GPU count; with one GPU
# every group has one member, which NCCL allows), and runs it with
# --backend nccl twice:
#  1. preflight of every group (all-reduce of rank ids checked, bandwidth)
#     and --probe: each rank's device-to-device copy, and the calibration
#     written from it (hbm_efficiency; the link constants need groups of 2
#     ranks or more) against the GPU's catalog entry;
#  2. --requests 1: each rank checks its ledger (weights and KV pool)
#     against cudaMemGetInfo and allocates it with cudaMalloc (the plan is
#     aggregated, so no KV moves).
# Prints a PASS or FAIL line per run; outputs go to $OUT (a temporary
# folder when unset). Exit: 0 when both passed, 1 otherwise, 2 when the
# machine does not suit the check.
# usage: tests/gpu/check_nccl.sh [BUILD_DIR]   (run from the repository root)
set -u
build=${1:-build-gpu}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
case $ngpu in
  1|2|4|8) ;;
  *) echo "FAIL: check_nccl: $ngpu GPUs visible; this check needs 1, 2, 4 or 8 (tp must divide 8 KV heads)"; exit 2 ;;
esac
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dnccl=enabled -Dcuda=enabled \
    -Dtests=disabled > "$out/meson-setup.log" 2>&1 ||
    { echo "FAIL: check_nccl: meson setup (see $out/meson-setup.log)"; tail -n 20 "$out/meson-setup.log"; exit 1; }
fi
ninja -C "$build" rankplan rankrun > "$out/ninja.log" 2>&1 ||
  { echo "FAIL: check_nccl: build (see $out/ninja.log)"; tail -n 20 "$out/ninja.log"; exit 1; }
# The catalog entry of this GPU, so that the probe's efficiencies are
# measured against the right nominal figures (h100-sxm when unknown).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case $gpu in
  *H200*) preset=h200-sxm ;;
  *B200*) preset=b200 ;;
  *A100*80*) preset=a100-80g ;;
  *) preset=h100-sxm ;;
esac
echo "check_nccl: $ngpu x $gpu, catalog entry $preset"
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
"$build/rankplan" compile "$out/nccl-check.yaml" -o "$out/nccl-check.json" > "$out/compile.log" 2>&1 ||
  { echo "FAIL: check_nccl: rankplan compile (see $out/compile.log)"; tail -n 20 "$out/compile.log"; exit 1; }
status=0

# 1. Preflight and probe.
timeout 300 "$build/rankrun" "$out/nccl-check.json" --node 0 --rendezvous 127.0.0.1:0 \
  --backend nccl --timeout 60 --preflight-bytes 67108864 \
  --report "$out/nccl-report.json" --probe "$out/calibration.json" \
  > "$out/nccl-run.log" 2>&1
rc=$?
echo "check_nccl: rankrun preflight + probe exited $rc (log $out/nccl-run.log)"
python3 - "$out/nccl-report.json" "$out/nccl-check.json" "$rc" <<'PY' || status=1
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL: preflight + probe: no report ({e}); rankrun exit {sys.argv[3]}")
    sys.exit(1)
plan = json.load(open(sys.argv[2]))
bad = []
if r["status"] != "ok":
    bad.append(f"status {r['status']}: {r['first_failure']}")
groups = r["preflight"]["groups"]
if len(groups) != len(plan["groups"]):
    bad.append(f"{len(groups)} groups in the report, {len(plan['groups'])} in the plan")
for g in groups:
    if not (g["checked"] and g["ok"]):
        bad.append(f"group {g['id']} ({g['kind']}): checked {g['checked']}, ok {g['ok']}")
    print(f"  group {g['id']:>3} {g['kind']:10s} {g['ranks']} rank(s): "
          f"{g['bytes']} bytes x {g['iters']} in {g['seconds']:.6f} s, "
          f"bus {g['busbw_gbs']:.1f} GB/s, 8-byte latency {g['latency_s'] * 1e6:.1f} us")
for kind, s in r["preflight"]["by_kind"].items():
    bw = ("n/a (one-rank groups)" if s["min_busbw_gbs"] is None
          else f"{s['min_busbw_gbs']:.1f} to {s['max_busbw_gbs']:.1f} GB/s")
    print(f"  {kind:10s} {s['ok']}/{s['groups']} groups ok, bus bandwidth {bw}")
mc = r["memory_copy"]
if not mc or not all(g for g in mc["per_rank_gbs"]):
    bad.append(f"memory copy figures missing: {mc}")
else:
    print(f"  memory copy (device to device, read + write): median {mc['median_gbs']:.0f} GB/s "
          f"over {len(mc['per_rank_gbs'])} GPU(s), plan nominal "
          f"{plan['hardware']['hbm_bandwidth'] / 1e9:.0f} GB/s")
cal = r["calibration"]
if not cal or not any(w["name"] == "hbm_efficiency" for w in cal["written"]):
    bad.append(f"no hbm_efficiency in the calibration: {cal}")
else:
    for w in cal["written"]:
        print(f"  calibration: {w['name']} = {w['value']:g} ({w['from']})")
for b in bad:
    print(f"  problem: {b}")
print(f"{'FAIL' if bad else 'PASS'}: preflight of {len(groups)} groups on "
      f"{plan['world_size']} GPU(s), memory copy probe, calibration")
sys.exit(1 if bad else 0)
PY

# 2. The ledger on the device: fit check, then cudaMalloc.
timeout 300 "$build/rankrun" "$out/nccl-check.json" --node 0 --rendezvous 127.0.0.1:0 \
  --backend nccl --timeout 60 --preflight-bytes 4096 --requests 1 --input-tokens 16 \
  --report "$out/nccl-ledger.json" > "$out/nccl-ledger.log" 2>&1
rc=$?
echo "check_nccl: rankrun --requests 1 exited $rc (log $out/nccl-ledger.log)"
python3 - "$out/nccl-ledger.json" "$rc" <<'PY' || status=1
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL: ledger allocation: no report ({e}); rankrun exit {sys.argv[2]}")
    sys.exit(1)
bad = []
if r["status"] != "ok":
    bad.append(f"status {r['status']}: {r['first_failure']}")
mem = (r["kv"] or {}).get("memory") or []
if not mem:
    bad.append("no memory figures in the report")
for m in mem:
    w, k = m["planned_weights"] // 4096 * 4096, m["planned_kv"] // 4096 * 4096
    print(f"  rank {m['rank']}: weights {m['allocated_weights']} of {m['planned_weights']} "
          f"planned, KV pool {m['allocated_kv']} of {m['planned_kv']} planned (bytes)")
    if m["allocated_weights"] != w or m["allocated_kv"] != k:
        bad.append(f"rank {m['rank']} allocated other sizes than its ledger")
for b in bad:
    print(f"  problem: {b}")
print(f"{'FAIL' if bad else 'PASS'}: every rank's ledger checked against cudaMemGetInfo "
      f"and allocated with cudaMalloc ({len(mem)} rank(s))")
sys.exit(1 if bad else 0)
PY
exit $status
