#!/usr/bin/env python3
"""The Debian package that `make deb` built (argument: the folder holding
it), as a system would get it:

- its version is meson.build's and debian/changelog's;
- it depends on Debian's own libraries only: libc, Jansson, Lua 5.4 and
  libyaml, nothing of CUDA or NCCL;
- unpacked with `dpkg -x` into a temporary directory, the tools pass the
  installed-tree checks of smoke.py (data found from their own location,
  every example compiled to its plan byte for byte, RANKPLAN_CATALOG
  overriding) and report no nccl backend; the man pages and the bash and
  zsh completion are where Debian's tools look for them;
- with RANKPLAN_DEB_INSTALL=1 (as root; CI sets it), `dpkg -i` installs it
  into this system, the same checks pass on /usr/bin and /usr/share, man
  finds the pages, and `dpkg -r` removes it again."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import smoke  # noqa: E402

SRC = pathlib.Path(__file__).resolve().parents[2]
check = smoke.check
DEBIAN_DEPS = {"libc6", "libjansson4", "liblua5.4-0", "libyaml-0-2"}


def field(deb, name):
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def metadata(deb):
    meson = re.search(r"version: '([^']+)'", (SRC / "meson.build").read_text()).group(1)
    changelog = subprocess.run(["dpkg-parsechangelog", "-l", str(SRC / "debian" / "changelog"), "-S", "Version"],
                               capture_output=True, text=True).stdout.strip()
    check(field(deb, "Version") == meson == changelog,
          f"package {field(deb, 'Version')}, meson.build {meson}, debian/changelog {changelog} agree")
    deps = {re.split(r"[\s(]", d.strip())[0] for d in field(deb, "Depends").split(",") if d.strip()}
    check(deps <= DEBIAN_DEPS and {"libjansson4", "liblua5.4-0", "libyaml-0-2"} <= deps,
          f"depends on Debian's libc, Jansson, Lua 5.4 and libyaml only: {sorted(deps)}")
    check(not re.search(r"cuda|nccl", field(deb, "Depends") + field(deb, "Recommends"), re.I),
          "no CUDA or NCCL dependency")


def debian_paths(root):
    for f in ("share/man/man1/rankplan.1.gz", "share/man/man1/rankrun.1.gz", "share/man/man5/rankplan-spec.5.gz",
              "share/bash-completion/completions/rankplan", "share/bash-completion/completions/rankrun",
              "share/zsh/vendor-completions/_rankplan", "share/doc/rankplan/copyright",
              "share/doc/rankplan/docs/spec.md"):
        check((root / "usr" / f).exists(), f"/usr/{f}")


def no_nccl(bindir):
    for tool in ("rankplan", "rankrun"):
        out = subprocess.run([str(bindir / tool), "--version"], capture_output=True, text=True).stdout
        check("features: nccl backend no" in out, f"{tool} --version: nccl backend no (the package's build)")


def unpacked(deb):
    with tempfile.TemporaryDirectory(prefix="rankplan-deb-") as tmp:
        root = pathlib.Path(tmp)
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
        debian_paths(root)
        no_nccl(root / "usr" / "bin")
        smoke.installed_tools(root / "usr" / "bin", root / "usr" / "share" / "rankplan", SRC)
        arch = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True, text=True).stdout.strip()
        smoke.check_worker_api(root, "/usr", {"libdir": "lib/" + arch, "includedir": "include"})


def installed(deb):
    if os.environ.get("RANKPLAN_DEB_INSTALL") != "1" or os.getuid() != 0:
        print("skip dpkg -i: set RANKPLAN_DEB_INSTALL=1 and run as root to install into this system")
        return
    p = subprocess.run(["dpkg", "-i", str(deb)], capture_output=True, text=True)
    check(p.returncode == 0, "dpkg -i " + p.stderr[-500:])
    try:
        debian_paths(pathlib.Path("/"))
        smoke.installed_tools(pathlib.Path("/usr/bin"), pathlib.Path("/usr/share/rankplan"), SRC)
        if shutil.which("man"):
            for page in ("1 rankplan", "1 rankrun", "5 rankplan-spec"):
                q = subprocess.run(["man", "-w"] + page.split(), capture_output=True, text=True)
                check(q.returncode == 0, f"man -w {page}: {q.stdout.strip()}")
    finally:
        p = subprocess.run(["dpkg", "-r", "rankplan"], capture_output=True, text=True)
        check(p.returncode == 0 and not os.path.exists("/usr/bin/rankplan"), "dpkg -r rankplan")


def main():
    debs = sorted(pathlib.Path(sys.argv[1]).glob("rankplan_*.deb"))
    check(len(debs) == 1, f"one package in {sys.argv[1]}: {[d.name for d in debs]}")
    if len(debs) == 1:
        metadata(debs[0])
        unpacked(debs[0])
        installed(debs[0])
    return smoke.rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
