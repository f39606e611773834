#!/bin/bash
# the prefill/decode proxy: clients send requests here
# Written by rankplan from plan a5053ee5bbb8d0a7... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-gpu-0.cluster.internal}
host_1=${RANKPLAN_HOST_1:-gpu-1.cluster.internal}
host_2=${RANKPLAN_HOST_2:-gpu-2.cluster.internal}
# the P/D proxy of vLLM's NIXL connector tests (docs.vllm.ai v0.11.0, NixlConnector usage)
python3 "${VLLM_SOURCE:?set VLLM_SOURCE to a vLLM 0.11 source tree}/tests/v1/kv_connector/nixl_integration/toy_proxy_server.py" \
    --host 0.0.0.0 \
    --port 8114 \
    --prefiller-hosts "${host_0}" "${host_0}" \
    --prefiller-ports 8100 8107 \
    --decoder-hosts "${host_1}" "${host_2}" \
    --decoder-ports 8100 8100
