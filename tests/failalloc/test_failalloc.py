#!/usr/bin/env python3
"""Allocation failure at every allocation of every entry point.

Each case runs one command on a bundled example once to count its
allocations (failalloc.so, FAILALLOC_COUNT), then once for every N from 1 to
that count with the Nth allocation failing (FAILALLOC_N). Every run must
either

  - exit 70 (internal error) saying "internal error", with nothing on
    standard output and, for a command that writes files, no file and no
    temporary left in the output directory (or, when the failure came after
    the files were renamed into place, all of them, whole); or
  - succeed exactly as the run without a failure did (same exit code, same
    standard output, same file bytes): the failed allocation was one that
    glibc absorbs (stdio falls back to an unbuffered stream, qsort to its
    in-place sort).

Anything else (a user-error exit for what was a lack of memory, a crash,
a hang, a partial plan) is a failure naming the command and N.

Usage: test_failalloc.py (RANKPLAN, RANKRUN, FAILALLOC_SO, SRCROOT from the
environment). --quick runs every 7th N (for a first look by hand).
"""
import os
import pathlib
import subprocess
import sys
import tempfile

SRC = pathlib.Path(os.environ["SRCROOT"])
RANKPLAN = os.environ["RANKPLAN"]
RANKRUN = os.environ.get("RANKRUN")
SO = os.environ["FAILALLOC_SO"]
EX = SRC / "plans" / "examples"
STEP = 7 if "--quick" in sys.argv else 1
failures = []

# (name, argv with OUT for the output file or None, output file name or None)
CASES = [
    ("check", [RANKPLAN, "check", str(EX / "llama-3.1-70b-pd.yaml")], None),
    ("check --format json", [RANKPLAN, "check", "--format", "json", str(EX / "deepseek-v3-pd.yaml")], None),
    ("compile", [RANKPLAN, "compile", str(EX / "llama-3.1-8b-pd-1node.yaml"), "-o", "OUT"], "plan.json"),
    ("compile with a hook", [RANKPLAN, "compile", str(EX / "hook-rack-spread.yaml"), "-o", "OUT"], "plan.json"),
    ("compile MoE", [RANKPLAN, "compile", str(EX / "deepseek-v3-pd.yaml"), "-o", "OUT"], "plan.json"),
    ("compile --split-by-node", [RANKPLAN, "compile", str(EX / "llama-3.1-70b-pd.yaml"), "-o", "OUT",
                                 "--split-by-node", "OUTDIR"], "plan.json"),
    ("search", [RANKPLAN, "search", str(EX / "llama-3.1-8b-agg.yaml"), "--top", "3"], None),
    ("explain", [RANKPLAN, "explain", str(EX / "llama-3.1-70b-pd.plan.json")], None),
    ("render", [RANKPLAN, "render", str(EX / "llama-3.1-8b-pd-1node.plan.json"), "-o", "OUT"], "plan.json"),
]
if RANKRUN:
    CASES.append(("rankrun --dry-run",
                  [RANKRUN, str(EX / "llama-3.1-8b-pd-1node.plan.json"), "--node", "0", "--dry-run"], None))


def run(argv, outdir, n, count_file=None):
    env = dict(os.environ, LD_PRELOAD=SO, FAILALLOC_N=str(n), NO_COLOR="1",
               RANKPLAN_CATALOG=str(SRC / "plans" / "catalog"))
    if count_file:
        env["FAILALLOC_COUNT"] = count_file
    subst = {"OUT": str(pathlib.Path(outdir) / "plan.json"), "OUTDIR": str(pathlib.Path(outdir) / "nodes")}
    args = [subst.get(a, a) for a in argv]
    return subprocess.run(args, env=env, capture_output=True, timeout=60)


def file_bytes(outdir, name):
    """The output file's bytes, with the node files' when there are some."""
    p = pathlib.Path(outdir) / name if name else None
    got = p.read_bytes() if p and p.exists() else None
    nodes = pathlib.Path(outdir) / "nodes"
    if got is not None and nodes.is_dir():
        got += b"".join(f.name.encode() + f.read_bytes() for f in sorted(nodes.iterdir()))
    return got


def remove(path):
    if path.is_dir():
        for f in path.iterdir():
            remove(f)
        path.rmdir()
    else:
        path.unlink()


def one_case(name, argv, out):
    with tempfile.TemporaryDirectory() as tmp:
        count = pathlib.Path(tmp) / "count"
        d0 = pathlib.Path(tmp) / "base"
        d0.mkdir()
        base = run(argv, d0, 0, str(count))
        want = file_bytes(d0, out)
        total = int(count.read_text())
        bad, internal, absorbed = 0, 0, 0
        for n in range(1, total + 1, STEP):
            d = pathlib.Path(tmp) / f"n{n}"
            d.mkdir()
            try:
                p = run(argv, d, n)
            except subprocess.TimeoutExpired:
                failures.append(f"{name}: N={n}: hung")
                bad += 1
                continue
            err = p.stderr.decode("utf-8", "replace")
            left = sorted(os.listdir(d))
            if p.returncode == 70:
                # Nothing written, or (a failure after the files were
                # renamed into place, printing the warnings) all of it.
                whole = left == [] or (file_bytes(d, out) == want and not any(".tmp" in f for f in left))
                ok = "internal error" in err and p.stdout == b"" and whole
                internal += ok
            else:
                ok = (p.returncode == base.returncode and p.stdout == base.stdout
                      and file_bytes(d, out) == want)
                absorbed += ok
            if not ok:
                bad += 1
                if bad <= 5:
                    failures.append(f"{name}: N={n}: exit {p.returncode}, stdout {len(p.stdout)} bytes "
                                    f"(expected none or {len(base.stdout)}), left {left}\n{err[-600:]}")
            remove(d)
        print(f"{'ok  ' if not bad else 'FAIL'} {name}: {total} allocations; {internal} exit 70, "
              f"{absorbed} absorbed, {bad} wrong")


for case in CASES:
    one_case(*case)
for f in failures:
    print("FAIL " + f)
print(f"{len(CASES) - len({f.split(':')[0] for f in failures})} passed, "
      f"{len({f.split(':')[0] for f in failures})} failed")
sys.exit(1 if failures else 0)
