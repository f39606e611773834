#!/bin/bash
# node 1: the trtllm processes of the plan's ranks there
# Written by rankplan from plan 8859970010a528d1... (docs/engines.md); edit the plan, not this file.
set -euo pipefail

# pool context (prefill), instance 0: tp 1, pp 1, dp 16, cp 1, ep 16, ranks 0-15; node 1 of 2 of the instance
# its ranks on this node run under mpirun, started by the script of node 0 (gpu-a)

