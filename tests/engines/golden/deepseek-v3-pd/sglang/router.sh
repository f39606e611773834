#!/bin/bash
# the sgl-router over the prefill and decode servers
# Written by rankplan from plan aa16483dbd29cc65... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-node-0}
host_1=${RANKPLAN_HOST_1:-node-1}
host_2=${RANKPLAN_HOST_2:-node-2}
host_3=${RANKPLAN_HOST_3:-node-3}
python3 -m sglang_router.launch_router \
    --pd-disaggregation \
    --prefill http://"${host_0}":30000 30003 \
    --prefill http://"${host_1}":30000 30003 \
    --decode http://"${host_2}":30000 \
    --decode http://"${host_3}":30000 \
    --host 0.0.0.0 \
    --port 30011
