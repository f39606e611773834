#!/usr/bin/env python3
"""`rankplan calibrate` end to end.

- Recovery: benchmark results in the three real layouts (vLLM, SGLang
  JSON Lines, AIPerf) are written from rankplan's own predictions at chosen
  constants (`compile --calibration`, benchgen.py); calibrate, started from
  the defaults, gets every chosen constant back within 2%, for an
  aggregated and a disaggregated spec.
- The file it writes is read by `search --calibration` (the constants in
  effect are the fitted ones) and `compile --calibration` (the plan's
  estimates are the chosen constants' figures).
- The fixtures (fixtures/README.md) are read; every bad input is a
  diagnostic with its code, the file and the field path, and nothing is
  written; usage errors exit 2.
"""
import json
import re
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "search"))
import benchgen  # noqa: E402
import searchlib  # noqa: E402
from searchlib import RP, SRC, check  # noqa: E402

FIX = HERE / "fixtures"
AGG = SRC / "plans" / "examples" / "llama-3.1-8b-agg.yaml"
PD = SRC / "plans" / "examples" / "llama-3.1-70b-pd.yaml"


def rp(*args):
    """rankplan with args: (exit code, stdout, stderr)."""
    p = searchlib.rp(*map(str, args))
    return p.returncode, p.stdout, p.stderr


# Load points: closed loops from 1 to many requests in flight, and open
# loops, at short and long prompts, so that prefill compute, decode bytes
# and the per-step overhead each move some prediction.
AGG_POINTS = [dict(tin=500, tout=200, conc=1), dict(tin=2000, tout=300, conc=8),
              dict(tin=8000, tout=500, conc=16), dict(tin=1000, tout=1000, conc=64),
              dict(tin=2000, tout=300, rate=10), dict(tin=4000, tout=200, rate=5)]
PD_POINTS = [dict(tin=1000, tout=200, conc=1), dict(tin=4000, tout=500, conc=32),
             dict(tin=8000, tout=300, conc=128), dict(tin=500, tout=1000, conc=512),
             dict(tin=4000, tout=500, rate=4), dict(tin=2000, tout=200, rate=12)]


def recover(tmp, name, spec, model, chosen, points, fit=None):
    """Writes the runs at `chosen`, calibrates from the defaults, checks
    each chosen constant comes back within 2%; returns the file written."""
    d = pathlib.Path(tmp) / name
    d.mkdir()
    cfile = d / "chosen.json"
    cfile.write_text(json.dumps({"format": "rankplan.calibration/1", **chosen}))
    text = spec.read_text()
    preds = [benchgen.predict(RP, text, cfile, d, p["tin"], p["tout"], p.get("rate"), p.get("conc"))
             for p in points]
    files = benchgen.write_runs(points, preds, model, d)
    out = d / "cal.json"
    args = ["calibrate", spec, "--bench", files[0], *files[1:], "-o", out]
    if fit:
        args += ["--fit", fit]
    rc, so, se = rp(*args)
    check(rc == 0 and out.exists(), f"{name}: calibrate exits 0 and writes the file", so + se)
    if rc != 0:
        return None
    got = json.loads(out.read_text())
    for k, v in chosen.items():
        check(abs(got[k] / v - 1) <= 0.02, f"{name}: {k} recovered within 2% ({got[k]:.6g} for {v})")
    check(got["format"] == "rankplan.calibration/1" and str(spec) in got["source"],
          f"{name}: the file names its format and its spec", json.dumps(got))
    for tool in ("(vllm)", "(sglang)", "(aiperf)"):
        check(tool in so, f"{name}: a run of {tool} is in the table", so)
    # The model's integer quantities (requests per dp rank, prefill passes)
    # make its residuals piecewise smooth, so a fit to its own predictions
    # may stop a hair from zero: within 0.05% log error, far inside the 2%.
    rms = [l for l in so.splitlines() if l.startswith("rms log error")]
    check(rms and "before" in rms[0] and float(rms[0].split()[5].rstrip(",")) <= 0.0005,
          f"{name}: the residuals after the fit are within 0.05%", so)
    check(so.count("before") == 3 * len(points) + 1 and "after" in so,
          f"{name}: each run's TTFT, TPOT and throughput before and after", so)
    return out, cfile


