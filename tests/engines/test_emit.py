#!/usr/bin/env python3
"""Launch targets end to end (docs/engines.md): `rankplan emit` and
`compile --emit` for every example spec that names an engine, and every
target.

For each emitted directory:
  - every script passes `bash -n` and shellcheck;
  - every engine and router flag exists in the fixture of that engine
    version's argument parser (tests/engines/fixtures/, each citing the
    source file and commit it was read from), and every VLLM_* environment
    setting in vLLM's envs.py fixture; every YAML key exists in the
    fixture of TensorRT-LLM's LLM API and proxy config;
  - read back against the plan: each command's CUDA_VISIBLE_DEVICES are
    the devices of exactly one instance's ranks on that node, every rank is
    started once, and the instance's GPU count, node count, parallel sizes
    and memory fraction in the command are the plan's;
  - no port is used twice on a node;
  - manifest.json lists every file with its size and SHA-256, and every
    instance's endpoint;
  - k8s.yaml and dynamo.yaml validate against the LeaderWorkerSet and
    DynamoGraphDeployment CRD schemas (fixtures citing their source), and
    their replicas, node counts, GPUs per pod and worker commands read back
    as the plan's; for Dynamo also the multi-node launch its operator
    derives from the worker's flags;
  - the bytes equal the goldens in tests/engines/golden/ (whole files for
    the small examples, the manifest, which holds every file's digest, for
    the large one); `--update` rewrites them.
Also: determinism, the output directory rules, and refusals.
"""
import glob
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.path.abspath(os.environ["RANKPLAN"])
SRC = os.environ["SRCROOT"]
EX = os.path.join(SRC, "plans", "examples")
HERE = os.path.join(SRC, "tests", "engines")
FIX = os.path.join(HERE, "fixtures")
GOLDEN = os.path.join(HERE, "golden")
UPDATE = "--update" in sys.argv
SHELLCHECK = shutil.which("shellcheck")


def run(*args, cwd=None):
    return subprocess.run([RP, *args], capture_output=True, text=True, cwd=cwd, timeout=600,
                          env=dict(os.environ, NO_COLOR="1"))


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return {l.strip() for l in f if l.strip() and not l.startswith("#")}


def engine_flags(L):
    """The parser fixture of the catalog entry the plan names
    (launch.engine and engine_version): tests/engines/fixtures/ENGINE-VERSION.flags."""
    return fixture(f"{L['engine']}-{L['engine_version']}.flags")


ROUTER_FLAGS = {"vllm": fixture("vllm-toy-proxy.flags"), "sglang": fixture("sglang-router.flags"),
                "trtllm": fixture("trtllm-00209af.flags")}
YAML_KEYS = fixture("trtllm-00209af.yaml-keys")
# vLLM 0.34.0's parser: no entry covers it, but the flags the 0.11 entry
# writes are all declared there too (docs/engines.md).
VLLM_034_FLAGS = fixture("vllm-0.34.0.flags")
with open(os.path.join(FIX, "lws-v0.10.0.schema.json")) as f:
    LWS = jsonschema.Draft7Validator(json.load(f))
with open(os.path.join(FIX, "dynamo-0.6.1-dgd.schema.json")) as f:
    DGD = jsonschema.Draft7Validator(json.load(f))
DYNAMO_FLAGS = {"vllm": fixture("dynamo-0.6.1-vllm.flags"), "sglang": fixture("dynamo-0.6.1-sglang.flags"),
                "trtllm": fixture("dynamo-0.6.1-trtllm.flags")}
# the flags Dynamo's operator adds to a multi-node worker (backend_vllm.go,
# backend_sglang.go) and the server flags dynamo.vllm does not parse
DYNAMO_NOT_WRITTEN = {"--nnodes", "--node-rank", "--dist-init-addr", "--data-parallel-address",
                      "--data-parallel-size-local", "--data-parallel-rpc-port", "--data-parallel-start-rank",
                      "--headless", "--kv-transfer-config"}
SWITCHES = {"--enable-expert-parallel", "--headless", "--enable-dp-attention", "--pd-disaggregation",
            "--is-prefill-worker"}
TARGETS = {"vllm": ["vllm", "shell", "slurm"], "sglang": ["sglang", "shell", "slurm"],
           "trtllm": ["trtllm", "shell", "slurm"]}
SMALL = {"llama-3.1-8b-pd-1node", "llama-3.1-70b-pd-vllm", "deepseek-v3-pd", "deepseek-v3-pd-trtllm"}


# ---- reading scripts back ------------------------------------------------------

def logical_lines(text):
    out, cur = [], ""
    for line in text.splitlines():
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur)
        cur = ""
    return out


class Cmd:
    """One command: its environment, program words and flags."""

    def __init__(self, words, env):
        self.env = dict(env)
        while words and "=" in words[0] and not words[0].startswith("-"):
            k, v = words.pop(0).split("=", 1)
            self.env[k] = v
        self.words = []
        for w in words:
            if w in ("&", "2>&1") or w.startswith(">"):
                break
            self.words.append(w)
        self.flags = {}
        self.args = []
        i = 0
        while i < len(self.words):
            w = self.words[i]
            if w == "-m" and i + 1 < len(self.words):  # python3 -m MODULE: part of the program
                self.args += self.words[i:i + 2]
                i += 2
            elif w.startswith("-") and not w.lstrip("-").isdigit() and i > 0:
                vals = []
                j = i + 1
                while w not in SWITCHES and j < len(self.words) and not self.words[j].startswith("-"):
                    vals.append(self.words[j])
                    j += 1
                    if w not in ("--prefill", "--prefiller-hosts", "--prefiller-ports", "--decoder-hosts",
                                 "--decoder-ports", "--decode", "-H"):
                        break
                self.flags.setdefault(w, []).append(vals)
                i = j
            else:
                self.args.append(w)
                i += 1

    def one(self, flag):
        v = self.flags.get(flag)
        return v[0][0] if v and v[0] else None

    def kind(self):
        a = " ".join(self.args)
        if self.args[:2] == ["vllm", "serve"] or self.args[:3] == ["python3", "-m", "dynamo.vllm"]:
            return "vllm"
        if "sglang.launch_server" in a or self.args[:3] == ["python3", "-m", "dynamo.sglang"]:
            return "sglang"
        if "sglang_router.launch_router" in a or "toy_proxy_server.py" in a or "disaggregated" in self.args:
            return "router"
        if self.args and self.args[0] == "mpirun":
            return "mpirun"
        if self.args and self.args[0] == "trtllm-serve" or self.args[:3] == ["python3", "-m", "dynamo.trtllm"]:
            return "trtllm"
        if self.args[:2] == ["ray", "start"]:
            return "ray"
        return None


def commands(text):
    env, out = {}, []
    for line in logical_lines(text):
        words = shlex.split(line)
        if not words:
            continue
        if words[0] == "export":
            for w in words[1:]:
                k, v = w.split("=", 1)
                env[k] = v
            continue
        c = Cmd(words, env)
        if c.kind():
            out.append(c)
    return out


def host_node(word):
    """'${host_3}' (or '${host_3}:8' / 'http://${host_3}:80') -> 3."""
    i = word.index("${host_") + len("${host_")
    return int(word[i:word.index("}", i)])


# ---- the plan's view --------------------------------------------------------------

def floor4(x):
    return math.floor(x * 10000) / 10000


def plan_view(plan):
    """Ranks by (pool index, instance), and the (pool index, instance) of each (node, device)."""
    index = {p["name"]: i for i, p in enumerate(plan["pools"])}
    inst = {}
    for r in plan["ranks"]:
        inst.setdefault((index[r["pool"]], r["instance"]), []).append(r)
    owner = {(r["node"], r["device"]): (index[r["pool"]], r["instance"]) for r in plan["ranks"]}
    return inst, owner


def pool_fraction(plan, pool, kind):
    """The memory fraction flag of a pool: the plan's memory_fraction (its
    ledger's), which holds at least the ranks' weights and KV cache: the
    engine multiplies it by CUDA's total less start-up memory, below the
    device capacity the ranks' figures are shares of. Plans without it:
    the ranks' own ratio, floored to 4 decimals."""
    p = plan["pools"][pool]
    best = 2.0
    for r in plan["ranks"][p["ranks"][0]:p["ranks"][1]]:
        m = r["memory"]
        if kind == "static":
            f = (m["weights"] + m["kv_cache"]) / m["capacity"]
        else:
            f = m["kv_cache"] / (m["capacity"] - m["weights"] - m["activations"] - m["workspace"])
        best = min(best, floor4(f))
    if "memory_fraction" not in p:
        return best
    mf = p["memory_fraction"]
    check(best <= mf <= 1, f"{plan['name']}: pool {p['name']}: memory_fraction {mf} holds the ranks' "
          f"{'weights and KV cache' if kind == 'static' else 'KV cache'} ({best} of their capacity)")
    return mf


