#!/usr/bin/env python3
"""`rankplan import-hf` and `model: {hf_config: PATH}` on real config.json
fixtures (tests/hf/fixtures/SOURCES.md): parameter totals against the
published ones (tests/hf/published.json), the YAML against the spec's
parser, diagnostics naming JSON field paths, determinism, atomic output."""
import sys
import json
import os
import pathlib
import re
import subprocess
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ["RANKPLAN"]
SRC = pathlib.Path(os.environ["SRCROOT"])
FIX = SRC / "tests" / "hf" / "fixtures"


def run(*args, **kw):
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([RP, *args], capture_output=True, text=True, env=env, timeout=60, **kw)


def counts(yaml_text):
    m = re.search(r"^# Parameters as rankplan counts them: (\d+) in total, (\d+) active", yaml_text, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def rounds_to(count, total, digits):
    """count, in the unit of total's magnitude (B or T), rounded to digits
    decimals, equals the published figure."""
    unit = 1e12 if total >= 1e12 else 1e9
    return round(count / unit, digits) == round(total / unit, digits)


def check_totals():
    table = json.loads((SRC / "tests" / "hf" / "published.json").read_text())["models"]
    listed = {e["fixture"] for e in table}
    for f in sorted(p.name for p in FIX.glob("*.json")):
        check(f in listed or f.startswith("Llama-4-Maverick"), f"{f} has a published total to check")
    for e in table:
        p = run("import-hf", str(FIX / e["fixture"]))
        total, _ = counts(p.stdout)
        if p.returncode != 0 or total is None:
            check(False, f"{e['fixture']}: import-hf exits 0 and states the count ({p.stderr[-300:]})")
            continue
        rel = total / e["total"] - 1
        if e["check"] == "tolerance":
            check(abs(rel) <= 0.005, f"{e['fixture']}: {total:,} within 0.5% of {e['total']:,.0f} ({rel:+.3%})")
        elif e["check"] == "rounding":
            check(rounds_to(total, e["total"], e["digits"]),
                  f"{e['fixture']}: {total:,} rounds to the published {e['total']:,.0f}")
        else:
            check(abs(rel - e["deviation"]) < 0.0005 and e.get("reason"),
                  f"{e['fixture']}: deviation {rel:+.3%} is the documented {e['deviation']:+.2%}")


SPEC = """version: 1
model:
{model}
hardware:
  preset: h100-sxm
  nodes: 2
  gpus_per_node: 8
workload:
  input_tokens: 2000
  output_tokens: 300
deployment:
  mode: aggregated
  pools:
    - name: main
      tp: 8
      pp: 2
"""


def ledger_rows(check_json):
    """The memory ledger of `check --format json` output, without the key
    naming the spec each row came from (the two specs compared differ)."""
    rows = json.loads(check_json).get("ledger") or []
    return [{k: v for k, v in r.items() if k != "spec"} for r in rows]


def check_yaml_parses(tmp):
    """Every imported model is a valid `model:` mapping for the spec parser,
    and `hf_config:` gives the same model as the imported YAML."""
    for f in sorted(FIX.glob("*.json")):
        if f.name.startswith("Llama-4-Maverick"):
            continue
        out = pathlib.Path(tmp) / (f.stem + ".yaml")
        p = run("import-hf", str(f), "-o", str(out))
        body = "".join("  " + l + "\n" for l in out.read_text().splitlines() if not l.startswith("#"))
        a = pathlib.Path(tmp) / "a.yaml"
        a.write_text(SPEC.format(model=body))
        b = pathlib.Path(tmp) / "b.yaml"
        b.write_text(SPEC.format(model=f"  hf_config: {f}"))
        pa = run("check", "--format", "json", str(a))
        pb = run("check", "--format", "json", str(b))
        la, lb = ledger_rows(pa.stdout), ledger_rows(pb.stdout)
        codes = {d["code"] for d in json.loads(pa.stdout)["diagnostics"]}
        check(p.returncode == 0 and not any(c.startswith("E01") for c in codes),
              f"{f.name}: the imported YAML parses as a spec's model")
        check(la == lb, f"{f.name}: hf_config gives the same memory ledger as the imported YAML")


def check_catalog_agrees():
    """The catalog entries hold the numbers of the configs they cite (dtype
    set alike on both sides)."""
    pairs = {"Llama-3.1-8B.json": "llama-3.1-8b", "DeepSeek-V3.json": "deepseek-v3",
             "Qwen3-235B-A22B.json": "qwen3-235b-a22b", "Mixtral-8x7B-v0.1.json": "mixtral-8x7b"}
    with tempfile.TemporaryDirectory() as tmp:
        for f, preset in pairs.items():
            a = pathlib.Path(tmp) / "a.yaml"
            a.write_text(SPEC.format(model=f"  preset: {preset}\n  dtype: bf16"))
            b = pathlib.Path(tmp) / "b.yaml"
            b.write_text(SPEC.format(model=f"  hf_config: {FIX / f}\n  dtype: bf16"))
            la = ledger_rows(run("check", "--format", "json", str(a)).stdout)
            lb = ledger_rows(run("check", "--format", "json", str(b)).stdout)
            check(la and la == lb, f"catalog {preset} and hf_config {f} give the same ledger")


def check_catalog_imports():
    """Catalog entries written by import-hf still are its output for the
    fixture they name (a change in the importer shows as a failure here)."""
    n = 0
    for f in sorted((SRC / "plans" / "catalog" / "models").glob("*.yaml")):
        text = f.read_text()
        m = re.search(r"^# Imported by `rankplan import-hf` from (\S+) ", text, re.M)
        if not m:
            continue
        n += 1
        body = text[m.start():]
        name = re.search(r'^name: "(.*)"$', text, re.M).group(1)
        src = re.search(r'^source: "(.*)"$', text, re.M)
        opts = ["--name", name] + (["--source", src.group(1)] if src else [])
        p = subprocess.run([RP, "import-hf", m.group(1), *opts], capture_output=True, text=True,
                           cwd=SRC, timeout=60)
        check(p.returncode == 0 and p.stdout == body, f"catalog {f.name} is import-hf's output for {m.group(1)}")
    check(n >= 18, f"{n} catalog entries come from fixtures")
    # an entry names the checkpoint the engines load, unless its config
    # does not say the checkpoint's dtype (the spec then states both)
    unsourced = sorted(f.name for f in (SRC / "plans" / "catalog" / "models").glob("*.yaml")
                       if not re.search(r'^source: "[^"/]+/[^"]+"$', f.read_text(), re.M))
    check(unsourced == ["glm-4.7-fp8.yaml"], f"every catalog model but GLM-4.7-FP8 names its checkpoint ({unsourced})")
    total = len(list((SRC / "plans" / "catalog" / "models").glob("*.yaml")))
    check(total >= 25, f"the catalog has {total} models")


def check_diagnostics(tmp):
    t = pathlib.Path(tmp)
    base = json.loads((FIX / "Qwen3-30B-A3B.json").read_text())

    def imp(cfg, *extra):
        f = t / "c.json"
        f.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        return run("import-hf", "--format", "json", str(f), *extra)

    def diags(p):
        return [(d["code"], d["message"]) for d in json.loads(p.stderr)["diagnostics"]]

    p = imp('{"model_type": "llama",\n "hidden_size": 1,,}')
    d = json.loads(p.stderr)["diagnostics"]
    check(p.returncode == 1 and d[0]["code"] == "E0150" and d[0]["location"]["line"] == 2, "bad JSON is E0150 at its line")
    p = imp("[1, 2]")
    check(p.returncode == 1 and diags(p)[0][0] == "E0150", "a JSON array is E0150")
    for key, val, want in (("num_hidden_layers", "48", "E0103"), ("num_experts", 1.5, "E0103"),
                           ("hidden_size", -1, "E0105"), ("mlp_only_layers", [3], "E0151"),
                           ("decoder_sparse_step", 2, "E0151"), ("model_type", "bert", "E0151"),
                           ("model_type", 7, "E0103"), ("architectures", "LlamaForCausalLM", "E0103"),
                           ("architectures", ["Llama For Causal LM"], "E0103"), ("architectures", [], "E0103")):
        cfg = dict(base, **{key: val})
        p = imp(cfg)
        ds = diags(p)
        check(p.returncode == 1 and any(c == want and f"`{key}" in m for c, m in ds),
              f"{key} = {val!r} is {want} naming `{key}`")
    dsv2 = json.loads((FIX / "DeepSeek-V2-Lite.json").read_text())
    ds = diags(imp(dict(dsv2, first_k_dense_replace=28)))
    check(any(c == "E0105" and "28 leading dense layers" in m for c, m in ds), "more dense layers than layers is E0105")
    dsv3 = json.loads((FIX / "DeepSeek-V3.json").read_text())
    for g, k in ((7, 4), (8, 9)):
        ds = diags(imp(dict(dsv3, n_group=g, topk_group=k)))
        check(any(c == "E0151" and "`n_group`" in m for c, m in ds),
              f"n_group {g} with topk_group {k} is E0151 (groups divide the experts; topk_group <= n_group)")
    p = imp(dsv3)
    y = p.stdout
    check(p.returncode == 0 and "  groups: 8\n  group_top_k: 4\n" in y and "mtp_layers: 1\n" in y,
          "DeepSeek-V3's n_group/topk_group and num_nextn_predict_layers are imported")
    check('\narchitecture: "DeepseekV3ForCausalLM"\n' in y,
          "architectures[0] is imported as architecture (the class engines pick kernels by)")
    d = json.loads(imp(dict(dsv3, architectures=["Deepseek V3"])).stderr)["diagnostics"]
    check(d and d[0]["code"] == "E0103" and d[0]["location"]["line"] > 0,
          "a bad architectures entry is E0103 at the key's line", d[:1])
    cfg = dict(base)
    del cfg["num_attention_heads"]
    ds = diags(imp(cfg))
    check(("E0102", "`num_attention_heads` is missing from the config") in ds, "a missing key is E0102")
    cfg = dict(base, zz_unknown=1, another_one={"a": 1})
    p = imp(cfg)
    w = [m for c, m in diags(p) if c == "W0150"]
    check(p.returncode == 0 and w and "`zz_unknown`" in w[0] and "`another_one`" in w[0],
          "unknown keys are listed in W0150")
    cfg = dict(base, quantization_config={"quant_method": "awq", "bits": 4})
    ds = diags(imp(cfg))
    check(any(c == "W0151" and "awq" in m for c, m in ds) and any(c == "W0150" and "quantization_config.bits" in m for c, m in ds),
          "an unmodelled quantisation is W0151, its unknown keys W0150")
    scout = json.loads((FIX / "Llama-4-Scout-17B-16E-Instruct.json").read_text())
    scout["text_config"]["vocab_size"] = "202048"
    ds = diags(imp(scout))
    check(any(c == "E0103" and "`text_config.vocab_size`" in m for c, m in ds), "nested paths are named")
    p = run("import-hf", "--format", "json", str(FIX / "Llama-4-Maverick-17B-128E-Instruct.json"))
    check(p.returncode == 1 and any(c == "E0151" and "interleave_moe_layer_step" in m for c, m in diags(p)),
          "interleaved MoE layers are E0151")
    p = run("import-hf", str(FIX / "gpt-oss-120b.json"))
    check("dtype:\n  weights: mxfp4\n  attention_weights: bf16\n" in p.stdout
          and "# `quantization_config.modules_to_not_convert` keeps `model.layers.*.self_attn` unquantised: "
              "the attention projections are counted in bf16" in p.stdout
          and "Not modelled" not in p.stdout and "sliding window" not in p.stdout,
          "mxfp4 experts, the attention kept in bf16, and the reason in the YAML header")
    alt = ", ".join(["sliding", "full"] * 18)
    check(p.returncode == 0 and f"  sliding_window: 128\n  layer_types: [{alt}]\n" in p.stdout,
          "gpt-oss: layer_types alternate a 128-token sliding window and full attention")
    p = run("import-hf", str(FIX / "gemma-3-1b-it.json"))
    g = ", ".join(("full" if (i + 1) % 6 == 0 else "sliding") for i in range(26))
    check(p.returncode == 0 and f"  sliding_window: 512\n  layer_types: [{g}]\n" in p.stdout,
          "Gemma 3: sliding_window_pattern 6 makes every 6th layer full, the others a 512-token window")
    p = run("import-hf", str(FIX / "Llama-4-Scout-17B-16E-Instruct.json"))
    c = ", ".join(("full" if (i + 1) % 4 == 0 else "chunked") for i in range(48))
    check(p.returncode == 0 and f"  chunk_size: 8192\n  layer_types: [{c}]\n" in p.stdout,
          "Llama 4: attention_chunk_size 8192 on the RoPE layers, every 4th (NoPE) layer full")
    check_window_configs(imp, diags)
    check_rope_configs(imp, diags)


def check_rope_configs(imp, diags):
    """The RoPE keys that size the engines' tables (model.rope): Gemma 3's
    second base, rope_scaling's type and factor (transformers 4) or
    rope_parameters (5), partial_rotary_factor; the bad ones named."""
    gem = json.loads((FIX / "gemma-3-1b-it.json").read_text())
    p = imp(gem)
    check(p.returncode == 0 and p.stdout.endswith("rope:\n  local_base: true\n"),
          "Gemma 3: rope_local_base_freq beside rope_theta is rope.local_base")
    # the scaling the text config of google/gemma-3-4b-it, -12b-it and -27b-it states
    p = imp(dict(gem, rope_scaling={"factor": 8.0, "rope_type": "linear"}))
    check(p.returncode == 0 and "rope:\n  scaling: linear\n  factor: 8\n  local_base: true\n" in p.stdout,
          "Gemma 3 4B-27B's linear scaling x 8 is imported with the local base")
    v5 = {k: v for k, v in gem.items() if k not in ("rope_scaling", "rope_local_base_freq", "rope_theta")}
    v5["rope_parameters"] = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}
    p = imp(v5)
    check(p.returncode == 0 and "rope:\n  scaling: linear\n  factor: 8\n  local_base: true\n" in p.stdout,
          "transformers 5's rope_parameters keyed by layer type give the same")
    dsv3 = json.loads((FIX / "DeepSeek-V3.json").read_text())
    p = imp(dsv3)
    check(p.returncode == 0 and "rope:\n  scaling: yarn\n  factor: 40\n  original_max_position_embeddings: 4096\n"
          in p.stdout, "DeepSeek-V3's yarn scaling (type, factor, original length) is imported")
    qwen = json.loads((FIX / "Qwen3-8B.json").read_text())
    p = imp(dict(qwen, partial_rotary_factor=0.5))
    check(p.returncode == 0 and "rope:\n  rotary_dim: 64\n" in p.stdout,
          "partial_rotary_factor 0.5 of 128 is rotary_dim 64")
    ds = diags(imp(dict(qwen, rope_scaling={"rope_type": "linear"})))
    check(any(c == "E0151" and "`rope_scaling.factor`" in m for c, m in ds), "a scaling without its factor is E0151")
    ds = diags(imp(dict(qwen, rope_scaling={"rope_type": "yarn", "factor": 4.0})))
    check(any(c == "E0151" and "`rope_scaling.original_max_position_embeddings`" in m for c, m in ds),
          "yarn without original_max_position_embeddings is E0151")
    bad = json.dumps(dict(qwen, rope_scaling={"rope_type": "linear", "factor": "8"}), indent=2)
    d = json.loads(imp(bad).stderr)["diagnostics"]
    line = bad.splitlines().index('    "factor": "8"') + 1
    check([(x["code"], x["location"]["line"]) for x in d if "rope_scaling" in x["message"]] == [("E0103", line)],
          "a factor that is no number is one E0103, at its line", d)
    ds = diags(imp(dict(qwen, rope_scaling={"rope_type": "longrope", "factor": 4.0})))
    check(any(c == "W0151" and "`rope_scaling.rope_type` `longrope`" in m for c, m in ds),
          "a rope type that does not size the table as modelled is W0151")
    ds = diags(imp(dict(qwen, partial_rotary_factor=1.5)))
    check(any(c == "E0105" and "`partial_rotary_factor`" in m for c, m in ds), "partial_rotary_factor above 1 is E0105")