def recovery(tmp):
    chosen = {"mfu_prefill": 0.45, "hbm_efficiency": 0.7, "step_overhead_s": 0.0012}
    r = recover(tmp, "agg", AGG, "meta-llama/Llama-3.1-8B-Instruct", chosen, AGG_POINTS)
    chosen_pd = {"mfu_prefill": 0.5, "mfu_decode": 0.35, "hbm_efficiency": 0.72, "step_overhead_s": 0.002}
    recover(tmp, "pd", PD, "meta-llama/Llama-3.1-70B-Instruct", chosen_pd, PD_POINTS,
            "mfu_prefill,mfu_decode,hbm_efficiency,step_overhead_s")
    # The CPU work per sequence of a step, told from the fixed part by the
    # points' different batches in flight (1 to 512).
    chosen_seq = {"mfu_prefill": 0.5, "hbm_efficiency": 0.72, "step_overhead_s": 0.002,
                  "seq_overhead_s": 2e-5}
    recover(tmp, "pd-seq", PD, "meta-llama/Llama-3.1-70B-Instruct", chosen_seq, PD_POINTS,
            "mfu_prefill,hbm_efficiency,step_overhead_s,seq_overhead_s")
    # The time outside the GPU, told from the prefill by the points'
    # different prompt lengths.
    chosen_out = {"mfu_prefill": 0.45, "hbm_efficiency": 0.7, "step_overhead_s": 0.0012,
                  "request_overhead_s": 0.03}
    recover(tmp, "agg-outside", AGG, "meta-llama/Llama-3.1-8B-Instruct", chosen_out, AGG_POINTS,
            "mfu_prefill,hbm_efficiency,step_overhead_s,request_overhead_s")
    return r


def used_by_search_and_compile(tmp, cal, chosen):
    rc, so, se = rp("search", AGG, "--calibration", cal, "--format", "json", "--top", "1")
    check(rc == 0, "search --calibration reads the file calibrate wrote", se)
    if rc == 0:
        k = json.loads(so)["constants"]
        got = json.loads(cal.read_text())
        check(all(abs(k[n] / got[n] - 1) < 1e-9 for n in ("mfu_prefill", "hbm_efficiency", "step_overhead_s")),
              "search runs with the fitted constants", json.dumps(k))
    plans = []
    for c in (cal, chosen):
        out = pathlib.Path(tmp) / f"plan-{c.stem}.json"
        rc, so, se = rp("compile", AGG, "--calibration", c, "-o", out)
        check(rc == 0, f"compile --calibration {c.name}", se)
        plans.append(json.loads(out.read_text())["estimates"] if rc == 0 else {})
    a, b = plans
    check(a and all(abs(a[k] / b[k] - 1) < 1e-6 for k in ("ttft_ms", "tpot_ms", "throughput_tok_s")),
          "compile with the fitted file predicts what the chosen constants do", f"{a}\n{b}")
    rc, so, se = rp("compile", AGG, "-o", pathlib.Path(tmp) / "plan-default.json")
    d = json.loads((pathlib.Path(tmp) / "plan-default.json").read_text())["estimates"]
    check(rc == 0 and d["ttft_ms"] != a["ttft_ms"], "and the defaults predict otherwise")


def fixtures(tmp):
    out = pathlib.Path(tmp) / "fix.json"
    rc, so, se = rp("calibrate", AGG, "--bench", FIX / "vllm-serve.json",
                    FIX / "sglang-bench-serving.jsonl", FIX / "profile_export_aiperf.json", "-o", out)
    check(rc == 0 and out.exists(), "the fixtures of the three tools are read", so + se)
    check("sglang-bench-serving.jsonl #2 (sglang): concurrency 16" in so,
          "SGLang's Infinity request rate with a concurrency is a closed loop", so)
    check("vllm-serve.json #1 (vllm): concurrency 8" in so, "vLLM's \"inf\" rate with a concurrency", so)
    check("profile_export_aiperf.json #1 (aiperf): concurrency 4, 4000 input" in so,
          "AIPerf's input_config.loadgen.concurrency and sequence lengths", so)
    two = pathlib.Path(tmp) / "appended.json"
    v = (FIX / "vllm-serve.json").read_text().strip()
    two.write_text(v + "\n" + v.replace('"max_concurrency": 8', '"max_concurrency": 16') + "\n")
    rc, so, se = rp("calibrate", AGG, "--bench", two, "-o", out)
    check(rc == 0 and "appended.json #2 (vllm): concurrency 16" in so,
          "vLLM --append-result (objects one per line) is read run by run", so + se)


