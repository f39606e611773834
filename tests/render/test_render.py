#!/usr/bin/env python3
"""`rankplan render` and `rankplan search --plot` (docs/render.md).

- every example plan renders, twice to the same bytes, and loads in
  headless Chromium: one element per GPU, each kind of the selector outlines
  exactly the ranks of that kind's groups and marks exactly those of groups
  that cross nodes (both counted here from the plan file, independently of
  the page), a click on GPU 0 lists its groups, no uncaught error or
  console.error, and a screenshot that shows the pools' colours;
- the SVG of plans/examples/llama-3.1-8b-pd-1node.plan.json is byte for
  byte tests/render/golden/llama-3.1-8b-pd-1node.svg (`--update` rewrites it);
- past --gpu-limit the page draws one square per node and per instance;
- plan strings are escaped; bad command lines and plans fail as documented;
- search --plot: every ranked deployment in both panels, the Pareto front
  and the winner marked, axes with units; the HTML form loads in Chromium.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ["RANKPLAN"]
SRC = pathlib.Path(os.environ["SRCROOT"])
EX = SRC / "plans" / "examples"
GOLDEN = SRC / "tests" / "render" / "golden" / "llama-3.1-8b-pd-1node.svg"
SVGNS = "{http://www.w3.org/2000/svg}"


def run(*args):
    return subprocess.run([RP, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_COLOR="1"))


def hsl_rgb(h, s, l):
    """CSS hsl() to 8-bit RGB (CSS Color 4, 'Converting HSL colors to sRGB')."""
    def f(n):
        k = (n + h / 30) % 12
        a = s * min(l, 1 - l)
        return round(255 * (l - a * max(-1, min(k - 3, 9 - k, 1))))
    return f(0), f(8), f(4)


def domain(plan, r):
    """The scale-up domain of rank r's GPU, by compiler/place.c's rule: a
    domain at least as large as a node spans whole nodes, a smaller one
    splits each node."""
    D, G = plan["scale_up_domain"], plan["nodes"][r["node"]]["gpus"]
    if D >= G:
        return (r["node"] * G + r["device"]) // D
    return r["node"] * ((G + D - 1) // D) + r["device"] // D


def plan_facts(path):
    """From the plan file itself: the plan, per kind the ranks in its
    groups, and (ranks in groups spanning nodes, ranks in groups on one
    node spanning scale-up domains), and rank 0's group count."""
    plan = json.loads(path.read_text())
    rk = {r["rank"]: r for r in plan["ranks"]}
    members, crossing, rank0 = {}, {}, 0
    for g in plan["groups"]:
        ranks = g["ranks"] if "ranks" in g else list(range(*g["span"]))
        k = g["kind"]
        members[k] = members.get(k, 0) + len(ranks)
        xn, xd = crossing.get(k, (0, 0))
        if len({rk[r]["node"] for r in ranks}) > 1:
            xn += len(ranks)
        elif len({domain(plan, rk[r]) for r in ranks}) > 1:
            xd += len(ranks)
        crossing[k] = (xn, xd)
        rank0 += 0 in ranks
    return plan, members, crossing, rank0


def selftest_attrs(dom):
    got = {}
    for name in ("data-selftest", "data-errors"):
        i = dom.find(name + '="')
        if i >= 0:
            j = dom.find('"', i + len(name) + 2)
            got[name] = dom[i + len(name) + 2:j].replace("&quot;", '"').replace("&amp;", "&")
    return got


def parse_selftest(s):
    out = {}
    for part in s.split():
        k, _, v = part.partition("=")
        out[k] = v
    kinds = {}
    for item in filter(None, out.get("kinds", "").split(",")):
        k, a, b, c = item.split(":")
        kinds[k] = (int(a), int(b), int(c))
    out["kinds"] = kinds
    return out


def screenshot_ok(png, colours, name):
    """Not blank: over 2% of the pixels are not white, and each expected
    fill colour (the pools' first instances) is on the screen."""
    w, h, px = browser.png_pixels(png)
    nonwhite = sum(1 for p in px if p != (255, 255, 255))
    seen = set(px)
    missing = [c for c in colours if not any(abs(c[0] - q[0]) <= 2 and abs(c[1] - q[1]) <= 2 and
                                             abs(c[2] - q[2]) <= 2 for q in seen)]
    check(nonwhite > 0.02 * w * h and not missing,
          f"{name}: screenshot {w}x{h}, {100.0 * nonwhite / (w * h):.1f}% not white, pool colours "
          f"{'all shown' if not missing else 'missing ' + str(missing)}")


