#!/usr/bin/env python3
"""schemas/spec.schema.json against an independent validator.

Every example spec (plans/examples/*.yaml) and every golden ok spec
(tests/golden/ok/*.yaml) must validate; every catalog entry must validate
as the `model` or `hardware` section it stands for; every structurally
wrong spec below (golden error cases and inline snippets) must fail.
Exits non-zero on any mismatch.
"""
import json
import os
import pathlib
import sys

import jsonschema
import yaml

ROOT = pathlib.Path(os.environ.get("SRCROOT") or pathlib.Path(__file__).resolve().parents[2])
schema = json.loads((ROOT / "schemas" / "spec.schema.json").read_text())
jsonschema.Draft202012Validator.check_schema(schema)
V = jsonschema.Draft202012Validator(schema)

# Golden error cases whose fault is structural (the schema must catch them).
# The others are YAML-level (duplicate keys, tags, aliases: the YAML loader
# sees them, not the schema), need the whole spec (pools against the
# cluster, roles against the mode), or are YAML 1.1 forms a 1.1 loader
# already turned into integers or booleans.
STRUCTURAL_ERR = [
    "spec-unknown-key", "spec-missing-key", "spec-wrong-type", "spec-missing-unit",
    "spec-wrong-unit", "spec-unknown-unit", "spec-bad-version", "spec-missing-sections",
    "spec-bad-enum", "spec-bad-bool", "spec-bad-order", "spec-not-a-mapping",
    "spec-preset-traversal", "spec-preset-override-error", "spec-search-needs-slo",
    "spec-memory-not-whole", "yaml-count-zero", "yaml-count-negative", "yaml-count-float",
    "yaml-count-quoted", "yaml-count-inf", "spec-mla-missing-keys", "spec-layer-partition-zero",
]

BASE = """
version: 1
model: { preset: llama-3.1-8b }
hardware: { preset: h100-sxm, nodes: 1 }
workload: { input_tokens: 100, output_tokens: 10 }
deployment:
  mode: aggregated
  pools: [ { name: main, tp: 8 } ]
"""

# Llama-3.1-8B written out in full (its config.json; plans/catalog/models/):
# valid on its own, each negative below removes or adds one key.
FULL_ATTN = {"kind": "gqa", "heads": 32, "kv_heads": 8, "head_dim": 128}
FULL_MODEL = {"layers": 32, "hidden_size": 4096, "vocab_size": 128256, "attention": FULL_ATTN,
              "ffn": {"intermediate_size": 14336}, "max_context": 131072}

# (description, edit applied to the parsed BASE)
def _set(path, value):
    def f(d):
        cur = d
        for k in path[:-1]:
            cur = cur.setdefault(k, {})
        cur[path[-1]] = value
    return f

def _del(path):
    def f(d):
        cur = d
        for k in path[:-1]:
            cur = cur[k]
        del cur[path[-1]]
    return f

INLINE_NEGATIVE = [
    ("unknown key in model", _set(["model", "layerz"], 80)),
    ("unknown top-level key", _set(["colour"], "blue")),
    ("engine mapping with an unknown key", _set(["deployment", "engine"], {"name": "vllm", "release": "0.11"})),
    ("engine mapping without a name", _set(["deployment", "engine"], {"version": "0.11"})),
    ("unknown engine", _set(["deployment", "engine"], "tgi")),
    ("serving port below 1024", _set(["serving"], {"port": 80})),
    ("unknown serving key", _set(["serving"], {"max_batch": 8})),
    ("hostnames is a string", _set(["hardware", "hostnames"], "gpu-0")),
    ("hostname pattern without {n}", _set(["hardware", "hostname_pattern"], "gpu-x")),
    ("missing workload.input_tokens", _del(["workload", "input_tokens"])),
    ("missing deployment.mode", _del(["deployment", "mode"])),
    ("missing hardware section", _del(["hardware"])),
    ("pools is a mapping", _set(["deployment", "pools"], {"name": "main"})),
    ("nodes is a string", _set(["hardware", "nodes"], "4")),
    ("bare number for memory", _set(["hardware", "gpu"], {"memory": 80})),
    ("bare number string for memory", _set(["hardware", "gpu"], {"memory": "80"})),
    ("bandwidth unit for memory", _set(["hardware", "gpu"], {"memory": "80 GB/s"})),
    ("memory unit for bandwidth", _set(["hardware", "gpu"], {"hbm_bandwidth": "4.8 TB"})),
    ("bits for memory", _set(["hardware", "gpu"], {"memory": "80 Gb"})),
    ("bare number for ttft", _set(["slo"], {"ttft": 0.6, "tpot": "40 ms"})),
    ("zero tp", lambda d: d["deployment"]["pools"][0].__setitem__("tp", 0)),
    ("pool without name", lambda d: d["deployment"]["pools"][0].pop("name")),
    ("utilization over 1", _set(["deployment", "memory"], {"utilization": 1.5})),
    ("order naming tp twice", _set(["deployment", "order"], "tp-cp-tp-dp")),
    ("order with a trailing '-'", _set(["deployment", "order"], "tp-pp-")),
    ("bad dtype", _set(["model", "dtype"], {"weights": "bf8"})),
    ("version 2", _set(["version"], 2)),
    ("preset with a slash", _set(["model", "preset"], "../x")),
    ("model without preset misses layers", lambda d: d.__setitem__("model", {"hidden_size": 8})),
    ("MLA key beside kind gqa", _set(["model", "attention"], dict(FULL_ATTN, kv_lora_rank=512))),
    ("no preset, gqa without head_dim",
     lambda d: d.__setitem__("model", dict(FULL_MODEL, attention={k: v for k, v in FULL_ATTN.items() if k != "head_dim"}))),
    ("no preset, gqa without kv_heads",
     lambda d: d.__setitem__("model", dict(FULL_MODEL, attention={k: v for k, v in FULL_ATTN.items() if k != "kv_heads"}))),
    ("no preset, attention without kind",
     lambda d: d.__setitem__("model", dict(FULL_MODEL, attention={k: v for k, v in FULL_ATTN.items() if k != "kind"}))),
    ("no preset, dense model without ffn",
     lambda d: d.__setitem__("model", {k: v for k, v in FULL_MODEL.items() if k != "ffn"})),
]