def bad(tmp, what, name, text, code, needles, rc_want=1, spec=AGG):
    """A bad result file: exit rc_want, diagnostic `code` naming the file
    and each needle (the field path), and no calibration file written."""
    f = pathlib.Path(tmp) / name
    if text is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    out = pathlib.Path(tmp) / "never.json"
    rc, so, se = rp("calibrate", spec, "--bench", f, "-o", out)
    ok = rc == rc_want and f"[{code}]" in se and str(f) in se and all(n in se for n in needles)
    check(ok and not out.exists(), f"bad input: {what} is {code}", f"rc {rc}\n{se}")


def vllm_doc():
    return json.loads((FIX / "vllm-serve.json").read_text())


def aiperf_doc():
    return json.loads((FIX / "profile_export_aiperf.json").read_text())


def with_(doc, **kw):
    doc = dict(doc)
    for k, v in kw.items():
        if v is None:
            doc.pop(k, None)
        else:
            doc[k] = v
    return json.dumps(doc)


def at(name, text, *keys):
    """`name:line:col:` of the last of keys, each looked for after the one
    before (the writers' key order), as a field's diagnostic shows it."""
    i = 0
    for k in keys:
        i = text.index(f'"{k}"', i)
    line = text.count("\n", 0, i) + 1
    return f"{name}:{line}:{i - (text.rfind(chr(10), 0, i) + 1) + 1}:"


def bad_inputs(tmp):
    sgl = (FIX / "sglang-bench-serving.jsonl").read_text().splitlines()
    bad(tmp, "a missing field", "v-missing.json", with_(vllm_doc(), mean_tpot_ms=None), "E0563",
        ["field `mean_tpot_ms` is missing", "run 1", "v-missing.json:1:1:"])
    t = with_(vllm_doc(), mean_ttft_ms="12.5")
    bad(tmp, "a string for a number", "v-type.json", t, "E0563",
        ["field `mean_ttft_ms` must be a number, got a string", at("v-type.json", t, "mean_ttft_ms")])
    run2 = sgl[1].replace('"mean_ttft_ms": ', '"mean_ttft_ms": NaN, "x": ')
    bad(tmp, "a NaN (Python's json.dumps)", "s-nan.jsonl", sgl[0] + "\n" + run2 + "\n", "E0563",
        ["run 2", "field `mean_ttft_ms` is not a finite number (NaN)",
         "s-nan.jsonl:2:%d:" % (run2.index('"mean_ttft_ms"') + 1)])
    t = with_(vllm_doc(), output_throughput=1).replace('"output_throughput": 1', '"output_throughput": Infinity')
    bad(tmp, "an infinite throughput", "v-inf.json", t, "E0563",
        ["field `output_throughput` is not a finite number (Infinity)", at("v-inf.json", t, "output_throughput")])
    t = with_(vllm_doc(), completed=0)
    bad(tmp, "a count below 1", "v-zero.json", t, "E0563",
        ["field `completed` is out of range", at("v-zero.json", t, "completed")])
    a = aiperf_doc()
    a["time_to_first_token"]["unit"] = "ns"
    t = json.dumps(a, indent=2)
    bad(tmp, "an AIPerf metric in another unit", "a-unit/profile_export_aiperf.json", t,
        "E0563", ["field `time_to_first_token.unit` must be \"ms\", got ns",
                  at("profile_export_aiperf.json", t, "time_to_first_token", "unit")])
    a = aiperf_doc()
    del a["input_config"]["endpoint"]["model_names"]
    bad(tmp, "a missing nested field", "a-model/profile_export_aiperf.json", json.dumps(a), "E0563",
        ["field `input_config.endpoint.model_names[0]` is missing"])
    a = aiperf_doc()
    a["input_config"]["loadgen"]["concurrency"] = [4]
    t = json.dumps(a, indent=2)
    bad(tmp, "a list for a count", "a-conc/profile_export_aiperf.json", t, "E0563",
        ["field `input_config.loadgen.concurrency` must be a number, got an array",
         at("profile_export_aiperf.json", t, "input_config", "loadgen", "concurrency")])
    bad(tmp, "another model", "v-model.json", with_(vllm_doc(), model_id="Qwen/Qwen3-8B"), "E0564",
        ["field `model_id` is \"Qwen/Qwen3-8B\", not the spec's model (meta-llama/Llama-3.1-8B)"])
    bad(tmp, "a burst (no rate, no concurrency)", "v-burst.json", with_(vllm_doc(), max_concurrency=None),
        "E0565", ["no steady load"])
    bad(tmp, "no known layout", "other.json", json.dumps({"ttft": 1.0}), "E0562",
        ["not a result of vllm bench serve"])
    g = aiperf_doc()
    g["input_config"] = {"model": ["meta-llama/Llama-3.1-8B-Instruct"], "concurrency": 4, "request_rate": None}
    bad(tmp, "a GenAI-Perf export", "profile_export_genai_perf.json", json.dumps(g), "E0562",
        ["a GenAI-Perf export (`input_config.model`)"])
    bad(tmp, "a JSON array", "array.json", "[1, 2]", "E0562", ["expected a JSON object, got an array"])
    bad(tmp, "a record cut short", "s-syntax.jsonl", sgl[0] + "\n{\"backend\": \n", "E0561",
        ["s-syntax.jsonl:3:", "is not valid JSON"])
    bad(tmp, "an empty file", "empty.json", "\n", "E0561", ["holds no JSON object"])
    bad(tmp, "a missing file", "absent.json", None, "E0560", ["cannot read benchmark file"], rc_want=2)
    search_spec = SRC / "tests" / "search" / "moe-prime-experts.yaml"
    rc, so, se = rp("calibrate", search_spec, "--bench", FIX / "sglang-bench-serving.jsonl",
                    "-o", pathlib.Path(tmp) / "never.json")
    check(rc == 1 and "error[E0566]: the spec has no pools" in se and se.count("error[") == 1,
          "bad input: a spec without pools is one E0566", se)
    big = with_(vllm_doc(), total_input_tokens=64 * 10_000_000)
    bad(tmp, "a workload the deployment cannot hold", "v-long.json", big, "E0566",
        ["does not compile at the run's workload (10000000 input"])


