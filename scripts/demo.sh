#!/bin/sh
# The main job on the bundled examples:
#  1. check, compile and explain Llama-3.1-70B on 4 x 8 H200, prefill TP8 and
#     decode TP4 (plans/examples/llama-3.1-70b-pd.yaml);
#  2. search the layout and xPyD pool sizes for the same spec;
#  3. run a small disaggregated plan with rankrun on this machine: every
#     rank starts, every group's collective is checked, and four requests'
#     KV caches move from prefill TP2 to decode TP4, verified byte for byte.
set -eu
build=$1
spec=$2
rp="$build/rankplan"
rr="$build/rankrun"
plan="$build/demo-plan.json"
small=plans/examples/llama-3.1-8b-pd-1node.yaml
small_plan="$build/demo-small-plan.json"

step() { printf '\n== %s\n' "$*"; }

step "rankplan check $spec"
"$rp" check "$spec"

step "rankplan compile $spec -o $plan"
"$rp" compile "$spec" -o "$plan"

step "rankplan explain $plan --summary"
"$rp" explain "$plan" --summary

step "rankplan explain $plan --reshard"
"$rp" explain "$plan" --reshard

step "rankplan search $spec --top 5"
"$rp" search "$spec" --top 5

if [ -x "$rr" ]; then
  step "rankplan compile $small -o $small_plan"
  "$rp" compile "$small" -o "$small_plan"
  step "rankrun $small_plan --node 0 --requests 4 --host-memory-scale 0.001"
  # The host backend stands in for GPUs; allocations are scaled down to fit
  # a small machine, and the report says so.
  "$rr" "$small_plan" --node 0 --requests 4 --host-memory-scale 0.001 --quiet \
    --report "$build/demo-report.json"
  echo "report: $build/demo-report.json (and .txt)"
fi