def check_instance_flags(name, plan, c, pool, inst_ranks, nodes_of, dynamo=False):
    """The sizes, node count and memory fraction in command c against the plan
    (dynamo: the operator adds the node count)."""
    L, p = plan["launch"], plan["pools"][pool]
    tp, pp, dp, ep = p["tp"], p["pp"], p["dp"], p["ep"]
    moe, eng, bad = L["moe"], L["engine"], []
    want = {}
    if eng == "vllm":
        want = {"--tensor-parallel-size": tp, "--pipeline-parallel-size": pp, "--data-parallel-size": dp,
                "--gpu-memory-utilization": L["gpu_memory_utilization"], "--block-size": L["kv_block"],
                "--max-model-len": L["max_model_len"]}
        if ("--enable-expert-parallel" in c.flags) != (moe and ep > 1):
            bad.append("--enable-expert-parallel")
        if "--data-parallel-size-local" in c.flags:
            local = int(c.one("--data-parallel-size-local"))
            if local * tp * pp != len(c.env["CUDA_VISIBLE_DEVICES"].split(",")):
                bad.append("--data-parallel-size-local x tp x pp is not the GPUs on the node")
    elif eng == "sglang":
        want = {"--tp-size": tp * dp if moe and dp > 1 else tp, "--pp-size": pp, "--dp-size": dp,
                "--mem-fraction-static": pool_fraction(plan, pool, "static"), "--page-size": L["kv_block"],
                "--context-length": L["max_model_len"], "--nnodes": nodes_of if nodes_of > 1 and not dynamo else None}
        if moe:
            want["--ep-size"] = ep
    else:
        want = {"--tp_size": tp * dp, "--pp_size": pp, "--max_seq_len": L["max_model_len"],
                "--kv_cache_free_gpu_memory_fraction": pool_fraction(plan, pool, "kv_free"),
                "--gpus_per_node": len(inst_ranks) // nodes_of}
        if moe:
            want["--ep_size"] = ep
    for flag, v in want.items():
        got = c.one(flag)
        if v is None:
            if got is not None:
                bad.append(f"{flag} {got}, expected none")
        elif got is None or float(got) != float(v):
            bad.append(f"{flag} {got}, expected {v}")
    check(not bad, f"{name}: pool {p['name']} instance: sizes, nodes and memory fraction are the plan's", bad)


def check_ports(name, per_node):
    dup = {n: [x for x in set(ps) if ps.count(x) > 1] for n, ps in per_node.items()}
    dup = {n: d for n, d in dup.items() if d}
    check(not dup, f"{name}: no port is used twice on a node", dup)


def node_ports(c, size):
    ports = []
    for f in ("--port", "--nccl-port", "--data-parallel-rpc-port", "--disaggregation-bootstrap-port"):
        if c.one(f) and not ("--headless" in c.flags and f == "--port"):
            ports.append(int(c.one(f)))
    if "VLLM_NIXL_SIDE_CHANNEL_PORT" in c.env:
        b = int(c.env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        ports += list(range(b, b + size))
    return ports


def check_vllm_env(what, names, version):
    """Every VLLM_* setting a launch file writes is one the plan's vLLM
    release reads (tests/engines/fixtures/vllm-VERSION.envs, from its
    vllm/envs.py)."""
    bad = [n for n in names if n.startswith("VLLM_") and n not in fixture(f"vllm-{version}.envs")]
    check(not bad, f"{what}: every VLLM_* environment setting is in vLLM's envs.py fixture", bad)


def read_back(name, plan, d):
    """Every command of every node script against the plan."""
    inst, owner = plan_view(plan)
    L = plan["launch"]
    started = {}
    ports = {}
    for script in sorted(glob.glob(os.path.join(d, "node-*.sh"))):
        node = int(os.path.basename(script)[5:-3])
        cmds = commands(open(script).read())
        bad_flags = [f for c in cmds if c.kind() in ("vllm", "sglang", "trtllm", "mpirun")
                     for f in c.flags if f not in engine_flags(L) and c.kind() != "mpirun"]
        bad_flags += [f for c in cmds if c.kind() == "mpirun" for f in c.flags
                      if f not in engine_flags(L) and f not in ("-np", "-x", "-H")]
        check(not bad_flags, f"{name}: node {node}: every engine flag is in the {L['engine']} {L['engine_version']} "
              "parser fixture", bad_flags)
        if L["engine"] == "vllm":
            check_vllm_env(f"{name}: node {node}", [k for c in cmds for k in c.env], L["engine_version"])
            later = [f for c in cmds if c.kind() == "vllm" for f in c.flags if f not in VLLM_034_FLAGS]
            check(not later, f"{name}: node {node}: every vLLM flag is still declared by vLLM 0.34.0 "
                  "(docs/engines.md, \"The catalog\")", later)
        for c in cmds:
            if c.kind() == "router" or "CUDA_VISIBLE_DEVICES" not in c.env:
                continue
            devs = [int(x) for x in c.env["CUDA_VISIBLE_DEVICES"].split(",")]
            owners = {owner.get((node, dv)) for dv in devs}
            check(len(owners) == 1 and None not in owners and len(devs) == len(set(devs)),
                  f"{name}: node {node}: the devices of one command are one instance's", (devs, owners))
            if len(owners) != 1 or None in owners:
                continue
            key = owners.pop()
            on_node = [r for r in inst[key] if r["node"] == node]
            check(sorted(devs) == sorted(r["device"] for r in on_node),
                  f"{name}: node {node}: CUDA_VISIBLE_DEVICES are all of the instance's devices there", devs)
            nodes_of = len({r["node"] for r in inst[key]})
            if c.kind() == "mpirun":
                hosts = c.flags["-H"][0][0].split(",")
                check(int(c.one("-np")) == len(inst[key]) and len(hosts) == nodes_of,
                      f"{name}: mpirun starts the instance's {len(inst[key])} ranks on its {nodes_of} nodes", hosts)
                for h in hosts:
                    n, cnt = host_node(h), int(h.rsplit(":", 1)[1])
                    for r in inst[key]:
                        if r["node"] == n:
                            started[r["rank"]] = started.get(r["rank"], 0) + 1
                    check(cnt == sum(1 for r in inst[key] if r["node"] == n), f"{name}: mpirun -H {h} is the plan's count")
            else:
                for r in on_node:
                    started[r["rank"]] = started.get(r["rank"], 0) + 1
            if c.kind() in ("vllm", "sglang", "trtllm", "mpirun"):
                check_instance_flags(name, plan, c, key[0], inst[key], nodes_of)
            ports.setdefault(node, []).extend(node_ports(c, plan["pools"][key[0]]["instance_size"]))
    check(sorted(started) == list(range(plan["world_size"])) and set(started.values()) <= {1},
          f"{name}: every one of the {plan['world_size']} ranks is started exactly once",
          [r for r in range(plan["world_size"]) if started.get(r) != 1][:10])
    return ports


def check_router(name, plan, d, ports, manifest):
    r = manifest["router"]
    pools = plan["pools"]
    disagg = any(p["role"] == "prefill" for p in pools)
    check((r is not None) == disagg and os.path.exists(os.path.join(d, "router.sh")) == disagg,
          f"{name}: a router exactly for a disaggregated plan")
    if not disagg:
        return
    ports.setdefault(r["node"], []).append(r["port"])
    eng = plan["launch"]["engine"]
    cmds = commands(open(os.path.join(d, "router.sh")).read())
    check(len(cmds) == 1 and all(f in ROUTER_FLAGS[eng] for f in cmds[0].flags),
          f"{name}: router flags are in the router's parser fixture", cmds[0].flags if cmds else None)
    ends = {(e["role"], e["host"], e["port"]) for e in manifest["endpoints"]}
    pre = sum(p["replicas"] for p in pools if p["role"] == "prefill")
    dec = sum(p["replicas"] for p in pools if p["role"] == "decode")
    if eng == "trtllm":
        y = yaml.safe_load(open(os.path.join(d, "disagg.yaml")))
        got = (y["context_servers"]["num_instances"], y["generation_servers"]["num_instances"], y["port"])
        urls = {("prefill",) + tuple(u.split(":")) for u in y["context_servers"]["urls"]}
        urls |= {("decode",) + tuple(u.split(":")) for u in y["generation_servers"]["urls"]}
        check(got == (pre, dec, r["port"]) and urls == {(a, b, str(c)) for a, b, c in ends},
              f"{name}: disagg.yaml lists every context and generation server", y)
    elif eng == "sglang":
        c = cmds[0]
        check(len(c.flags["--prefill"]) == pre and len(c.flags["--decode"]) == dec and int(c.one("--port")) == r["port"],
              f"{name}: the router lists {pre} prefill and {dec} decode servers", c.flags)
    else:
        c = cmds[0]
        check(len(c.flags["--prefiller-ports"][0]) == pre and len(c.flags["--decoder-ports"][0]) == dec,
              f"{name}: the proxy lists {pre} prefillers and {dec} decoders", c.flags)


def check_yaml(name, plan, d):
    for f in sorted(glob.glob(os.path.join(d, "*.yaml"))):
        y = yaml.safe_load(open(f))
        keys = set()

        def walk(o, pre=""):
            for k, v in o.items():
                keys.add(pre + k)
                if isinstance(v, dict):
                    walk(v, pre + k + ".")
        walk(y)
        check(keys <= YAML_KEYS, f"{name}: {os.path.basename(f)}: every key is in the LLM API fixture", keys - YAML_KEYS)
        if os.path.basename(f).startswith("trtllm-"):
            pool = [i for i, p in enumerate(plan["pools"])
                    if re.fullmatch(rf"trtllm-{re.escape(p['name'])}-\d+\.yaml", os.path.basename(f))]
            check(y["kv_cache_config"]["tokens_per_block"] == plan["launch"]["kv_block"] and len(pool) == 1 and
                  y["kv_cache_config"]["free_gpu_memory_fraction"] == pool_fraction(plan, pool[0], "kv_free"),
                  f"{name}: {os.path.basename(f)}: tokens_per_block and the memory fraction are the plan's")


def check_manifest(name, plan, d):
    m = json.load(open(os.path.join(d, "manifest.json")))
    files = sorted(x for x in os.listdir(d) if x != "manifest.json")
    listed = [f["path"] for f in m["files"]]
    ok = listed == files
    for f in m["files"]:
        data = open(os.path.join(d, f["path"]), "rb").read()
        ok = ok and f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
        ok = ok and (os.stat(os.path.join(d, f["path"])).st_mode & 0o111 != 0) == (f["mode"] == "0755")
    check(ok, f"{name}: manifest.json lists every file with its size, digest and mode", (listed, files))
    check(len(m["endpoints"]) == sum(p["replicas"] for p in plan["pools"]) and m["nodes"] == len(plan["nodes"]),
          f"{name}: manifest.json has one endpoint per instance")
    return m


def check_shell(name, d):
    files = sorted(glob.glob(os.path.join(d, "*.sh")) + glob.glob(os.path.join(d, "*.sbatch")))
    bad = [f for f in files if subprocess.run(["bash", "-n", f], capture_output=True).returncode != 0]
    check(not bad, f"{name}: {len(files)} scripts pass bash -n", bad)
    check(SHELLCHECK is not None, "shellcheck is installed (Makefile DEB_PKGS)")
    if SHELLCHECK:
        p = subprocess.run([SHELLCHECK, "-S", "style", *files], capture_output=True, text=True)
        check(p.returncode == 0, f"{name}: {len(files)} scripts pass shellcheck", p.stdout)
    if name.endswith("/shell") or name.endswith("/slurm"):
        check_fate(name, d)


# Stand-ins for ssh and srun: the node scripts fail at once with status 7,
# anything else (the router) runs until it is stopped.
FAKE_LAUNCHER = """#!/bin/bash
for a in "$@"; do case "$a" in *router.sh*) exec sleep 60 ;; esac; done
exit 7
"""
FAKE_SCONTROL = """#!/bin/bash
for i in $(seq 0 511); do echo "node$i"; done
"""


def check_fate(name, d):
    """launch.sh and job.sbatch end with shared fate: a failing node fails
    the launch with its status at once and the rest is stopped (a bare
    `wait` would return 0 after the router's minute)."""
    with tempfile.TemporaryDirectory() as bindir:
        for tool, body in (("ssh", FAKE_LAUNCHER), ("srun", FAKE_LAUNCHER), ("scontrol", FAKE_SCONTROL)):
            with open(os.path.join(bindir, tool), "w") as f:
                f.write(body)
            os.chmod(os.path.join(bindir, tool), 0o755)
        script = "launch.sh" if name.endswith("/shell") else "job.sbatch"
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], SLURM_JOB_NODELIST="node[0-511]",
                   SLURM_SUBMIT_DIR=d, RANKPLAN_DIR=d)
        try:
            p = subprocess.run(["bash", os.path.join(d, script)], env=env, capture_output=True, text=True, timeout=30)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        check(rc == 7, f"{name}: {script} exits with a failing node's status (shared fate)", rc)


def check_golden(name, target, d):
    g = os.path.join(GOLDEN, name, target)
    # whole files for the small examples' engine targets; else the manifest
    # (every file's digest) and the job script itself
    if (name in SMALL and target not in ("shell", "slurm")) or target in ("k8s", "dynamo"):
        names = sorted(os.listdir(d))
    else:
        names = sorted(n for n in os.listdir(d) if n in ("manifest.json", "launch.sh", "job.sbatch"))
    if UPDATE:
        shutil.rmtree(g, ignore_errors=True)
        os.makedirs(g)
        for n in names:
            shutil.copyfile(os.path.join(d, n), os.path.join(g, n))
    want = sorted(os.listdir(g)) if os.path.isdir(g) else []
    same = want == names and all(open(os.path.join(d, n), "rb").read() == open(os.path.join(g, n), "rb").read()
                                 for n in names)
    check(same, f"{name}: {target} files equal the goldens (run with --update after an intended change)")


