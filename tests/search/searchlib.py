"""Shared by the `rankplan search` tests of this folder: where the binary
and the sources are, running it, and the ok/FAIL checks."""
import os
import pathlib
import subprocess

RP = os.environ.get("RANKPLAN", "build/rankplan")
SRC = pathlib.Path(os.environ.get("SRCROOT", ".")).resolve()
failures = 0


def check(cond, what, extra=""):
    """Prints ok or FAIL (with extra) for one expectation and counts failures."""
    global failures
    if not cond:
        failures += 1
        print(f"FAIL {what}\n{extra}")
    else:
        print(f"ok   {what}")


def rp(*args):
    """Runs rankplan with args; the CompletedProcess, text mode."""
    return subprocess.run([RP, *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
