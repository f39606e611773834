#!/bin/sh
# Runs every libFuzzer target of a fuzz build (tests/fuzz/meson.build) for
# the given seconds each, seeded from tests/fuzz/seeds/<target>/; fails on
# any crash, leak, sanitizer report or timeout (an input running over 10 s;
# FUZZ_TIMEOUT=N changes it: a long campaign run with `nice` beside other
# work can be starved of the CPU for longer than that, which libFuzzer
# reports as a timeout although the input is fast, docs/testing.md).
#
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
#
# New inputs that reach new code go to .fuzz-corpus/<target>/ (kept between
# runs, ignored by git); an input that fails is saved as
# .fuzz-corpus/<target>-artifacts/crash-* (or leak-*, timeout-*) and can be
# replayed with `BUILD_DIR/tests/fuzz/<target> FILE`.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$1
secs=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 0 ]; then
  targets=$*
else
  targets=
  for t in "$build"/tests/fuzz/fuzz_*; do
    [ -f "$t" ] && [ -x "$t" ] && targets="$targets $(basename "$t")"
  done
fi
if [ -z "$targets" ]; then
  echo "fuzz: no targets in $build/tests/fuzz (configure with CC=clang -Dfuzz=true)" >&2
  exit 1
fi
status=0
for name in $targets; do
  t="$build/tests/fuzz/$name"
  corpus="$root/.fuzz-corpus/$name"
  artifacts="$root/.fuzz-corpus/$name-artifacts"
  mkdir -p "$corpus" "$artifacts"
  seeds="$root/tests/fuzz/seeds/$name"
  [ -d "$seeds" ] || seeds=
  # The hook target also reads the shipped hook examples and the abuse
  # cases where they live (libFuzzer reads corpus directories recursively),
  # rather than from copies.
  if [ "$name" = fuzz_hook ]; then seeds="$seeds $root/lua $root/tests/hooks/abuse"; fi
  # The pipeline target starts from the specs the spec target starts from.
  if [ "$name" = fuzz_pipeline ]; then seeds="$root/tests/fuzz/seeds/fuzz_spec"; fi
  # The engine entry target starts from the shipped entries.
  if [ "$name" = fuzz_engine_entry ]; then seeds="$root/plans/catalog/engines"; fi
  # The config import starts from the real config.json fixtures.
  if [ "$name" = fuzz_hf ]; then seeds="$root/tests/hf/fixtures"; fi
  # The kept corpus of earlier campaigns (tests/fuzz/corpus/, docs/testing.md).
  if [ -d "$root/tests/fuzz/corpus/$name" ]; then seeds="$seeds $root/tests/fuzz/corpus/$name"; fi
  echo "fuzz: $name for ${secs}s"
  # The first directory receives new inputs; the seeds are only read.
  if ! "$t" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -detect_leaks=1 \
       -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" $seeds; then
    echo "fuzz: $name failed; the input is in $artifacts/" >&2
    status=1
  fi
done
exit $status
