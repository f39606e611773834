#!/bin/sh
# The main job on the bundled example: check the spec, compile it to a plan,
# and show the plan's summary.
set -eu
build=$1
spec=$2
rp="$build/rankplan"
echo "== rankplan check $spec"
"$rp" check "$spec"
echo
echo "== rankplan compile $spec -o $build/demo-plan.json"
"$rp" compile "$spec" -o "$build/demo-plan.json"
echo
echo "== rankplan explain $build/demo-plan.json --summary"
"$rp" explain "$build/demo-plan.json" --summary
