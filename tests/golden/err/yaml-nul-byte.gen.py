#!/usr/bin/env python3
"""A spec with a NUL byte in the middle of line 3."""
import sys

with open(sys.argv[1], "wb") as f:
    f.write(b"version: 1\nname: x\nmodel:\x00\n  preset: llama-3.1-8b\n")
