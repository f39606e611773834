#!/usr/bin/env python3
"""No function in compiler/ or runtime/ runs over MAX_LINES lines
(docs/architecture.md, "Rules every stage follows"): one that does is
listed with its file, line and length, longest first, and the test fails.

A function is a top-level `{ ... }` block whose opening line is not a
struct, union, enum, array or initializer; lines are counted from the line
that opens its body to the line that closes it. Comments, strings and
character literals are skipped when counting braces.
"""
import pathlib
import re
import sys

MAX_LINES = 70
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])


def strip(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = strip(path.read_text())
    depth, start, head = 0, None, ""
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            if depth == 0:
                # the text since the last top-level ; or } names what opens here
                k = max(text.rfind(";", 0, i), text.rfind("}", 0, i))
                head = text[k + 1:i]
                start = line
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start is not None:
                h = " ".join(head.split())
                if re.search(r"\)\s*$", h) and not re.search(r"\b(struct|union|enum)\b[^()]*$|=\s*$", h):
                    name = re.findall(r"(\w+)\s*\(", h)
                    yield (name[-1] if name else "?"), start, line - start + 1
                start = None


offenders = []
for d in ("compiler", "runtime"):
    for f in sorted((root / d).glob("*.c")):
        for name, start, n in functions(f):
            if n > MAX_LINES:
                offenders.append((n, f"{f.relative_to(root)}:{start}", name))
for n, where, name in sorted(offenders, reverse=True):
    print(f"func-length: {where}: {name} is {n} lines (at most {MAX_LINES})")
print(f"func-length: {len(offenders)} function(s) over {MAX_LINES} lines")
print(f"{0 if offenders else 1} passed, {1 if offenders else 0} failed")
sys.exit(1 if offenders else 0)
