#!/bin/sh
# Regenerates the golden plans next to the example specs:
#   plans/examples/NAME.yaml -> plans/examples/NAME.plan.json
# A plan over 5 MB is not stored; its SHA-256 goes to NAME.plan.json.sha256
# instead (docs/plan.md). tests/plan/test_plans.py fails when `rankplan
# compile` drifts from these files; run this script after an intended
# change and review the diff.
#
# usage: scripts/regen-goldens.sh [BUILD_DIR]   (default: build)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
rp=$build/rankplan
[ -x "$rp" ] || { echo "regen-goldens: $rp not built" >&2; exit 2; }
limit=5000000
cd "$root"
for spec in plans/examples/*.yaml; do
  name=${spec%.yaml}
  out=$name.plan.json
  "$rp" compile "$spec" -o "$out.new" 2>/dev/null || { echo "regen-goldens: $spec does not compile" >&2; rm -f "$out.new"; exit 1; }
  size=$(wc -c < "$out.new")
  if [ "$size" -gt "$limit" ]; then
    sha256sum "$out.new" | cut -d' ' -f1 > "$out.sha256"
    rm -f "$out.new" "$out"
    echo "$out.sha256 ($size bytes, digest only)"
  else
    mv "$out.new" "$out"
    rm -f "$out.sha256"
    echo "$out ($size bytes)"
  fi
done
