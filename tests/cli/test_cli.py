#!/usr/bin/env python3
"""CLI contract of `rankplan`: help, version, exit codes, formats."""
import json
import os
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ["RANKPLAN"]
SRC = os.environ["SRCROOT"]


def run(*args, **kw):
    env = dict(os.environ, NO_COLOR="1")
    env.update(kw.pop("env", {}))
    return subprocess.run([RP, *args], capture_output=True, text=True, env=env, timeout=60, **kw)


p = run("--help")
check(p.returncode == 0 and "usage: rankplan" in p.stdout, "rankplan --help")
p = run("--version")
check(p.returncode == 0 and p.stdout.startswith("rankplan "), "rankplan --version")
p = run()
check(p.returncode == 2, "no command exits 2")
p = run("chek", "x.yaml")
check(p.returncode == 2 and "did you mean 'rankplan check'" in p.stderr, "unknown command suggests")
for c in ("check", "compile", "search", "explain"):
    p = run(c, "--help")
    check(p.returncode == 0 and f"usage: rankplan {c}" in p.stdout, f"rankplan {c} --help")
p = run("check")
check(p.returncode == 2, "check without SPEC exits 2")
p = run("check", "--bogus", "x.yaml")
check(p.returncode == 2 and "unknown option" in p.stderr, "check unknown option exits 2")
p = run("check", "/nonexistent/spec.yaml")
check(p.returncode == 2 and "/nonexistent/spec.yaml" in p.stderr, "unreadable spec exits 2 and names it")
p = run("check", "--format", "xml", "x.yaml")
check(p.returncode == 2, "unknown --format exits 2")

with tempfile.TemporaryDirectory() as d:
    bad = os.path.join(d, "bad.yaml")
    with open(bad, "w") as f:
        f.write("version: 1\nmodle: {}\n")
    p = run("check", "--format", "json", bad)
    ok = p.returncode == 1
    try:
        j = json.loads(p.stdout)
        ok = ok and j["format"] == "rankplan.diagnostics/1" and j["errors"] >= 1
        ok = ok and all({"code", "severity", "message", "location", "help", "notes"} <= set(x) for x in j["diagnostics"])
    except Exception as e:  # noqa: BLE001
        print(e)
        ok = False
    check(ok, "check --format json is valid and carries the documented keys")
    p = run("check", "--format", "sarif", bad)
    ok = p.returncode == 1
    try:
        j = json.loads(p.stdout)
        ok = ok and j["version"] == "2.1.0" and j["runs"][0]["tool"]["driver"]["name"] == "rankplan"
        res = j["runs"][0]["results"]
        ok = ok and len(res) >= 1 and all("ruleId" in r and "locations" in r for r in res)
    except Exception as e:  # noqa: BLE001
        print(e)
        ok = False
    check(ok, "check --format sarif is SARIF 2.1.0")
    p = run("check", bad)
    check("\033[" not in p.stderr, "no colour when not a TTY / NO_COLOR")
    check(p.returncode == 1 and "bad.yaml:2:1: error[" in p.stderr, "text diagnostic has file:line:col: error[code]")

with tempfile.TemporaryDirectory() as d:
    # Thousands of errors: at most DIAG_MAX_KEPT (200) are printed, every one
    # is counted, and the JSON says how many were not shown.
    many = os.path.join(d, "many.yaml")
    pools = "".join("    - {name: p, tp: 1}\n" for _ in range(3000))
    with open(many, "w") as f:
        f.write("version: 1\nmodel: {preset: llama-3.1-8b}\nhardware: {preset: h200-sxm, nodes: 1}\n"
                "workload: {input_tokens: 10, output_tokens: 10}\ndeployment:\n  mode: aggregated\n  pools:\n" + pools)
    p = run("check", many)
    check(p.returncode == 1 and "more diagnostics not shown (at most 200 are kept)" in p.stderr
          and p.stderr.count("error[E0114]") == 200, "text output keeps 200 diagnostics and says how many were dropped")
    p = run("check", "--format", "json", many)
    j = json.loads(p.stdout)
    check(len(j["diagnostics"]) == 200 and j["not_shown"] + 200 == j["errors"] + j["warnings"],
          "json output counts the diagnostics not shown")

def run_tty(args, env_extra):
    """Runs rankplan with stdout and stderr on a pseudo-terminal; returns
    what it printed there."""
    import pty
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env.update(env_extra)
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(RP, [RP, *args], env)
    chunks = []
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode("utf-8", "replace")


with tempfile.TemporaryDirectory() as d:
    bad = os.path.join(d, "bad.yaml")
    with open(bad, "w") as f:
        f.write("version: 1\nmodle: {}\n")
    out = run_tty(["check", bad], {})
    check("\033[" in out and "error[E0101]" in out, "colour on a TTY")
    out = run_tty(["check", bad], {"NO_COLOR": "1"})
    check("\033[" not in out and "error[E0101]" in out, "no colour on a TTY with NO_COLOR")

