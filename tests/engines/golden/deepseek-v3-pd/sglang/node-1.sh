#!/bin/bash
# node 1: the sglang processes of the plan's ranks there
# Written by rankplan from plan aa16483dbd29cc65... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
log_dir=${RANKPLAN_LOG_DIR:-.}

# pool prefill (prefill), instance 1: tp 1, pp 1, dp 8, cp 1, ep 8, ranks 8-15; node 0 of 1 of the instance
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
  python3 -m sglang.launch_server \
    --model-path deepseek-ai/DeepSeek-V3 \
    --host 0.0.0.0 \
    --port 30000 \
    --tp-size 8 \
    --pp-size 1 \
    --dp-size 8 \
    --enable-dp-attention \
    --ep-size 8 \
    --kv-cache-dtype bf16 \
    --page-size 1 \
    --mem-fraction-static 0.769 \
    --served-model-name deepseek-ai/DeepSeek-V3 \
    --context-length 163840 \
    --max-running-requests 256 \
    --nccl-port 30002 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 30003 \
    > "$log_dir/prefill-1.node-1.log" 2>&1 &

# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
