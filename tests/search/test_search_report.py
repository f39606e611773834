#!/usr/bin/env python3
"""What `rankplan search` tells a reader: one row per deployment up to
splitting its decode instances ("also as"), goodput per used GPU and per
GPU of the budget with --sort, the offered load served (W0502 on search,
compile and check), and --emit-spec writing a `deployment:` section that
compiles to the winner."""
import json
import os
import pathlib
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import searchlib  # noqa: E402
from searchlib import SRC, check, rp  # noqa: E402


def spec_text(hardware, deployment, model="preset: llama-3.1-70b", serving=None,
              workload="input_tokens: 2000, output_tokens: 500, rate: 1 req/s", slo="ttft: 3 s, tpot: 100 ms"):
    """A search spec's YAML, each section a flow mapping's contents."""
    t = (f"version: 1\nmodel: {{ {model} }}\nhardware: {{ {hardware} }}\n"
         f"workload: {{ {workload} }}\nslo: {{ {slo} }}\n")
    if serving:
        t += f"serving: {{ {serving} }}\n"
    return t + f"deployment: {{ {deployment} }}\n"
LLAMA = str(SRC / "plans" / "examples" / "llama-3.1-70b-pd.yaml")
# The example at 19 req/s, a load its 32 GPUs serve in full (at its own
# 20 req/s the deployment serving the most reaches 19.76): the sort and
# --min-gpus checks below need a rate some deployment serves.
_TMP = tempfile.TemporaryDirectory()
LLAMA19 = str(pathlib.Path(_TMP.name) / "llama-3.1-70b-pd-19.yaml")
_text = pathlib.Path(LLAMA).read_text()
check("rate: 20 req/s" in _text, "the example offers 20 req/s")
pathlib.Path(LLAMA19).write_text(_text.replace("rate: 20 req/s", "rate: 19 req/s"))




def group_key(r):
    """A disaggregated row's deployment up to splitting decode instances."""
    if r["mode"] != "disaggregated":
        return None
    p, d = r["pools"]
    return (json.dumps(p["parallel"], sort_keys=True), p["replicas"], d["replicas"] * d["gpus_per_instance"],
            r["feasible"])


p = rp("search", LLAMA, "--format", "json", "--top", "1000")
doc = json.loads(p.stdout)
res = doc["results"]
keys = [group_key(r) for r in res if group_key(r)]
check(len(keys) == len(set(keys)), "no two rows are one deployment split into other decode instances")
check(any(r["also"] for r in res) and all(a["layout"].split(" ")[0] == r["layout"].split(" ")[0]
                                          for r in res for a in r["also"]),
      "grouped rows list the other splits under the same prefill pool")
w = res[0]
check(abs(w["goodput_tok_s_per_budget_gpu"] - w["goodput_tok_s_per_gpu"] * w["gpus"] / doc["gpu_budget"]) < 0.02,
      "goodput per budget GPU = goodput per used GPU x used / budget", json.dumps(w)[:400])
check(doc["sort"] == "used-gpu" and doc["offered_req_s"] == 20, "json names the sort key and the offered load")

p = rp("search", LLAMA, "--top", "3")
check("also as " in p.stdout and "/budgetGPU" in p.stdout, "text: also-as lines and the per-budget-GPU column",
      p.stdout)
check("#1 serves 18.12 of 20 req/s offered on 28 of 32 GPUs" in p.stdout, "text: the winner's served load", p.stdout)
check("warning[W0502]" in p.stderr and "--sort cluster-gpu" in p.stderr
      and "no deployment within the budget serves the whole rate" in p.stderr and "--min-gpus" not in p.stderr,
      "search warns when the winner leaves load unserved; its help names what can still help "
      "(nothing in the budget serves the rate, so not --min-gpus)", p.stderr)

p = rp("search", LLAMA19, "--format", "json", "--sort", "cluster-gpu", "--top", "1000")
doc = json.loads(p.stdout)
ks = [r["goodput_tok_s_per_budget_gpu"] for r in doc["results"] if r["feasible"]]
check(ks == sorted(ks, reverse=True) and doc["sort"] == "cluster-gpu", "--sort cluster-gpu ranks by it")
check(doc["results"][0]["throughput_req_s"] == 19 and "W0502" not in p.stderr,
      "--sort cluster-gpu: the winner serves the 19 req/s, no warning", p.stderr)
