#!/usr/bin/env python3
"""`rankplan check` as a CI gate (docs/ci.md): it agrees with `compile`
(`search` for search specs) on every golden spec and example; several
files, --deny, --warnings-as-errors and the exit codes; the GitHub Actions
workflow of docs/ci.md and the pre-commit hook of .pre-commit-hooks.yaml,
their rankplan command lines run as written."""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "golden"))
import run as golden_run  # noqa: E402  (the golden cases' layout)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.path.abspath(os.environ.get("RANKPLAN", "build/rankplan"))
SRC = pathlib.Path(os.environ.get("SRCROOT", ".")).resolve()
EX = SRC / "plans" / "examples"
GOLDEN = SRC / "tests" / "golden"
ENV = dict(os.environ, NO_COLOR="1", RANKPLAN_CATALOG=str(SRC / "plans" / "catalog"))



def rp(args, cwd=None, timeout=300):
    return subprocess.run([RP, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# ---- check and compile agree ------------------------------------------------

def golden_cases():
    """(name, directory holding the spec, extra options) of every golden."""
    for kind in ("ok", "err"):
        d = GOLDEN / kind
        names = {p.name[: -len(".gen.py")] for p in d.glob("*.gen.py")} | {p.stem for p in d.glob("*.yaml")}
        for n in sorted(names):
            argf = d / f"{n}.args"
            words = argf.read_text().split() if argf.exists() else ["check"]
            # Keep the options all three commands take (--catalog DIR).
            extra = []
            for i, w in enumerate(words):
                if w == "--catalog" and i + 1 < len(words):
                    extra += words[i : i + 2]
            yield kind, n, extra


def verdicts(spec, extra, cwd):
    """check's exit code, and the exit code and command of the command it
    must agree with: compile, or search for a search spec."""
    c = rp(["check", "--quiet", *extra, spec], cwd=cwd)
    out = os.path.join(cwd, "plan.json")
    k = rp(["compile", *extra, spec, "-o", out], cwd=cwd)
    if os.path.exists(out):
        os.unlink(out)
    if k.returncode == 1 and "error[E0310]" in k.stderr:
        s = rp(["search", *extra, spec], cwd=cwd)
        return c, "search", s
    return c, "compile", k


def agree(c, what, k):
    """check accepts (0, or 4: valid but the SLOs are missed) exactly when
    compile writes a plan; search and check give the same exit code."""
    if what == "search":
        return c.returncode == k.returncode
    if k.returncode == 0:
        return c.returncode in (0, 4)
    return c.returncode == k.returncode


def test_agreement():
    counts = {"compile": 0, "search": 0, "accepted": 0, "refused": 0}
    for kind, name, extra in golden_cases():
        with tempfile.TemporaryDirectory() as tmp:
            spec = golden_run.stage_case(kind, name, tmp)
            c, what, k = verdicts(spec, extra, tmp)
        counts[what] += 1
        counts["accepted" if c.returncode in (0, 4) else "refused"] += 1
        check(agree(c, what, k), f"golden {kind}/{name}: check exit {c.returncode}, {what} exit {k.returncode}",
              c.stderr[-1500:] + "\n----\n" + k.stderr[-1500:])
    for ex in sorted(EX.glob("*.yaml")):
        c, what, k = verdicts(str(ex), [], str(EX))
        counts[what] += 1
        counts["accepted" if c.returncode in (0, 4) else "refused"] += 1
        check(agree(c, what, k) and c.returncode == 0,
              f"example {ex.name}: check exit {c.returncode}, {what} exit {k.returncode}",
              c.stderr[-1500:] + "\n----\n" + k.stderr[-1500:])
    # Each example as a search spec (mode search, no pools): check runs the
    # search and agrees with `rankplan search`.
    with tempfile.TemporaryDirectory() as tmp:
        for ex in sorted(EX.glob("*.yaml")):
            text = ex.read_text()
            if "  pools:" not in text or "  hooks:" in text:
                continue
            text = re.sub(r"  mode: \w+", "  mode: search", text[: text.index("  pools:")])
            spec = pathlib.Path(tmp) / ex.name
            spec.write_text(text)
            c, what, k = verdicts(spec.name, [], tmp)
            counts[what] += 1
            counts["accepted" if c.returncode in (0, 4) else "refused"] += 1
            check(what == "search" and agree(c, what, k),
                  f"example {ex.name} as a search spec: check exit {c.returncode}, {what} exit {k.returncode}",
                  c.stderr[-1500:] + "\n----\n" + k.stderr[-1500:])
    # Both verdicts occur, or the comparison would not tell anything.
    check(counts["accepted"] > 10 and counts["refused"] > 100 and counts["search"] >= 1,
          f"verdicts compared: {counts}")


def test_compile_only_rules(tmp):
    """Rules that ran only at compile before: placement (E0322, E0323) and
    the hooks are check's too."""
    cases = [
        ("E0322", (EX / "llama-3.1-405b-pp.yaml").read_text()
         .replace("order: tp-cp-ep-dp-pp", "order: pp-tp-cp-ep-dp")),
        # 18 + 12 GPUs fit 32, but the decode instance's tp groups must not
        # straddle a domain, so the default placement starts it at GPU 24.
        ("E0323", (EX / "llama-3.1-70b-pd.yaml").read_text()
         .replace("      replicas: 2\n      tp: 8", "      replicas: 1\n      tp: 1\n      pp: 9\n      cp: 2")
         .replace("      replicas: 2\n      tp: 4", "      replicas: 1\n      tp: 4\n      pp: 3")),
    ]
    for code, text in cases:
        p = pathlib.Path(tmp) / f"{code}.yaml"
        p.write_text(text)
        c = rp(["check", str(p)])
        check(c.returncode == 1 and f"error[{code}]" in c.stderr, f"check reports {code} (placement)",
              c.stderr[-1500:])


# ---- several files, --deny, --warnings-as-errors, exit codes ------------------

def test_options(tmp):
    good = str(EX / "llama-3.1-8b-agg.yaml")
    idle = str(EX / "llama-3.1-70b-pd.yaml")   # W0301: 8 idle GPUs
    bad = pathlib.Path(tmp) / "bad.yaml"
    bad.write_text((EX / "llama-3.1-8b-agg.yaml").read_text().replace("      tp: 2", "      tp: 3"))
    slo = pathlib.Path(tmp) / "slo.yaml"
    slo.write_text((EX / "llama-3.1-70b-pd.yaml").read_text().replace("tpot: 40 ms", "tpot: 5 ms"))
    c = rp(["check", good, idle])
    check(c.returncode == 0 and f"{good}: ok" in c.stdout and f"{idle}: ok" in c.stdout
          and "warning[W0301]" in c.stderr, "two valid specs: exit 0, each says ok", c.stdout + c.stderr)
    c = rp(["check", good, str(bad), idle])
    check(c.returncode == 1 and "bad.yaml" in c.stderr and f"{good}: ok" in c.stdout,
          "an invalid spec among three: exit 1, the others still checked", c.stdout[-800:] + c.stderr[-800:])
    c = rp(["check", "--deny", "W0301", idle])
    check(c.returncode == 1 and "error[W0301]" in c.stderr and "because of --deny" in c.stderr,
          "--deny W0301 makes the idle-GPU warning an error", c.stderr[-800:])
    c = rp(["check", "--deny", "W0301", good])
    check(c.returncode == 0, "--deny of a code the spec does not raise: exit 0", c.stderr[-800:])
    c = rp(["check", "--warnings-as-errors", idle])
    # The example warns twice: 8 idle GPUs (W0301) and 9 of its 20 req/s served (W0502).
    check(c.returncode == 1 and "error[W0301]" in c.stderr and "error[W0502]" in c.stderr
          and "2 errors, 0 warnings" in c.stderr, "--warnings-as-errors", c.stderr[-800:])
    c = rp(["check", "--deny", "W0310", good])
    check(c.returncode == 2 and "unknown diagnostic code 'W0310'" in c.stderr, "--deny of an unknown code: exit 2",
          c.stderr)
    c = rp(["check", "--deny", "w0301", idle])
    check(c.returncode == 1 and "error[W0301]" in c.stderr, "--deny takes a code in lower case", c.stderr[-800:])
    c = rp(["check", "--deny", "W03O1", good])
    check(c.returncode == 2 and "did you mean W0301" in c.stderr, "--deny suggests the closest code", c.stderr)
    c = rp(["check", str(slo)])
    check(c.returncode == 4 and "warning[W0501]" in c.stderr and "valid, but no layout meets the SLOs" in c.stdout,
          "pools that miss the SLO: W0501, exit 4", c.stdout[-500:] + c.stderr[-800:])
    c = rp(["check", str(slo), good])
    check(c.returncode == 4, "exit 4 beats exit 0")
    c = rp(["check", str(slo), str(bad)])
    check(c.returncode == 1, "exit 1 beats exit 4")
    c = rp(["check", "--deny", "W0501", str(slo)])
    check(c.returncode == 1, "--deny W0501 refuses pools that miss the SLO")
    c = rp(["check", str(slo), str(pathlib.Path(tmp) / "missing.yaml")])
    check(c.returncode == 2, "an unreadable spec: exit 2 beats 4")
    search = pathlib.Path(tmp) / "search.yaml"
    text = (EX / "llama-3.1-70b-pd.yaml").read_text().replace("mode: disaggregated", "mode: search")
    search.write_text(text[: text.index("  pools:")].replace("tpot: 40 ms", "tpot: 0.1 ms"))
    c = rp(["check", str(search)])
    s = rp(["search", str(search)])
    check(c.returncode == 4 and s.returncode == 4 and re.search(r"error\[E05(00|08)\]", c.stderr),
          "a search spec no layout serves: check and search exit 4", c.stderr[-800:])
    c = rp(["check", "--format", "json", good, idle])
    doc = json.loads(c.stdout) if c.returncode in (0, 1) else {}
    specs = {row.get("spec") for row in doc.get("ledger", [])}
    check(c.returncode == 0 and doc.get("warnings") == 2 and specs == {good, idle},
          "json: one document, ledger rows name their spec", c.stdout[-800:])
    c = rp(["check", "--format", "sarif", good, str(bad)])
    sarif = json.loads(c.stdout) if c.stdout.startswith("{") else {}
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif.get("runs", [{}])[0].get("results", []) for loc in r.get("locations", [])}
    check(c.returncode == 1 and sarif.get("version") == "2.1.0" and uris == {str(bad)},
          "sarif: one log for several specs", c.stdout[-800:])


# ---- the GitHub Actions workflow and the pre-commit hook ----------------------

def workflow():
    text = (SRC / "docs" / "ci.md").read_text()
    section = text[text.index("## GitHub Actions"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return yaml.safe_load(block)


def path_with_rankplan(tmp):
    bin_dir = pathlib.Path(tmp) / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "rankplan"
    if not link.exists():
        link.symlink_to(RP)
    return str(bin_dir) + os.pathsep + os.environ.get("PATH", "")


def run_step(cmd, cwd, path):
    """A run step as GitHub runs it on Linux: bash -e -o pipefail."""
    env = dict(ENV, PATH=path)
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_workflow(tmp):
    wf = workflow()
    on = wf.get("on", wf.get(True))   # YAML 1.1 reads a bare `on` as true
    job = wf["jobs"]["check"]
    steps = job["steps"]
    check(on is not None and "pull_request" in on, "workflow runs on pull requests")
    check(job.get("permissions", {}).get("security-events") == "write",
          "the job may upload SARIF (security-events: write)")
    runs = [s["run"] for s in steps if "run" in s and s["run"].lstrip().startswith("rankplan ")]
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@")]
    check(len(runs) == 1 and len(uploads) == 1, "one rankplan step, one SARIF upload")
    if len(runs) != 1 or len(uploads) != 1:
        return
    cmd, up = runs[0].strip(), uploads[0]
    out = re.search(r">\s*(\S+)\s*$", cmd)
    check(out is not None and up["with"]["sarif_file"] == out.group(1) and up.get("if") == "always()",
          "the upload takes the file the check writes, also after a failure")
    work = pathlib.Path(tmp) / "repo"
    (work / "deploy").mkdir(parents=True)
    for name in ("llama-3.1-8b-agg.yaml", "deepseek-v3-pd.yaml", "qwen3-235b-ep.yaml"):
        shutil.copyfile(EX / name, work / "deploy" / name)
    path = path_with_rankplan(tmp)
    p = run_step(cmd, work, path)
    sarif = json.loads((work / up["with"]["sarif_file"]).read_text())
    results = sarif["runs"][0]["results"]
    check(p.returncode == 0 and sarif["version"] == "2.1.0" and
          all(r["level"] != "error" for r in results), "workflow step on valid specs: succeeds, SARIF written",
          p.stderr[-800:])
    (work / "deploy" / "broken.yaml").write_text(
        (EX / "llama-3.1-8b-agg.yaml").read_text().replace("      tp: 2", "      tp: 3"))
    p = run_step(cmd, work, path)
    sarif = json.loads((work / up["with"]["sarif_file"]).read_text())
    bad = [r for r in sarif["runs"][0]["results"] if r["level"] == "error"]
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in bad for loc in r["locations"]}
    check(p.returncode == 1 and bad and uris == {"deploy/broken.yaml"},
          "workflow step with an invalid spec: fails, SARIF names it", json.dumps(bad)[:800])


def test_precommit(tmp):
    hooks = yaml.safe_load((SRC / ".pre-commit-hooks.yaml").read_text())
    hook = next((h for h in hooks if h.get("id") == "rankplan-check"), None)
    check(hook is not None and hook.get("language") == "system" and hook.get("pass_filenames", True),
          "pre-commit hook rankplan-check is defined")
    if hook is None:
        return
    entry = shlex.split(hook["entry"])
    path = path_with_rankplan(tmp)
    good = pathlib.Path(tmp) / "good.yaml"
    good.write_text((EX / "llama-3.1-8b-agg.yaml").read_text())
    bad = pathlib.Path(tmp) / "bad.yaml"
    bad.write_text((EX / "llama-3.1-8b-agg.yaml").read_text().replace("      tp: 2", "      tp: 3"))
    env = dict(ENV, PATH=path)
    for files, want in (([good], 0), ([bad], 1), ([good, bad], 1)):
        p = subprocess.run(entry + [str(f) for f in files], env=env, capture_output=True, text=True, timeout=120)
        check(p.returncode == want and (want == 0 or "bad.yaml" in p.stderr) and p.stdout == "",
              f"pre-commit entry on {[f.name for f in files]}: exit {want}", p.stdout[-500:] + p.stderr[-800:])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_compile_only_rules(tmp)
        test_options(tmp)
        test_workflow(tmp)
        test_precommit(tmp)
    test_agreement()
    return rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
