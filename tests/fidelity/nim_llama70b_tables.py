#!/usr/bin/env python3
"""Every row of NVIDIA NIM's Llama-3.3-70B FP8 TP2 H100 tables (TensorRT-LLM
in NIM 1.8.0), priced as the corpus row nim-llama33-70b-fp8-h100-tp2-5k500-c1
prices its own, with the lengths and the requests in flight changed. The
corpus holds nine of the 39 rows (the 5000/500 table and the 500/2000 row
at one in flight); this prints the rest beside them so that what the model
does with the other loads is on record. It prints a markdown table and
fails on nothing.

Source of the measured figures (TTFT ms, ITL ms, Throughput tokens/s over
the 2 GPUs, each the AIPerf average of its row):
https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, section
"Llama-3.3-70b-instruct Results", "Version: 1.8.0", "2 x H100 80G",
"fp8 TP2", tables "200 Input Tokens / 200 Output Tokens", "500 Input Tokens
/ 2000 Output Tokens", "1000 Input Tokens / 1000 Output Tokens", "5000
Input Tokens / 500 Output Tokens" and "20000 Input Tokens / 2000 Output
Tokens". The 20000-token prompts are longer than TensorRT-LLM's default
max_num_tokens (8192), which the engine refuses without chunked prefill
(E0713): those rows run with `serving.chunked_prefill: true`, an
assumption (the page does not say how the profile runs them).

  RANKPLAN=build/rankplan SRCROOT=. python3 tests/fidelity/nim_llama70b_tables.py [--write-doc|--check-doc]

docs/fidelity.md shows the output between its nim-tables markers:
--write-doc rewrites it there, --check-doc fails when it differs (the
test suite runs that, so a change to the cost model updates the table).
"""
import os
import statistics
import sys
import tempfile

import run  # tests/fidelity/run.py: run_json