def load(p):
    return yaml.safe_load(p.read_text(encoding="utf-8"))


def main():
    bad = 0
    n = 0
    pos = sorted((ROOT / "plans" / "examples").glob("*.yaml")) + sorted((ROOT / "tests" / "golden" / "ok").glob("*.yaml"))
    if len(pos) < 6:
        print(f"expected the example specs, found {len(pos)} files")
        bad += 1
    for p in pos:
        n += 1
        errs = sorted(V.iter_errors(load(p)), key=str)
        if errs:
            bad += 1
            print(f"FAIL {p.relative_to(ROOT)} should validate: {errs[0].message} at {list(errs[0].absolute_path)}")
    for kind, section in (("models", "model"), ("hardware", "hardware")):
        sub = dict(schema["properties"][section])
        sub["$defs"] = schema["$defs"]
        sub["$schema"] = schema["$schema"]
        if section == "hardware":
            # a catalog entry leaves `nodes` to the spec, and may leave
            # `scale_out` to it when no public figure exists (h20)
            sub["required"] = []
            sub["then"] = {"required": ["gpu", "gpus_per_node", "scale_up"]}
        sv = jsonschema.Draft202012Validator(sub)
        files = sorted((ROOT / "plans" / "catalog" / kind).glob("*.yaml"))
        if not files:
            print(f"FAIL no catalog entries in plans/catalog/{kind}")
            bad += 1
        for p in files:
            n += 1
            errs = list(sv.iter_errors(load(p)))
            if errs:
                bad += 1
                print(f"FAIL {p.relative_to(ROOT)} should validate as `{section}`: {errs[0].message}")
    for name in STRUCTURAL_ERR:
        n += 1
        p = ROOT / "tests" / "golden" / "err" / f"{name}.yaml"
        if not p.exists():
            print(f"FAIL missing negative example {p.relative_to(ROOT)}")
            bad += 1
            continue
        if V.is_valid(load(p)):
            bad += 1
            print(f"FAIL {p.relative_to(ROOT)} should NOT validate")
    base = yaml.safe_load(BASE)
    if not V.is_valid(base):
        bad += 1
        print("FAIL the inline base spec should validate")
    full = dict(json.loads(json.dumps(base)), model=FULL_MODEL)
    if not V.is_valid(full):
        bad += 1
        print("FAIL the inline spec with the model written out should validate")
    # Megatron-Core's order strings leave out size-1 dimensions.
    for order in ("tp-pp-dp", "tp", "pp-tp-dp-cp"):
        n += 1
        d = json.loads(json.dumps(base))
        d["deployment"]["order"] = order
        if not V.is_valid(d):
            bad += 1
            print(f"FAIL order `{order}` should validate")
    for desc, edit in INLINE_NEGATIVE:
        n += 1
        d = json.loads(json.dumps(base))
        edit(d)
        if V.is_valid(d):
            bad += 1
            print(f"FAIL inline negative '{desc}' should NOT validate")
    print(f"{n} schema checks, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