def check_k8s(name, plan, d):
    """k8s.yaml: each LeaderWorkerSet valid against the LWS CRD schema and
    its sizes the plan's; each command's flags in the fixture and its sizes
    the plan's; each pool's Service on the leaders' HTTP port, named apart
    from the headless Service the LWS controller makes under the set's own
    name; for a disaggregated plan the router's Deployment and Service."""
    docs = [x for x in yaml.safe_load_all(open(os.path.join(d, "k8s.yaml"))) if x]
    inst, _ = plan_view(plan)
    L = plan["launch"]
    lws = {x["metadata"]["name"]: x for x in docs if x["kind"] == "LeaderWorkerSet"}
    svc = {x["metadata"]["name"]: x for x in docs if x["kind"] == "Service"}
    deps = {x["metadata"]["name"]: x for x in docs if x["kind"] == "Deployment"}
    disagg = any(p["role"] == "prefill" for p in plan["pools"])
    check(len(lws) == len(plan["pools"]) and len(svc) == len(plan["pools"]) + disagg and len(deps) == disagg,
          f"{name}: one LeaderWorkerSet and one Service per pool, and a router Deployment and Service exactly "
          "for a disaggregated plan", (sorted(lws), sorted(svc), sorted(deps)))
    check(not set(svc) & set(lws), f"{name}: no Service takes the name of a set (its headless Service's)",
          set(svc) & set(lws))
    pool_ports = {}
    for pi, p in enumerate(plan["pools"]):
        x = lws.get("rankplan-" + p["name"])
        if not x:
            continue
        errs = [e.message for e in LWS.iter_errors(x)]
        check(not errs, f"{name}: LeaderWorkerSet {p['name']} is valid against the LWS v0.10.0 CRD schema", errs[:3])
        bad = dict(x, spec=dict(x["spec"], replicas="two"))
        check(any(True for _ in LWS.iter_errors(bad)), f"{name}: the schema refuses a damaged LeaderWorkerSet")
        nodes = sorted({r["node"] for r in inst[(pi, 0)]})
        per = len(inst[(pi, 0)]) // len(nodes)
        t = x["spec"]["leaderWorkerTemplate"]
        tmpls = [t[k] for k in ("leaderTemplate", "workerTemplate") if k in t]
        res = "amd.com/gpu" if L.get("gpu_vendor") == "amd" else "nvidia.com/gpu"
        gpus = {c["resources"]["limits"][res] for tm in tmpls for c in tm["spec"]["containers"]}
        images = {c["image"] for tm in tmpls for c in tm["spec"]["containers"]}
        check(x["spec"]["replicas"] == p["replicas"] and t["size"] == len(nodes) and gpus == {per}
              and images == {L["image"]}, f"{name}: pool {p['name']}: replicas, group size, GPUs per pod and image "
              "are the plan's", (x["spec"]["replicas"], t["size"], gpus))
        # /dev/shm: the container runtime's default is 64 MiB; every pod
        # mounts an in-memory volume there (docs/engines.md, "Kubernetes").
        shm = [(tm["spec"].get("volumes", []), tm["spec"]["containers"][0].get("volumeMounts", [])) for tm in tmpls]
        check(all(any(m["mountPath"] == "/dev/shm" and any(v["name"] == m["name"] and
                                                            v.get("emptyDir", {}).get("medium") == "Memory" for v in vs)
                      for m in ms) for vs, ms in shm),
              f"{name}: pool {p['name']}: every pod mounts an in-memory volume at /dev/shm", shm)
        for tm in tmpls:
            text = tm["spec"]["containers"][0]["args"][0]
            lone = [ln for ln in text.splitlines() if ln.strip() == "\\"]
            check(not lone, f"{name}: pool {p['name']}: no line of the pod command is a bare continuation "
                  "(what a dropped CUDA_VISIBLE_DEVICES prefix would leave)", lone)
            cmds = [c for c in commands(text) if c.kind() in ("vllm", "sglang", "trtllm")]
            for c in cmds:
                bad_flags = [f for f in c.flags if f not in engine_flags(L)]
                check(not bad_flags, f"{name}: pool {p['name']}: every flag in the pod command is in the fixture", bad_flags)
                check_instance_flags(name, plan, c, pi, inst[(pi, 0)], len(nodes))
                if tm is tmpls[0] and c.one("--port"):
                    s = svc["rankplan-" + p["name"] + "-http"]["spec"]
                    check(s["ports"][0]["port"] == int(c.one("--port")) and
                          s["selector"]["leaderworkerset.sigs.k8s.io/name"] == "rankplan-" + p["name"],
                          f"{name}: pool {p['name']}: the Service points at the leaders' HTTP port")
                    pool_ports[p["name"]] = (int(c.one("--port")), c.one("--disaggregation-bootstrap-port"))
    if disagg and "rankplan-router" in deps and "rankplan-router" in svc:
        check_k8s_router(name, plan, deps["rankplan-router"], svc["rankplan-router"], lws, pool_ports)


def heredoc(text, path):
    """The text a pod command writes to path with cat > ... <<'EOF'."""
    head = f'cat > "{path}" <<\'EOF\'\n'
    i = text.index(head) + len(head)
    return text[i:text.index("\nEOF\n", i) + 1]


def check_k8s_router(name, plan, dep, svc, lws, pool_ports):
    """The router's Deployment (apps/v1: the fields a Deployment needs, its
    selector matching its pods) and Service, the router command's flags in
    its parser fixture, and every prefill and decode instance reached at its
    leader pod's DNS name on its pool Service's port."""
    L = plan["launch"]
    spec = dep.get("spec", {})
    tmpl = spec.get("template", {})
    labels = tmpl.get("metadata", {}).get("labels", {})
    sel = spec.get("selector", {}).get("matchLabels", {})
    cs = tmpl.get("spec", {}).get("containers", [])
    ok = (dep.get("apiVersion") == "apps/v1" and dep["metadata"]["name"] == "rankplan-router" and sel
          and sel.items() <= labels.items() and spec.get("replicas") == 1 and len(cs) == 1
          and cs[0].get("name") and cs[0].get("image") == L["image"] and len(cs[0].get("ports", [])) == 1)
    check(ok, f"{name}: the router Deployment has apiVersion, name, a selector matching its pod labels, one "
          "container with the plan's image and one port", dep)
    if not ok:
        return
    port = cs[0]["ports"][0]["containerPort"]
    sp = svc["spec"]["ports"]
    check(svc.get("apiVersion") == "v1" and svc["spec"]["selector"].items() <= labels.items() and len(sp) == 1
          and sp[0]["port"] == sp[0]["targetPort"] == port,
          f"{name}: the router Service selects the router pod on its container port {port}", svc)
    text = cs[0]["args"][0]
    cmd = [c for c in commands(text) if c.kind() == "router"]
    check(len(cmd) == 1 and all(f in ROUTER_FLAGS[L["engine"]] for f in cmd[0].flags),
          f"{name}: the router pod runs one router command, its flags in the router's parser fixture", text)
    if len(cmd) != 1:
        return
    c, backends = cmd[0], set()
    if L["engine"] == "vllm":
        got_port = int(c.one("--port"))
        for k, role in (("prefiller", "prefill"), ("decoder", "decode")):
            hosts, ports = c.flags[f"--{k}-hosts"][0], c.flags[f"--{k}-ports"][0]
            check(len(hosts) == len(ports), f"{name}: the proxy has a port for every {k} host")
            backends |= {(role, h, int(q), None) for h, q in zip(hosts, ports)}
    elif L["engine"] == "sglang":
        got_port = int(c.one("--port"))
        for role in ("prefill", "decode"):
            for v in c.flags.get("--" + role, []):
                host, q = v[0][len("http://"):].rsplit(":", 1)
                backends.add((role, host, int(q), v[1] if len(v) > 1 else None))
    else:
        y = yaml.safe_load(heredoc(text, "$here/disagg.yaml"))
        got_port = y["port"]
        for key, role in (("context_servers", "prefill"), ("generation_servers", "decode")):
            check(y[key]["num_instances"] == len(y[key]["urls"]), f"{name}: disagg.yaml counts its {key}")
            backends |= {(role, u.rsplit(":", 1)[0], int(u.rsplit(":", 1)[1]), None) for u in y[key]["urls"]}
    check(got_port == port, f"{name}: the router listens on its container port ({got_port})")
    want = set()
    for p in plan["pools"]:
        if p["role"] in ("prefill", "decode") and p["name"] in pool_ports:
            http, boot = pool_ports[p["name"]]
            for i in range(p["replicas"]):
                want.add((p["role"], f"rankplan-{p['name']}-{i}.rankplan-{p['name']}", http,
                          boot if L["engine"] == "sglang" and p["role"] == "prefill" else None))
    check(backends == want and all(lws[h.split(".")[1]]["spec"]["replicas"] > int(h.split(".")[0].rsplit("-", 1)[1])
                                   for _, h, _, _ in backends),
          f"{name}: the router reaches every instance's leader pod at its pool Service's port", (backends, want))


def dynamo_launch_ok(c, gpus, count):
    """Whether the launch Dynamo 0.6.1's operator derives for a vLLM worker
    of `count` pods of `gpus` GPUs (internal/dynamo/backend_vllm.go) runs
    exactly its tp x pp x dp ranks: one pod holds them all; Ray when tp x pp
    is more than a pod's GPUs (then dp 1); else data parallel with
    gpus / (tp x pp) engines per pod."""
    world = int(c.one("--tensor-parallel-size")) * int(c.one("--pipeline-parallel-size"))
    dp = int(c.one("--data-parallel-size"))
    if count == 1:
        return world * dp == gpus
    if world > gpus:
        return dp == 1 and world == gpus * count
    return world * dp > gpus and gpus % world == 0 and gpus // world * count == dp


def yaml_keys(o, pre=""):
    keys = set()
    for k, v in o.items():
        keys.add(pre + k)
        if isinstance(v, dict):
            keys |= yaml_keys(v, pre + k + ".")
    return keys


def check_dynamo_trtllm(name, plan, pi, c, gpus, mc, cm):
    """A dynamo.trtllm worker: its flags (Dynamo's spelling) and the engine
    YAML it mounts from the ConfigMap, against the plan."""
    L, p = plan["launch"], plan["pools"][pi]
    disagg = p["role"] != "both"
    frac = pool_fraction(plan, pi, "kv_free")
    want = {"--tensor-parallel-size": p["tp"] * p["dp"], "--pipeline-parallel-size": p["pp"],
            "--max-seq-len": L["max_model_len"], "--free-gpu-memory-fraction": frac, "--gpus-per-node": gpus,
            "--kv-block-size": L["kv_block"], "--expert-parallel-size": p["ep"] if L["moe"] else None}
    bad = [f"{f} {c.one(f)}, expected {v}" for f, v in want.items()
           if (v is None) != (c.one(f) is None) or (v is not None and float(c.one(f)) != float(v))]
    if c.one("--disaggregation-mode") != (p["role"] if disagg else None):
        bad.append(f"--disaggregation-mode {c.one('--disaggregation-mode')}")
    check(not bad, f"{name}: pool {p['name']}: sizes, GPUs per node and memory fraction are the plan's", bad)
    path, mount = c.one("--extra-engine-args") or "", mc.get("volumeMounts", [{}])[0]
    vol = [v for v in mc.get("volumes", []) if v["name"] == mount.get("name")]
    y = yaml.safe_load(cm["data"].get(os.path.basename(path), "{}")) if cm else {}
    check(os.path.dirname(path) == mount.get("mountPath") and y and yaml_keys(y) <= YAML_KEYS and len(vol) == 1
          and vol[0]["configMap"]["name"] == cm["metadata"]["name"],
          f"{name}: pool {p['name']}: --extra-engine-args is a ConfigMap key mounted there, with LLM API keys", path)
    kv = y.get("kv_cache_config", {})
    check(kv.get("tokens_per_block") == L["kv_block"] and kv.get("free_gpu_memory_fraction") == frac
          and y.get("enable_attention_dp") == (L["moe"] and p["dp"] > 1)
          and ("cache_transceiver_config" in y) == disagg,
          f"{name}: pool {p['name']}: the engine YAML's block, memory fraction, attention dp and transfer are the plan's", y)


