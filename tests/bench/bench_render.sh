#!/bin/sh
# Render benchmark: `rankplan render` of the compile benchmark's plans
# (tests/bench/bench_lib.sh) at 1,024, 4,096, 8,192 and 131,072 ranks
# (docs/benchmarks.md, "render"): how the plan is drawn (per GPU up to the
# GPU limit, else per node and per instance), the page's size, the render's
# wall time and peak RSS (loading the plan included), and the wall time of
# headless Chromium loading the page and printing its DOM (when chromium is
# installed), next to its time for an empty page (the browser's start; the
# difference is the page's cost). Prints a Markdown table; nothing is
# asserted.
#
# usage: tests/bench/bench_render.sh [BUILD_DIR] [SIZES...]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/bench_lib.sh
. "$root/tests/bench/bench_lib.sh"
rp=$(bench_rankplan bench_render "$root" "${1:-build}")
[ $# -gt 0 ] && shift
sizes=${*:-1024 4096 8192 131072}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
browser=$(command -v chromium || true)

# Wall seconds of chromium loading file $1 and printing its DOM.
load_s() {
  s=$(date +%s.%N)
  HOME=$tmp timeout 600 "$browser" --headless --no-sandbox --disable-gpu --dump-dom "file://$1" \
    > "$tmp/dom" 2>/dev/null
  e=$(date +%s.%N)
  awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }'
}
empty="-"
if [ -n "$browser" ]; then
  echo "<!DOCTYPE html><html><body></body></html>" > "$tmp/empty.html"
  empty=$(load_s "$tmp/empty.html")
fi

echo "| ranks | drawn | page size (MB) | render wall s | render peak RSS (MiB) | chromium load s (empty page $empty s) |"
echo "|------:|---|---:|---:|---:|---:|"
for n in $sizes; do
  bench_spec "$n" > "$tmp/spec.yaml"
  "$rp" compile "$tmp/spec.yaml" -o "$tmp/plan.json" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$rp" render "$tmp/plan.json" -o "$tmp/plan.html" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  read -r wall rss < "$tmp/time"
  size=$(wc -c < "$tmp/plan.html")
  if grep -q 'class="gpu"' "$tmp/plan.html"; then drawn="per GPU"; else drawn="per node and instance"; fi
  load="-"
  [ -n "$browser" ] && load=$(load_s "$tmp/plan.html")
  awk -v n="$n" -v d="$drawn" -v s="$size" -v w="$wall" -v r="$rss" -v l="$load" 'BEGIN {
    printf "| %d | %s | %.2f | %.2f | %.0f | %s |\n", n, d, s / 1e6, w, r / 1024, l }'
done
