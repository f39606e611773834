#!/usr/bin/env bash
# `make bench`: every benchmark of docs/benchmarks.md in turn, on one build.
# Each prints its own markdown table; docs/benchmarks.md records the results
# with the machine they ran on. Performance is measured here, never asserted
# by a test.
#
# usage: tests/bench/run.sh [BUILD_DIR]   (default: build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
for b in bench_search.sh bench_compile.sh bench_render.sh; do
  echo "== tests/bench/$b $build"
  "$here/$b" "$build"
done
echo "== tests/bench/bench_kv.sh $build 5"
"$here/bench_kv.sh" "$build" 5