def check_window_configs(imp, diags):
    """Sliding windows as Mistral, Qwen2 and explicit layer_types state
    them, and the bad ones named at their field."""
    mis = json.loads((FIX / "Mistral-7B-v0.3.json").read_text())
    p = imp(dict(mis, sliding_window=4096))
    check(p.returncode == 0 and "  sliding_window: 4096\n" in p.stdout and "layer_types" not in p.stdout,
          "Mistral: sliding_window alone makes every layer sliding")
    qwen = json.loads((FIX / "Qwen2.5-3B.json").read_text())
    p = imp(dict(qwen, use_sliding_window=True, max_window_layers=30, sliding_window=4096))
    q = ", ".join(("full" if i < 30 else "sliding") for i in range(36))
    check(p.returncode == 0 and f"  sliding_window: 4096\n  layer_types: [{q}]\n" in p.stdout,
          "Qwen2 use_sliding_window: the layers from max_window_layers on are sliding")
    p = imp(qwen)
    check(p.returncode == 0 and "sliding_window" not in p.stdout, "Qwen2 without use_sliding_window: every layer full")
    oss = json.loads((FIX / "gpt-oss-20b.json").read_text())
    ds = diags(imp(dict(oss, layer_types=oss["layer_types"][:-1])))
    check(any(c == "E0151" and "`layer_types` has 23 entries for 24 layers" in m for c, m in ds),
          "a layer_types list of the wrong length is E0151")
    ds = diags(imp(dict(oss, layer_types=["sliding_attention"] * 23 + ["linear_attention"])))
    check(any(c == "E0151" and "`layer_types[23]`" in m for c, m in ds), "an unknown layer type is E0151 naming its index")
    ds = diags(imp(dict(oss, sliding_window=None)))
    check(any(c == "E0151" and "`sliding_window` is not given" in m for c, m in ds),
          "sliding layers without a window are E0151")


