#!/usr/bin/env python3
"""Plans end to end: `rankplan compile` against the golden plans in
plans/examples/, determinism, the JSON schema (checked by the independent
jsonschema Draft 2020-12 validator), atomic writes, --split-by-node, the
loader's errors as `rankplan explain` reports them, and explain's views.

Regenerate the goldens with scripts/regen-goldens.sh after an intended
change to the compiler's output."""
import glob
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.path.abspath(os.environ["RANKPLAN"])
SRC = os.environ["SRCROOT"]
EX = os.path.join(SRC, "plans", "examples")

try:
    import jsonschema
except ImportError:  # the Debian package python3-jsonschema; make deps installs it
    print("FAIL python3 jsonschema is not installed (make deps)")
    sys.exit(1)

SCHEMA = json.load(open(os.path.join(SRC, "schemas", "plan.schema.json")))
jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def run(*args, cwd=None, timeout=300):
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([RP, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


def members(g):
    """A group's ranks; the world group is written as a span."""
    return list(range(*g["span"])) if "span" in g else g["ranks"]


def schema_errors(doc):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


tmp = tempfile.mkdtemp(prefix="rankplan-plans-")
try:
    # ---- goldens: byte-identical, schema-valid ------------------------------
    specs = sorted(glob.glob(os.path.join(EX, "*.yaml")))
    check(len(specs) >= 6, f"at least six example specs ({len(specs)})")
    for spec in specs:
        name = os.path.basename(spec)[:-5]
        golden = os.path.join(EX, name + ".plan.json")
        digest = golden + ".sha256"
        out = os.path.join(tmp, name + ".plan.json")
        p = run("compile", os.path.relpath(spec, SRC), "-o", out, cwd=SRC)
        check(p.returncode == 0, f"{name}: compiles", p.stderr)
        if p.returncode != 0:
            continue
        data = open(out, "rb").read()
        if os.path.exists(golden):
            want = open(golden, "rb").read()
            check(data == want, f"{name}: output is byte-identical to the golden plan",
                  "run scripts/regen-goldens.sh and review the diff")
        elif os.path.exists(digest):
            want = open(digest).read().split()[0]
            check(hashlib.sha256(data).hexdigest() == want,
                  f"{name}: output matches the golden digest")
        else:
            check(False, f"{name}: has a golden plan (scripts/regen-goldens.sh)")
        doc = json.loads(data)
        errs = schema_errors(doc)
        check(not errs, f"{name}: valid against schemas/plan.schema.json", errs[:5])
        # the digest is that of the spec's bytes
        check(doc["spec_sha256"] == hashlib.sha256(open(spec, "rb").read()).hexdigest(),
              f"{name}: spec_sha256 is the spec's digest")
        # the memory entries add up to capacity when the KV pool is not negative
        r0 = doc["ranks"][0]["memory"]
        parts = r0["weights"] + r0["kv_cache"] + r0["activations"] + r0["workspace"] + r0["reserved"]
        check(r0["kv_cache"] == 0 or parts == r0["capacity"],
              f"{name}: memory entries add up to capacity", r0)
        # the loader accepts it, with the spec's digest
        p = run("explain", out, "--summary", "--spec", spec)
        check(p.returncode == 0, f"{name}: explain --spec loads it", p.stderr)

    # ---- determinism: same spec, same bytes, wherever it is compiled from --
    spec = os.path.join(EX, "deepseek-v3-pd.yaml")
    a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
    run("compile", spec, "-o", a, cwd=tmp)
    sub = os.path.join(tmp, "sub")
    os.mkdir(sub)
    shutil.copy(spec, os.path.join(sub, "copy.yaml"))
    run("compile", "copy.yaml", "-o", b, cwd=sub)
    check(open(a, "rb").read() == open(b, "rb").read(),
          "determinism: a copy of the spec compiled from another directory gives the same bytes")

    # ---- plan contents --------------------------------------------------------
    doc = json.load(open(os.path.join(EX, "llama-3.1-70b-pd.plan.json")))
    check(doc["world_size"] == 24 and [p["tp"] for p in doc["pools"]] == [8, 4],
          "70B pd: prefill TP8 x2 and decode TP4 x2 = 24 ranks")
    check([r["rank"] for r in doc["ranks"]] == list(range(24)), "ranks listed in global order")
    check(all(r["pool"] == ("prefill" if r["rank"] < 16 else "decode") for r in doc["ranks"]),
          "global rank order: pools in spec order, then replicas")
    groups = {g["id"]: g for g in doc["groups"]}
    ok = True
    for r in doc["ranks"]:
        for kind, gid in r["groups"].items():
            g = groups[gid]
            ok &= g["kind"] == kind and r["rank"] in members(g)
        ok &= len({doc["ranks"][m]["node"] for m in groups[r["groups"]["tp"]]["ranks"]}) == 1
    check(ok, "each rank's groups list it; every tp group on one node")
    doc = json.load(open(os.path.join(EX, "llama-3.1-405b-pp.plan.json")))
    pools = doc["pools"]
    check(all(sum(p["layer_partition"]) == 126 for p in pools), "405B: layer partitions sum to 126")
    ppg = [g for g in doc["groups"] if g["kind"] == "pp"]
    check(all(len({doc["ranks"][m]["node"] for m in g["ranks"]}) == len(g["ranks"]) for g in ppg)
          or all(len(g["ranks"]) == 1 for g in ppg), "405B: pp stages spread across nodes")

    doc = json.load(open(os.path.join(EX, "deepseek-v3-pd.plan.json")))
    dec = [p for p in doc["pools"] if p["role"] == "decode"][0]
    ranks = [r for r in doc["ranks"] if r["pool"] == dec["name"] and r["instance"] == 0]
    groups = {g["id"]: g for g in doc["groups"]}
    experts = sorted(tuple(r["shard"]["experts"]) for r in ranks)
    check(dec["dp"] > 1 and dec["ep"] == dec["dp"] * dec["tp"]
          and sorted(r["coords"]["dp"] for r in ranks) == list(range(dec["dp"])),
          "DeepSeek-V3 decode: attention dp, one dp coordinate per rank")
    check(groups[ranks[0]["groups"]["ep"]]["ranks"] == [r["rank"] for r in ranks]
          and experts[0][0] == 0 and experts[-1][1] == 256
          and all(a[1] == b[0] for a, b in zip(experts, experts[1:])),
          "DeepSeek-V3 decode: the ep group spans the dp ranks, experts split without overlap")

    # ---- kv_reshard: one request's bytes and time per link class -----------------
    # Llama-3.1-70B (plans/catalog/models: 80 layers, 8 KV heads of head_dim
    # 128, bf16: 2 x 128 x 2 = 512 B per head, layer and token), input_tokens
    # 4000, prefill TP8 on nodes 0-1 and decode TP4 on nodes 2-3, so every
    # byte crosses the scale-out link: 400 Gb/s = 50 GB/s per GPU (h200-sxm).
    doc = json.load(open(os.path.join(EX, "llama-3.1-70b-pd.plan.json")))
    req = doc["kv_reshard"][0].get("request", {})
    total = 80 * 8 * 512 * 4000
    per_dst = 80 * 2 * 512 * 4000  # each decode rank receives 2 of the 8 heads
    check(req.get("input_tokens") == 4000 and req.get("bytes") == total
          and req.get("bytes_scale_out") == total and req.get("bytes_scale_up") == 0,
          "kv_reshard request: 1,310,720,000 bytes per 4000-token request, all scale-out", req)
    check(abs(req.get("time_scale_out_ms", -1) - per_dst / 50e9 * 1e3) < 1e-6
          and req.get("time_scale_up_ms") == 0 and req.get("time_ms") == req.get("time_scale_out_ms"),
          "kv_reshard request: time is the busiest decode rank's bytes over 50 GB/s (6.5536 ms)", req)
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--reshard")
    check(p.returncode == 0 and "total 1310720000 bytes (1.22 GiB) per request of 4000 tokens" in p.stdout
          and "scale-up 0 B in 0.000 ms, scale-out 1.22 GiB in 6.554 ms" in p.stdout,
          "explain --reshard: bytes at the plan's input_tokens and time per link class", p.stdout[-600:])
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--reshard", "--tokens", "1000")
    check(p.returncode == 0 and "total 327680000 bytes" in p.stdout and "of 1000 tokens" in p.stdout,
          "explain --reshard --tokens N: bytes for N tokens", p.stdout[-600:])
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--reshard", "--format", "json")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    pair = (j.get("kv_reshard") or [{}])[0]
    xs = pair.get("transfers", [])
    want = doc["kv_reshard"][0]["transfers"]
    check(len(xs) == len(want) and all({k: x[k] for k in w} == w for x, w in zip(xs, want))
          and pair.get("tokens") == 4000 and all(x["bytes"] == x["bytes_per_token"] * 4000 for x in xs)
          and sum(x["bytes"] for x in xs) == total and pair.get("request") == req,
          "explain --reshard --format json: the plan's transfers with bytes at input_tokens", p.stdout[:600])
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--reshard", "--format", "json",
            "--tokens", "7")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check([x["bytes"] for x in j["kv_reshard"][0]["transfers"]] == [40960 * 7] * 8 if j else False,
          "explain --reshard --format json --tokens 7: bytes for 7 tokens")
    # explain --costs: the plan's estimates.pools, per phase with its split
    est = doc["estimates"]["pools"]
    check([e["pool"] for e in est] == [q["name"] for q in doc["pools"]]
          and est[0]["decode"] is None and est[1]["prefill"] is None
          and est[1]["decode"]["batch"] <= est[1]["max_batch"],
          "estimates.pools: prefill phase for the prefill pool, decode (batch <= max_batch) for decode", est)
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--costs")
    d = est[1]["decode"]
    check(p.returncode == 0 and "tp ms" in p.stdout
          and "%.3f" % d["step_ms"] in p.stdout and "%.1f" % d["output_tok_s_per_gpu"] in p.stdout
          and "configure the engine for %d concurrent sequences" % est[1]["max_batch"] in p.stdout,
          "explain --costs: each phase's time, tok/s/GPU and split, and the batch to configure", p.stdout)
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--costs", "--format", "json")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check(j.get("costs") == est, "explain --costs --format json: the plan's estimates.pools", p.stdout[:600])
    # a plan without estimates (no slo): --costs says so, JSON null
    noslo = os.path.join(tmp, "noslo.yaml")
    text = open(os.path.join(EX, "llama-3.1-8b-agg.yaml")).read()
    open(noslo, "w").write(text[:text.index("slo:")] + text[text.index("deployment:"):])
    out = os.path.join(tmp, "noslo.json")
    p = run("compile", noslo, "-o", out)
    q = run("explain", out, "--costs") if p.returncode == 0 else p
    r = run("explain", out, "--costs", "--format", "json") if p.returncode == 0 else p
    check(p.returncode == 0 and "costs: none (the plan holds no estimates)" in q.stdout
          and json.loads(r.stdout).get("costs", 0) is None,
          "explain --costs on a plan without estimates: none, JSON null", p.stderr + q.stdout)
    # a pair whose link classes do not add up is refused by the loader
    text = open(os.path.join(EX, "llama-3.1-70b-pd.plan.json")).read()
    bad = os.path.join(tmp, "bad-request.json")
    open(bad, "w").write(text.replace('"bytes_scale_out":1310720000', '"bytes_scale_out":1', 1))
    p = run("explain", bad)
    check(p.returncode == 1 and "kv_reshard[0].request.bytes: expected bytes_scale_up + bytes_scale_out = 0 + 1, "
          "got 1310720000" in p.stderr, "loader: kv_reshard request bytes that do not add up are refused", p.stderr)
    # W0401: the same deployment under a 20 ms TTFT SLO (20% of it is 4 ms < 6.55 ms)
    slow = os.path.join(tmp, "slow.yaml")
    open(slow, "w").write(open(os.path.join(EX, "llama-3.1-70b-pd.yaml")).read().replace("  ttft: 600 ms\n", "  ttft: 20 ms\n"))
    out = os.path.join(tmp, "slow.json")
    p = run("compile", slow, "-o", out)
    ds = json.load(open(out))["diagnostics"] if p.returncode == 0 else []
    w = [d for d in ds if d["code"] == "W0401"]
    check(p.returncode == 0 and "warning[W0401]" in p.stderr and len(w) == 1
          and "takes 6.6 ms, over 20% of the 20.0 ms TTFT SLO (4.0 ms)" in w[0]["message"],
          "W0401: a KV transfer over 20% of the TTFT SLO warns on stderr and in the plan", p.stderr[-800:])
    check(not [d for d in json.load(open(os.path.join(EX, "llama-3.1-70b-pd.plan.json")))["diagnostics"]
               if d["code"] == "W0401"], "W0401: not raised under the spec's own 600 ms SLO")

    # ---- atomic write ----------------------------------------------------------
    spec70 = os.path.join(EX, "llama-3.1-70b-pd.yaml")
    ro = os.path.join(tmp, "ro")
    os.mkdir(ro)
    os.chmod(ro, stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() != 0:
        p = run("compile", spec70, "-o", os.path.join(ro, "plan.json"))
        check(p.returncode == 2 and "cannot write" in p.stderr, "read-only directory: exit 2", p.stderr)
        check(os.listdir(ro) == [], "read-only directory: no file and no temp file left")
    # root ignores directory permissions: write into a path whose parent is a file instead
    notdir = os.path.join(tmp, "afile")
    open(notdir, "w").close()
    p = run("compile", spec70, "-o", os.path.join(notdir, "plan.json"))
    check(p.returncode == 2 and "cannot write" in p.stderr, "unwritable target: exit 2 with the path", p.stderr)
    # an invalid spec leaves an existing plan untouched
    target = os.path.join(tmp, "keep.json")
    open(target, "w").write("previous plan\n")
    bad = os.path.join(tmp, "bad.yaml")
    text = open(spec70).read().replace("      tp: 4\n", "      tp: 4\n      layer_partition: [40, 30]\n", 1)
    open(bad, "w").write(text)
    p = run("compile", bad, "-o", target)
    check(p.returncode == 1 and "E0307" in p.stderr, "bad layer_partition: exit 1 with E0307", p.stderr)
    check(open(target).read() == "previous plan\n", "invalid spec: the existing plan is untouched")
    text = open(spec70).read().replace("      tp: 4\n", "      tp: 4\n      layer_partition: [70]\n", 1)
    open(bad, "w").write(text)
    p = run("compile", bad, "-o", target, "--format", "json")
    ds = json.loads(p.stdout)["diagnostics"] if p.stdout.strip() else []
    check(p.returncode == 1 and any(d["code"] == "E0308" and "expected 80, got 70" in d["message"] for d in ds),
          "layer_partition sum: E0308 names both sums (json diagnostics)", p.stdout[-500:])
    # killed mid-write: the target is either absent or a whole plan
    big = os.path.join(EX, "deepseek-v3-1024.yaml")
    want = open(os.path.join(EX, "deepseek-v3-1024.plan.json"), "rb").read()
    kt = os.path.join(tmp, "kill")
    os.mkdir(kt)
    outcomes = set()
    for i in range(12):
        target = os.path.join(kt, "plan.json")
        if os.path.exists(target):
            os.unlink(target)
        proc = subprocess.Popen([RP, "compile", big, "-o", target], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(0.002 * i)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if os.path.exists(target):
            outcomes.add("whole" if open(target, "rb").read() == want else "partial")
        else:
            outcomes.add("absent")
    check("partial" not in outcomes, f"killed compiles never leave a partial plan ({sorted(outcomes)})")

    # ---- layout errors stop compile, name the numbers, write nothing --------------
    qwen = open(os.path.join(EX, "qwen3-235b-ep.yaml")).read()
    cases = [
        # pp inside dp with edp (1) != dp (2): expert and dense pp groups differ
        ("expert-pp-order", qwen.replace("  mode: aggregated\n", "  mode: aggregated\n  order: tp-cp-ep-pp-dp\n")
         .replace("      ep: 8", "      ep: 8\n      pp: 2").replace("nodes: 2", "nodes: 4"),
         "E0303", "expected edp == dp, got edp 1 and dp 2"),
        # pp innermost: each tp group strided over 2 x 8 GPUs, across two nodes
        ("tp-across-domain", open(os.path.join(EX, "llama-3.1-405b-pp.yaml")).read()
         .replace("order: tp-cp-ep-dp-pp", "order: pp-tp-cp-ep-dp"),
         "E0322", "spans scale-up domains"),
    ]
    ds = open(os.path.join(EX, "deepseek-v3-1024.yaml")).read().replace("  mode: disaggregated", "  mode: search")
    cases.append(("search-spec-without-pools", ds[: ds.index("  pools:")], "E0310", "`compile` needs pools"))
    for what, text, code, msg in cases:
        path = os.path.join(tmp, what + ".yaml")
        open(path, "w").write(text)
        out = os.path.join(tmp, what + ".json")
        p = run("compile", path, "-o", out)
        check(p.returncode == 1 and f"error[{code}]" in p.stderr and msg in p.stderr and not os.path.exists(out),
              f"compile refuses {what} ({code}) and writes nothing", p.stderr[-1500:])

    # ---- tp across nodes only when the spec allows it ------------------------------
    allowed = open(os.path.join(SRC, "tests", "golden", "ok", "rule-tp-across-domain-allowed.yaml")).read()
    for what, text in (("allowed", allowed),
                       ("refused", allowed.replace("  allow_tp_across_domain: true\n", ""))):
        path = os.path.join(tmp, "tp16-" + what + ".yaml")
        open(path, "w").write(text)
        out = os.path.join(tmp, "tp16-" + what + ".json")
        p = run("compile", path, "-o", out)
        if what == "allowed":
            tp = [g for g in json.load(open(out))["groups"] if g["kind"] == "tp"] if p.returncode == 0 else []
            nodes = {json.load(open(out))["ranks"][r]["node"] for r in tp[0]["ranks"]} if tp else set()
            check(len(tp) == 1 and len(tp[0]["ranks"]) == 16 and nodes == {0, 1},
                  "allow_tp_across_domain: tp 16 spans both nodes", p.stderr[-800:])
        else:
            check(p.returncode == 1 and "error[E0215]" in p.stderr and "tp 16 over a domain of 8 GPUs" in p.stderr
                  and not os.path.exists(out), "without allow_tp_across_domain: tp 16 over two nodes is refused",
                  p.stderr[-800:])

    # ---- a layer_partition hook is honoured, and checked -------------------------
    hook = os.path.join(tmp, "split.lua")
    open(hook, "w").write("return function(ctx) return {10, ctx.model.layers - 10} end\n")
    text = open(os.path.join(EX, "llama-3.1-405b-pp.yaml")).read()
    text = text.replace("      layer_partition: [63, 63]\n", "")
    text = text.replace("deployment:\n", f"deployment:\n  hooks:\n    layer_partition: {hook}\n", 1)
    hspec = os.path.join(tmp, "hook.yaml")
    open(hspec, "w").write(text)
    hplan = os.path.join(tmp, "hook.json")
    p = run("compile", hspec, "-o", hplan)
    ok = p.returncode == 0 and [q["layer_partition"] for q in json.load(open(hplan))["pools"]] == [[10, 116]]
    check(ok, "layer_partition hook: its split is in the plan", p.stderr)
    if ok:
        r = [x for x in json.load(open(hplan))["ranks"] if x["coords"]["pp"] == 1][0]
        check(r["shard"]["layers"] == [10, 126], "layer_partition hook: stage 1 holds layers [10, 126)")
    open(hook, "w").write("return function(ctx) return {10, 10} end\n")
    os.unlink(hplan)
    p = run("compile", hspec, "-o", hplan)
    check(p.returncode == 1 and not os.path.exists(hplan), "layer_partition hook: a split that does not sum is refused", p.stderr)

    # ---- the expert_placement hook: its map is in the plan, its replicas in the ledger --
    eplb = json.load(open(os.path.join(EX, "hook-eplb.plan.json")))
    base = json.load(open(os.path.join(EX, "qwen3-235b-ep.plan.json")))
    em = eplb["pools"][0].get("expert_map")
    check(em is not None and "expert_map" not in base["pools"][0],
          "expert_placement: the pool of the hook spec has an expert_map, the plain spec none")
    if em:
        lists = em["ep_ranks"]
        held = sorted(e for l in lists for e in l)
        check(len(lists) == 8 and em["slots_per_rank"] == 17 and all(len(l) == 17 for l in lists),
              "expert_placement: 8 ep ranks hold 17 experts each (128 + 8 replicas)", em["slots_per_rank"])
        check(set(held) == set(range(128)) and len(held) == 136 and all(l == sorted(set(l)) for l in lists),
              "expert_placement: every expert somewhere, each list ascending without repeats")
        check(all(r["shard"]["experts"] == [0, 0] for r in eplb["ranks"]),
              "expert_placement: ranks point at the pool's expert_map (shard.experts [0, 0])")
        # Qwen3-235B (plans/catalog/models/qwen3-235b-a22b.yaml): an expert is
        # 3 matrices of hidden 4096 x 1536 in bf16, in each of 94 MoE layers.
        one_expert = 3 * 4096 * 1536 * 2 * 94
        w0, w1 = base["ranks"][0]["memory"], eplb["ranks"][0]["memory"]
        check(w1["weights"] - w0["weights"] == one_expert and w0["kv_cache"] - w1["kv_cache"] == one_expert,
              "expert_placement: the extra replica's weights are counted and come out of the KV pool",
              (w1["weights"] - w0["weights"], one_expert))
    eplb_spec = open(os.path.join(EX, "hook-eplb.yaml")).read()
    lua_dir = os.path.join(SRC, "lua", "expert_placement")

    def expert_hook(body, name):
        hook = os.path.join(tmp, name + ".lua")
        open(hook, "w").write(body)
        spec = os.path.join(tmp, name + ".yaml")
        open(spec, "w").write(eplb_spec.replace("../../lua/expert_placement/eplb_hot.lua", hook))
        out = os.path.join(tmp, name + ".json")
        return run("compile", spec, "-o", out), out

    # every expert once, rank e % 8: no replicas, so the ledger is the plain one
    p, out = expert_hook("return function(ctx)\n  local m = {}\n"
                         "  for e = 0, ctx.model.experts - 1 do m[e + 1] = {e % ctx.pool.ep} end\n"
                         "  return m\nend\n", "round_robin")
    doc = json.load(open(out)) if p.returncode == 0 else None
    check(doc is not None and doc["pools"][0]["expert_map"]["ep_ranks"][1][:3] == [1, 9, 17]
          and doc["ranks"][0]["memory"] == base["ranks"][0]["memory"],
          "expert_placement: a map without replicas keeps the plain ledger", p.stderr[-800:])
    # every expert on every rank: the replicas' weights do not fit the GPU
    p, out = expert_hook("return function(ctx)\n  local m = {}\n"
                         "  for e = 1, ctx.model.experts do\n    m[e] = {}\n"
                         "    for r = 0, ctx.pool.ep - 1 do m[e][r + 1] = r end\n  end\n"
                         "  return m\nend\n", "everywhere")
    check(p.returncode == 1 and "error[E0216]" in p.stderr and "128 experts per ep rank" in p.stderr
          and not os.path.exists(out),
          "expert_placement: replicas that overflow the GPU are refused (E0216), nothing written", p.stderr[-800:])
    # an uneven map is the hook's error
    p, out = expert_hook("return function(ctx)\n  local m = {}\n"
                         "  for e = 1, ctx.model.experts do m[e] = {0} end\n  return m\nend\n", "uneven")
    check(p.returncode == 1 and "E06" in p.stderr and not os.path.exists(out),
          "expert_placement: a map that loads one rank only is refused", p.stderr[-800:])
    # the loader reads the map back, and checks it
    p = run("explain", os.path.join(EX, "hook-eplb.plan.json"), "--summary")
    check(p.returncode == 0, "expert_placement: the loader accepts a plan with an expert_map", p.stderr)
    p = run("explain", os.path.join(EX, "hook-eplb.plan.json"), "--rank", "3")
    want = "experts (expert_map, ep rank 3): " + ", ".join(str(e) for e in em["ep_ranks"][3]) if em else "?"
    check(p.returncode == 0 and want in p.stdout, "explain --rank lists the experts the hook's map gives the rank",
          p.stdout[-800:])
    p = run("explain", os.path.join(EX, "hook-eplb.plan.json"))
    check(p.returncode == 0 and "map:%d" % em["slots_per_rank"] in p.stdout if em else False,
          "explain's rank table marks experts held through the map", p.stdout[:800])
    bad = os.path.join(tmp, "bad-map.json")
    text = open(os.path.join(EX, "hook-eplb.plan.json")).read()
    first = json.dumps(em["ep_ranks"][0], separators=(",", ":")) if em else "[]"
    open(bad, "w").write(text.replace(first, first.replace("[0,", "[5,", 1), 1))
    p = run("explain", bad)
    check(p.returncode == 1 and "pools[0].expert_map.ep_ranks[0]: expected ascending expert ids" in p.stderr,
          "expert_placement: the loader refuses an expert list out of order", p.stderr)

    # ---- estimates: from the cost model, for every spec with a workload and SLOs ----
    for spec in specs:
        name = os.path.basename(spec)[:-5]
        golden = os.path.join(EX, name + ".plan.json")
        if not os.path.exists(golden):
            continue
        est = json.load(open(golden))["estimates"]
        check(est is not None and all(est[k] > 0 for k in ("ttft_ms", "tpot_ms", "throughput_tok_s")),
              f"{name}: estimates filled by compile", est)
    est = base["estimates"]
    # qwen3-235b-ep.yaml asks for 8 req/s of 800 output tokens on 16 GPUs and meets its SLOs
    check(est["throughput_tok_s"] == 6400 and est["ttft_ms"] <= 1000 and est["tpot_ms"] <= 50
          and est["goodput_tok_s_per_gpu"] == 400,
          "estimates: the workload's rate is served (6400 tok/s, 400 per GPU) within the SLOs", est)
    text = open(os.path.join(EX, "qwen3-235b-ep.yaml")).read()
    norate = os.path.join(tmp, "norate.yaml")
    open(norate, "w").write(text.replace("  rate: 8 req/s\n", ""))
    out = os.path.join(tmp, "norate.json")
    p = run("compile", norate, "-o", out)
    e2 = json.load(open(out))["estimates"] if p.returncode == 0 else None
    check(e2 is not None and e2["throughput_tok_s"] > 6400 and e2["ttft_ms"] <= 1000 and e2["tpot_ms"] <= 50,
          "estimates: without a rate, the most load that meets the SLOs", e2)
    noslo = os.path.join(tmp, "noslo.yaml")
    open(noslo, "w").write(text.replace("slo:\n  ttft: 1000 ms\n  tpot: 50 ms\n", ""))
    out = os.path.join(tmp, "noslo.json")
    p = run("compile", noslo, "-o", out)
    check(p.returncode == 0 and json.load(open(out))["estimates"] is None,
          "estimates: null when the spec gives no SLOs", p.stderr)

    # ---- --split-by-node -------------------------------------------------------
    spec405 = os.path.join(EX, "llama-3.1-405b-pp.yaml")
    full = os.path.join(tmp, "405.json")
    split = os.path.join(tmp, "split")
    p = run("compile", spec405, "-o", full, "--split-by-node", split)
    check(p.returncode == 0, "compile --split-by-node", p.stderr)
    whole = json.load(open(full))
    files = sorted(os.listdir(split))
    check(len(files) == len(whole["nodes"]), f"one file per node ({len(files)})")
    seen = []
    ok_rank = ok_groups = ok_schema = ok_load = True
    gid = {g["id"]: g for g in whole["groups"]}
    for n, node in enumerate(whole["nodes"]):
        path = os.path.join(split, f"node-{n}.plan.json")
        part = json.load(open(path))
        ok_schema &= not schema_errors(part) and part["node"] == n
        mine = [r["rank"] for r in part["ranks"]]
        ok_rank &= mine == node["ranks"] and all(r == whole["ranks"][r["rank"]] for r in part["ranks"])
        need = sorted({g for r in part["ranks"] for g in r["groups"].values()})
        ok_groups &= [g["id"] for g in part["groups"]] == need and all(g == gid[g["id"]] for g in part["groups"])
        seen += mine
        ok_load &= run("explain", path, "--summary").returncode == 0
    check(ok_schema, "node files: schema-valid, each names its node")
    check(ok_rank and sorted(seen) == list(range(whole["world_size"])),
          "node files: exactly the node's ranks, identical to the whole plan's")
    check(ok_groups, "node files: exactly the groups their ranks belong to")
    check(ok_load, "node files: the loader accepts each")

    # node files whose ranks do not show the whole model load too: tp 16 over
    # two nodes (node 0 lacks the last tp rank, so the KV heads), and the file
    # of an idle node of a MoE plan (no rank at all, so neither heads nor
    # experts), made from a node file as `--split-by-node` writes one
    d = os.path.join(tmp, "split-tp16")
    p = run("compile", os.path.join(SRC, "tests", "golden", "ok", "rule-tp-across-domain-allowed.yaml"),
            "-o", os.path.join(tmp, "tp16.json"), "--split-by-node", d)
    files = sorted(os.listdir(d)) if p.returncode == 0 else []
    bad = [f for f in files if run("explain", os.path.join(d, f), "--summary").returncode != 0]
    check(len(files) == 2 and not bad, "node files of tp 16 over two nodes: the loader accepts each", (p.stderr[-300:], bad))
    d = os.path.join(tmp, "split-qwen")
    p = run("compile", os.path.join(EX, "qwen3-235b-ep.yaml"), "-o", os.path.join(tmp, "qwen.json"), "--split-by-node", d)
    idle = json.load(open(os.path.join(d, "node-1.plan.json"))) if p.returncode == 0 else {}
    if idle:
        idle.update(node=2, nodes=[{"node": 2, "gpus": 8, "ranks": []}], ranks=[], groups=[], kv_reshard=[])
        path = os.path.join(tmp, "idle.json")
        open(path, "w").write(json.dumps(idle))
        p = run("explain", path, "--summary")
    check(idle and p.returncode == 0 and "this file holds node 2 only (0 ranks)" in p.stdout,
          "the node file of an idle node of a MoE plan loads", p.stderr)

    # node files stay small at scale: the 1,024-GPU plan on 128 nodes
    split2 = os.path.join(tmp, "split2")
    p = run("compile", os.path.join(EX, "deepseek-v3-1024.yaml"), "-o", os.path.join(tmp, "ds.json"),
            "--split-by-node", split2)
    sizes = [os.path.getsize(os.path.join(split2, f)) for f in os.listdir(split2)]
    whole_size = os.path.getsize(os.path.join(tmp, "ds.json"))
    check(p.returncode == 0 and len(sizes) == 128 and max(sizes) * 20 < whole_size
          and not [f for f in os.listdir(split2) if ".tmp." in f],
          f"node files of a 128-node plan: each under 1/20 of the whole, no temp files left "
          f"({max(sizes) if sizes else 0} of {whole_size} bytes)")

    # ---- loader errors through explain -------------------------------------------
    good = open(os.path.join(EX, "llama-3.1-70b-pd.plan.json")).read()
    cases = [
        ("truncated", good[: len(good) // 3], "not a valid plan"),
        ("empty", "", "the file is empty"),
        ("other version", good.replace('"rankplan.plan/1"', '"rankplan.plan/2"', 1),
         'format: expected "rankplan.plan/1", got "rankplan.plan/2"'),
        ("corrupt field", good.replace('{"rank":12,"node":1,', '{"rank":12,"node":null,', 1),
         "ranks[12].node: expected an integer, got null"),
        ("device past the node", good.replace('"local_rank":5,"device":5', '"local_rank":5,"device":8', 1),
         "ranks[5].device: expected 0..7, got 8"),
        ("unknown group kind", good.replace('"kind":"tp"', '"kind":"tensor"', 1), "groups[0].kind: unknown group kind"),
        ("reshard src past the replica", good.replace('{"src":0,"dst":0,', '{"src":99,"dst":0,', 1),
         "kv_reshard[0].transfers[0].src: expected 0..7 (tp * cp * pp of pool `prefill`), got 99"),
        ("reshard dst past the replica", good.replace('{"src":0,"dst":0,', '{"src":0,"dst":4,', 1),
         "kv_reshard[0].transfers[0].dst: expected 0..3 (tp * cp * pp of pool `decode`), got 4"),
        ("reshard layers past the model", good.replace('"layers":[0,80],"kv_heads":[0,1]', '"layers":[0,81],"kv_heads":[0,1]', 1),
         "kv_reshard[0].transfers[0].layers: expected inside [0, 80), got [0, 81)"),
        ("reshard heads past the model", good.replace('"layers":[0,80],"kv_heads":[0,1]', '"layers":[0,80],"kv_heads":[0,9]', 1),
         "kv_reshard[0].transfers[0].kv_heads: expected inside [0, 8) (pool `prefill`), got [0, 9)"),
        ("hardware missing", good.replace('  "hardware": ', '  "hardwar": ', 1), "hardware: missing"),
        ("negative scale-up bandwidth", good.replace('"scale_up":{"domain":8,"bandwidth":', '"scale_up":{"domain":8,"bandwidth":-', 1),
         "hardware.scale_up.bandwidth: expected a finite number > 0, got -4.5e+11"),
        ("infinite HBM bandwidth", good.replace('{"hbm_bandwidth":4800000000000', '{"hbm_bandwidth":1e999', 1),
         "hardware.hbm_bandwidth: expected a finite number > 0, got inf"),
        ("scale-out latency a string", good.replace('"scale_out":{"bandwidth":50000000000,"latency_s":null}',
                                                   '"scale_out":{"bandwidth":50000000000,"latency_s":"5 us"}', 1),
         "hardware.scale_out.latency_s: expected a number or null, got a string"),
        ("reshard pool of the wrong role", good.replace('"decode":"decode","transfers"', '"decode":"prefill","transfers"', 1),
         "kv_reshard[0].decode: expected a pool of role decode, got pool `prefill` of role prefill"),
    ]
    for what, text, want_msg in cases:
        path = os.path.join(tmp, "broken.json")
        open(path, "w").write(text)
        p = run("explain", path)
        check(p.returncode == 1 and want_msg in p.stderr, f"loader: {what} is refused with a clear error", p.stderr)
    p = run("explain", os.path.join(tmp, "nope.json"))
    check(p.returncode == 2 and "cannot read" in p.stderr, "loader: missing file exits 2")
    p = run("explain", os.path.join(EX, "llama-3.1-70b-pd.plan.json"), "--spec", spec405)
    check(p.returncode == 1 and "compiled from another spec" in p.stderr, "loader: --spec of another spec is refused")

    # ---- loader: the rules the compiler guarantees (docs/plan.md, "Loader checks") ----
    def mutate(src, fn):
        """The plan at src, changed by fn (on the parsed document), as text."""
        doc = json.load(open(src))
        fn(doc)
        return json.dumps(doc)

    def refused(what, text, want_msg, args=()):
        path = os.path.join(tmp, "damaged.json")
        open(path, "w").write(text)
        p = run("explain", path, *args)
        check(p.returncode == 1 and want_msg in p.stderr, f"loader: {what} is refused", p.stderr)

    def set_all(key, f):
        return lambda d: [x.__setitem__(key, f(x[key])) for x in d["kv_reshard"][0]["transfers"]]

    P70 = os.path.join(EX, "llama-3.1-70b-pd.plan.json")
    cpdcp = os.path.join(tmp, "cp-dcp.json")
    p = run("compile", os.path.join(SRC, "tests", "runtime", "kv-cp-to-dcp.yaml"), "-o", cpdcp)
    check(p.returncode == 0 and run("explain", cpdcp, "--reshard").returncode == 0,
          "loader: a cp2 -> dcp2 plan (token ranges and strides) loads and is proven", p.stderr)
    xs0 = "kv_reshard[0].transfers: not an exact cover of pool `decode`'s KV from pool `prefill`: "
    guarantee_cases = [
        # a disaggregated plan moves KV: one non-empty pair per prefill and decode pool
        ("an empty kv_reshard", mutate(P70, lambda d: d.__setitem__("kv_reshard", [])),
         "kv_reshard: expected a pair `prefill` -> `decode` (a prefill and a decode pool), got 0 pair(s)"),
        ("a pair without transfers", mutate(P70, lambda d: d["kv_reshard"][0].__setitem__("transfers", [])),
         "kv_reshard[0].transfers: expected the transfers that fill pool `decode`'s KV, got none"),
        ("a second copy of the pair", mutate(P70, lambda d: d["kv_reshard"].append(d["kv_reshard"][0])),
         "kv_reshard[1]: expected 1 pair(s) (one per prefill and decode pool), got 2"),
        ("a pair on an aggregated plan", mutate(os.path.join(EX, "llama-3.1-8b-agg.plan.json"),
                                                lambda d: d["kv_reshard"].append({"prefill": "main", "decode": "main", "transfers": []})),
         "kv_reshard[0].prefill: expected a pool of role prefill, got pool `main` of role both"),
        # bytes_per_token: what the ranks' KV shards hold, per layer and head
        ("every bytes_per_token halved", mutate(P70, set_all("bytes_per_token", lambda b: b // 2)),
         xs0 + "transfer 0: bytes_per_token 20480, expected 40960"),
        ("every bytes_per_token and the request's bytes halved",
         mutate(P70, lambda d: (set_all("bytes_per_token", lambda b: b // 2)(d),
                                d["kv_reshard"][0]["request"].update(bytes=655360000, bytes_scale_out=655360000))),
         xs0 + "transfer 0: bytes_per_token 20480, expected 40960"),
        ("transfers and ranks' bytes_per_token halved",
         mutate(P70, lambda d: (set_all("bytes_per_token", lambda b: b // 2)(d),
                                [r["kv"].__setitem__("bytes_per_token", r["kv"]["bytes_per_token"] // 2) for r in d["ranks"]])),
         "ranks[0].kv.blocks: expected 352357 (memory.kv_cache 115460664294 over blocks of 16 tokens x 20480 bytes), got 176178"),
        ("one rank's bytes_per_token off", mutate(P70, lambda d: d["ranks"][17]["kv"].__setitem__("bytes_per_token", 81921)),
         "ranks[17].kv.bytes_per_token: expected 81920 (80 layers x 2 kv heads x 512 bytes, as ranks[0] holds), got 81921"),
        ("a huge bytes_per_token", mutate(P70, lambda d: d["kv_reshard"][0]["transfers"][3].__setitem__("bytes_per_token", 2**62)),
         xs0 + "transfer 3: bytes_per_token 4611686018427387904, expected 40960"),
        ("one transfer's bytes_per_token unlike its pair's others",
         mutate(P70, lambda d: d["kv_reshard"][0]["transfers"][5].__setitem__("bytes_per_token", 40961)),
         xs0 + "transfer 5: bytes_per_token 40961, expected 40960"),
        ("request bytes unlike the transfers'",
         mutate(P70, lambda d: d["kv_reshard"][0]["request"].update(bytes=2, bytes_scale_up=1, bytes_scale_out=1)),
         "kv_reshard[0].request.bytes: expected 1310720000 (the transfers' bytes at 4000 tokens), got 2"),
        # the independent checker proves each map an exact cover
        ("a transfer dropped", mutate(P70, lambda d: d["kv_reshard"][0]["transfers"].pop(7)),
         xs0 + "destination rank 3 never receives layer 0 head 7 token 0"),
        ("a transfer twice", mutate(P70, lambda d: d["kv_reshard"][0]["transfers"].append(d["kv_reshard"][0]["transfers"][0])),
         xs0 + "destination rank 0 receives layer 0 head 0 token 0 (T=2) twice"),
        ("a transfer from a rank without the head", mutate(P70, lambda d: d["kv_reshard"][0]["transfers"][0].__setitem__("src", 1)),
         xs0 + "transfer 0: source rank 1 sends layer 0 head 0 token 0 (T=2), which it does not own"),
        ("a transfer to a rank without the head", mutate(P70, lambda d: (d["kv_reshard"][0]["transfers"][0].__setitem__("dst", 1),)),
         xs0 + "transfer 0: destination rank 1 receives layer 0 head 0 token 0 (T=2), which it does not hold"),
        ("a transfer a layer short", mutate(P70, lambda d: d["kv_reshard"][0]["transfers"][2].update(layers=[0, 79], bytes_per_token=40448)),
         xs0 + "destination rank 1 never receives layer 79 head 2"),
        ("a token range off a chunk boundary",
         mutate(cpdcp, lambda d: d["kv_reshard"][0]["transfers"][0]["tokens"].__setitem__("ranges", [[0, 17], [48, 64]])),
         "kv_reshard[0].transfers[0].tokens.ranges[0]: expected whole chunks of 64 tokens' 4 zigzag chunks, in order, got [0, 17]"),
        ("a token range of another chunk",
         mutate(cpdcp, lambda d: d["kv_reshard"][0]["transfers"][0]["tokens"].__setitem__("ranges", [[0, 16], [32, 48]])),
         "kv_reshard[0].transfers: not an exact cover of pool `decode`'s KV from pool `prefill`: transfer 0: "
         "source rank 0 sends layer 0 head 0 token"),
        ("the wrong residue", mutate(cpdcp, lambda d: d["kv_reshard"][0]["transfers"][0]["tokens"].__setitem__("offset", 1)),
         "which it does not hold"),
        ("ranges without the request's input_tokens", mutate(cpdcp, lambda d: d["kv_reshard"][0].pop("request")),
         "kv_reshard[0].transfers[0].tokens: ranges need the pair's request.input_tokens, at least the 4 chunks"),
        # expert maps: ids in range, every expert held
        ("an expert map with an out-of-range expert",
         mutate(os.path.join(EX, "hook-eplb.plan.json"), lambda d: d["pools"][0]["expert_map"]["ep_ranks"][0].__setitem__(16, 900)),
         "pools[0].expert_map: 136 slots cannot hold 901 experts"),
        ("an expert map without expert 123",
         mutate(os.path.join(EX, "hook-eplb.plan.json"), lambda d: d["pools"][0]["expert_map"]["ep_ranks"][0].__setitem__(16, 122)),
         "pools[0].expert_map: expert 123 of 128 is on no ep rank"),
        # pool sizes
        ("ep * etp * edp unlike tp * cp * dp", mutate(P70, lambda d: d["pools"][1].__setitem__("edp", 2)),
         "pools[1].edp: expected etp * ep * edp = tp * cp * dp = 4, got 4 * 1 * 2"),
        ("dcp on a pool without copies of a KV head", mutate(P70, lambda d: d["pools"][1].__setitem__("dcp", 2)),
         "pools[1].dcp: expected a divisor of tp 4 of at most 1 (tp / kv_heads: the tp ranks that hold copies of one KV head), got 2"),
        ("dcp not dividing tp", mutate(cpdcp, lambda d: d["pools"][1].__setitem__("dcp", 3)),
         "pools[1].dcp: expected a divisor of tp 8 of at most 2"),
        # coordinates name one place each (a fuzz_plan_mutate finding: two ranks of one place)
        ("two ranks at one (tp, cp, dp, pp)", mutate(P70, lambda d: d["ranks"][23]["coords"].__setitem__("tp", 2)),
         "ranks[23].coords: (tp, cp, dp, pp) = (2, 0, 0, 0) is another rank's of instance 1 of pool `decode`"),
        ("two ranks at one (etp, ep, edp)", mutate(os.path.join(EX, "qwen3-235b-ep.plan.json"),
                                                   lambda d: d["ranks"][1]["coords"].__setitem__("ep", 0)),
         "ranks[1].coords: (etp, ep, edp) = (0, 0, 0) is another rank's of pp stage 0 of instance 0 of pool `main`"),
        ("coords.dcp other than tp mod dcp", mutate(cpdcp, lambda d: d["ranks"][9]["coords"].__setitem__("dcp", 0)),
         "ranks[9].coords.dcp: expected tp mod dcp = 1, got 0"),
        # nodes
        ("duplicate local_rank on a node", mutate(P70, lambda d: d["ranks"][1].__setitem__("local_rank", 0)),
         "ranks[1].local_rank: expected 1 (its index among node 0's ranks), got 0"),
        ("swapped local_ranks", mutate(P70, lambda d: (d["ranks"][9].__setitem__("local_rank", 2), d["ranks"][10].__setitem__("local_rank", 1))),
         "ranks[9].local_rank: expected 1 (its index among node 1's ranks), got 2"),
        ("a node's ranks out of order", mutate(P70, lambda d: d["nodes"][0].__setitem__("ranks", [1, 0, 2, 3, 4, 5, 6, 7])),
         "ranks[1].local_rank: expected 0 (its index among node 0's ranks), got 1"),
        ("nodes of different sizes", mutate(P70, lambda d: d["nodes"][3].__setitem__("gpus", 16)),
         "nodes[3].gpus: expected 8 (every node has hardware.gpus_per_node GPUs, as nodes[0]), got 16"),
        # layers
        ("a layer shard past the model", mutate(P70, lambda d: d["ranks"][0]["shard"].__setitem__("layers", [0, 81])),
         "ranks[0].shard.layers: expected [0, 80] (pp stage 0 of pool `prefill`, 80 layers), got [0, 81]"),
        ("a layer shard of another stage", mutate(os.path.join(EX, "llama-3.1-405b-pp.plan.json"),
                                                  lambda d: d["ranks"][8]["shard"].__setitem__("layers", [0, 63])),
         "ranks[8].shard.layers: expected [63, 126] (pp stage 1 of pool `main`, 126 layers), got [0, 63]"),
        ("pools of different layer counts", mutate(P70, lambda d: d["pools"][1].__setitem__("layer_partition", [81])),
         "kv_reshard[0]: pools `prefill` and `decode` hold different models: 80 and 81 layers"),
        ("a last-stage layer shard past the model", mutate(os.path.join(EX, "llama-3.1-405b-pp.plan.json"),
                                                           lambda d: d["ranks"][8]["shard"].__setitem__("layers", [63, 127])),
         "ranks[8].shard.layers: expected [63, 126] (pp stage 1 of pool `main`, 126 layers), got [63, 127]"),
        ("a kv_heads shard past the model", mutate(P70, lambda d: d["ranks"][16]["shard"].__setitem__("kv_heads", [0, 3])),
         "ranks[16].shard.kv_heads: expected [0, 2] (tp rank 0 of 4 over 8 KV heads), got [0, 3]"),
        # the memory ledger: one per pool and pp stage, adding up to capacity
        ("a huge kv_cache", mutate(P70, lambda d: d["ranks"][5]["memory"].__setitem__("kv_cache", 2**62)),
         "ranks[5].kv.blocks: expected 7036874417766 (memory.kv_cache 4611686018427387904 over blocks of 16 tokens x 40960 bytes), got 176178"),
        ("a kv_cache over capacity, blocks to match",
         mutate(P70, lambda d: (d["ranks"][5]["memory"].__setitem__("kv_cache", 2**40 * 40960 * 16),
                                d["ranks"][5]["kv"].__setitem__("blocks", 2**40))),
         "ranks[5].memory: expected weights + kv_cache + activations + workspace + reserved = capacity 150754820096, got"),
        ("one rank's ledger unlike its stage's", mutate(P70, lambda d: d["ranks"][5]["memory"].update(
            activations=d["ranks"][5]["memory"]["activations"] + 1, workspace=d["ranks"][5]["memory"]["workspace"] - 1)),
         "ranks[5].memory.activations: expected 329792128 (as ranks[0]: pool `prefill` pp stage 0 has one ledger), got 329792129"),
        ("another GPU's capacity", mutate(P70, lambda d: [r["memory"].update(capacity=r["memory"]["capacity"] + 1,
                                                                             reserved=r["memory"]["reserved"] + 1)
                                                          for r in d["ranks"][16:]]),
         "ranks[16].memory.capacity: expected 150754820096 (every GPU of the plan, as ranks[0]), got 150754820097"),
        # scale_up_domain
        ("scale_up_domain missing", mutate(P70, lambda d: d.pop("scale_up_domain")), "scale_up_domain: missing"),
        ("scale_up_domain against the hardware", mutate(P70, lambda d: d.__setitem__("scale_up_domain", 4)),
         "scale_up_domain: expected 8 (hardware.scale_up.domain), got 4"),
    ]
    # the `launch` key (docs/plan.md, "launch"): its strings reach command lines
    P8 = os.path.join(EX, "llama-3.1-8b-pd-1node.plan.json")
    def launch_set(key, value):
        return lambda d: d["launch"].__setitem__(key, value)
    guarantee_cases += [
        ("a launch engine the targets do not know", mutate(P8, launch_set("engine", "tgi")),
         'launch.engine: expected vllm, sglang or trtllm, got "tgi"'),
        ("a newline in the model source", mutate(P8, launch_set("source", "meta-llama/x\nrm -rf /")),
         "launch.source: holds a control character at byte 12"),
        ("a host name with a space", mutate(P8, launch_set("hostnames", ["gpu a"])),
         "launch.hostnames[0]: expected a host name"),
        ("more host names than nodes", mutate(P8, launch_set("hostnames", ["a", "b"])),
         "launch.hostnames: expected one per node (1), got 2"),
        ("a host name pattern without {n}", mutate(P8, launch_set("hostname_pattern", "gpu")),
         "launch.hostname_pattern: expected one `{n}`"),
        ("a sampler that is not a lowercase word", mutate(P8, launch_set("sampler", "x; rm -rf /")),
         'launch.sampler: expected a lowercase word, got "x; rm -rf /"'),
        ("a sampler that is a number", mutate(P8, launch_set("sampler", 1)),
         "launch.sampler: expected a string, got an integer"),
        ("an attention backend rankplan does not plan for", mutate(P8, launch_set("attention_backend", "fa3; x")),
         'launch.attention_backend: expected trtllm_mla or trtllm_mha, got "fa3; x"'),
        ("a privileged port", mutate(P8, launch_set("port", 80)),
         "launch.port: expected 1024..65535, got 80"),
        ("a kv_block unlike the ranks'", mutate(P8, launch_set("kv_block", 32)),
         "launch.kv_block: expected the ranks' kv.block_tokens 16, got 32"),
        ("a utilization above 1", mutate(P8, launch_set("gpu_memory_utilization", 1.5)),
         "launch.gpu_memory_utilization: expected a number in (0, 1]"),
        ("a pool memory fraction above 1", mutate(P8, lambda d: d["pools"][0].__setitem__("memory_fraction", 1.5)),
         "pools[0].memory_fraction: expected a number in (0, 1], got one outside it"),
        ("a pool memory fraction that is a string", mutate(P8, lambda d: d["pools"][1].__setitem__("memory_fraction", "0.9")),
         "pools[1].memory_fraction: expected a number in (0, 1], got a string"),
        ("a launch without moe", mutate(P8, lambda d: d["launch"].pop("moe")),
         "launch.moe: expected a boolean, got nothing"),
        ("a chunked_prefill that is a string", mutate(P8, launch_set("chunked_prefill", "yes")),
         "launch.chunked_prefill: expected a boolean, got a string"),
        ("a GPU vendor the targets do not know", mutate(P8, launch_set("gpu_vendor", "intel")),
         'launch.gpu_vendor: expected "amd" (absent: NVIDIA)'),
        ("a GPU vendor that is a number", mutate(P8, launch_set("gpu_vendor", 1)),
         'launch.gpu_vendor: expected "amd" (absent: NVIDIA)'),
    ]
    for what, text, want_msg in guarantee_cases:
        refused(what, text, want_msg)
    # a model without experts: ep 1 and etp = tp. The compiler ignores ep and
    # etp on a dense model (W0204) and writes a plan that loads; the same
    # plan edited to carry them is refused.
    spec = open(os.path.join(EX, "llama-3.1-70b-pd.yaml")).read()
    for extra, edit, msg_edit in (("      ep: 2\n      etp: 2\n", {"ep": 2, "etp": 2}, "coords.etp: expected 0..1, got 2"),
                                  ("      etp: 2\n", {"etp": 2}, "coords.etp: expected 0..1, got 2")):
        y = os.path.join(tmp, "dense-ep.yaml")
        open(y, "w").write(spec.replace("      tp: 4\n", "      tp: 4\n" + extra, 1))
        out = os.path.join(tmp, "dense-ep.json")
        what = "expert sizes on a dense pool (" + " ".join(extra.split()) + ")"
        p = run("compile", y, "-o", out)
        ok = p.returncode == 0 and "W0204" in p.stderr
        if ok:
            j = json.load(open(out))
            ok = j["pools"][1]["ep"] == 1 and j["pools"][1]["etp"] == 4 and run("explain", out).returncode == 0
            # Edited by hand, the ranks' expert coordinates no longer match
            # the pool: refused at the first place that shows it.
            j["pools"][1].update(edit)
            refused(what, json.dumps(j), msg_edit)
        check(ok, what + ": compile warns W0204, writes ep 1 and etp = tp, and the plan loads", p.stderr)

    def dense_pool_as_experts(doc):
        """Pool `decode` (tp 4, a model without experts) edited to claim ep 2
        and etp 2 consistently everywhere else: the ranks' expert coordinates
        (etp = tp mod 2, ep = tp div 2) and the ep and etp groups regrouped to
        match, with every group id renumbered. Only the pool-size rule is left
        to notice."""
        doc["pools"][1].update(ep=2, etp=2)
        for r in doc["ranks"]:
            if r["pool"] == "decode":
                r["coords"].update(etp=r["coords"]["tp"] % 2, ep=r["coords"]["tp"] // 2)
        groups = []
        for g in doc["groups"]:
            if g["pool"] != "decode" or g["kind"] not in ("ep", "etp"):
                groups.append(dict(g))
            elif g["kind"] == "etp" or g["ranks"][0] % 4 == 0:
                b = g["ranks"][0] - g["ranks"][0] % 4
                pairs = ([b, b + 2], [b + 1, b + 3]) if g["kind"] == "ep" else ([b, b + 1], [b + 2, b + 3])
                groups += [dict(g, ranks=list(m)) for m in pairs]
        where = {}
        for i, g in enumerate(groups):
            g["id"] = i
            for m in g.get("ranks", []):
                where[(g["kind"], g["pool"], m)] = i
        world = [g["id"] for g in groups if g["kind"] == "world"][0]
        for r in doc["ranks"]:
            for k in r["groups"]:
                r["groups"][k] = world if k == "world" else where[(k, r["pool"], r["rank"])]
        doc["groups"] = groups
    refused("expert sizes on a dense pool, every rank and group edited to match", mutate(P70, dense_pool_as_experts),
            "pools[1].ep: expected 1 on a model without experts (no rank holds one), got 2")

    # ---- loader: sizes bounded before allocation, the file read with a cap -------------
    import resource

    def run_limited(*args, mem=1 << 30):
        """RP under an address-space limit of mem bytes. An AddressSanitizer
        build reserves terabytes of shadow memory and cannot start under one;
        there the limit is left off (the normal build's run checks it)."""
        def lim():
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        return subprocess.run([RP, *args], capture_output=True, text=True, preexec_fn=lim if limit_works else None,
                              timeout=60, env=dict(os.environ, NO_COLOR="1"))
    limit_works = True
    limit_works = run_limited("--version", mem=256 << 20).returncode == 0
    big = [
        ("gpus 2147483647 on every node (no table of that many GPUs)",
         mutate(P70, lambda d: [n.__setitem__("gpus", 2147483647) for n in d["nodes"]]), 0, ""),
        ("slots_per_rank 2147483647", mutate(os.path.join(EX, "hook-eplb.plan.json"),
                                             lambda d: d["pools"][0]["expert_map"].__setitem__("slots_per_rank", 2147483647)),
         1, "pools[0].expert_map.ep_ranks[0]: expected a list of 2147483647 experts (slots_per_rank), got a list of another length"),
    ]
    def many_worlds(d):
        """A node file of a 4,194,304-rank world (the cap) with 4,000 more
        world groups: expanded, 64 GB of spans."""
        n = 4194304
        d["world_size"] = n
        d["pools"][0].update(replicas=n // d["pools"][0]["instance_size"], ranks=[0, n])
        w = d["groups"][-1]
        w["span"] = [0, n]
        d["groups"] += [dict(w, id=w["id"] + 1 + k) for k in range(4000)]
    n1 = os.path.join(split, "node-1.plan.json")
    nw = len(json.load(open(n1))["groups"])
    big.append(("4,000 more world groups written as spans", mutate(n1, many_worlds), 1,
                f"groups[{nw}].span: only the one world group is written as a span, got a second world group"))
    big.append(("a tp group written as a span",
                 mutate(P70, lambda d: (d["groups"][0].pop("ranks"), d["groups"][0].__setitem__("span", [0, 8]))), 1,
                 "groups[0].span: only the one world group is written as a span, got a group of another kind"))
    split405 = json.load(open(os.path.join(split, "node-1.plan.json")))
    split405["world_size"] = 2147483647
    big.append(("world_size 2147483647 in a node file", json.dumps(split405), 1,
                "world_size: expected 1..4194304, got 2147483647"))
    for what, text, rc, msg in big:
        path = os.path.join(tmp, "big.json")
        open(path, "w").write(text)
        p = run_limited("explain", path, "--summary")
        check(p.returncode == rc and msg in p.stderr, f"loader: {what}: exit {rc} within 1 GiB", p.stderr[-500:])
    p = run_limited("explain", "/dev/zero", "--summary", mem=256 << 20)
    check(p.returncode == 2 and "/dev/zero: cannot read the plan: not a regular file (a character device)" in p.stderr,
          "loader: /dev/zero is refused without reading it", p.stderr)
    p = run("explain", tmp)
    check(p.returncode == 2 and "not a regular file (a directory)" in p.stderr, "loader: a directory is refused", p.stderr)
    fifo = os.path.join(tmp, "plan.fifo")
    os.mkfifo(fifo)
    p = run("explain", fifo, timeout=20)
    check(p.returncode == 2 and f"{fifo}: cannot read the plan: not a regular file (a FIFO)" in p.stderr,
          "loader: a FIFO is refused, not waited on", p.stderr)
    huge = os.path.join(tmp, "huge.json")
    with open(huge, "wb") as f:
        f.truncate((512 << 20) + 1)
    p = run_limited("explain", huge, mem=256 << 20)
    check(p.returncode == 2 and "over 536870912 bytes, the largest plan the loader reads" in p.stderr,
          "loader: a file over 512 MiB is refused before it is read", p.stderr)
    os.unlink(huge)
    p = subprocess.run([RP, "explain", "-", "--summary"], stdin=open(P70), capture_output=True, text=True)
    check(p.returncode == 0 and "world: 24 ranks" in p.stdout, "loader: a plan on standard input (-) still loads", p.stderr)

    # ---- explain: plan strings never reach the terminal raw ------------------------------
    esc = good.replace('"name":"prefill"', '"name":"pre\\u001b]0;pwned\\u0007fill"') \
              .replace('"pool":"prefill"', '"pool":"pre\\u001b]0;pwned\\u0007fill"') \
              .replace('"prefill":"prefill"', '"prefill":"pre\\u001b]0;pwned\\u0007fill"') \
              .replace('"message":"the plan', '"message":"\\u001b[2J\\u009b31mthe plan')
    path = os.path.join(tmp, "escapes.json")
    open(path, "w").write(esc)
    outs = [run("explain", path, *a) for a in ([], ["--summary"], ["--rank", "0"], ["--groups", "tp"], ["--memory"],
                                                 ["--reshard"])]
    check(all(p.returncode == 0 for p in outs), "explain: a plan with control characters in its strings loads",
          [p.stderr for p in outs])
    raw = [c for p in outs for c in p.stdout if ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) < 0xa0]
    check(not raw and "pre\\x1b]0;pwned\\x07fill" in outs[1].stdout and "\\x1b[2J\\xc2\\x9b31mthe plan" in outs[1].stdout
          and "kv_reshard pre\\x1b]0;pwned\\x07fill -> decode" in outs[5].stdout,
          "explain: control characters in pool names and messages are printed escaped", repr(outs[1].stdout[:600]))
    p = run("explain", path, "--summary", "--format", "json")
    check(p.returncode == 0 and "\\u001b]0;pwned" in p.stdout.lower() and "\x1b" not in p.stdout,
          "explain --format json: control characters escaped by the JSON writer", p.stdout[:300])
    path8 = os.path.join(tmp, "not-utf8.json")
    open(path8, "wb").write(good.encode().replace(b'"name":"prefill"', b'"name":"pre\xfffill"', 1))
    p = run("explain", path8, "--summary", "--format", "json")
    check(p.returncode == 1 and "not a valid plan (JSON: invalid UTF-8 in a string)" in p.stderr,
          "loader: a string that is not UTF-8 is refused (explain's JSON view would drop it)", p.stderr)
    bad = esc.replace('"decode":"decode","transfers"', '"decode":"\\u001b[2Jx","transfers"', 1)
    open(path, "w").write(bad)
    p = run("explain", path)
    check(p.returncode == 1 and "kv_reshard[0].decode: pool `\\x1b[2Jx` is not in pools[]" in p.stderr
          and "\x1b" not in p.stderr, "loader: an error naming a plan string escapes it", p.stderr)

    # ---- explain views -------------------------------------------------------------
    plan = os.path.join(EX, "llama-3.1-70b-pd.plan.json")
    p = run("explain", plan)
    check(p.returncode == 0 and "prefill" in p.stdout and "world: 24 ranks" in p.stdout
          and len([l for l in p.stdout.splitlines() if l.strip().startswith("23 ")]) == 1,
          "explain: summary and a rank table by default", p.stdout[:500])
    p = run("explain", plan, "--rank", "21")
    check(p.returncode == 0 and "rank 21: node 2, device 5" in p.stdout and "20-23" in p.stdout,
          "explain --rank: place and groups", p.stdout[:800])
    p = run("explain", plan, "--rank", "21", "--format", "json")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    r21 = json.load(open(plan))["ranks"][21]
    check(j.get("rank", {}).get("coords") == r21["coords"] and j["rank"]["groups"]["tp"]["ranks"] == [20, 21, 22, 23],
          "explain --rank --format json agrees with the plan")
    p = run("explain", plan, "--groups", "tp", "--format", "json")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check([g["ranks"] for g in j.get("groups", [])] == [list(range(0, 8)), list(range(8, 16)), [16, 17, 18, 19], [20, 21, 22, 23]],
          "explain --groups tp lists the four tp groups")
    p = run("explain", plan, "--groups", "tp")
    check(p.returncode == 0 and "0-7" in p.stdout and "decode" in p.stdout, "explain --groups tp (text)")
    p = run("explain", plan, "--memory")
    check(p.returncode == 0 and "kv_cache" in p.stdout and "GiB" in p.stdout, "explain --memory", p.stdout)
    p = run("explain", plan, "--memory", "--summary", "--format", "json")
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check(len(j.get("memory", [])) == 2 and j["summary"]["world_size"] == 24, "explain --memory --summary json")
    p = run("explain", plan, "--reshard")
    check(p.returncode == 0 and "prefill -> decode" in p.stdout, "explain --reshard", p.stdout[:300])
    p = run("explain", plan, "--rank", "24")
    check(p.returncode == 1 and "rank 24 is not in the plan" in p.stderr, "explain --rank out of range exits 1")
    p = run("explain", plan, "--groups", "tensor")
    check(p.returncode == 2 and "unknown group kind" in p.stderr, "explain --groups unknown kind exits 2")

    # ---- a plan on AMD GPUs: launch.gpu_vendor -------------------------------
    # The emit golden (tests/golden/err/engine-trtllm-on-amd) refuses
    # TensorRT-LLM there; under vLLM the plan says "amd", is schema-valid and
    # loads, and the schema refuses another vendor word.
    amd = os.path.join(tmp, "amd.yaml")
    open(amd, "w").write(open(os.path.join(EX, "llama-3.1-8b-pd-1node.yaml")).read().replace(
        "  preset: h100-sxm\n", "  preset: mi300x\n  scale_out: { bandwidth: 400 Gb/s }\n"))
    plan = os.path.join(tmp, "amd.plan.json")
    p = run("compile", amd, "-o", plan)
    doc = json.load(open(plan)) if p.returncode == 0 else {"launch": {}}
    check(p.returncode == 0 and doc["launch"].get("gpu_vendor") == "amd" and schema_errors(doc) == []
          and run("explain", plan).returncode == 0,
          "amd: the plan records launch.gpu_vendor amd, schema-valid, and loads", p.stderr[-400:])
    doc["launch"]["gpu_vendor"] = "intel"
    check(schema_errors(doc) != [], "amd: the schema refuses a gpu_vendor other than amd")

    # ---- KV of drafts: MTP modules and a draft model -------------------------
    # A rank's kv.bytes_per_token counts the KV of the MTP modules it holds
    # (last pp stage) and of a draft model; kv.draft_bytes_per_token says how
    # much of it is theirs, so the loader holds the rest to layers x heads.
    drafts = [("draft-model", os.path.join(SRC, "tests", "golden", "ok", "model-draft.yaml")),
              ("mtp", os.path.join(SRC, "tests", "fidelity", "perf", "deepseek-dsv3-decode-h800-ep144.yaml"))]
    for label, spec in drafts:
        plan = os.path.join(tmp, f"{label}.plan.json")
        p = run("compile", spec, "-o", plan)
        check(p.returncode == 0, f"{label}: compiles", p.stderr[-400:])
        doc = json.load(open(plan)) if p.returncode == 0 else {"ranks": []}
        check(schema_errors(doc) == [], f"{label}: schema-valid", schema_errors(doc)[:3])
        kv = [r["kv"] for r in doc["ranks"]]
        check(kv and all(k.get("draft_bytes_per_token", 0) > 0 for k in kv), f"{label}: every rank names its draft KV")
        for args in ([], ["--costs"], ["--memory"]):
            p = run("explain", plan, *args)
            check(p.returncode == 0, f"{label}: explain {' '.join(args)} loads the plan", p.stderr[-300:])
        if kv:
            doc["ranks"][0]["kv"]["draft_bytes_per_token"] += 1
            bad = os.path.join(tmp, f"{label}-bad.plan.json")
            json.dump(doc, open(bad, "w"))
            p = run("explain", bad)
            check(p.returncode == 1 and "ranks[0].kv.bytes_per_token" in p.stderr and "draft_bytes_per_token" in p.stderr,
                  f"{label}: a wrong draft_bytes_per_token is named", p.stderr[-300:])
            doc["ranks"][0]["kv"]["draft_bytes_per_token"] = doc["ranks"][0]["kv"]["bytes_per_token"] + 1
            json.dump(doc, open(bad, "w"))
            p = run("explain", bad)
            check(p.returncode == 1 and "ranks[0].kv.draft_bytes_per_token" in p.stderr,
                  f"{label}: draft_bytes_per_token above bytes_per_token is refused", p.stderr[-300:])
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(rptest.finish())
