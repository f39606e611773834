#!/usr/bin/env python3
"""Layering rules of architecture.md that the compiler cannot check:

- nothing after parse touches libyaml: only compiler/yaml.c uses the libyaml
  API, and only ytree.c, parse.c and engine_catalog.c (the engine catalog
  reader) include the YAML tree header;
- Lua is reached only through the hook sandbox (compiler/hooks.c,
  hook_sandbox.c, hook_result.c and their private hook_run.h);
- the plan library (meson.build's plan_src: util, outfile, the plan loader
  and the KV-map checker) needs libc only and no compiler stage;
- the runtime links the plan library and nothing else of the compiler, and
  includes only its public headers (util.h, outfile.h, opts.h, plan.h).
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
bad = 0


def includes(path):
    return re.findall(r'^\s*#\s*include(?:_next)?\s*[<"]([^>"]+)[>"]', path.read_text(), re.M)


def fail(msg):
    global bad
    bad += 1
    print("layering:", msg)


SANDBOX = {"hooks.c", "hooks.h", "hook_run.h", "hook_sandbox.c", "hook_result.c"}
for f in sorted((root / "compiler").glob("*.[ch]")):
    inc = includes(f)
    text = f.read_text()
    if f.name != "ytree.c" and (re.search(r"\byaml_(parser|event|mark|char)_\w*", text) or "yaml.h" in inc):
        fail(f"{f.relative_to(root)} uses the libyaml API; only compiler/ytree.c may")
    if "ytree.h" in inc and f.name not in ("ytree.c", "parse.c", "engine_catalog.c"):
        fail(f"{f.relative_to(root)} includes ytree.h; only ytree.c, parse.c and engine_catalog.c may")
    if any(i in ("lua.h", "lauxlib.h", "lualib.h") for i in inc) and f.name not in SANDBOX:
        fail(f"{f.relative_to(root)} includes Lua; only the hook sandbox ({', '.join(sorted(SANDBOX))}) may")
# The plan library (meson.build, plan_src): what the runtime links of
# compiler/, libc only, and nothing of the compiler's stages.
meson = (root / "meson.build").read_text()
block = re.search(r"plan_src = files\((.*?)\)", meson, re.S)
plan_files = re.findall(r"'compiler/([\w.]+\.c)'", block.group(1)) if block else []
if not plan_files:
    fail("meson.build: no plan_src list (the plan library)")
plan_headers = {"util.h", "outfile.h", "opts.h", "plan.h", "reshard.h", "diag.h", "rp_config.h"}
for name in plan_files:
    for i in includes(root / "compiler" / name):
        if i in ("jansson.h", "yaml.h", "ytree.h", "lua.h", "lauxlib.h", "lualib.h"):
            fail(f"compiler/{name} (plan library) includes {i}; the plan library needs libc only")
        elif i.endswith(".h") and (root / "compiler" / i).exists() and i not in plan_headers:
            fail(f"compiler/{name} (plan library) includes compiler/{i}, a compiler stage's header")
# The runtime links the plan library only (runtime_deps in meson.build), and
# includes only its public headers.
deps = re.search(r"^runtime_deps = \[(.*?)\]", meson, re.M)
if not deps or "rankplan_dep" in deps.group(1) or "plan_dep" not in deps.group(1):
    fail("meson.build: runtime_deps must link plan_dep and not the compiler library (rankplan_dep)")
# version.h: the --version text, its own library linked into both binaries.
allowed_from_compiler = {"util.h", "outfile.h", "opts.h", "plan.h", "rp_config.h", "version.h"}
compiler_headers = {p.name for p in (root / "compiler").glob("*.h")}
for f in sorted((root / "runtime").glob("*.[ch]")):
    for i in includes(f):
        if i in ("yaml.h", "ytree.h", "lua.h", "lauxlib.h", "lualib.h"):
            fail(f"{f.relative_to(root)} includes {i}; the runtime reads plans, not specs or hooks")
        elif i in compiler_headers and i not in allowed_from_compiler:
            fail(f"{f.relative_to(root)} includes compiler/{i}; the runtime may use only {sorted(allowed_from_compiler)}")
# Backend differences are members of the backend table: outside the
# registry and the backends themselves, no runtime file compares a backend
# name (the default `--backend host` is an assignment, not a comparison).
for f in sorted((root / "runtime").glob("*.c")):
    if f.name in ("backend.c", "backend_host.c", "backend_nccl.c"):
        continue
    for n, line in enumerate(f.read_text().splitlines(), 1):
        if re.search(r'strcmp\([^;]*"(host|nccl)"', line):
            fail(f"{f.relative_to(root)}:{n}: compares a backend name; add a member to runtime/backend.h")
# No cycle among the runtime's own headers.
rt_inc = {p.name: [i for i in includes(p) if (root / "runtime" / i).exists()]
          for p in (root / "runtime").glob("*.h")}
def cycle(h, path):
    if h in path:
        return path[path.index(h):] + [h]
    for i in rt_inc.get(h, []):
        c = cycle(i, path + [h])
        if c:
            return c
    return None
for h in sorted(rt_inc):
    c = cycle(h, [])
    if c:
        fail("runtime headers include each other in a cycle: " + " -> ".join(c))
        break
print(f"layering: {bad} problem(s)")
sys.exit(1 if bad else 0)
