#!/usr/bin/env python3
"""The spec path is a FIFO nobody writes to: `check` refuses it as not a
regular file (E0001, exit 2) instead of blocking on the read forever."""
import os
import sys

os.mkfifo(sys.argv[1])
