#!/usr/bin/env python3
"""Lua hooks through `rankplan compile`.

1. Golden plans: every plans/examples/hook-*.yaml compiles to the bytes of
   plans/examples/hook-*.plan.json, twice in a row and with
   RANKPLAN_HOOK_TWICE=1 (the determinism check), and the plan does the job
   its hook promises (checked on the plan, not on the hook's word):
     hook-rack-spread:  each pool's replicas spread evenly over the racks;
     hook-pd-same-node: prefill replica i and decode replica i share a node.
2. Abuse through the CLI: each tests/hooks/abuse/*.lua used as the
   placement hook of a small spec ends in exit 1 with its diagnostic code,
   never a crash, an internal error or a sanitizer report.
3. Long strings: E0620 names the hook file and line; a hook that builds
   strings of exactly the per-string limit still compiles.

`test_hooks_cli.py --update` rewrites the golden plans (review the diff).
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

SRC = pathlib.Path(os.environ.get("SRCROOT") or pathlib.Path(__file__).resolve().parents[2])
RANKPLAN = os.environ.get("RANKPLAN") or str(SRC / "build" / "rankplan")
UPDATE = "--update" in sys.argv
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def env(**extra):
    e = dict(os.environ, NO_COLOR="1")
    e.setdefault("RANKPLAN_CATALOG", str(SRC / "plans" / "catalog"))
    for k in list(e):
        if k.startswith("RANKPLAN_HOOK_"):
            del e[k]
    e.update(extra)
    return e


def compile_spec(spec_rel, out, cwd, **extra):
    return subprocess.run([RANKPLAN, "compile", spec_rel, "-o", str(out)], cwd=cwd,
                          env=env(**extra), capture_output=True, timeout=120)


def sane(p, what):
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0 or p.returncode == 70 or "Sanitizer" in err or "runtime error" in err:
        fail(f"{what}: crashed or internal error (exit {p.returncode})\n{err[-3000:]}")
        return False
    return True


def check_rack_spread(plan, spec_text):
    per_rack = 2
    racks = {}
    for r in plan["ranks"]:
        racks.setdefault((r["pool"], r["instance"]), set()).add(r["node"] // per_rack)
    pools = {}
    for (pool, inst), rs in racks.items():
        if len(rs) != 1:
            fail(f"hook-rack-spread: {pool} replica {inst} spans racks {sorted(rs)}")
        pools.setdefault(pool, []).append(min(rs))
    for pool, rs in pools.items():
        n_racks = 2
        cap = -(-len(rs) // n_racks)
        for rack in range(n_racks):
            if rs.count(rack) > cap:
                fail(f"hook-rack-spread: pool {pool} has {rs.count(rack)} replicas in rack {rack}, expected at most {cap}")


def check_pd_same_node(plan, spec_text):
    nodes = {}
    for r in plan["ranks"]:
        nodes.setdefault((r["pool"], r["instance"]), set()).add(r["node"])
    insts = sorted(i for (p, i) in nodes if p == "prefill")
    if not insts:
        fail("hook-pd-same-node: no prefill ranks in the plan")
    for i in insts:
        pn, dn = nodes.get(("prefill", i)), nodes.get(("decode", i))
        if not dn or len(pn) != 1 or pn != dn:
            fail(f"hook-pd-same-node: prefill replica {i} on nodes {sorted(pn)}, decode replica {i} on {sorted(dn or [])}")
    # the point of the hook: the KV of a request moves over NVLink only
    req = (plan.get("kv_reshard") or [{}])[0].get("request", {})
    if not (req.get("bytes_scale_up", 0) > 0 and req.get("bytes_scale_out") == 0):
        fail(f"hook-pd-same-node: expected all KV bytes on scale-up links, got {req}")


CHECKS = {"hook-rack-spread": check_rack_spread, "hook-pd-same-node": check_pd_same_node}


def golden_plans():
    examples = SRC / "plans" / "examples"
    specs = sorted(examples.glob("hook-*.yaml"))
    if not specs:
        fail("no plans/examples/hook-*.yaml")
    for spec in specs:
        name = spec.stem
        rel = f"plans/examples/{spec.name}"
        with tempfile.TemporaryDirectory() as tmp:
            outs = []
            for i, extra in enumerate([{}, {}, {"RANKPLAN_HOOK_TWICE": "1"}]):
                out = pathlib.Path(tmp) / f"plan{i}.json"
                p = compile_spec(rel, out, SRC, **extra)
                if not sane(p, name) or p.returncode != 0:
                    fail(f"{name}: compile exit {p.returncode}\n{p.stderr.decode()[-3000:]}")
                    break
                outs.append(out.read_bytes())
            else:
                if len(set(outs)) != 1:
                    fail(f"{name}: compiling twice gave different plans")
                golden = examples / f"{name}.plan.json"
                if UPDATE:
                    golden.write_bytes(outs[0])
                    print(f"updated {golden.relative_to(SRC)}")
                elif not golden.exists():
                    fail(f"{name}: missing {golden.name}")
                elif golden.read_bytes() != outs[0]:
                    fail(f"{name}: plan differs from {golden.name}")
                plan = json.loads(outs[0])
                if name in CHECKS:
                    CHECKS[name](plan, spec.read_text())
                print(f"ok   {name}")


# The code each abuse ends in, through the CLI.
ABUSE = {
    "infinite_loop": "E0606", "pcall_escape": "E0606", "deep_recursion": "E0617",
    "string_rep_bomb": "E0607", "table_bomb": "E0607", "os_execute": "E0605",
    "io_open": "E0605", "require": "E0605", "string_dump": "E0605",
    "binary_chunk": "E0605", "pcall_denied": "E0605", "strmeta_tamper": "E0605",
    "gc_finalizer": "E0605", "error_table": "E0604", "error_nil": "E0604",
    "error_string": "E0604", "nan_node": "E0609", "non_integer": "E0609",
    "gpu_out_of_range": "E0610", "rank_out_of_range": "E0610", "duplicate_rank": "E0611",
    "duplicate_gpu": "E0611", "tp_across_domain": "E0613", "short_result": "E0609",
    "not_function": "E0603", "syntax": "E0602", "metamethod_result": "E0609",
    "pattern_backtrack": "E0619", "metamethod_cfunction": "E0605",
    "concat_late_metamethod": "E0619", "sort_long_strings": "E0619",
    "insert_len_lie": "E0619", "utf8_skip": "E0619",
    "long_string_concat": "E0620", "long_string_compare": "E0608",
    "xpcall_loop_handler": "E0606", "xpcall_error_loop_handler": "E0606",
    "xpcall_nested_handler": "E0606", "xpcall_denied_handler": "E0605",
    "xpcall_handler_deadline": "E0608",
}

# Limits other than the common ones, by abuse name.
ABUSE_LIMITS = {
    # Lua's stack limit must come before the memory cap: the default cap.
    "deep_recursion": {"RANKPLAN_HOOK_MEMORY": None},
    # a loop of 1 MiB string operations ends on its deadline, not its budget
    "long_string_compare": {"RANKPLAN_HOOK_INSTRUCTIONS": "1000000000000",
                            "RANKPLAN_HOOK_TIMEOUT_MS": "500"},
    # a message handler must not escape the deadline either
    "xpcall_handler_deadline": {"RANKPLAN_HOOK_INSTRUCTIONS": "1000000000000",
                                "RANKPLAN_HOOK_TIMEOUT_MS": "100"},
}

# The line an abuse's diagnostic must name, where the test pins it.
ABUSE_LINE = {"long_string_concat": 5}

ABUSE_SPEC = """version: 1
name: hook-abuse
model:
  preset: llama-3.1-70b
