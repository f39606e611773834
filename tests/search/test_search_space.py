#!/usr/bin/env python3
"""`search:` constraints and the `filter` hook: a constrained search ranks
only layouts inside the constraints, and its winner is the best deployment
of that space as an exhaustive `rankplan compile` of every in-space
deployment finds it; bad constraints are E0120 at their position."""
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import searchlib  # noqa: E402
from searchlib import RP, SRC, check  # noqa: E402
FIX = SRC / "tests" / "search"

# Llama-3.1-70B on two nodes of 8 H200, no offered rate (the most goodput
# per GPU the cluster can give), the 70B example's workload and SLOs.
BASE = """version: 1
name: space
model: {{ preset: llama-3.1-70b }}
hardware: {{ preset: h200-sxm, nodes: 2, gpus_per_node: 8 }}
workload: {{ input_tokens: 4000, output_tokens: 500{rate} }}
slo: {{ ttft: 600 ms, tpot: 40 ms }}
deployment:
  mode: {mode}
{hooks}{pools}
"""



def write(tmp, name, text):
    p = pathlib.Path(tmp) / name
    p.write_text(text)
    return str(p)


def spec(mode="search", search="", pools="", hooks="", rate=""):
    return BASE.format(mode=mode, pools=pools, hooks=hooks, rate=rate) + search


