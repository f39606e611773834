#!/usr/bin/env python3
"""The search proposes only what the spec's engine runs (issue: search space
per engine). For every bundled example whose deployment names an engine,
each of the top rows of `rankplan search` is written back into the spec as
its deployment and passes `rankplan check`, whose engine rules (E0703,
E0704; docs/engines.md) are the ones the search filters by, without the
warning of a prefill/decode pair no source establishes (W0701); and the
rejection tally names the engine when it refused candidates."""
import json
import os
import re
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from searchlib import SRC, check, rp  # noqa: E402
import searchlib  # noqa: E402

EX = SRC / "plans" / "examples"
TOP = 40


def deployment_of(row):
    """The spec `pools:` of one search row (sizes as the search wrote them)."""
    pools = []
    for i, p in enumerate(row["pools"]):
        q = {"name": f"{p['role']}{i}", "role": p["role"], "replicas": p["replicas"]}
        q.update({k: v for k, v in p["parallel"].items() if v != 1})
        pools.append(q)
    return pools


def main():
    specs = []
    for f in sorted(EX.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        eng = doc.get("deployment", {}).get("engine", "generic")
        name = eng.get("name") if isinstance(eng, dict) else eng
        if name not in (None, "generic"):
            specs.append((f, doc, name))
    check(len(specs) >= 3, f"examples with an engine: {len(specs)}")
    # The generic 70B example under vLLM: its generic winner prefills with
    # cp 4, which vLLM has no mode for (plans/catalog/engines/vllm-*.yaml).
    d70 = yaml.safe_load((EX / "llama-3.1-70b-pd.yaml").read_text())
    d70["deployment"]["engine"] = {"name": "vllm", "version": "0.11.0"}
    specs.append((EX / "llama-3.1-70b-pd.yaml", d70, "vllm"))
    with tempfile.TemporaryDirectory() as tmp:
        for f, doc, name in specs:
            src = os.path.join(tmp, "src-" + f.name)
            with open(src, "w") as out:
                yaml.safe_dump(doc, out)
            p = rp("search", src, "--format", "json", "--top", str(TOP), "--explain", "--catalog",
                   str(SRC / "plans" / "catalog"))
            res = yaml.safe_load(p.stdout) or {} if p.stdout.strip() else {}
            rows = res.get("results", [])
            check(len(rows) > 0, f"{f.name}: the search ranks deployments under {name}", p.stderr[-600:])
            refused = [r for r in res.get("rejected", []) if r.get("reason", "").startswith(f"engine {name} ")]
            check(len(refused) > 0, f"{f.name}: the rejection tally names {name} where it refused layouts",
                  res.get("rejected"))
            bad = []
            for row in rows:
                d = dict(doc)
                d["deployment"] = dict(doc["deployment"], pools=deployment_of(row))
                d["deployment"].pop("mode", None)
                d["deployment"]["mode"] = "aggregated" if row["mode"].startswith("agg") else "disaggregated"
                spec = os.path.join(tmp, f.name)
                with open(spec, "w") as out:
                    yaml.safe_dump(d, out)
                # hooks and node files are relative to the example's folder
                c = rp("check", spec, "--catalog", str(SRC / "plans" / "catalog"))
                # Every error but E0323: the search counts an instance's GPUs,
                # not the domain boundaries the default placement aligns
                # groups to, so a few rows do not place (docs/cost-model.md,
                # "One evaluation"); that gap is not the engine's.
                errors = set(re.findall(r"error\[(E\d+)\]", c.stderr)) - {"E0323"}
                # a prefill/decode pair no source establishes (W0701) is
                # one the search does not propose either
                errors |= set(re.findall(r"warning\[(W0701)\]", c.stderr))
                if errors:
                    bad.append((row["layout"], sorted(errors), c.stderr[-400:]))
            check(not bad, f"{f.name}: every one of the top {len(rows)} rows passes {name}'s rules at check, "
                  "none of its prefill/decode pairs unverified (W0701)", bad)


# Specs whose search used to rank deployments an engine's launch files
# cannot run: instances over one node that are not whole nodes (pp 9 of
# Llama-3.1-70B under TensorRT-LLM on 16 GPUs), or small instances that
# pack onto nodes only by splitting one unevenly (6 + 6 GPUs on two 8-GPU
# nodes, 6 x 3 + 6 on three), or vLLM instances over nodes with dp 2 and
# pp 2, whose engines vLLM cannot run one block of dp ranks a node. Each
# of their top rows compiles and emits for its engine (docs/engines.md,
# "CUDA_VISIBLE_DEVICES and nodes").
LAUNCH_CASES = (("vllm", "qwen3-235b-a22b", "h200-sxm", 2, 8, 20), ("trtllm", "llama-3.1-70b", "h200-sxm", 2, 8, 10),
                ("vllm", "llama-3.1-70b", "h200-sxm", 3, 8, 40), ("sglang", "llama-3.1-70b", "h200-sxm", 3, 8, 40),
                ("vllm", "deepseek-v3", "b200", 2, 8, 5), ("vllm", "deepseek-v3", "gb200-nvl72", 18, 4, 5),
                ("vllm", "qwen3-235b-a22b-fp8", "h200-sxm", 4, 8, 30))


def launchable():
    cat = str(SRC / "plans" / "catalog")
    with tempfile.TemporaryDirectory() as tmp:
        for eng, model, hw, nodes, gpn, rate in LAUNCH_CASES:
            doc = {"version": 1, "name": "launch", "model": {"preset": model, "source": "org/model"},
                   "hardware": {"preset": hw, "nodes": nodes, "gpus_per_node": gpn},
                   "workload": {"input_tokens": 2000, "output_tokens": 400, "rate": f"{rate} req/s"},
                   "slo": {"ttft": "2 s", "tpot": "50 ms"}, "deployment": {"mode": "search", "engine": eng}}
            src = os.path.join(tmp, "search.yaml")
            with open(src, "w") as out:
                yaml.safe_dump(doc, out)
            p = rp("search", src, "--format", "json", "--top", "10", "--catalog", cat)
            rows = (yaml.safe_load(p.stdout) or {}).get("results", []) if p.stdout.strip() else []
            bad = []
            for i, row in enumerate(rows):
                d = dict(doc, deployment={"engine": eng, "pools": deployment_of(row),
                                          "mode": "aggregated" if row["mode"].startswith("agg") else "disaggregated"})
                spec, plan, out_dir = (os.path.join(tmp, f"{i}.{x}") for x in ("yaml", "plan.json", "emit"))
                with open(spec, "w") as out:
                    yaml.safe_dump(d, out)
                c = rp("compile", spec, "-o", plan, "--catalog", cat)
                e = rp("emit", plan, "-t", eng, "-o", out_dir) if c.returncode == 0 else c
                if e.returncode != 0:
                    bad.append((row["layout"], e.stderr[-300:]))
            check(len(rows) > 0 and not bad, f"{eng} {model} on {nodes} {hw} nodes at {rate} req/s: each of the top "
                  f"{len(rows)} rows compiles and emits for {eng}", bad or p.stderr[-400:])


def nodes_binding():
    """Instances of 6 GPUs (tp 2, pp 3) under vLLM on four 8-GPU nodes: the
    32 GPUs would hold five, the nodes hold four (one a node, none split
    unevenly), so at 30 req/s, which needs five, the winner is bound by
    the nodes, not the GPU budget, and W0502 says what to change."""
    doc = {"version": 1, "name": "nodes", "model": {"preset": "llama-3.1-70b", "source": "org/model"},
           "hardware": {"preset": "h100-sxm", "nodes": 4, "gpus_per_node": 8},
           "workload": {"input_tokens": 2000, "output_tokens": 500, "rate": "30 req/s"},
           "slo": {"ttft": "5 s", "tpot": "100 ms"},
           "search": {r: {"tp": [2], "pp": [3], "dp": [1], "cp": [1]} for r in ("both", "prefill", "decode")},
           "deployment": {"mode": "search", "engine": "vllm"}}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "nodes.yaml")
        with open(src, "w") as out:
            yaml.safe_dump(doc, out)
        p = rp("search", src, "--format", "json", "--top", "1")
        w = json.loads(p.stdout)["results"][0]
        check(w["layout"] == "4xPD(tp2,pp3)" and w["binding"] == "nodes" and w["gpus"] == 24,
              "search: 4 instances of 6 GPUs on four 8-GPU nodes, where 30 req/s needs 5: bound by the nodes",
              json.dumps(w)[:300])
        check("W0502" in p.stderr and "hardware.nodes" in p.stderr and "divide a node" in p.stderr,
              "W0502 names the nodes and the sizes that pack", p.stderr)