# With a rate, deployments that serve all of it rank first under every sort
# (docs/cost-model.md, "The offered load"): DeepSeek-R1 under SGLang on one
# node of 8 H200 at 2 req/s, where a 6-GPU layout that serves 1.84 req/s
# has more goodput per used GPU (at its capacity) than the 8-GPU layouts
# that serve the whole rate (at the rate).
with tempfile.TemporaryDirectory() as tmp:
    dsr1 = pathlib.Path(tmp) / "dsr1.yaml"
    wl = "input_tokens: 2000, output_tokens: 500, rate: {} req/s"
    dsr1.write_text(spec_text("preset: h200-sxm, nodes: 1", "engine: sglang, mode: search", model="preset: deepseek-r1",
                              workload=wl.format(2), slo="ttft: 2 s, tpot: 50 ms"))
    for sort in ("used-gpu", "cluster-gpu", "goodput", "min-gpus"):
        p = rp("search", str(dsr1), "--format", "json", "--top", "1000", "--sort", sort, "--explain")
        res = [r for r in json.loads(p.stdout)["results"] if r["feasible"]]
        full = [r["throughput_req_s"] >= 2 for r in res]
        check(res and full[0] and full == sorted(full, reverse=True),
              f"--sort {sort}: every deployment serving the 2 req/s ranks above every one serving less",
              str([(r["layout"], r["throughput_req_s"]) for r in res[:12]]))
    w = res[0] if res else {}
    p = rp("search", str(dsr1), "--format", "json", "--top", "1000", "--explain")
    res = json.loads(p.stdout)["results"]
    w = res[0]
    pp3 = [r for r in res if r["layout"] == "1xPD(tp1,pp3,dp2,etp2)"]
    check(w["layout"] == "1xPD(tp1,dp8,etp8)" and w["throughput_req_s"] == 2 and w["goodput_tok_s_per_gpu"] == 125
          and pp3 and round(pp3[0]["throughput_req_s"], 2) == 1.84 and round(pp3[0]["goodput_tok_s_per_gpu"]) == 153,
          "the documented case: dp8 (2 req/s, 125 tok/s/GPU) ranks above pp3 (1.84, 153)",
          json.dumps(w)[:300] + json.dumps(pp3)[:300])
    check(pp3 and pp3[0]["explain"].startswith("serves 1.84 of the 2.00 req/s offered, #1 all of it"),
          "--explain says the runner-up serves less of the rate", pp3[0]["explain"] if pp3 else "")
    p = rp("search", str(dsr1), "--top", "1")
    check("deployments that serve the offered rate first" in p.stdout and "W0502" not in p.stderr,
          "the header names the order; the winner serves the rate, no W0502", p.stdout + p.stderr)
    dsr1.write_text(dsr1.read_text().replace("rate: 2 req/s", "rate: 20 req/s"))
    w = json.loads(rp("search", str(dsr1), "--format", "json", "--top", "1").stdout)["results"][0]
    check(w["layout"] == "1xPD(tp1,dp8,etp8)" and round(w["throughput_req_s"], 2) == 16.57
          and round(w["goodput_tok_s_per_gpu"]) == 1036,
          "the documented capacity of dp8: 16.57 req/s, 1,036 tok/s/GPU", json.dumps(w)[:300])

p = rp("search", LLAMA, "--format", "json", "--sort", "goodput", "--top", "1000")
ks = [r["throughput_tok_s"] for r in json.loads(p.stdout)["results"] if r["feasible"]]
check(ks == sorted(ks, reverse=True), "--sort goodput ranks by total goodput")
p = rp("search", LLAMA, "--sort", "speed")
check(p.returncode == 2 and "--sort" in p.stderr, "an unknown --sort key is a usage error", p.stderr)