def gib(b):
    """The text table's rendering of a byte count (util.c rp_fmt_bytes)."""
    v, units, u = float(b), ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 0
    while abs(v) >= 1024.0 and u < 5:
        v /= 1024.0
        u += 1
    return f"{b} B" if u == 0 else f"{v:.2f} {units[u]}"


# The ledger table and the JSON ledger carry the same numbers, row by row.
ex = os.path.join(SRC, "plans", "examples")
for name in ("llama-3.1-70b-pd", "deepseek-v3-pd", "llama-3.1-405b-pp"):
    spec = os.path.join(ex, name + ".yaml")
    pt = run("check", spec)
    pj = run("check", "--format", "json", spec)
    ok = pt.returncode == 0 and pj.returncode == 0
    rows = [l for l in pt.stdout.splitlines() if l and l.split()[0] not in ("memory", "pool") and ":" not in l]
    led = json.loads(pj.stdout)["ledger"] if ok else []
    ok = ok and len(rows) == len(led) and len(led) > 0
    for row, e in zip(rows, led):
        for key in ("weights", "kv_cache", "reserved"):
            ok = ok and gib(e[key]) in row
        ok = ok and row.split()[0] == e["pool"] and int(row.split()[1]) == e["stage"]
        ok = ok and str(e["requests_fit_instance"]) in row.split()
    check(ok, f"check text ledger equals the json ledger ({name})")

