#!/usr/bin/env python3
"""A spec one byte over the 1 MiB size cap (SPEC_MAX_BYTES)."""
import sys

cap = 1 << 20
head = b"version: 1\n"
with open(sys.argv[1], "wb") as f:
    f.write(head + b"#" * (cap + 1 - len(head) - 1) + b"\n")
