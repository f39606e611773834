#!/usr/bin/env python3
"""A spec whose collections nest 63 deep (the root mapping is level 1;
the cap is 64)."""
import sys

depth = 63
with open(sys.argv[1], "w") as f:
    f.write("version: 1\nmodel: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n")