hardware:
  preset: h200-sxm
  nodes: 4
  gpus_per_node: 8
workload:
  input_tokens: 4000
  output_tokens: 500
slo:
  ttft: 600 ms
  tpot: 40 ms
deployment:
  mode: disaggregated
  pools:
    - name: prefill
      role: prefill
      replicas: 2
      tp: 8
    - name: decode
      role: decode
      replicas: 4
      tp: 4
  hooks:
    placement: abuse/{name}.lua
"""


def abuse():
    src = SRC / "tests" / "hooks" / "abuse"
    seen = set()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(src, pathlib.Path(tmp) / "abuse")
        for name, code in sorted(ABUSE.items()):
            seen.add(name)
            spec = pathlib.Path(tmp) / f"{name}.yaml"
            spec.write_text(ABUSE_SPEC.format(name=name))
            limits = dict(RANKPLAN_HOOK_INSTRUCTIONS="5000000", RANKPLAN_HOOK_MEMORY="16MiB",
                          RANKPLAN_HOOK_TIMEOUT_MS="60000")
            for k, v in ABUSE_LIMITS.get(name, {}).items():
                if v is None:
                    del limits[k]
                else:
                    limits[k] = v
            p = compile_spec(spec.name, pathlib.Path(tmp) / "out.json", tmp, **limits)
            err = p.stderr.decode("utf-8", "replace")
            if not sane(p, f"abuse {name}"):
                continue
            where = f"abuse/{name}.lua" + (f":{ABUSE_LINE[name]}:" if name in ABUSE_LINE else "")
            if p.returncode != 1 or f"error[{code}]" not in err or where not in err:
                fail(f"abuse {name}: exit {p.returncode}, expected 1 with {code} naming {where}\n{err[-2000:]}")
            elif (pathlib.Path(tmp) / "out.json").exists():
                fail(f"abuse {name}: a plan was written")
            else:
                print(f"ok   abuse {name} ({code})")
    # Abuse files only exercised through the C API (objective hooks).
    c_only = {"deadline", "nan_objective", "nondeterministic"}
    for f in sorted(src.glob("*.lua")):
        if f.stem not in seen and f.stem not in c_only:
            fail(f"abuse {f.stem}: no CLI expectation in test_hooks_cli.py")


LONG_OK = """-- strings of exactly the per-string limit (1 MiB), made every way
return function(ctx)
  local s = string.rep("a", 1 << 20)
  local t = {s:sub(2) .. "b", table.concat({s:sub(2), "c"}),
             string.format("%s%s", s:sub(2), "d"), s:upper()}
  for _, x in ipairs(t) do assert(#x == 1 << 20) end
  assert(t[4] < s and t[1] > s and t[2] ~= t[3])
  return ctx.default
end
"""


def long_string_ok():
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "abuse").mkdir()
        (pathlib.Path(tmp) / "abuse" / "long_ok.lua").write_text(LONG_OK)
        spec = pathlib.Path(tmp) / "long_ok.yaml"
        spec.write_text(ABUSE_SPEC.format(name="long_ok"))
        p = compile_spec(spec.name, pathlib.Path(tmp) / "out.json", tmp)
        err = p.stderr.decode("utf-8", "replace")
        if sane(p, "long strings at the limit") and p.returncode != 0:
            fail(f"long strings at the limit: exit {p.returncode}, expected 0\n{err[-2000:]}")
        else:
            print("ok   long strings at the limit")


def bad_setting():
    for var, val in (("RANKPLAN_HOOK_MEMORY", "lots"), ("RANKPLAN_HOOK_TOTAL_MS", "0"),
                     ("RANKPLAN_HOOK_TOTAL_MS", "86400001")):
        with tempfile.TemporaryDirectory() as tmp:
            p = compile_spec("plans/examples/hook-rack-spread.yaml", pathlib.Path(tmp) / "o.json", SRC,
                             **{var: val})
            err = p.stderr.decode("utf-8", "replace")
            if sane(p, "bad setting") and (p.returncode != 1 or "error[E0615]" not in err or var not in err):
                fail(f"bad setting {var}={val}: exit {p.returncode}, expected 1 with E0615 naming it\n{err[-2000:]}")
            else:
                print(f"ok   bad setting {var}={val} (E0615)")


def help_names_settings():
    """`rankplan compile --help` names every sandbox setting of docs/hooks.md
    with the default the docs give (the 64MiB memory cap is written as is)."""
    import re
    doc = (SRC / "docs" / "hooks.md").read_text()
    rows = re.findall(r"^\| `(RANKPLAN_HOOK_[A-Z_]+)` \| ([0-9A-Za-z]+) \|", doc, re.M)
    if len(rows) != 5:
        fail(f"help: expected 5 settings in docs/hooks.md, found {rows}")
    for cmd in ("compile", "search"):
        p = subprocess.run([RANKPLAN, cmd, "--help"], capture_output=True, text=True)
        for var, default in rows:
            line = [l for l in p.stdout.splitlines() if l.strip().startswith(var)]
            if not line or (var != "RANKPLAN_HOOK_TWICE" and f"default {default})" not in line[0]):
                fail(f"help: `rankplan {cmd} --help` does not give {var} with default {default}: {line}")
            else:
                print(f"ok   {cmd} --help names {var}")


SLOW_OBJECTIVE = """-- about two million instructions a call: well inside each call's limits
return function(ctx)
  local n = 0
  for i = 1, 1000000 do n = n + i end
  return -ctx.candidate.gpus
end
"""


def total_time():
    """The objective hook of a search runs once per ranked row; all calls of
    the command together stop at RANKPLAN_HOOK_TOTAL_MS (E0621), where before
    the total was unbounded. With the default total the same search ends
    normally."""
    import time
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "slow.lua").write_text(SLOW_OBJECTIVE)
        spec = pathlib.Path(tmp) / "slow.yaml"
        spec.write_text((SRC / "plans" / "examples" / "llama-3.1-70b-pd.yaml").read_text()
                        + "  hooks:\n    objective: slow.lua\n")
        args = [RANKPLAN, "search", str(spec), "--top", "100000"]
        t0 = time.monotonic()
        p = subprocess.run(args, env=env(RANKPLAN_HOOK_TOTAL_MS="300"), capture_output=True, timeout=120)
        took = time.monotonic() - t0
        err = p.stderr.decode("utf-8", "replace")
        if sane(p, "total time") and (p.returncode != 1 or "error[E0621]" not in err
                                      or "slow.lua" not in err):
            fail(f"total time: exit {p.returncode}, expected 1 with E0621 naming slow.lua\n{err[-2000:]}")
        else:
            print(f"ok   total time: E0621 after {took:.1f} s")
        p = subprocess.run(args[:-2] + ["--top", "3"], env=env(RANKPLAN_HOOK_TOTAL_MS="60000"),
                           capture_output=True, timeout=300)
        if sane(p, "total time, default") and p.returncode != 0:
            fail(f"total time, default: exit {p.returncode}\n{p.stderr.decode()[-2000:]}")
        else:
            print("ok   total time: the same hook within the default total")


golden_plans()
if not UPDATE:
    total_time()
    abuse()
    long_string_ok()
    bad_setting()
    help_names_settings()
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
