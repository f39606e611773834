#!/bin/sh
# Runs every libFuzzer target in the fuzz build for the given seconds each,
# seeded from its corpus directory; fails on any crash, leak or timeout.
set -eu
build=$1
secs=$2
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for t in "$build"/tests/fuzz/fuzz_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  name=$(basename "$t")
  corpus="$root/.fuzz-corpus/$name"
  mkdir -p "$corpus"
  seeds="$root/tests/fuzz/seeds/$name"
  echo "fuzz: $name for ${secs}s"
  if ! "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 \
       -print_final_stats=1 "$corpus" ${seeds:+$( [ -d "$seeds" ] && echo "$seeds")}; then
    echo "fuzz: $name failed" >&2
    status=1
  fi
done
exit $status
