#!/usr/bin/env python3
"""Fidelity corpus: rankplan's predictions against published measurements.

Each entry of tests/fidelity/perf/ and tests/fidelity/memory/ is a spec
(NAME.yaml) and its measurement (NAME.json: the published figures, the
workload, the source with the exact place of each figure, notes). This
script compiles every spec, prints predicted / measured per metric and
fails when a row leaves its band (docs/fidelity.md):

  perf    every row within 1.5x; per metric and model class the median
          |predicted/measured - 1| at most 15%
  memory  every row within 5%

A row that misses today carries `known_miss: {metric: reason}` in its
data file (aggregates: perf/aggregate.json); it is listed as a known miss
and does not fail the run. A known miss that starts passing fails the run
until its marker is removed, and so does a row without a marker that
misses, so the table cannot drift either way unnoticed.

  run.py                 check (RANKPLAN, SRCROOT from the environment)
  run.py --table         print the markdown table docs/fidelity.md shows
  run.py --write-doc     rewrite that table in docs/fidelity.md
"""
import json
import os
import statistics
import subprocess
import sys

SRC = os.environ.get("SRCROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
RANKPLAN = os.environ.get("RANKPLAN", os.path.join(SRC, "build", "rankplan"))
HERE = os.path.join(SRC, "tests", "fidelity")
DOC = os.path.join(SRC, "docs", "fidelity.md")
DOC_BEGIN = "<!-- fidelity-table begin: tests/fidelity/run.py --write-doc -->"
DOC_END = "<!-- fidelity-table end -->"

PERF_ROW_BAND = 1.5
PERF_MEDIAN_BAND = 0.15
MEMORY_BAND = 0.05
PERF_METRICS = ("output_tok_s_per_gpu", "tpot_ms", "ttft_ms",
                "prefill_input_tok_s_per_gpu", "decode_output_tok_s_per_gpu")
MEMORY_METRICS = ("kv_tokens", "max_concurrency", "kv_gib")


def run_json(args):
    """Runs rankplan, returns (parsed stdout or None, stderr text)."""
    p = subprocess.run([RANKPLAN] + args, capture_output=True, text=True,
                       timeout=300, check=False)
    if p.returncode not in (0, 1):
        return None, p.stderr.strip()
    try:
        return json.loads(p.stdout), p.stderr.strip()
    except json.JSONDecodeError:
        return None, p.stderr.strip() or "no JSON on stdout"


def first_line(text):
    return text.splitlines()[0] if text else "no output"


def load_entries(kind):
    folder = os.path.join(HERE, kind)
    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name == "aggregate.json":
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            entry = json.load(f)
        entry["_id"] = name[:-5]
        entry["_spec"] = os.path.join(folder, entry["spec"])
        out.append(entry)
    return out


MEMORY_FIELDS = ("engine", "version", "model", "gpu", "tp", "utilization", "published",
                 "measured", "source", "notes")


def memory_entry_problems(entry):
    """What a memory entry lacks (docs/fidelity.md lists its fields)."""
    out = ["%s: no %s" % (entry["_id"], k) for k in MEMORY_FIELDS if k not in entry]
    src = entry.get("source", {})
    out += ["%s: no source.%s" % (entry["_id"], k) for k in ("url", "where", "date")
            if k not in src]
    for k, v in sorted(entry.get("breakdown", {}).items()):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out.append("%s: breakdown.%s is not a number" % (entry["_id"], k))
    return out


def predict_perf(entry):
    """Predicted figures by metric (None where the model gives none), and why not."""
    plan, err = run_json(["compile", entry["_spec"], "-o", "-"])
    pred = {m: None for m in PERF_METRICS}
    if plan is None:
        return pred, "compile failed: " + first_line(err)
    est = plan.get("estimates")
    if est:
        pred["tpot_ms"] = est["tpot_ms"]
        pred["ttft_ms"] = est["ttft_ms"]
        pred["output_tok_s_per_gpu"] = est["throughput_tok_s"] / plan["world_size"]
        # per pool (docs/plan.md, "estimates"): a prefill pool's input
        # tokens/s per GPU, a decode pool's output tokens/s per GPU at the
        # batch it holds
        roles = {p["name"]: p["role"] for p in plan["pools"]}
        for pe in est.get("pools", []):
            role = roles.get(pe["pool"])
            if role == "prefill" and pe["prefill"]:
                pred["prefill_input_tok_s_per_gpu"] = pe["prefill"]["input_tok_s_per_gpu"]
            if role == "decode" and pe["decode"]:
                pred["decode_output_tok_s_per_gpu"] = pe["decode"]["output_tok_s_per_gpu"]
    return pred, None if est else "compile gave no estimates"


def predict_memory(entry):
    res, err = run_json(["check", "--format", "json", entry["_spec"]])
    if not res or not res.get("ledger"):
        return {m: None for m in MEMORY_METRICS}, "check failed: " + first_line(err)
    # The figures `check` prints as the engine's two start-up lines (the
    # tightest stage of the pool).
    rows = [r for r in res["ledger"] if r["layers"][1] > r["layers"][0]]
    # kv_gib: the KV pool's bytes before the engine cuts it into blocks
    # (vLLM's "Available KV cache memory"), for a log that gives no tokens.
    pred = {"kv_tokens": min(r["kv_tokens"] for r in rows), "max_concurrency": None,
            "kv_gib": min(r["kv_pool"] for r in rows) / 2**30}
    if entry.get("max_concurrency_at_tokens"):
        pred["max_concurrency"] = min(r["max_concurrency"] for r in rows)
    return pred, None


def ratio(pred, measured):
    """predicted / measured; a measured range [lo, hi] counts its nearest end."""
    if pred is None:
        return None
    if isinstance(measured, list):
        lo, hi = measured
        if lo <= pred <= hi:
            return 1.0
        measured = lo if pred < lo else hi
    return pred / measured


def row_passes(r, kind):
    """perf: not off by more than 1.5x either way; memory: within +-5%."""
    if r is None:
        return False
    if kind == "memory":
        return abs(r - 1) <= MEMORY_BAND
    return 1 / PERF_ROW_BAND <= r <= PERF_ROW_BAND


def make_rows(kind, entries, predict):
    rows = []
    for e in entries:
        pred, why = predict(e)
        for metric, measured in sorted(e["measured"].items()):
            r = ratio(pred.get(metric), measured)
            rows.append({
                "kind": kind, "id": e["_id"], "metric": metric, "measured": measured,
                "predicted": pred.get(metric), "ratio": r, "pass": row_passes(r, kind),
                "known_miss": e.get("known_miss", {}).get(metric),
                "class": e.get("model_class", ""), "why": why,
            })
    return rows


def aggregate_rows(perf_rows):
    path = os.path.join(HERE, "perf", "aggregate.json")
    with open(path, encoding="utf-8") as f:
        known = json.load(f).get("known_miss", {})
    groups = {}
    for r in perf_rows:
        groups.setdefault((r["metric"], r["class"]), []).append(r)
    out = []
    for (metric, cls), rows in sorted(groups.items()):
        errs = [abs(r["ratio"] - 1) for r in rows if r["ratio"] is not None]
        med = statistics.median(errs) if errs else None
        key = metric + "/" + cls
        out.append({
            "kind": "perf-median", "id": cls, "metric": metric, "median": med,
            "n": len(errs), "of": len(rows),
            "pass": med is not None and med <= PERF_MEDIAN_BAND,
            "known_miss": known.get(key), "key": key,
        })
    return out


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, list):
        lo, hi = fmt(x[0]), fmt(x[1])
        digits = 3
        # a rounded figure's range: the digits that give both ends as written
        while lo == hi and digits < 9:
            digits += 1
            lo, hi = "%.*g" % (digits, x[0]), "%.*g" % (digits, x[1])
            if float(lo) != x[0] or float(hi) != x[1]:
                lo = hi
        return "%s-%s" % (lo, hi)
    if abs(x) >= 100:
        return "%.0f" % x
    return "%.3g" % x


