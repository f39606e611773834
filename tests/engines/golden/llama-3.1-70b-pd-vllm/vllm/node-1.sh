#!/bin/bash
# node 1: the vllm processes of the plan's ranks there
# Written by rankplan from plan a5053ee5bbb8d0a7... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_1=${RANKPLAN_HOST_1:-gpu-1.cluster.internal}
log_dir=${RANKPLAN_LOG_DIR:-.}

# pool decode (decode), instance 0: tp 8, pp 1, dp 1, cp 1, ep 1, ranks 8-15; node 0 of 1 of the instance
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_HOST="${host_1}" VLLM_NIXL_SIDE_CHANNEL_PORT=8103 VLLM_USE_FLASHINFER_SAMPLER=0 \
  vllm serve meta-llama/Llama-3.1-70B-Instruct \
    --port 8100 \
    --tensor-parallel-size 8 \
    --pipeline-parallel-size 1 \
    --data-parallel-size 1 \
    --kv-cache-dtype auto \
    --block-size 16 \
    --gpu-memory-utilization 0.9 \
    --served-model-name llama-3.1-70b \
    --max-model-len 16384 \
    --max-num-batched-tokens 8192 \
    --async-scheduling \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' \
    > "$log_dir/decode-0.node-1.log" 2>&1 &

# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
