#!/bin/bash
# node 2: the trtllm processes of the plan's ranks there
# Written by rankplan from plan 8859970010a528d1... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_2=${RANKPLAN_HOST_2:-gpu-c}
host_3=${RANKPLAN_HOST_3:-gpu-d}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log_dir=${RANKPLAN_LOG_DIR:-.}

# pool generation (decode), instance 0: tp 1, pp 1, dp 16, cp 1, ep 16, ranks 16-31; node 0 of 2 of the instance
export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
mpirun -np 16 -x CUDA_VISIBLE_DEVICES -H "${host_2}":8,"${host_3}":8 \
  trtllm-llmapi-launch trtllm-serve deepseek-ai/DeepSeek-V3 \
    --host 0.0.0.0 \
    --port 8000 \
    --backend pytorch \
    --tp_size 16 \
    --pp_size 1 \
    --ep_size 16 \
    --gpus_per_node 8 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --max_seq_len 8192 \
    --max_batch_size 128 \
    --max_num_tokens 8192 \
    --config "$here/trtllm-generation-0.yaml" \
    > "$log_dir/generation-0.node-2.log" 2>&1 &

# Shared fate: the first process to exit ends this script with its status.
status=0
wait -n || status=$?
jobs -p | xargs -r kill 2>/dev/null || true
wait || true
exit "$status"