def check_dynamo_worker(name, plan, pi, s, disagg, inst, cm):
    """One pool's worker service against the plan."""
    L, p = plan["launch"], plan["pools"][pi]
    eng = L["engine"]
    ranks = inst[(pi, 0)]
    nodes = len({r["node"] for r in ranks})
    gpus = int(s["resources"]["limits"]["gpu"])
    count = s.get("multinode", {}).get("nodeCount", 1)
    mc = s["extraPodSpec"]["mainContainer"]
    check(s["componentType"] == "worker" and s.get("subComponentType") == (p["role"] if disagg else None)
          and s["replicas"] == p["replicas"] and count == nodes and gpus * count == len(ranks)
          and mc["image"] == L["image"], f"{name}: pool {p['name']}: replicas, node count, GPUs per pod and image "
          "are the plan's", (s["replicas"], count, gpus))
    c = Cmd(list(mc["command"]) + list(mc["args"]), {})
    check(mc["command"] == ["python3", "-m", "dynamo." + eng] and c.kind() == eng,
          f"{name}: pool {p['name']}: the worker is Dynamo's {eng} module", mc["command"])
    # dynamo.vllm and dynamo.sglang add the engine's parser to theirs; dynamo.trtllm has only its own
    known = DYNAMO_FLAGS[eng] | (engine_flags(L) if eng != "trtllm" else set())
    unknown = [f for f in c.flags if f not in known]
    check(not unknown, f"{name}: pool {p['name']}: every worker flag is in the parser fixtures of dynamo.{eng}", unknown)
    extra = [f for f in c.flags if f in DYNAMO_NOT_WRITTEN or (eng == "vllm" and f == "--port")]
    check(not extra, f"{name}: pool {p['name']}: no flag the operator adds or dynamo.{eng} lacks", extra)
    if eng == "trtllm":
        check_dynamo_trtllm(name, plan, pi, c, gpus, dict(mc, volumes=s["extraPodSpec"].get("volumes", [])), cm)
    else:
        check_instance_flags(name, plan, c, pi, ranks, nodes, dynamo=True)
    if eng == "vllm":
        check((c.one("--connector") == "nixl") == disagg and ("--is-prefill-worker" in c.flags) == (p["role"] == "prefill"),
              f"{name}: pool {p['name']}: the NIXL connector for prefill and decode, the prefill switch for prefill")
        check(dynamo_launch_ok(c, gpus, count),
              f"{name}: pool {p['name']}: the launch Dynamo's operator derives runs the plan's ranks", (gpus, count))
    return s["replicas"] * count * gpus


def check_dynamo(name, plan, d):
    """dynamo.yaml: one DynamoGraphDeployment, valid against the CRD schema of
    Dynamo 0.6.1; a frontend and one worker service per pool whose replicas,
    node count, GPUs per pod and image are the plan's, each worker's flags
    in the engine's and Dynamo's parser fixtures and its sizes the plan's."""
    docs = [x for x in yaml.safe_load_all(open(os.path.join(d, "dynamo.yaml"))) if x]
    L = plan["launch"]
    trt = L["engine"] == "trtllm"
    kinds = [x["kind"] for x in docs]
    check(kinds == (["ConfigMap"] if trt else []) + ["DynamoGraphDeployment"]
          and docs[-1]["apiVersion"] == "nvidia.com/v1alpha1",
          f"{name}: dynamo.yaml is one DynamoGraphDeployment (after the engine YAMLs' ConfigMap for TensorRT-LLM)", kinds)
    x, cm = docs[-1], docs[0] if trt else None
    if trt:
        files = {f: open(os.path.join(d, f)).read() for f in os.listdir(d) if f.startswith("trtllm-")}
        check(cm["data"] == files, f"{name}: the ConfigMap holds the engine YAMLs written beside it", sorted(cm["data"]))
    errs = [e.message for e in DGD.iter_errors(x)]
    check(not errs, f"{name}: the DynamoGraphDeployment is valid against the Dynamo 0.6.1 CRD schema", errs[:3])
    svcs = x["spec"]["services"]
    bad = dict(x, spec=dict(x["spec"], services=dict(svcs, frontend=dict(svcs["frontend"], replicas="one"))))
    check(any(True for _ in DGD.iter_errors(bad)), f"{name}: the schema refuses a damaged DynamoGraphDeployment")
    check(x["spec"]["backendFramework"] == L["engine"] and set(svcs) == {"frontend"} | {p["name"] for p in plan["pools"]},
          f"{name}: the engine's backend, a frontend and one service per pool", sorted(svcs))
    fe = svcs["frontend"]["extraPodSpec"]["mainContainer"]
    check(svcs["frontend"]["componentType"] == "frontend" and fe == {"image": L["image"]},
          f"{name}: the frontend runs the operator's command in the spec's image", fe)
    inst, _ = plan_view(plan)
    disagg = any(p["role"] == "prefill" for p in plan["pools"])
    total = sum(check_dynamo_worker(name, plan, pi, svcs[p["name"]], disagg, inst, cm)
                for pi, p in enumerate(plan["pools"]) if p["name"] in svcs)
    check(total == plan["world_size"], f"{name}: the deployment asks for the plan's {plan['world_size']} GPUs", total)


def check_again(name, target, plan_path, d, tmp):
    again = os.path.join(tmp, f"{name}.{target}.again")
    run("emit", plan_path, "--target", target, "-o", again)
    check(all(open(os.path.join(d, f), "rb").read() == open(os.path.join(again, f), "rb").read()
              for f in os.listdir(d)) and sorted(os.listdir(d)) == sorted(os.listdir(again)),
          f"{name}/{target}: the same plan gives the same bytes")


def emit_example(tmp, spec):
    name = os.path.basename(spec)[:-5]
    plan_path = os.path.join(EX, name + ".plan.json")
    plan = json.load(open(plan_path))
    if "launch" not in plan:
        return False
    multi_trt = plan["launch"]["engine"] == "trtllm" and any(
        len({r["node"] for r in plan["ranks"] if r["pool"] == p["name"] and r["instance"] == 0}) > 1
        for p in plan["pools"])
    k8s = ["k8s"] if plan["launch"]["image"] and not multi_trt else []
    dynamo = ["dynamo"] if plan["launch"]["image"] and plan["launch"]["engine"] != "trtllm" else []
    for target in TARGETS[plan["launch"]["engine"]] + k8s + dynamo:
        d = os.path.join(tmp, f"{name}.{target}")
        p = run("emit", plan_path, "--target", target, "-o", d)
        check(p.returncode == 0, f"{name}: emit --target {target}", p.stderr)
        if p.returncode:
            continue
        if target == "k8s":
            check_manifest(f"{name}/{target}", plan, d)
            check_k8s(f"{name}/{target}", plan, d)
            check_golden(name, target, d)
            continue
        if target == "dynamo":
            check_manifest(f"{name}/{target}", plan, d)
            check_dynamo(f"{name}/{target}", plan, d)
            check_golden(name, target, d)
            check_again(name, target, plan_path, d, tmp)
            continue
        check_shell(f"{name}/{target}", d)
        m = check_manifest(f"{name}/{target}", plan, d)
        ports = read_back(f"{name}/{target}", plan, d)
        check_router(f"{name}/{target}", plan, d, ports, m)
        check_ports(f"{name}/{target}", ports)
        check_yaml(f"{name}/{target}", plan, d)
        check_golden(name, target, d)
        check_again(name, target, plan_path, d, tmp)
    return True


def k8s_amd(tmp):
    """A plan on AMD GPUs (vLLM on mi300x): the plan records gpu_vendor amd
    and its pods request amd.com/gpu, the ROCm device plugin's resource
    (ROCm/k8s-device-plugin, example/pod/alexnet-gpu.yaml), never
    nvidia.com/gpu; an NVIDIA plan writes no gpu_vendor."""
    spec = os.path.join(tmp, "amd.yaml")
    open(spec, "w").write(
        "version: 1\nname: amd70\nmodel: { preset: llama-3.1-70b, source: meta-llama/Llama-3.1-70B-Instruct }\n"
        "hardware: { preset: mi300x, nodes: 1, scale_out: { bandwidth: 400 Gb/s } }\n"
        "workload: { input_tokens: 2000, output_tokens: 500, rate: 1 req/s }\nslo: { ttft: 3 s, tpot: 100 ms }\n"
        "deployment:\n  mode: aggregated\n  engine: vllm\n  image: vllm-rocm:test\n"
        "  pools:\n    - { name: main, role: both, replicas: 2, tp: 4 }\n")
    d = os.path.join(tmp, "amd.k8s")
    p = run("compile", spec, "--emit", "k8s", "-o", d)
    check(p.returncode == 0, "amd: compile --emit k8s", p.stderr)
    if p.returncode == 0:
        plan = json.load(open(os.path.join(d, "plan.json")))
        text = open(os.path.join(d, "k8s.yaml")).read()
        check(plan["launch"].get("gpu_vendor") == "amd" and "amd.com/gpu: 4" in text and "nvidia.com" not in text,
              "amd/k8s: the plan says gpu_vendor amd and the pods request amd.com/gpu", plan["launch"])
        check_manifest("amd/k8s", plan, d)
        check_k8s("amd/k8s", plan, d)
    nv = json.load(open(os.path.join(EX, "llama-3.1-8b-pd-1node.plan.json")))
    check("gpu_vendor" not in nv["launch"], "an NVIDIA plan writes no launch.gpu_vendor", nv["launch"])


def k8s_trtllm(tmp):
    """TensorRT-LLM on the k8s target (no example has an image and
    single-node instances): the DeepSeek-V3 example with instances of one
    node each (dp 8, ep 8 on 2 nodes) and the release image its docs name
    (nvidia.github.io/TensorRT-LLM/1.0.0, run-benchmark-with-trtllm-serve)."""
    text = open(os.path.join(EX, "deepseek-v3-pd-trtllm.yaml")).read()
    text = text.replace("dp: 16\n      ep: 16", "dp: 8\n      ep: 8").replace("  nodes: 4\n", "  nodes: 2\n")
    text = text.replace("gpu-a, gpu-b, gpu-c, gpu-d", "gpu-a, gpu-b")
    text = text.replace("  engine: trtllm\n", "  engine: trtllm\n  image: nvcr.io/nvidia/tensorrt-llm/release:1.0.0\n")
    spec = os.path.join(tmp, "trtllm-1node.yaml")
    open(spec, "w").write(text)
    d = os.path.join(tmp, "trtllm-1node.k8s")
    p = run("compile", spec, "--emit", "k8s", "-o", d)
    check(p.returncode == 0, "trtllm-1node: compile --emit k8s", p.stderr)
    if p.returncode == 0:
        plan = json.load(open(os.path.join(d, "plan.json")))
        check_manifest("trtllm-1node/k8s", plan, d)
        check_k8s("trtllm-1node/k8s", plan, d)
    multi = os.path.join(tmp, "trtllm-2node.yaml")
    open(multi, "w").write(open(os.path.join(EX, "deepseek-v3-pd-trtllm.yaml")).read().replace(
        "  engine: trtllm\n", "  engine: trtllm\n  image: nvcr.io/nvidia/tensorrt-llm/release:1.0.0\n"))
    p = run("compile", multi, "--emit", "k8s", "-o", os.path.join(tmp, "multi"))
    check(p.returncode == 1 and "one MPI job" in p.stderr and "trtllm-llmapi-launch" in p.stderr
          and "docs/examples/tensorrt-llm" in p.stderr and not os.path.exists(os.path.join(tmp, "multi")),
          "k8s: a multi-node TensorRT-LLM instance is refused, naming the reason and its sources", p.stderr)
    clash = os.path.join(tmp, "clash.yaml")
    open(clash, "w").write(text.replace("name: generation", "name: context-http"))
    p = run("compile", clash, "--emit", "k8s", "-o", os.path.join(tmp, "clash"))
    check(p.returncode == 1 and "two Services `rankplan-context-http`" in p.stderr,
          "k8s: pools `context` and `context-http` (two Services of one name) are refused", p.stderr)


def compile_variant(tmp, name, text, target):
    """Writes spec text as NAME.yaml, runs `compile --emit TARGET`; the
    output directory and its plan, or (None, None) after a failed check."""
    spec = os.path.join(tmp, f"{name}.yaml")
    open(spec, "w").write(text)
    d = os.path.join(tmp, f"{name}.out")
    p = run("compile", spec, "--emit", target, "-o", d)
    if not check(p.returncode == 0, f"{name}: compile --emit {target}", p.stderr):
        return None, None
    return d, json.load(open(os.path.join(d, "plan.json")))


