#!/bin/bash
# node 3: the vllm processes of the plan's ranks there
# Written by rankplan from plan a5053ee5bbb8d0a7... (docs/engines.md); edit the plan, not this file.
set -euo pipefail

# no ranks of the plan on this node