def search_rows(tmp, doc):
    """Writes doc as a spec under tmp and searches it: (the process, its
    top rows, empty when it ranked none)."""
    src = os.path.join(tmp, "spec.yaml")
    with open(src, "w") as out:
        yaml.safe_dump(doc, out)
    p = rp("search", src, "--format", "json", "--top", str(TOP))
    return p, json.loads(p.stdout)["results"] if p.returncode in (0, 3) and p.stdout else []


def rows_checked_with(tmp, doc, rows, code):
    """The layouts of the first five rows whose deployment, written back
    into doc, `check` reports with code."""
    bad = []
    for r in rows[:5]:
        mode = "disaggregated" if any(q["role"] == "decode" for q in r["pools"]) else "aggregated"
        spec = dict(doc, deployment=dict(doc["deployment"], mode=mode, pools=deployment_of(r)))
        f = os.path.join(tmp, "row.yaml")
        with open(f, "w") as out:
            yaml.safe_dump(spec, out)
        if code in rp("check", f).stderr:
            bad.append(r["layout"])
    return bad


def prompt_budget():
    """TensorRT-LLM without chunked prefill refuses a prompt over
    max_num_tokens (8192 by default) per cp rank (E0713): 12,000-token
    prompts under trtllm 00209af, which runs cp, leave only prefill layouts
    of cp 2 or more in the ranking, each passing `check`; under 1.1.0,
    which runs no cp, the search stops with E0713 naming the workload, not
    with E0500; with chunked prefill on, layouts without cp rank again."""
    doc = {"version": 1, "name": "prompts", "model": {"preset": "qwen3-235b-a22b-fp8", "source": "org/model"},
           "hardware": {"preset": "h200-sxm", "nodes": 2, "gpus_per_node": 8},
           "workload": {"input_tokens": 12000, "output_tokens": 800, "rate": "6 req/s"},
           "slo": {"ttft": "2 s", "tpot": "50 ms"},
           "deployment": {"mode": "search", "engine": {"name": "trtllm", "version": "00209af"}}}
    with tempfile.TemporaryDirectory() as tmp:
        p, rows = search_rows(tmp, doc)
        pre = [q for r in rows for q in r["pools"] if q["role"] != "decode"]
        check(rows and pre and all(q["parallel"].get("cp", 1) >= 2 for q in pre),
              "search: under trtllm 00209af every pool that prefills 12,000-token prompts runs cp >= 2",
              [(q["role"], q["parallel"]) for q in pre if q["parallel"].get("cp", 1) < 2][:3] or p.stderr[-300:])
        check(not rows_checked_with(tmp, doc, rows, "E0713"), "search: its top rows pass check's prompt budget (no E0713)")
        src = os.path.join(tmp, "spec.yaml")
        doc["deployment"]["engine"]["version"] = "1.1.0"
        with open(src, "w") as out:
            yaml.safe_dump(doc, out)
        p = rp("search", src)
        check(p.returncode == 1 and "E0713" in p.stderr and "E0500" not in p.stderr and "input_tokens" in p.stderr,
              "search: under trtllm 1.1.0 (no cp) 12,000-token prompts stop the search with E0713", p.stderr[-400:])
        doc["serving"] = {"chunked_prefill": True}
        with open(src, "w") as out:
            yaml.safe_dump(doc, out)
        p = rp("search", src, "--format", "json", "--top", "1")
        check(p.returncode == 0 and "E0713" not in p.stderr, "search: with chunked prefill on, the same prompts rank",
              p.stderr[-300:])