def instance_yamls(d):
    """The TensorRT-LLM instance YAMLs (trtllm-POOL-I.yaml) an emit wrote in d, parsed."""
    return [yaml.safe_load(open(os.path.join(d, f))) for f in sorted(os.listdir(d))
            if f.startswith("trtllm-") and f.endswith(".yaml")]


def trtllm_kv_fp8(tmp):
    """An FP8 KV cache under TensorRT-LLM: the 1.1.0 entry takes it as
    kv_cache_config.dtype in each instance's YAML (a key of the LLM API
    fixture), a bf16 one as `auto`; the 00209af entry, which names no such
    key, refuses it (E0705) rather than launch the checkpoint's dtype."""
    base = open(os.path.join(EX, "deepseek-v3-pd-trtllm.yaml")).read()
    fp8 = base.replace("kv_cache: bf16", "kv_cache: fp8")
    for name, text, want in (("trtllm110-kv-fp8", fp8, "fp8"), ("trtllm110-kv-bf16", base, "auto")):
        text = text.replace("  engine: trtllm\n", '  engine: { name: trtllm, version: "1.1.0" }\n')
        d, plan = compile_variant(tmp, name, text, "trtllm")
        if not plan:
            continue
        ys = instance_yamls(d)
        check(ys and all(y["kv_cache_config"]["dtype"] == want for y in ys),
              f"{name}: every instance's YAML sets kv_cache_config.dtype: {want}", [y.get("kv_cache_config") for y in ys])
    spec = os.path.join(tmp, "fp8-00209af.yaml")
    open(spec, "w").write(fp8)
    p = run("check", spec)
    check(p.returncode == 1 and "E0705" in p.stderr and "`fp8`" in p.stderr,
          "trtllm 00209af: an fp8 KV cache is refused (E0705)", p.stderr)


def trtllm_chunked(tmp):
    """serving.chunked_prefill reaches TensorRT-LLM's LLM API YAML as
    enable_chunked_prefill (a key of the fixture), only when the spec
    chooses it; a plan that names it under another engine is refused at
    emit, as check refuses the spec (E0712)."""
    base = open(os.path.join(EX, "deepseek-v3-pd-trtllm.yaml")).read()
    check("serving:\n  max_num_seqs: 128\n" in base, "trtllm-chunked: the example holds the text the variant edits")
    for name, serving, want in (("trtllm-chunked-on", "  chunked_prefill: true\n", True),
                                ("trtllm-chunked-unset", "", None)):
        text = base.replace("serving:\n  max_num_seqs: 128\n", "serving:\n" + serving + "  max_num_seqs: 128\n")
        d, plan = compile_variant(tmp, name, text, "trtllm")
        if not plan:
            continue
        ys = instance_yamls(d)
        check(ys and all(y.get("enable_chunked_prefill") is want for y in ys),
              f"{name}: every instance's YAML has enable_chunked_prefill {want}", [y.get("enable_chunked_prefill") for y in ys])
    plan = json.load(open(os.path.join(EX, "llama-3.1-70b-pd-vllm.plan.json")))
    plan["launch"]["chunked_prefill"] = False
    edited = os.path.join(tmp, "vllm-chunked.plan.json")
    json.dump(plan, open(edited, "w"))
    p = run("emit", edited, "-t", "vllm", "-o", os.path.join(tmp, "vllm-chunked"))
    check(p.returncode != 0 and "launch.chunked_prefill" in p.stderr and not os.path.exists(os.path.join(tmp, "vllm-chunked")),
          "emit: a vLLM plan with launch.chunked_prefill is refused, nothing written", p.stderr)


def redundant_experts(tmp):
    """model.moe.redundant_experts reaches the engines: DeepSeek-V3 with 24
    redundant experts (280 slots, 35 per ep rank of 8) writes SGLang's
    --ep-num-redundant-experts (0.5.6 entry) and vLLM's --enable-eplb with
    --eplb-config num_redundant_experts, every flag in that release's
    parser fixture; TensorRT-LLM, whose entries name no such setting, is
    refused rather than launched without the slots the plan counts. The
    fraction is set (0.9): SGLang's default with attention dp 8 on the
    H200 leaves less KV than one max_context request needs with the extra
    slots (docs/memory.md, "Engine accounting")."""
    base = open(os.path.join(EX, "deepseek-v3-pd.yaml")).read().replace(
        "  dtype: { weights: fp8, kv_cache: bf16, activations: bf16 }\n",
        "  dtype: { weights: fp8, kv_cache: bf16, activations: bf16 }\n  moe: { redundant_experts: 24 }\n").replace(
        "  mode: disaggregated\n", "  mode: disaggregated\n  memory: { utilization: 0.9 }\n")
    variants = [("sglang", '{ name: sglang, version: "0.5.6" }', ["--ep-num-redundant-experts", "24"]),
                ("vllm", "vllm", ["--enable-eplb", "--eplb-config", '{"num_redundant_experts":24}'])]
    for target, engine, want in variants:
        name = f"redundant-{target}"
        d, plan = compile_variant(tmp, name, base.replace("  engine: sglang\n", f"  engine: {engine}\n"), target)
        if not plan:
            continue
        check(all(pl["expert_map"]["slots_per_rank"] == 35 for pl in plan["pools"]),
              f"{name}: each ep rank holds 35 expert slots in the plan", [pl.get("expert_map") for pl in plan["pools"]][:1])
        check_shell(name, d)
        read_back(name, plan, d)
        words = [w for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for w in shlex.split(open(f).read(), comments=True)]
        check(all(w in words for w in want), f"{name}: the engine is told about the redundant slots ({' '.join(want)})")
    spec = os.path.join(tmp, "redundant-trtllm.yaml")
    open(spec, "w").write(base.replace("  engine: sglang\n", "  engine: trtllm\n"))
    p = run("compile", spec, "--emit", "trtllm", "-o", os.path.join(tmp, "redundant-trtllm"))
    check(p.returncode != 0 and "redundant_experts" in p.stderr and not os.path.exists(os.path.join(tmp, "redundant-trtllm")),
          "redundant-trtllm: refused, naming the setting its catalog entry lacks", p.stderr)


def emit_edited(tmp, plan, name, target, **launch):
    """Emits a copy of plan whose launch keys are replaced by launch; the
    completed process, and whether the output directory was left absent."""
    bad = json.loads(json.dumps(plan))
    bad["launch"].update(launch)
    path = os.path.join(tmp, f"{name}.json")
    json.dump(bad, open(path, "w"))
    out = os.path.join(tmp, name)
    p = run("emit", path, "--target", target, "-o", out)
    return p, not os.path.exists(out)


def vllm_sampler(tmp):
    """serving.sampler reaches vLLM as the environment setting its catalog
    entry names (VLLM_USE_FLASHINFER_SAMPLER=1 for flashinfer, =0 for
    torch) on every `vllm serve` command, the plan records it, and under
    vLLM 0.11 the ledger's pool grows with FlashInfer's smaller sampler
    warm-up (docs/memory.md; 0.19's two paths hold the same bytes);
    SGLang's entry names no sampler (E0709), and a plan whose
    launch.sampler the entry does not list is refused at emit."""
    base = open(os.path.join(EX, "llama-3.1-8b-pd-1node.yaml")).read()
    kv = {}
    for name in ("flashinfer", "torch"):
        text = base.replace("  engine: vllm\n", '  engine: { name: vllm, version: "0.11" }\n')
        _, plan = compile_variant(tmp, f"sampler011-{name}", text + f"serving: {{ sampler: {name} }}\n", "vllm")
        if plan:
            kv[name] = sum(r["memory"]["kv_cache"] for r in plan["ranks"])
    if "flashinfer" in kv and "torch" in kv:
        check(kv["flashinfer"] > kv["torch"], "sampler: vLLM 0.11's FlashInfer warm-up leaves the larger KV pool", kv)
    kv = {}
    for name, want in (("flashinfer", "1"), ("torch", "0")):
        d, plan = compile_variant(tmp, f"sampler-{name}", base + f"serving: {{ sampler: {name} }}\n", "vllm")
        if not plan:
            continue
        check(plan["launch"].get("sampler") == name, f"sampler-{name}: the plan records it", plan["launch"])
        check_shell(f"sampler-{name}", d)
        read_back(f"sampler-{name}", plan, d)
        cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                if c.kind() == "vllm"]
        check(cmds and all(c.env.get("VLLM_USE_FLASHINFER_SAMPLER") == want for c in cmds),
              f"sampler-{name}: every vllm serve runs with VLLM_USE_FLASHINFER_SAMPLER={want}",
              [c.env for c in cmds][:1])
        kv[name] = sum(r["memory"]["kv_cache"] for r in plan["ranks"])
    if "flashinfer" in kv and "torch" in kv:
        check(kv["flashinfer"] == kv["torch"], "sampler: vLLM 0.19's two paths leave the same KV pool", kv)
    src = os.path.join(tmp, "sampler-flashinfer.out", "plan.json")
    if os.path.exists(src):
        plan = json.load(open(src))
        for target in ("k8s", "dynamo"):
            d = os.path.join(tmp, f"sampler-{target}")
            p = run("emit", src, "--target", target, "-o", d)
            if not check(p.returncode == 0, f"sampler-{target}: emit", p.stderr):
                continue
            (check_k8s if target == "k8s" else check_dynamo)(f"sampler-{target}", plan, d)
        docs = [x for x in yaml.safe_load_all(open(os.path.join(tmp, "sampler-dynamo", "dynamo.yaml"))) if x]
        workers = [v for k, v in docs[-1]["spec"]["services"].items() if v.get("componentType") == "worker"]
        check(workers and all({"name": "VLLM_USE_FLASHINFER_SAMPLER", "value": "1"} in w.get("envs", []) for w in workers),
              "sampler-dynamo: every worker service sets VLLM_USE_FLASHINFER_SAMPLER=1 in its envs",
              [w.get("envs") for w in workers])
        check_vllm_env("sampler-dynamo", [e["name"] for w in workers for e in w.get("envs", [])],
                       plan["launch"]["engine_version"])
        text = open(os.path.join(tmp, "sampler-k8s", "k8s.yaml")).read()
        check(text.count("VLLM_USE_FLASHINFER_SAMPLER=1") >= len(plan["pools"]),
              "sampler-k8s: each pool's command sets VLLM_USE_FLASHINFER_SAMPLER=1", text.count("VLLM_USE_FLASHINFER_SAMPLER"))
    spec = os.path.join(tmp, "sampler-sglang.yaml")
    open(spec, "w").write(base.replace("  engine: vllm\n", "  engine: sglang\n") + "serving: { sampler: flashinfer }\n")
    p = run("check", spec)
    check(p.returncode == 1 and "E0709" in p.stderr and "has no sampler `flashinfer`" in p.stderr,
          "sampler under sglang: refused (E0709)", p.stderr)
    src = os.path.join(tmp, "sampler-flashinfer.out", "plan.json")
    if os.path.exists(src):
        p, absent = emit_edited(tmp, json.load(open(src)), "sampler-bogus", "vllm", sampler="bogus")
        check(p.returncode != 0 and "no sampler `bogus`" in p.stderr and absent,
              "emit: a plan naming a sampler the entry lacks is refused", p.stderr)
    plan = json.load(open(os.path.join(EX, "deepseek-v3-pd.plan.json")))
    p, absent = emit_edited(tmp, plan, "sampler-on-sglang", "sglang", sampler="flashinfer")
    check(p.returncode == 1 and "launch.sampler" in p.stderr and "has no sampler `flashinfer`" in p.stderr and absent,
          "emit: an SGLang plan naming a sampler is refused (its entry lists none)", p.stderr)


