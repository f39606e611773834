#!/usr/bin/env python3
"""`rankplan search` end to end: the table, JSON, explanations, calibration
files, -o, the budget, SLO diagnostics, usage errors and determinism."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ.get("RANKPLAN", "build/rankplan")
SRC = pathlib.Path(os.environ.get("SRCROOT", "."))
EX = SRC / "plans" / "examples"
FIX = SRC / "tests" / "search"
LLAMA = str(EX / "llama-3.1-70b-pd.yaml")
DSV3 = str(EX / "deepseek-v3-1024.yaml")



def run(*args):
    p = subprocess.run([RP, "search", *args], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def spec_variant(path, replace, tmp, name):
    text = pathlib.Path(path).read_text()
    for a, b in replace:
        assert a in text, a
        text = text.replace(a, b)
    out = pathlib.Path(tmp) / name
    out.write_text(text)
    return str(out)


rc, out, err = run("--help")
check(rc == 0 and "--calibration FILE" in out and "--explain" in out, "help")

rc, out, err = run(LLAMA)
check(rc == 0, "llama search exits 0", err)
check("goodput/GPU" in out and "binding" in out and "pareto" in out, "table header", out)
rows = [l for l in out.splitlines() if l.strip()[:2].strip().isdigit()]
check(len(rows) == 10, "ten rows by default", out)
check("\r" not in err and "candidates evaluated" not in err,
      "no progress on stderr when it is not a terminal", err)
check("warning[W0502]" in err and "serves 18.12 of the 20 req/s" in err,
      "the winner's unserved load is W0502", err)

rc, out, err = run(LLAMA, "--format", "json", "--top", "3", "--explain")
doc = json.loads(out)
check(rc == 0 and doc["format"] == "rankplan.search/1", "json format")
res = doc["results"]
check(len(res) == 3, "--top 3 gives three results")
w = res[0]
check(w["feasible"] and w["ttft_ms"] <= 600 and w["tpot_ms"] <= 40, "winner meets the SLOs", json.dumps(w))
check(w["gpus"] <= 32 and sum(p["replicas"] * p["gpus_per_instance"] for p in w["pools"]) == w["gpus"],
      "winner's GPUs add up and fit the cluster")
check(all(k in w for k in ("ttft_ms", "tpot_ms", "throughput_tok_s", "goodput_tok_s_per_gpu", "binding",
                           "pareto", "layout", "explain")), "result keys")
outside_ms = doc["constants"]["request_overhead_s"] * 1e3
check(abs(w["ttft_ms"] - (w["queue_ms"] + w["pools"][0]["latency_ms"] + w["kv_transfer_ms"] + outside_ms)) < 0.01,
      "ttft = queue + prefill + kv transfer + the time outside the GPU")
check(all("than #1" in r["explain"] or "ties #1" in r["explain"] or "misses" in r["explain"]
          for r in res[1:]), "explanations for the runners-up", out)
gp = [r["goodput_tok_s_per_gpu"] for r in res]
check(gp == sorted(gp, reverse=True), "ranked by goodput per GPU")

rc2, out2, _ = run(LLAMA, "--format", "json", "--top", "3", "--explain")
check(out == out2, "deterministic: same bytes twice")

rc, out, err = run(LLAMA, "--explain", "--top", "4")
check("why the alternatives lost:" in out and "winner: bound by" in out, "text explain", out)

# Calibration: a lower prefill efficiency makes prefill slower for the same layout.
rc, out, err = run(LLAMA, "--format", "json", "--calibration", str(FIX / "calib-ok.json"), "--top", "1")
cal = json.loads(out)
check(rc == 0 and cal["constants"]["mfu_prefill"] == 0.3, "calibration applied", err)
check(cal["results"][0]["ttft_ms"] != w["ttft_ms"] or cal["results"][0]["layout"] != w["layout"],
      "calibration changes the prediction")

rc, out, err = run(LLAMA, "--calibration", str(FIX / "calib-unknown-key.json"))
check(rc == 1 and "E0502" in err and "`hbm_eficiency`" in err and "calib-unknown-key.json:3:3:" in err
      and "hbm_efficiency" in err, "unknown calibration key named with its file, line and column", err)
rc, out, err = run(LLAMA, "--calibration", str(FIX / "calib-bad-value.json"))
check(rc == 1 and "E0503" in err and "got 1.5" in err and "calib-bad-value.json:2:3:" in err,
      "calibration value out of range, at its key", err)
rc, out, err = run(LLAMA, "--calibration", str(FIX / "calib-syntax.json"))
check(rc == 1 and "E0504" in err, "calibration syntax error", err)
rc, out, err = run(LLAMA, "--calibration", str(FIX / "does-not-exist.json"))
check(rc == 2 and "E0505" in err, "unreadable calibration file exits 2", err)

with tempfile.TemporaryDirectory() as tmp:
    plan = os.path.join(tmp, "plan.json")
    rc, out, err = run(LLAMA, "--top", "1", "-o", plan)
    check(rc == 0 and os.path.exists(plan), "-o writes the plan", err)
    if os.path.exists(plan):
        p = json.load(open(plan))
        check(p["format"] == "rankplan.plan/1", "plan format")
        check(p["world_size"] == w["gpus"], "plan world size is the winner's GPUs")
        check([(q["role"], q["replicas"]) for q in p["pools"]] ==
              [(q["role"], q["replicas"]) for q in w["pools"]], "plan pools are the winner's",
              json.dumps(p["pools"])[:400])
        check(abs(p["estimates"]["ttft_ms"] - w["ttft_ms"]) < 0.01, "plan estimates carry the prediction")

    # -o runs the same stages as compile, hooks included: a placement hook
    # that fills the cluster from its last GPU backwards decides the devices.
    hook = os.path.join(tmp, "reverse.lua")
    with open(hook, "w") as f:
        f.write("return function(ctx)\n"
                "  local t, n = ctx.topology, ctx.topology.nodes * ctx.topology.gpus_per_node\n"
                "  local out = {}\n"
                "  for r = 0, ctx.world_size - 1 do\n"
                "    local g = n - 1 - r\n"
                "    out[#out + 1] = {rank = r, node = g // t.gpus_per_node, gpu = g % t.gpus_per_node}\n"
                "  end\n"
                "  return out\n"
                "end\n")
    # (the reversed order does not keep a tp group inside one node unless
    # its ranks start on a node boundary, so the spec lets it cross)
    s = spec_variant(LLAMA, [("  mode: disaggregated",
                              "  mode: disaggregated\n  placement: reverse.lua\n  allow_tp_across_domain: true")],
                     tmp, "hooked.yaml")
    plan2 = os.path.join(tmp, "plan2.json")
    rc, out, err = run(s, "--top", "1", "-o", plan2)
    check(rc == 0 and os.path.exists(plan2), "-o with a placement hook writes the plan", err)
    if os.path.exists(plan2):
        p = json.load(open(plan2))
        r0 = p["ranks"][0]
        check(r0["node"] == 3 and r0["device"] == 7, "-o runs the spec's placement hook (rank 0 on node 3 GPU 7)",
              json.dumps(r0)[:300])

    # SLO nobody meets: a valid spec, exit 4 (docs/ci.md).
    s = spec_variant(LLAMA, [("tpot: 40 ms", "tpot: 0.1 ms")], tmp, "tight.yaml")
    rc, out, err = run(s)
    check(rc == 4 and ("E0508" in err or "E0500" in err), "unreachable TPOT: E0500/E0508, exit 4", err)
    s = spec_variant(LLAMA, [("ttft: 600 ms", "ttft: 20 ms")], tmp, "ttft.yaml")
    rc, out, err = run(s, "--format", "json")
    check(rc == 4 and ('"E0500"' in out or '"E0508"' in out), "unreachable TTFT, json diagnostics, exit 4",
          out + err)

    # The objective hook re-ranks: fewest GPUs first.
    lua = pathlib.Path(tmp) / "fewest.lua"
    lua.write_text("return function(ctx) return -ctx.candidate.gpus end\n")
    s = pathlib.Path(tmp) / "objective.yaml"
    s.write_text(pathlib.Path(LLAMA).read_text() + "  hooks:\n    objective: fewest.lua\n")
    rc, out, err = run(str(s), "--format", "json", "--top", "1000", "--catalog", str(SRC / "plans" / "catalog"))
    check(rc == 0, "objective hook search runs", err)
    if rc == 0:
        d = json.loads(out)
        feas = [r for r in d["results"] if r["feasible"]]
        g = [r["gpus"] for r in feas]
        check(g == sorted(g) and g[0] < w["gpus"], "objective hook ranks fewest GPUs first", str(g[:10]))
    lua.write_text("return function(ctx) return 'high' end\n")
    rc, out, err = run(str(s), "--catalog", str(SRC / "plans" / "catalog"))
    check(rc == 1 and "E06" in err, "a failing objective hook is an error", err)

    # The named budget.
    rc, out, err = run(LLAMA, "--max-candidates", "40")
    check("W0500" in err and "40 candidates" in err, "budget hit is reported", err)

    # The xPyD step counts against the budget too. On 32,768 nodes (262,144
    # GPUs, the cluster limit) one prefill/decode pair has about 65,000
    # (x, y) points; with a budget of 5,000 the layouts take about 1,800 and
    # the first pair's integer search is cut where the budget ends: exactly
    # 5,000 evaluations, the cut said, and that pair's best point ranked.
    # (Before, the pair ran all its points past the budget and was then
    # dropped, so the output had no disaggregated row at all; at 2^62
    # nodes it never ended.)
    big = spec_variant(LLAMA, [("  nodes: 4\n", "  nodes: 32768\n")], tmp, "llama-32768-nodes.yaml")
    rc, out, err = run(big, "--format", "json", "--max-candidates", "5000")
    check(rc == 0 and "W0500" in err, "xPyD budget: exits 0 with the budget warning", err)
    if rc == 0:
        d = json.loads(out)
        check(d["budget"] == {"max_candidates": 5000, "evaluated": 5000, "hit": True},
              "xPyD budget: every evaluation counted, none past the budget", str(d["budget"]))
        check(any(r["mode"] == "disaggregated" for r in d["results"]),
              "xPyD budget: the cut pair keeps the best point it reached", out[:2000])
    rc, out, err = run(big, "--max-candidates", "5000")
    check(rc == 0 and "evaluated 5000 candidates (budget 5000, hit)" in out,
          "xPyD budget: the table says the budget cut the search", out[:500])

    # The layout enumeration's steps count against the budget as well: 64
    # per candidate. With prime expert counts almost no step yields a
    # layout; before, this search ran for hours at any budget.
    # The cut comes in the prefill layouts, so no role has a layout left to
    # rank (E0508, as when the candidate budget runs out there).
    rc, out, err = run(str(FIX / "moe-prime-experts.yaml"), "--max-candidates", "10000")
    check(rc == 4 and "W0500" in err and "search stopped at its budget of 10000 candidates: "
          "enumerating layouts took 640000 steps (64 per candidate of the budget) for 1596 evaluated"
          in err, "enumeration steps: the budget cut is reported with the steps", err)

    # A search spec without pools: aggregated and disaggregated are both searched.
    text = pathlib.Path(DSV3).read_text()
    head = text[: text.index("  pools:")]
    s = pathlib.Path(tmp) / "dsv3-search.yaml"
    s.write_text(head.replace("mode: disaggregated", "mode: search"))
    rc, out, err = run(str(s), "--format", "json", "--top", "100000", "--catalog", str(SRC / "plans" / "catalog"))
    check(rc == 0, "DeepSeek-V3 1024-GPU search spec", err)
    if rc == 0:
        d = json.loads(out)
        modes = {r["mode"] for r in d["results"]}
        check(modes == {"aggregated", "disaggregated"}, "both modes searched", str(modes))
        check(not d["budget"]["hit"] and d["budget"]["evaluated"] > 1000, "full search within budget")
        check(d["mla_tp_opt"] is not None, "MLA attention tp optimum reported")
        check(any(r["pareto"] for r in d["results"]), "pareto frontier marked")

# The spec path: `-` reads standard input; a FIFO is refused without being
# opened for a blocking read (it used to wait forever for a writer).
p = subprocess.run([RP, "search", "-", "--top", "1"], input=pathlib.Path(LLAMA).read_text(),
                   capture_output=True, text=True, timeout=120)
check(p.returncode == 0 and "search: Llama-3.1-70B" in p.stdout, "spec from standard input (-)", p.stderr)
with tempfile.TemporaryDirectory() as tmp:
    fifo = os.path.join(tmp, "spec.yaml")
    os.mkfifo(fifo)
    rc, out, err = run(fifo)
    check(rc == 2 and "error[E0001]: cannot read the spec: it is a FIFO, not a regular file" in err,
          "a FIFO as the spec: E0001, exit 2, no wait", err)

# Progress goes to stderr only when stderr is a terminal; stdout is the same.
import pty
mfd, sfd = pty.openpty()
p = subprocess.run([RP, "search", LLAMA, "--top", "1"], stdout=subprocess.PIPE, stderr=sfd,
                   stdin=subprocess.DEVNULL, timeout=120)
os.close(sfd)
tty = b""
try:
    while True:
        chunk = os.read(mfd, 4096)
        if not chunk:
            break
        tty += chunk
except OSError:
    pass
os.close(mfd)
check(p.returncode == 0 and b"candidates evaluated" in tty, "progress on a terminal", repr(tty[:200]))
check(b"candidates evaluated" not in p.stdout and p.stdout.decode() == run(LLAMA, "--top", "1")[1],
      "progress never on stdout")

# Usage errors.
# Each names what is wrong (the option, the value) on stderr and prints nothing
# on stdout.
for args, code, want, what in (
        ((), 2, "missing SPEC", "missing SPEC"),
        ((LLAMA, "--bogus"), 2, "unknown option '--bogus'", "unknown option"),
        ((LLAMA, "--top", "0"), 2, "--top expects a count from 1, got '0'", "--top 0"),
        ((LLAMA, "--max-candidates", "0"), 2, "--max-candidates expects a count from 1, got '0'",
         "--max-candidates 0"),
        ((LLAMA, "--gpus", "-3"), 2, "--gpus expects a count from 1, got '-3'", "--gpus -3"),
        ((LLAMA, "--calibration"), 2, "option '--calibration' needs a value", "--calibration without a file"),
        ((LLAMA, "--format", "xml"), 2, "unknown format 'xml' (expected text or json)", "unknown format"),
        (("/nonexistent/spec.yaml",), 2, "/nonexistent/spec.yaml: error[E0001]: cannot read the spec",
         "unreadable spec")):
    rc, out, err = run(*args)
    check(rc == code and want in err and out == "", f"{what}: exit {code}, the reason named", (rc, out, err))

sys.exit(rptest.finish())