def fp8_blocks():
    """vLLM and SGLang load block-fp8 experts in whole 128-wide blocks
    (E0221): Qwen3-235B-A22B-FP8's 1536-wide experts rank only at an etp
    that leaves each rank whole blocks (1, 2, 3, 4, 6 or 12), and each top
    row passes `check` without E0221."""
    for eng in ({"name": "vllm", "version": "0.19"}, {"name": "sglang", "version": "0.5.6"}):
        doc = {"version": 1, "name": "fp8", "model": {"preset": "qwen3-235b-a22b-fp8", "source": "org/model"},
               "hardware": {"preset": "h200-sxm", "nodes": 2, "gpus_per_node": 8},
               "workload": {"input_tokens": 2000, "output_tokens": 500, "rate": "8 req/s"},
               "slo": {"ttft": "3 s", "tpot": "60 ms"},
               # instances of one node without pp, where etp 8 (192 columns) would rank
               "search": {r: {"gpus": [8], "pp": [1]} for r in ("both", "prefill", "decode")},
               "deployment": {"mode": "search", "engine": eng}}
        with tempfile.TemporaryDirectory() as tmp:
            p, rows = search_rows(tmp, doc)
            etps = sorted({q["parallel"].get("etp", 1) for r in rows for q in r["pools"]})
            check(rows and all((1536 // e) % 128 == 0 for e in etps),
                  f"search {eng['name']}: Qwen3-235B-A22B-FP8 ranks only whole-block etp sizes", etps or p.stderr[-300:])
            bad = rows_checked_with(tmp, doc, rows, "E0221")
            check(not bad, f"search {eng['name']}: its top rows pass check's fp8 block rule (no E0221)", bad)

def chunk_pages():
    """SGLang asserts its chunked-prefill share per attention dp rank is a
    multiple of the page (E0717; decode servers skip it from 0.5.4): with
    64-token pages and a budget of 8,256 tokens (129 pages) the prefill-
    running pools rank only at a dp whose share is whole pages, and each
    top row passes `check` without E0717."""
    doc = {"version": 1, "name": "chunk", "model": {"preset": "deepseek-v3"},
           "hardware": {"preset": "h200-sxm", "nodes": 2, "gpus_per_node": 8},
           "workload": {"input_tokens": 2000, "output_tokens": 500, "rate": "4 req/s"},
           "slo": {"ttft": "3 s", "tpot": "80 ms"},
           "serving": {"max_num_batched_tokens": 8256, "max_model_len": 32768},
           "deployment": {"mode": "search", "engine": {"name": "sglang", "version": "0.5.6"},
                          "memory": {"kv_block": 64}}}
    with tempfile.TemporaryDirectory() as tmp:
        p, rows = search_rows(tmp, doc)
        dps = sorted({q["parallel"].get("dp", 1) for r in rows for q in r["pools"] if q["role"] != "decode"})
        check(rows and all((8256 // d) % 64 == 0 for d in dps),
              "search sglang: prefill-running pools rank only at a dp whose chunk share is whole 64-token pages",
              dps or p.stderr[-300:])
        bad = rows_checked_with(tmp, doc, rows, "E0717")
        check(not bad, "search sglang: its top rows pass check's chunk/page rule (no E0717)", bad)


main()
launchable()
nodes_binding()
prompt_budget()
fp8_blocks()
chunk_pages()
sys.exit(searchlib.rptest.finish())
