#!/usr/bin/env python3
"""The hardware catalog (plans/catalog/hardware/, plans/catalog/README.md).

Every entry loads through `rankplan compile` as a spec's preset, with the
memory the plan records equal to the entry's; every figure of an entry is
stated in its header comment, next to a source (the figure itself, or the
"with sparsity" figure it is half of); a memory in MiB cites the device
report (nvidia-smi, rocm-smi, or HIP's total through PyTorch) it comes from, and every entry's
memory is such a report (issue: capacities as the device reports them); CUDA's total (cuda_memory), where given, is stated
in GiB as logged and is at most the device's memory; a scale-up domain larger than a node is a whole
number of nodes. And the rack-scale entries place as a rack: on
gb200-nvl72 a tp 8 group spans two 4-GPU trays inside the NVLink domain of
72, and tp 16 instances never straddle two racks (the cost model's side,
scale-out past 72, is tests/unit/test_cost.c, test_nvl72_domain).
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ["RANKPLAN"]
SRC = pathlib.Path(os.environ["SRCROOT"])
HW = SRC / "plans" / "catalog" / "hardware"
ENV = dict(os.environ, NO_COLOR="1", RANKPLAN_CATALOG=str(SRC / "plans" / "catalog"))

# The keys whose figures the header must state, as paths into the entry.
FIGURES = [("gpu", "hbm_bandwidth"), ("gpu", "bf16"), ("gpu", "fp16"), ("gpu", "fp8"),
           ("gpu", "int8"), ("gpu", "fp4"), ("scale_up", "bandwidth"), ("scale_up", "domain"),
           ("scale_out", "bandwidth"), ("gpus_per_node",), ("nodes_per_rack",)]
UNIT_BYTES = {"MiB": 1 << 20, "GiB": 1 << 30, "GB": 10**9}


def why(p):
    return "" if p.returncode == 0 else ": " + p.stderr[-300:]


def run(*args):
    return subprocess.run([RP, *args], capture_output=True, text=True, env=ENV, timeout=120)


def header(text):
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:])
    # "1,979" and "1979" are one figure
    return re.sub(r"(?<=\d),(?=\d{3})", "", "\n".join(lines))


def number(value):
    """The number a figure is written with: `989.5 TFLOP/s` -> 989.5."""
    return str(value).split()[0]


def plain(x):
    return ("%.6f" % x).rstrip("0").rstrip(".")


def stated(head, num):
    """Whether the header states num, or twice it (the sparse figure)."""
    for s in {num, plain(2 * float(num))}:
        if re.search(r"(?<![\d.])" + re.escape(s) + r"(?![\d]|\.\d)", head):
            return True
    return False


def get(entry, path):
    for k in path:
        if not isinstance(entry, dict) or k not in entry:
            return None
        entry = entry[k]
    return entry


def lint(name, text, entry):
    head = header(text)
    check("http" in head, f"{name}: the header cites a source URL")
    mem = str(entry["gpu"]["memory"])
    num, unit = mem.split()
    check(unit == "MiB" and stated(head, num)
          and re.search(r"nvidia-smi|rocm-smi|HIP's total", head) is not None,
          f"{name}: memory {mem} is a device report in MiB, stated with the report it comes from")
    cuda = get(entry, ("gpu", "cuda_memory"))
    if cuda is not None:
        # CUDA's total, logged in GiB to 0.01 and written to the MiB
        cnum, cunit = str(cuda).split()
        gib = "%.2f GiB" % (float(cnum) / 1024)
        check(cunit == "MiB" and gib in head and "CUDA" in head,
              f"{name}: cuda_memory {cuda} is stated in the header as CUDA's {gib}")
        check(float(cnum) * UNIT_BYTES[cunit] <= float(num) * UNIT_BYTES[unit],
              f"{name}: cuda_memory {cuda} is at most the device's memory {mem}")
    for path in FIGURES:
        v = get(entry, path)
        if v is None:
            continue
        check(stated(head, number(v)), f"{name}: {'.'.join(path)} {v} is stated in the header")
    gpn, dom = entry["gpus_per_node"], get(entry, ("scale_up", "domain")) or entry["gpus_per_node"]
    if dom > gpn:
        check(dom % gpn == 0, f"{name}: the scale-up domain of {dom} is whole nodes of {gpn}")


def spec_for(name, entry, nodes, pool, model="llama-3.2-1b"):
    hw = {"preset": name, "nodes": nodes}
    if "scale_out" not in entry:  # the entry leaves it to the spec (h20, AMD)
        hw["scale_out"] = {"bandwidth": "400 Gb/s"}
    return {"version": 1, "model": {"preset": model}, "hardware": hw,
            "workload": {"input_tokens": 1000, "output_tokens": 100},
            "deployment": {"mode": "aggregated", "pools": [dict(name="main", **pool)]}}


def compile_plan(tmp, spec):
    sp, out = os.path.join(tmp, "s.yaml"), os.path.join(tmp, "p.json")
    with open(sp, "w") as f:
        yaml.safe_dump(spec, f)
    p = run("compile", sp, "-o", out)
    return p, (json.load(open(out)) if p.returncode == 0 else None)


def loads(tmp, name, entry):
    num, unit = str(entry["gpu"]["memory"]).split()
    want = round(float(num) * UNIT_BYTES[unit])
    p, plan = compile_plan(tmp, spec_for(name, entry, 1, {"tp": 1}))
    check(p.returncode == 0, f"{name}: a spec with preset {name} compiles" + why(p))
    if plan:
        check(plan["ranks"][0]["memory"]["capacity"] == want,
              f"{name}: the plan's capacity is the entry's memory, {want} bytes")


def tp_groups(plan):
    return [g["ranks"] for g in plan["groups"] if g["kind"] == "tp"]


def nvl72(tmp):
    entry = yaml.safe_load((HW / "gb200-nvl72.yaml").read_text())
    # one rack: 9 instances of tp 8, each spanning two trays
    p, plan = compile_plan(tmp, spec_for("gb200-nvl72", entry, 18, {"tp": 8, "replicas": 9}, "llama-3.1-70b"))
    check(p.returncode == 0, "gb200-nvl72: tp 8 x 9 compiles on one rack" + why(p))
    if plan:
        check(plan["scale_up_domain"] == 72 and plan["hardware"]["scale_up"]["domain"] == 72,
              "gb200-nvl72: the plan's scale-up domain is 72")
        ranks = {r["rank"]: r for r in plan["ranks"]}
        for g in tp_groups(plan):
            nodes = {ranks[r]["node"] for r in g}
            doms = {(ranks[r]["node"] * 4 + ranks[r]["device"]) // 72 for r in g}
            if len(nodes) != 2 or doms != {0}:
                check(False, f"gb200-nvl72: tp group {g} is on two trays of rack 0")
                break
        else:
            check(True, "gb200-nvl72: every tp 8 group is on two trays of rack 0")
    # two racks: tp 16 instances start on the next rack instead of straddling
    p, plan = compile_plan(tmp, spec_for("gb200-nvl72", entry, 36, {"tp": 16, "replicas": 8}, "llama-3.1-70b"))
    check(p.returncode == 0, "gb200-nvl72: tp 16 x 8 compiles on two racks" + why(p))
    if plan:
        ranks = {r["rank"]: r for r in plan["ranks"]}
        straddle = [g for g in tp_groups(plan)
                    if len({(ranks[r]["node"] * 4 + ranks[r]["device"]) // 72 for r in g}) != 1]
        check(not straddle, "gb200-nvl72: no tp 16 group straddles two racks")
        check(ranks[64]["node"] == 18 and ranks[64]["device"] == 0,
              "gb200-nvl72: the 5th tp 16 instance starts on the second rack (node 18)")


def main():
    entries = sorted(HW.glob("*.yaml"))
    check(len(entries) >= 13, f"the hardware catalog has its {len(entries)} entries")
    with tempfile.TemporaryDirectory() as tmp:
        for path in entries:
            text = path.read_text()
            entry = yaml.safe_load(text)
            lint(path.stem, text, entry)
            loads(tmp, path.stem, entry)
        nvl72(tmp)
    return rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
