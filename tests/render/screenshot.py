#!/usr/bin/env python3
"""Writes docs/img/render-llama-3.1-70b-pd.png, the screenshot docs/render.md
and the README show: `rankplan render` of plans/examples/llama-3.1-70b-pd.plan.json
in headless Chromium, group kind tp selected and GPU 0 clicked.

usage: tests/render/screenshot.py [BUILD_DIR]   (default: build)
"""
import os
import pathlib
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402

root = pathlib.Path(__file__).resolve().parents[2]
build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build")
rp = (build if build.is_absolute() else root / build) / "rankplan"
out = root / "docs" / "img" / "render-llama-3.1-70b-pd.png"
ACT = """<script>(function () {
var s = document.getElementById('kind'); s.value = 'tp'; s.dispatchEvent(new Event('change'));
document.querySelector('#gpu-0 .frame').dispatchEvent(new MouseEvent('click', {bubbles: true}));
})();</script>"""
with tempfile.TemporaryDirectory() as t:
    html = pathlib.Path(t) / "plan.html"
    subprocess.run([str(rp), "render", str(root / "plans/examples/llama-3.1-70b-pd.plan.json"), "-o", str(html),
                    "--title", "llama-3.1-70b-pd"], check=True)
    html.write_text(html.read_text().replace("</body>", ACT + "</body>", 1))
    out.parent.mkdir(exist_ok=True)
    browser.load(str(html), str(out), width=1760, height=1150, selftest=False)
print(f"wrote {out}")