def overlap_schedule(tmp):
    """serving.overlap_schedule reaches the engines as the flag their
    catalog entry names against the engine's default: vLLM 0.11's
    --async-scheduling when true (nothing when false, its default), vLLM
    0.19's --no-async-scheduling when false (nothing when true, its
    default), SGLang's --disable-overlap-schedule when false; the plan
    records the choice, the decode step of vLLM with the overlap on hides
    its CPU work (a shorter TPOT, docs/cost-model.md), and a plan whose
    choice the entry has no flag for, or whose launch.overlap_schedule is
    not a boolean, is refused at emit."""
    base = open(os.path.join(EX, "llama-3.1-8b-pd-1node.yaml")).read()
    for version, flag, on in (("0.11", "--async-scheduling", True), ("0.19", "--no-async-scheduling", False)):
        text = base.replace("  engine: vllm\n", f'  engine: {{ name: vllm, version: "{version}" }}\n')
        tpot = {}
        for value in ("true", "false"):
            name = f"overlap-vllm{version}-{value}"
            d, plan = compile_variant(tmp, name, text + f"serving: {{ overlap_schedule: {value} }}\n", "vllm")
            if not plan:
                continue
            check(plan["launch"].get("overlap_schedule") is (value == "true"), f"{name}: the plan records it",
                  plan["launch"])
            check_shell(name, d)
            read_back(name, plan, d)
            cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                    if c.kind() == "vllm"]
            want = (value == "true") == on
            check(cmds and all((flag in c.flags) == want for c in cmds),
                  f"{name}: every vllm serve {'runs' if want else 'runs without'} {flag}",
                  [sorted(c.flags) for c in cmds][:1])
            tpot[value] = plan["estimates"]["tpot_ms"]
        if len(tpot) == 2:
            check(tpot["true"] < tpot["false"], f"overlap-vllm{version}: the overlapped engine's decode step is the "
                  "shorter", tpot)
    # the newest SGLang entry (commit 001067f) lists no such flag: 0.5.6's does
    sg = open(os.path.join(EX, "deepseek-v3-pd.yaml")).read().replace(
        "  engine: sglang\n", '  engine: { name: sglang, version: "0.5.6" }\n')
    d, plan = compile_variant(tmp, "overlap-sglang-false", sg.replace("serving:\n", "serving:\n  overlap_schedule: false\n", 1),
                              "sglang")
    if plan:
        check_shell("overlap-sglang-false", d)
        read_back("overlap-sglang-false", plan, d)
        cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                if c.kind() == "sglang"]
        check(cmds and all("--disable-overlap-schedule" in c.flags for c in cmds),
              "overlap-sglang-false: every SGLang server runs with --disable-overlap-schedule", len(cmds))
        p, absent = emit_edited(tmp, plan, "overlap-commit", "sglang", engine_version="001067f")
        check(p.returncode == 1 and "launch.overlap_schedule" in p.stderr and "overlap_off" in p.stderr and absent,
              "emit: a plan asking for a flag its engine entry lacks is refused", p.stderr)
        p, absent = emit_edited(tmp, plan, "overlap-type", "sglang", overlap_schedule="no")
        check(p.returncode != 0 and "launch.overlap_schedule: expected a boolean" in p.stderr and absent,
              "emit: launch.overlap_schedule that is not a boolean is named", p.stderr)


def cuda_graph_bs(tmp):
    """serving.cuda_graph_max_bs reaches the engines as the flag their
    catalog entry names: SGLang 0.5.6's --cuda-graph-max-bs, the newest
    SGLang entry's --cuda-graph-max-bs-decode, vLLM 0.11's
    --max-cudagraph-capture-size, each in that release's parser fixture;
    the plan records it, and under SGLang's default fraction the larger
    graph batch leaves a smaller KV pool (its reserve counts 2 MiB a
    request, docs/memory.md). TensorRT-LLM takes it in each instance's
    YAML, cuda_graph_config.max_batch_size with enable_padding (its
    entries' `yaml_keys`, in the LLM API key fixture), and on no command
    line. A plan asking it of
    an entry with neither (generic), or one whose value is not a positive
    count, is refused at emit."""
    base = open(os.path.join(EX, "llama-3.1-8b-pd-1node.yaml")).read()
    cases = [("sglang-056", '{ name: sglang, version: "0.5.6" }', "sglang", "--cuda-graph-max-bs"),
             ("sglang-new", "sglang", "sglang", "--cuda-graph-max-bs-decode"),
             ("vllm", "vllm", "vllm", "--max-cudagraph-capture-size")]
    for name, engine, kind, flag in cases:
        text = base.replace("  engine: vllm\n", f"  engine: {engine}\n")
        d, plan = compile_variant(tmp, f"graphs-{name}", text + "serving: { cuda_graph_max_bs: 384 }\n", kind)
        if not plan:
            continue
        check(plan["launch"].get("cuda_graph_max_bs") == 384, f"graphs-{name}: the plan records it", plan["launch"])
        check_shell(f"graphs-{name}", d)
        read_back(f"graphs-{name}", plan, d)
        cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                if c.kind() == kind]
        check(cmds and all(c.one(flag) == "384" for c in cmds),
              f"graphs-{name}: every {kind} server runs with {flag} 384", [c.flags for c in cmds][:1])
        if name == "sglang-056":
            d0, plan0 = compile_variant(tmp, "graphs-sglang-default", text, kind)
            if plan0:
                kv = [{pl["name"]: sum(plan_["ranks"][r]["memory"]["kv_cache"] for r in range(*pl["ranks"]))
                       for pl in plan_["pools"]} for plan_ in (plan0, plan)]
                # the H100's default graph batch: 256 below --tp-size 4 (prefill, tp 2), 512 from it (decode, tp 4)
                check(kv[1]["prefill"] < kv[0]["prefill"] and kv[1]["decode"] > kv[0]["decode"],
                      "graphs-sglang: 384 graphs shrink the tp-2 pool's KV (default 256) and grow the tp-4 one's (512)", kv)
    text = base.replace("  engine: vllm\n", "  engine: trtllm\n") + "serving: { cuda_graph_max_bs: 384 }\n"
    d, plan = compile_variant(tmp, "graphs-trtllm", text, "trtllm")
    if plan:
        read_back("graphs-trtllm", plan, d)
        check_yaml("graphs-trtllm", plan, d)
        ys = [yaml.safe_load(open(f)) for f in sorted(glob.glob(os.path.join(d, "trtllm-*.yaml")))]
        check(ys and all(y.get("cuda_graph_config") == {"max_batch_size": 384, "enable_padding": True} for y in ys),
              "graphs-trtllm: every instance's YAML captures decode batches up to 384, padded", ys[:1])
        sh = "".join(open(f).read() for f in glob.glob(os.path.join(d, "node-*.sh")))
        check("cuda_graph" not in sh and "384" not in sh, "graphs-trtllm: no command line carries it", sh[:400])
        dy = os.path.join(tmp, "graphs-trtllm.dynamo")
        p = run("emit", os.path.join(d, "plan.json"), "--target", "dynamo", "-o", dy)
        if check(p.returncode == 0, "graphs-trtllm: emit --target dynamo", p.stderr):
            check_dynamo("graphs-trtllm/dynamo", plan, dy)
            cm = [x for x in yaml.safe_load_all(open(os.path.join(dy, "dynamo.yaml"))) if x][0]
            check(all(yaml.safe_load(v).get("cuda_graph_config") == {"max_batch_size": 384, "enable_padding": True}
                      for v in cm["data"].values()),
                  "graphs-trtllm/dynamo: the ConfigMap's engine YAMLs carry the padded graph batch", sorted(cm["data"]))
    src = os.path.join(tmp, "graphs-vllm.out", "plan.json")
    if os.path.exists(src):
        cat = os.path.join(tmp, "catalog-no-graph-key")
        shutil.copytree(os.path.join(SRC, "plans", "catalog"), cat)
        for f in glob.glob(os.path.join(cat, "engines", "trtllm-*.yaml")):
            text = open(f).read()
            open(f, "w").write(text[:text.index("yaml_keys:")])
        out = os.path.join(tmp, "graphs-nokey")
        p = run("emit", os.path.join(tmp, "graphs-trtllm.out", "plan.json"), "--target", "trtllm", "-o", out,
                "--catalog", cat)
        check(p.returncode == 1 and "launch.cuda_graph_max_bs" in p.stderr and not os.path.exists(out),
              "emit: a CUDA-graph batch asked of an entry with neither flag nor YAML key is refused", p.stderr)
        p, absent = emit_edited(tmp, json.load(open(src)), "graphs-zero", "vllm", cuda_graph_max_bs=0)
        check(p.returncode != 0 and "cuda_graph_max_bs" in p.stderr and absent,
              "emit: launch.cuda_graph_max_bs outside [1, 2^30] is named", p.stderr)


def sglang_versions(tmp):
    """A spec naming an SGLang release gets the entry covering it, and the
    spelling that release's parser takes where the releases differ
    (plans/catalog/engines/sglang-*.yaml): --nccl-port only from 0.4.9 on
    (the 0.4.7 entry, for 0.4.7 to 0.4.10.post1, writes none); the KV dtype
    word for bf16 `auto` before 0.5.4, `bf16` from 0.5.4 on. Every flag is
    checked against the fixture of the entry the plan names."""
    base = open(os.path.join(EX, "deepseek-v3-pd.yaml")).read()
    cases = [("0.4.8", "0.4.7", False, "auto"), ("0.5.2", "0.4.10.post2", True, "auto"),
             ("0.5.5.post1", "0.5.4", True, "bf16"), ("0.5.10", "0.5.6", True, "bf16")]
    for asked, entry, nccl, kv in cases:
        text = base.replace("  engine: sglang\n", f'  engine: {{ name: sglang, version: "{asked}" }}\n')
        if entry == "0.4.7":  # no EP there: experts tp-sharded over the instance
            text = text.replace("ep: 8\n", "ep: 1\n      etp: 8\n")
        name = f"sglang-{asked}"
        d, plan = compile_variant(tmp, name, text, "sglang")
        if not plan:
            continue
        check(plan["launch"]["engine_version"] == entry, f"{name}: the plan names entry {entry}",
              plan["launch"]["engine_version"])
        check_shell(name, d)
        m = check_manifest(name, plan, d)
        ports = read_back(name, plan, d)
        check_router(name, plan, d, ports, m)
        check_ports(name, ports)
        cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                if c.kind() == "sglang"]
        check(cmds and all(("--nccl-port" in c.flags) == nccl and c.one("--kv-cache-dtype") == kv for c in cmds),
              f"{name}: {'--nccl-port' if nccl else 'no --nccl-port'} and --kv-cache-dtype {kv}, as that release "
              "spells them", [(sorted(c.flags), c.one("--kv-cache-dtype")) for c in cmds][:1])
    text = base.replace("  engine: sglang\n", '  engine: { name: sglang, version: "0.4.8" }\n')
    spec = os.path.join(tmp, "sglang-0.4.8-ep.yaml")
    open(spec, "w").write(text)
    p = run("check", spec)
    check(p.returncode == 1 and "E0703" in p.stderr and "`ep` 8" in p.stderr and "sglang` 0.4.7" in p.stderr,
          "sglang 0.4.8: ep 8 is refused (EP needs --enable-ep-moe there)", p.stderr)
    text = base.replace("  engine: sglang\n", '  engine: { name: sglang, version: "0.5.2" }\n').replace(
        "      tp: 1\n      dp: 8\n      ep: 8\n", "      tp: 1\n      pp: 2\n      dp: 4\n      ep: 4\n", 1)
    open(spec, "w").write(text)
    p = run("check", spec)
    check(p.returncode == 1 and "E0703" in p.stderr and "`pp` 2" in p.stderr and "0.4.10.post2" in p.stderr,
          "sglang 0.5.2: pp 2 is refused (its loader gives the last stage the whole remainder)", p.stderr)