# Inputs that are not regular files: a FIFO nobody writes used to block
# forever and /dev/zero to read until memory ran out; each is refused at
# once, naming the file. Hooks must be `.lua` files (their lines are quoted
# in diagnostics, so another file's text must not be).
def not_regular_inputs():
    ex = os.path.join(SRC, "plans", "examples", "llama-3.1-70b-pd.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "input.fifo")
        os.mkfifo(fifo)
        cases = [("check FIFO spec", ["check", fifo], fifo),
                 ("compile FIFO spec", ["compile", fifo, "-o", os.path.join(tmp, "o.json")], fifo),
                 ("explain FIFO plan", ["explain", fifo], fifo),
                 ("explain /dev/zero", ["explain", "/dev/zero"], "/dev/zero"),
                 ("explain a directory", ["explain", tmp], tmp),
                 ("search FIFO calibration", ["search", ex, "--calibration", fifo], fifo)]
        for what, args, name in cases:
            try:
                q = run(*args, env={"RANKPLAN_CATALOG": os.path.join(SRC, "plans", "catalog")})
                ok = q.returncode in (1, 2) and name in q.stderr and "not a regular file" in q.stderr
            except subprocess.TimeoutExpired:
                ok, q = False, None
            check(ok, f"{what} is refused at once, naming it")
        text = open(ex).read() + "  hooks:\n    placement: HOOK\n"
        spec = os.path.join(tmp, "hooked.yaml")
        os.mkfifo(os.path.join(tmp, "fifo.lua"))
        for hook, want in (("fifo.lua", "not a regular file"),
                           ("secret.txt", "whose names end in `.lua`"),
                           ("dir.lua", "not a regular file")):
            open(os.path.join(tmp, "secret.txt"), "w").write("TOKEN-do-not-print\n")
            os.makedirs(os.path.join(tmp, "dir.lua"), exist_ok=True)
            open(spec, "w").write(text.replace("HOOK", hook))
            q = run("compile", spec, "-o", os.path.join(tmp, "o.json"),
                    env={"RANKPLAN_CATALOG": os.path.join(SRC, "plans", "catalog")})
            check(q.returncode == 1 and "E0601" in q.stderr and want in q.stderr
                  and "TOKEN-do-not-print" not in q.stderr, f"hook `{hook}` refused with E0601 ({want})")


def big_spec():
    """The bundled 70B example at 32,768 ranks: a plan that takes a while to
    write, so that a signal can arrive while its temporary exists."""
    text = open(os.path.join(SRC, "plans", "examples", "llama-3.1-70b-pd.yaml")).read()
    text = text.replace("  nodes: 4\n", "  nodes: 4096\n")
    text = text.replace("      replicas: 2\n      tp: 8\n", "      replicas: 2048\n      tp: 8\n")
    return text.replace("      replicas: 2\n      tp: 4\n", "      replicas: 4096\n      tp: 4\n")


def output_files():
    """Every file rankplan writes goes through outfile.c: an unpredictable
    O_EXCL temporary in the target's directory, renamed over the target;
    devices are written through, never replaced; `-o -` is standard output;
    an output that is an input is refused; nothing is left on error or
    signal."""
    import signal
    import stat
    import time
    ex = os.path.join(SRC, "plans", "examples", "llama-3.1-70b-pd.yaml")
    cat = {"RANKPLAN_CATALOG": os.path.join(SRC, "plans", "catalog")}
    with tempfile.TemporaryDirectory() as tmp:
        good = run("compile", ex, "-o", os.path.join(tmp, "good.json"), env=cat)
        want = open(os.path.join(tmp, "good.json"), "rb").read() if good.returncode == 0 else b"?"
        # /dev/null stays a device (as root the old rename replaced it).
        q = run("compile", ex, "-o", "/dev/null", env=cat)
        check(q.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), "-o /dev/null is written through")
        q = run("compile", ex, "-o", "/dev/full", env=cat)
        check(q.returncode == 2 and "/dev/full" in q.stderr and "No space left" in q.stderr,
              "-o /dev/full fails, naming it")
        q = subprocess.run([RP, "compile", ex, "-o", "-", "--format", "json"], capture_output=True,
                           env=dict(os.environ, **cat), timeout=60)
        check(q.returncode == 0 and q.stdout == want and b"W0301" in q.stderr,
              "-o - writes the plan bytes to stdout, diagnostics to stderr")
        spec = os.path.join(tmp, "spec.yaml")
        open(spec, "w").write(open(ex).read())
        before = open(spec).read()
        q = run("compile", spec, "-o", os.path.join(tmp, ".", "spec.yaml"), env=cat)
        check(q.returncode == 2 and "would destroy the input" in q.stderr and open(spec).read() == before,
              "compile -o SPEC is refused and the spec kept")
        q = run("search", spec, "-o", spec, env=cat)
        check(q.returncode == 2 and "would destroy the input" in q.stderr and open(spec).read() == before,
              "search -o SPEC is refused and the spec kept")
        q = run("search", spec, "-o", "-", env=cat)
        check(q.returncode == 2 and "-o -" in q.stderr, "search -o - is a usage error")
        os.mkdir(os.path.join(tmp, "dir"))
        q = run("compile", ex, "-o", os.path.join(tmp, "dir"), env=cat)
        check(q.returncode == 2 and "Is a directory" in q.stderr, "-o DIR is refused")
        # A symlink as the target: the file it names is replaced, the link stays.
        real, link = os.path.join(tmp, "real.json"), os.path.join(tmp, "link.json")
        open(real, "w").write("old")
        os.symlink("real.json", link)
        q = run("compile", ex, "-o", link, env=cat)
        check(q.returncode == 0 and os.path.islink(link) and open(real, "rb").read() == want,
              "-o SYMLINK replaces the file it names")
        # The old temporary name was PLAN.tmp.PID: a symlink planted there
        # made the compile overwrite its target. No fixed name is used now.
        victim = os.path.join(tmp, "victim")
        open(victim, "w").write("keep")
        for pid in range(os.getpid(), os.getpid() + 200):
            os.symlink(victim, os.path.join(tmp, f"p.json.tmp.{pid}"))
        q = run("compile", ex, "-o", os.path.join(tmp, "p.json"), env=cat)
        check(q.returncode == 0 and open(victim).read() == "keep", "a planted temporary symlink is not followed")
        left = [f for f in os.listdir(tmp) if f.endswith(".tmp")]
        check(not left, f"no temporary left after the runs ({left})")
        # SIGINT while a large plan is being written: no temporary is left.
        big = os.path.join(tmp, "big.yaml")
        open(big, "w").write(big_spec())
        out = os.path.join(tmp, "big", "plan.json")
        os.mkdir(os.path.join(tmp, "big"))
        p = subprocess.Popen([RP, "compile", big, "-o", out], env=dict(os.environ, **cat),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen, t0 = False, time.monotonic()
        while not seen and p.poll() is None and time.monotonic() - t0 < 60:
            seen = any(f.endswith(".tmp") for f in os.listdir(os.path.join(tmp, "big")))
            time.sleep(0.005)
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        left = os.listdir(os.path.join(tmp, "big"))
        check(seen and rc == -signal.SIGINT and left == [],
              f"SIGINT while writing leaves nothing (temporary seen {seen}, exit {rc}, left {left})")


def rankrun_outputs():
    """rankrun writes its report and calibration file through the same
    module; neither may name the plan it runs."""
    rr = os.path.join(os.environ.get("BUILDDIR", ""), "rankrun")
    if not os.path.exists(rr):
        print("skip rankrun outputs: no rankrun in this build")
        return
    ex = os.path.join(SRC, "plans", "examples", "llama-3.1-70b-pd.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        run("compile", ex, "-o", plan, env={"RANKPLAN_CATALOG": os.path.join(SRC, "plans", "catalog")})
        before = open(plan, "rb").read()
        for opt in ("--report", "--probe"):
            q = subprocess.run([rr, plan, "--node", "0", opt, os.path.join(tmp, ".", "plan.json")],
                               capture_output=True, text=True, timeout=60)
            check(q.returncode == 2 and "would destroy the plan" in q.stderr and open(plan, "rb").read() == before,
                  f"rankrun {opt} PLAN is refused and the plan kept")


not_regular_inputs()
output_files()
rankrun_outputs()
sys.exit(rptest.finish())
