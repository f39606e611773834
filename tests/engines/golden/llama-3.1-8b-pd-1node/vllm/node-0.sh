#!/bin/bash
# node 0: the vllm processes of the plan's ranks there
# Written by rankplan from plan 18fd4d2c8f9d1fe8... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-node-0}
log_dir=${RANKPLAN_LOG_DIR:-.}

# pool prefill (prefill), instance 0: tp 2, pp 1, dp 1, cp 1, ep 1, ranks 0-1; node 0 of 1 of the instance
CUDA_VISIBLE_DEVICES=0,1 VLLM_NIXL_SIDE_CHANNEL_HOST="${host_0}" VLLM_NIXL_SIDE_CHANNEL_PORT=8003 \
  vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --port 8000 \
    --tensor-parallel-size 2 \
    --pipeline-parallel-size 1 \
    --data-parallel-size 1 \
    --kv-cache-dtype auto \
    --block-size 16 \
    --gpu-memory-utilization 0.9 \
    --served-model-name meta-llama/Llama-3.1-8B-Instruct \
    --max-model-len 131072 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' \
    > "$log_dir/prefill-0.node-0.log" 2>&1 &

# pool prefill (prefill), instance 1: tp 2, pp 1, dp 1, cp 1, ep 1, ranks 2-3; node 0 of 1 of the instance
CUDA_VISIBLE_DEVICES=2,3 VLLM_NIXL_SIDE_CHANNEL_HOST="${host_0}" VLLM_NIXL_SIDE_CHANNEL_PORT=8008 \
  vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --port 8005 \
    --tensor-parallel-size 2 \
    --pipeline-parallel-size 1 \
    --data-parallel-size 1 \
    --kv-cache-dtype auto \
    --block-size 16 \
    --gpu-memory-utilization 0.9 \
    --served-model-name meta-llama/Llama-3.1-8B-Instruct \
    --max-model-len 131072 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' \
    > "$log_dir/prefill-1.node-0.log" 2>&1 &

# pool decode (decode), instance 0: tp 4, pp 1, dp 1, cp 1, ep 1, ranks 4-7; node 0 of 1 of the instance
CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_HOST="${host_0}" VLLM_NIXL_SIDE_CHANNEL_PORT=8013 \
  vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --port 8010 \
    --tensor-parallel-size 4 \
    --pipeline-parallel-size 1 \
    --data-parallel-size 1 \
    --kv-cache-dtype auto \
    --block-size 16 \
    --gpu-memory-utilization 0.9 \
    --served-model-name meta-llama/Llama-3.1-8B-Instruct \
    --max-model-len 131072 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' \
    > "$log_dir/decode-0.node-0.log" 2>&1 &

# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
