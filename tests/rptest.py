"""The one `check` of the Python test scripts: prints `ok   WHAT` or
`FAIL WHAT` (with the detail indented below a failure), counts both, and
`finish()` prints the tally and gives the exit status. A script in
tests/DIR/ finds this module with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
"""
import sys

passed = 0
failed = 0


def check(cond, what, detail=""):
    """One expectation; returns whether it held."""
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if cond:
        passed += 1
    else:
        failed += 1
        if detail:
            print("     " + str(detail).replace("\n", "\n     ")[:4000], flush=True)
    return bool(cond)


def finish():
    """Prints the tally; the exit status (1 when a check failed)."""
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.stdout.flush()
    return 1 if failed else 0
