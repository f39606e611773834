#!/usr/bin/env python3
"""Golden tests: spec -> diagnostics text, spec -> check output.

tests/golden/err/NAME.yaml   expected: exit 1 (or the number in NAME.rc),
                             stderr equal to NAME.err, and stdout equal to
                             NAME.out when that exists
tests/golden/err/NAME.gen.py a generator: run with one argument, the path to
                             write NAME.yaml to (for inputs too big or too
                             odd to keep in git); same NAME.err contract
tests/golden/ok/NAME.yaml    expected: exit 0, stdout equal to NAME.out,
                             stderr equal to NAME.err when that exists

Each case runs in a scratch directory holding err/NAME.yaml (or ok/...), so
the paths in messages are stable. `run.py --update` rewrites the expected
files from the current output (review the diff before committing).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
RANKPLAN = os.path.abspath(os.environ.get("RANKPLAN") or str(HERE.parents[1] / "build" / "rankplan"))
UPDATE = "--update" in sys.argv
ONLY = [a for a in sys.argv[1:] if not a.startswith("--")]


def cases():
    for kind in ("err", "ok"):
        d = HERE / kind
        if not d.is_dir():
            continue
        names = set()
        for p in d.iterdir():
            if p.name.endswith(".gen.py"):
                names.add(p.name[: -len(".gen.py")])
            elif p.suffix == ".yaml":
                names.add(p.stem)
        for n in sorted(names):
            if ONLY and n not in ONLY:
                continue
            yield kind, n


def stage_case(kind, name, tmp):
    """Lays the case out in tmp: KIND/NAME.yaml (generated or copied) and
    its side inputs. Returns the spec's path relative to tmp (tests/ci
    stages the cases the same way)."""
    src = HERE / kind
    work = pathlib.Path(tmp) / kind
    work.mkdir(parents=True, exist_ok=True)
    target = work / f"{name}.yaml"
    gen = src / f"{name}.gen.py"
    if gen.exists():
        subprocess.run([sys.executable, str(gen), str(target)], check=True)
    else:
        shutil.copyfile(src / f"{name}.yaml", target)
    # Hook files and other side inputs referenced by the spec travel along.
    side = src / name
    if side.is_dir():
        shutil.copytree(side, work / name, dirs_exist_ok=True)
    return f"{kind}/{name}.yaml"


def run_case(kind, name, tmp):
    src = HERE / kind
    stage_case(kind, name, tmp)
    env = dict(os.environ, NO_COLOR="1")
    env.setdefault("RANKPLAN_CATALOG", str(HERE.parents[1] / "plans" / "catalog"))
    args = [RANKPLAN, "check", f"{kind}/{name}.yaml"]
    argf = src / f"{name}.args"
    if argf.exists():
        args = [RANKPLAN] + argf.read_text().split() + [f"{kind}/{name}.yaml"]
    p = subprocess.run(args, cwd=tmp, env=env, capture_output=True, timeout=60)
    return p


def main():
    failed = 0
    total = 0
    for kind, name in cases():
        total += 1
        with tempfile.TemporaryDirectory() as tmp:
            p = run_case(kind, name, tmp)
        src = HERE / kind
        want_rc = 0 if kind == "ok" else 1
        rcf = src / f"{name}.rc"
        if rcf.exists():
            want_rc = int(rcf.read_text().strip())
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        errf, outf = src / f"{name}.err", src / f"{name}.out"
        if UPDATE:
            if kind == "err" or err:
                errf.write_text(err)
            if kind == "ok" or outf.exists():
                outf.write_text(out)
            print(f"updated {kind}/{name}")
            continue
        problems = []
        if p.returncode != want_rc:
            problems.append(f"exit {p.returncode}, expected {want_rc}")
        if p.returncode < 0 or p.returncode == 70:
            problems.append("crashed or internal error")
        if "Sanitizer" in err or "runtime error" in err:
            problems.append("sanitizer report")
        if errf.exists() and errf.read_text() != err:
            problems.append("stderr differs from " + errf.name)
        elif kind == "err" and not errf.exists():
            problems.append("missing " + errf.name)
        if outf.exists() and outf.read_text() != out:
            problems.append("stdout differs from " + outf.name)
        if problems:
            failed += 1
            print(f"FAIL {kind}/{name}: {'; '.join(problems)}")
            print("---- stderr ----\n" + err[-4000:])
            if kind == "ok":
                print("---- stdout ----\n" + out[-2000:])
        else:
            print(f"ok   {kind}/{name}")
    print(f"{total} golden cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
