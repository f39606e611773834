#!/usr/bin/env python3
"""The bash and zsh completion (completions/, generated into the build
directory) against the binaries:

- bash: the script passes `bash -n` and shellcheck; sourced in bash, its
  functions called with COMP_WORDS/COMP_CWORD complete the commands and
  every option of each --help (as helptext.py reads them), a command and
  its arguments after rankrun's `--`, the value lists
  that help shows (--format, --backend), specs, plans and directories where
  those are expected, and the catalog's preset names (the installed
  catalog, or $RANKPLAN_CATALOG);
- zsh: the script passes `zsh -n`; run with compadd and _files stubbed
  (they only exist inside a completion widget; the stub compadd filters by
  the word's prefix as zsh does), the same cases.
"""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import helptext  # noqa: E402
import smoke  # noqa: E402

SRC = pathlib.Path(os.environ["SRCROOT"])
BUILD = pathlib.Path(os.environ["BUILDDIR"])
RANKPLAN, RANKRUN = os.environ["RANKPLAN"], os.environ["RANKRUN"]
BASH, ZSH = BUILD / "rankplan.bash", BUILD / "_rankplan"
check = smoke.check


def env(catalog=None):
    e = {k: v for k, v in os.environ.items() if k != "RANKPLAN_CATALOG"}
    if catalog:
        e["RANKPLAN_CATALOG"] = str(catalog)
    return e


BASH_DRIVER = """
source {script}
c() {{
  COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=()
  if [[ ${{1##*/}} == rankrun ]]; then _rankrun; else _rankplan; fi
  printf '%s\\n' "${{COMPREPLY[@]}}"
}}
"""

ZSH_DRIVER = """
compadd() {{ local w; [[ $1 == -a ]] && for w in ${{(P)2}}; do [[ $w == ${{PREFIX}}* ]] && print -r -- $w; done; : }}
_files() {{ print -r -- "FILES${{*:+ $*}}" }}
_normal() {{ print -r -- "NORMAL $CURRENT ${{words[*]}}" }}
compset() {{ [[ $1 == -P ]] && PREFIX=${{PREFIX#*=}} }}
c() {{ words=("$@"); CURRENT=$#; PREFIX=${{words[CURRENT]}}; source {script} }}
"""


def complete(shell, words, cwd, catalog=None):
    """The completions of the command line `words` (the last is the word
    being completed), one per element; paths end in / for directories."""
    line = "c " + " ".join(shlex.quote(str(w)) for w in words)
    if shell == "bash":
        argv = ["bash", "--norc", "--noprofile", "-c", BASH_DRIVER.format(script=shlex.quote(str(BASH))) + line]
    else:
        argv = ["zsh", "-f", "-c", ZSH_DRIVER.format(script=shlex.quote(str(ZSH))) + line]
    p = subprocess.run(argv, cwd=cwd, env=env(catalog), capture_output=True, text=True, timeout=60)
    if p.returncode or p.stderr:
        return ["ERROR " + p.stderr.strip()]
    return [w for w in p.stdout.splitlines() if w]


def expect(shell, words, want, cwd, catalog=None):
    got = complete(shell, words, cwd, catalog)
    ok = sorted(got) == sorted(want)
    check(ok, f"{shell}: {' '.join(str(w) for w in words[1:])!s:<28} -> {' '.join(sorted(want))[:70]}" +
          ("" if ok else f" (got {sorted(got)})"))


def files_want(shell, kind, names):
    """What path completion offers in the test directory: bash lists the
    paths; zsh's stubbed _files shows the pattern it was given."""
    if shell == "zsh":
        return {"spec": ["FILES -g *.(yaml|yml)"], "plan": ["FILES -g *.json"], "any": ["FILES"],
                "dir": ["FILES -/"]}[kind]
    return names