def verdict(r):
    """(status word, failure message or None)."""
    if r["pass"] and r["known_miss"]:
        return "FAIL", "passes now: remove its known_miss marker"
    if r["pass"]:
        return "ok", None
    if r["known_miss"]:
        return "known miss", None
    return "FAIL", "left its band without a known_miss marker"


def table(rows, aggs):
    out = ["| corpus | entry | metric | measured | predicted | predicted/measured | status |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["kind"], r["id"], r["metric"], fmt(r["measured"]), fmt(r["predicted"]),
            "-" if r["ratio"] is None else "%.2f" % r["ratio"], verdict(r)[0]))
    out += ["", "| model class | metric | rows with a prediction | median abs error | status |",
            "|---|---|---|---|---|"]
    for a in aggs:
        med = "-" if a["median"] is None else "%.0f%%" % (100 * a["median"])
        out.append("| %s | %s | %d of %d | %s | %s |" % (
            a["id"], a["metric"], a["n"], a["of"], med, verdict(a)[0]))
    return "\n".join(out) + "\n"


def write_doc(text):
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    head, rest = doc.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    new = head + DOC_BEGIN + "\n" + text + DOC_END + tail
    tmp = DOC + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, DOC)


def median_words(r):
    """An aggregate's computed median, put before its note (the note holds
    no figure of its own that could fall behind the table)."""
    if r["kind"] != "perf-median" or r["median"] is None:
        return ""
    return "median |error| %.0f%% over %d of %d rows, band %.0f%%: " % (
        100 * r["median"], r["n"], r["of"], 100 * PERF_MEDIAN_BAND)


