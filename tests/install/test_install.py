#!/usr/bin/env python3
"""`meson install` into a temporary DESTDIR: the binaries, the data (catalog,
examples, Lua hooks, schemas), the man pages and the shell completion land
where the configured directories say, and the installed tools work from
another directory (smoke.py), also after the whole tree is moved. Nothing
in the source or build tree is removed or changed."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import smoke  # noqa: E402

BUILD = pathlib.Path(os.environ["BUILDDIR"])
SRC = pathlib.Path(os.environ["SRCROOT"])


def options():
    out = subprocess.run(["meson", "introspect", str(BUILD), "--buildoptions"],
                         capture_output=True, text=True, check=True).stdout
    return {o["name"]: o["value"] for o in json.loads(out)}


def under(root, prefix, d):
    return root / os.path.join(prefix, d).lstrip("/")


def version_facts(bindir):
    """--version states this build: the git revision of the checkout (when
    there is one) and the nccl backend as rp_config.h has it."""
    have_nccl = "#define RP_HAVE_NCCL 1" in (BUILD / "rp_config.h").read_text()
    git = subprocess.run(["git", "-C", str(SRC), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    for tool in ("rankplan", "rankrun"):
        out = subprocess.run([str(bindir / tool), "--version"], capture_output=True, text=True).stdout
        want = "yes" if have_nccl else "no"
        smoke.check(f"features: nccl backend {want}\n" in out, f"{tool} --version: nccl backend {want}, as built")
        if git.returncode == 0:
            rev = git.stdout.strip()
            line = next((x for x in out.splitlines() if x.startswith("revision: ")), "")
            smoke.check(rev in line, f"{tool} --version: {line!r} names the checkout's HEAD {rev}")


def main():
    o = options()
    with tempfile.TemporaryDirectory(prefix="rankplan-destdir-") as tmp:
        dest = pathlib.Path(tmp) / "dest"
        p = subprocess.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--quiet",
                            "--destdir", str(dest)], capture_output=True, text=True)
        smoke.check(p.returncode == 0, "meson install --destdir" + ("" if p.returncode == 0 else ": " + p.stderr[-500:]))
        if p.returncode:
            return 1
        prefix = o["prefix"]
        bindir, data = under(dest, prefix, o["bindir"]), under(dest, prefix, o["datadir"]) / "rankplan"
        mandir = under(dest, prefix, o["mandir"])
        for page in ("man1/rankplan.1", "man1/rankrun.1", "man5/rankplan-spec.5"):
            smoke.check((mandir / page).is_file() or (mandir / (page + ".gz")).is_file(), f"man page {page}")
        comp = under(dest, prefix, o["datadir"])
        for f in ("bash-completion/completions/rankplan", "bash-completion/completions/rankrun",
                  "zsh/site-functions/_rankplan"):
            smoke.check((comp / f).exists(), f"completion {f}")
        smoke.installed_tools(bindir, data, SRC)
        version_facts(bindir)
        smoke.check_worker_api(dest, prefix, o)
        moved = pathlib.Path(tmp) / "moved"
        shutil.move(str(dest), str(moved))
        smoke.installed_tools(under(moved, prefix, o["bindir"]), under(moved, prefix, o["datadir"]) / "rankplan")
    return smoke.rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
