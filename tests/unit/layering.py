#!/usr/bin/env python3
"""Layering rules of architecture.md that the compiler cannot check:

- nothing after parse touches libyaml: only compiler/yaml.c uses the libyaml
  API, and only ytree.c and parse.c include the YAML tree header;
- Lua is reached only through the hook sandbox (compiler/hooks.c,
  hook_sandbox.c, hook_result.c and their private hook_run.h);
- the runtime shares only the plan loader, util, outfile and diag with the compiler:
  no runtime file includes the spec, YAML, Lua or later-stage headers;
- the plan loader needs libc only (no Jansson, libyaml or Lua).
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
    if "ytree.h" in inc and f.name not in ("ytree.c", "parse.c"):
        fail(f"{f.relative_to(root)} includes ytree.h; only ytree.c and parse.c may")
    if any(i in ("lua.h", "lauxlib.h", "lualib.h") for i in inc) and f.name not in SANDBOX:
        fail(f"{f.relative_to(root)} includes Lua; only the hook sandbox ({', '.join(sorted(SANDBOX))}) may")
plan_inc = includes(root / "compiler" / "plan_load.c")
for i in plan_inc:
    if i in ("jansson.h", "yaml.h", "ytree.h", "lua.h", "lauxlib.h", "spec.h", "hooks.h"):
        fail(f"compiler/plan_load.c includes {i}; the plan loader needs libc only")
allowed_from_compiler = {"util.h", "outfile.h", "diag.h", "plan.h", "rp_config.h"}
compiler_headers = {p.name for p in (root / "compiler").glob("*.h")}
for f in sorted((root / "runtime").glob("*.[ch]")):
    for i in includes(f):
        if i in ("yaml.h", "ytree.h", "lua.h", "lauxlib.h", "lualib.h"):
            fail(f"{f.relative_to(root)} includes {i}; the runtime reads plans, not specs or hooks")
        elif i in compiler_headers and i not in allowed_from_compiler:
            fail(f"{f.relative_to(root)} includes compiler/{i}; the runtime may use only {sorted(allowed_from_compiler)}")
print(f"layering: {bad} problem(s)")
sys.exit(1 if bad else 0)