def check_cli(tmp):
    t = pathlib.Path(tmp)
    f = str(FIX / "DeepSeek-V3.json")
    a, b = run("import-hf", f), run("import-hf", f)
    check(a.returncode == 0 and a.stdout == b.stdout, "output is deterministic")
    out = t / "m.yaml"
    p = run("import-hf", f, "-o", str(out), "--name", "DSV3")
    check(p.returncode == 0 and out.read_text() == a.stdout.replace('name: "DeepSeek-V3"', 'name: "DSV3"'),
          "-o writes the same YAML; --name sets the name")
    check(not [x for x in os.listdir(tmp) if x.startswith(".m.yaml") or ".tmp" in x], "no temporary is left")
    p = run("import-hf", "--help")
    check(p.returncode == 0 and "usage: rankplan import-hf" in p.stdout, "import-hf --help")
    check(run("import-hf").returncode == 2, "import-hf without CONFIG exits 2")
    check(run("import-hf", str(t / "absent.json")).returncode == 2, "an unreadable config exits 2")
    p = run("import-hf", f, "-o", f)
    check(p.returncode == 2 and "destroy the input" in p.stderr, "-o naming the input is refused")
    sub = t / "dir" / "Some-Model"
    sub.mkdir(parents=True)
    (sub / "config.json").write_text((FIX / "Qwen3-8B.json").read_text())
    p = run("import-hf", str(sub / "config.json"))
    check('name: "Some-Model"' in p.stdout, "config.json takes its directory's name")
    spec = t / "dir" / "s.yaml"
    spec.write_text(SPEC.format(model="  hf_config: Some-Model/config.json\n  name: Mine"))
    p = run("check", str(spec))
    check(p.returncode == 0, "hf_config is relative to the spec's directory")
    check_draft_config(t)


