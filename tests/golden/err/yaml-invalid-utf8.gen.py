#!/usr/bin/env python3
"""A spec with a Latin-1 byte (0xE9) in a value: not valid UTF-8."""
import sys

with open(sys.argv[1], "wb") as f:
    f.write(b"version: 1\nname: caf\xe9\nmodel:\n  preset: llama-3.1-8b\n")