def emitted_cmds(tmp, name, text, target):
    """Compiles spec text to TARGET's launch files, reads them back against
    the plan, and returns the plan and its engine commands ((None, [])
    after a failed compile)."""
    d, plan = compile_variant(tmp, name, text, target)
    if not plan:
        return None, []
    read_back(name, plan, d)
    return plan, [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                  if c.kind() == target]


def sglang_attention_backend(tmp):
    """SGLang from 0.5.4 runs DeepseekV3ForCausalLM on compute capability 10
    GPUs with trtllm_mla, which takes pages of 32 or 64 tokens (another
    size runs as 64) and a KV dtype of fp8_e4m3 or auto only (server_args.py
    of 0.5.4 and 0.5.6): on B200 the plan pins the backend, counts pages of
    64 and writes bf16 as `auto`; on H200, or under a release before 0.5.4,
    the page is SGLang's own default, 1 (docs/engines.md, "Attention
    backends")."""
    base = open(os.path.join(EX, "deepseek-v3-pd.yaml")).read()
    b200 = base.replace("preset: h200-sxm", "preset: b200")
    fp8 = b200.replace("kv_cache: bf16", "kv_cache: fp8")
    v = lambda t, ver: t.replace("  engine: sglang\n", f'  engine: {{ name: sglang, version: "{ver}" }}\n')
    cases = [("b200", b200, "trtllm_mla", 64, "auto"), ("b200-056", v(b200, "0.5.6"), "trtllm_mla", 64, "auto"),
             ("b200-054-fp8", v(fp8, "0.5.4"), "trtllm_mla", 64, "fp8_e4m3"),
             ("b200-0410", v(b200, "0.5.2"), None, 1, "auto"), ("h200", base, None, 1, "bf16")]
    for tag, text, backend, page, kv in cases:
        name = f"sglang-attn-{tag}"
        plan, cmds = emitted_cmds(tmp, name, text, "sglang")
        if not plan:
            continue
        L = plan["launch"]
        check(L.get("attention_backend") == backend and L["kv_block"] == page,
              f"{name}: the plan's attention backend {backend} and KV pages of {page}",
              (L.get("attention_backend"), L["kv_block"]))
        check(cmds and all(c.one("--attention-backend") == backend and c.one("--page-size") == str(page) and
                           c.one("--kv-cache-dtype") == kv for c in cmds),
              f"{name}: --attention-backend {backend}, --page-size {page}, --kv-cache-dtype {kv}",
              [(c.one("--attention-backend"), c.one("--page-size"), c.one("--kv-cache-dtype")) for c in cmds][:1])
    refused = [(b200.replace("  engine: sglang\n", "  engine: sglang\n  memory: { kv_block: 16 }\n"),
                "`kv_block: 16` as 64"),
               (b200.replace("kv_cache: bf16, activations: bf16", "kv_cache: fp16, activations: bf16"),
                "refuses a `fp16` KV cache")]
    for i, (text, want) in enumerate(refused):
        spec = os.path.join(tmp, f"sglang-attn-refused-{i}.yaml")
        open(spec, "w").write(text)
        p = run("check", spec)
        check(p.returncode == 1 and "E0715" in p.stderr and want in p.stderr,
              f"sglang on B200: {want} is refused (E0715)", p.stderr)
    oss = ("version: 1\nmodel: { preset: gpt-oss-120b }\nhardware: { preset: b200, nodes: 1, gpus_per_node: 8 }\n"
           "workload: { input_tokens: 2000, output_tokens: 500 }\ndeployment:\n  mode: aggregated\n"
           "  engine: sglang\n  pools: [ { name: main, replicas: 2, tp: 4 } ]\n")
    for tag, text, backend, page in (("oss-b200", oss, "trtllm_mha", 64),
                                     ("oss-b200-16", oss.replace("  engine: sglang\n",
                                                                 "  engine: sglang\n  memory: { kv_block: 16 }\n"),
                                      "trtllm_mha", 16),
                                     ("oss-h200", oss.replace("preset: b200", "preset: h200-sxm"), None, 1)):
        name = f"sglang-attn-{tag}"
        plan, cmds = emitted_cmds(tmp, name, text, "sglang")
        if not plan:
            continue
        check(plan["launch"].get("attention_backend") == backend and plan["launch"]["kv_block"] == page and cmds and
              all(c.one("--attention-backend") == backend and c.one("--page-size") == str(page) for c in cmds),
              f"{name}: gpt-oss runs {backend} with pages of {page}",
              (plan["launch"].get("attention_backend"), plan["launch"]["kv_block"]))
    spec = os.path.join(tmp, "sglang-attn-oss-8.yaml")
    open(spec, "w").write(oss.replace("  engine: sglang\n", "  engine: sglang\n  memory: { kv_block: 8 }\n"))
    p = run("check", spec)
    check(p.returncode == 1 and "E0715" in p.stderr and "16, 32 or 64" in p.stderr,
          "sglang gpt-oss on B200: trtllm_mha runs `kv_block: 8` as 64 (E0715)", p.stderr)
    spec = os.path.join(tmp, "sglang-attn-32.yaml")
    open(spec, "w").write(b200.replace("  engine: sglang\n", "  engine: sglang\n  memory: { kv_block: 32 }\n"))
    p = run("check", spec)
    check(p.returncode == 0, "sglang on B200: trtllm_mla's other page size, 32, is kept", p.stderr)


def vllm_mla_blocks(tmp):
    """vLLM's MLA attention backends take certain KV blocks (vllm/platforms/
    cuda.py and vllm/v1/attention/backends/mla/ of the 0.11.x and 0.19.x
    wheels): 0.11 forces 64 on Hopper (FlashMLA) and 128 on compute
    capability 10.0 (CUTLASS MLA); 0.19 runs FlashInfer MLA (32 or 64) on
    compute capability 10 unless --block-size rules it out, and FlashMLA
    (64) for an fp8 KV cache on Hopper. The plan counts, and --block-size
    writes, the block vLLM runs (docs/engines.md, "Attention backends")."""
    base = open(os.path.join(EX, "deepseek-v3-pd.yaml")).read()
    def spec(ver, gpu="h200-sxm", kv="bf16", block=None):
        t = base.replace("  engine: sglang\n", f'  engine: {{ name: vllm, version: "{ver}" }}\n')
        t = t.replace("preset: h200-sxm", f"preset: {gpu}").replace("kv_cache: bf16", f"kv_cache: {kv}")
        t = t.replace("serving:\n", "serving:\n  kv_transfer: nixl\n") if "kv_transfer" not in t else t
        return t.replace("  engine: {", f"  memory: {{ kv_block: {block} }}\n  engine: {{") if block else t
    cases = [("019-b200", spec("0.19", "b200"), 32), ("019-b300", spec("0.19", "b300"), 32),
             ("019-h200", spec("0.19"), 16), ("019-h200-fp8", spec("0.19", kv="fp8"), 64),
             ("011-h200", spec("0.11"), 64), ("0112-b200", spec("0.11.2", "b200"), 128),
             ("011-b300", spec("0.11", "b300"), 16)]
    for tag, text, block in cases:
        name = f"vllm-mla-{tag}"
        plan, cmds = emitted_cmds(tmp, name, text, "vllm")
        if not plan:
            continue
        check(plan["launch"]["kv_block"] == block and "attention_backend" not in plan["launch"] and cmds and
              all(c.one("--block-size") == str(block) for c in cmds),
              f"{name}: the plan counts and --block-size writes {block}",
              (plan["launch"]["kv_block"], [c.one("--block-size") for c in cmds][:1]))
    for tag, text, code, want in (("011-h200-16", spec("0.11", block=16), "E0715", "`kv_block: 16` as 64"),
                                  ("0110-h200-128", spec("0.11.0", block=128), "E0715", "`kv_block: 128` as 64"),
                                  ("0112-h200-128", spec("0.11.2", block=128), None, ""),
                                  ("019-b200-16", spec("0.19", "b200", block=16), "W0704", "runs TRITON_MLA instead"),
                                  ("019-b200-64", spec("0.19", "b200", block=64), None, "")):
        f = os.path.join(tmp, f"vllm-mla-{tag}.yaml")
        open(f, "w").write(text)
        p = run("check", f)
        ok = (p.returncode == (1 if code and code.startswith("E") else 0) and
              (code in p.stderr and want in p.stderr if code else "E0715" not in p.stderr and "W0704" not in p.stderr))
        check(ok, f"vllm {tag}: {code or 'no E0715 or W0704'} {want}".rstrip(), p.stderr)


def trtllm_versions(tmp):
    """A spec naming TensorRT-LLM 1.0.0 or 1.1.0 gets that release's entry and
    the spelling of its parser (plans/catalog/engines/trtllm-1.*.yaml): the
    LLM API YAML goes with --extra_llm_api_options, which both releases have,
    not --config, which they lack; every flag is checked against the fixture
    of the entry picked. A bare `engine: trtllm` keeps the 00209af entry and
    --config. Releases no entry was read for (1.0.1) are refused."""
    base = open(os.path.join(EX, "deepseek-v3-pd-trtllm.yaml")).read()
    for asked, entry, yflag, other in [("1.0.0", "1.0.0", "--extra_llm_api_options", "--config"),
                                       ("1.1.0", "1.1.0", "--extra_llm_api_options", "--config"),
                                       (None, "00209af", "--config", "--extra_llm_api_options")]:
        name = f"trtllm-{asked or 'bare'}"
        text = base if asked is None else base.replace(
            "  engine: trtllm\n", f'  engine: {{ name: trtllm, version: "{asked}" }}\n')
        d, plan = compile_variant(tmp, name, text, "trtllm")
        if not plan:
            continue
        check(plan["launch"]["engine_version"] == entry, f"{name}: the plan names entry {entry}",
              plan["launch"]["engine_version"])
        check_shell(name, d)
        m = check_manifest(name, plan, d)
        ports = read_back(name, plan, d)
        check_router(name, plan, d, ports, m)
        cmds = [c for f in sorted(glob.glob(os.path.join(d, "node-*.sh"))) for c in commands(open(f).read())
                if c.kind() in ("trtllm", "mpirun")]  # a multi-node instance: trtllm-serve under mpirun
        check(cmds and all(c.one(yflag) and other not in c.flags for c in cmds),
              f"{name}: the engine YAML is passed with {yflag}, not {other}", [sorted(c.flags) for c in cmds][:1])
    text = base.replace("  engine: trtllm\n", '  engine: { name: trtllm, version: "1.0.1" }\n')
    spec = os.path.join(tmp, "trtllm-1.0.1.yaml")
    open(spec, "w").write(text)
    p = run("check", spec)
    check(p.returncode == 1 and "E0701" in p.stderr and "1.0.0" in p.stderr and "1.1.0" in p.stderr,
          "trtllm 1.0.1: no entry covers it (only the 1.0.0 and 1.1.0 pages were read)", p.stderr)


def directory_rules(tmp):
    plan = os.path.join(EX, "llama-3.1-8b-pd-1node.plan.json")
    d = os.path.join(tmp, "rules")
    os.makedirs(os.path.join(d, "keep"))
    open(os.path.join(d, "keep", "x"), "w").write("x")
    p = run("emit", plan, "-t", "vllm", "-o", os.path.join(d, "keep"))
    check(p.returncode == 2 and "neither empty nor an earlier emit output" in p.stderr
          and os.listdir(os.path.join(d, "keep")) == ["x"], "an unrelated directory is refused and left alone", p.stderr)
    out = os.path.join(d, "out")
    check(run("emit", plan, "-t", "vllm", "-o", out).returncode == 0, "emit into a new directory")
    p = run("emit", plan, "-t", "shell", "-o", out)
    check(p.returncode == 0 and "launch.sh" in os.listdir(out), "an earlier emit output is replaced", p.stderr)
    check(sorted(x for x in os.listdir(d) if x.startswith(".")) == [], "no temporary directory is left", os.listdir(d))
    open(os.path.join(d, "file"), "w").write("x")
    check(run("emit", plan, "-t", "vllm", "-o", os.path.join(d, "file")).returncode == 2, "a file as -o is refused")


