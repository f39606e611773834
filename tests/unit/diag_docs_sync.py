#!/usr/bin/env python3
"""Every diagnostic code in compiler/codes_*.def is documented in
docs/errors.md (a '### E0xxx' heading) and every documented code exists."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
codes = {}
for f in sorted((root / "compiler").glob("codes_*.def")):
    for m in re.finditer(r'^X\((\w+),\s*(SEV_\w+),\s*"([^"]+)"', f.read_text(), re.M):
        if m.group(1) in codes:
            print(f"{f.name}: code {m.group(1)} defined twice")
            sys.exit(1)
        codes[m.group(1)] = m.group(3)
doc = (root / "docs" / "errors.md").read_text()
documented = set(re.findall(r"^### ([EWN]\d{4})\b", doc, re.M))
missing = sorted(set(codes) - documented)
extra = sorted(documented - set(codes))
bad = 0
for c in missing:
    print(f"docs/errors.md: code {c} ({codes[c]}) is not documented")
    bad = 1
for c in extra:
    print(f"docs/errors.md: documents {c}, which no codes_*.def defines")
    bad = 1
for c, slug in codes.items():
    m = re.search(rf"^### {c} `([^`]+)`", doc, re.M)
    if m and m.group(1) != slug:
        print(f"docs/errors.md: {c} is titled `{m.group(1)}`, table says `{slug}`")
        bad = 1
print(f"{len(codes)} codes, {len(documented)} documented")
sys.exit(bad)
