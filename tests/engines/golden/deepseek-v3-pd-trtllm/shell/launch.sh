#!/bin/bash
# starts every node's processes over ssh (SSH overrides the command)
# Written by rankplan from plan 8859970010a528d1... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-gpu-a}
host_1=${RANKPLAN_HOST_1:-gpu-b}
host_2=${RANKPLAN_HOST_2:-gpu-c}
host_3=${RANKPLAN_HOST_3:-gpu-d}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${RANKPLAN_DIR:-$here}
ssh=${SSH:-ssh}
env_args=( "RANKPLAN_HOST_0=${host_0}" "RANKPLAN_HOST_1=${host_1}" "RANKPLAN_HOST_2=${host_2}" "RANKPLAN_HOST_3=${host_3}" "RANKPLAN_LOG_DIR=${RANKPLAN_LOG_DIR:-$dir}")

printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-0.sh"
"$ssh" "${host_0}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-1.sh"
"$ssh" "${host_1}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-2.sh"
"$ssh" "${host_2}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/node-3.sh"
"$ssh" "${host_3}" "$cmd" &
printf -v cmd '%q ' env "${env_args[@]}" bash "$dir/router.sh"
"$ssh" "${host_0}" "$cmd" &
# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