def check_draft_config(t):
    """model.draft takes an hf_config too: with draft tokens its weights
    and KV join the ledger, its errors are named under model.draft."""
    base = SPEC.format(model="  preset: llama-3.1-70b\n  draft: { hf_config: %s }" % (FIX / "Llama-3.2-1B.json"))
    rows = {}
    for name, text in (("plain", SPEC.format(model="  preset: llama-3.1-70b")),
                       ("draft", base.replace("output_tokens: 300", "output_tokens: 300\n  draft_tokens: 3"))):
        f = t / f"{name}.yaml"
        f.write_text(text)
        p = run("check", "--format", "json", str(f))
        rows[name] = ledger_rows(p.stdout)
        check(p.returncode == 0, f"model.draft as hf_config: `{name}` checks")
    a, b = rows["plain"], rows["draft"]
    check(a and b and b[-1]["weights"] > a[-1]["weights"] and b[-1]["kv_blocks"] < a[-1]["kv_blocks"]
          and b[0] == a[0], "the draft's weights and KV are on the last stage's ledger", f"{a} {b}")
    f = t / "bad.yaml"
    f.write_text(SPEC.format(model="  preset: llama-3.1-70b\n  draft: { hf_config: absent.json }"))
    p = run("check", str(f))
    check(p.returncode != 0 and "`model.draft.hf_config`" in p.stderr, "an unreadable draft hf_config names model.draft.hf_config",
          p.stderr[-400:])


