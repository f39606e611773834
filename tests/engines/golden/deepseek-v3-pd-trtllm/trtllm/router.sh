#!/bin/bash
# the context/generation proxy of trtllm-serve
# Written by rankplan from plan 8859970010a528d1... (docs/engines.md); edit the plan, not this file.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
trtllm-serve disaggregated -c "$here/disagg.yaml"