def refusals(tmp):
    generic = os.path.join(EX, "llama-3.1-70b-pd.plan.json")
    p = run("emit", generic, "-t", "vllm", "-o", os.path.join(tmp, "g"))
    check(p.returncode == 1 and "no `launch` key" in p.stderr, "a generic-engine plan is refused (exit 1)", p.stderr)
    p = run("emit", os.path.join(EX, "deepseek-v3-pd.plan.json"), "-t", "vllm", "-o", os.path.join(tmp, "w"))
    check(p.returncode == 1 and "another engine" in p.stderr, "another engine's target is refused", p.stderr)
    p = run("emit", os.path.join(EX, "deepseek-v3-pd.plan.json"), "-t", "k9s", "-o", os.path.join(tmp, "w"))
    check(p.returncode == 2 and "unknown target" in p.stderr, "an unknown target is a usage error", p.stderr)
    p = run("emit", os.path.join(EX, "deepseek-v3-pd.plan.json"), "-o", os.path.join(tmp, "w"))
    check(p.returncode == 2 and "--target" in p.stderr, "a missing --target is a usage error", p.stderr)
    check(run("emit", "--help").returncode == 0 and "targets:" in run("emit", "--help").stdout, "emit --help")
    p = run("emit", os.path.join(EX, "deepseek-v3-pd-trtllm.plan.json"), "-t", "k8s", "-o", os.path.join(tmp, "k"))
    check(p.returncode == 1 and "launch.image is null" in p.stderr, "k8s without deployment.image is refused", p.stderr)
    split = os.path.join(tmp, "split")
    run("compile", os.path.join(EX, "deepseek-v3-pd.yaml"), "-o", os.path.join(tmp, "whole.json"),
        "--split-by-node", split)
    p = run("emit", os.path.join(split, "node-0.plan.json"), "-t", "sglang", "-o", os.path.join(tmp, "s"))
    check(p.returncode == 1 and "--split-by-node" in p.stderr, "a node file is refused", p.stderr)
    # compile --emit: the plan and the files at once; E0708 without a source
    d = os.path.join(tmp, "ce")
    p = run("compile", os.path.join(EX, "llama-3.1-70b-pd-vllm.yaml"), "--emit", "vllm", "-o", d)
    ok = p.returncode == 0 and os.path.exists(os.path.join(d, "plan.json"))
    check(ok and open(os.path.join(d, "plan.json"), "rb").read() ==
          open(os.path.join(EX, "llama-3.1-70b-pd-vllm.plan.json"), "rb").read(),
          "compile --emit writes the golden plan as plan.json beside the launch files", p.stderr)
    nosrc = os.path.join(tmp, "nosrc.yaml")
    spec = open(os.path.join(EX, "llama-3.1-70b-pd-vllm.yaml")).read().replace(
        "  source: meta-llama/Llama-3.1-70B-Instruct\n", "")
    open(nosrc, "w").write(spec)
    p = run("compile", nosrc, "-o", os.path.join(tmp, "preset-src.json"))
    src = p.returncode == 0 and json.load(open(os.path.join(tmp, "preset-src.json")))["launch"]["source"]
    check(src == "meta-llama/Llama-3.1-70B", "without model.source the preset's checkpoint is launched", p.stderr)
    open(nosrc, "w").write(spec.replace("  preset: llama-3.1-70b\n", "  hf_config: %s\n" % os.path.join(
        SRC, "tests", "hf", "fixtures", "Llama-3.1-70B.json")))
    p = run("compile", nosrc, "--emit", "shell", "-o", os.path.join(tmp, "ns"))
    check(p.returncode == 1 and "E0708" in p.stderr and "model.source" in p.stderr and not os.path.exists(
        os.path.join(tmp, "ns")), "compile --emit without model.source is E0708 and writes nothing", p.stderr)
    check(not [x for x in os.listdir(tmp) if x.startswith(".rankplan-plan-")], "compile --emit leaves no temporary plan")


def dynamo_variant(tmp, name, base, *edits):
    """compile --emit dynamo of example `base` with text edits (old, new)."""
    text = open(os.path.join(EX, base + ".yaml")).read()
    for old, new in edits:
        check(old in text, f"dynamo/{name}: the example holds the text the variant edits", old)
        text = text.replace(old, new)
    spec = os.path.join(tmp, f"dynamo-{name}.yaml")
    open(spec, "w").write(text)
    d = os.path.join(tmp, f"dynamo-{name}")
    return run("compile", spec, "--emit", "dynamo", "-o", d), d


def dynamo_cases(tmp):
    """Multi-node vLLM workers (Ray and data parallel), quoting, and what
    the dynamo target refuses."""
    decode = "      replicas: 2\n      tp: 8\n"
    base = "llama-3.1-70b-pd-vllm"
    for case, new in (("ray", "      replicas: 1\n      tp: 8\n      pp: 2\n"),
                      ("dp", "      replicas: 1\n      tp: 8\n      dp: 2\n")):
        p, d = dynamo_variant(tmp, case, base, (decode, new))
        check(p.returncode == 0, f"dynamo/{case}: a decode instance over two nodes is emitted", p.stderr)
        if p.returncode == 0:
            plan = json.load(open(os.path.join(d, "plan.json")))
            check_dynamo(f"dynamo/{case}", plan, d)
            y = yaml.safe_load(open(os.path.join(d, "dynamo.yaml")))
            check(y["spec"]["services"]["decode"]["multinode"] == {"nodeCount": 2},
                  f"dynamo/{case}: the decode service spans two nodes")
    trt_image = ("deployment:\n", "deployment:\n  image: example/trtllm:1\n")
    trt_revision = ("  source: deepseek-ai/DeepSeek-V3\n", "  source: deepseek-ai/DeepSeek-V3\n  revision: main\n")
    p, d = dynamo_variant(tmp, "trtllm", "deepseek-v3-pd-trtllm", trt_image)
    check(p.returncode == 0, "dynamo/trtllm: the TensorRT-LLM example with an image is emitted", p.stderr)
    if p.returncode == 0:
        check_manifest("dynamo/trtllm", json.load(open(os.path.join(d, "plan.json"))), d)
        check_dynamo("dynamo/trtllm", json.load(open(os.path.join(d, "plan.json"))), d)
        check_golden("deepseek-v3-pd-trtllm-image", "dynamo", d)
    # the example sets serving.overlap_schedule: true
    p, d = dynamo_variant(tmp, "overlap", base)
    check(p.returncode == 0, "dynamo/overlap: serving.overlap_schedule under the dynamo target", p.stderr)
    if p.returncode == 0:
        check_dynamo("dynamo/overlap", json.load(open(os.path.join(d, "plan.json"))), d)
        services = yaml.safe_load(open(os.path.join(d, "dynamo.yaml")))["spec"]["services"]
        workers = [v["extraPodSpec"]["mainContainer"]["args"] for v in services.values()
                   if v.get("componentType") == "worker"]
        check(workers and all("--async-scheduling" in a for a in workers),
              "dynamo/overlap: every vLLM worker runs --async-scheduling", workers[:1])
    name = ("  served_model_name: llama-3.1-70b\n", "  served_model_name: \"llama 70b\"\n")
    p, d = dynamo_variant(tmp, "quoted", base, name)
    args = yaml.safe_load(open(os.path.join(d, "dynamo.yaml")))["spec"]["services"]["decode"]["extraPodSpec"][
        "mainContainer"]["args"] if p.returncode == 0 else []
    check("llama 70b" in args and args[args.index("llama 70b") - 1] == "--served-model-name",
          "dynamo: a served model name with a space is one argument", (p.stderr, args))
    refusals = [("ray-dp", base, [(decode, "      replicas: 1\n      tp: 8\n      pp: 2\n      dp: 2\n"),
                                  ("  nodes: 4\n", "  nodes: 6\n")], "a tp x pp engine across nodes with dp 2"),
                ("quoted-multinode", base, [(decode, "      replicas: 1\n      tp: 8\n      pp: 2\n"), name],
                 "joins a multi-node worker's arguments with spaces, unquoted"),
                ("frontend", base, [("    - name: decode\n", "    - name: frontend\n")], "and not `frontend`"),
                ("trtllm-revision", "deepseek-v3-pd-trtllm", [trt_image, trt_revision],
                 "Dynamo's TensorRT-LLM worker has no flag for the model revision"),
                ("trtllm-cp", base, [('  engine: { name: vllm, version: "0.11.0" }\n', "  engine: trtllm\n"),
                                     ("  sampler: torch\n", ""),  # vLLM's key: E0709 under trtllm
                                     ("      role: prefill\n      replicas: 2\n      tp: 4\n",
                                      "      role: prefill\n      replicas: 2\n      tp: 2\n      cp: 2\n")],
                 "pool `prefill`: Dynamo's TensorRT-LLM worker has no flag for context parallelism (cp 2)")]
    for case, ex, edits, why in refusals:
        p, d = dynamo_variant(tmp, case, ex, *edits)
        check(p.returncode == 1 and why in p.stderr and not os.path.exists(d),
              f"dynamo/{case}: refused ({why}), nothing written", p.stderr)
    p = run("emit", os.path.join(EX, "deepseek-v3-pd-trtllm.plan.json"), "-t", "dynamo", "-o", os.path.join(tmp, "dn"))
    check(p.returncode == 1 and "launch.image is null" in p.stderr, "dynamo without deployment.image is refused", p.stderr)


def docs_excerpts():
    """Every launch file docs/engines.md quotes is the golden it names: the
    lines of a code block that follows a mention of a file under
    tests/engines/golden/ occur in that file, in order (an abridged
    excerpt may leave lines out, and marks where with a `# ...` line)."""
    doc = open(os.path.join(SRC, "docs", "engines.md")).read().split("\n")
    seen = 0
    i = 0
    while i < len(doc):
        if not doc[i].startswith("```"):
            i += 1
            continue
        j = doc.index("```", i + 1) if "```" in doc[i + 1:] else len(doc)
        before = " ".join(doc[max(0, i - 4):i])
        m = re.search(r"\(?(?:from )?(tests/engines/golden/[^\s),;:]+)", before)
        if m:
            gold = open(os.path.join(SRC, m.group(1))).read().split("\n")
            want = [l.rstrip() for l in doc[i + 1:j] if l.strip() and not l.strip().startswith("# ...")]
            k = 0
            for line in (l.rstrip() for l in gold):
                if k < len(want) and line == want[k]:
                    k += 1
            check(k == len(want), f"docs/engines.md line {i + 1}: the excerpt is {m.group(1)}",
                  want[k] if k < len(want) else "")
            seen += 1
        i = j + 1
    check(seen >= 3, f"docs/engines.md quotes at least three goldens ({seen})")


tmp = tempfile.mkdtemp(prefix="rankplan-emit-")
try:
    docs_excerpts()
    n = sum(emit_example(tmp, s) for s in sorted(glob.glob(os.path.join(EX, "*.yaml"))))
    check(n >= 5, f"at least five examples name an engine ({n})")
    k8s_trtllm(tmp)
    k8s_amd(tmp)
    trtllm_kv_fp8(tmp)
    trtllm_chunked(tmp)
    sglang_versions(tmp)
    sglang_attention_backend(tmp)
    vllm_mla_blocks(tmp)
    vllm_sampler(tmp)
    overlap_schedule(tmp)
    cuda_graph_bs(tmp)
    redundant_experts(tmp)
    trtllm_versions(tmp)
    directory_rules(tmp)
    refusals(tmp)
    dynamo_cases(tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(rptest.finish())
