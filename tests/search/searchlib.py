"""Shared by the `rankplan search` tests of this folder: where the binary
and the sources are, running it, and the ok/FAIL checks."""
import os
import pathlib
import subprocess
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402,F401  (the tests of this folder call searchlib.check)

RP = os.environ.get("RANKPLAN", "build/rankplan")
SRC = pathlib.Path(os.environ.get("SRCROOT", ".")).resolve()


def rp(*args):
    """Runs rankplan with args; the CompletedProcess, text mode."""
    return subprocess.run([RP, *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