SRC = os.environ.get("SRCROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATE = os.path.join(SRC, "tests", "fidelity", "perf", "nim-llama33-70b-fp8-h100-tp2-5k500-c1.yaml")
IN_CORPUS = {(5000, 500), (500, 2000, 1)}
DOC = os.path.join(SRC, "docs", "fidelity.md")
BEGIN = "<!-- nim-tables begin: tests/fidelity/nim_llama70b_tables.py --write-doc -->\n"
END = "<!-- nim-tables end -->\n"

# (input tokens, output tokens, concurrency, TTFT ms, ITL ms, tokens/s)
ROWS = [
    (200, 200, 1, 31.22, 18.8, 53), (200, 200, 5, 88.7, 18.83, 260.67),
    (200, 200, 25, 138.98, 20.61, 1178.68), (200, 200, 50, 156.28, 23.33, 2081.24),
    (200, 200, 100, 176.8, 29.87, 3263.31), (200, 200, 150, 195.51, 37.75, 3883.1),
    (200, 200, 200, 253.36, 42.95, 4534.54), (200, 200, 250, 264.22, 48.16, 5067.05),
    (500, 2000, 1, 47.77, 18.91, 52.85), (500, 2000, 5, 126.53, 19.04, 261.83),
    (500, 2000, 25, 147.63, 21.69, 1149.05), (500, 2000, 50, 181.64, 23.97, 2078.43),
    (500, 2000, 100, 229.77, 29.98, 3322.87), (500, 2000, 150, 296.74, 37.85, 3948.26),
    (500, 2000, 200, 4867.89, 40.72, 4624.14),
    (1000, 1000, 1, 82.46, 18.67, 53.37), (1000, 1000, 5, 145.62, 19.07, 260.48),
    (1000, 1000, 25, 250.49, 22.45, 1102.23), (1000, 1000, 50, 278.62, 25.87, 1912.93),
    (1000, 1000, 100, 334.23, 34.21, 2895.49), (1000, 1000, 150, 428.54, 44.44, 3342.67),
    (1000, 1000, 200, 558.23, 50.66, 3901.74), (1000, 1000, 250, 3499.83, 56.3, 4167.39),
    (5000, 500, 1, 406.77, 18.58, 51.67), (5000, 500, 5, 546.7, 21.83, 218.48),
    (5000, 500, 25, 688.69, 38.75, 623.4), (5000, 500, 50, 834.51, 59.73, 814.37),
    (5000, 500, 100, 7996.25, 92.91, 917.26), (5000, 500, 150, 34794.22, 92.86, 920.9),
    (5000, 500, 200, 61680.22, 93.06, 920.54), (5000, 500, 250, 88605.32, 93.2, 920.12),
    (20000, 2000, 1, 1833.01, 19.58, 48.8), (20000, 2000, 5, 2910.33, 25.24, 186.8),
    (20000, 2000, 25, 18781.26, 48.26, 415.33), (20000, 2000, 50, 123969.71, 49.22, 418.65),
    (20000, 2000, 100, 333564.85, 49.81, 425.1), (20000, 2000, 150, 543226.4, 50.01, 423.95),
    (20000, 2000, 200, 753417.03, 50.06, 425.74), (20000, 2000, 250, 963222.96, 50.13, 427.06),
]


def spec_text(template, isl, osl, conc):
    out = []
    for line in template.splitlines():
        if line.startswith("  input_tokens:"):
            line = "  input_tokens: %d" % isl
        elif line.startswith("  output_tokens:"):
            line = "  output_tokens: %d" % osl
        elif line.startswith("  concurrency:"):
            line = "  concurrency: %d" % conc
        elif line.startswith("slo:") and isl > 8192:
            out.append("serving: { chunked_prefill: true }")
        out.append(line)
    return "\n".join(out) + "\n"


def predict(path):
    plan, _ = run.run_json(["compile", path, "-o", "-"])
    return plan.get("estimates") if plan else None


def in_corpus(row):
    return tuple(row[:2]) in IN_CORPUS or tuple(row[:3]) in IN_CORPUS


def ratios(row, est):
    """predicted / measured TTFT, TPOT (the ITL) and throughput."""
    return (est["ttft_ms"] / row[3], est["tpot_ms"] / row[4], est["throughput_tok_s"] / row[5])


def row_text(row, est):
    head = "| %d/%d | %d | %s |" % (row[0], row[1], row[2], "corpus" if in_corpus(row) else "-")
    if est is None:
        return head + " compile failed | | |"
    return head + " %.2f | %.2f | %.2f |" % ratios(row, est)


def medians(out):
    """The median |error| of each metric over the rows outside the corpus."""
    errs = [[abs(r - 1) for r in ratios(row, est)] for row, est in out
            if est is not None and not in_corpus(row)]
    if not errs:
        return "no row outside the corpus priced"
    meds = [statistics.median(e[i] for e in errs) for i in range(3)]
    return ("over the %d rows outside the corpus, median |error|: TTFT %.0f%%, TPOT %.0f%%, "
            "throughput %.0f%%" % (len(errs), 100 * meds[0], 100 * meds[1], 100 * meds[2]))


def table():
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    lines = ["| ISL/OSL | in flight | in the corpus | TTFT predicted/measured | "
             "TPOT predicted/measured ITL | throughput predicted/measured |",
             "|---|---:|---|---:|---:|---:|"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in ROWS:
            path = os.path.join(tmp, "%d-%d-c%d.yaml" % row[:3])
            with open(path, "w", encoding="utf-8") as f:
                f.write(spec_text(template, *row[:3]))
            out.append((row, predict(path)))
            lines.append(row_text(row, out[-1][1]))
    return "\n".join(lines) + "\n\n" + medians(out) + "\n"


def doc_split():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise SystemExit("%s: no nim-tables markers" % DOC)
    return text[:i + len(BEGIN)], text[i + len(BEGIN):j], text[j:]


def main(argv):
    text = table()
    if "--write-doc" in argv:
        head, _, tail = doc_split()
        tmp = DOC + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(head + text + tail)
        os.replace(tmp, DOC)
    elif "--check-doc" in argv:
        if doc_split()[1] != text:
            print("FAIL %s: its NIM table differs from this run; run "
                  "tests/fidelity/nim_llama70b_tables.py --write-doc" % DOC)
            return 1
        print("ok   docs/fidelity.md NIM table")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
