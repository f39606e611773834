"""The checks an installed tree must pass, shared by the meson-install test
(test_install.py) and the Debian package test (test_deb.py): the tools run
from a directory outside the source tree with no RANKPLAN_CATALOG, find
their data from their own location, compile every installed example to its
installed golden plan byte for byte, and RANKPLAN_CATALOG still overrides.
check() and its failure count serve every test of this folder."""
import os
import pathlib
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402,F401  (the tests of this folder call smoke.check)


def clean_env():
    env = {k: v for k, v in os.environ.items() if k != "RANKPLAN_CATALOG"}
    env["NO_COLOR"] = "1"
    return env


def run(argv, cwd, env=None):
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=300)


def version_fields(text):
    return dict(line.split(": ", 1) for line in text.splitlines()[1:] if ": " in line)


def check_versions(bindir, data, cwd, srcroot):
    """--version of both tools: the version line, a revision, the features,
    and (rankplan) the installed data directory, not the source tree."""
    p = run([bindir / "rankplan", "--version"], cwd)
    f = version_fields(p.stdout)
    check(p.returncode == 0 and p.stdout.startswith("rankplan "), "rankplan --version")
    check("revision" in f and f.get("features", "").startswith("nccl backend "),
          "rankplan --version: revision and features")
    check(f.get("data") == os.path.realpath(data), f"rankplan finds its data at {data} (got {f.get('data')})")
    check(srcroot is None or not f.get("data", "").startswith(os.path.realpath(srcroot) + "/plans"),
          "the installed rankplan does not read the source tree")
    p = run([bindir / "rankrun", "--version"], cwd)
    check(p.returncode == 0 and p.stdout.startswith("rankrun ")
          and version_fields(p.stdout).get("features", "").startswith("nccl backend "), "rankrun --version")


def check_examples(bindir, data, cwd):
    """Every installed example compiles, from cwd, to its installed plan."""
    examples = sorted((data / "plans" / "examples").glob("*.yaml"))
    check(len(examples) >= 5, f"{len(examples)} examples installed")
    for spec in examples:
        out = pathlib.Path(cwd) / (spec.stem + ".plan.json")
        p = run([bindir / "rankplan", "compile", spec, "-o", out], cwd)
        golden = spec.with_name(spec.stem + ".plan.json")
        same = p.returncode == 0 and out.read_bytes() == golden.read_bytes()
        check(same, f"installed rankplan compiles {spec.name} to its installed plan" +
              ("" if p.returncode == 0 else f" (exit {p.returncode}: {p.stderr.strip()[-300:]})"))
    plan = pathlib.Path(cwd) / "llama-3.1-8b-pd-1node.plan.json"
    p = run([bindir / "rankrun", plan, "--node", "0", "--dry-run"], cwd)
    check(p.returncode == 0, "installed rankrun --dry-run on a compiled example")


def check_override(bindir, data, cwd):
    """RANKPLAN_CATALOG still wins over the installed catalog."""
    empty = pathlib.Path(cwd) / "empty-catalog"
    (empty / "models").mkdir(parents=True, exist_ok=True)
    env = clean_env()
    env["RANKPLAN_CATALOG"] = str(empty)
    spec = data / "plans" / "examples" / "llama-3.1-8b-agg.yaml"
    p = run([bindir / "rankplan", "check", spec], cwd, env)
    check(p.returncode == 1 and "E0111" in p.stderr and str(empty) in p.stderr,
          "RANKPLAN_CATALOG overrides the installed catalog")


def check_tree(bindir, data, srcroot):
    """Both tools, and a full copy of the data: catalog, examples, hooks, schemas."""
    for tool in ("rankplan", "rankrun"):
        check(os.access(bindir / tool, os.X_OK), f"{tool} installed in {bindir}")
    if srcroot is None:
        return
    src = pathlib.Path(srcroot)
    for sub in ("plans/catalog", "plans/examples", "lua", "schemas"):
        want = sorted(str(p.relative_to(src / sub)) for p in (src / sub).rglob("*") if p.is_file())
        got = sorted(str(p.relative_to(data / sub)) for p in (data / sub).rglob("*") if p.is_file())
        check(want == got and want, f"{sub}: {len(got)} files installed, as in the source tree")


def installed_tools(bindir, data, srcroot=None):
    """All of the above, from a fresh directory outside the source tree."""
    with tempfile.TemporaryDirectory(prefix="rankplan-smoke-") as cwd:
        check_tree(bindir, data, srcroot)
        check_versions(bindir, data, cwd, srcroot)
        check_examples(bindir, data, cwd)
        check_override(bindir, data, cwd)


def sanitizer_runtimes(lib):
    """The sanitizer runtimes lib needs (an ASan+UBSan build): a program
    using it is built with the same sanitizers, and python3 preloads them."""
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    return [w for line in out.splitlines() for w in line.split() if w.startswith("/") and "san" in w.rsplit("/", 1)[-1]]


def check_worker_api(dest, prefix, o):
    """librankrun as installed: the header, the shared library and its
    pkg-config file let a C program build and link against it, and the
    Python binding imports from where it was installed and loads the
    installed library (rankrun_api_version from both)."""
    root = pathlib.Path(dest) / prefix.lstrip("/")
    libdir, incdir = root / o["libdir"], root / o["includedir"]
    check((incdir / "rankrun.h").is_file(), "rankrun.h installed")
    lib = libdir / "librankrun.so.1"
    check(lib.exists(), "librankrun.so.1 installed")
    env = dict(clean_env(), PKG_CONFIG_PATH=str(libdir / "pkgconfig"), PKG_CONFIG_SYSROOT_DIR=str(dest))
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "rankrun"], env=env, capture_output=True, text=True)
    check(pc.returncode == 0 and "-lrankrun" in pc.stdout, f"pkg-config rankrun: {pc.stdout.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        c = pathlib.Path(tmp) / "v.c"
        c.write_text('#include <rankrun.h>\n#include <stdio.h>\n'
                     'int main(void) { printf("%d\\n", rankrun_api_version()); return 0; }\n')
        exe = pathlib.Path(tmp) / "v"
        san = sanitizer_runtimes(lib)
        b = subprocess.run(["cc", str(c), "-o", str(exe), *pc.stdout.split(),
                            *(["-fsanitize=address,undefined"] if san else [])], capture_output=True, text=True)
        r = subprocess.run([str(exe)], env=dict(clean_env(), LD_LIBRARY_PATH=str(libdir)), capture_output=True,
                           text=True) if b.returncode == 0 else None
        check(r is not None and r.returncode == 0 and r.stdout.strip().isdigit(),
              "a C program builds with pkg-config's flags and runs on the installed library"
              + ("" if b.returncode == 0 else ": " + b.stderr[-300:]))
    mods = sorted(root.glob("lib*/python3*/*-packages/rankrun.py"))
    check(len(mods) == 1, f"the Python binding installed once ({[str(m) for m in mods]})")
    if mods and r is not None:
        py = subprocess.run(["python3", "-c", "import rankrun; print(rankrun.lib().rankrun_api_version())"],
                            env=dict(clean_env(), PYTHONPATH=str(mods[0].parent), RANKRUN_LIB=str(lib),
                                     **({"LD_PRELOAD": " ".join(san), "ASAN_OPTIONS": "detect_leaks=0"} if san else {})),
                            capture_output=True, text=True, cwd="/")
        check(py.returncode == 0 and py.stdout.strip() == r.stdout.strip(),
              "the installed Python binding loads the installed library" + ("" if py.returncode == 0 else ": " + py.stderr[-300:]))