def report(rows, aggs):
    failures, misses = [], []
    for r in rows + aggs:
        word, msg = verdict(r)
        if r["kind"] == "perf-median" and (r["known_miss"] or "").startswith("median |error|"):
            word, msg = "FAIL", "its note restates the median, which the runner prints: drop the figure"
        name = "%s %s %s" % (r["kind"], r["id"], r["metric"])
        if msg:
            failures.append("%s: %s" % (name, msg))
        elif word == "known miss":
            misses.append("%s: %s%s" % (name, median_words(r), r["known_miss"]))
    print("\nKNOWN MISSES (%d): rows outside their band today" % len(misses))
    for m in misses:
        print("  " + m)
    for r in rows:
        if r["why"] and r["predicted"] is None:
            print("  note: %s %s: %s" % (r["id"], r["metric"], r["why"]))
    return failures


def main(argv):
    if not os.access(RANKPLAN, os.X_OK):
        print("run.py: no rankplan binary at %s (set RANKPLAN)" % RANKPLAN, file=sys.stderr)
        return 2
    rows = make_rows("perf", load_entries("perf"), predict_perf)
    memory = load_entries("memory")
    problems = [p for e in memory for p in memory_entry_problems(e)]
    rows += make_rows("memory", memory, predict_memory)
    aggs = aggregate_rows([r for r in rows if r["kind"] == "perf"])
    text = table(rows, aggs)
    if "--write-doc" in argv:
        write_doc(text)
        return 0
    print(text)
    if "--table" in argv:
        return 0
    failures = problems + report(rows, aggs)
    with open(DOC, encoding="utf-8") as f:
        if DOC_BEGIN + "\n" + text + DOC_END not in f.read():
            failures.append("docs/fidelity.md: its table differs from this run; "
                            "run tests/fidelity/run.py --write-doc")
    for f in failures:
        print("FAIL " + f)
    ok = len(rows) + len(aggs) - len(failures)
    print("%d passed, %d failed" % (ok, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