def syntax():
    p = subprocess.run(["bash", "-n", str(BASH)], capture_output=True, text=True)
    check(p.returncode == 0 and not p.stderr, "bash -n rankplan.bash " + p.stderr)
    if shutil.which("shellcheck"):
        p = subprocess.run(["shellcheck", "-s", "bash", str(BASH)], capture_output=True, text=True)
        check(p.returncode == 0, "shellcheck rankplan.bash " + p.stdout[-800:])
    else:
        print("skip shellcheck: not installed (make deps installs it)")
    if shutil.which("zsh"):
        p = subprocess.run(["zsh", "-n", str(ZSH)], capture_output=True, text=True)
        check(p.returncode == 0 and not p.stderr, "zsh -n _rankplan " + p.stderr)


def commands_and_options(shell, cwd):
    top = helptext.help_of(RANKPLAN)
    cmds = helptext.commands(top)
    expect(shell, [RANKPLAN, ""], cmds, cwd)
    expect(shell, [RANKPLAN, "ex"], [c for c in cmds if c.startswith("ex")], cwd)
    expect(shell, [RANKPLAN, "help", ""], cmds, cwd)
    expect(shell, [RANKPLAN, "-"], helptext.options(top), cwd)
    for c in cmds:
        if c != "help":
            expect(shell, [RANKPLAN, c, "-"], helptext.options(helptext.help_of(RANKPLAN, c)), cwd)
    expect(shell, [RANKRUN, "plan.json", "-"], helptext.options(helptext.help_of(RANKRUN)), cwd)


def values(shell, cwd):
    expect(shell, [RANKPLAN, "check", "--format", ""], ["text", "json", "sarif"], cwd)
    expect(shell, [RANKPLAN, "search", "--format", ""], ["text", "json"], cwd)
    expect(shell, [RANKPLAN, "explain", "x.json", "--format", "j"], ["json"], cwd)
    # bash splits --format=s at the '=' (COMP_WORDBREAKS); zsh does not
    eq = ["--format", "=", "s"] if shell == "bash" else ["--format=s"]
    expect(shell, [RANKPLAN, "check"] + eq, ["sarif"], cwd)
    expect(shell, [RANKRUN, "plan.json", "--backend", ""], ["host", "nccl"], cwd)
    # the launch targets of `rankplan emit` (its help lists them)
    expect(shell, [RANKPLAN, "emit", "plan.json", "--target", ""],
           ["vllm", "sglang", "trtllm", "shell", "slurm", "k8s", "dynamo"], cwd)
    expect(shell, [RANKPLAN, "emit", "plan.json", "-t", "s"], ["sglang", "shell", "slurm"], cwd)
    expect(shell, [RANKPLAN, "compile", "spec.yaml", "--emit", "t"], ["trtllm"], cwd)
    expect(shell, [RANKPLAN, "compile", "spec.yaml", "--emit", "d"], ["dynamo"], cwd)
    # search --what-if: its keys, then the catalog's hardware entries for gpu=
    # (bash splits the word at '=', zsh does not)
    hw = sorted(p.stem for p in (SRC / "plans" / "catalog" / "hardware").glob("h*.yaml"))
    check(len(hw) >= 2, f"the catalog has hardware entries starting with h: {hw}")
    expect(shell, [RANKPLAN, "search", "s.yaml", "--what-if", ""], ["gpu=", "nodes="], cwd)
    gpu = ["--what-if", "gpu", "=", "h"] if shell == "bash" else ["--what-if", "gpu=h"]
    expect(shell, [RANKPLAN, "search", "s.yaml", *gpu], hw, cwd)
    if shell == "bash":
        expect(shell, [RANKPLAN, "search", "s.yaml", "--what-if", "gpu", "=", "h200-sxm,h1"],
               ["h200-sxm," + h for h in hw if h.startswith("h1")], cwd)
    expect(shell, [RANKRUN, "plan.json", "--node", ""], [], cwd)