def usage(tmp):
    ok = FIX / "vllm-serve.json"
    rc, so, se = rp("calibrate", "--help")
    check(rc == 0 and "--bench FILE" in so and "--fit NAME" in so and "-o, --output FILE" in so, "help", so)
    for args, msg in ((["calibrate", AGG, "-o", "x.json"], "missing '--bench FILE'"),
                      (["calibrate", AGG, "--bench", ok], "missing '-o CAL'"),
                      (["calibrate", "--bench", ok, "-o", "x.json"], "missing SPEC"),
                      (["calibrate", AGG, "--bench", ok, "-o", ok], "is the input"),
                      (["calibrate", AGG, "--bench", ok, "-o", "x.json", "--fit", "mfu_prefil"],
                       "`mfu_prefil` cannot be fitted"),
                      (["calibrate", AGG, "--bench", ok, "-o", "x.json", "--fit", "comm_overlap"],
                       "`comm_overlap` cannot be fitted"),
                      (["calibrate", AGG, "--bench", ok, "-o", "x.json", "--fit", "mfu_decode,mfu_decode"],
                       "names `mfu_decode` twice")):
        rc, so, se = rp(*args)
        check(rc == 2 and msg in se, f"usage: {msg}", se)
    # The help and the man page name every constant --fit accepts (the
    # refusal above lists them).
    rc, _, se = rp("calibrate", AGG, "--bench", ok, "-o", "x.json", "--fit", "comm_overlap")
    names = re.findall(r"[a-z_]+_(?:s|efficiency|prefill|decode)\b", se.split("cannot be fitted", 1)[-1])
    man = (pathlib.Path(SRC) / "man" / "rankplan.1").read_text()
    helptext = rp("calibrate", "--help")[1]
    check(len(names) == 10 and all(n in helptext and n in man for n in names),
          "help and man page list every constant --fit accepts", se)
    keep = pathlib.Path(tmp) / "keep.json"
    keep.write_text("old\n")
    rc, so, se = rp("calibrate", AGG, "--bench", FIX / "nope.json", "-o", keep)
    check(rc == 2 and keep.read_text() == "old\n", "a failed run leaves the old file as it was", se)
    rc, so, se = rp("calibrate", AGG, "--bench", ok, "-o", keep, "--fit", "scale_out_efficiency,mfu_prefill")
    check(rc == 0 and "warning[W0561]" in se and "`scale_out_efficiency`" in se,
          "a constant no run depends on is W0561", se)


with tempfile.TemporaryDirectory() as t:
    r = recovery(t)
    if r:
        used_by_search_and_compile(t, *r)
    fixtures(t)
    bad_inputs(t)
    usage(t)
sys.exit(searchlib.rptest.finish())