# The bundled example serves 10.06 of its 20 req/s: compile and check say so.
with tempfile.TemporaryDirectory() as tmp:
    plan = str(pathlib.Path(tmp) / "p.json")
    p = rp("compile", LLAMA, "-o", plan)
    check(p.returncode == 0 and "warning[W0502]" in p.stderr and "serves 10.06 of the 20 req/s" in p.stderr,
          "compile warns that the example serves 10.06 of 20 req/s", p.stderr)
    diags = json.loads(pathlib.Path(plan).read_text())["diagnostics"]
    check(any(d["code"] == "W0502" for d in diags), "the plan records W0502")
    p = rp("check", LLAMA)
    check(p.returncode == 0 and "warning[W0502]" in p.stderr, "check warns as compile does", p.stderr)

    # --emit-spec: the spec with its deployment replaced compiles to the winner.
    for sort in ("used-gpu", "cluster-gpu"):
        dep = pathlib.Path(tmp) / "dep.yaml"
        p = rp("search", LLAMA, "--format", "json", "--sort", sort, "--emit-spec", str(dep))
        w = json.loads(p.stdout)["results"][0]
        text = pathlib.Path(LLAMA).read_text()
        spec = pathlib.Path(tmp) / "winner.yaml"
        spec.write_text(text[: text.index("deployment:")] + dep.read_text())
        p = rp("compile", str(spec), "-o", plan)
        check(p.returncode == 0, f"--emit-spec ({sort}): the spec with the emitted section compiles", p.stderr)
        got = json.loads(pathlib.Path(plan).read_text())
        pools = [(q["role"], q["replicas"], q["tp"], q["pp"], q["cp"], q["dp"]) for q in got["pools"]]
        want = [(q["role"], q["replicas"], q["parallel"]["tp"], q["parallel"]["pp"], q["parallel"]["cp"],
                 q["parallel"]["dp"]) for q in w["pools"]]
        check(pools == want and abs(got["estimates"]["goodput_tok_s_per_gpu"] - w["goodput_tok_s_per_gpu"]) < 0.01,
              f"--emit-spec ({sort}): it compiles to the winner's pools and goodput", f"{pools}\n{want}")
    # Every deployment key the search leaves as written comes back: an
    # engine release other than the catalog's newest, the image, the order
    # and memory. The spec with the emitted section compiles to the plan
    # `search -o` writes, byte for byte but for the spec's hash and the
    # search's own W0502 (which -o records once, not twice).
    text = pathlib.Path(LLAMA).read_text().replace(
        "  engine: generic\n", "  engine: { name: vllm, version: \"0.11\" }\n  image: \"vllm/vllm-openai:v0.11.0\"\n")
    text = text.replace("  order: tp-cp-ep-dp-pp\n", "  order: tp-cp-ep-pp-dp\n")
    text = text.replace("reserve: 2 GiB", "reserve: 3 GiB").replace(
        "  preset: llama-3.1-70b\n", "  preset: llama-3.1-70b\n  source: meta-llama/Llama-3.1-70B-Instruct\n")
    src = pathlib.Path(tmp) / "vllm011.yaml"
    src.write_text(text)
    dep, direct = pathlib.Path(tmp) / "dep011.yaml", pathlib.Path(tmp) / "direct.json"
    p = rp("search", str(src), "--emit-spec", str(dep), "-o", str(direct))
    check(p.returncode == 0 and p.stderr.count("warning[W0502]") == 1,
          "search -o: the load not served is said once", p.stderr)
    emitted = dep.read_text()
    check('engine: { name: vllm, version: "0.11" }' in emitted and 'image: "vllm/vllm-openai:v0.11.0"' in emitted
          and 'order: "tp-cp-ep-pp-dp"' in emitted, "--emit-spec keeps the engine's release and the image", emitted)
    spec = pathlib.Path(tmp) / "winner011.yaml"
    spec.write_text(text[: text.index("deployment:")] + emitted)
    p = rp("compile", str(spec), "-o", plan)
    a, b = json.loads(direct.read_text()), json.loads(pathlib.Path(plan).read_text())
    for k in ("spec_sha256", "diagnostics"):
        a.pop(k), b.pop(k)
    check(p.returncode == 0 and a == b, "--emit-spec: the spec compiles to the plan search -o writes",
          p.stderr + "\n" + str([k for k in a if a.get(k) != b.get(k)]))
    p = rp("search", LLAMA, "--emit-spec", LLAMA)
    check(p.returncode == 2, "--emit-spec onto the spec itself is refused", p.stderr)

# --min-gpus: the winner serves the offered rate, and no ranked deployment
# that serves it uses fewer GPUs.
p = rp("search", LLAMA19, "--format", "json", "--min-gpus", "--top", "1")
w = json.loads(p.stdout)["results"][0]
allr = json.loads(rp("search", LLAMA19, "--format", "json", "--top", "1000").stdout)["results"]
serving = [r["gpus"] for r in allr if r["feasible"] and r["throughput_req_s"] >= 19 - 1e-9]
check(p.returncode == 0 and w["throughput_req_s"] == 19 and w["gpus"] == min(serving),
      f"--min-gpus: {w['layout']} serves 19 req/s on the fewest GPUs ({w['gpus']})", p.stderr)
with tempfile.TemporaryDirectory() as tmp:
    norate = pathlib.Path(tmp) / "norate.yaml"
    norate.write_text(pathlib.Path(LLAMA).read_text().replace("  rate: 20 req/s\n", ""))
    p = rp("search", str(norate), "--min-gpus")
    check(p.returncode == 1 and "E0507" in p.stderr and "workload.rate" in p.stderr,
          "--min-gpus without a rate is E0507", p.stderr)