def check_docs_list_keys():
    """docs/models.md names every key the import passes over as irrelevant."""
    src = (SRC / "compiler" / "hf_import.c").read_text()
    doc = (SRC / "docs" / "models.md").read_text()
    for table in ("ignored_keys", "quant_keys"):
        start = src.index(table + "[] = {")
        keys = re.findall(r'"([^"]+)"', src[start:src.index("};", start)])
        missing = [k for k in keys if f"`{k}`" not in doc]
        check(keys and not missing, f"docs/models.md lists the {len(keys)} keys of {table} {missing or ''}")


def check_unprintable_text(tmp):
    """Text that YAML cannot hold as text reaches the imported YAML as `?`,
    one per character, so the YAML still parses as a spec's model: a DEL
    inside a modules_to_not_convert pattern and DEL and a C1 control in the
    file name the model is named after; YAML's other line breaks (U+0085
    NEL, U+2028, U+2029), which would end a comment and turn the rest of
    it into YAML: a NEL in a module pattern and the other two in the name.
    Both configs are inputs fuzz_hf found (tests/hf/regress/)."""
    cases = (("fuzz-del-in-module-pattern.json", b"odd\x7f\xc2\x80name", ".ml&p.r?uter", "odd??name",
              "DEL and C1 controls"),
             ("fuzz-nel-in-module-pattern.json", "odd\u2028line\u2029name".encode(), "self_attn*-?eaye",
              "odd?line?name", "NEL, U+2028 and U+2029"))
    for regress, stem, in_comment, in_name, what in cases:
        name = os.fsencode(tmp) + b"/" + stem + b".json"
        with open(name, "wb") as f:
            f.write((FIX.parent / "regress" / regress).read_bytes())
        out = pathlib.Path(tmp) / (regress + ".yaml")
        p = run("import-hf", os.fsdecode(name), "-o", str(out))
        text = out.read_text() if out.exists() else ""
        check(p.returncode == 0 and in_comment in text and f'name: "{in_name}"' in text,
              f"import-hf writes {what} as one `?` each, in comments and the name")
        parses_as_model(tmp, regress, text)


def parses_as_model(tmp, stem, text):
    body = "".join("  " + l + "\n" for l in text.splitlines())
    spec = pathlib.Path(tmp) / (stem + "-spec.yaml")
    spec.write_text(SPEC.format(model=body.rstrip("\n")))
    c = run("check", str(spec))
    check("E0005" not in c.stderr and "error[E01" not in c.stderr,
          f"{stem}: that YAML, comments included, parses as a spec's model")

check_docs_list_keys()
check_totals()
with tempfile.TemporaryDirectory() as tmp:
    check_yaml_parses(tmp)
check_catalog_agrees()
check_catalog_imports()
with tempfile.TemporaryDirectory() as tmp:
    check_diagnostics(tmp)
with tempfile.TemporaryDirectory() as tmp:
    check_cli(tmp)
with tempfile.TemporaryDirectory() as tmp:
    check_unprintable_text(tmp)
raise SystemExit(rptest.finish())