def search(path, *args):
    p = subprocess.run([RP, "search", path, "--format", "json", "--top", "1000", *args],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def pools_yaml(pools):
    out = "  pools:\n"
    for name, role, reps, tp in pools:
        out += f"    - {{ name: {name}, role: {role}, replicas: {reps}, tp: {tp} }}\n"
    return out


def compile_goodput(tmp, pools):
    """Compiles one deployment; its plan's goodput per GPU, or None when
    compile refuses it (memory, placement)."""
    mode = "aggregated" if pools[0][1] == "both" else "disaggregated"
    path = write(tmp, "one.yaml", spec(mode=mode, pools=pools_yaml(pools)))
    plan = str(pathlib.Path(tmp) / "one.json")
    p = subprocess.run([RP, "compile", path, "-o", plan], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None
    return json.loads(pathlib.Path(plan).read_text())["estimates"]["goodput_tok_s_per_gpu"]


TPS = [2, 4, 8]  # the constraint below; tp1 does not hold 70B's weights on one H200
CONSTRAINT = """search:
  pp: false
  cp: false
  prefill: { tp: [2, 4, 8], dcp: 1 }
  decode: { tp: [2, 4, 8], dcp: 1 }
  both: { tp: [2, 4, 8], dcp: 1 }
"""


def in_space(res):
    return all(p["parallel"]["tp"] in TPS and p["parallel"]["pp"] == 1 and p["parallel"]["cp"] == 1
               and p["parallel"]["dcp"] == 1 for p in res["pools"])


def exhaustive(tmp, G=16):
    """Every in-space deployment on G GPUs, compiled: the best goodput/GPU."""
    best, best_layout = -1.0, None
    for tp in TPS:
        for r in range(1, G // tp + 1):
            g = compile_goodput(tmp, [("serve", "both", r, tp)])
            if g is not None and g > best:
                best, best_layout = g, f"{r}xPD(tp{tp})"
    for tpp, tpd in itertools.product(TPS, TPS):
        for x in range(1, G // tpp + 1):
            for y in range(1, (G - x * tpp) // tpd + 1):
                g = compile_goodput(tmp, [("prefill", "prefill", x, tpp), ("decode", "decode", y, tpd)])
                if g is not None and g > best:
                    best, best_layout = g, f"{x}xP(tp{tpp}) {y}xD(tp{tpd})"
    return best, best_layout


with tempfile.TemporaryDirectory() as tmp:
    path = write(tmp, "c.yaml", spec(search=CONSTRAINT))
    rc, out, err = search(path, "--explain")
    check(rc == 0, "constrained search runs", err)
    doc = json.loads(out)
    res = doc["results"]
    check(len(res) > 0 and all(in_space(r) for r in res), "every ranked layout is inside the constraints",
          "\n".join(r["layout"] for r in res if not in_space(r)))
    reasons = [r["reason"] for r in doc["rejected"]]
    check(any("search.pp: false" in r for r in reasons) and any("search.cp: false" in r for r in reasons),
          "--explain names the constraints that rejected candidates", json.dumps(doc["rejected"], indent=1))
    best, layout = exhaustive(tmp)
    w = res[0]
    check(abs(w["goodput_tok_s_per_gpu"] - round(best, 2)) <= 0.01,
          f"the winner is the exhaustive compile's best ({layout}, {best:.2f} tok/s/GPU)",
          f"search: {w['layout']} {w['goodput_tok_s_per_gpu']}")

    # Unconstrained, the same spec ranks layouts outside the space first,
    # so the constraint is what selects the in-space winner.
    rc, out, _ = search(write(tmp, "u.yaml", spec()))
    check(rc == 0 and not all(in_space(r) for r in json.loads(out)["results"]),
          "without constraints the search leaves the space")

    # Ranges, instance GPUs, whole nodes and separate nodes.
    cases = [
        ("decode: { tp: { min: 4 } }\n", lambda p: p["role"] != "decode" or p["parallel"]["tp"] >= 4),
        ("prefill: { gpus: { max: 4 } }\n", lambda p: p["role"] != "prefill" or p["gpus_per_instance"] <= 4),
        ("whole_nodes: true\n", lambda p: p["gpus_per_instance"] % 8 == 0),
    ]
    for body, ok in cases:
        rc, out, err = search(write(tmp, "r.yaml", spec(search="search:\n  " + body)))
        res = json.loads(out)["results"] if rc in (0, 4) and out else []
        check(res and all(ok(p) for r in res for p in r["pools"]), f"constraint {body.strip()}", out + err)
    rc, out, err = search(write(tmp, "s.yaml", spec(search="search:\n  separate_nodes: true\n", rate=", rate: 6 req/s")))
    res = json.loads(out)["results"]
    dis = [r for r in res if r["mode"] == "disaggregated"]
    check(dis and all((r["pools"][0]["replicas"] * r["pools"][0]["gpus_per_instance"]) % 8 == 0 for r in dis),
          "separate_nodes: the prefill pool ends on a node boundary", out)

    # Serving modes: aggregated or disaggregated only, under mode: search.
    for key, kept in (("disaggregated", "aggregated"), ("aggregated", "disaggregated")):
        rc, out, err = search(write(tmp, "m.yaml", spec(search=f"search:\n  {key}: false\n")))
        doc = json.loads(out) if out else {"results": []}
        check(rc == 0 and doc["results"] and all(r["mode"] == kept for r in doc["results"]),
              f"search.{key}: false ranks {kept} deployments only", out + err)
        pos = {"aggregated": "aggregated", "disaggregated": "prefill"}[key]
        check(pos in doc.get("valid_layouts", {}) and doc["valid_layouts"][pos] is None,
              f"search.{key}: false: no {pos} layouts searched", json.dumps(doc.get("valid_layouts")))
    # ... and its winner is the best of that mode alone (the exhaustive
    # compile's aggregated best, on the constrained space above).
    rc, out, err = search(write(tmp, "ma.yaml", spec(search=CONSTRAINT + "  disaggregated: false\n")))
    best_agg = max((g for g in (compile_goodput(tmp, [("serve", "both", r, tp)])
                                for tp in TPS for r in range(1, 16 // tp + 1)) if g is not None))
    w = json.loads(out)["results"][0] if rc == 0 else {}
    check(abs(w.get("goodput_tok_s_per_gpu", -1) - round(best_agg, 2)) <= 0.01,
          f"search.disaggregated: false: the winner is the best aggregated deployment ({best_agg:.2f})", out + err)

    # docs/spec.md's example ("Serving modes") runs and ranks aggregated
    # deployments only.
    doc_md = (SRC / "docs" / "spec.md").read_text()
    ex = doc_md.split("# docs example: search-aggregated-only\n", 1)[1].split("```", 1)[0]
    rc, out, err = search(write(tmp, "doc.yaml", ex))
    res = json.loads(out)["results"] if rc == 0 and out else []
    check(res and all(r["mode"] == "aggregated" for r in res), "docs/spec.md's serving-mode example", out + err)
    # Not a boolean: the common reader's errors, at the value.
    for value, code in (("3", "E0103"), ("yes", "E0110")):
        p = write(tmp, "bad.yaml", spec(search=f"search:\n  aggregated: {value}\n"))
        r = subprocess.run([RP, "check", p], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and code in r.stderr and "search.aggregated" in r.stderr
              and re.search(r"bad\.yaml:\d+:\d+", r.stderr) is not None,
              f"search.aggregated: {value} is {code} at file:line:col", r.stderr)

    # The filter hook runs on every candidate before the shortlist.
    hooks = f"  hooks: {{ filter: {FIX / 'filter_no_tp8.lua'} }}\n"
    rc, out, err = search(write(tmp, "f.yaml", spec(hooks=hooks)), "--explain")
    doc = json.loads(out) if out else {"results": [], "rejected": []}
    check(rc == 0 and doc["results"] and all(p["parallel"]["tp"] != 8 for r in doc["results"] for p in r["pools"]),
          "filter hook: no tp8 layout is ranked", err)
    check(any(r["reason"] == "the filter hook: no tp8 on decode pools here" for r in doc["rejected"]),
          "filter hook: its reason is in the explanation", json.dumps(doc["rejected"], indent=1))
    hooks = f"  hooks: {{ filter: {FIX / 'filter_bad.lua'} }}\n"
    rc, out, err = search(write(tmp, "b.yaml", spec(hooks=hooks)))
    check(rc == 1 and "E0609" in out and "filter" in out, "filter hook returning a number is E0609", out + err)

    # Bad constraints: E0120 at the value, on check as on search.
    bad = [
        ("prefill: { tp: [] }", "empty list"),
        ("prefill: { tp: [2, 4, 2] }", "lists 2 twice"),
        ("decode: { tp: { min: 8, max: 4 } }", "min 8 is above max 4"),
        ("decode: { tp: {} }", "neither `min` nor `max`"),
        ("pp: false\n  prefill: { pp: [2, 4] }", "search.pp: false"),
        ("decode: { cp: 2 }", "context parallelism is for prefill pools"),
        ("prefill: { dcp: [2] }", "decode context parallelism is for decode pools"),
        ("aggregated: false\n  disaggregated: false", "both false"),
        ("aggregated: false", "`deployment.mode: aggregated` searches that mode only", "aggregated"),
        ("disaggregated: false", "`deployment.mode: disaggregated` searches that mode only", "disaggregated"),
    ]
    for body, words, *mode in bad:
        pools = pools_yaml([("serve", "both", 1, 8)] if mode == ["aggregated"] else
                           [("prefill", "prefill", 1, 8), ("decode", "decode", 1, 8)]) if mode else ""
        p = write(tmp, "bad.yaml", spec(mode=(mode or ["search"])[0], pools=pools, search="search:\n  " + body + "\n"))
        r = subprocess.run([RP, "check", p], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "E0120" in r.stderr and words in r.stderr and "bad.yaml:" in r.stderr,
              f"E0120: {words}", r.stderr)
    p = write(tmp, "bad.yaml", spec(search="search:\n  prefill: { tp: 0, tpp: 2 }\n"))
    r = subprocess.run([RP, "check", p], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "E0105" in r.stderr and "E0101" in r.stderr, "tp 0 and an unknown dimension", r.stderr)

sys.exit(searchlib.rptest.finish())
