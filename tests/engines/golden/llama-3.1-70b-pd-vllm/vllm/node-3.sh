#!/bin/bash
# node 3: the vllm processes of the plan's ranks there
# Written by rankplan from plan baf8639e18d5bcf7... (docs/engines.md); edit the plan, not this file.
set -euo pipefail

# no ranks of the plan on this node
