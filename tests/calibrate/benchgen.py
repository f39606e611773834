#!/usr/bin/env python3
"""Benchmark result files written from rankplan's own predictions.

For each load point (input and output tokens, request rate or concurrency)
the spec is compiled with `rankplan compile --calibration CONSTANTS`; the
plan's estimates (mean TTFT, TPOT, output tokens/s) become a result file in
the layout each tool's writer produces (fixtures/README.md cites the
writers). Nothing here is a measurement: the figures are the cost model's.
"""
import json
import pathlib
import re
import subprocess

COMPLETED = 64  # requests per generated run: what the means are over


def spec_at(spec_text, tin, tout, rate=None, conc=None):
    """The spec with its workload replaced by one load point (a closed loop
    of COMPLETED requests: calibrate reads the run's length from its file)."""
    load = f"  rate: {rate} req/s\n" if rate else f"  concurrency: {conc}\n  requests: {COMPLETED}\n"
    block = f"workload:\n  input_tokens: {tin}\n  output_tokens: {tout}\n{load}"
    text, n = re.subn(r"^workload:\n(?:  .*\n)+", block, spec_text, flags=re.M)
    assert n == 1, "the spec has one workload block"
    return text


def predict(rp, spec_text, calib, tmp, tin, tout, rate=None, conc=None):
    """(ttft_s, tpot_s, output tok/s) of the spec at one load point."""
    tmp = pathlib.Path(tmp)
    spec = tmp / "point.yaml"
    spec.write_text(spec_at(spec_text, tin, tout, rate, conc))
    plan = tmp / "point.plan.json"
    args = [rp, "compile", str(spec), "-o", str(plan)]
    if calib:
        args += ["--calibration", str(calib)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    est = json.loads(plan.read_text())["estimates"]
    return est["ttft_ms"] / 1e3, est["tpot_ms"] / 1e3, est["throughput_tok_s"]


def _times(pt, ttft, tpot, tok_s):
    """Duration and end-to-end latency of a run of COMPLETED requests."""
    duration = COMPLETED * pt["tout"] / tok_s
    e2e = ttft + (pt["tout"] - 1) * tpot
    return duration, e2e


def vllm_result(pt, model, ttft, tpot, tok_s):
    """vllm/benchmarks/serve.py: result_json as --save-result writes it."""
    duration, e2e = _times(pt, ttft, tpot, tok_s)
    ms = {"ttft": ttft * 1e3, "tpot": tpot * 1e3, "itl": tpot * 1e3}
    r = {"date": "20250101-000000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
         "model_id": model, "tokenizer_id": model, "num_prompts": COMPLETED,
         "request_rate": float(pt["rate"]) if pt.get("rate") else "inf", "burstiness": 1.0,
         "max_concurrency": pt.get("conc"),
         "duration": duration, "completed": COMPLETED, "failed": 0,
         "total_input_tokens": COMPLETED * pt["tin"], "total_output_tokens": COMPLETED * pt["tout"],
         "request_throughput": COMPLETED / duration, "request_goodput": None,
         "output_throughput": tok_s,
         "total_token_throughput": COMPLETED * (pt["tin"] + pt["tout"]) / duration,
         "latencies": [e2e] * COMPLETED, "queue_times": [0.0] * COMPLETED,
         "max_output_tokens_per_s": tok_s, "max_concurrent_requests": pt.get("conc") or COMPLETED,
         "rtfx": 0.0}
    # the default --percentile-metrics ttft,tpot,itl and --metric-percentiles 99
    for k in ("ttft", "tpot", "itl"):
        r[f"mean_{k}_ms"] = ms[k]
        r[f"median_{k}_ms"] = ms[k]
        r[f"std_{k}_ms"] = 0.0
        r[f"p99_{k}_ms"] = ms[k]
    return r


def sglang_result(pt, ttft, tpot, tok_s):
    """python/sglang/bench_serving.py: the record appended to --output-file."""
    duration, e2e = _times(pt, ttft, tpot, tok_s)
    r = {"backend": "sglang", "dataset_name": "random", "request_rate": float(pt.get("rate") or "inf"),
         "max_concurrency": pt.get("conc"), "sharegpt_output_len": None,
         "random_input_len": pt["tin"], "random_output_len": pt["tout"], "random_range_ratio": 1.0,
         "duration": duration, "completed": COMPLETED,
         "total_input_tokens": COMPLETED * pt["tin"], "total_output_tokens": COMPLETED * pt["tout"],
         "total_output_tokens_retokenized": COMPLETED * pt["tout"],
         "request_throughput": COMPLETED / duration, "input_throughput": COMPLETED * pt["tin"] / duration,
         "output_throughput": tok_s,
         "mean_e2e_latency_ms": e2e * 1e3, "median_e2e_latency_ms": e2e * 1e3,
         "std_e2e_latency_ms": 0.0, "p99_e2e_latency_ms": e2e * 1e3,
         "mean_ttft_ms": ttft * 1e3, "median_ttft_ms": ttft * 1e3, "std_ttft_ms": 0.0,
         "p99_ttft_ms": ttft * 1e3,
         "mean_tpot_ms": tpot * 1e3, "median_tpot_ms": tpot * 1e3, "std_tpot_ms": 0.0,
         "p99_tpot_ms": tpot * 1e3,
         "mean_itl_ms": tpot * 1e3, "median_itl_ms": tpot * 1e3, "std_itl_ms": 0.0,
         "p95_itl_ms": tpot * 1e3, "p99_itl_ms": tpot * 1e3,
         "concurrency": tok_s / pt["tout"] * e2e, "accept_length": None}
    return r


def _metric(unit, v):
    return {"unit": unit, "avg": v, "p50": v, "p99": v, "min": v, "max": v, "std": 0.0}


def aiperf_result(pt, model, ttft, tpot, tok_s):
    """aiperf/exporters/json_exporter.py: profile_export_aiperf.json."""
    duration, e2e = _times(pt, ttft, tpot, tok_s)
    loadgen = {"request_rate": pt["rate"]} if pt.get("rate") else {"concurrency": pt["conc"]}
    return {
        "request_throughput": {"unit": "requests/sec", "avg": COMPLETED / duration},
        "request_latency": _metric("ms", e2e * 1e3),
        "request_count": {"unit": "requests", "avg": COMPLETED},
        "time_to_first_token": _metric("ms", ttft * 1e3),
        "inter_token_latency": _metric("ms", tpot * 1e3),
        "output_token_throughput": {"unit": "tokens/sec", "avg": tok_s},
        "output_sequence_length": _metric("tokens", pt["tout"]),
        "input_sequence_length": _metric("tokens", pt["tin"]),
        "benchmark_duration": {"unit": "sec", "avg": duration},
        "input_config": {"endpoint": {"model_names": [model], "type": "chat", "streaming": True},
                         "loadgen": loadgen},
        "was_cancelled": False,
        "error_summary": [],
    }


def write_runs(points, preds, model, out_dir):
    """One vLLM file per point, one SGLang JSON Lines file and one AIPerf
    file per point, in turn by point; returns the paths."""
    out = pathlib.Path(out_dir)
    files, sgl = [], []
    for i, (pt, (ttft, tpot, tok_s)) in enumerate(zip(points, preds)):
        kind = i % 3
        if kind == 0:
            f = out / f"vllm-{i}.json"
            f.write_text(json.dumps(vllm_result(pt, model, ttft, tpot, tok_s)))
            files.append(str(f))
        elif kind == 1:
            sgl.append(json.dumps(sglang_result(pt, ttft, tpot, tok_s)))
        else:
            f = out / f"aiperf-{i}" / "profile_export_aiperf.json"
            f.parent.mkdir()
            f.write_text(json.dumps(aiperf_result(pt, model, ttft, tpot, tok_s), indent=2))
            files.append(str(f))
    if sgl:
        f = out / "sglang.jsonl"
        f.write_text("".join(line + "\n" for line in sgl))
        files.append(str(f))
    return files


# The fixtures (fixtures/README.md): one run per tool, and a second SGLang
# line at an infinite rate with a concurrency (written as Infinity).
FIXTURE_SPEC = "plans/examples/llama-3.1-8b-agg.yaml"
FIXTURE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FIXTURE_POINTS = {
    "vllm-serve.json": dict(tin=2000, tout=300, conc=8),
    "sglang-bench-serving.jsonl": [dict(tin=2000, tout=300, rate=10), dict(tin=1000, tout=500, conc=16)],
    "profile_export_aiperf.json": dict(tin=4000, tout=200, conc=4),
}


def write_fixtures(rp, src, calib, out_dir, tmp):
    """Writes the fixtures of FIXTURE_POINTS into out_dir."""
    spec = (pathlib.Path(src) / FIXTURE_SPEC).read_text()
    out = pathlib.Path(out_dir)

    def pred(pt):
        return predict(rp, spec, calib, tmp, pt["tin"], pt["tout"], pt.get("rate"), pt.get("conc"))
    pt = FIXTURE_POINTS["vllm-serve.json"]
    (out / "vllm-serve.json").write_text(json.dumps(vllm_result(pt, FIXTURE_MODEL, *pred(pt))))
    lines = [json.dumps(sglang_result(pt, *pred(pt))) for pt in FIXTURE_POINTS["sglang-bench-serving.jsonl"]]
    (out / "sglang-bench-serving.jsonl").write_text("".join(line + "\n" for line in lines))
    pt = FIXTURE_POINTS["profile_export_aiperf.json"]
    (out / "profile_export_aiperf.json").write_text(
        json.dumps(aiperf_result(pt, FIXTURE_MODEL, *pred(pt)), indent=2))


if __name__ == "__main__":
    import sys
    import tempfile
    if len(sys.argv) != 4:
        sys.exit("usage: benchgen.py RANKPLAN CONSTANTS.json OUTDIR (writes the fixtures)")
    with tempfile.TemporaryDirectory() as t:
        write_fixtures(sys.argv[1], pathlib.Path(__file__).resolve().parents[2], sys.argv[2], sys.argv[3], t)
