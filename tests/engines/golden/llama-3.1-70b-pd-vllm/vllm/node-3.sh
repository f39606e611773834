#!/bin/bash
# node 3: the vllm processes of the plan's ranks there
# Written by rankplan from plan 92b17cbca8817831... (docs/engines.md); edit the plan, not this file.
set -euo pipefail

# no ranks of the plan on this node