def paths(shell, cwd):
    expect(shell, [RANKPLAN, "check", ""], files_want(shell, "spec", ["a.yaml", "b.yml", "sub"]), cwd)
    for cmd in ("explain", "render", "import-hf"):
        expect(shell, [RANKPLAN, cmd, ""], files_want(shell, "plan", ["c.json", "sub"]), cwd)
    expect(shell, [RANKRUN, ""], files_want(shell, "plan", ["c.json", "sub"]), cwd)
    expect(shell, [RANKPLAN, "compile", "a.yaml", "-o", ""],
           files_want(shell, "any", ["a.yaml", "b.yml", "c.json", "d.txt", "sub"]), cwd)
    expect(shell, [RANKPLAN, "check", "--catalog", ""], files_want(shell, "dir", ["sub"]), cwd)


def command_after_dashes(shell, cwd):
    """rankrun PLAN ... -- CMD ARGS: a command name, then its arguments."""
    if shell == "bash":
        got = complete(shell, [RANKRUN, "p.json", "--node", "0", "--", "pytho"], cwd)
        check("python3" in got and "--node" not in got, f"bash: rankrun ... -- pytho -> commands ({got[:5]})")
        expect(shell, [RANKRUN, "p.json", "--", "python3", "a."], ["a.yaml"], cwd)
    else:
        expect(shell, [RANKRUN, "p.json", "--node", "0", "--", "python3", "a."], ["NORMAL 2 python3 a."], cwd)


def presets(shell, cwd):
    """_rankplan_presets and the --model / --hardware values it serves."""
    fn = "_rankplan_zsh_value" if shell == "zsh" else "_rankplan_value"
    for kind, opt in (("models", "--model"), ("hardware", "--hardware")):
        want = sorted(p.stem for p in (SRC / "plans" / "catalog" / kind).glob("*.yaml"))
        check(len(want) >= 3, f"the catalog has {len(want)} {kind}")
        got = preset_call(shell, fn, opt, cwd, None)
        check(got == want, f"{shell}: {opt} completes the {kind} of the catalog rankplan --version names ({got})")
    own = pathlib.Path(cwd) / "own-catalog"
    (own / "models").mkdir(parents=True, exist_ok=True)
    (own / "models" / "my-model.yaml").write_text("layers: 1\n")
    got = preset_call(shell, fn, "--model", cwd, own)
    check(got == ["my-model"], f"{shell}: --model completes the models of $RANKPLAN_CATALOG ({got})")


def preset_call(shell, fn, opt, cwd, catalog):
    call = f"bin={shlex.quote(RANKPLAN)}; cur=''; COMPREPLY=(); {fn} {opt} NAME; "
    if shell == "bash":
        argv = ["bash", "--norc", "-c", f"source {shlex.quote(str(BASH))}; {call} printf '%s\\n' \"${{COMPREPLY[@]}}\""]
    else:
        argv = ["zsh", "-f", "-c", ZSH_DRIVER.format(script="/dev/null") +
                f"words=(rankplan); CURRENT=1; source {shlex.quote(str(ZSH))} >/dev/null 2>&1; {call}"]
    p = subprocess.run(argv, cwd=cwd, env=env(catalog), capture_output=True, text=True, timeout=60)
    return sorted(w for w in p.stdout.splitlines() if w)


def main():
    syntax()
    with tempfile.TemporaryDirectory(prefix="rankplan-completion-") as cwd:
        for name in ("a.yaml", "b.yml", "c.json", "d.txt"):
            (pathlib.Path(cwd) / name).write_text("")
        (pathlib.Path(cwd) / "sub").mkdir()
        shells = ["bash"] + (["zsh"] if shutil.which("zsh") else [])
        if "zsh" not in shells:
            print("skip zsh: not installed (make deps installs it)")
        for shell in shells:
            commands_and_options(shell, cwd)
            values(shell, cwd)
            paths(shell, cwd)
            command_after_dashes(shell, cwd)
            presets(shell, cwd)
    return smoke.rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
