#!/usr/bin/env python3
"""The man pages (man/) against the binaries, and `rankplan help COMMAND`:

- groff (and man-db's man, where installed) read every page without a
  warning;
- every command of `rankplan --help`, every option of it and of each
  command's --help, and every option of `rankrun --help` is in the page, in
  the section of its command; every environment variable a help text names
  is in ENVIRONMENT;
- every number in the OPTIONS and ENVIRONMENT sections is in the help texts,
  and every number of rankplan-spec(5) in docs/spec.md, so a page cannot
  state a default the code does not have;
- the spec in rankplan-spec(5)'s SYNOPSIS passes `rankplan check`;
- `rankplan help` is `rankplan --help`, `rankplan help CMD` is
  `rankplan CMD --help`, and an unknown CMD is a usage error."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import helptext  # noqa: E402
import smoke  # noqa: E402

SRC = pathlib.Path(os.environ["SRCROOT"])
RANKPLAN = os.environ["RANKPLAN"]
RANKRUN = os.environ.get("RANKRUN")
MAN = SRC / "man"
check = smoke.check


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60, **kw)


def plain(roff):
    """The roff source as text to search: escapes of fonts and hyphens gone."""
    text = re.sub(r"\\f[BIRP]", "", roff).replace("\\-", "-").replace("\\(mc", "µ")
    return re.sub(r"^\.(B|I|BR|BI|IR|RB|RI|IB|TP|PP|IP|RS|RE|EX|EE|br)\b ?", "", text, flags=re.M)


def sections(roff, level="SH"):
    """{title: plain text} for each .SH (or .SS) of the page."""
    out, title = {}, ""
    for line in roff.splitlines():
        m = re.match(rf"\.{level} (.*)", line)
        if m:
            title = m.group(1).strip('"').replace("\\-", "-")
            out[title] = ""
        elif not line.startswith(".SH"):
            out[title] = out.get(title, "") + plain(line) + "\n"
        else:
            title = ""
    return out


def has_word(text, word):
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def numbers(text):
    return set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?", text))


def warnings():
    for page in sorted(MAN.iterdir()):
        p = run("groff", "-ww", "-man", "-Tutf8", "-z", page)
        check(p.returncode == 0 and p.stderr == "", f"groff -ww: {page.name} " + p.stderr.strip())
        if shutil.which("man"):
            p = run("man", "--warnings", "-E", "UTF-8", "-l", page, env=dict(os.environ, MANWIDTH="80"))
            check(p.returncode == 0 and p.stderr == "", f"man --warnings: {page.name} " + p.stderr.strip())


def rankplan_page():
    roff = (MAN / "rankplan.1").read_text()
    sh, ss = sections(roff), sections(roff.split(".SH OPTIONS", 1)[1].split(".SH ENVIRONMENT", 1)[0], "SS")
    top = run(RANKPLAN, "--help").stdout
    cmds = helptext.commands(top)
    check(len(cmds) >= 5, f"rankplan --help lists {len(cmds)} commands")
    helps = [top]
    for c in cmds:
        check(has_word(sh["COMMANDS"], c), f"rankplan(1) COMMANDS: {c}")
        if c == "help":
            continue
        text = run(RANKPLAN, c, "--help").stdout
        helps.append(text)
        sect = ss.get(f"Of {c}", "")
        for o in sorted(helptext.options(text)):
            check(has_word(sect, o), f"rankplan(1) OPTIONS, Of {c}: {o}")
    for o in sorted(helptext.options(top)):
        check(has_word(ss.get("Of rankplan itself", ""), o), f"rankplan(1) OPTIONS, Of rankplan itself: {o}")
    env_vars(helps, sh)
    stated = numbers(sh["OPTIONS"] + sh["ENVIRONMENT"])
    known = numbers("\n".join(helps))
    check(stated <= known, f"rankplan(1): every number is in the help texts (not: {sorted(stated - known)})")


def env_vars(helps, sh):
    for v in sorted(set(re.findall(r"\bRANKPLAN_[A-Z_]+\b", "\n".join(helps)))):
        check(has_word(sh["ENVIRONMENT"], v), f"rankplan(1) ENVIRONMENT: {v}")


def rankrun_page():
    if not RANKRUN:
        return
    sh = sections((MAN / "rankrun.1").read_text())
    text = run(RANKRUN, "--help").stdout
    opts = helptext.options(text)
    check(len(opts) >= 15, f"rankrun --help lists {len(opts)} options")
    for o in sorted(opts):
        check(has_word(sh["OPTIONS"], o), f"rankrun(1) OPTIONS: {o}")
    stated, known = numbers(sh["OPTIONS"]), numbers(text)
    check(stated <= known, f"rankrun(1): every number is in rankrun --help (not: {sorted(stated - known)})")


def spec_page():
    roff = (MAN / "rankplan-spec.5").read_text()
    body = plain(roff.split(".SH DESCRIPTION", 1)[1])
    known = numbers((SRC / "docs" / "spec.md").read_text())
    stated = numbers(body)
    check(stated <= known, f"rankplan-spec(5): every number is in docs/spec.md (not: {sorted(stated - known)})")
    example = plain(roff.split(".SH SYNOPSIS", 1)[1].split(".EX\n", 1)[1].split(".EE", 1)[0])
    with tempfile.TemporaryDirectory() as tmp:
        spec = pathlib.Path(tmp) / "synopsis.yaml"
        spec.write_text(example)
        p = run(RANKPLAN, "check", "-q", spec, env=dict(os.environ, RANKPLAN_CATALOG=str(SRC / "plans" / "catalog")))
        check(p.returncode == 0, "rankplan-spec(5) SYNOPSIS passes rankplan check " + p.stderr[-300:])


def help_command():
    top = run(RANKPLAN, "--help").stdout
    p = run(RANKPLAN, "help")
    check(p.returncode == 0 and p.stdout == top, "rankplan help prints rankplan --help")
    p = run(RANKPLAN, "help", "help")
    check(p.returncode == 0 and p.stdout == top, "rankplan help help prints rankplan --help")
    for c in ("check", "compile", "search", "explain"):
        p, q = run(RANKPLAN, "help", c), run(RANKPLAN, c, "--help")
        check(p.returncode == 0 and p.stdout == q.stdout and f"usage: rankplan {c}" in p.stdout,
              f"rankplan help {c} prints rankplan {c} --help")
    p = run(RANKPLAN, "help", "serch")
    check(p.returncode == 2 and "did you mean 'rankplan search'" in p.stderr, "rankplan help serch: usage error, suggestion")
    p = run(RANKPLAN, "help", "check", "compile")
    check(p.returncode == 2 and p.stdout == "", "rankplan help with two commands: usage error")


warnings()
rankplan_page()
rankrun_page()
spec_page()
help_command()
sys.exit(smoke.rptest.finish())