def browser_checks(html, png, plan_path, name):
    plan, members, crossing, rank0 = plan_facts(plan_path)
    dom, err = browser.load(str(html), str(png))
    a = selftest_attrs(dom)
    if "data-selftest" not in a:
        check(False, f"{name}: the page's self-check ran (stderr: {err[-400:]})")
        return
    st = parse_selftest(a["data-selftest"])
    errs = json.loads(a.get("data-errors", "[]"))
    console = [line for line in err.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    check(not errs and not console, f"{name}: no uncaught error or console.error {errs + console}")
    world = plan["world_size"]
    check(st["gpus"] == str(world) and st["distinct"] == str(world),
          f"{name}: one element per GPU ({st['gpus']} elements, {st['distinct']} ranks, world {world})")
    want = {k: (members[k],) + crossing[k] for k in members}
    check(st["kinds"] == want, f"{name}: each group kind outlines its groups' ranks and marks those "
                               f"crossing nodes, and those crossing scale-up domains only ({len(want)} kinds)")
    check(st.get("details") == str(rank0), f"{name}: a click on GPU 0 lists its {rank0} groups "
                                           f"(listed {st.get('details')})")
    pools = len(plan["pools"])
    screenshot_ok(png, [hsl_rgb(h, 0.55, 0.80) for h in (210, 28, 130, 280, 50, 340, 180, 95)[:pools]], name)


def examples(d):
    # The 70B plan with 4-GPU scale-up domains: its tp8 groups stay on one
    # node and cross domains (the loader does not hold a plan to its
    # spec's placement rules).
    small = json.loads((EX / "llama-3.1-70b-pd.plan.json").read_text())
    small["scale_up_domain"] = small["hardware"]["scale_up"]["domain"] = 4
    (d / "domain4.plan.json").write_text(json.dumps(small))
    for plan in sorted(EX.glob("*.plan.json")) + [d / "domain4.plan.json"]:
        name = plan.name[:-len(".plan.json")]
        html = d / f"{name}.html"
        p = run("render", str(plan), "-o", str(html))
        if p.returncode != 0:
            check(False, f"{name}: render exits 0 ({p.stderr.strip()})")
            continue
        again = d / f"{name}.again.html"
        run("render", str(plan), "-o", str(again))
        check(html.read_bytes() == again.read_bytes(), f"{name}: the same plan gives the same bytes")
        text = html.read_text()
        check("http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
              and "<link" not in text and " src=" not in text, f"{name}: self-contained (no link, src or URL)")
        browser_checks(html, d / f"{name}.png", plan, name)


def golden(d, update):
    out = d / "golden.svg"
    p = run("render", str(EX / "llama-3.1-8b-pd-1node.plan.json"), "-o", str(out))
    check(p.returncode == 0, "golden: render -o x.svg exits 0")
    if update:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_bytes(out.read_bytes())
        print(f"updated {GOLDEN}")
    check(GOLDEN.exists() and out.read_bytes() == GOLDEN.read_bytes(),
          "golden: the SVG of llama-3.1-8b-pd-1node equals tests/render/golden/llama-3.1-8b-pd-1node.svg")
    root = ET.parse(out).getroot()
    check(root.tag == SVGNS + "svg", "golden: the SVG is well-formed XML with the SVG namespace")


def at_scale(d):
    """Past --gpu-limit: a square per node and per instance, in Chromium too."""
    plan_path = EX / "deepseek-v3-1024.plan.json"
    plan, members, crossing, _ = plan_facts(plan_path)
    html = d / "scaled.html"
    p = run("render", str(plan_path), "-o", str(html), "--gpu-limit", "512")
    check(p.returncode == 0, "at scale: render --gpu-limit 512 of a 1,024-rank plan exits 0")
    dom, err = browser.load(str(html), str(d / "scaled.png"))
    st = parse_selftest(selftest_attrs(dom).get("data-selftest", ""))
    errs = json.loads(selftest_attrs(dom).get("data-errors", "[\"no self-check\"]"))
    inst = sum(pl["replicas"] for pl in plan["pools"])
    check(st.get("gpus") == "0" and st.get("nodes") == str(len(plan["nodes"])) and
          st.get("instances") == str(inst) and not errs,
          f"at scale: no GPU elements, {st.get('nodes')} node squares of {len(plan['nodes'])}, "
          f"{st.get('instances')} instance squares of {inst}, errors {errs}")
    node = {r["rank"]: r["node"] for r in plan["ranks"]}
    want = {}
    for g in plan["groups"]:
        ranks = g["ranks"] if "ranks" in g else list(range(*g["span"]))
        if len({node[r] for r in ranks}) > 1:
            want.setdefault(g["kind"], set()).update(node[r] for r in ranks)
    got = {k: v[0] for k, v in st["kinds"].items() if v[0]}
    check(got == {k: len(v) for k, v in want.items()},
          "at scale: each kind marks exactly the nodes holding a group of it that crosses nodes")
    size, bound = html.stat().st_size, 16384 + 256 * (len(plan["nodes"]) + inst)
    check(size <= bound, f"at scale: the page ({size} B) is within 16 KiB + 256 B per node and per instance "
                         f"({bound} B; docs/render.md, \"At scale\")")
    full = d / "full.html"
    run("render", str(plan_path), "-o", str(full))
    check(html.stat().st_size < full.stat().st_size / 4,
          f"at scale: the per-node page ({html.stat().st_size} B) is a fraction of the per-GPU one "
          f"({full.stat().st_size} B)")


def escaping(d):
    plan = json.loads((EX / "llama-3.1-70b-pd.plan.json").read_text())
    evil = "<img src=x onerror=alert(1)>&\"'"

    def rename(x):
        """Every pool name "prefill" (not the role) becomes evil."""
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("name", "pool", "prefill") and v == "prefill":
                    x[k] = evil
                else:
                    rename(v)
        elif isinstance(x, list):
            for v in x:
                rename(v)
    rename(plan)
    src = d / "evil.plan.json"
    src.write_text(json.dumps(plan))
    html = d / "evil.html"
    p = run("render", str(src), "-o", str(html), "--title", "</title><script>x</script>")
    text = html.read_text() if html.exists() else ""
    if p.returncode:
        print(p.stderr)
    check(p.returncode == 0 and "<img" not in text and "<script>x" not in text and
          "&lt;img src=x onerror=alert(1)&gt;&amp;&quot;&#39;" in text,
          "a pool name and title with markup are escaped")
    dom, _ = browser.load(str(html), str(d / "evil.png"))
    errs = json.loads(selftest_attrs(dom).get("data-errors", "[\"no self-check\"]"))
    check(not errs and "<img" not in dom.split("<body", 1)[1].split("data-selftest")[0],
          f"the escaped page loads without errors and adds no element ({errs})")


def cli(d):
    plan = str(EX / "llama-3.1-8b-agg.plan.json")
    p = run("render", "--help")
    check(p.returncode == 0 and "usage: rankplan render" in p.stdout and "--gpu-limit" in p.stdout,
          "render --help")
    check(run("render", plan).returncode == 2, "render without -o exits 2")
    check(run("render", "-o", str(d / "x.html")).returncode == 2, "render without PLAN exits 2")
    p = run("render", plan, "-o", str(d / "x.html"), "--format", "png")
    check(p.returncode == 2 and "unknown format" in p.stderr, "render --format png exits 2")
    p = run("render", plan, "-o", str(d / "x.html"), "--gpu-limit", "0")
    check(p.returncode == 2 and "--gpu-limit" in p.stderr, "render --gpu-limit 0 exits 2")
    p = run("render", plan, "-o", plan)
    check(p.returncode == 2 and "destroy the input" in p.stderr, "render -o PLAN (the input) exits 2")
    p = run("render", str(d / "missing.json"), "-o", str(d / "x.html"))
    check(p.returncode == 2 and "missing.json" in p.stderr, "an unreadable plan exits 2 and is named")
    bad = d / "bad.plan.json"
    j = json.loads(pathlib.Path(plan).read_text())
    j["ranks"][1]["node"] = 99
    bad.write_text(json.dumps(j))
    p = run("render", str(bad), "-o", str(d / "bad.html"))
    check(p.returncode == 1 and "ranks[1].node" in p.stderr and not (d / "bad.html").exists(),
          "a damaged plan exits 1, names the field and writes nothing")
    split = d / "split"
    run("compile", str(EX / "llama-3.1-70b-pd.yaml"), "-o", str(d / "w.plan.json"), "--split-by-node", str(split))
    p = run("render", str(split / "node-0.plan.json"), "-o", str(d / "n.html"))
    check(p.returncode == 1 and "split-by-node" in p.stderr, "a --split-by-node file exits 1")
    p = run("render", plan, "-o", "-", "--format", "svg")
    check(p.returncode == 0 and p.stdout.startswith("<svg xmlns="), "render -o - --format svg writes the SVG")
    p = run("render", plan, "-o", "/dev/full")
    check(p.returncode == 2 and "/dev/full" in p.stderr, "a failed write exits 2 and names the file")


def plot(d):
    spec = str(EX / "llama-3.1-70b-pd.yaml")
    p = run("search", spec, "--format", "json", "--top", "1000000")
    rows = json.loads(p.stdout)["results"]
    # Every deployment: the rows, and those grouped under them ("also").
    res = [x for r in rows for x in [r] + r["also"]]
    svg = d / "pareto.svg"
    p = run("search", spec, "--plot", str(svg))
    check(p.returncode == 0 and svg.exists(), "search --plot x.svg exits 0 and writes it")
    root = ET.parse(svg).getroot()
    pts = root.findall(f".//{SVGNS}circle[@r='3']")
    front = [c for c in pts if "pareto" in c.get("class")]
    texts = [t.text or "" for t in root.iter(SVGNS + "text")]
    n_front = sum(1 for r in res if r["pareto"])
    check(len(pts) == 2 * len(res), f"plot: every ranked deployment in both panels ({len(pts)} points, "
                                    f"{len(res)} deployments)")
    check(len(front) == 2 * n_front and n_front > 0, f"plot: the {n_front} Pareto deployments filled")
    check(len(root.findall(f".//{SVGNS}polyline[@class='front']")) == 2, "plot: the front joined in both panels")
    win = [t for t in texts if t.startswith("winner ")]
    check(len(win) == 2 and win[0] == "winner " + res[0]["layout"], f"plot: the winner named in both panels {win[:1]}")
    check("TTFT (ms)" in texts and "TPOT (ms)" in texts and texts.count("goodput per GPU (tok/s)") == 2,
          "plot: axes with units")
    check(any(t.startswith("SLO 600 ms") for t in texts) and any(t.startswith("SLO 40 ms") for t in texts),
          "plot: the SLOs drawn")
    html = d / "pareto.html"
    p = run("search", spec, "--plot", str(html))
    check(p.returncode == 0 and html.read_text().startswith("<!DOCTYPE html>"), "search --plot x.html writes a page")
    dom, err = browser.load(str(html), str(d / "pareto.png"), width=1000, height=450, selftest=False)
    check("<circle" in dom and "Uncaught" not in err, "plot: the page loads in Chromium")
    w, h, px = browser.png_pixels(d / "pareto.png")
    blue = sum(1 for q in px if q == (0x1f, 0x77, 0xb4))
    check(blue > 50, f"plot: screenshot shows the front's points and line ({blue} pixels of its blue)")
    tight = d / "tight.yaml"
    tight.write_text(pathlib.Path(spec).read_text().replace("tpot: 40 ms", "tpot: 2 ms"))
    miss = d / "miss.svg"
    p = run("search", str(tight), "--plot", str(miss), "--catalog", str(SRC / "plans" / "catalog"))
    # Exit 4: the spec is valid, but no layout meets the SLOs (docs/ci.md).
    check(p.returncode == 4 and "E0508" in p.stderr and "no plot written" in p.stderr and not miss.exists(),
          "plot: a search that ranks nothing exits 4 and says that no plot was written")
    p = run("search", spec, "--plot", spec)
    check(p.returncode == 2 and "destroy the input" in p.stderr, "search --plot SPEC (the input) exits 2")
    p = run("search", spec, "--plot", "-")
    check(p.returncode == 2, "search --plot - exits 2")


def main():
    if not browser.chromium():
        print("FAIL chromium is not installed (Debian package chromium; `make deps` installs it)")
        sys.exit(1)
    update = "--update" in sys.argv
    with tempfile.TemporaryDirectory() as t:
        d = pathlib.Path(t)
        golden(d, update)
        cli(d)
        examples(d)
        at_scale(d)
        escaping(d)
        plot(d)
    sys.exit(rptest.finish())


main()
