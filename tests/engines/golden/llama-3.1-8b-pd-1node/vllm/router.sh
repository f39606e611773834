#!/bin/bash
# the prefill/decode proxy: clients send requests here
# Written by rankplan from plan 18fd4d2c8f9d1fe8... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
host_0=${RANKPLAN_HOST_0:-node-0}
# the P/D proxy of vLLM's NIXL connector tests (docs.vllm.ai v0.11.0, NixlConnector usage)
python3 "${VLLM_SOURCE:?set VLLM_SOURCE to a vLLM 0.19 source tree}/tests/v1/kv_connector/nixl_integration/toy_proxy_server.py" \
    --host 0.0.0.0 \
    --port 8017 \
    --prefiller-hosts "${host_0}" "${host_0}" \
    --prefiller-ports 8000 8005 \
    --decoder-hosts "${host_0}" \
    --decoder-ports 8010
