#!/usr/bin/env python3
"""A spec 200,000 collections deep, never closed: the reader must stop at
the cap without recursing or reading on. One bracket per line keeps the
quoted source line short."""
import sys

with open(sys.argv[1], "w") as f:
    f.write("version: 1\nmodel:\n" + "  [\n" * 200000)
