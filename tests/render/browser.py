"""Headless Chromium for the render tests, with the Python standard library only.

load(html_path, png_path) opens a copy of the page with two scripts added:
one at the top of <head> that records every uncaught error and
console.error call, and one at the end of <body> (SELFTEST) that exercises
the page (every group kind selected, a GPU clicked) and writes what it saw
into attributes of <body>. Chromium's --dump-dom prints the DOM after the
page's scripts ran and --screenshot writes a PNG of the same load.
png_pixels() decodes that PNG (zlib and the five PNG row filters).
"""
import os
import shutil
import struct
import subprocess
import zlib

HOOK = """<script>window.__errs = [];
window.addEventListener('error', function (e) { window.__errs.push('uncaught: ' + e.message); });
(function () { var ce = console.error; console.error = function () {
  window.__errs.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments); };
})();</script>"""

# What the test reads back: data-selftest (gpus=N distinct=N nodes=N
# instances=N kinds=KIND:OUTLINED:NODE_CROSSING:DOMAIN_ONLY,... details=N) and
# data-errors (a JSON list).
SELFTEST = """<script>(function () {
var out = [], errs = window.__errs;
try {
  var D = JSON.parse(document.getElementById('plan-data').textContent);
  var gpus = document.querySelectorAll('.gpu'), ids = {};
  gpus.forEach(function (g) { ids[g.getAttribute('data-rank')] = 1; });
  out.push('gpus=' + gpus.length, 'distinct=' + Object.keys(ids).length);
  out.push('nodes=' + document.querySelectorAll('.nd').length, 'instances=' + document.querySelectorAll('.inst').length);
  var sel = document.getElementById('kind'), kinds = [];
  for (var i = 1; i < sel.options.length; i++) {
    sel.value = sel.options[i].value;
    sel.dispatchEvent(new Event('change'));
    if (D.per_gpu) kinds.push(sel.value + ':' + document.querySelectorAll('.frame.grp').length + ':' +
                              document.querySelectorAll('.frame.xn').length + ':' +
                              document.querySelectorAll('.frame.xd').length);
    else kinds.push(sel.value + ':' + document.querySelectorAll('.nd.hit').length + ':0:0');
  }
  out.push('kinds=' + kinds.join(','));
  var g = document.getElementById('gpu-0');
  if (g) {
    g.querySelector('.frame').dispatchEvent(new MouseEvent('click', {bubbles: true}));
    var ul = document.querySelectorAll('#details-body ul');
    out.push('details=' + (ul.length ? ul[0].children.length : -1));
  }
  sel.value = ''; sel.dispatchEvent(new Event('change'));
} catch (e) { errs.push('selftest: ' + e); }
document.body.setAttribute('data-selftest', out.join(' '));
document.body.setAttribute('data-errors', JSON.stringify(errs));
})();</script>"""


def chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


def load(html_path, png_path, width=1200, height=900, selftest=True):
    """Returns (dom text, chromium's stderr). The page is copied next to
    itself with the two scripts added; png_path receives the screenshot."""
    with open(html_path, encoding="utf-8") as f:
        text = f.read()
    if selftest:
        text = text.replace("<head>", "<head>" + HOOK, 1)
        text = text.replace("</body>", SELFTEST + "</body>", 1)
    probe = html_path + ".probe.html"
    with open(probe, "w", encoding="utf-8") as f:
        f.write(text)
    # Root needs --no-sandbox; nothing may be fetched (the page is
    # self-contained), which --host-resolver-rules enforces.
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
           f"--window-size={width},{height}", f"--screenshot={png_path}", "--dump-dom",
           "file://" + os.path.abspath(probe)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HOME=os.path.dirname(os.path.abspath(probe))))
    return p.stdout, p.stderr


def _unfilter(raw, width, height, bpp):
    stride = width * bpp
    out = bytearray(stride * height)
    prev = bytearray(stride)
    pos = 0
    for y in range(height):
        ft = raw[pos]
        line = bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        if ft == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ft == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif ft == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 255
        elif ft != 0:
            raise ValueError(f"PNG row {y}: filter type {ft}")
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return out


def png_pixels(path):
    """(width, height, list of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    width, height, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"PNG kind not handled: depth {depth} colour type {ctype} interlace {interlace}")
    bpp = 3 if ctype == 2 else 4
    px = _unfilter(zlib.decompress(idat), width, height, bpp)
    return width, height, [tuple(px[i:i + 3]) for i in range(0, len(px), bpp)]