# --what-if: one search per value; each row is that value's search winner.
p = rp("search", LLAMA, "--format", "json", "--what-if", "gpu=h100-sxm,h200-sxm,b200")
doc = json.loads(p.stdout)
check(p.returncode == 0 and doc["format"] == "rankplan.search-what-if/1"
      and [r["value"] for r in doc["rows"]] == ["h100-sxm", "h200-sxm", "b200"], "what-if gpu: a row per GPU type")
plain = json.loads(rp("search", LLAMA, "--format", "json", "--top", "1").stdout)["results"][0]
h200 = doc["rows"][1]["winner"]
check(h200["layout"] == plain["layout"] and h200["goodput_tok_s_per_gpu"] == plain["goodput_tok_s_per_gpu"],
      "what-if gpu: the spec's own GPU gives the plain search's winner", json.dumps(h200))
with tempfile.TemporaryDirectory() as tmp:
    h100 = pathlib.Path(tmp) / "h100.yaml"
    h100.write_text(pathlib.Path(LLAMA).read_text().replace("preset: h200-sxm", "preset: h100-sxm"))
    one = json.loads(rp("search", str(h100), "--format", "json", "--top", "1").stdout)["results"][0]
    check(doc["rows"][0]["winner"]["layout"] == one["layout"], "what-if gpu=h100-sxm: as the spec edited to H100")
p = rp("search", LLAMA, "--format", "json", "--min-gpus", "--what-if", "nodes=1,4")
doc = json.loads(p.stdout)
mg = json.loads(rp("search", LLAMA, "--format", "json", "--min-gpus", "--top", "1").stdout)["results"][0]
check(doc["rows"][1]["gpu_budget"] == 32 and doc["rows"][1]["winner"]["layout"] == mg["layout"]
      and doc["rows"][0]["gpu_budget"] == 8, "what-if nodes with --min-gpus: the budget follows the nodes", p.stdout)
p = rp("search", LLAMA, "--what-if", "gpu=h200-sxm,h300")
check(p.returncode == 1 and "E0111" in p.stderr, "what-if: an unknown GPU entry is E0111", p.stderr)
for bad in ("gpu=", "tp=2", "nodes=0", "nodes=2,,4"):
    p = rp("search", LLAMA, "--what-if", bad)
    check(p.returncode == 2, f"what-if {bad!r} is a usage error", p.stderr)
# An entry without a scale_out (the AMD platforms, h20) plans with the
# spec's own, the cluster's NICs; a spec that writes none gets E0102 naming
# the entry, not a bare missing key at its own hardware line.
with tempfile.TemporaryDirectory() as tmp:
    spec = pathlib.Path(tmp) / "nic.yaml"
    nic = dict(model="preset: deepseek-v3", deployment="engine: sglang, mode: search", slo="ttft: 3 s, tpot: 50 ms",
               workload="input_tokens: 2000, output_tokens: 1000, rate: 2 req/s")
    spec.write_text(spec_text("preset: h200-sxm, nodes: 2, scale_out: { bandwidth: 200 Gb/s }", **nic))
    p = rp("search", str(spec), "--format", "json", "--what-if", "gpu=mi355x,h20")
    doc = json.loads(p.stdout) if p.returncode == 0 else {"rows": []}
    check([r["value"] for r in doc["rows"]] == ["mi355x", "h20"] and doc["rows"][0]["winner"] is not None,
          "what-if gpu=mi355x: the entry without scale_out takes the spec's", p.stdout + p.stderr)
    spec.write_text(spec_text("preset: h200-sxm, nodes: 2", **nic))
    p = rp("search", str(spec), "--what-if", "gpu=h200-sxm,mi355x")
    check(p.returncode == 1 and "E0102" in p.stderr and "--what-if gpu=mi355x" in p.stderr,
          "what-if gpu=mi355x on a spec without scale_out: E0102 names the entry", p.stderr)
# TensorRT-LLM runs on NVIDIA GPUs only: the search refuses it on an AMD
# GPU (E0718) rather than ranking layouts no node can run, and a what-if
# row on an AMD entry has no winner for that reason.
with tempfile.TemporaryDirectory() as tmp:
    spec = pathlib.Path(tmp) / "trt.yaml"
    trt = dict(deployment='engine: { name: trtllm, version: "1.1.0" }, mode: search', serving="chunked_prefill: true")
    spec.write_text(spec_text("preset: mi300x, nodes: 1, scale_out: { bandwidth: 400 Gb/s }", **trt))
    p = rp("search", str(spec))
    check(p.returncode == 1 and "E0718" in p.stderr and p.stdout == "",
          "search: trtllm on an AMD GPU is E0718, nothing ranked", p.stdout + p.stderr)
    spec.write_text(spec_text("preset: h100-sxm, nodes: 1, scale_out: { bandwidth: 400 Gb/s }", **trt))
    p = rp("search", str(spec), "--format", "json", "--what-if", "gpu=h100-sxm,mi300x")
    rows = json.loads(p.stdout)["rows"] if p.returncode == 0 else []
    check([r["error"] for r in rows] == [None, "E0718"] and rows[1]["gpu_budget"] == 8,
          "what-if gpu=mi300x under trtllm: no winner (E0718), the row's budget still shown", p.stdout + p.stderr)
p = rp("search", LLAMA, "--what-if", "nodes=2,4")
check(p.returncode == 0 and "serves req/s" in p.stdout and "of 20" in p.stdout, "what-if text table", p.stdout)

# Explanations in the words of the engine flags and the spec keys.
with tempfile.TemporaryDirectory() as tmp:
    cal = pathlib.Path(tmp) / "cal.json"
    cal.write_text('{"max_batch_per_dp": 4}\n')
    dsv3 = str(SRC / "plans" / "examples" / "deepseek-v3-pd.yaml")
    p = rp("search", dsv3, "--explain", "--top", "10", "--calibration", str(cal))
    check("the batch cap per attention data parallel rank (--max-num-seqs)" in p.stdout
          and re.search(r"attention data parallel \d+ vs \d+", p.stdout) is not None,
          "explain: a decode batch at the engine's cap names --max-num-seqs and attention data parallel", p.stdout)
    check("rejected before ranking" in p.stdout and "(--gpu-memory-utilization, --max-model-len)" in p.stdout,
          "explain: the memory rejections name the engine flags", p.stdout)

# SGLang's CUDA-graph batch as the binding bound: Qwen3-0.6B on L40S, whose
# graphs stop at 32 requests at tp 1 (docs/cost-model.md, "Eager decode"),
# with the engine allowed 100; eager steps beyond 32 serve less.
with tempfile.TemporaryDirectory() as tmp:
    spec = pathlib.Path(tmp) / "graphs.yaml"
    spec.write_text("version: 1\nmodel: { preset: qwen3-0.6b }\n"
                    "hardware: { preset: l40s, nodes: 1, gpus_per_node: 2 }\n"
                    "workload: { input_tokens: 128, output_tokens: 256, rate: 200 req/s }\n"
                    "slo: { ttft: 2 s, tpot: 100 ms }\nserving: { max_num_seqs: 100 }\n"
                    "deployment: { engine: sglang, mode: search }\n")
    doc = json.loads(rp("search", str(spec), "--format", "json").stdout)
    agg = [r for r in doc["results"] if r["mode"] == "aggregated" and r["layout"] == "2xPD(tp1)"]
    check(agg and agg[0]["pools"][0]["binding"] == "cuda-graphs",
          "search: an SGLang decode batch held at its CUDA-graph batch binds as cuda-graphs", agg[:1])

# A node of PCIe cards (rtx-pro-6000, one GPU per scale-up domain): the
# search tries no tp above the domain unless the spec allows it, and the
# W0502 of a winner that serves less than the rate says so in a note; with
# the key set the note goes and tp 2 to 8 layouts are ranked.
with tempfile.TemporaryDirectory() as tmp:
    spec = pathlib.Path(tmp) / "pcie.yaml"
    pcie = dict(workload="input_tokens: 2000, output_tokens: 500, rate: 20 req/s", slo="ttft: 2 s, tpot: 200 ms")
    note = "tp was searched only up to the scale-up domain of 1 GPU"
    spec.write_text(spec_text("preset: rtx-pro-6000, nodes: 1", "engine: vllm, mode: search", **pcie))
    p = rp("search", str(spec))
    check("W0502" in p.stderr and note in p.stderr and "allow_tp_across_domain: true" in p.stderr,
          "search: W0502 on PCIe cards notes the domain cap on tp and the key that lifts it", p.stderr)
    check(re.search(r"tp[2-8]", p.stdout) is None, "search: no tp above the domain without the key", p.stdout)
    spec.write_text(spec_text("preset: rtx-pro-6000, nodes: 1",
                              "engine: vllm, mode: search, allow_tp_across_domain: true", **pcie))
    p = rp("search", str(spec))
    check(note not in p.stderr and re.search(r"tp[2-8]", p.stdout) is not None,
          "search: with allow_tp_across_domain the note goes and wider tp is ranked", p.stdout + p.stderr)

sys.exit(searchlib.rptest.finish())
